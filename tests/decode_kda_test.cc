// KDA's per-channel gate (docs/SPEC.md 10) in the decode step and its token
// axis (docs/SPEC.md 6b, 6d): every key channel i of a state decays by its
// own exp(g_t[i]) (layout kv: row i of S; vk: column i), from g [N, (K,) Nv,
// Dk] or from the raw gate a of that shape with dt_bias [Nv * Dk], with and
// without options.gate_lower_bound (and then without A_log). Checked here:
//   - against the FP64 recurrence (reference.cc, the same tokens as a
//     prefill): f32 within 1e-5, 16-bit inputs and pools within their
//     rounding, for both layouts, odd Dk / Dv, grouped heads, on every SIMD
//     target this CPU runs;
//   - a 16-bit pool holds exactly the f32 pool's step rounded once;
//   - the token axis (K > 1) is bit for bit K single steps (dense states,
//     pool slots, in place);
//   - channels that all carry their head's decay give the scalar gate's bits
//     (the kernels apply the same operations lane for lane; exp is
//     ExpOfLogDecay in both, and GateChannels is GateRow's arithmetic lane for lane);
//   - skipped rows (negative indices): zeros out, no slot written;
//   - bitwise across thread counts;
//   - Dk = 128's unrolled vk kernels give the run-time-length kernels' bits;
//   - bad gate shapes rejected, naming the tensor, before anything is written.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <new>
#include <string>
#include <tuple>
#include <vector>

#include "cgdr/cgdr.hpp"
#include "cgdr/decode.hpp"
#include "core/dtype.h"
#include "core/synthetic.h"
#include "decode/decode_internal.h"
#include "reference/reference.h"
#include "test_util.h"

namespace cgdr {
namespace {

using testing::ForEachTarget;

// Line-aligned storage (as a torch tensor's), so whole-vector rows take the
// token axis' streaming stores.
template <class T>
struct LineAligned {
  using value_type = T;
  LineAligned() = default;
  template <class U>
  LineAligned(const LineAligned<U>&) {}  // NOLINT: allocators convert implicitly
  T* allocate(size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t{64})); }
  void deallocate(T* p, size_t) { ::operator delete(p, std::align_val_t{64}); }
  bool operator==(const LineAligned&) const { return true; }
};
using Buf = std::vector<uint8_t, LineAligned<uint8_t>>;

enum class Gate { kG, kRaw, kRawBound, kRawBoundNoALog };
const char* GateName(Gate g) {
  switch (g) {
    case Gate::kG: return "g";
    case Gate::kRaw: return "raw";
    case Gate::kRawBound: return "raw+bound";
    case Gate::kRawBoundNoALog: return "raw+bound-no-A_log";
  }
  return "?";
}
constexpr Gate kGates[] = {Gate::kG, Gate::kRaw, Gate::kRawBound, Gate::kRawBoundNoALog};

CaseSpec KdaSpec(StateLayout layout, int64_t Nk, int64_t Nv, int64_t Dk, int64_t Dv, Gate gate,
                 DType dt = DType::kF32, DType pool = DType::kF32) {
  CaseSpec s;
  s.Nk = Nk; s.Nv = Nv; s.Dk = Dk; s.Dv = Dv;
  s.layout = layout;
  s.dtype = dt;
  s.state_dtype = pool;  // the pool starts from the case's initial states, exactly
  s.use_qk_l2norm = true;
  s.per_channel_gate = true;
  s.raw_gate = gate != Gate::kG;
  s.beta_sigmoid = gate == Gate::kRaw;
  s.gate_lower_bound = gate == Gate::kRawBound || gate == Gate::kRawBoundNoALog ? -5.0 : 0.0;  // fla's KDA default
  s.g_min = -0.6f;
  s.seed = static_cast<uint64_t>(Dk * 131 + Dv * 7 + Nv + 1000 * static_cast<int>(gate));
  return s;
}

// `t` [N * K, d...] seen as [N, K, d...].
TensorView WithTokenAxis(const TensorView& t, int64_t N, int64_t K) {
  if (!t.present()) return t;
  std::vector<int64_t> dims{N, K};
  for (int i = 1; i < t.rank; ++i) dims.push_back(t.shape[i]);
  return TensorView(t.data, t.dtype, dims);
}

// Rows {n K + j : n < N} of a [N * K, ...] tensor as a dense [N, ...] buffer.
Buf TokenRows(const TensorView& t, int64_t N, int64_t K, int64_t j) {
  if (!t.present()) return Buf();
  const size_t row = static_cast<size_t>(t.numel() / t.shape[0]) * DTypeSize(t.dtype);
  Buf b(static_cast<size_t>(N) * row);
  for (int64_t n = 0; n < N; ++n) std::memcpy(&b[n * row], static_cast<const uint8_t*>(t.data) + (n * K + j) * row, row);
  return b;
}
TensorView Over(Buf& b, const TensorView& like, int64_t N) {
  if (!like.present()) return like;
  TensorView v = like;
  v.data = b.data();
  v.shape[0] = N;
  return v;
}

