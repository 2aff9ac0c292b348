// KDA's per-channel gate (docs/SPEC.md 10) in the prefill: g [T, Nv, Dk]
// (or the raw gate a of that shape, dt_bias [Nv * Dk], with and without
// options.gate_lower_bound), through every formulation (the recurrent one,
// the block-origin chunked kernel at C = 16, 32, 64, auto). Checked here:
//   - against the FP64 recurrence (reference.cc): f32 within 1e-5, 16-bit
//     inputs within twice the rounding of the exact answer, on odd Dk / Dv,
//     grouped heads, varlen with empty sequences and 1-token tails, without
//     an initial state, both layouts, on every SIMD target this CPU runs;
//   - the gate-range sweep of SPEC 10.4: per-token gates from -1e-4 down to
//     the lower bound -5, and without a bound down to -20, every C within
//     1e-5 (printed as a table);
//   - channels that all carry their head's decay agree with the scalar gate
//     (a different method, so to rounding, not bitwise);
//   - bitwise identical across thread counts and runs;
//   - the bf16 precision modes on the vector units and on the AMX engine
//     (emulated everywhere, the hardware where it runs) within their bounds.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "cgdr/cgdr.hpp"
#include "cgdr/plan.hpp"
#include "core/cpu_features.h"
#include "core/synthetic.h"
#include "test_util.h"

