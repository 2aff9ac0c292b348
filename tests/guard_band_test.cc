// Issue "hardening" 3: guard bands. Every output lives inside a larger buffer
// filled with a sentinel, at an odd (unaligned) offset; after the run the
// sentinel must be intact on both sides, the inputs unchanged, and the output
// bitwise equal to a run into ordinary buffers. Odd shapes, every formulation,
// every SIMD target; then the same for the decode step's in-place state pool.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "cgdr/cgdr.hpp"
#include "cgdr/decode.hpp"
#include "core/dtype.h"
#include "core/synthetic.h"
#include "test_util.h"

namespace cgdr::testing {
namespace {

constexpr uint8_t kSentinel = 0xC3;

// `bytes` of payload between two guard bands. The payload starts 3 elements
// past a 64-byte boundary so no kernel may rely on aligned output rows.
class Guarded {
 public:
  Guarded(size_t bytes, size_t elem) : pre_(4096 + 3 * elem), bytes_(bytes), mem_(pre_ + bytes + 4096 + 5 * elem, kSentinel) {}
  void* data() { return mem_.data() + pre_; }
  Bytes payload() const { return {mem_.begin() + pre_, mem_.begin() + pre_ + bytes_}; }
  void set_payload(const Bytes& p) { std::memcpy(data(), p.data(), p.size()); }
  // Offset of the first damaged guard byte, or -1.
  int64_t FirstDamagedGuard() const {
    for (size_t i = 0; i < mem_.size(); ++i) {
      if ((i < pre_ || i >= pre_ + bytes_) && mem_[i] != kSentinel) return static_cast<int64_t>(i) - static_cast<int64_t>(pre_);
    }
    return -1;
  }