// N sequences of K tokens each: a prefill case of N sequences of length K
// whose [N * K, ...] tensors are the decode inputs ([N, K, ...], or [N, ...]
// for K = 1 without a token axis); a pool of P = N (K + 1) + 2 slots with
// sequence n's initial state in slot src[n] = P - 1 - n, the rest a marker.
struct Draft {
  Case c;
  int64_t N, K, P, slot;
  DType pool_dtype;
  bool no_a_log;
  bool no_dt_bias = false;  // the raw gate without dt_bias (0)
  Buf pool;
  std::vector<int32_t> src;
  Draft(CaseSpec spec, int64_t n, int64_t k, bool drop_a_log = false)
      : N(n), K(k), P(n * (k + 1) + 2), pool_dtype(spec.state_dtype), no_a_log(drop_a_log) {
    spec.lens.assign(static_cast<size_t>(n), static_cast<int32_t>(k));
    c = MakeCase(spec);
    slot = spec.Nv * spec.Dk * spec.Dv;
    pool.assign(static_cast<size_t>(P * slot) * DTypeSize(pool_dtype), 0x3C);
    for (int64_t i = 0; i < N; ++i) {
      src.push_back(static_cast<int32_t>(P - 1 - i));
      std::memcpy(Slot(pool, src.back()), c.initial_state.data() + i * SlotBytes(), SlotBytes());
    }
  }
  static Draft For(StateLayout layout, int64_t Nk, int64_t Nv, int64_t Dk, int64_t Dv, Gate gate, int64_t n, int64_t k,
                   DType dt = DType::kF32, DType pool = DType::kF32) {
    return Draft(KdaSpec(layout, Nk, Nv, Dk, Dv, gate, dt, pool), n, k, gate == Gate::kRawBoundNoALog);
  }
  Options options(int threads = 0) const {
    Options o = c.options();
    o.threads = threads;
    return o;
  }
  cgdr::Inputs PrefillInputs() {
    cgdr::Inputs in = c.inputs();
    if (no_a_log) in.A_log = TensorView();
    if (no_dt_bias) in.dt_bias = TensorView();
    return in;
  }
  TensorView PoolView(Buf& b) const {
    const bool kv = c.spec.layout == StateLayout::kKV;
    return TensorView(b.data(), pool_dtype, {P, c.spec.Nv, kv ? c.spec.Dk : c.spec.Dv, kv ? c.spec.Dv : c.spec.Dk});
  }
  size_t SlotBytes() const { return static_cast<size_t>(slot) * DTypeSize(pool_dtype); }
  uint8_t* Slot(Buf& b, int64_t s) const { return b.data() + s * static_cast<int64_t>(SlotBytes()); }
  size_t OutRowBytes() const { return static_cast<size_t>(c.spec.Nv * c.spec.Dv) * DTypeSize(c.spec.dtype); }
  // The decode call over the case's tensors: a token axis of K unless K = 1.
  DecodeInputs Inputs(Buf& pool_buf) {
    const cgdr::Inputs in = PrefillInputs();
    DecodeInputs d;
    const auto axis = [&](const TensorView& t) { return K == 1 ? t : WithTokenAxis(t, N, K); };
    d.query = axis(in.query);
    d.key = axis(in.key);
    d.value = axis(in.value);
    d.beta = axis(in.beta);
    d.g = axis(in.g);
    d.a = axis(in.a);
    d.A_log = in.A_log;
    d.dt_bias = in.dt_bias;
    d.state_pool = PoolView(pool_buf);
    d.state_indices = TensorView(src.data(), DType::kI32, {N});
    return d;
  }
  TensorView OutView(Buf& out) const {
    const CaseSpec& s = c.spec;
    if (K == 1) return TensorView(out.data(), s.dtype, {N, s.Nv, s.Dv});
    return TensorView(out.data(), s.dtype, {N, K, s.Nv, s.Dv});
  }
};