namespace cgdr::testing {
namespace {

constexpr double kF32Bound = 1e-5;  // the figure for f32 inputs (tighter than SPEC 6's 2e-5)

std::vector<Algo> KdaAlgos() { return {Algo::kRecurrent, Algo::kChunk16, Algo::kChunk32, Algo::kChunk64, Algo::kAuto}; }

CaseSpec KdaSpec(int64_t Nk, int64_t Nv, int64_t Dk, int64_t Dv, std::vector<int32_t> lens, uint64_t seed) {
  CaseSpec s;
  s.Nk = Nk;
  s.Nv = Nv;
  s.Dk = Dk;
  s.Dv = Dv;
  s.lens = std::move(lens);
  s.seed = seed;
  s.per_channel_gate = true;
  s.g_min = -1.0f;  // a decay per channel anywhere in [e^-1, 1]: a chunk's channels span e^-64 .. 1
  return s;
}

std::string Describe(const CaseSpec& s, Algo a) {
  std::string lens;
  for (int32_t l : s.lens) lens += std::to_string(l) + ",";
  return std::string(AlgoName(a)) + " Nk=" + std::to_string(s.Nk) + " Nv=" + std::to_string(s.Nv) +
         " Dk=" + std::to_string(s.Dk) + " Dv=" + std::to_string(s.Dv) + " lens=" + lens +
         " dtype=" + DTypeName(s.dtype) + " layout=" + StateLayoutName(s.layout) +
         (s.raw_gate ? " raw" : "") + (s.gate_lower_bound != 0 ? " bounded" : "") +
         (s.has_initial_state ? "" : " no-state");
}

Errors RunKda(const CaseSpec& spec, Algo algo, int threads = 0) {
  Case c = MakeCase(spec);
  Options opt = c.options();
  opt.algo = algo;
  opt.threads = threads;
  return RunAndCompare(c, opt);
}

void ExpectAccurate(const CaseSpec& spec, Algo algo, const std::string& where) {
  const Errors e = RunKda(spec, algo);
  const std::string what = where + " " + Describe(spec, algo);
  if (spec.dtype == DType::kF32) {
    EXPECT_LE(e.out, kF32Bound) << what << " out";
    if (spec.want_final_state) {
      EXPECT_LE(e.state, kF32Bound) << what << " final_state";
    }
  } else {  // SPEC 6: twice the rounding of the exact answer
    EXPECT_LE(e.out, e.out_limit) << what << " out";
    if (spec.want_final_state) {
      EXPECT_LE(e.state, e.state_limit) << what << " final_state";
    }
  }
}

// The shapes of the scalar gate's matrices: odd widths on both sides, GQA,
// lengths around the chunk sizes, empty sequences and 1-token tails.
std::vector<CaseSpec> Shapes() {
  struct S {
    int64_t Nk, Nv, Dk, Dv;
    std::vector<int32_t> lens;
  };
  const std::vector<S> shapes = {
      {1, 1, 1, 7, {1}},           {1, 2, 7, 1, {63}},          {2, 4, 40, 24, {37, 0, 130, 1}},
      {1, 2, 63, 65, {64, 65}},    {1, 1, 65, 63, {0, 129, 0}}, {1, 3, 97, 81, {17}},
      {2, 2, 128, 128, {200, 1}},  {1, 1, 129, 100, {66}},      {1, 1, 256, 16, {33, 0, 2}},
  };
  std::vector<CaseSpec> specs;
  for (size_t i = 0; i < shapes.size(); ++i) {
    const S& s = shapes[i];
    CaseSpec c = KdaSpec(s.Nk, s.Nv, s.Dk, s.Dv, s.lens, 300 + i);
    c.layout = (i % 2) ? StateLayout::kKV : StateLayout::kVK;
    c.has_initial_state = i % 3 != 1;
    specs.push_back(c);
  }
  return specs;
}

TEST(KdaPrefill, F32MatchesFp64OnEveryTargetEveryAlgo) {
  ForEachTarget([&](const std::string& target) {
    for (const CaseSpec& s : Shapes()) {
      for (Algo a : KdaAlgos()) ExpectAccurate(s, a, target);
    }
  });
}

TEST(KdaPrefill, RawAndBoundedGatesMatchFp64OnEveryTarget) {
  ForEachTarget([&](const std::string& target) {
    for (int variant = 0; variant < 3; ++variant) {
      CaseSpec s = KdaSpec(2, 4, 72, 40, {90, 0, 17}, 400 + variant);
      s.raw_gate = true;
      s.use_qk_l2norm = variant == 2;
      s.beta_sigmoid = variant == 2;
      s.gate_lower_bound = variant == 0 ? 0.0 : -5.0;
      s.layout = variant == 1 ? StateLayout::kKV : StateLayout::kVK;
      for (Algo a : KdaAlgos()) ExpectAccurate(s, a, target);
    }
  });
}

TEST(KdaPrefill, SixteenBitInputsWithinTheirRoundingOnEveryTarget) {
  ForEachTarget([&](const std::string& target) {
    for (DType dt : {DType::kBF16, DType::kF16}) {
      CaseSpec s = KdaSpec(1, 2, 128, 128, {150, 3}, 500);
      s.dtype = dt;
      s.g_dtype = dt;
      s.state_dtype = dt == DType::kBF16 ? DType::kF32 : dt;
      for (Algo a : {Algo::kRecurrent, Algo::kChunk64, Algo::kAuto}) ExpectAccurate(s, a, target);
    }
  });
}

// Per-token gates of one level (every channel drawn in [level, level / 2]),
// and a spread from 0 to the level, through every C.
TEST(KdaPrefill, GateRangeSweep) {
  const std::vector<float> levels = {-1e-4f, -1e-2f, -0.1f, -0.5f, -1.0f, -2.0f, -5.0f, -10.0f, -20.0f};
  std::printf("gate-range sweep (f32, Dk = Dv = 64, 200 tokens), rel err of out / final_state vs FP64:\n");
  std::printf("%10s %6s", "g per token", "spread");
  for (Algo a : KdaAlgos()) std::printf(" %22s", AlgoName(a));
  std::printf("\n");
  for (float level : levels) {
    for (bool spread : {false, true}) {
      CaseSpec s = KdaSpec(1, 2, 64, 64, {200}, 600);
      s.g_min = level;
      s.g_max = spread ? 0.0f : level / 2;
      std::printf("%10g %6s", level, spread ? "0..g" : "g..g/2");
      for (Algo a : KdaAlgos()) {
        const Errors e = RunKda(s, a);
        std::printf("    %9.2e / %9.2e", e.out, e.state);
        EXPECT_LE(e.out, kF32Bound) << Describe(s, a) << " g in [" << s.g_min << ", " << s.g_max << "] out";
        EXPECT_LE(e.state, kF32Bound) << Describe(s, a) << " g in [" << s.g_min << ", " << s.g_max << "] state";
      }
      std::printf("\n");
    }
  }
}

// A bounded raw gate whose inputs push it to the bound: g near -5 per token.
TEST(KdaPrefill, GatesAtTheLowerBound) {
  for (double bound : {-5.0, -1.0}) {
    CaseSpec s = KdaSpec(1, 2, 64, 48, {150}, 700);
    s.raw_gate = true;
    s.gate_lower_bound = bound;
    for (Algo a : KdaAlgos()) ExpectAccurate(s, a, "bound=" + std::to_string(bound));
  }
}

// Every channel with its head's decay: the per-channel kernels compute the
// scalar gate's problem by another method, so they agree to rounding.
TEST(KdaPrefill, EqualChannelsAgreeWithTheScalarGate) {
  CaseSpec scalar;
  scalar.Nk = 1;
  scalar.Nv = 2;
  scalar.Dk = 48;
  scalar.Dv = 40;
  scalar.lens = {100, 0, 33};
  scalar.g_min = -0.8f;
  scalar.seed = 800;
  Case sc = MakeCase(scalar);
  CaseSpec channel = scalar;
  channel.per_channel_gate = true;
  Case cc = MakeCase(channel);  // same q, k, v, beta, state (g is drawn in the same place, wider)
  const int64_t rows = static_cast<int64_t>(sc.g.size() / sizeof(float));
  const float* gs = reinterpret_cast<const float*>(sc.g.data());
  float* gc = reinterpret_cast<float*>(cc.g.data());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < scalar.Dk; ++i) gc[r * scalar.Dk + i] = gs[r];
  }
  for (Algo a : KdaAlgos()) {
    Options o = sc.options();
    o.algo = a;
    Inputs si = sc.inputs(), ci = cc.inputs();
    ci.query = si.query;
    ci.key = si.key;
    ci.value = si.value;
    ci.beta = si.beta;
    ci.initial_state = si.initial_state;
    Outputs so = sc.outputs(), co = cc.outputs();
    ASSERT_TRUE(cgdr::Run(si, so, o).ok());
    ASSERT_TRUE(cgdr::Run(ci, co, o).ok());
    const auto* x = reinterpret_cast<const float*>(sc.out.data());
    const auto* y = reinterpret_cast<const float*>(cc.out.data());
    double num = 0, den = 0;
    for (size_t i = 0; i < sc.out.size() / sizeof(float); ++i) {
      num += (double(x[i]) - y[i]) * (double(x[i]) - y[i]);
      den += double(x[i]) * x[i];
    }
    EXPECT_LE(std::sqrt(num / den), 1e-6) << AlgoName(a);
  }
}