 private:
  size_t pre_, bytes_;
  Bytes mem_;
};

struct Shape {
  const char* name;
  int64_t Nk, Nv, Dk, Dv;
  std::vector<int32_t> lens;
};

const Shape kShapes[] = {
    {"tiny", 1, 3, 5, 7, {1, 0, 17}},
    {"odd", 2, 4, 37, 71, {100, 3}},
    {"generic", 1, 1, 129, 33, {65, 0}},
    {"unit", 1, 2, 1, 1, {70}},
};

struct DTypes {
  DType dtype, state;
  StateLayout layout;
};
const DTypes kDTypes[] = {{DType::kF32, DType::kF32, StateLayout::kVK},
                          {DType::kBF16, DType::kF32, StateLayout::kKV},
                          {DType::kF16, DType::kF16, StateLayout::kVK}};

CaseSpec SpecOf(const Shape& sh, const DTypes& dt) {
  CaseSpec s;
  s.Nk = sh.Nk; s.Nv = sh.Nv; s.Dk = sh.Dk; s.Dv = sh.Dv; s.lens = sh.lens;
  s.dtype = dt.dtype; s.state_dtype = dt.state; s.layout = dt.layout;
  return s;
}

// All input bytes, to prove the run did not write into them.
std::vector<Bytes> InputBytes(const Case& c) {
  return {c.query, c.key, c.value, c.beta, c.g, c.initial_state};
}

// Runs `c` with outputs in guarded buffers and checks guards, inputs and
// bytes against an ordinary run with the same options.
void CheckGuarded(Case& c, const Options& opt, const std::string& label) {
  Case plain = c;
  ASSERT_TRUE(cgdr::Run(plain.inputs(), plain.outputs(), opt).ok()) << label;

  const auto inputs_before = InputBytes(c);
  Guarded out(c.out.size(), DTypeSize(c.spec.dtype));
  Guarded state(c.final_state.size(), DTypeSize(c.spec.state_dtype));
  Outputs o = c.outputs();
  o.out.data = out.data();
  o.final_state.data = state.data();
  const Status s = cgdr::Run(c.inputs(), o, opt);
  ASSERT_TRUE(s.ok()) << label << ": " << s.message();
  EXPECT_EQ(out.FirstDamagedGuard(), -1) << label << ": out written outside its bytes";
  EXPECT_EQ(state.FirstDamagedGuard(), -1) << label << ": final_state written outside its bytes";
  EXPECT_EQ(out.payload(), plain.out) << label << ": out differs from an unguarded run";
  EXPECT_EQ(state.payload(), plain.final_state) << label << ": final_state differs from an unguarded run";
  EXPECT_TRUE(InputBytes(c) == inputs_before) << label << ": an input was written";
}

TEST(GuardBand, PrefillEveryShapeAlgoTarget) {
  ForEachTarget([&](const std::string& target) {
    for (const Shape& sh : kShapes) {
      for (const DTypes& dt : kDTypes) {
        for (Algo a : AllAlgos()) {
          Case c = MakeCase(SpecOf(sh, dt));
          Options opt = c.options();
          opt.algo = a;
          opt.threads = 2;
          CheckGuarded(c, opt, target + " " + sh.name + " " + DTypeName(dt.dtype) + " " + AlgoName(a));
        }
      }
    }
  });
}

// Narrow V tiles, more threads than items, no g, l2norm, and no final state.
TEST(GuardBand, PrefillTilesThreadsAndOptions) {
  for (Algo a : AllAlgos()) {
    for (int v_step : {16, 48}) {
      CaseSpec s = SpecOf(kShapes[1], kDTypes[1]);
      s.has_g = false;
      s.use_qk_l2norm = true;
      Case c = MakeCase(s);
      Options opt = c.options();
      opt.algo = a;
      opt.v_step = v_step;
      opt.threads = 7;
      CheckGuarded(c, opt, std::string(AlgoName(a)) + " v_step=" + std::to_string(v_step));
    }
    CaseSpec s = SpecOf(kShapes[0], kDTypes[0]);
    s.want_final_state = false;
    s.has_initial_state = false;
    Case c = MakeCase(s);
    Options opt = c.options();
    opt.algo = a;
    Guarded out(c.out.size(), 4);
    Outputs o = c.outputs();
    o.out.data = out.data();
    ASSERT_TRUE(cgdr::Run(c.inputs(), o, opt).ok());
    EXPECT_EQ(out.FirstDamagedGuard(), -1) << AlgoName(a) << ": out only";
  }
}

// The AMX engine (emulated everywhere; the hardware where the CPU has it),
// every shape and dtype, each chunk size.
TEST(GuardBand, PrefillTileEngines) {
  for (Engine engine : {Engine::kAmxEmulated, Engine::kAmx}) {
    for (const Shape& sh : kShapes) {
      for (const DTypes& dt : kDTypes) {
        for (Algo a : {Algo::kChunk16, Algo::kChunk64, Algo::kChunk128}) {
          Case c = MakeCase(SpecOf(sh, dt));
          Options opt = c.options();
          opt.algo = a;
          opt.threads = 2;
          opt.engine = engine;
          opt.precision = Precision::kBf16x3;
          CheckGuarded(c, opt, std::string(EngineName(engine)) + " " + sh.name + " " + DTypeName(dt.dtype) + " " +
                                   AlgoName(a));
        }
      }
    }
  }
}

// final_state == initial_state (the in-place update SPEC allows): the state
// buffer is guarded and must end as an out-of-place run's final state.
TEST(GuardBand, InPlaceStateUpdate) {
  ForEachTarget([&](const std::string& target) {
    for (const DTypes& dt : kDTypes) {
      for (Algo a : AllAlgos()) {
        Case c = MakeCase(SpecOf(kShapes[1], dt));
        Options opt = c.options();
        opt.algo = a;
        Case plain = c;
        ASSERT_TRUE(cgdr::Run(plain.inputs(), plain.outputs(), opt).ok());
        Guarded state(c.initial_state.size(), DTypeSize(dt.state));
        state.set_payload(c.initial_state);
        Inputs in = c.inputs();
        Outputs o = c.outputs();
        in.initial_state.data = state.data();
        o.final_state.data = state.data();
        const std::string label = target + " " + DTypeName(dt.dtype) + " " + AlgoName(a);
        ASSERT_TRUE(cgdr::Run(in, o, opt).ok()) << label;
        EXPECT_EQ(state.FirstDamagedGuard(), -1) << label;
        EXPECT_EQ(state.payload(), plain.final_state) << label;
        EXPECT_EQ(c.out, plain.out) << label;
      }
    }
  });
}

// A rejected call writes nothing at all, guards or payload: bad lengths, and
// option enums holding values outside their enumerators (the api fuzzer
// found these reaching the planner, which failed with an internal error).
TEST(GuardBand, RejectedCallWritesNothing) {
  const std::pair<const char*, std::function<void(Case&, Options&)>> kBad[] = {
      {"seq_lens", [](Case& c, Options&) { c.seq_lens[0] += 1; }},  // lengths no longer sum to T
      {"options.algo", [](Case&, Options& o) { o.algo = static_cast<Algo>(2); }},
      {"options.algo", [](Case&, Options& o) { o.algo = static_cast<Algo>(255); }},
      {"options.state_layout", [](Case&, Options& o) { o.state_layout = static_cast<StateLayout>(2); }},
  };
  for (const auto& [name, mutate] : kBad) {
    Case c = MakeCase(SpecOf(kShapes[1], kDTypes[0]));
    Options opt = c.options();
    mutate(c, opt);
    Guarded out(c.out.size(), 4), state(c.final_state.size(), 4);
    Outputs o = c.outputs();
    o.out.data = out.data();
    o.final_state.data = state.data();
    const auto out_before = out.payload(), state_before = state.payload();
    const Status s = cgdr::Run(c.inputs(), o, opt);
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << name << ": " << s.message();
    EXPECT_EQ(s.message().rfind(std::string(name) + ":", 0), 0u) << s.message();
    EXPECT_EQ(out.payload(), out_before) << name;
    EXPECT_EQ(state.payload(), state_before) << name;
    EXPECT_EQ(out.FirstDamagedGuard(), -1) << name;
    EXPECT_EQ(state.FirstDamagedGuard(), -1) << name;
  }
}

// ---- decode: state pool updated in place through indices.

struct DecodeCase {
  int64_t N = 4, P = 7, Nk = 1, Nv = 3, Dk = 37, Dv = 21;
  DType dtype, pool_dtype;
  StateLayout layout;
  Bytes q, k, v, beta, g, pool;
  std::vector<int32_t> idx{5, -1, 0, 2};  // rows 1, 3, 4, 6 are never named

