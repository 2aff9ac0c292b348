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
// K vectors at once, each step over all K before the next: one vector's
// chain of dependent operations (about 45 cycles of latency, by the
// instruction tables) left the FP units idle on AMD EPYC Zen 1, where each
// 256-bit operation is two uops (ExpRows of 2048 values: 2.8 us with K = 1,
// 2.3-2.4 us with K = 2, 3.6 us with K = 4, which spills registers). Each
// element's operations are the same whatever K, so the bits are too.
template <int K, class D, class V = hn::Vec<D>>
HWY_INLINE void ExpOfLogDecay(D d, V (&x)[K]) {
  const hn::RebindToSigned<D> di;
  const V round_magic = hn::Set(d, 12582912.0f);  // 1.5 * 2^23
  V shifted[K], r[K], r2[K], p[K];
#pragma GCC unroll 4
  for (int j = 0; j < K; ++j) {
    x[j] = hn::Min(x[j], hn::Set(d, 88.0f));
    shifted[j] = hn::MulAdd(x[j], hn::Set(d, 1.44269504088896341f), round_magic);
  }
#pragma GCC unroll 4
  for (int j = 0; j < K; ++j) {
    const V n = hn::Sub(shifted[j], round_magic);
    r[j] = hn::NegMulAdd(n, hn::Set(d, 0.693359375f), x[j]);  // ln2's high part: exact in n * it
    r[j] = hn::NegMulAdd(n, hn::Set(d, -2.12194440e-4f), r[j]);
  }
#pragma GCC unroll 4
  for (int j = 0; j < K; ++j) {
    r2[j] = hn::Mul(r[j], r[j]);
    const V c45 = hn::MulAdd(hn::Set(d, 1.9875691500e-4f), r[j], hn::Set(d, 1.3981999507e-3f));
    const V c23 = hn::MulAdd(hn::Set(d, 8.3334519073e-3f), r[j], hn::Set(d, 4.1665795894e-2f));
    const V c01 = hn::MulAdd(hn::Set(d, 1.6666665459e-1f), r[j], hn::Set(d, 5.0000001201e-1f));
    p[j] = hn::MulAdd(hn::MulAdd(c45, r2[j], c23), r2[j], c01);
  }
#pragma GCC unroll 4
  for (int j = 0; j < K; ++j) {
    // e^r = 1 + (r + r^2 p(r)): the small part first, so the one rounding
    // that counts is the last (1 + r rounded first dropped r^2/2 for weak
    // decays, a bias that grows over a sequence: tests/kda_exp_test.cc).
    const V exp_r = hn::Add(hn::MulAdd(p[j], r2[j], r[j]), hn::Set(d, 1.0f));
    // shifted's bits are round_magic's plus n, and round_magic's low 9 bits
    // are 0, so shifting them left by 23 leaves n << 23 alone.
    const auto exponent = hn::ShiftLeft<23>(hn::BitCast(di, shifted[j]));
    const V scaled = hn::BitCast(d, hn::Add(hn::BitCast(di, exp_r), exponent));
    x[j] = hn::IfThenZeroElse(hn::Lt(x[j], hn::Set(d, -87.33654f)), scaled);
  }
}

// e^x of the K vectors at x, in place (ExpOfLogDecay).
template <int K>
HWY_INLINE void ExpVectorsInPlace(float* HWY_RESTRICT x) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  hn::Vec<decltype(d)> v[K];
#pragma GCC unroll 4
  for (int j = 0; j < K; ++j) v[j] = hn::Load(d, x + j * N);
  ExpOfLogDecay(d, v);
#pragma GCC unroll 4
  for (int j = 0; j < K; ++j) hn::Store(v[j], d, x + j * N);
}

// e^x over rows [0, n) of width dk, in place: two vectors at a time, then a
// last single one.
HWY_INLINE void ExpRows(float* HWY_RESTRICT x, int64_t dk, int64_t n) {
  const int64_t N = static_cast<int64_t>(hn::Lanes(hn::ScalableTag<float>())), total = n * dk;
  int64_t i = 0;
  for (; i + 2 * N <= total; i += 2 * N) ExpVectorsInPlace<2>(x + i);
  for (; i < total; i += N) ExpVectorsInPlace<1>(x + i);
}

// The K side of a chunk of n rows for one value head, per channel (kda.cc):
// expects q, k (normalised, zero-padded to dk_pad) in L.q, L.k, the
// decay factors e^g in L.kda_g ([n][dk_pad], padding 1) and beta in the
// ChunkVectors. Leaves
//   attn = A = (I + L)^-1, qk = P (lower, incl. the diagonal, scaled),
//   kda_q = Q e^G, kda_k = K e^G, kda_kf = K e^(G_last - G), kda_decay = e^G_last,
// and the row factors beta (X) and scale (O) where ChunkVSide reads them.
void KdaPrepareValueHead(const ScratchLayout& L, float* HWY_RESTRICT base, int64_t n, float scale);

}  // namespace HWY_NAMESPACE
}  // namespace cgdr
HWY_AFTER_NAMESPACE();

#endif  // include guard
