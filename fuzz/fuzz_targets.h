// The fuzz targets' entry points. Each libFuzzer binary wraps one of them
// (libfuzzer_main.cc); the gcc build replays the seed corpora through the
// same functions (tests/fuzz_replay_test.cc). Each returns 0 and aborts on a
// broken invariant.
#pragma once

#include <cstddef>
#include <cstdint>

namespace cgdr::fuzz {

// (a) Safetensors parsing, case loading, output preparation, write round trip.
int FuzzSafetensors(const uint8_t* data, size_t size);
// (b) Validate / MakePlan / Run / DecodeStep with arbitrary shapes, dtypes,
// layouts, lengths, options and aliasing, backed by tiny tensors.
int FuzzApi(const uint8_t* data, size_t size);
// (c) Small valid problems: cgdr::Run (any algo) against the FP64 reference.
int FuzzDifferential(const uint8_t* data, size_t size);
// (d) The .npy reader (in memory and from a file, which must agree) and the
// .bin manifest reader: issue 19's rules for the other case kinds.
int FuzzTensorFiles(const uint8_t* data, size_t size);
// (e) Small valid decode calls (DecodeStep, token axis, pools): against the
// FP64 reference of the same tokens as a prefill.
int FuzzDecodeDifferential(const uint8_t* data, size_t size);

}  // namespace cgdr::fuzz
