// The planner (SPEC 5): invariants hold for many shapes, V is split only when
// threads would idle, and the plan prints its choices.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <vector>

#include "cgdr/plan.hpp"
#include "core/cpu_features.h"
#include "plan/scratch_layout.h"

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

// Drops item i from the plan's groups (and a group left empty).
void RemoveFromGroups(int64_t i, Plan* plan) {
  std::vector<int64_t> order, begin{0};
  for (int64_t g = 0; g < plan->groups(); ++g) {
    for (int64_t j = 0; j < plan->GroupSize(g); ++j) {
      if (plan->GroupItems(g)[j] != i) order.push_back(plan->GroupItems(g)[j]);
    }
    if (static_cast<int64_t>(order.size()) > begin.back()) begin.push_back(static_cast<int64_t>(order.size()));
  }
  plan->group_order = order;
  plan->group_begin = begin;
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

// threads = 0 is OpenMP's default team size (the CPUs the process may use,
// or OMP_NUM_THREADS), as in decode and the value scans: a process confined
// to 3 CPUs plans for 3 threads, not for every CPU of the machine.
TEST(Plan, AllThreadsMeansOpenMPsDefault) {
  const int saved = omp_get_max_threads();
  for (int n : {1, 3}) {
    omp_set_num_threads(n);
    Plan plan;
    ASSERT_TRUE(MakePlan(MakeProblem({64}, 2, 4, 64, 64, 0), MachineProfile{}, &plan).ok());
    EXPECT_EQ(plan.threads, n);
    ASSERT_TRUE(MakePlan(MakeProblem({64}, 2, 4, 64, 64, 5), MachineProfile{}, &plan).ok());
    EXPECT_EQ(plan.threads, 5);  // an explicit count is taken as given
  }
  omp_set_num_threads(saved);
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
  EXPECT_GE(few.groups(), 4) << PlanToString(few);  // every thread can claim a tile
}

// Groups are small enough for dynamic balance (8 per thread when items
// allow) and the scratch holds no more state tiles than the largest group.
TEST(Plan, GroupsSeveralPerThread) {
  Plan small, roomy_plan, flagship;
  ASSERT_TRUE(MakePlan(MakeProblem({64}, 8, 8, 64, 64, 2), MachineProfile{}, &small).ok());
  EXPECT_EQ(small.group_items, 1) << PlanToString(small);
  EXPECT_EQ(small.groups(), 8) << PlanToString(small);
  MachineProfile roomy;
  roomy.group_state_bytes = int64_t{1} << 30;
  ASSERT_TRUE(MakePlan(MakeProblem({64}, 1, 64, 64, 64, 1), roomy, &roomy_plan).ok());
  EXPECT_EQ(roomy_plan.group_items, 8) << PlanToString(roomy_plan);  // 64 items / 8 per thread
  MachineProfile tight;
  tight.group_state_bytes = 3 * 64 * 64 * 4;  // three 64 x 64 tiles
  ASSERT_TRUE(MakePlan(MakeProblem({64}, 1, 64, 64, 64, 1), tight, &roomy_plan).ok());
  EXPECT_EQ(roomy_plan.group_items, 3) << PlanToString(roomy_plan);
  ASSERT_TRUE(MakePlan(MakeProblem({8192}, 16, 32, 128, 128, 2), MachineProfile{}, &flagship).ok());
  EXPECT_EQ(flagship.groups(), 16) << PlanToString(flagship);
  EXPECT_EQ(flagship.group_items, 2) << PlanToString(flagship);
  EXPECT_EQ(flagship.scratch_bytes_per_thread,
            ScratchLayout(flagship.chunk, flagship.dk_padded, flagship.v_step, 2, false).bytes());
}

// The value heads of one key head share a group (and so each chunk's K
// side) while groups stay several per thread: Qwen3-Next's 16 key heads x 2
// value heads are 16 groups of one key head on 2 threads, 8 groups of two
// key heads on 1 thread (32 items / 8 per thread), single items on 16 threads.
TEST(Plan, KeyHeadsShareAGroupWhileBalanced) {
  for (int threads : {1, 2, 16}) {
    Plan plan;
    ASSERT_TRUE(MakePlan(MakeProblem({8192}, 16, 32, 128, 128, threads), MachineProfile{}, &plan).ok());
    const int64_t want = threads == 1 ? 4 : (threads == 2 ? 2 : 1);
    EXPECT_EQ(plan.group_items, want) << PlanToString(plan);
    EXPECT_EQ(plan.groups(), 32 / want) << PlanToString(plan);
    for (int64_t g = 0; g < plan.groups(); ++g) {
      ASSERT_EQ(plan.GroupSize(g), want);
      const int64_t first_head = plan.items[plan.GroupItems(g)[0]].head;
      EXPECT_EQ(first_head % want, 0) << "group " << g << " starts inside a key head pair\n" << PlanToString(plan);
      for (int64_t j = 0; j < want; ++j) EXPECT_EQ(plan.items[plan.GroupItems(g)[j]].head, first_head + j);
    }
  }
}

// Groups are claimed costliest first (longest-first greedy), ties in
// (sequence, head) order, so the last group to start is a short one.
TEST(Plan, GroupsClaimedCostliestFirst) {
  Plan plan;
  ASSERT_TRUE(MakePlan(MakeProblem({1000, 4000, 1000, 2000, 1000}, 1, 1, 64, 64, 2), MachineProfile{}, &plan).ok());
  ASSERT_EQ(plan.groups(), 5) << PlanToString(plan);
  std::vector<int64_t> seqs;
  for (int64_t g = 0; g < plan.groups(); ++g) seqs.push_back(plan.items[plan.GroupItems(g)[0]].seq);
  EXPECT_EQ(seqs, (std::vector<int64_t>{1, 3, 0, 2, 4})) << PlanToString(plan);
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
  ASSERT_GE(plan.groups(), 2);
  Plan dup = plan;
  dup.group_order[1] = dup.group_order[0];
  EXPECT_FALSE(CheckPlan(dup).ok());
  Plan unbounded = plan;
  unbounded.group_begin.back() -= 1;
  EXPECT_FALSE(CheckPlan(unbounded).ok());
  Plan overrun = plan;  // a bound past group_order that the last bound hides
  overrun.group_items = 8;
  overrun.scratch_bytes_per_thread *= 8;
  overrun.group_begin.insert(overrun.group_begin.end() - 1, static_cast<int64_t>(overrun.group_order.size()) + 2);
  EXPECT_FALSE(CheckPlan(overrun).ok());
  Plan mixed = plan;  // one group over both sequences
  mixed.group_items = 4;
  mixed.scratch_bytes_per_thread *= 4;
  mixed.group_begin = {0, static_cast<int64_t>(mixed.group_order.size())};
  const Status mixed_status = CheckPlan(mixed);
  EXPECT_NE(mixed_status.message().find("spans sequences"), std::string::npos) << mixed_status.message();
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
  RemoveFromGroups(last, &missing);
  EXPECT_FALSE(CheckPlan(missing).ok());
  Plan twice = plan;
  twice.items.push_back(twice.items[0]);
  twice.group_order.push_back(static_cast<int64_t>(twice.items.size()) - 1);
  twice.group_begin.back() += 1;
  twice.group_items += 1;
  twice.scratch_bytes_per_thread *= 2;
  EXPECT_FALSE(CheckPlan(twice).ok());
  Plan streamed_recurrence = plan;  // C = 1 never streams out
  streamed_recurrence.chunk = 1;
  EXPECT_TRUE(CheckPlan(streamed_recurrence).ok());
  streamed_recurrence.stream_out = true;
  EXPECT_FALSE(CheckPlan(streamed_recurrence).ok());
  Plan prefetched_recurrence = plan;  // the L1 hint is the chunked plans' (measured for C > 1 only)
  prefetched_recurrence.chunk = 1;
  prefetched_recurrence.stream_out = false;
  prefetched_recurrence.prefetch_into_l1 = true;
  EXPECT_FALSE(CheckPlan(prefetched_recurrence).ok());
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

// MachineProfile::precision_cost scales the chunked formulations' products
// only (C = 1 keeps FP32 products): a mode whose products cost 6x fp32's makes
// the recurrence the cheapest, one that costs the same keeps fp32's pick, and
// a forced formulation stays forced.
TEST(Plan, PrecisionCostMovesThePickToTheRecurrence) {
  const auto chunk_for = [](Precision prec, Algo algo, const MachineProfile& prof) {
    Problem p = MakeProblem({8192}, 16, 32, 128, 128, 2, algo);
    p.options.precision = prec;
    p.options.engine = Engine::kVector;  // the vector engine's cost model (the AMX engine has its own)
    Plan plan;
    EXPECT_TRUE(MakePlan(p, prof, &plan).ok());
    EXPECT_EQ(plan.precision, prec);
    return plan.chunk;
  };
  MachineProfile slow_bf16;
  slow_bf16.precision_cost[static_cast<int>(Precision::kBf16x3)] = 6.0;
  MachineProfile even;
  for (double& c : even.precision_cost) c = 1.0;
  EXPECT_EQ(chunk_for(Precision::kFp32, Algo::kAuto, slow_bf16), 16);
  EXPECT_EQ(chunk_for(Precision::kBf16x3, Algo::kAuto, slow_bf16), 1);
  EXPECT_EQ(chunk_for(Precision::kBf16x3, Algo::kChunk16, slow_bf16), 16);
  EXPECT_EQ(chunk_for(Precision::kBf16x3, Algo::kAuto, even), 16);
  // The model itself: C = 1's cost does not depend on the mode, C = 16's scales.
  const double c1 = ModelCost(slow_bf16, 1, 4096, 128, 128, Precision::kBf16x3);
  EXPECT_EQ(c1, ModelCost(slow_bf16, 1, 4096, 128, 128, Precision::kFp32));
  const double c16_fp32 = ModelCost(slow_bf16, 16, 4096, 128, 128, Precision::kFp32);
  const double c16_x3 = ModelCost(slow_bf16, 16, 4096, 128, 128, Precision::kBf16x3);
  EXPECT_GT(c16_x3, 5.0 * c16_fp32);
  EXPECT_LT(c16_x3, 6.0 * c16_fp32);  // the per-chunk fixed cost is not scaled
}

// Streaming stores for out: chunked plans whose out reaches the profile's
// threshold (the kernel checks the alignment on the data); never C = 1.
TEST(Plan, StreamsLargeOutputsOfChunkedPlans) {
  const auto streams = [](int64_t T, Algo algo, int64_t threshold) {
    Problem p = MakeProblem({T}, 16, 32, 128, 128, 2, algo);
    p.dtype = DType::kF16;
    MachineProfile prof;
    prof.stream_out_bytes = threshold;
    Plan plan;
    EXPECT_TRUE(MakePlan(p, prof, &plan).ok());
    return plan.stream_out;
  };
  const int64_t out_bytes_t8192 = 8192 * 32 * 128 * 2;
  EXPECT_TRUE(streams(8192, Algo::kAuto, MachineProfile{}.stream_out_bytes));   // the flagship: 64 MiB
  EXPECT_FALSE(streams(512, Algo::kAuto, MachineProfile{}.stream_out_bytes));   // 4 MiB
  EXPECT_TRUE(streams(8192, Algo::kChunk64, out_bytes_t8192));
  EXPECT_FALSE(streams(8192, Algo::kChunk64, out_bytes_t8192 + 1));
  EXPECT_FALSE(streams(8192, Algo::kRecurrent, 0));
  Problem p = MakeProblem({8192}, 16, 32, 128, 128, 2);
  Plan plan;
  ASSERT_TRUE(MakePlan(p, MachineProfile{}, &plan).ok());
  EXPECT_NE(PlanToString(plan).find("stream_out=1"), std::string::npos);
  EXPECT_NE(PlanToString(plan).find("written past the caches"), std::string::npos);
}

// The next chunk's prefetch hint: into L1 on AMD CPUs (the plan says so in
// its line and its reasons), into L2 elsewhere; C = 1 never changes it.
TEST(Plan, PrefetchesIntoL1OnAmd) {
  for (Algo algo : {Algo::kAuto, Algo::kChunk64, Algo::kRecurrent}) {
    Plan plan;
    ASSERT_TRUE(MakePlan(MakeProblem({8192}, 16, 32, 128, 128, 2, algo), MachineProfile{}, &plan).ok());
    const bool l1 = plan.chunk > 1 && CpuIsAmd();
    EXPECT_EQ(plan.prefetch_into_l1, l1) << AlgoName(algo);
    const std::string s = PlanToString(plan);
    EXPECT_NE(s.find(l1 ? " prefetch=l1 " : " prefetch=l2 "), std::string::npos) << s;
    EXPECT_EQ(s.find("prefetched into L1 (AMD)") != std::string::npos, l1) << s;
  }
}

TEST(Plan, PrintsChoicesAndReasons) {
  Plan plan;
  ASSERT_TRUE(MakePlan(MakeProblem({8192}, 16, 32, 128, 128, 2), MachineProfile{}, &plan).ok());
  const std::string s = PlanToString(plan);
  for (const char* key : {"CGDR_PLAN", "chunk=", "bucket=128", "vStep=", "items=32", "threads=2", "why:", "scratch_per_thread=",
                          "groups: 16 of 2..2 items", "group 0: seq 0, heads 0..1"}) {
    EXPECT_NE(s.find(key), std::string::npos) << key << " missing from:\n" << s;
  }
}

}  // namespace
}  // namespace cgdr