// K single steps (no token axis) on a copy of the pool: out [N, K, Nv, Dv]
// and the state of every sequence after every token.
struct SingleSteps {
  Buf out, pool;
  std::vector<std::vector<Buf>> states;  // [n][j]
  SingleSteps(Draft& d, const Options& opt) : pool(d.pool) {
    const cgdr::Inputs in = d.PrefillInputs();
    const CaseSpec& s = d.c.spec;
    const size_t out_row = d.OutRowBytes();
    out.assign(static_cast<size_t>(d.N * d.K) * out_row, 0);
    states.assign(static_cast<size_t>(d.N), std::vector<Buf>(static_cast<size_t>(d.K)));
    for (int64_t j = 0; j < d.K; ++j) {
      Buf q = TokenRows(in.query, d.N, d.K, j), k = TokenRows(in.key, d.N, d.K, j);
      Buf v = TokenRows(in.value, d.N, d.K, j), beta = TokenRows(in.beta, d.N, d.K, j);
      Buf g = TokenRows(in.g, d.N, d.K, j), a = TokenRows(in.a, d.N, d.K, j);
      Buf o(static_cast<size_t>(d.N) * out_row);
      DecodeInputs di;
      di.query = Over(q, in.query, d.N);
      di.key = Over(k, in.key, d.N);
      di.value = Over(v, in.value, d.N);
      di.beta = Over(beta, in.beta, d.N);
      di.g = Over(g, in.g, d.N);
      di.a = Over(a, in.a, d.N);
      di.A_log = in.A_log;
      di.dt_bias = in.dt_bias;
      di.state_pool = d.PoolView(pool);
      di.state_indices = TensorView(d.src.data(), DType::kI32, {d.N});
      DecodeOutputs dout;
      dout.out = TensorView(o.data(), s.dtype, {d.N, s.Nv, s.Dv});
      const Status st = DecodeStep(di, dout, opt);
      EXPECT_TRUE(st.ok()) << st.message();
      for (int64_t n = 0; n < d.N; ++n) {
        std::memcpy(&out[(n * d.K + j) * out_row], &o[n * out_row], out_row);
        const uint8_t* sl = d.Slot(pool, d.src[static_cast<size_t>(n)]);
        states[n][j].assign(sl, sl + d.SlotBytes());
      }
    }
  }
};

struct Measured {
  double out = 0, state = 0, out_round = 0, state_round = 0;
};

// The decode call (K tokens in place) against the FP64 recurrence of the
// same tokens as a prefill: out of every token and the final states.
Measured AgainstFp64(Draft& d, int threads = 0) {
  Measured m;
  const Options opt = d.options(threads);
  Buf pool = d.pool;
  Buf out(static_cast<size_t>(d.N * d.K) * d.OutRowBytes());
  DecodeOutputs o;
  o.out = d.OutView(out);
  const Status st = DecodeStep(d.Inputs(pool), o, opt);
  EXPECT_TRUE(st.ok()) << st.message();
  if (!st.ok()) return m;
  const cgdr::Inputs pin = d.PrefillInputs();
  Problem p;
  const Status vs = Validate(pin, d.c.outputs(), opt, &p);
  EXPECT_TRUE(vs.ok()) << vs.message();
  EXPECT_TRUE(p.per_channel_gate);
  ReferenceResult ref;
  ReferenceRun(pin, p, &ref);
  const CaseSpec& s = d.c.spec;
  m.out = RelativeError(TensorView(out.data(), s.dtype, {d.N * d.K, s.Nv, s.Dv}), ref.out, s.Nv);
  Buf last;
  for (int64_t n = 0; n < d.N; ++n) {
    const uint8_t* sl = d.Slot(pool, d.src[static_cast<size_t>(n)]);
    last.insert(last.end(), sl, sl + d.SlotBytes());
  }
  const TensorView pv = d.PoolView(pool);
  m.state = RelativeError(TensorView(last.data(), d.pool_dtype, {d.N, s.Nv, pv.shape[2], pv.shape[3]}),
                          ref.final_state, s.Nv);
  m.out_round = RoundingError(ref.out, s.dtype);
  m.state_round = RoundingError(ref.final_state, d.pool_dtype);
  // Nothing outside the sources moved.
  for (int64_t sl = 0; sl < d.P - d.N; ++sl) {
    EXPECT_EQ(std::memcmp(d.Slot(pool, sl), d.Slot(d.pool, sl), d.SlotBytes()), 0) << "slot " << sl;
  }
  return m;
}

// ------------------------------------------------------------ against FP64

