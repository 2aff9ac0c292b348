// GemmRounded (emulate_gemm.h), compiled per Highway target and dispatched at
// run time: register blocks of 4 rows x 2 vectors of C, one broadcast of A and
// two loads of B per 8 multiply-adds; the last columns (n not a multiple of a
// vector) and rows in scalar code with the same order of additions.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "golden/emulate_gemm.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include <cstdint>

#include "golden/emulate_gemm.h"

HWY_BEFORE_NAMESPACE();
namespace cgdr::golden {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

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

void GemmRounded(const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc, int64_t m,
                 int64_t n, int64_t k, bool accumulate) {
  HWY_DYNAMIC_DISPATCH(GemmRoundedImpl)(a, lda, b, ldb, c, ldc, m, n, k, accumulate);
}

}  // namespace cgdr::golden
#endif  // HWY_ONCE
