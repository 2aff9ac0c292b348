// An N x N tile of floats transposed in registers, N the lanes of the
// target's vector: dst[c][r] = src[r][c]. The vk state layout ([Dv][Dk])
// moves between the pool and the kernels' [Dk][V] panels through it: a
// gather or scatter per row cost 1.5k TSC cycles per 16 x 128 block on this
// CPU (as much as scalar copies), a third of a 1-token call.
//
// Per-target code: included once per Highway target.
#if defined(CGDR_KERNELS_TRANSPOSE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef CGDR_KERNELS_TRANSPOSE_INL_H_
#undef CGDR_KERNELS_TRANSPOSE_INL_H_
#else
#define CGDR_KERNELS_TRANSPOSE_INL_H_
#endif

#include <cstddef>
#include <cstdint>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace cgdr {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Rows src + r * src_stride and dst + c * dst_stride (floats) of whole
// vectors; unaligned allowed.
#if HWY_TARGET == HWY_SCALAR
HWY_INLINE void TransposeTile(const float* HWY_RESTRICT src, int64_t /*src_stride*/, float* HWY_RESTRICT dst,
                              int64_t /*dst_stride*/) {
  dst[0] = src[0];  // 1 x 1
}
#else
// D: the full float vector (a template parameter so that only the branch of
// the target's lane count is instantiated).
template <class D = hn::ScalableTag<float>>
HWY_INLINE void TransposeTile(const float* HWY_RESTRICT src, int64_t src_stride, float* HWY_RESTRICT dst,
                              int64_t dst_stride) {
  const D d;
  constexpr size_t N = hn::MaxLanes(D());
  using V = hn::Vec<D>;
  static_assert(N % 4 == 0, "vectors of whole 128-bit blocks");
  const hn::Repartition<double, D> d64;
  V out[N];
  // Stage 1: the 4 x 4 tile inside each 128-bit block, for each group of
  // 4 rows: v[g][k] block b then holds column 4b + k of rows 4g .. 4g + 3.
  V v[N / 4][4];
  for (size_t g = 0; g < N / 4; ++g) {
    const V r0 = hn::LoadU(d, src + (4 * g + 0) * src_stride), r1 = hn::LoadU(d, src + (4 * g + 1) * src_stride);
    const V r2 = hn::LoadU(d, src + (4 * g + 2) * src_stride), r3 = hn::LoadU(d, src + (4 * g + 3) * src_stride);
    const auto t0 = hn::BitCast(d64, hn::InterleaveLower(d, r0, r1)), t1 = hn::BitCast(d64, hn::InterleaveUpper(d, r0, r1));
    const auto t2 = hn::BitCast(d64, hn::InterleaveLower(d, r2, r3)), t3 = hn::BitCast(d64, hn::InterleaveUpper(d, r2, r3));
    v[g][0] = hn::BitCast(d, hn::InterleaveLower(d64, t0, t2));
    v[g][1] = hn::BitCast(d, hn::InterleaveUpper(d64, t0, t2));
    v[g][2] = hn::BitCast(d, hn::InterleaveLower(d64, t1, t3));
    v[g][3] = hn::BitCast(d, hn::InterleaveUpper(d64, t1, t3));
  }
  // Stage 2: the blocks. Column 4b + k is block b of v[0][k], v[1][k], ...
  for (size_t k = 0; k < 4; ++k) {
    if constexpr (N == 4) {
      out[k] = v[0][k];
    } else if constexpr (N == 8) {  // 2 x 2 blocks: the 128-bit halves
      out[k] = hn::ConcatLowerLower(d, v[1][k], v[0][k]);
      out[4 + k] = hn::ConcatUpperUpper(d, v[1][k], v[0][k]);
    } else {  // N == 16: 4 x 4 blocks, as 2 x 2 of blocks inside 2 x 2 of halves
      static_assert(N == 16, "targets of 4, 8 or 16 float lanes");
      const V w0 = hn::OddEvenBlocks(hn::SwapAdjacentBlocks(v[1][k]), v[0][k]);  // v0.b0 v1.b0 v0.b2 v1.b2
      const V w1 = hn::OddEvenBlocks(v[1][k], hn::SwapAdjacentBlocks(v[0][k]));  // v0.b1 v1.b1 v0.b3 v1.b3
      const V w2 = hn::OddEvenBlocks(hn::SwapAdjacentBlocks(v[3][k]), v[2][k]);
      const V w3 = hn::OddEvenBlocks(v[3][k], hn::SwapAdjacentBlocks(v[2][k]));
      out[k] = hn::ConcatLowerLower(d, w2, w0);
      out[4 + k] = hn::ConcatLowerLower(d, w3, w1);
      out[8 + k] = hn::ConcatUpperUpper(d, w2, w0);
      out[12 + k] = hn::ConcatUpperUpper(d, w3, w1);
    }
  }
  for (size_t c = 0; c < N; ++c) hn::StoreU(out[c], d, dst + c * dst_stride);
}
#endif  // HWY_TARGET == HWY_SCALAR

}  // namespace HWY_NAMESPACE
}  // namespace cgdr
HWY_AFTER_NAMESPACE();

#endif  // include guard