// f32: within 1e-5 of FP64, every gate form, both layouts, odd and grouped
// shapes, one step and a token axis, every target.
TEST(DecodeKda, F32MatchesFp64OnEveryTarget) {
  struct Shape { int64_t Nk, Nv, Dk, Dv; };
  const Shape shapes[] = {{1, 2, 17, 33}, {2, 4, 33, 17}, {1, 2, 100, 100}, {1, 1, 128, 128}};
  for (StateLayout layout : {StateLayout::kVK, StateLayout::kKV}) {
    for (const Shape& sh : shapes) {
      for (Gate gate : kGates) {
        for (int64_t K : {1, 3}) {
          Draft d = Draft::For(layout, sh.Nk, sh.Nv, sh.Dk, sh.Dv, gate, 3, K);
          double worst_out = 0, worst_state = 0;
          ForEachTarget([&](const std::string& target) {
            SCOPED_TRACE(std::string(StateLayoutName(layout)) + " " + std::to_string(sh.Dk) + "x" +
                         std::to_string(sh.Dv) + " Nv " + std::to_string(sh.Nv) + " " + GateName(gate) + " K " +
                         std::to_string(K) + " " + target);
            const Measured m = AgainstFp64(d);
            EXPECT_LE(m.out, 1e-5);
            EXPECT_LE(m.state, 1e-5);
            worst_out = std::max(worst_out, m.out);
            worst_state = std::max(worst_state, m.state);
          });
          if (sh.Dk == 100 && K == 3) {
            std::printf("%s %lldx%lld %s K=3: worst rel err out %.2e state %.2e\n", StateLayoutName(layout),
                        static_cast<long long>(sh.Dk), static_cast<long long>(sh.Dv), GateName(gate), worst_out,
                        worst_state);
          }
        }
      }
    }
  }
}

// The raw per-channel gate without dt_bias (zero bias), bounded or not.
TEST(DecodeKda, RawGateWithoutDtBiasMatchesFp64) {
  for (StateLayout layout : {StateLayout::kVK, StateLayout::kKV}) {
    for (Gate gate : {Gate::kRaw, Gate::kRawBound, Gate::kRawBoundNoALog}) {
      for (int64_t K : {1, 4}) {
        SCOPED_TRACE(std::string(StateLayoutName(layout)) + " " + GateName(gate) + " K " + std::to_string(K));
        Draft d = Draft::For(layout, 2, 4, 33, 17, gate, 3, K);
        d.no_dt_bias = true;
        const Measured m = AgainstFp64(d);
        EXPECT_LE(m.out, 1e-5);
        EXPECT_LE(m.state, 1e-5);
      }
    }
  }
}

// 16-bit inputs and pools: within SPEC 6's 2x rounding of the output's dtype
// (a 16-bit pool: the state is rounded once per step, so K = 3 steps may
// carry up to a few roundings; decode_test bounds the same for the scalar gate).
TEST(DecodeKda, SixteenBitMatchesFp64) {
  for (StateLayout layout : {StateLayout::kVK, StateLayout::kKV}) {
    for (const auto& [dt, pool_dt] : {std::tuple{DType::kBF16, DType::kBF16}, std::tuple{DType::kF16, DType::kF16},
                                      std::tuple{DType::kBF16, DType::kF32}, std::tuple{DType::kF32, DType::kF16}}) {
      for (Gate gate : {Gate::kG, Gate::kRawBound}) {
        for (int64_t K : {1, 3}) {
          SCOPED_TRACE(std::string(StateLayoutName(layout)) + " " + DTypeName(dt) + " pool " + DTypeName(pool_dt) + " " +
                       GateName(gate) + " K " + std::to_string(K));
          Draft d = Draft::For(layout, 2, 4, 33, 17, gate, 3, K, dt, pool_dt);
          const Measured m = AgainstFp64(d);
          const double steps = pool_dt == DType::kF32 ? 0.0 : static_cast<double>(K);
          EXPECT_LE(m.out, 2.0 * m.out_round + 2.0 * steps * m.state_round + 2e-5) << m.out_round;
          EXPECT_LE(m.state, (pool_dt == DType::kF32 ? 0.0 : 2.0 * steps * m.state_round) + 2e-5) << m.state_round;
        }
      }
    }
  }
}

