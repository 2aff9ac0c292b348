// The vector pieces of the NPU emulation (emulate.h), compiled per Highway
// target and dispatched at run time:
// - RoundTo16: the Cube's view of an FP32 operand, each element rounded to
//   bf16 or f16 (nearest even; f16 with its subnormals and overflow to
//   infinity) and kept as FP32: bit for bit what core/dtype.h's conversions
//   there and back give (NaN stays NaN, its payload aside).
// - GemmRounded: C (+)= A B in FP32, row-major, on operands so rounded. Their
//   products are exact in FP32 (at most 11 x 11 significant bits), so every
//   element is the exact sum of its terms accumulated in FP32 in k order, FMA
//   or not: the same bits on every SIMD target.
#pragma once

#include <cstdint>

namespace cgdr::golden {

// x[0, n) rounded in place to f16 (`f16`) or bf16.
void RoundTo16(float* x, int64_t n, bool f16);

// C[m x n] = (accumulate ? C : 0) + A[m x k] B[k x n]; lda, ldb, ldc: row strides.
void GemmRounded(const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc, int64_t m, int64_t n,
                 int64_t k, bool accumulate);

}  // namespace cgdr::golden
