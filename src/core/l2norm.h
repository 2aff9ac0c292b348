// q/k row normalisation of SPEC 1 (use_qk_l2norm), shared by prefill and decode.
#pragma once

#include <cmath>
#include <cstdint>

namespace cgdr {

// Divides row[0, n) by sqrt(sum x^2 + eps) (Options::qk_l2norm_eps). The sum is taken in FP64: in
// FP32 it overflows for row norms above ~1.8e19 and a finite row would
// silently become zero.
// The sum runs as kL2Lanes partial sums (element i into sum i % kL2Lanes),
// added pairwise at the end: one serial chain of FP64 adds took ~4 cycles
// per element (Dk = 128: 190 ns a row, 17% of a KDA call's profile with
// use_qk_l2norm on AMD EPYC Zen 3), the partial sums vectorise (63 ns). Each square
// of a float is exact in FP64, so a fused multiply-add gives the same bits
// as a multiply and an add: the result is the same on every target and
// whatever the compiler contracts.
constexpr int64_t kL2Lanes = 8;
static_assert(kL2Lanes == 8, "L2NormalizeRow's pairwise sum adds exactly 8 partial sums");

inline void L2NormalizeRow(float* row, int64_t n, double eps) {
  double part[kL2Lanes] = {};
  int64_t i = 0;
  for (; i + kL2Lanes <= n; i += kL2Lanes) {
    for (int64_t j = 0; j < kL2Lanes; ++j) part[j] += static_cast<double>(row[i + j]) * row[i + j];
  }
  for (int64_t j = 0; j < kL2Lanes && i + j < n; ++j) part[j] += static_cast<double>(row[i + j]) * row[i + j];
  const double ss = ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
  const double inv = 1.0 / std::sqrt(ss + eps);
  for (int64_t e = 0; e < n; ++e) row[e] = static_cast<float>(row[e] * inv);
}

}  // namespace cgdr