// The precision modes of SPEC 6c with the per-channel gate, on the vector
// units and on the AMX engine's tiles (emulated on any CPU, the hardware
// where it runs): the operands K e^G, Q e^G, K e^(G_last - G) and the state
// go to the products in the mode's bf16 form, the K side (A, P) stays FP32.
// Tolerances as the scalar gate's (ExpectWithinModeBounds, test_util.h):
// bf16x3 and bf16x4 within twice SPEC 6's limit and within 2x fp32's own
// error, bf16 within 1.5e-2; each (mode, engine) bitwise the same on 1 and
// 3 threads.
class KdaModes : public ::testing::TestWithParam<Precision> {};

std::vector<Engine> KdaEngines() {
  std::vector<Engine> engines = {Engine::kVector, Engine::kAmxEmulated};
  if (AmxHardwareEnabled()) engines.push_back(Engine::kAmx);
  return engines;
}

void CheckMode(const CaseSpec& spec, Precision p, Engine e, Algo a, const std::string& where) {
  const std::string what = where + " " + PrecisionName(p) + " " + EngineName(e) + " " + Describe(spec, a);
  Case c = MakeCase(spec);
  Options opt = c.options();
  opt.algo = a;
  opt.threads = 1;
  const ModeErrors got = RunFp32AndMode(c, opt, p, e);
  if (where == ActiveTarget()) {
    std::printf("%-60s out %.2e (fp32 %.2e)  final_state %.2e (fp32 %.2e)\n", what.c_str(), got.mode.out, got.fp32.out,
                got.mode.state, got.fp32.state);
  }
  ExpectWithinModeBounds(got.mode, got.fp32, p, what);
  Case again = MakeCase(spec);
  opt.precision = p;
  opt.engine = e;
  opt.threads = 3;
  ASSERT_TRUE(cgdr::Run(again.inputs(), again.outputs(), opt).ok()) << what;
  EXPECT_TRUE(c.out == again.out) << what << " out, 1 and 3 threads";
  EXPECT_TRUE(c.final_state == again.final_state) << what << " final_state, 1 and 3 threads";
}

