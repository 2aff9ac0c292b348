// L2NormalizeRow (core/l2norm.h, SPEC 1's use_qk_l2norm): its partial sums
// against a long-double reference on lengths that leave every tail of the
// kL2Lanes partial sums, and the rows FP32 sums would lose.
#include "core/l2norm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace cgdr {
namespace {

// row / sqrt(sum row^2 + eps), each element within one ulp of the long-double answer.
void ExpectNormalised(const std::vector<float>& row, double eps, const char* what) {
  long double ss = 0.0L;
  for (float x : row) ss += static_cast<long double>(x) * x;
  const long double inv = 1.0L / std::sqrt(ss + eps);
  std::vector<float> got = row;
  L2NormalizeRow(got.data(), static_cast<int64_t>(got.size()), eps);
  for (size_t i = 0; i < row.size(); ++i) {
    const float want = static_cast<float>(row[i] * inv);
    const float ulp = std::nextafter(std::fabs(want), INFINITY) - std::fabs(want);
    ASSERT_LE(std::fabs(got[i] - want), ulp) << what << ": n=" << row.size() << " i=" << i << " got " << got[i]
                                            << " want " << want;
  }
}

TEST(L2NormalizeRow, WithinOneUlpOnEveryTail) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  for (int64_t n : {1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 100, 128, 129, 200, 256}) {
    std::vector<float> row(static_cast<size_t>(n));
    for (float& x : row) x = u(rng);
    ExpectNormalised(row, 1e-6, "uniform");
  }
}

TEST(L2NormalizeRow, HugeTinyAndZeroRows) {
  ExpectNormalised(std::vector<float>(129, 1e20f), 1e-6, "norm above FP32's range when squared");
  ExpectNormalised(std::vector<float>(33, 1e-30f), 0.0, "squares below FP32's range");
  std::vector<float> zero(17, 0.0f);
  L2NormalizeRow(zero.data(), 17, 1e-6);
  for (float x : zero) EXPECT_EQ(x, 0.0f);
}

}  // namespace
}  // namespace cgdr