// One step on a 16-bit pool is bit for bit the step on an f32 copy of the
// pool rounded once (the kernels widen and round in registers), per-channel
// gate included, on every target.
TEST(DecodeKda, SixteenBitPoolIsTheRoundedF32PoolOnEveryTarget) {
  for (DType pd : {DType::kBF16, DType::kF16}) {
    for (StateLayout layout : {StateLayout::kVK, StateLayout::kKV}) {
      for (Gate gate : {Gate::kG, Gate::kRawBound}) {
        Draft d16 = Draft::For(layout, 1, 2, 19, 23, gate, 3, 1, DType::kF32, pd);
        Draft d32 = Draft::For(layout, 1, 2, 19, 23, gate, 3, 1, DType::kF32, DType::kF32);
        for (int64_t sl = 0; sl < d16.P * d16.slot; ++sl) {  // same 16-bit representable start in both
          StoreFromF32(d32.pool.data(), DType::kF32, sl, LoadAsF32(d16.pool.data(), pd, sl));
        }
        ForEachTarget([&](const std::string& target) {
          SCOPED_TRACE(std::string(DTypeName(pd)) + " " + StateLayoutName(layout) + " " + GateName(gate) + " " + target);
          Buf p16 = d16.pool, p32 = d32.pool;
          Buf o16(d16.N * d16.OutRowBytes()), o32(o16.size());
          DecodeOutputs out16, out32;
          out16.out = d16.OutView(o16);
          out32.out = d32.OutView(o32);
          ASSERT_TRUE(DecodeStep(d16.Inputs(p16), out16, d16.options()).ok());
          ASSERT_TRUE(DecodeStep(d32.Inputs(p32), out32, d32.options()).ok());
          int64_t mismatches = 0;
          for (int64_t i = 0; i < d16.P * d16.slot; ++i) {
            const float f = LoadAsF32(p32.data(), DType::kF32, i);
            const uint16_t want = pd == DType::kBF16 ? F32ToBF16(f) : F32ToF16(f);
            uint16_t got;
            std::memcpy(&got, p16.data() + 2 * i, 2);
            mismatches += got != want;
          }
          EXPECT_EQ(mismatches, 0);
          EXPECT_EQ(o16, o32);
        });
      }
    }
  }
}

// ------------------------------------------------------- bitwise properties

enum class Mode { kSlots, kDense, kInPlace };
const char* ModeName(Mode m) { return m == Mode::kSlots ? "slots" : m == Mode::kDense ? "dense" : "in place"; }

// The token axis and K single steps agree bit for bit: out, and the state
// after every token where the mode puts it; nothing else in the pool moves.
void ExpectEqualsSingleSteps(Draft& d, Mode mode, int threads = 0) {
  const Options opt = d.options(threads);
  SingleSteps ref(d, opt);
  Buf pool = d.pool;
  const Buf pool_before = pool;
  DecodeInputs in = d.Inputs(pool);
  Buf out(ref.out.size()), states;
  DecodeOutputs o;
  o.out = d.OutView(out);
  std::vector<int32_t> dst(static_cast<size_t>(d.N * d.K));
  for (int64_t i = 0; i < d.N * d.K; ++i) dst[i] = static_cast<int32_t>(i);
  if (mode == Mode::kSlots) {
    dst[d.K - 1] = d.src[0];  // sequence 0's last token overwrites its own source
    in.dst_indices = TensorView(dst.data(), DType::kI32, {d.N, d.K});
  } else if (mode == Mode::kDense) {
    states.assign(static_cast<size_t>(d.N * d.K) * d.SlotBytes(), 0);
    const TensorView pv = d.PoolView(pool);
    o.states = TensorView(states.data(), d.pool_dtype, {d.N * d.K, pv.shape[1], pv.shape[2], pv.shape[3]});
  }
  const Status st = DecodeStep(in, o, opt);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(out, ref.out) << "out";
  Buf expect_pool = pool_before;
  for (int64_t n = 0; n < d.N; ++n) {
    for (int64_t j = 0; j < d.K; ++j) {
      const Buf& want = ref.states[n][j];
      const uint8_t* got = nullptr;
      int64_t slot = -1;
      if (mode == Mode::kSlots) slot = dst[n * d.K + j];
      if (mode == Mode::kInPlace && j == d.K - 1) slot = d.src[static_cast<size_t>(n)];
      if (slot >= 0) {
        got = d.Slot(pool, slot);
        std::memcpy(d.Slot(expect_pool, slot), want.data(), want.size());
      }
      if (mode == Mode::kDense) got = states.data() + (n * d.K + j) * d.SlotBytes();
      if (got) {
        EXPECT_EQ(std::memcmp(got, want.data(), want.size()), 0) << "state of sequence " << n << " after token " << j;
      }
    }
  }
  EXPECT_EQ(pool, expect_pool) << "pool bytes outside the destinations changed";
}

TEST(DecodeKda, TokenAxisEqualsSingleStepsBitwise) {
  for (StateLayout layout : {StateLayout::kVK, StateLayout::kKV}) {
    for (const auto& [dt, pool_dt] : {std::tuple{DType::kF32, DType::kF32}, std::tuple{DType::kBF16, DType::kBF16},
                                      std::tuple{DType::kF16, DType::kF16}, std::tuple{DType::kBF16, DType::kF32}}) {
      for (Gate gate : kGates) {
        for (int64_t K : {4, 16}) {
          Draft d = Draft::For(layout, 2, 4, 37, 21, gate, 3, K, dt, pool_dt);
          for (Mode mode : {Mode::kSlots, Mode::kDense, Mode::kInPlace}) {
            SCOPED_TRACE(std::string(StateLayoutName(layout)) + " " + DTypeName(dt) + " pool " + DTypeName(pool_dt) +
                         " " + GateName(gate) + " " + ModeName(mode) + " K " + std::to_string(K));
            ExpectEqualsSingleSteps(d, mode);
          }
        }
      }
    }
  }
}

