// Every formulation on every compiled SIMD target against the FP64
// reference of SPEC 1 (SPEC 6 thresholds), on odd shapes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "cgdr/plan.hpp"
#include "kernels/kernels.h"
#include "test_util.h"
#include "validate/checks.h"

namespace cgdr::testing {
namespace {

struct Shape {
  int64_t Nk, Nv, Dk, Dv;
  std::vector<int32_t> lens;
};

void ExpectAccurate(const CaseSpec& spec, Algo algo, const std::string& what) {
  Case c = MakeCase(spec);
  Options opt = c.options();
  opt.algo = algo;
  const Errors e = RunAndCompare(c, opt);
  EXPECT_LE(e.out, e.out_limit) << what << " out";
  if (spec.want_final_state) {
    EXPECT_LE(e.state, e.state_limit) << what << " final_state";
  }
}

std::string Describe(const CaseSpec& s, Algo a, const std::string& target) {
  std::string lens;
  for (int32_t l : s.lens) lens += std::to_string(l) + ",";
  return target + " " + AlgoName(a) + " Nk=" + std::to_string(s.Nk) + " Nv=" + std::to_string(s.Nv) + " Dk=" +
         std::to_string(s.Dk) + " Dv=" + std::to_string(s.Dv) + " lens=" + lens + " dtype=" + DTypeName(s.dtype) +
         " layout=" + StateLayoutName(s.layout);
}

// Every Dk and Dv of the foundation issue appears on both sides, paired so the
// run stays short; lengths cover 1, 63, 64, 65, 130 and tails of 1 token.
TEST(KernelAccuracy, OddWidthsEveryTargetEveryAlgo) {
  const std::vector<int64_t> dims = {1, 7, 16, 63, 64, 65, 79, 80, 81, 96, 97, 100, 127, 128, 129, 200, 256};
  const std::vector<std::vector<int32_t>> lens = {{1}, {63}, {64}, {65}, {130}, {0, 65, 0, 1}};
  ForEachTarget([&](const std::string& target) {
    for (size_t i = 0; i < dims.size(); ++i) {
      CaseSpec s;
      s.Dk = dims[i];
      s.Dv = dims[dims.size() - 1 - i];
      s.Nk = 1;
      s.Nv = (i % 3 == 0) ? 2 : 1;
      s.lens = lens[i % lens.size()];
      s.seed = 100 + i;
      s.layout = (i % 2) ? StateLayout::kKV : StateLayout::kVK;
      for (Algo a : AllAlgos()) ExpectAccurate(s, a, Describe(s, a, target));
    }
  });
}

// Dk above 128 with panels of S over 32 KiB: Vnew and O read S in row
// blocks (chunk-inl.h, StateRowsPerBlock): Dk = 200 with Dv = 71 (an
// 80-column merged panel on AVX-512: 3 blocks) and Dk = 256 with Dv = 64
// (2 blocks), in both state layouts, with a 1-token tail.
TEST(KernelAccuracy, StateRowBlocksEveryTargetEveryAlgo) {
  ForEachTarget([&](const std::string& target) {
    int seed = 300;
    for (const auto& [dk, dv] : std::vector<std::pair<int64_t, int64_t>>{{200, 71}, {256, 64}}) {
      for (StateLayout layout : {StateLayout::kVK, StateLayout::kKV}) {
        CaseSpec s;
        s.Dk = dk;
        s.Dv = dv;
        s.Nk = 1;
        s.Nv = 2;
        s.lens = {65, 1};
        s.seed = seed++;
        s.layout = layout;
        for (Algo a : AllAlgos()) ExpectAccurate(s, a, Describe(s, a, target));
      }
    }
  });
}

TEST(KernelAccuracy, DtypesLayoutsOptions) {
  ForEachTarget([&](const std::string& target) {
    int seed = 1;
    for (DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
      for (StateLayout layout : {StateLayout::kVK, StateLayout::kKV}) {
        for (int variant = 0; variant < 4; ++variant) {
          CaseSpec s;
          s.Nk = 2;
          s.Nv = variant == 0 ? 2 : (variant == 1 ? 4 : 8);  // GQA ratios 1, 2, 4
          s.Dk = 33;
          s.Dv = variant == 0 ? 71 : 47;  // 71: a lone vector joins the last panel (AVX-512)
          s.lens = {37, 0, 70};
          s.dtype = dt;
          s.state_dtype = variant == 2 ? DType::kF32 : dt;
          s.g_dtype = variant == 3 ? dt : DType::kF32;
          s.has_g = variant != 1;
          s.has_initial_state = variant != 2;
          s.use_qk_l2norm = variant == 3;
          s.layout = layout;
          s.seed = seed++;
          for (Algo a : AllAlgos()) ExpectAccurate(s, a, Describe(s, a, target) + " variant=" + std::to_string(variant));
        }
      }
    }
  });
}

// The K side computed once per key head and once per value head and taken
// over by the next item of a thread (GQA value heads; V tiles of one head):
// narrow V tiles so that one thread runs several tiles and heads of one key
// head back to back, odd widths, a 1-token tail, on every target.
TEST(KernelAccuracy, SharedKSideEveryTarget) {
  ForEachTarget([&](const std::string& target) {
    CaseSpec s;
    s.Nk = 2;
    s.Nv = 6;
    s.Dk = 37;
    s.Dv = 47;
    s.lens = {49, 0, 17};
    s.seed = 31;
    for (Algo a : AllAlgos()) {
      if (a == Algo::kRecurrent) continue;  // C = 1 has no K side
      for (int threads : {1, 2}) {
        Case c = MakeCase(s);
        Options opt = c.options();
        opt.algo = a;
        opt.v_step = 16;  // 3 tiles per head
        opt.threads = threads;
        const Errors e = RunAndCompare(c, opt);
        const std::string what = Describe(s, a, target) + " v_step=16 threads=" + std::to_string(threads);
        EXPECT_LE(e.out, e.out_limit) << what << " out";
        EXPECT_LE(e.state, e.state_limit) << what << " final_state";
      }
    }
  });
}

TEST(KernelAccuracy, LongerSequencesF32) {
  CaseSpec s;
  s.Nk = 1;
  s.Nv = 2;
  s.Dk = 64;
  s.Dv = 48;
  s.lens = {1000, 1};
  s.g_min = -0.1f;
  for (Algo a : AllAlgos()) ExpectAccurate(s, a, Describe(s, a, "auto"));
}

TEST(KernelAccuracy, ChunkSizeIndependence) {
  CaseSpec s;
  s.Dk = 40;
  s.Dv = 24;
  s.lens = {300, 17};
  s.Nv = 2;
  Case base = MakeCase(s);
  Options opt = base.options();
  opt.algo = Algo::kChunk64;
  ASSERT_TRUE(cgdr::Run(base.inputs(), base.outputs(), opt).ok());
  for (Algo a : {Algo::kChunk16, Algo::kChunk32, Algo::kChunk128, Algo::kRecurrent}) {
    Case c = MakeCase(s);
    opt.algo = a;
    ASSERT_TRUE(cgdr::Run(c.inputs(), c.outputs(), opt).ok());
    const auto* x = reinterpret_cast<const float*>(c.out.data());
    const auto* y = reinterpret_cast<const float*>(base.out.data());
    double num = 0, den = 0;
    for (size_t i = 0; i < c.out.size() / 4; ++i) { num += (x[i] - y[i]) * double(x[i] - y[i]); den += double(y[i]) * y[i]; }
    EXPECT_LE(std::sqrt(num / den), 1e-5) << AlgoName(a);
  }
}

// Streaming stores of out (Plan::stream_out) write the same bits as normal
// stores, on every target and out dtype: on line-aligned rows (Case's
// buffers) they stream where a register block fills whole lines (64-column
// panels; 32-column V tiles of f16; not the 80-column merged panel of
// Dv = 80, nor a 48-column tile), and out 16 bytes off a line never
// streams. Each run: a fresh out buffer of garbage, then compare.
TEST(KernelAccuracy, StreamingStoresWriteTheSameBits) {
  struct Variant {
    int64_t Dv;
    int v_step;
    DType dtype;
  };
  const std::vector<Variant> variants = {{128, 0, DType::kF16}, {128, 0, DType::kBF16}, {128, 0, DType::kF32},
                                         {64, 32, DType::kF16},  {80, 0, DType::kF16},   {48, 0, DType::kF16}};
  const auto run = [](Case& c, const Options& opt, int64_t stream_out_bytes, int64_t out_offset, Bytes* out) {
    MachineProfile prof;
    prof.stream_out_bytes = stream_out_bytes;
    Plan plan;
    ASSERT_TRUE(PlanFor(c, opt, &plan, prof));
    ASSERT_EQ(plan.stream_out, stream_out_bytes == 0);
    Bytes buf(c.out.size() + static_cast<size_t>(out_offset), 0xA5);
    Outputs o = c.outputs();
    o.out.data = buf.data() + out_offset;
    ASSERT_TRUE(Execute(plan, c.inputs(), o).ok());
    out->assign(buf.begin() + out_offset, buf.end());
  };
  ForEachTarget([&](const std::string& target) {
    for (const Variant& v : variants) {
      CaseSpec s;
      s.Nk = 2; s.Nv = 4; s.Dk = 64; s.Dv = v.Dv; s.dtype = v.dtype;
      s.lens = {37, 0, 70};
      Case c = MakeCase(s);
      Options opt = c.options();
      opt.algo = Algo::kChunk16;
      opt.v_step = v.v_step;
      opt.threads = 2;
      for (int64_t offset : {0, 16}) {
        Bytes normal, streamed;
        run(c, opt, INT64_MAX, offset, &normal);
        run(c, opt, 0, offset, &streamed);
        EXPECT_TRUE(normal == streamed) << target << " Dv=" << v.Dv << " v_step=" << v.v_step << " dtype="
                                        << DTypeName(v.dtype) << " out offset " << offset;
      }
    }
  });
}

// The next chunk's prefetch hint (Plan::prefetch_into_l1) changes where
// lines wait, never a result: both hints give the same bits, on every
// target, for both gates and with the AMX emulation's products.
TEST(KernelAccuracy, PrefetchHintLeavesTheBits) {
  const auto run = [](Case& c, const Options& opt, bool into_l1, Bytes* out) {
    Plan plan;
    ASSERT_TRUE(PlanFor(c, opt, &plan, MachineProfile{}));
    ASSERT_GT(plan.chunk, 1);
    plan.prefetch_into_l1 = into_l1;
    ASSERT_TRUE(CheckPlan(plan).ok());
    std::fill(c.out.begin(), c.out.end(), 0xA5);
    std::fill(c.final_state.begin(), c.final_state.end(), 0xA5);
    ASSERT_TRUE(Execute(plan, c.inputs(), c.outputs()).ok());
    out->assign(c.out.begin(), c.out.end());
    out->insert(out->end(), c.final_state.begin(), c.final_state.end());
  };
  ForEachTarget([&](const std::string& target) {
    for (bool per_channel : {false, true}) {
      for (Engine engine : {Engine::kVector, Engine::kAmxEmulated}) {
        CaseSpec s;
        s.Nk = 2; s.Nv = 4; s.Dk = 40; s.Dv = 33; s.dtype = DType::kBF16;
        s.lens = {37, 0, 70};
        s.per_channel_gate = per_channel;
        if (per_channel) s.g_min = -1.0f;  // decays across the chunk's range (kda_test's KdaSpec)
        Case c = MakeCase(s);
        Options opt = c.options();
        opt.algo = Algo::kChunk16;
        opt.threads = 2;
        opt.engine = engine;
        if (engine == Engine::kAmxEmulated) opt.precision = Precision::kBf16x3;
        Bytes l2, l1;
        run(c, opt, false, &l2);
        run(c, opt, true, &l1);
        EXPECT_TRUE(l2 == l1) << target << (per_channel ? " KDA" : " scalar gate") << " engine " << EngineName(engine);
      }
    }
  });
}

}  // namespace
}  // namespace cgdr::testing
