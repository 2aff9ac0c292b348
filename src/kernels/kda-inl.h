// KDA's per-channel helpers the item driver inlines (C = 1 takes e^g and
// k e^g per token), and the declaration of the chunked K side with the
// per-channel gate, KdaPrepareValueHead, defined once per target in kda.cc
// (its own translation unit: it does not depend on the Dk bucket, and
// instantiating it in every bucket doubled their compile time).
//
// Per-target code: included once per Highway target.
#if defined(CGDR_KERNELS_KDA_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef CGDR_KERNELS_KDA_INL_H_
#undef CGDR_KERNELS_KDA_INL_H_
#else
#define CGDR_KERNELS_KDA_INL_H_
#endif

#include <cstdint>

#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"
#include "plan/scratch_layout.h"

HWY_BEFORE_NAMESPACE();
namespace cgdr {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// dst[i] = a[i] * b[i] for i < dk (a multiple of the lanes); dst may be a or b.
HWY_INLINE void MulRow(const float* a, const float* b, int64_t dk, float* dst) {
  const hn::ScalableTag<float> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  for (int64_t c = 0; c < dk; c += N) hn::Store(hn::Mul(hn::Load(d, a + c), hn::Load(d, b + c)), d, dst + c);
}

// e^x over rows [0, n) of width dk, in place.
HWY_INLINE void ExpRows(float* HWY_RESTRICT x, int64_t dk, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  for (int64_t i = 0; i < n * dk; i += N) hn::Store(hn::Exp(d, hn::Load(d, x + i)), d, x + i);
}

// The K side of a chunk of n rows for one value head, per channel (kda.cc):
// expects q, k (normalised, zero-padded to dk_pad) in L.q, L.k, the
// log-decays in L.kda_g ([n][dk_pad], padding 0) and beta in the
// ChunkVectors. Leaves
//   attn = A = (I + L)^-1, qk = P (lower, incl. the diagonal, scaled),
//   kda_q = Q e^G, kda_k = K e^G, kda_kf = K e^(G_last - G), kda_decay = e^G_last,
// and the row factors beta (X) and scale (O) where ChunkVSide reads them.
void KdaPrepareValueHead(const ScratchLayout& L, float* HWY_RESTRICT base, int64_t n, float scale);

}  // namespace HWY_NAMESPACE
}  // namespace cgdr
HWY_AFTER_NAMESPACE();

#endif  // include guard