// Rows of whole vectors in aligned slots (the streamed destinations), and
// every target; the scalar gate too (a bf16 pool on a 128-bit target once
// streamed 8-byte vectors with 16-byte stores and faulted: decode.cc StreamsRows).
TEST(DecodeKda, TokenAxisEqualsSingleStepsOnEveryTarget) {
  for (StateLayout layout : {StateLayout::kVK, StateLayout::kKV}) {
    for (DType pool_dt : {DType::kF32, DType::kBF16, DType::kF16}) {
      for (const auto& [Dk, Dv, per_channel] :
           {std::tuple{int64_t{32}, int64_t{32}, true}, std::tuple{int64_t{17}, int64_t{33}, true},
            std::tuple{int64_t{32}, int64_t{32}, false}}) {
        CaseSpec spec = KdaSpec(layout, 1, 2, Dk, Dv, Gate::kRawBound, DType::kF32, pool_dt);
        spec.per_channel_gate = per_channel;
        Draft d(spec, 3, 4);
        ForEachTarget([&](const std::string& target) {
          SCOPED_TRACE(std::string(StateLayoutName(layout)) + " pool " + DTypeName(pool_dt) + " " + std::to_string(Dk) +
                       "x" + std::to_string(Dv) + (per_channel ? " per channel " : " scalar gate ") + target);
          ExpectEqualsSingleSteps(d, Mode::kSlots);
          ExpectEqualsSingleSteps(d, Mode::kDense);
        });
      }
    }
  }
}

TEST(DecodeKda, BitwiseAcrossThreadCounts) {
  for (StateLayout layout : {StateLayout::kVK, StateLayout::kKV}) {
    for (int64_t K : {1, 4}) {
      Draft d = Draft::For(layout, 2, 4, 64, 48, Gate::kRawBound, 5, K);
      Buf ref_pool, ref_out;
      for (int threads : {1, 2, 3, 8}) {
        SCOPED_TRACE(std::string(StateLayoutName(layout)) + " K " + std::to_string(K) + " threads " + std::to_string(threads));
        Buf pool = d.pool, out(static_cast<size_t>(d.N * d.K) * d.OutRowBytes());
        DecodeOutputs o;
        o.out = d.OutView(out);
        ASSERT_TRUE(DecodeStep(d.Inputs(pool), o, d.options(threads)).ok());
        if (ref_pool.empty()) {
          ref_pool = pool;
          ref_out = out;
          continue;
        }
        EXPECT_EQ(pool, ref_pool);
        EXPECT_EQ(out, ref_out);
      }
    }
  }
}

// A per-channel gate whose Dk channels all carry the head's decay (g, or the
// raw a with dt_bias repeated per channel) is the scalar gate, bit for bit:
// the per-channel kernels multiply element i by decay_ch[i] where the scalar
// ones multiply by the head's decay, with no other change to the sums, the
// decays are std::exp of the same floats, and GateChannels runs GateRow's
// lane arithmetic (the library builds with -ffp-contract=off).
TEST(DecodeKda, EqualChannelsAreTheScalarGateBitwise) {
  for (StateLayout layout : {StateLayout::kVK, StateLayout::kKV}) {
    for (DType pool_dt : {DType::kF32, DType::kBF16}) {
      for (Gate gate : kGates) {
        for (int64_t K : {1, 4}) {
          CaseSpec spec = KdaSpec(layout, 2, 4, 37, 21, gate, DType::kF32, pool_dt);
          spec.per_channel_gate = false;  // the scalar-gate case ...
          Draft scalar(spec, 3, K, gate == Gate::kRawBoundNoALog);
          // ... and its per-channel copy: every channel of head h carries g[t, h] (a[t, h], dt_bias[h]).
          const int64_t T = scalar.N * scalar.K, Nv = spec.Nv, Dk = spec.Dk;
          const cgdr::Inputs sin = scalar.PrefillInputs();
          const TensorView& gate_in = sin.g.present() ? sin.g : sin.a;
          std::vector<float> wide(static_cast<size_t>(T * Nv * Dk)), bias(static_cast<size_t>(Nv * Dk));
          for (int64_t i = 0; i < T * Nv * Dk; ++i) wide[i] = LoadAsF32(gate_in.data, gate_in.dtype, i / Dk);
          if (sin.dt_bias.present()) {
            for (int64_t i = 0; i < Nv * Dk; ++i) bias[i] = LoadAsF32(sin.dt_bias.data, sin.dt_bias.dtype, i / Dk);
          }
          ForEachTarget([&](const std::string& target) {
            SCOPED_TRACE(std::string(StateLayoutName(layout)) + " pool " + DTypeName(pool_dt) + " " + GateName(gate) +
                         " K " + std::to_string(K) + " " + target);
            Buf p_scalar = scalar.pool, p_channel = scalar.pool;
            Buf o_scalar(static_cast<size_t>(T) * scalar.OutRowBytes()), o_channel(o_scalar.size());
            DecodeOutputs os, oc;
            os.out = scalar.OutView(o_scalar);
            oc.out = scalar.OutView(o_channel);
            const DecodeInputs in_s = scalar.Inputs(p_scalar);
            DecodeInputs in_c = scalar.Inputs(p_channel);
            const std::vector<int64_t> shape =
                K == 1 ? std::vector<int64_t>{scalar.N, Nv, Dk} : std::vector<int64_t>{scalar.N, K, Nv, Dk};
            if (in_c.g.present()) in_c.g = TensorView(wide.data(), DType::kF32, shape);
            if (in_c.a.present()) in_c.a = TensorView(wide.data(), DType::kF32, shape);
            if (in_c.dt_bias.present()) in_c.dt_bias = TensorView(bias.data(), DType::kF32, {Nv * Dk});
            const Status ss = DecodeStep(in_s, os, scalar.options());
            const Status sc = DecodeStep(in_c, oc, scalar.options());
            ASSERT_TRUE(ss.ok()) << ss.message();
            ASSERT_TRUE(sc.ok()) << sc.message();
            EXPECT_EQ(o_channel, o_scalar) << "out";
            EXPECT_EQ(p_channel, p_scalar) << "pool";
          });
        }
      }
    }
  }
}

