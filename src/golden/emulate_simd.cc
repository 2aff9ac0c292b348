// RoundTo16 and GemmRounded (emulate_simd.h), compiled per Highway target and
// dispatched at run time. The rounding is integer arithmetic on the FP32 bits
// (and one FP32 add for f16 subnormals), the same in the vector and the scalar
// code. The product: register blocks of 4 rows x 2 vectors of C, one
// broadcast of A and two loads of B per 8 multiply-adds; the last columns (n
// not a multiple of a vector) in scalar code with the same order of additions.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "golden/emulate_simd.cc"
#include "golden/emulate_simd.h"

#include <cstdint>

#include "core/dtype.h"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace cgdr::golden {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Rounding of FP32 bits u to 16-bit formats, kept as FP32 (nearest even).
// bf16: the low 16 bits rounded away; NaN stays NaN.
// f16, |x| >= 2^-14: the low 13 bits rounded away, past 65520 infinity;
// |x| < 2^-14 (f16 subnormals, quantum 2^-24): (|x| + 0.5) - 0.5, whose
// FP32 add rounds to a multiple of 2^-24 (the ulp of 0.5), sign put back.
template <class D>
HWY_INLINE hn::Vec<D> RoundVector(D d, hn::Vec<D> x, bool f16) {
  const hn::RebindToUnsigned<D> du;
  const hn::RebindToSigned<D> di;
  const auto u = hn::BitCast(du, x);
  const auto abs = hn::And(u, hn::Set(du, 0x7FFFFFFFu));
  const auto sign = hn::Xor(u, abs);
  // |x|'s bits as signed (the sign bit is clear): comparisons every target has.
  const auto above = [&](uint32_t bits) {
    return hn::RebindMask(du, hn::Gt(hn::BitCast(di, abs), hn::Set(di, static_cast<int32_t>(bits))));
  };
  const auto not_finite = above(0x7F7FFFFFu);  // Inf and NaN stay as they are
  if (!f16) {
    const auto r = hn::And(hn::Add(u, hn::Add(hn::Set(du, 0x7FFFu), hn::And(hn::ShiftRight<16>(u), hn::Set(du, 1u)))),
                           hn::Set(du, 0xFFFF0000u));
    return hn::BitCast(d, hn::IfThenElse(not_finite, u, r));
  }
  const auto normal = hn::And(hn::Add(u, hn::Add(hn::Set(du, 0xFFFu), hn::And(hn::ShiftRight<13>(u), hn::Set(du, 1u)))),
                              hn::Set(du, 0xFFFFE000u));
  const auto half = hn::Set(d, 0.5f);
  const auto sub = hn::Or(hn::BitCast(du, hn::Sub(hn::Add(hn::BitCast(d, abs), half), half)), sign);
  auto r = hn::IfThenElse(above(0x387FFFFFu), normal, sub);                           // |x| >= 2^-14
  r = hn::IfThenElse(above(0x477FEFFFu), hn::Or(sign, hn::Set(du, 0x7F800000u)), r);  // rounds to >= 65520
  return hn::BitCast(d, hn::IfThenElse(not_finite, u, r));
}

void RoundTo16Impl(float* HWY_RESTRICT x, int64_t n, bool f16) {
  const hn::ScalableTag<float> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(RoundVector(d, hn::LoadU(d, x + i), f16), d, x + i);
  const hn::CappedTag<float, 1> d1;
  for (; i < n; ++i) hn::StoreU(RoundVector(d1, hn::LoadU(d1, x + i), f16), d1, x + i);
}

// Rows [i0, i0 + R) x columns [j0, j0 + 2 N) of C.
template <int R, class D>
HWY_INLINE void Block(D d, const float* HWY_RESTRICT a, int64_t lda, const float* HWY_RESTRICT b, int64_t ldb,
                      float* HWY_RESTRICT c, int64_t ldc, int64_t k, bool accumulate) {
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  hn::Vec<D> acc0[R], acc1[R];
  for (int r = 0; r < R; ++r) {
    acc0[r] = accumulate ? hn::LoadU(d, c + r * ldc) : hn::Zero(d);
    acc1[r] = accumulate ? hn::LoadU(d, c + r * ldc + N) : hn::Zero(d);
  }
  for (int64_t p = 0; p < k; ++p) {
    const auto b0 = hn::LoadU(d, b + p * ldb);
    const auto b1 = hn::LoadU(d, b + p * ldb + N);
    for (int r = 0; r < R; ++r) {
      const auto av = hn::Set(d, a[r * lda + p]);
      acc0[r] = hn::MulAdd(av, b0, acc0[r]);
      acc1[r] = hn::MulAdd(av, b1, acc1[r]);
    }
  }
  for (int r = 0; r < R; ++r) {
    hn::StoreU(acc0[r], d, c + r * ldc);
    hn::StoreU(acc1[r], d, c + r * ldc + N);
  }
}

// One element in scalar code: the same sum, in the same order.
HWY_INLINE float Element(const float* a, const float* b, int64_t ldb, int64_t k, float init) {
  float acc = init;
  for (int64_t p = 0; p < k; ++p) acc += a[p] * b[p * ldb];
  return acc;
}

void GemmRoundedImpl(const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc, int64_t m,
                     int64_t n, int64_t k, bool accumulate) {
  const hn::ScalableTag<float> d;
  const int64_t W = 2 * static_cast<int64_t>(hn::Lanes(d));
  const int64_t n_vec = n / W * W;
  for (int64_t j = 0; j < n_vec; j += W) {
    int64_t i = 0;
    for (; i + 4 <= m; i += 4) Block<4>(d, a + i * lda, lda, b + j, ldb, c + i * ldc + j, ldc, k, accumulate);
    for (; i < m; ++i) Block<1>(d, a + i * lda, lda, b + j, ldb, c + i * ldc + j, ldc, k, accumulate);
  }
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = n_vec; j < n; ++j) {
      float* cij = c + i * ldc + j;
      *cij = Element(a + i * lda, b + j, ldb, k, accumulate ? *cij : 0.0f);
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace cgdr::golden
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace cgdr::golden {

HWY_EXPORT(GemmRoundedImpl);
HWY_EXPORT(RoundTo16Impl);

void RoundTo16(float* x, int64_t n, bool f16) { HWY_DYNAMIC_DISPATCH(RoundTo16Impl)(x, n, f16); }

void GemmRounded(const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc, int64_t m, int64_t n,
                 int64_t k, bool accumulate) {
  HWY_DYNAMIC_DISPATCH(GemmRoundedImpl)(a, lda, b, ldb, c, ldc, m, n, k, accumulate);
}

}  // namespace cgdr::golden
#endif  // HWY_ONCE
