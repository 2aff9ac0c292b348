// The AMX engine (issue 18; docs/SPEC.md 6c):
//  - TDPBF16PS emulated as Intel's SDM documents it: within its rounding
//    bound of the exact dot product, denormal inputs read as zero and
//    denormal results flushed; where the CPU has AMX, the hardware against
//    the emulation, within twice that bound (the fraction of bitwise-equal
//    lanes is printed: the hardware accumulates in its own way);
//  - whole runs on the emulated engine on every SIMD target, odd shapes
//    (Dk = 37, Dv = 71, 1-token tails, an empty sequence, grouped heads, no g,
//    no initial state), every bf16 mode and chunk size, against FP64;
//  - the hardware engine where present, against FP64 and the emulation;
//  - results bitwise identical across thread counts, V tiles and runs, and
//    between one call and two that carry the state;
//  - causality: a NaN in one token's v leaves every earlier output finite;
//  - the plan's engine and precision: auto, forced, and the fallbacks.
#include <gtest/gtest.h>

#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <thread>

#include "cgdr/cgdr.hpp"
#include "cgdr/plan.hpp"
#include "core/cpu_features.h"
#include "core/dtype.h"
#include "kernels/kernels.h"
#include "test_util.h"

namespace cgdr::testing {
namespace {

constexpr Precision kTileModes[] = {Precision::kBf16, Precision::kBf16x3, Precision::kBf16x4};

float Bf16(uint32_t bits16) { return std::bit_cast<float>(bits16 << 16); }
// DAZ: a denormal bf16 input counts as a zero of its sign.
double Daz(float x) { return std::fpclassify(x) == FP_SUBNORMAL ? 0.0 : static_cast<double>(x); }

// Random bf16 pairs with exponents spread over +-spread binades; a few
// denormals and zeros mixed in.
uint32_t RandomPair(std::mt19937& rng, int spread) {
  auto one = [&]() -> uint32_t {
    const uint32_t r = rng();
    if (r % 97 == 0) return (r >> 8) & 0x807Fu;  // a denormal (or zero) bf16
    const int e = 127 + static_cast<int>(rng() % (2 * spread + 1)) - spread;
    return ((r & 1u) << 15) | (static_cast<uint32_t>(e) << 7) | ((r >> 1) & 0x7Fu);
  };
  return one() | (one() << 16);
}

struct TileCase {
  std::vector<uint32_t> a, b;
  std::vector<float> c;
};

TileCase RandomTiles(std::mt19937& rng, int spread) {
  TileCase t{std::vector<uint32_t>(256), std::vector<uint32_t>(256), std::vector<float>(256)};
  for (auto& w : t.a) w = RandomPair(rng, spread);
  for (auto& w : t.b) w = RandomPair(rng, spread);
  for (auto& x : t.c) x = std::ldexp(static_cast<float>(rng() % 2001) - 1000.0f, static_cast<int>(rng() % 9) - 14);
  return t;
}

// The exact value of element (m, n) of c + a * b, and the sum of the
// magnitudes of its terms (the scale of any FP32 evaluation's error).
void Exact(const TileCase& t, int m, int n, double* value, double* magnitude) {
  double v = t.c[m * 16 + n], mag = std::abs(v);
  for (int p = 0; p < 16; ++p) {
    const uint32_t a = t.a[m * 16 + p], b = t.b[p * 16 + n];
    for (int half = 0; half < 2; ++half) {
      const double prod = Daz(Bf16((a >> (16 * half)) & 0xFFFFu)) * Daz(Bf16((b >> (16 * half)) & 0xFFFFu));
      v += prod;
      mag += std::abs(prod);
    }
  }
  *value = v;
  *magnitude = mag;
}

// 16 FMAs per partial chain, then two adds: each rounding within 2^-24 of
// the running magnitude; flushing adds at most FLT_MIN per operation.
double Bound(double magnitude) { return 20.0 * std::ldexp(magnitude, -24) + 40.0 * FLT_MIN; }

TEST(AmxTiles, EmulationWithinItsRoundingBound) {
  std::mt19937 rng(3);
  for (int spread : {0, 4, 20}) {
    for (int rep = 0; rep < 20; ++rep) {
      TileCase t = RandomTiles(rng, spread);
      std::vector<float> c = t.c;
      TileDotForTest(t.a.data(), t.b.data(), c.data(), /*hw=*/false);
      for (int m = 0; m < 16; ++m) {
        for (int n = 0; n < 16; ++n) {
          double exact, mag;
          Exact(t, m, n, &exact, &mag);
          ASSERT_LE(std::abs(c[m * 16 + n] - exact), Bound(mag)) << "spread " << spread << " (" << m << ", " << n << ")";
        }
      }
    }
  }
}

TEST(AmxTiles, EmulationFlushesDenormals) {
  std::vector<uint32_t> a(256, 0), b(256, 0);
  std::vector<float> c(256, 0.0f);
  a[0] = 0x0040u;         // a denormal bf16 (2^-127) in the even half: read as zero
  b[0] = 0x3F80u;         // 1.0
  a[1] = 0x00800080u;     // 2^-126 in both halves
  b[16] = 0x3F003F00u;    // 0.5 in both halves: each product 2^-127, a denormal result
  c[1] = std::numeric_limits<float>::denorm_min();  // a denormal accumulator input: read as zero
  TileDotForTest(a.data(), b.data(), c.data(), /*hw=*/false);
  EXPECT_EQ(c[0], 0.0f);  // 0 + (2^-127 * 1 -> 0) + (2^-127 * 2^-127 ... flushed)
  EXPECT_EQ(c[1], 0.0f);
  for (int i = 0; i < 256; ++i) EXPECT_FALSE(std::fpclassify(c[i]) == FP_SUBNORMAL) << i;
}

TEST(AmxTiles, HardwareAgreesWithEmulationWithinBound) {
  if (!AmxHardwareEnabled()) GTEST_SKIP() << "no usable AMX: " << AmxHardware().why;
  std::mt19937 rng(4);
  for (int spread : {0, 4, 20}) {
    int64_t equal = 0, total = 0;
    double worst = 0.0;  // the largest |hw - emu| in units of Bound
    for (int rep = 0; rep < 20; ++rep) {
      TileCase t = RandomTiles(rng, spread);
      std::vector<float> hw = t.c, emu = t.c;
      TileDotForTest(t.a.data(), t.b.data(), hw.data(), /*hw=*/true);
      TileDotForTest(t.a.data(), t.b.data(), emu.data(), /*hw=*/false);
      for (int m = 0; m < 16; ++m) {
        for (int n = 0; n < 16; ++n) {
          double exact, mag;
          Exact(t, m, n, &exact, &mag);
          const int i = m * 16 + n;
          ASSERT_LE(std::abs(hw[i] - exact), Bound(mag)) << "hardware, spread " << spread;
          const double d = std::abs(static_cast<double>(hw[i]) - emu[i]);
          ASSERT_LE(d, 2.0 * Bound(mag)) << "spread " << spread << " hw " << hw[i] << " emu " << emu[i];
          worst = std::max(worst, d / Bound(mag));
          equal += std::bit_cast<uint32_t>(hw[i]) == std::bit_cast<uint32_t>(emu[i]);
          ++total;
        }
      }
    }
    std::printf("spread 2^+-%d: hardware == emulation on %.1f%% of %lld elements; worst |hw - emu| = %.3f bound\n",
                spread, 100.0 * static_cast<double>(equal) / static_cast<double>(total), static_cast<long long>(total),
                worst);
  }
}

// The packers' bf16: nearest even, zero and denormal inputs a zero of their
// sign (as VCVTNE2PS2BF16), quiet NaN; lo = bf16(x - hi), 0 where hi is not
// finite.
uint16_t ScalarBf16(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  if ((u & 0x7F800000u) == 0) return static_cast<uint16_t>((u >> 16) & 0x8000u);
  return F32ToBF16(x);
}
void ScalarSplit(float x, uint16_t* hi, uint16_t* lo) {
  *hi = ScalarBf16(x);
  const float h = Bf16(*hi);
  *lo = std::isfinite(h) ? ScalarBf16(x - h) : 0;
}

std::vector<float> SpecialFloats(std::mt19937& rng, size_t n) {
  const float specials[] = {0.0f, -0.0f, std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(), std::bit_cast<float>(0x7F800001u),  // signalling NaN
                            std::numeric_limits<float>::denorm_min(), -FLT_MIN, FLT_MIN, FLT_MAX, -FLT_MAX,
                            std::bit_cast<float>(0x007FFFFFu), std::bit_cast<float>(0x3F808000u),  // a tie
                            std::bit_cast<float>(0x3F818000u), std::bit_cast<float>(0x7F7FFFFFu)};
  std::vector<float> x;
  for (float f : specials) x.push_back(f);
  while (x.size() < n) x.push_back(std::bit_cast<float>(static_cast<uint32_t>(rng())));  // every class of bits
  return x;
}

TEST(AmxPack, BothConvertersGiveTheDefinedBits) {
  std::mt19937 rng(9);
  const std::vector<float> x = SpecialFloats(rng, 32 * 400);
  ForEachTarget([&](const std::string& target) {
    for (bool hw : {false, true}) {
      for (size_t b = 0; b < x.size(); b += 32) {
        uint32_t ah[16], al[16], ch[16], cl[16];
        AmxPackForTest(x.data() + b, ah, al, ch, cl, hw);
        for (int w = 0; w < 16; ++w) {
          uint16_t h0, l0, h1, l1;
          ScalarSplit(x[b + 2 * w], &h0, &l0);  // along k: word w = (x[2w], x[2w + 1])
          ScalarSplit(x[b + 2 * w + 1], &h1, &l1);
          ASSERT_EQ(ah[w], h0 | (static_cast<uint32_t>(h1) << 16)) << target << " hw=" << hw << " x=" << x[b + 2 * w];
          ASSERT_EQ(al[w], l0 | (static_cast<uint32_t>(l1) << 16)) << target << " hw=" << hw << " x=" << x[b + 2 * w];
          ScalarSplit(x[b + w], &h0, &l0);  // across rows: word w = (x[w], x[16 + w])
          ScalarSplit(x[b + 16 + w], &h1, &l1);
          ASSERT_EQ(ch[w], h0 | (static_cast<uint32_t>(h1) << 16)) << target << " hw=" << hw << " x=" << x[b + w];
          ASSERT_EQ(cl[w], l0 | (static_cast<uint32_t>(l1) << 16)) << target << " hw=" << hw << " x=" << x[b + w];
        }
      }
    }
  });
}

CaseSpec OddSpec(DType dt) {
  CaseSpec s;
  s.Nk = 2;
  s.Nv = 4;  // grouped heads
  s.Dk = 37;
  s.Dv = 71;
  s.lens = {65, 1, 0, 129, 17};  // 1-token tails after 64 and 128, a lone token, an empty sequence
  s.dtype = dt;
  s.state_dtype = DType::kF32;
  s.seed = 21;
  return s;
}

// The tile modes' tolerances: ModeTolerance (test_util.h).
void ExpectAccurate(Case& c, Options opt, const std::string& what) {
  const Errors e = RunAndCompare(c, opt);
  EXPECT_LE(e.out, ModeTolerance(opt.precision, e.out_limit)) << what;
  EXPECT_LE(e.state, ModeTolerance(opt.precision, e.state_limit)) << what;
}

class EmulatedEngine : public ::testing::TestWithParam<Precision> {};

TEST_P(EmulatedEngine, EveryTargetOddShapes) {
  const Precision p = GetParam();
  ForEachTarget([&](const std::string& target) {
    for (Algo a : {Algo::kChunk16, Algo::kChunk64}) {
      for (DType dt : {DType::kF32, DType::kBF16}) {
        Case c = MakeCase(OddSpec(dt));
        Options opt = c.options();
        opt.algo = a;
        opt.precision = p;
        opt.engine = Engine::kAmxEmulated;
        opt.threads = 2;
        ExpectAccurate(c, opt, target + " " + AlgoName(a) + " " + PrecisionName(p) + " " + DTypeName(dt));
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Modes, EmulatedEngine, ::testing::ValuesIn(kTileModes),
                         [](const ::testing::TestParamInfo<Precision>& info) { return std::string(PrecisionName(info.param)); });

// What the odd shapes leave out: no g, no initial state (kv layout), l2norm,
// f16, C = 32 and 128, a Dk of the generic path above 128.
TEST(EmulatedEngine, MoreShapesAndOptions) {
  struct Variant {
    const char* name;
    void (*edit)(CaseSpec*, Options*);
  };
  const Variant variants[] = {
      {"no g", [](CaseSpec* s, Options*) { s->has_g = false; }},
      {"no initial state, kv", [](CaseSpec* s, Options*) { s->has_initial_state = false; s->layout = StateLayout::kKV; }},
      {"l2norm f16", [](CaseSpec* s, Options*) { s->use_qk_l2norm = true; s->dtype = DType::kF16; }},
      {"chunk32", [](CaseSpec*, Options* o) { o->algo = Algo::kChunk32; }},
      {"chunk128", [](CaseSpec*, Options* o) { o->algo = Algo::kChunk128; }},
      {"Dk 150 generic", [](CaseSpec* s, Options*) { s->Dk = 150; s->lens = {40, 3}; }},
  };
  for (const Variant& v : variants) {
    CaseSpec spec = OddSpec(DType::kBF16);
    Options edits;
    edits.algo = Algo::kChunk64;
    v.edit(&spec, &edits);
    Case c = MakeCase(spec);
    Options opt = c.options();
    opt.algo = edits.algo;
    opt.precision = Precision::kBf16x3;
    opt.engine = Engine::kAmxEmulated;
    ExpectAccurate(c, opt, v.name);
  }
}

TEST(HardwareEngine, AccurateAndCloseToTheEmulation) {
  if (!AmxHardwareEnabled()) GTEST_SKIP() << "no usable AMX: " << AmxHardware().why;
  for (Precision p : kTileModes) {
    for (Algo a : {Algo::kChunk16, Algo::kChunk32, Algo::kChunk64, Algo::kChunk128}) {
      const std::string what = std::string(AlgoName(a)) + " " + PrecisionName(p);
      Case hw = MakeCase(OddSpec(DType::kF32));
      Options opt = hw.options();
      opt.algo = a;
      opt.precision = p;
      opt.engine = Engine::kAmx;
      ExpectAccurate(hw, opt, what);
      Case emu = MakeCase(OddSpec(DType::kF32));
      opt.engine = Engine::kAmxEmulated;
      ASSERT_TRUE(cgdr::Run(emu.inputs(), emu.outputs(), opt).ok());
      // The two differ only by the accumulation inside each tile product:
      // within a few FP32 roundings of the results' scale (bf16: of bf16's,
      // where one different rounding moves an operand by 2^-9).
      const double tol = p == Precision::kBf16 ? 1e-2 : 1e-5;
      const int64_t nv = hw.spec.Nv;
      EXPECT_LE(RelativeError(hw.outputs().out, TensorAsDoubles(emu.outputs().out), nv), tol) << what;
      EXPECT_LE(RelativeError(hw.outputs().final_state, TensorAsDoubles(emu.outputs().final_state), nv), tol) << what;
    }
  }
}

// Each engine is deterministic: the same bits for any thread count, V tile
// width and run (SPEC 5), on the hardware and on the emulation.
TEST(AmxEngines, BitwiseAcrossThreadsAndVTiles) {
  CaseSpec spec = OddSpec(DType::kBF16);
  spec.lens = {130, 1, 47};
  for (Engine engine : {Engine::kAmx, Engine::kAmxEmulated}) {
    if (engine == Engine::kAmx && !AmxHardwareEnabled()) continue;
    for (Precision p : {Precision::kBf16, Precision::kBf16x3}) {
      Bytes out0, state0;
      bool first = true;
      for (const auto& [threads, v_step] : {std::pair{1, 0}, std::pair{2, 16}, std::pair{5, 0}, std::pair{3, 32}, std::pair{1, 0}}) {
        Case c = MakeCase(spec);
        Options opt = c.options();
        opt.algo = Algo::kChunk64;
        opt.precision = p;
        opt.engine = engine;
        opt.threads = threads;
        opt.v_step = v_step;
        ASSERT_TRUE(cgdr::Run(c.inputs(), c.outputs(), opt).ok());
        if (first) {
          out0 = c.out;
          state0 = c.final_state;
          first = false;
          continue;
        }
        const std::string what = std::string(EngineName(engine)) + " " + PrecisionName(p) + " threads=" +
                                 std::to_string(threads) + " v_step=" + std::to_string(v_step);
        EXPECT_EQ(c.out, out0) << what;
        EXPECT_EQ(c.final_state, state0) << what;
      }
    }
  }
}

// SPEC 4 step 3: nothing of a later token reaches an earlier one. A tile
// product multiplies whole k tiles of tokens into every row, so a NaN in
// token j's v (0 * NaN = NaN) would reach the rows before j in its tiles;
// the engine runs such chunks' token products on the vector units.
TEST(AmxEngines, NaNInOneTokenLeavesEarlierOutputsFinite) {
  CaseSpec spec;
  spec.Nk = 1;
  spec.Nv = 2;
  spec.Dk = 32;
  spec.Dv = 32;
  spec.lens = {100};
  spec.dtype = DType::kF32;
  constexpr int64_t kBad = 77;  // inside the second chunk of 64, past its first 16-row tile
  for (Engine engine : {Engine::kAmx, Engine::kAmxEmulated}) {
    if (engine == Engine::kAmx && !AmxHardwareEnabled()) continue;
    Case c = MakeCase(spec);
    reinterpret_cast<float*>(c.value.data())[kBad * spec.Nv * spec.Dv + 5] = std::numeric_limits<float>::quiet_NaN();
    Options opt = c.options();
    opt.algo = Algo::kChunk64;
    opt.precision = Precision::kBf16x3;
    opt.engine = engine;
    ASSERT_TRUE(cgdr::Run(c.inputs(), c.outputs(), opt).ok());
    const auto* out = reinterpret_cast<const float*>(c.out.data());
    for (int64_t t = 0; t < spec.lens[0]; ++t) {
      bool finite = true;
      for (int64_t j = 0; j < spec.Nv * spec.Dv; ++j) finite &= std::isfinite(out[t * spec.Nv * spec.Dv + j]);
      if (t < kBad) {
        EXPECT_TRUE(finite) << EngineName(engine) << " token " << t;
      } else if (t == kBad) {
        EXPECT_FALSE(finite) << EngineName(engine) << " token " << t;
      }
    }
  }
}

Plan PlanFor(const CaseSpec& spec, const Options& edits, const MachineProfile& prof = DefaultProfile()) {
  Case c = MakeCase(spec);
  Options opt = c.options();
  opt.precision = edits.precision;
  opt.engine = edits.engine;
  opt.algo = edits.algo;
  Plan plan;
  EXPECT_TRUE(testing::PlanFor(c, opt, &plan, prof));
  return plan;
}

TEST(AmxPlan, EngineAndPrecisionResolution) {
  CaseSpec spec;
  spec.Nk = 2;
  spec.Nv = 4;
  spec.Dk = spec.Dv = 64;
  spec.lens = {2048};
  Options o;
  // f32 inputs under auto: fp32 on the vector units.
  spec.dtype = DType::kF32;
  Plan plan = PlanFor(spec, o);
  EXPECT_EQ(plan.precision, Precision::kFp32);
  EXPECT_EQ(plan.engine, Engine::kVector);
  EXPECT_NE(PlanToString(plan).find("f32 inputs need 2e-5"), std::string::npos) << PlanToString(plan);
  // 16-bit inputs under auto, the emulation asked for: bf16x3 on it.
  spec.dtype = DType::kBF16;
  o.engine = Engine::kAmxEmulated;
  plan = PlanFor(spec, o);
  EXPECT_EQ(plan.precision, Precision::kBf16x3);
  EXPECT_EQ(plan.engine, Engine::kAmxEmulated);
  EXPECT_NE(PlanToString(plan).find("engine=amx-emu"), std::string::npos) << PlanToString(plan);
  // fp32 forces the vector units whatever the engine asked for.
  o.precision = Precision::kFp32;
  plan = PlanFor(spec, o);
  EXPECT_EQ(plan.engine, Engine::kVector);
  // A bf16 mode on the vector engine when asked for.
  o.precision = Precision::kBf16x3;
  o.engine = Engine::kVector;
  o.algo = Algo::kChunk16;
  plan = PlanFor(spec, o);
  EXPECT_EQ(plan.engine, Engine::kVector);
  EXPECT_EQ(plan.precision, Precision::kBf16x3);
  // C = 1 is always the vector units.
  o.engine = Engine::kAmxEmulated;
  o.algo = Algo::kRecurrent;
  plan = PlanFor(spec, o);
  EXPECT_EQ(plan.engine, Engine::kVector);
  EXPECT_EQ(plan.chunk, 1);
}

TEST(AmxPlan, HardwareWhereUsableElseTheVectorUnits) {
  CaseSpec spec;
  spec.Nk = 2;
  spec.Nv = 4;
  spec.Dk = spec.Dv = 128;
  spec.lens = {4096};
  spec.dtype = DType::kF16;
  Options o;  // auto, auto
  if (AmxHardwareEnabled()) {
    // auto weighs tiles against fp32 by the profile's costs (measured per
    // machine, so the test sets them): cheap tiles win, dear ones lose.
    MachineProfile cheap_tiles = DefaultProfile(), dear_tiles = DefaultProfile();
    cheap_tiles.amx_fma_cost[static_cast<int>(Precision::kBf16x3)] = 0.05;
    cheap_tiles.amx_state_pass_cost[static_cast<int>(Precision::kBf16x3)] = 1.0;
    dear_tiles.amx_fma_cost[static_cast<int>(Precision::kBf16x3)] = 5.0;
    Plan plan = PlanFor(spec, o, cheap_tiles);
    EXPECT_EQ(plan.engine, Engine::kAmx) << PlanToString(plan);
    EXPECT_EQ(plan.precision, Precision::kBf16x3) << PlanToString(plan);
    EXPECT_NE(PlanToString(plan).find("engine=amx "), std::string::npos) << PlanToString(plan);
    plan = PlanFor(spec, o, dear_tiles);
    EXPECT_EQ(plan.engine, Engine::kVector) << PlanToString(plan);
    EXPECT_EQ(plan.precision, Precision::kFp32) << PlanToString(plan);
    // Named, the engine is used whatever the costs.
    Options named = o;
    named.engine = Engine::kAmx;
    plan = PlanFor(spec, named, dear_tiles);
    EXPECT_EQ(plan.engine, Engine::kAmx) << PlanToString(plan);
    EXPECT_EQ(plan.precision, Precision::kBf16x3) << PlanToString(plan);
  }
  SetAmxHardwareForTest(0);  // as on a machine without AMX
  for (Engine e : {Engine::kAuto, Engine::kAmx}) {
    o.engine = e;
    o.precision = Precision::kAuto;
    Plan plan = PlanFor(spec, o);
    EXPECT_EQ(plan.engine, Engine::kVector) << PlanToString(plan);
    EXPECT_EQ(plan.precision, Precision::kFp32) << PlanToString(plan);
    o.precision = Precision::kBf16;
    o.algo = Algo::kChunk16;
    plan = PlanFor(spec, o);
    EXPECT_EQ(plan.engine, Engine::kVector) << PlanToString(plan);
    EXPECT_EQ(plan.precision, Precision::kBf16) << PlanToString(plan);
    o.algo = Algo::kAuto;
  }
  SetAmxHardwareForTest(-1);
}

// Under algo auto the tiles run C = 32 and up, whatever the profile says: a
// chunk of 16 fills half of a tile's 32-deep contraction. With the constants
// `cgdr tune` fitted on an AMX Xeon (cheap state passes) the model alone
// picked C = 16, 1.3x slower there than C = 32. Forced, C = 16 still runs.
TEST(AmxPlan, TilesAreNotWeighedAtChunk16) {
  MachineProfile tuned = DefaultProfile();
  const int x3 = static_cast<int>(Precision::kBf16x3);
  tuned.amx_fma_cost[x3] = 1.29;
  tuned.amx_state_pass_cost[x3] = 3.0;
  CaseSpec spec;
  spec.Nk = 2;
  spec.Nv = 4;
  spec.Dk = spec.Dv = 128;
  spec.dtype = DType::kBF16;
  Options o;
  o.engine = Engine::kAmxEmulated;  // the tile engine's cost model on any CPU
  for (int t : {40, 512, 8192}) {
    spec.lens = {t};
    const Plan plan = PlanFor(spec, o, tuned);
    EXPECT_EQ(plan.engine, Engine::kAmxEmulated) << PlanToString(plan);
    EXPECT_GE(plan.chunk, 32) << PlanToString(plan);
    EXPECT_EQ(PlanToString(plan).find("C16="), std::string::npos) << PlanToString(plan);
  }
  o.algo = Algo::kChunk16;
  const Plan forced = PlanFor(spec, o, tuned);
  EXPECT_EQ(forced.engine, Engine::kAmxEmulated) << PlanToString(forced);
  EXPECT_EQ(forced.chunk, 16) << PlanToString(forced);
}

TEST(AmxPlan, NamesParse) {
  for (Engine e : {Engine::kAuto, Engine::kVector, Engine::kAmx, Engine::kAmxEmulated}) {
    Engine parsed = Engine::kVector;
    ASSERT_TRUE(ParseEngine(EngineName(e), &parsed)) << EngineName(e);
    EXPECT_EQ(parsed, e);
  }
  Engine e;
  EXPECT_FALSE(ParseEngine("tiles", &e));
  Precision p = Precision::kFp32;
  ASSERT_TRUE(ParsePrecision("auto", &p));
  EXPECT_EQ(p, Precision::kAuto);
  EXPECT_EQ(Options{}.precision, Precision::kAuto);
  EXPECT_EQ(Options{}.engine, Engine::kAuto);
}

TEST(AmxPlan, BadEngineValueIsRejected) {
  Case c = MakeCase(OddSpec(DType::kF32));
  Options opt = c.options();
  opt.engine = static_cast<Engine>(9);
  const Status s = cgdr::Run(c.inputs(), c.outputs(), opt);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("options.engine"), std::string::npos) << s.message();
}

// The tokens [t0, t0 + n) of a one-sequence case, as a case of their own
// (token-major buffers: each token's bytes are buffer size / T).
Case TokenSlice(const Case& whole, int64_t t0, int64_t n) {
  CaseSpec spec = whole.spec;
  spec.lens = {static_cast<int32_t>(n)};
  Case part = MakeCase(spec);
  const auto copy = [&](const Bytes& from, Bytes& to) {
    const size_t row = from.size() / static_cast<size_t>(whole.T);
    std::memcpy(to.data(), from.data() + t0 * row, n * row);
  };
  copy(whole.query, part.query);
  copy(whole.key, part.key);
  copy(whole.value, part.value);
  copy(whole.beta, part.beta);
  copy(whole.g, part.g);
  return part;
}

// A sequence run in one call, or in two with the FP32 final state of the
// first as the initial state of the second (cut on a chunk boundary), gives
// the same bits (SPEC 5): the state between chunks is exactly the FP32
// state a call returns and loads, for every item of a group, whatever the
// engine keeps beside it (a split of S made ahead must be the split of
// that state).
TEST(AmxEngines, StateCarriedBetweenCallsGivesTheSameBits) {
  CaseSpec spec = OddSpec(DType::kBF16);
  spec.lens = {200};
  for (Engine engine : {Engine::kAmx, Engine::kAmxEmulated}) {
    if (engine == Engine::kAmx && !AmxHardwareEnabled()) continue;
    for (Precision p : kTileModes) {
      for (Algo a : {Algo::kChunk32, Algo::kChunk64}) {
        const std::string what = std::string(EngineName(engine)) + " " + PrecisionName(p) + " " + AlgoName(a);
        Case whole = MakeCase(spec);
        Options opt = whole.options();
        opt.engine = engine;
        opt.precision = p;
        opt.algo = a;
        ASSERT_TRUE(cgdr::Run(whole.inputs(), whole.outputs(), opt).ok()) << what;
        const int64_t cut = 128;
        Case first = TokenSlice(whole, 0, cut), second = TokenSlice(whole, cut, whole.T - cut);
        std::memcpy(first.initial_state.data(), whole.initial_state.data(), whole.initial_state.size());
        ASSERT_TRUE(cgdr::Run(first.inputs(), first.outputs(), opt).ok()) << what;
        std::memcpy(second.initial_state.data(), first.final_state.data(), first.final_state.size());
        ASSERT_TRUE(cgdr::Run(second.inputs(), second.outputs(), opt).ok()) << what;
        Bytes out = first.out;
        out.insert(out.end(), second.out.begin(), second.out.end());
        EXPECT_EQ(out, whole.out) << what;
        EXPECT_EQ(second.final_state, whole.final_state) << what;
      }
    }
  }
}

// Tile state belongs to each thread and is released after every call: AMX
// and vector calls interleaved from many threads give each call's own bits.
TEST(AmxEngines, InterleavedWithVectorCallsFromManyThreads) {
  CaseSpec spec = OddSpec(DType::kBF16);
  spec.lens = {70, 9};
  const Engine tile_engine = AmxHardwareEnabled() ? Engine::kAmx : Engine::kAmxEmulated;
  const auto run = [&](Engine e, Precision p) {
    Case c = MakeCase(spec);
    Options opt = c.options();
    opt.engine = e;
    opt.precision = p;
    opt.algo = Algo::kChunk64;
    opt.threads = 2;
    EXPECT_TRUE(cgdr::Run(c.inputs(), c.outputs(), opt).ok());
    return std::pair{c.out, c.final_state};
  };
  const auto tiles_ref = run(tile_engine, Precision::kBf16x3);
  const auto vector_ref = run(Engine::kVector, Precision::kFp32);
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 3; ++rep) {
        const bool tiles = (t + rep) % 2 == 0;
        const auto r = tiles ? run(tile_engine, Precision::kBf16x3) : run(Engine::kVector, Precision::kFp32);
        if (r != (tiles ? tiles_ref : vector_ref)) ++mismatches;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
}

}  // namespace
}  // namespace cgdr::testing
