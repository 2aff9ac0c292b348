// src/bench/peak: what the machine measurements of `cgdr bench` report
// besides their timings (which no test asserts): the threads, lanes, target
// and buffer sizes they ran with.
#include "bench/peak.h"

#include <gtest/gtest.h>

#include <cctype>
#include <string>

#include "cgdr/cgdr.hpp"
#include "core/cpu_features.h"
#include "hwy/targets.h"

namespace cgdr {
namespace {

TEST(Peak, FmaPeakReportsHowItRan) {
  const FmaPeak p = MeasureFmaPeak(3, 0.005);
  EXPECT_EQ(p.threads, 3);
  EXPECT_EQ(p.target, ActiveTarget());
  EXPECT_EQ(p.lanes, p.target == "SCALAR" ? 1u : p.target == "AVX3" ? 16u : p.target == "AVX2" ? 8u : 4u);
  // AVX-512's 32 registers hold 16 chains; the 16 of SSE/AVX2 hold 12 beside
  // the loop's two constants (16 there spilled three chains to the stack).
  EXPECT_EQ(p.chains, p.target == "AVX3" || p.target.rfind("AVX3_", 0) == 0 ? 16 : 12);
  EXPECT_GT(p.gflops, 0.0);
  EXPECT_EQ(MeasureFmaPeak(0, 0.005).threads, 1);  // at least one thread
}

TEST(Peak, CopyBandwidthReportsHowItRan) {
  const size_t lanes = MeasureFmaPeak(1, 0.001).lanes;
  const CopyBandwidth c = MeasureCopyBandwidth(3, size_t{1} << 20);
  EXPECT_EQ(c.threads, 3);
  EXPECT_LE(c.bytes, size_t{1} << 20);
  EXPECT_EQ(c.bytes % (4 * lanes * 3 * sizeof(float)), 0u);  // whole unrolled steps on every thread
  EXPECT_GT(c.bytes, (size_t{1} << 20) - 4 * lanes * 3 * sizeof(float));
  EXPECT_GT(c.gbytes_per_s, 0.0);
}

TEST(Peak, AmxPeakReportsItsThreads) {
  const AmxPeak a = MeasureAmxPeak(2, 0.005);
  EXPECT_EQ(a.threads, 2);
  EXPECT_GE(a.gflops, 0.0);  // 0 where AMX is not usable
}

std::string Upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

// `cgdr bench --target`: the peak loop (like every kernel) dispatches to the
// named target, and still does after the planner's questions about the CPU
// (ActiveTarget() asks Highway's SupportedTargets(), which with
// hwy::DisableTargets handed dispatch the unmasked set again).
TEST(Peak, DispatchNoHigherThanHoldsForEveryUsableTarget) {
  const std::vector<std::string> names = UsableTargetNames();
  ASSERT_FALSE(names.empty());
  EXPECT_EQ(Upper(names.front()), ActiveTarget());
  for (const std::string& name : names) {
    SCOPED_TRACE(name);
    const int64_t target = UsableTargetNamed(name);
    ASSERT_NE(target, 0);
    EXPECT_EQ(UsableTargetNamed(Upper(name)), target);  // any case
    DispatchNoHigherThan(target);
    EXPECT_EQ(ActiveTarget(), Upper(name));
    EXPECT_EQ(MeasureFmaPeak(1, 0.001).target, Upper(name));
    EXPECT_EQ(ActiveTarget(), Upper(name));
  }
  EXPECT_EQ(UsableTargetNamed("avx9"), 0);
  EXPECT_EQ(ActiveTarget(), Upper(names.back()));  // asking for a name changes nothing
  hwy::SetSupportedTargetsForTest(0);
  EXPECT_EQ(ActiveTarget(), Upper(names.front()));
}

}  // namespace
}  // namespace cgdr
