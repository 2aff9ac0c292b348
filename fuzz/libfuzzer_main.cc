// The libFuzzer entry, compiled once per target with CGDR_FUZZ_ENTRY naming
// the function of fuzz_targets.h to call (fuzz/CMakeLists.txt).
#include "fuzz_targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return cgdr::fuzz::CGDR_FUZZ_ENTRY(data, size);
}