  DecodeCase(DType dt, DType pool_dt, StateLayout l) : dtype(dt), pool_dtype(pool_dt), layout(l) {
    q = Filled(N * Nk * Dk, dtype, 0.17f);
    k = Filled(N * Nk * Dk, dtype, 0.23f);
    v = Filled(N * Nv * Dv, dtype, 0.5f);
    beta = Filled(N * Nv, dtype, 0.03f);
    g = Filled(N * Nv, DType::kF32, -0.01f);
    pool = Filled(P * Nv * Dk * Dv, pool_dtype, 0.11f);
  }
  static Bytes Filled(int64_t n, DType t, float step) {
    Bytes b(static_cast<size_t>(n) * DTypeSize(t));
    for (int64_t i = 0; i < n; ++i) StoreFromF32(b.data(), t, i, step * static_cast<float>((i * 37) % 17 - 8) / 8.0f);
    return b;
  }
  DecodeInputs Inputs(void* pool_data) {
    const bool kv = layout == StateLayout::kKV;
    DecodeInputs in;
    in.query = TensorView(q.data(), dtype, {N, Nk, Dk});
    in.key = TensorView(k.data(), dtype, {N, Nk, Dk});
    in.value = TensorView(v.data(), dtype, {N, Nv, Dv});
    in.beta = TensorView(beta.data(), dtype, {N, Nv});
    in.g = TensorView(g.data(), DType::kF32, {N, Nv});
    in.state_pool = TensorView(pool_data, pool_dtype, {P, Nv, kv ? Dk : Dv, kv ? Dv : Dk});
    in.state_indices = TensorView(idx.data(), DType::kI32, {N});
    return in;
  }
  Options Opts() const {
    Options o;
    o.state_layout = layout;
    o.threads = 3;
    return o;
  }
};

TEST(GuardBand, DecodeStatePoolEveryTarget) {
  ForEachTarget([&](const std::string& target) {
    for (const DTypes& dt : kDTypes) {
      DecodeCase dc(dt.dtype, dt.state, dt.layout);
      const size_t out_bytes = static_cast<size_t>(dc.N * dc.Nv * dc.Dv) * DTypeSize(dt.dtype);
      // Reference: the same step into ordinary buffers.
      Bytes plain_pool = dc.pool, plain_out(out_bytes, 0);
      ASSERT_TRUE(DecodeStep(dc.Inputs(plain_pool.data()),
                             {TensorView(plain_out.data(), dt.dtype, {dc.N, dc.Nv, dc.Dv})}, dc.Opts()).ok());

      Guarded pool(dc.pool.size(), DTypeSize(dt.state)), out(out_bytes, DTypeSize(dt.dtype));
      pool.set_payload(dc.pool);
      const auto inputs_before = std::vector<Bytes>{dc.q, dc.k, dc.v, dc.beta, dc.g};
      const std::string label = target + " " + DTypeName(dt.dtype) + " pool " + DTypeName(dt.state);
      const Status s = DecodeStep(dc.Inputs(pool.data()), {TensorView(out.data(), dt.dtype, {dc.N, dc.Nv, dc.Dv})},
                                  dc.Opts());
      ASSERT_TRUE(s.ok()) << label << ": " << s.message();
      EXPECT_EQ(pool.FirstDamagedGuard(), -1) << label << ": pool written outside its bytes";
      EXPECT_EQ(out.FirstDamagedGuard(), -1) << label << ": out written outside its bytes";
      EXPECT_EQ(out.payload(), plain_out) << label;
      const Bytes after = pool.payload();
      EXPECT_EQ(after, plain_pool) << label;
      // Rows no index names keep every byte; named rows changed.
      const size_t row = after.size() / static_cast<size_t>(dc.P);
      for (int64_t r = 0; r < dc.P; ++r) {
        const bool named = r == 5 || r == 0 || r == 2;
        const bool same = std::memcmp(after.data() + r * row, dc.pool.data() + r * row, row) == 0;
        EXPECT_EQ(same, !named) << label << ": pool row " << r;
      }
      EXPECT_TRUE((std::vector<Bytes>{dc.q, dc.k, dc.v, dc.beta, dc.g}) == inputs_before) << label;
    }
  });
}

}  // namespace
}  // namespace cgdr::testing
