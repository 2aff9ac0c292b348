// Helpers shared by the fuzz targets (fuzz/*_target.cc): a reader that turns
// the fuzzer's bytes into choices, a check that aborts with a message (the
// fuzzer reports the abort as a crash and saves the input), and guarded
// output buffers.
#pragma once

#include <sys/mman.h>
#include <sys/types.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

namespace cgdr::fuzz {

// A failed invariant: print it and abort, so libFuzzer (or the gtest replay)
// records the input.
[[noreturn]] inline void Fail(const char* file, int line, const char* cond, const std::string& msg) {
  std::fprintf(stderr, "%s:%d: fuzz invariant failed: %s\n  %s\n", file, line, cond, msg.c_str());
  std::fflush(stderr);
  std::abort();
}
#define FUZZ_CHECK(cond, msg)                                        \
  do {                                                               \
    if (!(cond)) ::cgdr::fuzz::Fail(__FILE__, __LINE__, #cond, msg); \
  } while (0)

// Reads the input front to back; past the end every read yields 0, so any
// prefix is a valid input and the fuzzer can grow inputs freely.
class ByteReader {
 public:
  ByteReader(const uint8_t* data, size_t size) : p_(data), n_(size) {}
  uint8_t U8() { return n_ ? (--n_, *p_++) : 0; }
  uint16_t U16() { return static_cast<uint16_t>(U8() | (U8() << 8)); }
  uint32_t U32() { return static_cast<uint32_t>(U16()) | (static_cast<uint32_t>(U16()) << 16); }
  uint64_t U64() { return static_cast<uint64_t>(U32()) | (static_cast<uint64_t>(U32()) << 32); }
  bool Bool() { return U8() & 1; }
  // An integer in [lo, hi].
  int64_t Range(int64_t lo, int64_t hi) { return lo + static_cast<int64_t>(U16() % static_cast<uint64_t>(hi - lo + 1)); }
  template <typename T>
  T Pick(std::initializer_list<T> options) {
    return options.begin()[U8() % options.size()];
  }
  size_t remaining() const { return n_; }
  // The next byte of the input cycled (for filling tensors), without consuming.
  uint8_t Peek(size_t i) const { return n_ ? p_[i % n_] : static_cast<uint8_t>(i * 151u); }

 private:
  const uint8_t* p_;
  size_t n_;
};

// `bytes` of payload between two guard bands, each byte of which must survive
// any call; the payload starts a few bytes past a 64-byte boundary.
class Guarded {
 public:
  static constexpr uint8_t kSentinel = 0xE7;
  static constexpr size_t kBand = 256;
  Guarded(size_t bytes, size_t offset) : pre_(kBand + offset), bytes_(bytes), mem_(pre_ + bytes + kBand, kSentinel) {}
  void* data() { return mem_.data() + pre_; }
  size_t size() const { return bytes_; }
  bool GuardsIntact() const {
    for (size_t i = 0; i < pre_; ++i) if (mem_[i] != kSentinel) return false;
    for (size_t i = pre_ + bytes_; i < mem_.size(); ++i) if (mem_[i] != kSentinel) return false;
    return true;
  }
  bool PayloadUntouched() const {
    for (size_t i = pre_; i < pre_ + bytes_; ++i) if (mem_[i] != kSentinel) return false;
    return true;
  }

 private:
  size_t pre_, bytes_;
  std::vector<uint8_t> mem_;
};

// The input as a file in memory, for readers that take a path: one memfd per
// process, rewritten for each input; the path is /proc/self/fd/N.
inline std::string WriteToMemFile(const uint8_t* data, size_t size) {
  static const int fd = memfd_create("cgdr_fuzz_input", 0);
  FUZZ_CHECK(fd >= 0, "memfd_create failed");
  FUZZ_CHECK(ftruncate(fd, 0) == 0, "ftruncate");
  size_t done = 0;
  while (done < size) {
    const ssize_t w = pwrite(fd, data + done, size - done, static_cast<off_t>(done));
    FUZZ_CHECK(w > 0, "pwrite");
    done += static_cast<size_t>(w);
  }
  return "/proc/self/fd/" + std::to_string(fd);
}

}  // namespace cgdr::fuzz
