// Precision modes (Options.precision): fp32, bf16, bf16x3, bf16x4.
//  - accuracy of every mode against the FP64 reference, on odd shapes (Dk=37,
//    Dv=71, 1-token tails, a 0-length sequence, grouped heads), every SIMD
//    target, every chunked formulation, with a tolerance per mode:
//      fp32:          2e-5 (SPEC 6, f32 in/out)
//      bf16x3/bf16x4: 2 x the fp32 tolerance (4e-5)
//      bf16:          1.5e-2 (operands rounded to 8 significant bits: unit
//                     roundoff 2^-9 ~ 2e-3 per operand; measured ~3e-3 to 6e-3)
//  - the vdpbf16ps emulation bit-exact with the hardware instruction (lane by
//    lane, denormals included, and whole runs), where the CPU has AVX512_BF16;
//  - the hi/lo split exact for values whose significand fits 16 bits;
//  - results bitwise identical across thread counts and V tilings in each mode.
#include <gtest/gtest.h>

#include <cfloat>
#include <bit>
#include <cmath>
#include <cstring>
#include <random>

#include <hwy/targets.h>

#include "cgdr/cgdr.hpp"
#include "cgdr/plan.hpp"
#include "core/cpu_features.h"
#include "core/dtype.h"
#include "kernels/kernels.h"
#include "test_util.h"

