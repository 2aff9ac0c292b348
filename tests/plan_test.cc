// The planner (SPEC 5): invariants hold for many shapes, V is split only when
// threads would idle, and the plan prints its choices.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "cgdr/plan.hpp"

namespace cgdr {
namespace {

Problem MakeProblem(std::vector<int64_t> lens, int64_t Nk, int64_t Nv, int64_t Dk, int64_t Dv, int threads, Algo algo = Algo::kAuto) {
  Problem p;
  p.seq_lens = lens;
  for (int64_t l : lens) p.T += l;
  p.B = static_cast<int64_t>(lens.size());
  p.Nk = Nk; p.Nv = Nv; p.Dk = Dk; p.Dv = Dv;
  p.scale = 0.1;
  p.options.threads = threads;
  p.options.algo = algo;
  return p;
}

TEST(Plan, InvariantsHoldAcrossShapes) {
  for (int64_t dk : {1, 16, 63, 64, 65, 80, 81, 96, 97, 128, 129, 200, 256}) {
    for (int64_t dv : {1, 17, 64, 128, 256}) {
      for (int threads : {1, 2, 3, 7, 16}) {
        for (Algo a : {Algo::kAuto, Algo::kRecurrent, Algo::kChunk16, Algo::kChunk64}) {
          Plan plan;
          const Status s = MakePlan(MakeProblem({5, 0, 130}, 2, 4, dk, dv, threads, a), MachineProfile{}, &plan);
          ASSERT_TRUE(s.ok()) << s.message();
          EXPECT_TRUE(CheckPlan(plan).ok());
          EXPECT_GE(plan.dk_padded, dk);
          EXPECT_EQ(plan.dk_padded % 16, 0);
        }
      }
    }
  }
}

TEST(Plan, BucketsFollowDk) {
  const std::pair<int64_t, int> cases[] = {{1, 64}, {64, 64}, {65, 80}, {80, 80}, {81, 96}, {96, 96}, {97, 128}, {128, 128}, {129, 0}, {256, 0}};
  for (auto [dk, bucket] : cases) {
    Plan plan;
    ASSERT_TRUE(MakePlan(MakeProblem({10}, 1, 1, dk, 32, 1), MachineProfile{}, &plan).ok());
    EXPECT_EQ(plan.dk_bucket, bucket) << "Dk=" << dk;
  }
}

TEST(Plan, VSplitOnlyWhenThreadsWouldIdle) {
  Plan many, few;
  ASSERT_TRUE(MakePlan(MakeProblem({4096}, 16, 32, 128, 128, 2), MachineProfile{}, &many).ok());
  EXPECT_EQ(many.v_tiles, 1) << PlanToString(many);
  ASSERT_TRUE(MakePlan(MakeProblem({4096}, 1, 1, 128, 128, 4), MachineProfile{}, &few).ok());
  EXPECT_GE(few.v_tiles, 4) << PlanToString(few);
  for (const auto& list : few.per_thread) EXPECT_FALSE(list.empty()) << PlanToString(few);
}

// A group interleaves at most the items one thread has, so the scratch holds
// no state tiles that can never be used (8 heads on 2 threads: 4 each).
TEST(Plan, GroupsNoLargerThanAThreadsItems) {
  Plan small, large;
  ASSERT_TRUE(MakePlan(MakeProblem({64}, 8, 8, 64, 64, 2), MachineProfile{}, &small).ok());
  EXPECT_EQ(small.group_items, 4) << PlanToString(small);
  MachineProfile roomy;
  roomy.group_state_bytes = int64_t{1} << 30;
  ASSERT_TRUE(MakePlan(MakeProblem({64}, 8, 8, 64, 64, 2), roomy, &large).ok());
  EXPECT_EQ(large.group_items, 4) << PlanToString(large);
  ASSERT_TRUE(MakePlan(MakeProblem({8192}, 16, 32, 128, 128, 2), MachineProfile{}, &large).ok());
  EXPECT_EQ(large.group_items, 16) << PlanToString(large);  // the 1 MiB budget: 16 tiles of 64 KiB
}

// The value heads of one key head go to one thread (they share the chunk's
// K side there), as long as the threads stay balanced: Qwen3-Next's 16 key
// heads x 2 value heads on 2 threads are 8 whole pairs each; on 3 threads
// the loads are still 11, 11, 10 items, one pair split.
TEST(Plan, KeyHeadsStayOnOneThreadWhileBalanced) {
  for (int threads : {2, 3}) {
    Plan plan;
    ASSERT_TRUE(MakePlan(MakeProblem({8192}, 16, 32, 128, 128, threads), MachineProfile{}, &plan).ok());
    std::vector<size_t> sizes;
    int split_pairs = 0;
    for (int64_t hk = 0; hk < 16; ++hk) {
      int owners = 0;
      for (const auto& list : plan.per_thread) {
        owners += std::any_of(list.begin(), list.end(), [&](int64_t i) { return plan.items[i].head / 2 == hk; });
      }
      split_pairs += owners > 1;
    }
    for (const auto& list : plan.per_thread) sizes.push_back(list.size());
    std::sort(sizes.begin(), sizes.end());
    if (threads == 2) {
      EXPECT_EQ(split_pairs, 0) << PlanToString(plan);
      EXPECT_EQ(sizes, (std::vector<size_t>{16, 16}));
    } else {
      EXPECT_EQ(split_pairs, 1) << PlanToString(plan);
      EXPECT_EQ(sizes, (std::vector<size_t>{10, 11, 11}));
    }
  }
}

TEST(Plan, ThreadsBalancedByTokens) {
  Plan plan;
  ASSERT_TRUE(MakePlan(MakeProblem({4000, 1000, 1000, 1000, 1000}, 1, 1, 64, 64, 2), MachineProfile{}, &plan).ok());
  int64_t load[2] = {0, 0};
  for (int t = 0; t < 2; ++t)
    for (int64_t i : plan.per_thread[t]) load[t] += plan.items[i].tokens;
  EXPECT_EQ(load[0], 4000);
  EXPECT_EQ(load[1], 4000);
}

TEST(Plan, HugeShapesUse64BitArithmetic) {
  // T * Nv * Dv = 2^22 * 64 * 256 = 2^36 elements: planned without overflow.
  Plan plan;
  ASSERT_TRUE(MakePlan(MakeProblem({int64_t{1} << 21, int64_t{1} << 21}, 8, 64, 256, 256, 4), MachineProfile{}, &plan).ok());
  EXPECT_TRUE(CheckPlan(plan).ok());
  EXPECT_EQ(plan.items.back().token_begin, int64_t{1} << 21);
}

TEST(Plan, CheckPlanCatchesBrokenPlans) {
  Plan plan;
  ASSERT_TRUE(MakePlan(MakeProblem({10, 20}, 1, 2, 32, 32, 2), MachineProfile{}, &plan).ok());
  Plan dup = plan;
  dup.per_thread[0].push_back(dup.per_thread[1].empty() ? 0 : dup.per_thread[1][0]);
  EXPECT_FALSE(CheckPlan(dup).ok());
  Plan small = plan;
  small.scratch_bytes_per_thread = 64;
  EXPECT_FALSE(CheckPlan(small).ok());
  Plan gap = plan;
  gap.items[0].v_width -= 1;
  EXPECT_FALSE(CheckPlan(gap).ok());
  // A missing item, and a duplicated one scheduled once each.
  Plan missing = plan;
  const int64_t last = static_cast<int64_t>(missing.items.size()) - 1;
  missing.items.pop_back();
  for (auto& list : missing.per_thread) list.erase(std::remove(list.begin(), list.end(), last), list.end());
  EXPECT_FALSE(CheckPlan(missing).ok());
  Plan twice = plan;
  twice.items.push_back(twice.items[0]);
  twice.per_thread[0].push_back(static_cast<int64_t>(twice.items.size()) - 1);
  EXPECT_FALSE(CheckPlan(twice).ok());
}

// Empty sequences need items only to write their final state: a million of
// them without states plan to nothing (plan memory does not grow with B), and
// with a final state to one item per (sequence, head, tile).
TEST(Plan, EmptySequencesCostItemsOnlyForAFinalState) {
  std::vector<int64_t> lens(1000000, 0);
  lens[500000] = 3;
  Problem p = MakeProblem(lens, 2, 4, 64, 64, 2);
  Plan plan;
  ASSERT_TRUE(MakePlan(p, MachineProfile{}, &plan).ok());
  EXPECT_TRUE(CheckPlan(plan).ok());
  EXPECT_EQ(static_cast<int64_t>(plan.items.size()), 4 * plan.v_tiles);
  for (const WorkItem& it : plan.items) EXPECT_EQ(it.seq, 500000);

  p.seq_lens.assign(5, 0);
  p.B = 5;
  p.T = 0;
  p.want_final_state = true;
  ASSERT_TRUE(MakePlan(p, MachineProfile{}, &plan).ok());
  EXPECT_TRUE(CheckPlan(plan).ok());
  EXPECT_EQ(static_cast<int64_t>(plan.items.size()), 5 * 4 * plan.v_tiles);
}

TEST(Plan, PrintsChoicesAndReasons) {
  Plan plan;
  ASSERT_TRUE(MakePlan(MakeProblem({8192}, 16, 32, 128, 128, 2), MachineProfile{}, &plan).ok());
  const std::string s = PlanToString(plan);
  for (const char* key : {"CGDR_PLAN", "chunk=", "bucket=128", "vStep=", "items=32", "threads=2", "why:", "scratch_per_thread="}) {
    EXPECT_NE(s.find(key), std::string::npos) << key << " missing from:\n" << s;
  }
}

}  // namespace
}  // namespace cgdr
