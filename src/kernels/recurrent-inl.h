// The token-by-token formulation (C = 1, SPEC 1) over an L1-resident column
// panel of the state tile: two passes per token instead of four.
//   pass 1: x = S^T k                       (decay folded in: (aS)^T k = a x)
//   pass 2: S = a S + k (beta (v - a x))^T  and  o = scale S^T q, fused
#if defined(CGDR_KERNELS_RECURRENT_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef CGDR_KERNELS_RECURRENT_INL_H_
#undef CGDR_KERNELS_RECURRENT_INL_H_
#else
#define CGDR_KERNELS_RECURRENT_INL_H_
#endif

#include <cstdint>

#include "hwy/highway.h"
#include "kernels/gemm-inl.h"
#include "kernels/load-inl.h"

HWY_BEFORE_NAMESPACE();
namespace cgdr {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

constexpr int kTokenBlockVecs = 4;  // column vectors held in registers per sweep over k

// v and o: the token's rows in dtype kT, the caller's tensors themselves or
// f32 scratch (load-inl.h converts in registers; o rounded to nearest even).
// Per channel (KDA, docs/SPEC.md 10; `decay` non-null): row r of S decays
// by decay[r], and pass 1 reads ka = k * decay: (diag(a) S)^T k = S^T (a k).
template <int NV, DType kT>
HWY_INLINE void TokenColumns(float* HWY_RESTRICT S, int64_t dk, int64_t ld, int64_t c0, const float* HWY_RESTRICT q,
                             const float* HWY_RESTRICT k, const void* HWY_RESTRICT v, float beta, float a, float scale,
                             void* HWY_RESTRICT o, const float* HWY_RESTRICT decay = nullptr,
                             const float* HWY_RESTRICT ka = nullptr) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  hn::Vec<decltype(d)> x[NV], u[NV], acc[NV];
  for (int j = 0; j < NV; ++j) x[j] = hn::Zero(d);
  const float* k1 = decay ? ka : k;
  for (int64_t r = 0; r < dk; ++r) {
    const auto kr = hn::Set(d, k1[r]);
    for (int j = 0; j < NV; ++j) x[j] = hn::MulAdd(hn::Load(d, S + r * ld + c0 + j * N), kr, x[j]);
  }
  const auto va = hn::Set(d, decay ? 1.0f : a), vb = hn::Set(d, beta);
  for (int j = 0; j < NV; ++j) {
    u[j] = hn::Mul(vb, hn::NegMulAdd(va, x[j], LoadVectorAs<kT>(d, v, c0 + static_cast<int64_t>(j * N))));
    acc[j] = hn::Zero(d);
  }
  for (int64_t r = 0; r < dk; ++r) {
    const auto kr = hn::Set(d, k[r]), qr = hn::Set(d, q[r]);
    const auto ar = decay ? hn::Set(d, decay[r]) : va;
    for (int j = 0; j < NV; ++j) {
      float* s = S + r * ld + c0 + j * N;
      const auto updated = hn::MulAdd(kr, u[j], hn::Mul(ar, hn::Load(d, s)));
      hn::Store(updated, d, s);
      acc[j] = hn::MulAdd(updated, qr, acc[j]);
    }
  }
  const auto vs = hn::Set(d, scale);
  for (int j = 0; j < NV; ++j) StoreVectorAs<kT>(d, hn::Mul(vs, acc[j]), o, c0 + static_cast<int64_t>(j * N));
}

// One token on one column panel of the tile (ld = panel width); v and o are
// the panel's parts of the token's rows in dtype kT (f32 scratch: padding
// zero in v; the caller's tensors: every column inside the row).
// decay, ka: the per-channel gate's (TokenColumns), or null.
template <DType kT>
HWY_INLINE void RecurrentTokenPanel(float* HWY_RESTRICT S, int64_t dk, int64_t width, const float* HWY_RESTRICT q,
                                    const float* HWY_RESTRICT k, const void* HWY_RESTRICT v, float beta, float a,
                                    float scale, void* HWY_RESTRICT o, const float* HWY_RESTRICT decay = nullptr,
                                    const float* HWY_RESTRICT ka = nullptr) {
  const hn::ScalableTag<float> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const int64_t vecs = width / N;
  int64_t j = 0;
  for (; j + kTokenBlockVecs <= vecs; j += kTokenBlockVecs) {
    TokenColumns<kTokenBlockVecs, kT>(S, dk, width, j * N, q, k, v, beta, a, scale, o, decay, ka);
  }
  // Every chain is a whole column's, so the blocking leaves the bits; but a
  // block of one vector has one chain per pass, FMA latency-bound (AVX2's
  // 16-column panels ran as two such blocks, 4.5x slower than AVX3 per token).
  if (j + 2 <= vecs) {
    TokenColumns<2, kT>(S, dk, width, j * N, q, k, v, beta, a, scale, o, decay, ka);
    j += 2;
  }
  for (; j < vecs; ++j) TokenColumns<1, kT>(S, dk, width, j * N, q, k, v, beta, a, scale, o, decay, ka);
}

}  // namespace HWY_NAMESPACE
}  // namespace cgdr
HWY_AFTER_NAMESPACE();

#endif  // include guard
