// GemmPrec(): the products of Gemm() (gemm-inl.h) in the plan's precision.
// FP32 runs Gemm() itself; the bf16 modes run GemmBf16(), which is declared
// here and defined once per target in gemm_bf16.cc (its own translation unit:
// the packed micro-kernel is compiled twice per target, for the emulation and
// for vdpbf16ps, and does not depend on the Dk bucket).
//
// Per-target code: included once per Highway target.
#if defined(CGDR_KERNELS_GEMM_BF16_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef CGDR_KERNELS_GEMM_BF16_INL_H_
#undef CGDR_KERNELS_GEMM_BF16_INL_H_
#else
#define CGDR_KERNELS_GEMM_BF16_INL_H_
#endif

#include <cstdint>

#include "cgdr/cgdr.hpp"
#include "hwy/highway.h"
#include "kernels/gemm-inl.h"
#include "plan/scratch_layout.h"

HWY_BEFORE_NAMESPACE();
namespace cgdr {
namespace HWY_NAMESPACE {

// job as for Gemm() in a bf16 precision mode; `pack` is ScratchLayout::pack
// (8 parts of `part` words). Defined in gemm_bf16.cc.
void GemmBf16(const GemmJob& job, Precision prec, uint32_t* HWY_RESTRICT pack, int64_t part);

// Gemm() in the plan's precision: FP32 exactly as before, else GemmBf16().
HWY_INLINE void GemmPrec(const GemmJob& job, Precision prec, const ScratchLayout& L, float* HWY_RESTRICT base) {
  if (prec == Precision::kFp32) {
    Gemm(job);
  } else {
    GemmBf16(job, prec, reinterpret_cast<uint32_t*>(base + L.pack), L.pack_part);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace cgdr
HWY_AFTER_NAMESPACE();

#endif  // include guard
