// q/k row normalisation of SPEC 1 (use_qk_l2norm), shared by prefill and decode.
#pragma once

#include <cmath>
#include <cstdint>

namespace cgdr {

// Divides row[0, n) by sqrt(sum x^2 + eps) (Options::qk_l2norm_eps). The sum is taken in FP64: in
// FP32 it overflows for row norms above ~1.8e19 and a finite row would
// silently become zero.
inline void L2NormalizeRow(float* row, int64_t n, double eps) {
  double ss = 0.0;
  for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(row[i]) * row[i];
  const double inv = 1.0 / std::sqrt(ss + eps);
  for (int64_t i = 0; i < n; ++i) row[i] = static_cast<float>(row[i] * inv);
}

}  // namespace cgdr
