// The floating-point mode the kernels run in (docs/SPEC.md 6): denormals
// flushed, whatever the caller's mode, which is restored on exit.
#pragma once

#include <cstdint>

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

namespace cgdr {

// For the scope of one worker's kernel run: FP32 values below 2^-126 in
// magnitude count as zero on input (DAZ) and output (FTZ). Strong decays
// (g near -20 per token, as Qwen3-Next's gates give) put the decay factors
// and the products they scale into the denormal range, where each operation
// takes a microcode assist: a call on the flagship took 5.7x longer (2 s
// against 0.32 s). The AMX tiles flush by themselves (TDPBF16PS). Setting
// the mode here, not inheriting it, keeps results independent of the
// caller's mode (torch.set_flush_denormal, -ffast-math start-up code).
class FlushDenormalsScope {
 public:
#if defined(__x86_64__) || defined(__i386__)
  FlushDenormalsScope() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ | kFtz | kDaz); }
  ~FlushDenormalsScope() { _mm_setcsr(saved_); }

 private:
  static constexpr uint32_t kFtz = 1u << 15, kDaz = 1u << 6;
  uint32_t saved_;
#else
  FlushDenormalsScope() = default;
#endif
  FlushDenormalsScope(const FlushDenormalsScope&) = delete;
  FlushDenormalsScope& operator=(const FlushDenormalsScope&) = delete;
};

}  // namespace cgdr
