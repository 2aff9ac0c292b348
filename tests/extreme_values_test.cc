// Issue "hardening" 4: extreme but legal values. Each test compares with the
// FP64 reference under SPEC 6 limits or with a stated exact expectation, and
// every output must be finite unless the FP32 range is genuinely exceeded, in
// which case check_values must say so.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>

#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

#include "cgdr/cgdr.hpp"
#include "core/dtype.h"
#include "test_util.h"

namespace cgdr::testing {
namespace {

// Sets element i of a buffer of dtype t to f(i).
void Fill(Bytes& buf, DType t, const std::function<float(int64_t)>& f) {
  const int64_t n = static_cast<int64_t>(buf.size() / DTypeSize(t));
  for (int64_t i = 0; i < n; ++i) StoreFromF32(buf.data(), t, i, f(i));
}

// Multiplies every element by s (in f32, then rounded to t).
void Scale(Bytes& buf, DType t, float s) {
  const int64_t n = static_cast<int64_t>(buf.size() / DTypeSize(t));
  for (int64_t i = 0; i < n; ++i) StoreFromF32(buf.data(), t, i, LoadAsF32(buf.data(), t, i) * s);
}

int64_t FirstNonFinite(const TensorView& v) {
  for (int64_t i = 0; i < v.numel(); ++i) {
    if (!std::isfinite(LoadAsF32(v.data, v.dtype, i))) return i;
  }
  return -1;
}

// Run with algo `a` must succeed, give finite outputs and meet SPEC 6.
void ExpectGood(Case& c, Algo a, const std::string& what, Options opt) {
  opt.algo = a;
  const Errors e = RunAndCompare(c, opt);
  const std::string label = what + " " + AlgoName(a);
  EXPECT_EQ(FirstNonFinite(c.outputs().out), -1) << label << ": non-finite out";
  if (c.spec.want_final_state) {
    EXPECT_EQ(FirstNonFinite(c.outputs().final_state), -1) << label << ": non-finite state";
  }
  EXPECT_LE(e.out, e.out_limit) << label;
  EXPECT_LE(e.state, e.state_limit) << label;
}
void ExpectGood(Case& c, Algo a, const std::string& what) { ExpectGood(c, a, what, c.options()); }

CaseSpec Base() {
  CaseSpec s;
  s.Nk = 1; s.Nv = 2; s.Dk = 24; s.Dv = 20; s.lens = {150, 7};
  return s;
}

// Decays so strong that exp(G) underflows to 0 inside one chunk, and an
// in-chunk prefix sum that would overflow FP32 if it were ever formed as a
// difference of the wrong sign (SPEC 4 step 3: j > i must never be read).
const float kVeryNegativeG[] = {-87.5f, -200.0f, -1e4f, -1e30f, -1e37f, -FLT_MAX};

// Every third pair of tokens decays hard; the rest keep a small decay.
Case VeryNegativeGCase(float g) {
  Case c = MakeCase(Base());
  Fill(c.g, DType::kF32, [&](int64_t i) { return (i / 2) % 3 == 0 ? g : -0.1f; });
  return c;
}

std::vector<Algo> ChunkedAlgos() { return {Algo::kChunk16, Algo::kChunk32, Algo::kChunk64}; }

// The recurrence takes exp(g) token by token: exact to FP32 for any g.
TEST(ExtremeValues, VeryNegativeGRecurrent) {
  ForEachTarget([&](const std::string& target) {
    for (float g : kVeryNegativeG) {
      Case c = VeryNegativeGCase(g);
      ExpectGood(c, Algo::kRecurrent, target + " g=" + std::to_string(g));
    }
  });
}

// Chunked formulations: finite outputs for every finite decay.
TEST(ExtremeValues, VeryNegativeGChunkedStaysFinite) {
  ForEachTarget([&](const std::string& target) {
    for (float g : kVeryNegativeG) {
      for (Algo a : ChunkedAlgos()) {
        Case c = VeryNegativeGCase(g);
        Options opt = c.options();
        opt.algo = a;
        ASSERT_TRUE(cgdr::Run(c.inputs(), c.outputs(), opt).ok());
        EXPECT_EQ(FirstNonFinite(c.outputs().out), -1) << target << " " << AlgoName(a) << " g=" << g;
        EXPECT_EQ(FirstNonFinite(c.outputs().final_state), -1) << target << " " << AlgoName(a) << " g=" << g;
      }
    }
  });
}

// Regression (found by this test, fixed in the kernels by summing the decay
// exponents D_ij = g_(j+1) + ... + g_i directly): with exp(G_i - G_j) taken
// from FP32 prefix sums, one strong decay made |G| large and later small
// decays lost their digits (g = -200: out error 7.7e-5 with chunk64; -1e4:
// 4e-3; -1e30: 10%), and 64 tokens of -FLT_MAX overflowed G to -Inf, giving
// NaN from (-Inf) - (-Inf).
TEST(ExtremeValues, VeryNegativeGChunkedAccuracy) {
  ForEachTarget([&](const std::string& target) {
    for (float g : kVeryNegativeG) {
      for (Algo a : ChunkedAlgos()) {
        Case c = VeryNegativeGCase(g);
        ExpectGood(c, a, target + " g=" + std::to_string(g));
      }
    }
  });
}

TEST(ExtremeValues, AllTokensAtMostNegativeG) {  // regression: was NaN, see above
  for (Algo a : AllAlgos()) {
    Case c = MakeCase(Base());
    Fill(c.g, DType::kF32, [](int64_t) { return -FLT_MAX; });
    ExpectGood(c, a, "g=-FLT_MAX everywhere");
  }
}

// g = 0 exactly (and -0) is the plain delta rule: the same as no g at all.
TEST(ExtremeValues, ZeroGIsThePlainDeltaRule) {
  for (Algo a : AllAlgos()) {
    Case with_g = MakeCase(Base());
    Fill(with_g.g, DType::kF32, [](int64_t i) { return i % 2 ? 0.0f : -0.0f; });
    ExpectGood(with_g, a, "g=0");
    Case no_g = with_g;  // identical q, k, v, beta, state; g dropped
    no_g.spec.has_g = false;
    ExpectGood(no_g, a, "no g");
    const TensorView x = with_g.outputs().out, y = no_g.outputs().out;
    double worst = 0.0;
    for (int64_t i = 0; i < x.numel(); ++i) {
      worst = std::max(worst, std::abs(double(LoadAsF32(x.data, x.dtype, i)) - LoadAsF32(y.data, y.dtype, i)));
    }
    EXPECT_LE(worst, 1e-6) << AlgoName(a) << ": g = 0 differs from no g";
  }
}

// beta = 0: no update ever happens, so final_state == initial_state exactly
// and out[t, h] = scale * S0^T q[t] (stated expectation, computed here).
TEST(ExtremeValues, ZeroBetaLeavesTheStateAndReadsIt) {
  for (StateLayout layout : {StateLayout::kVK, StateLayout::kKV}) {
    for (Algo a : AllAlgos()) {
      CaseSpec s = Base();
      s.has_g = false;
      s.layout = layout;
      Case c = MakeCase(s);
      Fill(c.beta, DType::kF32, [](int64_t) { return 0.0f; });
      const Options opt = c.options();
      Options run_opt = opt;
      run_opt.algo = a;
      ASSERT_TRUE(cgdr::Run(c.inputs(), c.outputs(), run_opt).ok());
      const std::string label = std::string(AlgoName(a)) + " " + StateLayoutName(layout);
      EXPECT_EQ(c.final_state, c.initial_state) << label << ": state changed with beta = 0";

      const auto* q = reinterpret_cast<const float*>(c.query.data());
      const auto* S = reinterpret_cast<const float*>(c.initial_state.data());
      const auto* o = reinterpret_cast<const float*>(c.out.data());
      const double scale = 1.0 / std::sqrt(double(s.Dk));
      double num = 0, den = 0;
      int64_t t0 = 0;
      for (size_t b = 0; b < s.lens.size(); ++b) {
        for (int64_t t = t0; t < t0 + s.lens[b]; ++t) {
          for (int64_t h = 0; h < s.Nv; ++h) {
            for (int64_t j = 0; j < s.Dv; ++j) {
              double want = 0;
              for (int64_t i = 0; i < s.Dk; ++i) {
                const int64_t head = (int64_t(b) * s.Nv + h) * s.Dk * s.Dv;
                const int64_t at = layout == StateLayout::kVK ? j * s.Dk + i : i * s.Dv + j;
                want += double(S[head + at]) * q[t * s.Dk + i];  // Nk = 1: every head reads q head 0
              }
              want *= scale;
              const double d = o[(t * s.Nv + h) * s.Dv + j] - want;
              num += d * d;
              den += want * want;
            }
          }
        }
        t0 += s.lens[b];
      }
      EXPECT_LE(std::sqrt(num / den), 2e-6) << label << ": out != scale * S0^T q";
    }
  }
}

TEST(ExtremeValues, BetaOne) {
  ForEachTarget([&](const std::string& target) {
    for (Algo a : AllAlgos()) {
      Case c = MakeCase(Base());
      Fill(c.beta, DType::kF32, [](int64_t) { return 1.0f; });
      ExpectGood(c, a, target + " beta=1");
    }
  });
}

// Keys with tiny norms (their outer products underflow in FP32) stay accurate.
TEST(ExtremeValues, TinyKeyNorms) {
  for (float norm : {1e-6f, 1e-18f, 1e-30f}) {
    for (Algo a : AllAlgos()) {
      Case c = MakeCase(Base());
      Scale(c.key, DType::kF32, norm);
      ExpectGood(c, a, "|k|=" + std::to_string(norm));
    }
  }
}

// Keys of norm 1e20 without l2norm: k k^T overflows FP32. The FP64 answer is
// finite, FP32 cannot represent the computation, so with check_values the
// API must report it rather than hand back Inf/NaN as a result.
TEST(ExtremeValues, HugeKeyNormsAreReportedByCheckValues) {
  for (Algo a : AllAlgos()) {
    Case c = MakeCase(Base());
    Scale(c.key, DType::kF32, 1e20f);
    Options opt = c.options();
    opt.algo = a;
    opt.check_values = true;
    const Status s = cgdr::Run(c.inputs(), c.outputs(), opt);
    ASSERT_FALSE(s.ok()) << AlgoName(a) << ": non-finite outputs from finite inputs were not reported";
    EXPECT_NE(s.message().find("non-finite"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("check_values"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find(" at index ["), std::string::npos) << s.message();  // [t, head, j] as the input checks print
    EXPECT_EQ(s.message().find('\n'), std::string::npos) << s.message();
    // Without check_values the call succeeds (the caller opted out of the scan).
    opt.check_values = false;
    EXPECT_TRUE(cgdr::Run(c.inputs(), c.outputs(), opt).ok()) << AlgoName(a);
  }
}

// With use_qk_l2norm the rows are normalised first, so any finite row gives
// a unit row: keys and queries of norm 1e20 must give the same result as
// norm 1 (the FP64 reference normalises exactly).
// Regression (found by this test, fixed by FP64 sums of squares): the sums
// of x^2 were FP32 and overflowed to Inf above a row norm of ~1.8e19, so the
// row became 0 and the result was silently wrong.
TEST(ExtremeValues, HugeRowsWithL2Norm) {
  for (Algo a : AllAlgos()) {
    CaseSpec s = Base();
    s.use_qk_l2norm = true;
    Case c = MakeCase(s);
    Scale(c.key, DType::kF32, 1e20f);
    Scale(c.query, DType::kF32, 1e20f);
    ExpectGood(c, a, "l2norm |k|=|q|=1e20");
  }
}

// f16 inputs at the largest finite value and the smallest subnormal; g and
// beta in f16 too. The scale keeps the answer inside f16 range, so every
// output must be finite and within SPEC 6 of FP64.
TEST(ExtremeValues, F16AtMaxAndMinSubnormal) {
  const float kMax = 65504.0f, kTiny = 5.9604644775390625e-8f;  // 2^-24
  ForEachTarget([&](const std::string& target) {
    for (Algo a : AllAlgos()) {
      CaseSpec s = Base();
      s.dtype = DType::kF16;
      s.g_dtype = DType::kF16;
      s.state_dtype = DType::kF32;
      s.use_qk_l2norm = true;
      Case c = MakeCase(s);
      const auto sign = [](int64_t i) { return (i * 7919) % 3 ? 1.0f : -1.0f; };
      Fill(c.query, DType::kF16, [&](int64_t i) { return sign(i) * (i % 4 == 0 ? kMax : i % 4 == 1 ? kTiny : 1.0f); });
      Fill(c.key, DType::kF16, [&](int64_t i) { return sign(i + 1) * (i % 5 == 0 ? kMax : i % 5 == 1 ? kTiny : 0.5f); });
      Fill(c.value, DType::kF16, [&](int64_t i) { return sign(i + 2) * (i % 3 == 0 ? kMax : kTiny * (i % 7)); });
      Fill(c.beta, DType::kF16, [&](int64_t i) { return i % 3 == 0 ? kTiny : i % 3 == 1 ? 1.0f : 0.5f; });
      Fill(c.g, DType::kF16, [&](int64_t i) { return i % 3 == 0 ? -kMax : i % 3 == 1 ? -kTiny : -0.0f; });
      Options opt = c.options();
      opt.scale = 1e-3;  // keeps |out| well below 65504
      ExpectGood(c, a, target + " f16 extremes", opt);
    }
  });
}

// Subnormal f16 values alone: the f16 loads must not flush them to zero.
TEST(ExtremeValues, F16SubnormalInputsAreNotFlushed) {
  ForEachTarget([&](const std::string& target) {
    for (Algo a : AllAlgos()) {
      CaseSpec s = Base();
      s.dtype = DType::kF16;
      s.state_dtype = DType::kF32;
      s.has_initial_state = false;
      s.use_qk_l2norm = true;  // subnormal q, k rows normalise to unit rows
      Case c = MakeCase(s);
      Fill(c.query, DType::kF16, [](int64_t i) { return (i % 11 + 1) * 5.9604644775390625e-8f; });
      Fill(c.key, DType::kF16, [](int64_t i) { return ((i * 3) % 13 + 1) * 5.9604644775390625e-8f; });
      ExpectGood(c, a, target + " f16 subnormal q, k");
    }
  });
}

TEST(ExtremeValues, SingleToken) {
  for (const auto& lens : {std::vector<int32_t>{1}, std::vector<int32_t>{0, 1, 0}}) {
    for (Algo a : AllAlgos()) {
      CaseSpec s = Base();
      s.lens = lens;
      Case c = MakeCase(s);
      ExpectGood(c, a, "T=1");
    }
  }
}

TEST(ExtremeValues, UnitHeadDims) {
  ForEachTarget([&](const std::string& target) {
    for (StateLayout layout : {StateLayout::kVK, StateLayout::kKV}) {
      for (Algo a : AllAlgos()) {
        CaseSpec s;
        s.Nk = 1; s.Nv = 2; s.Dk = 1; s.Dv = 1; s.lens = {70, 1, 0};
        s.layout = layout;
        Case c = MakeCase(s);
        ExpectGood(c, a, target + " Dk=Dv=1");
      }
    }
  });
}

TEST(ExtremeValues, ThousandTinySequences) {
  std::mt19937 rng(5);
  CaseSpec s;
  s.Nk = 1; s.Nv = 2; s.Dk = 8; s.Dv = 8;
  s.lens.clear();
  for (int i = 0; i < 1000; ++i) s.lens.push_back(static_cast<int32_t>(rng() % 4));  // 0 .. 3
  for (Algo a : AllAlgos()) {
    Case c = MakeCase(s);
    ExpectGood(c, a, "B=1000");
  }
}

// 200,000 tokens in one sequence: the FP32 state carried across ~3000 chunks
// stays within the f32 limit of SPEC 6.
TEST(ExtremeValues, LongSequence) {
  CaseSpec s;
  s.Nk = 1; s.Nv = 1; s.Dk = 16; s.Dv = 16; s.lens = {200000};
  for (Algo a : {Algo::kAuto, Algo::kRecurrent, Algo::kChunk64}) {
    Case c = MakeCase(s);
    ExpectGood(c, a, "T=200000");
  }
}

}  // namespace
}  // namespace cgdr::testing

#if defined(__x86_64__)
namespace cgdr::testing {
namespace {

// Qwen3-Next's gates (g = -A softplus(a + dt_bias), A up to 16) decay the
// state into the denormal range within a chunk. The kernels flush denormals
// (core/fpenv.h): accurate as SPEC 6 asks, the same bits whether or not the
// caller runs with FTZ/DAZ itself, and the caller's mode restored.
TEST(ExtremeValues, StrongGatesFlushDenormalsWhateverTheCallersMode) {
  CaseSpec s = Base();
  s.Nv = 4;
  s.Dk = s.Dv = 32;
  s.lens = {300};
  std::mt19937 rng(3);
  for (Engine engine : {Engine::kVector, Engine::kAmxEmulated}) {
    for (Algo a : {Algo::kRecurrent, Algo::kChunk16, Algo::kChunk64}) {
      if (engine == Engine::kAmxEmulated && a == Algo::kRecurrent) continue;
      Case plain = MakeCase(s);
      Fill(plain.g, DType::kF32, [&](int64_t i) {
        const double A = 1.0 + 15.0 * static_cast<double>(i % s.Nv) / (s.Nv - 1);
        return static_cast<float>(-A * std::log1p(std::exp(std::normal_distribution<double>(1.0, 1.0)(rng))));
      });
      Case flushed = plain;  // the same inputs, run by a caller in FTZ/DAZ mode
      Options opt = plain.options();
      opt.algo = a;
      opt.engine = engine;
      opt.precision = engine == Engine::kVector ? Precision::kFp32 : Precision::kBf16x3;
      const std::string what = std::string(EngineName(engine)) + " " + AlgoName(a);
      const uint32_t csr = _mm_getcsr();
      const Errors e = RunAndCompare(plain, opt);
      EXPECT_LE(e.out, 2.0 * e.out_limit) << what;
      EXPECT_LE(e.state, 2.0 * e.state_limit) << what;
      EXPECT_EQ(_mm_getcsr(), csr) << what << ": the caller's floating-point mode changed";
      _mm_setcsr(csr | (1u << 15) | (1u << 6));
      ASSERT_TRUE(cgdr::Run(flushed.inputs(), flushed.outputs(), opt).ok());
      EXPECT_EQ(_mm_getcsr(), csr | (1u << 15) | (1u << 6)) << what;
      _mm_setcsr(csr);
      EXPECT_EQ(flushed.out, plain.out) << what;
      EXPECT_EQ(flushed.final_state, plain.final_state) << what;
    }
  }
}
}  // namespace
}  // namespace cgdr::testing
#endif  // __x86_64__