// Odd widths, GQA, an empty sequence and 1-token tails, on every target
// (f32 inputs) and on the dispatched one (bf16 inputs, raw bounded gate,
// l2norm, no initial state, layout kv).
TEST_P(KdaModes, MatchFp64OnEveryEngineAndTarget) {
  const Precision p = GetParam();
  CaseSpec odd = KdaSpec(2, 4, 40, 24, {37, 0, 65, 1}, 960);
  ForEachTarget([&](const std::string& target) {
    for (Engine e : KdaEngines()) {
      for (Algo a : {Algo::kChunk16, Algo::kChunk64}) CheckMode(odd, p, e, a, target);
    }
  });
  CaseSpec more = KdaSpec(1, 2, 97, 33, {70, 1, 0}, 961);
  more.dtype = DType::kBF16;
  more.raw_gate = true;
  more.gate_lower_bound = -5.0;
  more.use_qk_l2norm = true;
  more.has_initial_state = false;
  more.layout = StateLayout::kKV;
  for (Engine e : KdaEngines()) {
    for (Algo a : {Algo::kChunk32, Algo::kChunk128, Algo::kAuto}) CheckMode(more, p, e, a, ActiveTarget());
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, KdaModes, ::testing::Values(Precision::kBf16, Precision::kBf16x3, Precision::kBf16x4),
                         [](const ::testing::TestParamInfo<Precision>& info) { return std::string(PrecisionName(info.param)); });

// The modes differ from fp32 and from one another (the mode reaches the
// products), and a tile engine asked for runs the tiles (the plan says so).
TEST(KdaPrefill, ModesAndEnginesReachThePlan) {
  Case c = MakeCase(KdaSpec(1, 2, 32, 16, {40}, 950));
  Options o = c.options();
  o.algo = Algo::kChunk32;
  std::vector<Bytes> outs;
  for (Precision p : {Precision::kFp32, Precision::kBf16, Precision::kBf16x3}) {
    o.precision = p;
    ASSERT_TRUE(cgdr::Run(c.inputs(), c.outputs(), o).ok());
    for (const Bytes& before : outs) EXPECT_FALSE(before == c.final_state) << PrecisionName(p);
    outs.push_back(c.final_state);
  }
  // 16-bit inputs with precision auto on a tile engine named: bf16x3 on it (SPEC 6c).
  CaseSpec bf16 = KdaSpec(1, 2, 32, 16, {40}, 951);
  bf16.dtype = DType::kBF16;
  Case b = MakeCase(bf16);
  Options auto_tiles = b.options();
  auto_tiles.engine = Engine::kAmxEmulated;
  Plan plan;
  ASSERT_TRUE(PlanFor(b, auto_tiles, &plan));
  EXPECT_EQ(plan.engine, Engine::kAmxEmulated) << PlanToString(plan);
  EXPECT_EQ(plan.precision, Precision::kBf16x3) << PlanToString(plan);
  // With neither named, 16-bit inputs keep fp32 on the vector units: auto
  // does not weigh KDA's untimed tiles (SPEC 10.4), AMX or not.
  auto_tiles.engine = Engine::kAuto;
  ASSERT_TRUE(PlanFor(b, auto_tiles, &plan));
  EXPECT_EQ(plan.precision, Precision::kFp32) << PlanToString(plan);
  EXPECT_EQ(plan.engine, Engine::kVector) << PlanToString(plan);
  // f32 inputs keep fp32 on the vector units under auto (1e-5, SPEC 10.4).
  o.precision = Precision::kAuto;
  o.engine = Engine::kAuto;
  ASSERT_TRUE(PlanFor(c, o, &plan));
  EXPECT_EQ(plan.precision, Precision::kFp32) << PlanToString(plan);
  EXPECT_EQ(plan.engine, Engine::kVector) << PlanToString(plan);
}

TEST(KdaPrefill, BitwiseAcrossThreadCountsAndRuns) {
  CaseSpec s = KdaSpec(2, 4, 72, 56, {90, 0, 130, 1, 40}, 900);
  s.raw_gate = true;
  s.gate_lower_bound = -5.0;
  for (Algo a : KdaAlgos()) {
    Case first = MakeCase(s);
    Options o = first.options();
    o.algo = a;
    o.threads = 1;
    Inputs in = first.inputs();
    Outputs out = first.outputs();
    ASSERT_TRUE(cgdr::Run(in, out, o).ok());
    for (int threads : {2, 3, 1}) {
      Case again = MakeCase(s);
      o.threads = threads;
      Inputs in2 = again.inputs();
      Outputs out2 = again.outputs();
      ASSERT_TRUE(cgdr::Run(in2, out2, o).ok());
      EXPECT_TRUE(first.out == again.out) << AlgoName(a) << " threads=" << threads << " out";
      EXPECT_TRUE(first.final_state == again.final_state) << AlgoName(a) << " threads=" << threads << " final_state";
    }
  }
}

}  // namespace
}  // namespace cgdr::testing