namespace cgdr::testing {
namespace {

constexpr Precision kModes[] = {Precision::kFp32, Precision::kBf16, Precision::kBf16x3, Precision::kBf16x4};
constexpr Algo kChunked[] = {Algo::kChunk16, Algo::kChunk32, Algo::kChunk64};


CaseSpec OddSpec(DType dt) {
  CaseSpec s;
  s.Nk = 2;
  s.Nv = 4;  // grouped heads: 2 value heads per key head
  s.Dk = 37;
  s.Dv = 71;
  s.lens = {65, 1, 0, 129, 17};  // 1-token tails after 64 and 128, a lone token, an empty sequence
  s.dtype = dt;
  s.state_dtype = DType::kF32;
  s.seed = 11;
  return s;
}

TEST(Precision, NamesParseAndPlan) {
  for (Precision p : kModes) {
    Precision q = Precision::kFp32;
    ASSERT_TRUE(ParsePrecision(PrecisionName(p), &q));
    EXPECT_EQ(q, p);
  }
  Precision q;
  EXPECT_FALSE(ParsePrecision("fp16", &q));
  Case c = MakeCase(OddSpec(DType::kF32));
  Options opt = c.options();
  opt.precision = Precision::kBf16x3;
  Plan plan;
  ASSERT_TRUE(PlanFor(c, opt, &plan));
  EXPECT_EQ(plan.precision, Precision::kBf16x3);
  EXPECT_NE(PlanToString(plan).find("precision=bf16x3"), std::string::npos) << PlanToString(plan);
  Problem p;
  opt.precision = static_cast<Precision>(7);
  const Status s = Validate(c.inputs(), c.outputs(), opt, &p);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("options.precision"), std::string::npos) << s.message();
}

// One test per mode, so ctest runs the modes in parallel. f32 inputs on
// every target; bf16 inputs (bf16 output rounding on top of the mode) on the
// dispatched one. C = 32 shares its code with 16 and 64 (only the inverse's
// depth differs) and runs on the dispatched target only.
class PrecisionAccuracy : public ::testing::TestWithParam<Precision> {};

TEST_P(PrecisionAccuracy, EveryTargetEveryChunkedAlgoOddShapes) {
  const Precision p = GetParam();
  for (DType dt : {DType::kF32, DType::kBF16}) {
    const CaseSpec spec = OddSpec(dt);
    const auto check = [&](const std::string& target, Algo a) {
      Case c = MakeCase(spec);
      Options opt = c.options();
      opt.algo = a;
      opt.threads = 2;
      const ModeErrors e = RunFp32AndMode(c, opt, p, Engine::kAuto);
      // The mode's tolerance over SPEC 6's limit for the stored dtype (out
      // is bf16 for bf16 inputs; the state is f32).
      ExpectWithinModeBounds(e.mode, e.fp32, p, target + " " + AlgoName(a) + " " + PrecisionName(p) + " " + DTypeName(dt));
    };
    if (dt == DType::kF32) {
      ForEachTarget([&](const std::string& target) {
        for (Algo a : {Algo::kChunk16, Algo::kChunk64}) check(target, a);
      });
      check(ActiveTarget(), Algo::kChunk32);
    } else {
      for (Algo a : kChunked) check(ActiveTarget(), a);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, PrecisionAccuracy, ::testing::ValuesIn(kModes),
                         [](const ::testing::TestParamInfo<Precision>& info) { return std::string(PrecisionName(info.param)); });

// Dk above 128: the state products split k into blocks (chunk-inl.h,
// GemmBlockedK), and the row factors of X and O (RowEpilogue) must come with
// the last block only, in the packed products as in FP32.
TEST(Precision, EveryModeWithStateRowBlocks) {
  CaseSpec spec = OddSpec(DType::kF32);
  spec.Dk = 200;
  spec.lens = {40, 1};
  for (Precision p : kModes) {
    for (Algo a : {Algo::kChunk16, Algo::kChunk64}) {
      Case c = MakeCase(spec);
      Options opt = c.options();
      opt.algo = a;
      opt.precision = p;
      const Errors e = RunAndCompare(c, opt);
      const std::string what = std::string(AlgoName(a)) + " " + PrecisionName(p);
      EXPECT_LE(e.out, ModeTolerance(p, e.out_limit)) << what;
      EXPECT_LE(e.state, ModeTolerance(p, e.state_limit)) << what;
    }
  }
}

// f16 in/out (the flagship's dtype): SPEC 6's limit, doubled for bf16x3.
TEST(Precision, CompensatedF16WithinTwiceSpec6) {
  CaseSpec spec = OddSpec(DType::kF16);
  spec.state_dtype = DType::kF16;
  spec.Dk = spec.Dv = 64;
  spec.lens = {300};
  for (Precision p : {Precision::kBf16x3, Precision::kBf16x4}) {
    Case c = MakeCase(spec);
    Options opt = c.options();
    opt.algo = Algo::kChunk64;
    opt.precision = p;
    const Errors e = RunAndCompare(c, opt);
    EXPECT_LE(e.out, 2.0 * e.out_limit) << PrecisionName(p);
    EXPECT_LE(e.state, 2.0 * e.state_limit) << PrecisionName(p);
  }
}

// On the dispatched target (the hardware bf16 path where the CPU has it):
// the partition into items and V tiles is the same code for every target and
// mode, and Determinism.BitwiseAcrossThreadsAndVTilesEveryTargetEveryAlgo
// covers every target; here every mode goes through it.
TEST(Precision, BitwiseAcrossThreadsAndVTilesEveryMode) {
  CaseSpec spec = OddSpec(DType::kF32);
  spec.lens = {130, 1, 47};
  struct Split {
    int threads, v_step;
  };
  for (Precision p : kModes) {
    for (Algo a : {Algo::kChunk16, Algo::kChunk64}) {
      Bytes out0, state0;
      bool first = true;
      for (const Split split : {Split{1, 0}, Split{2, 16}, Split{5, 0}, Split{3, 32}}) {
        Case c = MakeCase(spec);
        Options opt = c.options();
        opt.algo = a;
        opt.precision = p;
        opt.threads = split.threads;
        opt.v_step = split.v_step;
        ASSERT_TRUE(cgdr::Run(c.inputs(), c.outputs(), opt).ok());
        if (first) {
          out0 = c.out;
          state0 = c.final_state;
          first = false;
        } else {
          EXPECT_EQ(c.out, out0) << PrecisionName(p) << " " << AlgoName(a) << " threads=" << split.threads
                                 << " v_step=" << split.v_step;
          EXPECT_EQ(c.final_state, state0) << PrecisionName(p) << " " << AlgoName(a);
        }
      }
    }
  }
}

// hi = bf16(x) (nearest even), lo = bf16(x - hi); x with a significand of at
// most 16 bits is exactly hi + lo; any x is within 2^-16 relative.
TEST(Precision, SplitHiLoExact) {
  std::mt19937 rng(5);
  std::vector<float> x;
  for (int i = 0; i < 4000; ++i) {
    const int bits = 1 + static_cast<int>(rng() % 16);
    const uint32_t m = (rng() & ((1u << bits) - 1u)) | (1u << (bits - 1));  // exactly `bits` significant bits
    const int e = static_cast<int>(rng() % 120) - 60;
    x.push_back((rng() & 1 ? -1.0f : 1.0f) * std::ldexp(static_cast<float>(m), e));
  }
  x.push_back(0.0f);
  x.push_back(-0.0f);
  x.push_back(1.0f + 1.0f / 256 + 1.0f / 65536 * 0);  // a tie-free 9-bit value
  const size_t n_exact = x.size();
  for (int i = 0; i < 1000; ++i) x.push_back(std::ldexp(static_cast<float>(rng()) / 4294967296.0f + 0.5f, static_cast<int>(rng() % 40) - 20));
  ForEachTarget([&](const std::string& target) {
    std::vector<uint16_t> hi(x.size()), lo(x.size());
    Bf16Split(x.data(), static_cast<int64_t>(x.size()), hi.data(), lo.data());
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_EQ(hi[i], F32ToBF16(x[i])) << target << " x=" << x[i];
      const float sum = BF16ToF32(hi[i]) + BF16ToF32(lo[i]);
      if (i < n_exact) {
        ASSERT_EQ(sum, x[i]) << target << " x=" << x[i];
      } else {
        ASSERT_LE(std::abs(static_cast<double>(sum) - x[i]), std::ldexp(std::abs(x[i]), -16)) << target << " x=" << x[i];
      }
    }
  });
}

// Output rows are converted in registers (load-inl.h StoreRow): bit-identical
// to the scalar converters of core/dtype.h for every upper half of an f32
// with the lower halves that decide rounding (ties to even, just below and
// above a tie), NaN, Inf and denormals included, on every target, with a
// scalar tail (n not a multiple of the lanes). f16 NaN: any NaN.
TEST(Precision, OutputRowConversionMatchesScalarOnEveryTarget) {
  std::vector<float> x;
  for (uint32_t upper = 0; upper < 65536; ++upper) {
    for (uint32_t lower : {0x0000u, 0x0001u, 0x7FFFu, 0x8000u, 0x8001u, 0xFFFFu, (upper * 2654435761u) & 0xFFFFu}) {
      const uint32_t bits = upper << 16 | lower;
      float f;
      std::memcpy(&f, &bits, sizeof f);
      x.push_back(f);
    }
  }
  x.push_back(1.0f);  // odd length: a scalar tail on every target
  const int64_t n = static_cast<int64_t>(x.size());
  ForEachTarget([&](const std::string& target) {
    std::vector<uint16_t> bf(x.size()), h(x.size());
    StoreRowForTest(x.data(), n, DType::kBF16, bf.data());
    StoreRowForTest(x.data(), n, DType::kF16, h.data());
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_EQ(bf[i], F32ToBF16(x[i])) << target << " bf16 of bits 0x" << std::hex << std::bit_cast<uint32_t>(x[i]);
      if (std::isnan(x[i])) {  // F16C keeps NaN payload bits the scalar converter drops: both NaN
        ASSERT_TRUE((h[i] & 0x7C00u) == 0x7C00u && (h[i] & 0x03FFu) != 0) << target << " f16 NaN " << h[i];
      } else {
        ASSERT_EQ(h[i], F32ToF16(x[i])) << target << " f16 of bits 0x" << std::hex << std::bit_cast<uint32_t>(x[i]);
      }
    }
  });
}

bool HasBf16Hardware() {
  SetBf16HardwareForTest(-1);
  return Bf16HardwareEnabled();
}

uint32_t RandomBf16(std::mt19937& rng) {
  switch (rng() % 8) {
    case 0: return 0;
    case 1: return 0x8000;
    case 2: return rng() & 0x807F;                      // bf16 denormal (or zero)
    case 3: return (rng() & 0x8000) | 0x0080 | (rng() & 0x7F);  // smallest normals
    default: {
      const uint32_t e = 100 + rng() % 55;             // ~2^-27 .. 2^27
      return (rng() & 0x8000) | (e << 7) | (rng() & 0x7F);
    }
  }
}

float RandomAcc(std::mt19937& rng) {
  uint32_t u;
  switch (rng() % 6) {
    case 0: u = rng() & 0x807FFFFFu; break;             // f32 denormal
    case 1: u = (rng() & 0x80000000u) | (1u << 23) | (rng() & 0x7FFFFFu); break;  // tiny normal
    case 2: return 0.0f;
    default: return std::ldexp(static_cast<float>(static_cast<int32_t>(rng())) / 2147483648.0f, static_cast<int>(rng() % 30) - 15);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// The emulation (every target) is bit-exact with vdpbf16ps, lane by lane.
TEST(Precision, EmulationBitExactWithHardwareLanes) {
  if (!HasBf16Hardware()) GTEST_SKIP() << "CPU without AVX512_BF16";
  std::mt19937 rng(9);
  const int64_t n = 16 * 4096;
  std::vector<uint32_t> a(n), b(n);
  std::vector<float> acc0(n);
  for (int64_t i = 0; i < n; ++i) {
    a[i] = RandomBf16(rng) | (RandomBf16(rng) << 16);
    b[i] = RandomBf16(rng) | (RandomBf16(rng) << 16);
    acc0[i] = RandomAcc(rng);
  }
  // Products that cancel the accumulator, and tiny results that must flush.
  for (int64_t i = 0; i < 256; ++i) {
    a[i] = 0x3F80u | (0x3F80u << 16);  // (1, 1)
    b[i] = (rng() & 0xFFFFu) | (0x0000u << 16);
    uint32_t lo = b[i] & 0xFFFFu;
    float v;
    const uint32_t bits = lo << 16;
    std::memcpy(&v, &bits, 4);
    acc0[i] = -v;  // acc + 0*... + 1*b0 = 0 exactly (sign?)
  }
  std::vector<float> hw = acc0;
  hwy::SetSupportedTargetsForTest(0);
  Bf16DotPairs(a.data(), b.data(), hw.data(), n, true);  // best target: AVX3 with the instruction
  ForEachTarget([&](const std::string& target) {
    std::vector<float> emu = acc0;
    Bf16DotPairs(a.data(), b.data(), emu.data(), n, false);
    int bad = 0;
    for (int64_t i = 0; i < n && bad < 10; ++i) {
      uint32_t x, y;
      std::memcpy(&x, &hw[i], 4);
      std::memcpy(&y, &emu[i], 4);
      if (x != y && !(std::isnan(hw[i]) && std::isnan(emu[i]))) {
        ++bad;
        ADD_FAILURE() << target << " lane " << i << ": a=" << std::hex << a[i] << " b=" << b[i] << " acc=" << acc0[i]
                      << " hw=" << x << " emu=" << y;
      }
    }
  });
}

// Whole runs on the AVX3 target: the instruction and its emulation give the
// same bits in every mode.
TEST(Precision, EmulationBitExactWithHardwareRuns) {
  if (!HasBf16Hardware()) GTEST_SKIP() << "CPU without AVX512_BF16";
  const CaseSpec spec = OddSpec(DType::kF32);
  hwy::SetSupportedTargetsForTest(0);
  for (Precision p : {Precision::kBf16, Precision::kBf16x3, Precision::kBf16x4}) {
    for (Algo a : kChunked) {
      Bytes out[2], state[2];
      for (int hw = 0; hw < 2; ++hw) {
        SetBf16HardwareForTest(hw);
        Case c = MakeCase(spec);
        Options opt = c.options();
        opt.algo = a;
        opt.precision = p;
        ASSERT_TRUE(cgdr::Run(c.inputs(), c.outputs(), opt).ok());
        out[hw] = c.out;
        state[hw] = c.final_state;
      }
      EXPECT_EQ(out[0], out[1]) << PrecisionName(p) << " " << AlgoName(a);
      EXPECT_EQ(state[0], state[1]) << PrecisionName(p) << " " << AlgoName(a);
    }
  }
  SetBf16HardwareForTest(-1);
}

// fp32 is the default and the other modes really change the arithmetic.
TEST(Precision, ModesDiffer) {
  const CaseSpec spec = OddSpec(DType::kF32);
  Bytes outs[4];
  for (int i = 0; i < 4; ++i) {
    Case c = MakeCase(spec);
    Options opt = c.options();
    opt.algo = Algo::kChunk32;
    if (i > 0) opt.precision = kModes[i];
    ASSERT_TRUE(cgdr::Run(c.inputs(), c.outputs(), opt).ok());
    outs[i] = c.out;
  }
  EXPECT_NE(outs[0], outs[1]);
  EXPECT_NE(outs[0], outs[2]);
  EXPECT_NE(outs[1], outs[2]);
}

}  // namespace
}  // namespace cgdr::testing
