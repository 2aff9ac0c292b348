// The one product the NPU emulation (emulate.h) needs: C (+)= A B in FP32,
// row-major, on operands the caller has already rounded to the Cube's 16-bit
// format. Their products are exact in FP32 (at most 11 x 11 significant
// bits), so every element is the exact sum of its terms accumulated in FP32
// in k order, FMA or not: the same bits on every SIMD target.
#pragma once

#include <cstdint>

namespace cgdr::golden {

// C[m x n] = (accumulate ? C : 0) + A[m x k] B[k x n]; lda, ldb, ldc: row strides.
void GemmRounded(const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc, int64_t m,
                 int64_t n, int64_t k, bool accumulate);

}  // namespace cgdr::golden
