// src/core/phase_timers: the counters a timing build (CGDR_PHASE_TIMERS)
// prints per stage of the chunk step. The registry and its sums work in every
// build; only a timing build's kernels feed it, and the default build's feed
// nothing (no counting on the path users run).
#include "core/phase_timers.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "cgdr/cgdr.hpp"
#include "core/synthetic.h"

namespace cgdr {
namespace {

uint64_t CallsOf(const std::vector<PhaseTotal>& totals, Phase p) {
  for (const PhaseTotal& t : totals) {
    if (t.phase == p) return t.calls;
  }
  return 0;
}

TEST(PhaseTimers, SumOverThreadsAndResetToNothing) {
  ResetPhaseTimers();
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([i] {
      for (int k = 0; k < 1000; ++k) AddPhaseTicks(Phase::kXProduct, 3);
      AddPhaseTicks(Phase::kStateUpdate, static_cast<uint64_t>(i));
    });
  }
  for (auto& t : threads) t.join();  // ended threads' counts stay in the sums
  const std::vector<PhaseTotal> totals = PhaseTotals();
  ASSERT_EQ(totals.size(), 2u);
  EXPECT_EQ(totals[0].phase, Phase::kXProduct);  // in Phase order
  EXPECT_EQ(totals[0].calls, 4000u);
  EXPECT_EQ(totals[0].ticks, 12000u);
  EXPECT_EQ(totals[1].phase, Phase::kStateUpdate);
  EXPECT_EQ(totals[1].calls, 4u);
  EXPECT_EQ(totals[1].ticks, 0u + 1 + 2 + 3);
  ResetPhaseTimers();
  EXPECT_TRUE(PhaseTotals().empty());
}

TEST(PhaseTimers, EveryPhaseHasAName) {
  for (int i = 0; i < static_cast<int>(Phase::kCount); ++i) {
    EXPECT_STRNE(PhaseName(static_cast<Phase>(i)), "?") << i;
  }
}

// A prefill on the vector engine counts its stages in a timing build, once
// per chunk and head (Nk = Nv, one V tile: no stage is shared), the state
// products once per column panel of it as well (Dv = 32 is one panel on
// AVX-512, two on AVX2, eight on the scalar target, which a timing build of
// AVX-512 and scalar code runs on a CPU without AVX-512), and nothing in the
// default build.
TEST(PhaseTimers, KernelsCountOnlyInATimingBuild) {
  CaseSpec spec;
  spec.Nk = 2;
  spec.Nv = 2;
  spec.Dk = 32;
  spec.Dv = 32;
  spec.lens = {40};  // chunks of 16: 16, 16, 8
  Case c = MakeCase(spec);
  Options opt = c.options();
  opt.algo = Algo::kChunk16;
  opt.engine = Engine::kVector;
  opt.threads = 2;
  ResetPhaseTimers();
  const Status s = cgdr::Run(c.inputs(), c.outputs(), opt);
  ASSERT_TRUE(s.ok()) << s.message();
  const std::vector<PhaseTotal> totals = PhaseTotals();
  if (!PhaseTimersCompiled()) {
    EXPECT_TRUE(totals.empty());
    return;
  }
  EXPECT_EQ(CallsOf(totals, Phase::kLoadKeyRows), 6u);
  EXPECT_EQ(CallsOf(totals, Phase::kValueHeadPrep), 6u);
  const uint64_t panels = CallsOf(totals, Phase::kXProduct) / 6;
  EXPECT_TRUE(panels == 1 || panels == 2 || panels == 4 || panels == 8) << panels;
  EXPECT_EQ(CallsOf(totals, Phase::kXProduct), 6u * panels);
  EXPECT_EQ(CallsOf(totals, Phase::kStateUpdate), 6u * panels);
  EXPECT_EQ(CallsOf(totals, Phase::kAmxStateSplit), 0u);
}

}  // namespace
}  // namespace cgdr
