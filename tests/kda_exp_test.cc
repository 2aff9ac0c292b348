// ExpOfLogDecay (kernels/kda-inl.h), the e^g of KDA's per-channel gate, on
// every SIMD target compiled in: within its stated 1.1 ulp of e^x (FP64) over
// the log-decays' range, 0 below FP32's normal range, exact at 0.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kda_exp_test.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <cstdint>
#include <vector>

#include "hwy/aligned_allocator.h"
#include "hwy/highway.h"
#include "kernels/kda-inl.h"

HWY_BEFORE_NAMESPACE();
namespace cgdr {
namespace HWY_NAMESPACE {

// e^x of x[0, n) in place (n a multiple of 16), as the chunked K side takes it.
void ExpInPlace(float* x, int64_t n) { ExpRows(x, n, 1); }

// The same one vector at a time (ExpOfLogDecay with K = 1), against which
// ExpRows' two vectors at a time must give the same bits.
void ExpOneVectorAtATime(float* x, int64_t n) {
  const int64_t N = static_cast<int64_t>(hwy::HWY_NAMESPACE::Lanes(hwy::HWY_NAMESPACE::ScalableTag<float>()));
  for (int64_t i = 0; i < n; i += N) ExpVectorsInPlace<1>(x + i);
}

}  // namespace HWY_NAMESPACE
}  // namespace cgdr
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>

#include "core/fpenv.h"
#include "test_util.h"

namespace cgdr {
HWY_EXPORT(ExpInPlace);
HWY_EXPORT(ExpOneVectorAtATime);
namespace {

uint32_t FloatBits(float v) {
  uint32_t u;
  std::memcpy(&u, &v, sizeof u);
  return u;
}

// The error of the FP32 value v against the exact e, in units of the last
// place of e rounded to FP32 (signed: v above e is positive).
double SignedUlps(float v, double e) {
  const float ef = static_cast<float>(e);
  return (static_cast<double>(v) - e) / static_cast<double>(std::nextafter(ef, INFINITY) - ef);
}

std::vector<float> ExpOnTarget(std::vector<float> x) {
  const int64_t n = static_cast<int64_t>((x.size() + 15) / 16 * 16);
  auto buf = hwy::AllocateAligned<float>(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) buf[i] = i < static_cast<int64_t>(x.size()) ? x[i] : 0.0f;
  {
    FlushDenormalsScope flush;  // the kernels' mode
    HWY_DYNAMIC_DISPATCH(ExpInPlace)(buf.get(), n);
  }
  for (size_t i = 0; i < x.size(); ++i) x[i] = buf[i];
  return x;
}

TEST(KdaExp, WithinItsUlpBoundOverTheLogDecaysOnEveryTarget) {
  std::vector<float> x;
  for (double v = -87.33; v <= 0.0; v += 3.1e-4) x.push_back(static_cast<float>(v));
  for (double v = -1e-3; v < 0.0; v += 1.7e-7) x.push_back(static_cast<float>(v));  // the weakest decays
  testing::ForEachTarget([&](const std::string& target) {
    const std::vector<float> e = ExpOnTarget(x);
    double worst = 0.0;
    float at = 0.0f;
    for (size_t i = 0; i < x.size(); ++i) {
      const double u = std::fabs(SignedUlps(e[i], std::exp(static_cast<double>(x[i]))));
      if (u > worst) { worst = u; at = x[i]; }
    }
    EXPECT_LE(worst, 1.1) << target << ": at x = " << at;
    std::printf("%s: worst %.3f ulp at x = %g\n", target.c_str(), worst, at);
  });
}

// A chunk's decays are products of up to C + C/4 + 2 of these factors, and a
// sequence's state carries them over thousands of tokens: an error that leans
// one way adds up where unbiased ones cancel. For weak decays (e^x near 1)
// rounding 1 + x before the rest dropped x^2/2 there: -0.15 ulp on average
// over these x (now 0.00), which raised the chunked error of the gate-range
// sweep at g = -1e-4 by 28% (AVX2: 7.7e-7 against Highway's Exp's 6.0e-7,
// which the unbiased form matches).
TEST(KdaExp, UnbiasedForWeakDecaysOnEveryTarget) {
  std::vector<float> x;
  for (double v = -2e-4; v < -5e-5; v += 1.3e-9) x.push_back(static_cast<float>(v));
  testing::ForEachTarget([&](const std::string& target) {
    const std::vector<float> e = ExpOnTarget(x);
    double signed_sum = 0.0;
    for (size_t i = 0; i < x.size(); ++i) signed_sum += SignedUlps(e[i], std::exp(static_cast<double>(x[i])));
    EXPECT_LE(std::fabs(signed_sum / static_cast<double>(x.size())), 0.02) << target << ": mean signed error in ulp";
  });
}

// ExpRows takes two vectors at a time, step by step, then a last single one
// when the count of vectors is odd (AVX-512: an odd number of rows, each an
// odd number of 16-lane vectors); each element must come out as
// ExpOfLogDecay of that element alone. 48 and 16 * 7 values: an odd count
// of vectors on AVX-512, an even one elsewhere (whose pairs still cover
// every position).
TEST(KdaExp, PairsGiveTheBitsOfSingleVectorsOnEveryTarget) {
  for (const int64_t n : {int64_t{48}, int64_t{112}}) {
    auto pairs = hwy::AllocateAligned<float>(static_cast<size_t>(n));
    auto singles = hwy::AllocateAligned<float>(static_cast<size_t>(n));
    testing::ForEachTarget([&](const std::string& target) {
      for (int64_t i = 0; i < n; ++i) {
        pairs[i] = singles[i] = i == 5 ? -100.0f : -0.731f * static_cast<float>(i) - 1e-4f * static_cast<float>(i % 7);
      }
      {
        FlushDenormalsScope flush;
        HWY_DYNAMIC_DISPATCH(ExpInPlace)(pairs.get(), n);
        HWY_DYNAMIC_DISPATCH(ExpOneVectorAtATime)(singles.get(), n);
      }
      for (int64_t i = 0; i < n; ++i) {
        EXPECT_EQ(FloatBits(pairs[i]), FloatBits(singles[i])) << target << ": n = " << n << ", element " << i;
      }
    });
  }
}

TEST(KdaExp, ZeroBelowTheNormalRangeAndOneAtZeroOnEveryTarget) {
  const std::vector<float> x = {-87.34f, -100.0f, -1e30f, -INFINITY, 0.0f, -0.0f, -1e-30f, -87.3f};
  testing::ForEachTarget([&](const std::string& target) {
    const std::vector<float> e = ExpOnTarget(x);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(e[i], 0.0f) << target << ": x = " << x[i];
    for (int i = 4; i < 7; ++i) EXPECT_EQ(e[i], 1.0f) << target << ": x = " << x[i];
    EXPECT_GE(e[7], 1.17549435e-38f) << target << ": e^-87.3 is a normal FP32 number";
  });
}

}  // namespace
}  // namespace cgdr
#endif  // HWY_ONCE
