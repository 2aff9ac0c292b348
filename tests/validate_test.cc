// SPEC 3: every bad input gets an error naming the tensor with expected and
// actual values, and the outputs (pre-filled with a sentinel) stay untouched.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "cgdr/cgdr.hpp"
#include "core/synthetic.h"
#include "test_util.h"

namespace cgdr {
namespace {

constexpr uint8_t kSentinel = 0xA5;

struct Fixture {
  Case c;
  Inputs in;
  Outputs out;
  Options opt;
  explicit Fixture(CaseSpec s = {}) : c(MakeCase(s)) {
    in = c.inputs();
    out = c.outputs();
    opt = c.options();
    testing::FillOutputs(c, kSentinel);
  }
  bool Untouched() const { return testing::OutputsHold(c, kSentinel); }
};

CaseSpec Small() {
  CaseSpec s;
  s.Nk = 2; s.Nv = 4; s.Dk = 8; s.Dv = 12; s.lens = {5, 0, 3};
  return s;
}

// KDA (docs/SPEC.md 10): Small() with a per-channel gate, g [T, Nv, Dk] or
// (raw) a [T, Nv, Dk] with dt_bias [Nv * Dk].
CaseSpec SmallKda(bool raw_gate, double lower_bound = 0.0) {
  CaseSpec s = Small();
  s.per_channel_gate = true;
  s.raw_gate = raw_gate;
  s.gate_lower_bound = lower_bound;
  return s;
}

// Runs with a mutation applied and expects an error mentioning every needle.
void ExpectRejected(const std::function<void(Fixture&)>& mutate, std::initializer_list<const char*> needles,
                    const CaseSpec& spec = Small()) {
  Fixture f(spec);
  mutate(f);
  const Status s = cgdr::Run(f.in, f.out, f.opt);
  ASSERT_FALSE(s.ok()) << "accepted bad input; expected an error with '" << *needles.begin() << "'";
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  for (const char* n : needles) EXPECT_NE(s.message().find(n), std::string::npos) << "message: " << s.message() << " lacks '" << n << "'";
  EXPECT_EQ(s.message().find('\n'), std::string::npos) << "one line: " << s.message();
  EXPECT_TRUE(f.Untouched()) << "an output was written before the error: " << s.message();
}

TEST(Validate, GoodInputPasses) {
  Fixture f(Small());
  EXPECT_TRUE(cgdr::Run(f.in, f.out, f.opt).ok());
  EXPECT_FALSE(f.Untouched());
}

TEST(Validate, NullRequiredTensors) {
  ExpectRejected([](Fixture& f) { f.in.query.data = nullptr; }, {"query", "missing"});
  ExpectRejected([](Fixture& f) { f.in.key.data = nullptr; }, {"key", "missing"});
  ExpectRejected([](Fixture& f) { f.in.value.data = nullptr; }, {"value", "missing"});
  ExpectRejected([](Fixture& f) { f.in.beta.data = nullptr; }, {"beta", "missing"});
  ExpectRejected([](Fixture& f) { f.in.seq_lens.data = nullptr; }, {"seq_lens", "missing"});
  ExpectRejected([](Fixture& f) { f.out.out.data = nullptr; }, {"out", "missing"});
}

TEST(Validate, RanksAndShapes) {
  ExpectRejected([](Fixture& f) { f.in.query.rank = 2; }, {"query", "rank 3", "got rank 2"});
  ExpectRejected([](Fixture& f) { f.in.key.shape[2] = 9; }, {"key", "[8, 2, 8]", "[8, 2, 9]"});
  ExpectRejected([](Fixture& f) { f.in.key.shape[0] = 7; }, {"key", "got [7, 2, 8]"});
  ExpectRejected([](Fixture& f) { f.in.value.shape[0] = 9; }, {"value", "[8, 4, 12]", "[9, 4, 12]"});
  ExpectRejected([](Fixture& f) { f.in.beta.shape[1] = 3; }, {"beta", "[8, 4]", "[8, 3]"});
  ExpectRejected([](Fixture& f) { f.in.g.shape[1] = 5; }, {"g", "[8, 4]", "[8, 5]"});
  ExpectRejected([](Fixture& f) { f.in.initial_state.shape[2] = 8; }, {"initial_state", "[3, 4, 12, 8]", "[3, 4, 8, 8]"});
  ExpectRejected([](Fixture& f) { f.out.out.shape[2] = 11; }, {"out", "[8, 4, 12]"});
  ExpectRejected([](Fixture& f) { f.out.final_state.shape[0] = 2; }, {"final_state", "[3, 4, 12, 8]"});
  ExpectRejected([](Fixture& f) { f.in.seq_lens.rank = 2; }, {"seq_lens", "rank 1"});
  ExpectRejected([](Fixture& f) { f.in.query.shape[1] = -2; }, {"query", "non-negative"});
}

TEST(Validate, HeadCountsAndWidths) {
  ExpectRejected([](Fixture& f) { f.in.query.shape[1] = 0; f.in.key.shape[1] = 0; }, {"Nk >= 1"});
  ExpectRejected([](Fixture& f) { f.in.value.shape[1] = 0; }, {"Nv >= 1"});
  ExpectRejected([](Fixture& f) { f.in.query.shape[1] = 3; f.in.key.shape[1] = 3; }, {"multiple of Nk = 3", "Nv = 4"});
  ExpectRejected([](Fixture& f) { f.in.query.shape[2] = 0; }, {"Dk in [1, 256]", "Dk = 0"});
  ExpectRejected([](Fixture& f) { f.in.query.shape[2] = 257; }, {"Dk = 257"});
  ExpectRejected([](Fixture& f) { f.in.value.shape[2] = 300; }, {"value", "Dv = 300"});
}

TEST(Validate, DTypes) {
  ExpectRejected([](Fixture& f) { f.in.query.dtype = DType::kI32; }, {"query", "f16, bf16 or f32", "i32"});
  ExpectRejected([](Fixture& f) { f.in.key.dtype = DType::kF16; }, {"key", "expected dtype f32", "got f16"});
  ExpectRejected([](Fixture& f) { f.in.value.dtype = DType::kBF16; }, {"value", "got bf16"});
  ExpectRejected([](Fixture& f) { f.in.beta.dtype = DType::kF16; }, {"beta", "got f16"});
  ExpectRejected([](Fixture& f) { f.in.g.dtype = DType::kI32; }, {"g", "i32"});
  ExpectRejected([](Fixture& f) { f.in.seq_lens.dtype = DType::kF32; }, {"seq_lens", "expected dtype i32", "got f32"});
  ExpectRejected([](Fixture& f) { f.out.out.dtype = DType::kF16; }, {"out", "got f16"});
  ExpectRejected([](Fixture& f) { f.out.final_state.dtype = DType::kBF16; }, {"final_state", "same as initial_state", "bf16"});
}

TEST(Validate, SequenceLengths) {
  ExpectRejected([](Fixture& f) { f.c.seq_lens[1] = -1; f.c.seq_lens[0] = 6; }, {"seq_lens", ">= 0", "-1", "[1]"});
  ExpectRejected([](Fixture& f) { f.c.seq_lens[2] = 4; }, {"seq_lens", "sum to T = 8", "got 9"});
  ExpectRejected([](Fixture& f) { f.in.seq_lens.shape[0] = 0; f.in.initial_state.data = nullptr; f.out.final_state.data = nullptr; }, {"seq_lens", "at least one"});
}

TEST(Validate, OverflowingElementCounts) {
  // A shape whose byte size overflows 64 bits is rejected, never wrapped.
  ExpectRejected([](Fixture& f) {
    f.in.query.shape[0] = std::numeric_limits<int64_t>::max() / 4;
  }, {"query", "64-bit"});
  ExpectRejected([](Fixture& f) {
    f.in.value.shape[0] = int64_t{1} << 40;
    f.in.value.shape[1] = int64_t{1} << 20;
  }, {"value", "64-bit"});
}

TEST(Validate, OptionsAndAliasing) {
  ExpectRejected([](Fixture& f) { f.opt.threads = -1; }, {"threads", "-1"});
  ExpectRejected([](Fixture& f) { f.opt.v_step = 1000; }, {"v_step", "1000"});
  ExpectRejected([](Fixture& f) { f.opt.scale = std::numeric_limits<double>::infinity(); }, {"scale"});
  ExpectRejected([](Fixture& f) { f.out.out.data = f.in.value.data; }, {"out", "overlaps", "value"});
  ExpectRejected([](Fixture& f) { f.opt.state_layout = StateLayout::kKV; }, {"initial_state", "layout kv"});
}

TEST(Validate, CheckValuesFindsTheFirstBadElement) {
  auto poison = [](Fixture& f, Bytes& buf, int64_t index, float v) {
    reinterpret_cast<float*>(buf.data())[index] = v;
    f.opt.check_values = true;
  };
  ExpectRejected([&](Fixture& f) { poison(f, f.c.query, 13, NAN); }, {"query", "non-finite", "[0, 1, 5]"});
  ExpectRejected([&](Fixture& f) { poison(f, f.c.value, 50, INFINITY); }, {"value", "non-finite", "[1, 0, 2]"});
  ExpectRejected([&](Fixture& f) { poison(f, f.c.beta, 3, NAN); }, {"beta", "[0, 3]"});
  ExpectRejected([&](Fixture& f) { poison(f, f.c.initial_state, 7, -INFINITY); }, {"initial_state"});
  ExpectRejected([&](Fixture& f) { poison(f, f.c.g, 6, 0.5f); }, {"g", "<= 0", "0.5", "[1, 2]"});
  // Without check_values the same g > 0 is accepted (the cheap default).
  Fixture f(Small());
  reinterpret_cast<float*>(f.c.g.data())[6] = 0.5f;
  EXPECT_TRUE(cgdr::Run(f.in, f.out, f.opt).ok());
}

TEST(Validate, PerChannelGatePasses) {
  for (const CaseSpec& spec : {SmallKda(false), SmallKda(true), SmallKda(true, -5.0)}) {
    Fixture f(spec);
    f.opt.algo = Algo::kRecurrent;  // C = 1: the per-channel form every build has
    const Status s = cgdr::Run(f.in, f.out, f.opt);
    EXPECT_TRUE(s.ok()) << s.message();
  }
  Fixture f(SmallKda(true, -5.0));  // a bounded gate may omit A_log
  f.in.A_log = TensorView();
  f.opt.algo = Algo::kRecurrent;
  const Status s = cgdr::Run(f.in, f.out, f.opt);
  EXPECT_TRUE(s.ok()) << s.message();
}

TEST(Validate, PerChannelGateShapes) {
  // g [T, Nv, Dk + 1]: the per-channel shape named, the actual one given.
  ExpectRejected([](Fixture& f) { f.in.g.shape[2] = 9; }, {"g", "[8, 4, 8]", "[8, 4, 9]"}, SmallKda(false));
  ExpectRejected([](Fixture& f) { f.in.g.shape[1] = 3; }, {"g", "[8, 4, 8]", "[8, 3, 8]"}, SmallKda(false));
  ExpectRejected([](Fixture& f) { f.in.g.rank = 4; f.in.g.shape[3] = 1; }, {"g", "rank"}, SmallKda(false));
  ExpectRejected([](Fixture& f) { f.in.a.shape[2] = 9; }, {"a", "[8, 4, 8]", "[8, 4, 9]"}, SmallKda(true));
  // A per-channel a with dt_bias [Nv] (the scalar gate's): [Nv * Dk] expected.
  ExpectRejected([](Fixture& f) { f.in.dt_bias.shape[0] = 4; }, {"dt_bias", "Nv * Dk", "[32]", "[4]"}, SmallKda(true));
  // A scalar a with the per-channel dt_bias [Nv * Dk].
  ExpectRejected([](Fixture& f) {
    f.in.a.rank = 2;
  }, {"dt_bias", "[4]", "[32]"}, SmallKda(true));
  // A_log stays [Nv] with a per-channel a.
  ExpectRejected([](Fixture& f) { f.in.A_log.shape[0] = 32; }, {"A_log", "[Nv]", "[4]", "[32]"}, SmallKda(true));
}

TEST(Validate, GateLowerBound) {
  ExpectRejected([](Fixture& f) { f.opt.gate_lower_bound = 0.5; }, {"options.gate_lower_bound", "< 0", "0.5"},
                 SmallKda(true));
  ExpectRejected([](Fixture& f) { f.opt.gate_lower_bound = std::nan(""); }, {"options.gate_lower_bound", "nan"},
                 SmallKda(true));
  ExpectRejected([](Fixture& f) { f.opt.gate_lower_bound = -std::numeric_limits<double>::infinity(); },
                 {"options.gate_lower_bound", "finite"}, SmallKda(true));
  // A bound without the raw gate it applies to (g given, scalar or per channel).
  ExpectRejected([](Fixture& f) { f.opt.gate_lower_bound = -5.0; }, {"options.gate_lower_bound", "raw gate"});
  ExpectRejected([](Fixture& f) { f.opt.gate_lower_bound = -5.0; }, {"options.gate_lower_bound", "raw gate"},
                 SmallKda(false));
  // A_log missing is an error only without a bound.
  ExpectRejected([](Fixture& f) { f.in.A_log = TensorView(); }, {"A_log", "missing", "gate_lower_bound"},
                 SmallKda(true));
  ExpectRejected([](Fixture& f) { f.in.A_log = TensorView(); }, {"A_log", "missing"}, [] {
    CaseSpec s = Small();
    s.raw_gate = true;
    return s;
  }());
}

TEST(Validate, InPlaceStateUpdateIsAllowed) {
  CaseSpec s = Small();
  Case c = MakeCase(s);
  Case expect = MakeCase(s);
  ASSERT_TRUE(cgdr::Run(expect.inputs(), expect.outputs(), expect.options()).ok());
  Inputs in = c.inputs();
  Outputs out = c.outputs();
  out.final_state.data = in.initial_state.data;  // state updated in place, as serving engines do
  ASSERT_TRUE(cgdr::Run(in, out, c.options()).ok());
  EXPECT_EQ(0, std::memcmp(c.initial_state.data(), expect.final_state.data(), expect.final_state.size()));
  EXPECT_EQ(0, std::memcmp(c.out.data(), expect.out.data(), expect.out.size()));
}

}  // namespace
}  // namespace cgdr
