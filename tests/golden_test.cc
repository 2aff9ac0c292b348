// src/golden: the precision standard's metrics against hand-computed values,
// the golden and benchmark results, the fp16 emulation, and planted NPU
// kernel bugs that must fail the right verdict while the benchmark passes.
// Suite named `golden`.
#include "golden/golden.h"

#include <gtest/gtest.h>

#include <algorithm>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/synthetic.h"
#include "golden/compare.h"
#include "golden/emulate_simd.h"
#include "test_util.h"

namespace cgdr::golden {
namespace {

// ---- metrics on small arrays ------------------------------------------------

ErrorStats StatsOf(const std::vector<float>& x, const std::vector<float>& g, DType t, double eps = 1e-3) {
  ErrorStats s;
  const DTypeThresholds th = ThresholdsFor(t);
  for (size_t i = 0; i < x.size(); ++i) s.Add(x[i], g[i], static_cast<int64_t>(i), eps, th);
  return s;
}

TEST(golden, MetricsByHand) {
  // bf16 thresholds: |g| < 2^-8 is small (index 3), an error there is |x - g| > 2^-16.
  const std::vector<float> g{1.0f, -2.0f, 0.5f, 0.001f, 4.0f};
  const std::vector<float> x{1.0f + 0x1p-7f, -2.0f, 0.5f - 0x1p-7f, 0.00125f, 4.5f};
  const ErrorStats s = StatsOf(x, g, DType::kBF16);
  EXPECT_EQ(s.count, 5);
  EXPECT_EQ(s.normal, 4);
  EXPECT_EQ(s.small, 1);
  EXPECT_EQ(s.small_errors, 1);  // |0.00125 - 0.001| = 2.5e-4 > 2^-16
  const double rel0 = 0x1p-7 / 1.001, rel2 = 0x1p-7 / 0.501, rel4 = 0.5 / 4.001;
  EXPECT_DOUBLE_EQ(s.mare(), rel4);
  EXPECT_EQ(s.max_rel_at, 4);
  EXPECT_NEAR(s.mere(), (rel0 + 0.0 + rel2 + rel4) / 4.0, 1e-15);
  EXPECT_NEAR(s.rmse(), std::sqrt((0x1p-14 + 0x1p-14 + 0.25) / 4.0), 1e-15);
  EXPECT_DOUBLE_EQ(s.max_abs, 0.5);
  EXPECT_EQ(s.max_abs_at, 4);
  double dot = 0, xx = 0, gg = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    dot += double(x[i]) * g[i];
    xx += double(x[i]) * x[i];
    gg += double(g[i]) * g[i];
  }
  EXPECT_NEAR(s.cosine(), dot / std::sqrt(xx * gg), 1e-15);
  // The same with f32 thresholds: 0.001 >= 2^-14 is a normal value.
  EXPECT_EQ(StatsOf(x, g, DType::kF32).normal, 5);
  // eps 0: plain |x - g| / |g|.
  EXPECT_DOUBLE_EQ(StatsOf(x, g, DType::kBF16, 0.0).mare(), 0.125);
}

TEST(golden, RatiosUseFlooredDenominators) {
  const std::vector<float> g{1.0f, 2.0f, 4.0f, 8.0f};
  const std::vector<float> exact = g;
  const std::vector<float> off{1.0f + 0x1p-6f, 2.0f, 4.0f, 8.0f};
  const DTypeThresholds th = ThresholdsFor(DType::kBF16);
  EXPECT_EQ(th.floor, 0x1p-8);
  const ErrorStats a = StatsOf(off, g, DType::kBF16), b = StatsOf(exact, g, DType::kBF16);
  const Ratios r = RatiosOf(a, b, th);
  // The benchmark is exact: every denominator is its floor (2^-8; RMSE's 2^-8 times golden's RMS).
  EXPECT_NEAR(r.mare, (0x1p-6 / 1.001) / 0x1p-8, 1e-12);
  EXPECT_NEAR(r.mere, (0x1p-6 / 1.001 / 4.0) / 0x1p-8, 1e-12);
  EXPECT_NEAR(r.rmse, std::sqrt(0x1p-12 / 4.0) / (0x1p-8 * std::sqrt((1.0 + 4 + 16 + 64) / 4.0)), 1e-12);
  EXPECT_EQ(r.small, 0.0);
  // An exact actual against an exact benchmark: 0, whatever the floors.
  EXPECT_EQ(RatiosOf(b, b, th).mare, 0.0);
}

TEST(golden, LevelsAndNonFinite) {
  ErrorStats a, b;
  b.normal = a.normal = 10;
  b.sum_rel = 10 * 0.01;   // MERE 0.01, well above the floor
  a.sum_rel = 10 * 0.013;  // ratio 1.3: passes L0 (2) and L1 (1.5), fails L2 (1.2)
  const DTypeThresholds th = ThresholdsFor(DType::kBF16);
  const Ratios r = RatiosOf(a, b, th);
  EXPECT_NEAR(r.mere, 1.3, 1e-12);
  std::string why;
  EXPECT_TRUE(Passes(a, b, r, 0, &why));
  EXPECT_TRUE(Passes(a, b, r, 1, &why));
  EXPECT_FALSE(Passes(a, b, r, 2, &why));
  EXPECT_EQ(why, "MERE ratio 1.3 > 1.2");
  // Small-value errors: 5 against the benchmark's 2 is a ratio of 2.5 > 2; against 0 the denominator is 1.
  a.small_errors = 5;
  b.small_errors = 2;
  EXPECT_FALSE(Passes(a, b, RatiosOf(a, b, th), 0, &why));
  EXPECT_NE(why.find("small-value ratio 2.5 > 2"), std::string::npos) << why;
  // A NaN where golden is finite fails every level.
  const ErrorStats n = StatsOf({1.0f, NAN}, {1.0f, 1.0f}, DType::kBF16),
                   ok = StatsOf({1.0f, 1.0f}, {1.0f, 1.0f}, DType::kBF16);
  EXPECT_EQ(n.nonfinite, 1);
  EXPECT_FALSE(Passes(n, ok, RatiosOf(n, ok, th), 0, &why));
  EXPECT_EQ(why, "1 non-finite values");
  // Matching non-finite values are not errors.
  EXPECT_EQ(StatsOf({INFINITY, NAN}, {INFINITY, NAN}, DType::kBF16).nonfinite, 0);
}

// The emulation's vector rounding is core/dtype.h's conversion there and back,
// bit for bit, on every target: ties, subnormals, overflow, infinities.
TEST(golden, RoundTo16IsTheScalarConversion) {
  std::vector<float> x;
  for (uint32_t e = 0; e < 256; ++e) {  // every exponent, with significands at and around the tie points
    for (uint32_t m : {0u, 1u, 0xFFFu, 0x1000u, 0x1001u, 0x2000u, 0x3000u, 0x7FFFu, 0x8000u, 0x8001u, 0x18000u,
                       0x7FFFFFu, 0x400000u, 0x123456u}) {
      for (uint32_t sign : {0u, 0x80000000u}) x.push_back(F32FromBits(sign | (e << 23) | m));
    }
  }
  for (float v : {65504.0f, 65519.99f, 65520.0f, 0x1p-24f, 0x1p-25f, 0x1.8p-25f, 0x1p-14f, 0x1.ffcp-15f})
    x.push_back(v);
  testing::ForEachTarget([&](const std::string& target) {
    for (bool f16 : {false, true}) {
      std::vector<float> r = x;
      RoundTo16(r.data(), static_cast<int64_t>(r.size()), f16);
      for (size_t i = 0; i < x.size(); ++i) {
        const float want = f16 ? F16ToF32(F32ToF16(x[i])) : BF16ToF32(F32ToBF16(x[i]));
        if (std::isnan(want)) {
          EXPECT_TRUE(std::isnan(r[i]));
        } else {
          EXPECT_EQ(F32Bits(r[i]), F32Bits(want)) << target << (f16 ? " f16 " : " bf16 ") << std::hexfloat << x[i];
        }
      }
    }
  });
}

// ---- golden, benchmark, emulation, faults on generated cases ----------------

struct Results {
  Case c;
  OwnedOutputs golden, bench;
};

CaseSpec SmallSpec(DType dt = DType::kBF16) {
  CaseSpec s;
  s.Nk = 2;
  s.Nv = 4;
  s.Dk = 32;
  s.Dv = 32;
  s.lens = {200, 0, 137};
  s.dtype = dt;
  s.state_dtype = dt;
  s.seed = 7;
  return GenerateSpec(Distribution::kDomain, s, true);
}

Results Compute(const CaseSpec& spec, const Profile& prof) {
  Results r{MakeCase(spec), {}, {}};
  const Options opt = r.c.options();
  Status s = ComputeGolden(r.c.inputs(), opt, &r.golden);
  EXPECT_TRUE(s.ok()) << s.message();
  s = ComputeBenchmark(r.c.inputs(), opt, prof, &r.bench);
  EXPECT_TRUE(s.ok()) << s.message();
  return r;
}

CompareReport CompareWith(const Results& r, const Outputs& actual) {
  CompareOptions opt;
  opt.seq_lens.assign(r.c.seq_lens.begin(), r.c.seq_lens.end());
  CompareReport rep;
  const Status s = Compare(r.golden.views, r.bench.views, actual, opt, &rep);
  EXPECT_TRUE(s.ok()) << s.message();
  return rep;
}

const TensorReport& Tensor(const CompareReport& r, const std::string& name) {
  for (const auto& t : r.tensors) {
    if (t.name == name) return t;
  }
  ADD_FAILURE() << "no tensor " << name;
  return r.tensors.front();
}

int64_t WorstHead(const TensorReport& t) {
  const Part* worst = &t.heads.front();
  for (const auto& h : t.heads) worst = h.rmse_ratio > worst->rmse_ratio ? &h : worst;
  return worst->head;
}

TEST(golden, GoldenIsTheExactPathCheckedInFP64) {
  Results r = Compute(SmallSpec(), Profile{});
  EXPECT_EQ(r.golden.views.out.dtype, DType::kF32);
  EXPECT_EQ(r.golden.views.final_state.dtype, DType::kF32);
  EXPECT_EQ(r.bench.views.out.dtype, DType::kBF16);
  EXPECT_EQ(r.bench.views.final_state.dtype, DType::kBF16);
  for (int64_t h : {0, 3}) {
    HeadCheck hc;
    ASSERT_TRUE(CheckGoldenHead(r.c.inputs(), r.c.options(), r.golden.views, h, &hc).ok());
    EXPECT_LE(hc.out_err, 2e-5) << "head " << h;  // SPEC 6, f32
    EXPECT_LE(hc.state_err, 2e-5) << "head " << h;
  }
}

TEST(golden, BenchmarkPassesAgainstItselfAndTheEmulationAgrees) {
  for (bool kv_l2norm : {false, true}) {
    SCOPED_TRACE(kv_l2norm ? "layout kv, l2norm" : "layout vk");
    CaseSpec spec = SmallSpec();
    if (kv_l2norm) {
      spec.layout = StateLayout::kKV;
      spec.use_qk_l2norm = true;
    }
    Results r = Compute(spec, Profile{Operands::kBf16, Engine::kKernels});
    const CompareReport self = CompareWith(r, r.bench.views);
    for (const auto& t : self.tensors) EXPECT_TRUE(t.pass[2]) << t.name << ": " << t.why[2];
    // The emulation of the same profile (the NPU's association, its own code) is as accurate.
    OwnedOutputs emu;
    ASSERT_TRUE(ComputeBenchmark(r.c.inputs(), r.c.options(), Profile{Operands::kBf16, Engine::kEmulation}, &emu).ok());
    const CompareReport cross = CompareWith(r, emu.views);
    for (const auto& t : cross.tensors) {
      EXPECT_TRUE(t.pass[2]) << t.name << ": " << t.why[2];
      EXPECT_NEAR(t.actual.rmse() / t.bench.rmse(), 1.0, 0.25) << t.name;  // same rounding, other association
    }
  }
}

TEST(golden, Fp16OperandsAreMoreAccurateThanBf16) {
  Results r = Compute(SmallSpec(DType::kF16), Profile{Operands::kBf16, Engine::kKernels});
  OwnedOutputs f16;
  ASSERT_TRUE(ComputeBenchmark(r.c.inputs(), r.c.options(), Profile{Operands::kF16, Engine::kAuto}, &f16).ok());
  EXPECT_EQ(f16.views.out.dtype, DType::kF16);
  const CompareReport rep = CompareWith(r, f16.views);
  for (const auto& t : rep.tensors) {
    EXPECT_LT(t.actual.rmse(), 0.5 * t.bench.rmse()) << t.name << ": 3 more significand bits in the products";
    EXPECT_TRUE(t.pass[2]) << t.name;
  }
  // The kernels have no fp16 operands: asking for them is an error, not a silent bf16.
  OwnedOutputs k;
  const Status s = ComputeBenchmark(r.c.inputs(), r.c.options(), Profile{Operands::kF16, Engine::kKernels}, &k);
  EXPECT_FALSE(s.ok());
}

TEST(golden, EmulationDoesNotDependOnThreads) {
  CaseSpec spec = SmallSpec();
  Case c = MakeCase(spec);
  OwnedOutputs one, two;
  Options opt = c.options();
  opt.threads = 1;
  ASSERT_TRUE(ComputeBenchmark(c.inputs(), opt, Profile{Operands::kF16, Engine::kEmulation}, &one).ok());
  opt.threads = 2;
  ASSERT_TRUE(ComputeBenchmark(c.inputs(), opt, Profile{Operands::kF16, Engine::kEmulation}, &two).ok());
  EXPECT_EQ(std::memcmp(one.views.out.data, two.views.out.data, one.views.out.numel() * 2), 0);
  EXPECT_EQ(std::memcmp(one.views.final_state.data, two.views.final_state.data, one.views.final_state.numel() * 2), 0);
}

// Every planted fault fails the verdict where the bug shows, at every level,
// while the benchmark passes; the breakdown points at the bug.
class Faults : public ::testing::TestWithParam<Engine> {};

TEST_P(Faults, FailTheRightVerdict) {
  const Profile prof{Operands::kBf16, GetParam()};
  Results r = Compute(SmallSpec(), prof);
  const auto faulty = [&](Fault f) {
    OwnedOutputs o;
    const Status s = ComputeFaulty(r.c.inputs(), r.c.options(), prof, f, &o);
    EXPECT_TRUE(s.ok()) << FaultName(f) << ": " << s.message();
    return CompareWith(r, o.views);
  };
  const CompareReport none = faulty(Fault::kNone);
  EXPECT_TRUE(none.pass());

  // Dropped state: out fails; the worst chunk is where the state was lost
  // (sequence 0 of 200 tokens: chunks 0-3, the state dropped at chunk 2).
  const CompareReport dropped = faulty(Fault::kDroppedState);
  const TensorReport& d_out = Tensor(dropped, "out");
  EXPECT_FALSE(d_out.pass[0]) << d_out.why[0];
  EXPECT_EQ(d_out.cells.front().sequence, 0);
  EXPECT_EQ(d_out.cells.front().chunk, 2);

  // Tail mask: stale rows reach only the state; out passes, final_state fails
  // for the two sequences with a partial tail after a full chunk.
  const CompareReport tail = faulty(Fault::kTailMask);
  EXPECT_TRUE(Tensor(tail, "out").pass[2]);
  const TensorReport& t_state = Tensor(tail, "final_state");
  EXPECT_FALSE(t_state.pass[0]) << t_state.why[0];
  EXPECT_GT(t_state.sequences[0].rmse_ratio, 10.0);
  EXPECT_EQ(t_state.sequences[1].rmse_ratio, 0.0);  // the empty sequence
  EXPECT_GT(t_state.sequences[2].rmse_ratio, 10.0);

  // Swapped heads: both tensors fail, heads 0 and 1 are the worst, the others pass.
  const CompareReport swapped = faulty(Fault::kSwappedHeads);
  for (const char* name : {"out", "final_state"}) {
    const TensorReport& t = Tensor(swapped, name);
    EXPECT_FALSE(t.pass[0]) << name;
    EXPECT_LE(WorstHead(t), 1) << name;
    EXPECT_LT(t.heads[2].rmse_ratio, 1.5) << name;
  }

  // g with the wrong sign: growth instead of decay.
  const CompareReport sign = faulty(Fault::kGSign);
  EXPECT_FALSE(Tensor(sign, "out").pass[0]);
  EXPECT_FALSE(Tensor(sign, "final_state").pass[0]);
}

INSTANTIATE_TEST_SUITE_P(golden, Faults, ::testing::Values(Engine::kKernels, Engine::kEmulation),
                         [](const auto& info) { return std::string(EngineName(info.param)); });

TEST(golden, FaultsThatCannotApplySaySo) {
  CaseSpec spec = SmallSpec();
  spec.lens = {64};
  spec.Nv = 2;
  spec.Nk = 1;
  spec.has_g = false;
  Case c = MakeCase(spec);
  OwnedOutputs o;
  const Status dropped = ComputeFaulty(c.inputs(), c.options(), Profile{}, Fault::kDroppedState, &o);
  EXPECT_NE(dropped.message().find("needs a sequence longer than one chunk"), std::string::npos) << dropped.message();
  const Status tail = ComputeFaulty(c.inputs(), c.options(), Profile{}, Fault::kTailMask, &o);
  EXPECT_NE(tail.message().find("not a multiple of 64"), std::string::npos) << tail.message();
  EXPECT_EQ(ComputeFaulty(c.inputs(), c.options(), Profile{}, Fault::kGSign, &o).message(), "fault g-sign: needs g");
}

// KDA's per-channel gate (docs/SPEC.md 10) has no Ascend NPU kernel: every
// entry of the golden path says so, naming the gate, and writes nothing.
TEST(golden, PerChannelGateHasNoNpuPort) {
  for (bool raw : {false, true}) {
    CaseSpec spec = SmallSpec();
    spec.per_channel_gate = true;
    spec.raw_gate = raw;
    Case c = MakeCase(spec);
    const std::string named = std::string(raw ? "a" : "g") + ": a per-channel gate [T, Nv, Dk] (KDA";
    OwnedOutputs o;
    for (const Status& s : {ComputeGolden(c.inputs(), c.options(), &o),
                            ComputeBenchmark(c.inputs(), c.options(), Profile{}, &o),
                            ComputeBenchmark(c.inputs(), c.options(), Profile{Operands::kBf16, Engine::kKernels}, &o),
                            ComputeFaulty(c.inputs(), c.options(), Profile{}, Fault::kSwappedHeads, &o)}) {
      EXPECT_FALSE(s.ok());
      EXPECT_NE(s.message().find(named), std::string::npos) << s.message();
    }
    HeadCheck h;
    const Status head = CheckGoldenHead(c.inputs(), c.options(), c.outputs(), 0, &h);
    EXPECT_NE(head.message().find(named), std::string::npos) << head.message();
    std::fill(c.out.begin(), c.out.end(), uint8_t{0xAB});  // the caller's outputs: left as they were
    const Bytes before = c.out;
    for (const Status& s : {GoldenInto(c.inputs(), c.options(), c.outputs()),
                            BenchmarkInto(c.inputs(), c.options(), Profile{}, c.outputs()),
                            FaultyInto(c.inputs(), c.options(), Profile{}, Fault::kNone, c.outputs())}) {
      EXPECT_NE(s.message().find(named), std::string::npos) << s.message();
    }
    EXPECT_TRUE(c.out == before);
  }
}

TEST(golden, CompareRejectsMismatchedResults) {
  Results r = Compute(SmallSpec(), Profile{});
  CompareOptions opt;
  CompareReport rep;
  Outputs cut = r.bench.views;
  cut.out.shape[0] -= 1;
  Status s = Compare(r.golden.views, r.bench.views, cut, opt, &rep);
  EXPECT_NE(s.message().find("golden: 'out' has shape [337, 4, 32], actual has [336, 4, 32]"), std::string::npos)
      << s.message();
  opt.seq_lens = {100, 0, 100};
  s = Compare(r.golden.views, r.bench.views, r.bench.views, opt, &rep);
  EXPECT_NE(s.message().find("seq_lens: expected the lengths to sum to T = 337"), std::string::npos) << s.message();
  opt.seq_lens = {337};
  s = Compare(r.golden.views, r.bench.views, r.bench.views, opt, &rep);
  EXPECT_NE(s.message().find("final_state holds 3"), std::string::npos) << s.message();
  // An actual without final_state is judged on out alone.
  Outputs out_only = r.bench.views;
  out_only.final_state = TensorView();
  opt.seq_lens.clear();
  ASSERT_TRUE(Compare(r.golden.views, r.bench.views, out_only, opt, &rep).ok());
  EXPECT_EQ(rep.tensors.size(), 1u);
  EXPECT_FALSE(rep.sequences_known);
}

TEST(golden, ReportJsonHasTheStandardsFields) {
  Results r = Compute(SmallSpec(), Profile{});
  const nlohmann::json j = ReportJson(CompareWith(r, r.bench.views));
  EXPECT_EQ(j["level"], "L1");
  EXPECT_TRUE(j["pass"].get<bool>());
  const auto& out = j["tensors"]["out"];
  for (const char* k : {"mare", "mere", "rmse", "small_value_errors", "cosine_similarity", "max_abs_error",
                        "max_abs_index", "max_rel_error", "max_rel_index"}) {
    EXPECT_TRUE(out["actual"].contains(k)) << k;
  }
  EXPECT_EQ(out["actual"]["max_abs_index"].size(), 3u);  // [t, head, j]
  EXPECT_EQ(out["dtype"], "bf16");
  EXPECT_EQ(out["sequences"].size(), 3u);
  EXPECT_EQ(out["heads"].size(), 4u);
  EXPECT_TRUE(out["levels"]["L2"]["pass"].get<bool>());
  EXPECT_EQ(j["tensors"]["final_state"]["actual"]["max_abs_index"].size(), 4u);
}

TEST(golden, CastCaseGivesTheNpuDtypes) {
  CaseSpec spec = SmallSpec(DType::kF32);
  spec.has_initial_state = false;
  Case c = MakeCase(spec);
  OwnedInputs o;
  ASSERT_TRUE(CastCase(c.inputs(), c.options(), DType::kBF16, DType::kF32, &o).ok());
  EXPECT_EQ(o.views.query.dtype, DType::kBF16);
  EXPECT_EQ(o.views.g.dtype, DType::kF32);       // g stays
  ASSERT_TRUE(o.views.initial_state.present());  // zero, so that final_state comes out in f32
  EXPECT_EQ(o.views.initial_state.dtype, DType::kF32);
  OwnedOutputs b;
  ASSERT_TRUE(ComputeBenchmark(o.views, c.options(), Profile{}, &b).ok());
  EXPECT_EQ(b.views.out.dtype, DType::kBF16);
  EXPECT_EQ(b.views.final_state.dtype, DType::kF32);
}

}  // namespace
}  // namespace cgdr::golden