// Dk = 128 runs layout vk's kernels with the row length as a compile-time
// constant (decode.cc WithRowLength): the same bits as with it at run time,
// for the scalar and the per-channel gate, the three pool dtypes, one step
// and a token axis (verify's kernels), on every target. Dv = 21 takes both
// the 4-row blocks and the single rows.
TEST(DecodeKda, UnrolledDk128IsTheRunTimeLengthKernelBitwise) {
  for (bool per_channel : {false, true}) {
    for (DType pool_dt : {DType::kF32, DType::kBF16, DType::kF16}) {
      for (int64_t K : {1, 3}) {
        CaseSpec spec = KdaSpec(StateLayout::kVK, 1, 2, 128, 21, Gate::kRawBound, DType::kF32, pool_dt);
        spec.per_channel_gate = per_channel;
        Draft d(spec, 3, K);
        ForEachTarget([&](const std::string& target) {
          SCOPED_TRACE(std::string(per_channel ? "per-channel" : "scalar") + " gate, pool " + DTypeName(pool_dt) +
                       " K " + std::to_string(K) + " " + target);
          Buf pool[2], out[2];
          for (int fixed = 0; fixed < 2; ++fixed) {
            pool[fixed] = d.pool;
            out[fixed].assign(static_cast<size_t>(d.N * d.K) * d.OutRowBytes(), 0);
            DecodeOutputs o;
            o.out = d.OutView(out[fixed]);
            SetDecodeFixedRowLengthsForTest(fixed == 1);
            const Status st = DecodeStep(d.Inputs(pool[fixed]), o, d.options());
            SetDecodeFixedRowLengthsForTest(true);
            ASSERT_TRUE(st.ok()) << st.message();
          }
          EXPECT_EQ(out[1], out[0]) << "out";
          EXPECT_EQ(pool[1], pool[0]) << "pool";
          EXPECT_NE(pool[1], d.pool) << "the step wrote the pool";
        });
      }
    }
  }
}

