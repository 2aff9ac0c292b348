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

// e^x for the log-decays of the per-channel gate (docs/SPEC.md 10.4), in
// half the time of Highway's Exp (AMD EPYC Zen 3, AVX2: 0.80 against 1.41 us
// per 2048), which was 30% of the chunked K side: x = n ln2 + r with n the
// nearest integer (added to 1.5 * 2^23, which rounds it into the low
// mantissa bits) and ln2 in two parts (Cody-Waite), e^r by the degree-5
// minimax polynomial of Cephes' expf in Estrin's scheme (three independent
// pairs, not one chain of six FMAs), 2^n added to the exponent field.
// Within 1.1 ulp of e^x for x in [-87.3, 0] (1.02 measured, as Highway's
// Exp; tests/kda_exp_test.cc). Below -87.34 (e^x under FP32's normal range) it
// returns 0, which the flushed mode (core/fpenv.h) makes of e^x anyway; x is
// capped at 88 (e^88 < FLT_MAX): log-decays above 0 are outside the contract.
template <class D, class V = hn::Vec<D>>
HWY_INLINE V ExpOfLogDecay(D d, V x) {
  const hn::RebindToSigned<D> di;
  const V round_magic = hn::Set(d, 12582912.0f);  // 1.5 * 2^23
  x = hn::Min(x, hn::Set(d, 88.0f));
  const V shifted = hn::MulAdd(x, hn::Set(d, 1.44269504088896341f), round_magic);
  const V n = hn::Sub(shifted, round_magic);
  V r = hn::NegMulAdd(n, hn::Set(d, 0.693359375f), x);  // ln2's high part: exact in n * it
  r = hn::NegMulAdd(n, hn::Set(d, -2.12194440e-4f), r);
  const V r2 = hn::Mul(r, r);
  const V c45 = hn::MulAdd(hn::Set(d, 1.9875691500e-4f), r, hn::Set(d, 1.3981999507e-3f));
  const V c23 = hn::MulAdd(hn::Set(d, 8.3334519073e-3f), r, hn::Set(d, 4.1665795894e-2f));
  const V c01 = hn::MulAdd(hn::Set(d, 1.6666665459e-1f), r, hn::Set(d, 5.0000001201e-1f));
  const V p = hn::MulAdd(hn::MulAdd(c45, r2, c23), r2, c01);
  // e^r = 1 + (r + r^2 p(r)): the small part first, so the one rounding
  // that counts is the last (1 + r rounded first dropped r^2/2 for weak
  // decays, a bias that grows over a sequence: tests/kda_exp_test.cc).
  const V exp_r = hn::Add(hn::MulAdd(p, r2, r), hn::Set(d, 1.0f));
  const auto exponent = hn::ShiftLeft<23>(hn::Sub(hn::BitCast(di, shifted), hn::BitCast(di, round_magic)));
  const V scaled = hn::BitCast(d, hn::Add(hn::BitCast(di, exp_r), exponent));
  return hn::IfThenZeroElse(hn::Lt(x, hn::Set(d, -87.33654f)), scaled);
}

// e^x over rows [0, n) of width dk, in place (ExpOfLogDecay).
HWY_INLINE void ExpRows(float* HWY_RESTRICT x, int64_t dk, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  for (int64_t i = 0; i < n * dk; i += N) hn::Store(ExpOfLogDecay(d, hn::Load(d, x + i)), d, x + i);
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
