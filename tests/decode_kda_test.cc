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
#include "draft_util.h"
#include "test_util.h"

namespace cgdr {
namespace {

using testing::Buf;
using testing::Draft;
using testing::ExpectEqualsSingleSteps;
using testing::Mode;
using testing::ModeName;

using testing::ForEachTarget;

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

// A draft of KDA decode steps (draft_util.h): the pool in the case's state
// dtype; Gate::kRawBoundNoALog drops A_log.
Draft KdaDraft(StateLayout layout, int64_t Nk, int64_t Nv, int64_t Dk, int64_t Dv, Gate gate, int64_t n, int64_t k,
               DType dt = DType::kF32, DType pool = DType::kF32) {
  const CaseSpec spec = KdaSpec(layout, Nk, Nv, Dk, Dv, gate, dt, pool);
  Draft d(spec, n, k, spec.state_dtype);
  d.no_a_log = gate == Gate::kRawBoundNoALog;
  return d;
}

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
          Draft d = KdaDraft(layout, sh.Nk, sh.Nv, sh.Dk, sh.Dv, gate, 3, K);
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
        Draft d = KdaDraft(layout, 2, 4, 33, 17, gate, 3, K);
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
          Draft d = KdaDraft(layout, 2, 4, 33, 17, gate, 3, K, dt, pool_dt);
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
        Draft d16 = KdaDraft(layout, 1, 2, 19, 23, gate, 3, 1, DType::kF32, pd);
        Draft d32 = KdaDraft(layout, 1, 2, 19, 23, gate, 3, 1, DType::kF32, DType::kF32);
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

TEST(DecodeKda, TokenAxisEqualsSingleStepsBitwise) {
  for (StateLayout layout : {StateLayout::kVK, StateLayout::kKV}) {
    for (const auto& [dt, pool_dt] : {std::tuple{DType::kF32, DType::kF32}, std::tuple{DType::kBF16, DType::kBF16},
                                      std::tuple{DType::kF16, DType::kF16}, std::tuple{DType::kBF16, DType::kF32}}) {
      for (Gate gate : kGates) {
        for (int64_t K : {4, 16}) {
          Draft d = KdaDraft(layout, 2, 4, 37, 21, gate, 3, K, dt, pool_dt);
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
        Draft d(spec, 3, 4, spec.state_dtype);
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
      Draft d = KdaDraft(layout, 2, 4, 64, 48, Gate::kRawBound, 5, K);
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
          Draft scalar(spec, 3, K, spec.state_dtype);
          scalar.no_a_log = gate == Gate::kRawBoundNoALog;
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
        Draft d(spec, 3, K, spec.state_dtype);
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
      Draft d = KdaDraft(layout, 1, 2, 17, 33, Gate::kRaw, 3, K);
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
    Draft g = KdaDraft(StateLayout::kKV, 1, Nv, Dk, 33, Gate::kG, N, K);
    ExpectRejected(g, K, [&](DecodeInputs& in, Options&) { in.g = TensorView(wide.data(), DType::kF32, gate_shape(Dk + 1)); },
                   "g");
    Draft raw = KdaDraft(StateLayout::kVK, 1, Nv, Dk, 33, Gate::kRaw, N, K);
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