// Negative state indices skip their rows: out (and dense states) zeros, no
// slot read or written; the other rows are as without the skipped one.
TEST(DecodeKda, SkippedRows) {
  for (StateLayout layout : {StateLayout::kVK, StateLayout::kKV}) {
    for (int64_t K : {1, 4}) {
      SCOPED_TRACE(std::string(StateLayoutName(layout)) + " K " + std::to_string(K));
      Draft d = Draft::For(layout, 1, 2, 17, 33, Gate::kRaw, 3, K);
      Buf full_pool = d.pool, full_out(static_cast<size_t>(d.N * d.K) * d.OutRowBytes());
      DecodeOutputs fo;
      fo.out = d.OutView(full_out);
      ASSERT_TRUE(DecodeStep(d.Inputs(full_pool), fo, d.options()).ok());

      Buf pool = d.pool, out(full_out.size(), 0xFF), states(static_cast<size_t>(d.N * d.K) * d.SlotBytes(), 0xFF);
      DecodeInputs in = d.Inputs(pool);
      std::vector<int32_t> idx = d.src;
      idx[1] = -1;
      in.state_indices = TensorView(idx.data(), DType::kI32, {d.N});
      DecodeOutputs o;
      o.out = d.OutView(out);
      if (K > 1) {
        const TensorView pv = d.PoolView(pool);
        o.states = TensorView(states.data(), d.pool_dtype, {d.N * d.K, pv.shape[1], pv.shape[2], pv.shape[3]});
      }
      ASSERT_TRUE(DecodeStep(in, o, d.options()).ok());
      const size_t row = d.OutRowBytes();
      for (int64_t n = 0; n < d.N; ++n) {
        for (int64_t j = 0; j < d.K; ++j) {
          const uint8_t* got = &out[(n * d.K + j) * row];
          if (n == 1) {
            for (size_t b = 0; b < row; ++b) ASSERT_EQ(got[b], 0) << "out of the skipped row, token " << j;
            if (K > 1) {
              const uint8_t* st = &states[(n * d.K + j) * d.SlotBytes()];
              for (size_t b = 0; b < d.SlotBytes(); ++b) ASSERT_EQ(st[b], 0) << "states of the skipped row, token " << j;
            }
          } else {
            EXPECT_EQ(std::memcmp(got, &full_out[(n * d.K + j) * row], row), 0) << "row " << n << " token " << j;
          }
        }
      }
      EXPECT_EQ(std::memcmp(d.Slot(pool, d.src[1]), d.Slot(d.pool, d.src[1]), d.SlotBytes()), 0) << "skipped slot";
      if (K == 1) {
        for (int64_t n : {0, 2}) {
          EXPECT_EQ(std::memcmp(d.Slot(pool, d.src[n]), d.Slot(full_pool, d.src[n]), d.SlotBytes()), 0) << "slot of row " << n;
        }
      }
    }
  }
}

// ------------------------------------------------------------------ bad input

// A bad call is refused naming the tensor, with out and the pool untouched.
void ExpectRejected(Draft& d, int64_t K, const std::function<void(DecodeInputs&, Options&)>& mutate, const char* name) {
  (void)K;
  Buf pool = d.pool, out(static_cast<size_t>(d.N * d.K) * d.OutRowBytes(), 0xAB);
  const Buf out_before = out;
  DecodeInputs in = d.Inputs(pool);
  Options opt = d.options();
  mutate(in, opt);
  DecodeOutputs o;
  o.out = d.OutView(out);
  const Status st = DecodeStep(in, o, opt);
  ASSERT_FALSE(st.ok()) << name;
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_EQ(st.message().rfind(std::string(name) + ":", 0), 0u) << st.message();
  EXPECT_EQ(pool, d.pool) << "pool written by a refused call";
  EXPECT_EQ(out, out_before) << "out written by a refused call";
}

TEST(DecodeKda, BadGateShapesAreRefusedBeforeAnythingIsWritten) {
  for (int64_t K : {1, 4}) {
    SCOPED_TRACE("K " + std::to_string(K));
    const int64_t N = 3, Nv = 2, Dk = 17;
    std::vector<float> wide(static_cast<size_t>(N * K * Nv * (Dk + 1)), -0.1f), narrow(Nv, 0.0f);
    const auto gate_shape = [&](int64_t last) {
      return K == 1 ? std::vector<int64_t>{N, Nv, last} : std::vector<int64_t>{N, K, Nv, last};
    };
    Draft g = Draft::For(StateLayout::kKV, 1, Nv, Dk, 33, Gate::kG, N, K);
    ExpectRejected(g, K, [&](DecodeInputs& in, Options&) { in.g = TensorView(wide.data(), DType::kF32, gate_shape(Dk + 1)); },
                   "g");
    Draft raw = Draft::For(StateLayout::kVK, 1, Nv, Dk, 33, Gate::kRaw, N, K);
    ExpectRejected(raw, K, [&](DecodeInputs& in, Options&) { in.dt_bias = TensorView(narrow.data(), DType::kF32, {Nv}); },
                   "dt_bias");
    ExpectRejected(raw, K, [&](DecodeInputs& in, Options&) { in.a = TensorView(wide.data(), DType::kF32, gate_shape(Dk + 1)); },
                   "a");
    ExpectRejected(raw, K, [&](DecodeInputs& in, Options&) { in.A_log = TensorView(); }, "A_log");  // no bound: A_log required
    ExpectRejected(raw, K, [&](DecodeInputs&, Options& o) { o.gate_lower_bound = 1.0; }, "options.gate_lower_bound");
  }
}

}  // namespace
}  // namespace cgdr
