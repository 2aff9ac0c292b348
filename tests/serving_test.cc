// Serving features of prefill (docs/SPEC.md 6d) on both engines (the vector
// engine, and the AMX engine through its emulation so any CPU runs it) and
// every dtype: checkpoints equal to prefills of their prefixes (bitwise when
// checkpoint_every is a multiple of the chunk), state pools bitwise equal to
// dense states, the gate in the kernel against the FP64 formula, all bitwise
// across thread counts; and every bad input of the new arguments rejected
// before anything is written.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "cgdr/cgdr.hpp"
#include "cgdr/plan.hpp"
#include "core/dtype.h"
#include "core/synthetic.h"
#include "reference/reference.h"
#include "test_util.h"

namespace cgdr {
namespace {

using testing::Spec6Limit;

// An engine and precision the chunked products run in.
struct EngineMode {
  const char* name;
  Engine engine;
  Precision precision;
};
const EngineMode kEngines[] = {{"vector_fp32", Engine::kVector, Precision::kFp32},
                               {"vector_bf16", Engine::kVector, Precision::kBf16},
                               {"amx_emu_bf16x3", Engine::kAmxEmulated, Precision::kBf16x3}};

Options OptionsFor(const Case& c, const EngineMode& m, Algo algo, int threads = 0) {
  Options o = c.options();
  o.engine = m.engine;
  o.precision = m.precision;
  o.algo = algo;
  o.threads = threads;
  return o;
}

bool SameBytes(const void* a, const void* b, size_t n) { return std::memcmp(a, b, n) == 0; }

constexpr uintptr_t kLine = 64;

// The error a precision mode's results meet (SPEC 6, 6c): fp32 the SPEC 6
// limit, bf16x3 twice it, bf16 (8 significant bits per operand) 1.5e-2.
double ModeLimit(Precision p, double spec6) {
  switch (p) {
    case Precision::kBf16: return std::max(spec6, 1.5e-2);
    case Precision::kBf16x3: return 2.0 * spec6;
    default: return spec6;
  }
}

// Rows [first, first + n) of a tensor along its first dimension (a view).
TensorView Rows(const TensorView& t, int64_t first, int64_t n) {
  if (!t.present()) return t;
  TensorView v = t;
  const int64_t row = t.shape[0] > 0 ? t.numel() / t.shape[0] : 0;
  v.data = static_cast<uint8_t*>(t.data) + first * row * static_cast<int64_t>(DTypeSize(t.dtype));
  v.shape[0] = n;
  return v;
}

// A buffer holding a tensor of `like`'s shape in dtype `t`, converted from `like` when given data.
struct Buffer {
  std::vector<uint8_t> bytes;
  TensorView view;
  Buffer(const TensorView& like, DType t, bool copy) {
    view = like;
    view.dtype = t;
    bytes.assign(static_cast<size_t>(like.numel()) * DTypeSize(t), 0);
    view.data = bytes.data();
    if (copy) {
      for (int64_t i = 0; i < like.numel(); ++i) StoreFromF32(bytes.data(), t, i, LoadAsF32(like.data, like.dtype, i));
    }
  }
};

std::vector<int64_t> Offsets(const std::vector<int32_t>& lens) {
  std::vector<int64_t> off{0};
  for (int32_t l : lens) off.push_back(off.back() + l);
  return off;
}

CaseSpec ServingSpec(DType dtype, DType state_dtype, StateLayout layout, std::vector<int32_t> lens) {
  CaseSpec s;
  s.Nk = 2;
  s.Nv = 4;
  s.Dk = 40;
  s.Dv = 24;
  s.lens = std::move(lens);
  s.dtype = dtype;
  s.state_dtype = state_dtype;
  s.layout = layout;
  s.seed = 97;
  return s;
}

// ---------------------------------------------------------------- checkpoints

// Runs c with checkpoints every `every` tokens into a buffer of dtype ckpt_dt;
// returns the checkpoint bytes.
std::vector<uint8_t> RunWithCheckpoints(Case& c, Options opt, int64_t every, DType ckpt_dt) {
  opt.checkpoint_every = every;
  int64_t rows = 0;
  for (int32_t l : c.seq_lens) rows += l / every;
  Outputs out = c.outputs();
  const TensorView& fs = out.final_state;
  std::vector<uint8_t> ckpt(static_cast<size_t>(rows * fs.shape[1] * fs.shape[2] * fs.shape[3]) * DTypeSize(ckpt_dt) + 1);
  out.checkpoint_states = TensorView(ckpt.data(), ckpt_dt, {rows, fs.shape[1], fs.shape[2], fs.shape[3]});
  const Status s = cgdr::Run(c.inputs(), out, opt);
  EXPECT_TRUE(s.ok()) << s.message();
  ckpt.pop_back();
  return ckpt;
}

// The final state, in dtype `dt`, of a prefill of the first `m` tokens of
// sequence b of c alone (its initial state converted to dt, which is exact
// when dt is f32 or the state's own dtype).
std::vector<uint8_t> PrefixFinalState(Case& c, const Options& opt, int64_t b, int64_t m, DType dt) {
  const Inputs full = c.inputs();
  const int64_t first = Offsets(c.seq_lens)[static_cast<size_t>(b)];
  Inputs in = full;
  for (TensorView* t : {&in.query, &in.key, &in.value, &in.beta, &in.g, &in.a}) *t = Rows(*t, first, m);
  int32_t len = static_cast<int32_t>(m);
  in.seq_lens = TensorView(&len, DType::kI32, {1});
  Buffer init(Rows(full.initial_state, b, 1), dt, true);
  in.initial_state = init.view;
  Buffer fin(init.view, dt, false);
  std::vector<uint8_t> out(static_cast<size_t>(m * c.spec.Nv * c.spec.Dv) * DTypeSize(c.spec.dtype) + 1);
  Outputs o;
  o.out = TensorView(out.data(), c.spec.dtype, {m, c.spec.Nv, c.spec.Dv});
  o.final_state = fin.view;
  const Status s = cgdr::Run(in, o, opt);
  EXPECT_TRUE(s.ok()) << s.message();
  return fin.bytes;
}

// Every checkpoint of every sequence equals the final state of a prefill of
// that prefix, bit for bit, on both engines, for C = 1 and the chunked
// formulations with checkpoint_every a multiple of C; out and final_state are
// those of the same call without checkpoints.
TEST(Checkpoints, EqualPrefixPrefillsBitwise) {
  struct Form {
    Algo algo;
    int64_t every;
  };
  const Form forms[] = {{Algo::kRecurrent, 24}, {Algo::kChunk16, 32}, {Algo::kChunk32, 64}, {Algo::kChunk64, 64}};
  for (const EngineMode& m : kEngines) {
    for (const Form& f : forms) {
      for (const auto& [dt, state_dt, layout] : {std::tuple{DType::kF16, DType::kBF16, StateLayout::kVK},
                                                 std::tuple{DType::kF32, DType::kF32, StateLayout::kKV}}) {
        SCOPED_TRACE(std::string(m.name) + " " + AlgoName(f.algo) + " " + DTypeName(dt) + " state " + DTypeName(state_dt));
        Case c = MakeCase(ServingSpec(dt, state_dt, layout, {130, 0, 64, 150, 20}));
        const Options opt = OptionsFor(c, m, f.algo);
        ASSERT_TRUE(cgdr::Run(c.inputs(), c.outputs(), opt).ok());
        const Case plain = c;
        for (DType ckpt_dt : {DType::kF32, state_dt}) {
          const std::vector<uint8_t> ckpt = RunWithCheckpoints(c, opt, f.every, ckpt_dt);
          EXPECT_EQ(c.out, plain.out) << "checkpoints changed out";
          EXPECT_EQ(c.final_state, plain.final_state) << "checkpoints changed final_state";
          const size_t state_bytes = static_cast<size_t>(c.spec.Nv * c.spec.Dk * c.spec.Dv) * DTypeSize(ckpt_dt);
          int64_t row = 0;
          for (int64_t b = 0; b < static_cast<int64_t>(c.seq_lens.size()); ++b) {
            for (int64_t j = 1; j <= c.seq_lens[static_cast<size_t>(b)] / f.every; ++j, ++row) {
              const std::vector<uint8_t> want = PrefixFinalState(c, opt, b, j * f.every, ckpt_dt);
              EXPECT_TRUE(SameBytes(ckpt.data() + row * state_bytes, want.data(), state_bytes))
                  << "checkpoint " << row << " (sequence " << b << ", token " << j * f.every << ", "
                  << DTypeName(ckpt_dt) << ")";
            }
          }
          EXPECT_EQ(static_cast<size_t>(row) * state_bytes, ckpt.size());
        }
      }
    }
  }
}

// Checkpoints streamed past the caches (whole 64-byte lines: a line-aligned
// buffer, rows of Dv = 64 16-bit values) on every target, both layouts and
// 16-bit checkpoint dtypes: the same bits as the prefix prefills' final
// states. On the 128-bit targets a 16-bit vector is 8 bytes, which Highway
// streams with a 16-byte store (it faulted in verify): such rows take plain
// stores (kStreamableAs).
TEST(Checkpoints, StreamedSixteenBitRowsOnEveryTarget) {
  testing::ForEachTarget([&](const std::string& target) {
    for (const StateLayout layout : {StateLayout::kVK, StateLayout::kKV}) {
      for (const DType ckpt_dt : {DType::kBF16, DType::kF16}) {
        SCOPED_TRACE(target + " " + DTypeName(ckpt_dt) + (layout == StateLayout::kVK ? " vk" : " kv"));
        CaseSpec spec = ServingSpec(DType::kF32, ckpt_dt, layout, {64, 40});
        spec.Dk = spec.Dv = 64;
        Case c = MakeCase(spec);
        Options opt = c.options();
        opt.algo = Algo::kChunk16;
        const Options plain = opt;
        opt.checkpoint_every = 32;
        const TensorView& fs = c.outputs().final_state;
        const int64_t rows = 3, row_bytes = fs.shape[1] * fs.shape[2] * fs.shape[3] * 2;
        std::vector<uint8_t> storage(static_cast<size_t>(rows * row_bytes + kLine), 0xA5);
        uint8_t* aligned = storage.data() + (kLine - reinterpret_cast<uintptr_t>(storage.data()) % kLine) % kLine;
        Outputs out = c.outputs();
        out.checkpoint_states = TensorView(aligned, ckpt_dt, {rows, fs.shape[1], fs.shape[2], fs.shape[3]});
        ASSERT_TRUE(cgdr::Run(c.inputs(), out, opt).ok());
        const std::pair<int64_t, int64_t> ckpts[] = {{0, 32}, {0, 64}, {1, 32}};  // (sequence, tokens)
        for (int64_t row = 0; row < rows; ++row) {
          const auto [b, m] = ckpts[row];
          const std::vector<uint8_t> want = PrefixFinalState(c, plain, b, m, ckpt_dt);
          EXPECT_TRUE(SameBytes(aligned + row * row_bytes, want.data(), static_cast<size_t>(row_bytes)))
              << "checkpoint " << row;
        }
      }
    }
  });
}

// checkpoint_every not a multiple of C: chunks are cut at checkpoints, and
// checkpoints, out and final_state meet SPEC 6 against FP64.
TEST(Checkpoints, UnalignedMeetSpec6) {
  for (const EngineMode& m : kEngines) {
    for (Algo algo : {Algo::kChunk16, Algo::kChunk64}) {
      SCOPED_TRACE(std::string(m.name) + " " + AlgoName(algo));
      Case c = MakeCase(ServingSpec(DType::kBF16, DType::kF32, StateLayout::kVK, {100, 7, 45}));
      Options opt = OptionsFor(c, m, algo);
      const std::vector<uint8_t> ckpt = RunWithCheckpoints(c, opt, 40, DType::kF32);
      opt.checkpoint_every = 40;
      Outputs out = c.outputs();
      out.checkpoint_states = TensorView(ckpt.data(), DType::kF32, {3, 4, 24, 40});
      Problem p;
      ASSERT_TRUE(Validate(c.inputs(), out, opt, &p).ok());
      ASSERT_EQ(p.checkpoints, 3);
      ReferenceResult ref;
      ReferenceRun(c.inputs(), p, &ref);
      EXPECT_LE(RelativeError(out.checkpoint_states, ref.checkpoint_states, p.Nv), ModeLimit(m.precision, 2e-5));
      EXPECT_LE(RelativeError(out.out, ref.out, p.Nv), ModeLimit(m.precision, Spec6Limit(ref.out, DType::kBF16)));
      EXPECT_LE(RelativeError(out.final_state, ref.final_state, p.Nv), ModeLimit(m.precision, 2e-5));
    }
  }
}

// Checkpoints are the same bytes for any thread count and V tile.
TEST(Checkpoints, BitwiseAcrossThreadsAndTiles) {
  for (const EngineMode& m : kEngines) {
    Case c = MakeCase(ServingSpec(DType::kF16, DType::kF16, StateLayout::kKV, {96, 33, 64}));
    Options opt = OptionsFor(c, m, Algo::kChunk32, 1);
    const std::vector<uint8_t> one = RunWithCheckpoints(c, opt, 32, DType::kF16);
    for (int threads : {2, 3}) {
      for (int v_step : {0, 16}) {
        opt.threads = threads;
        opt.v_step = v_step;
        EXPECT_EQ(RunWithCheckpoints(c, opt, 32, DType::kF16), one) << m.name << " threads " << threads << " v_step " << v_step;
      }
    }
  }
}

// The plan aligns its chunks to checkpoint_every where a chunk size divides it.
TEST(Checkpoints, PlanAlignsChunks) {
  Problem p;
  p.T = 4096; p.B = 1; p.Nk = 16; p.Nv = 32; p.Dk = 128; p.Dv = 128;
  p.dtype = DType::kF16;
  p.has_g = p.has_initial_state = p.want_final_state = true;
  p.state_dtype = DType::kF16;
  p.scale = 1.0 / std::sqrt(128.0);
  p.seq_lens = {4096};
  p.options.engine = Engine::kVector;
  for (int64_t every : {16, 48, 96, 256}) {
    p.options.checkpoint_every = every;
    p.checkpoints = 4096 / every;
    Plan plan;
    ASSERT_TRUE(MakePlan(p, MachineProfile(), &plan).ok());
    EXPECT_EQ(every % plan.chunk, 0) << "every " << every << ": " << plan.why;
    EXPECT_NE(plan.why.find("divides checkpoint_every"), std::string::npos) << plan.why;
  }
}

// ---------------------------------------------------------------- pools

// A pool of P slots `stride` elements apart, the gaps and unused slots filled
// with a marker; sequence b's state at slot slots[b] (when >= 0).
struct Pool {
  std::vector<uint8_t> bytes;
  TensorView view;
  int64_t stride, slot_elems;
  size_t es;
  Pool(const TensorView& dense, int64_t P, int64_t gap) {
    es = DTypeSize(dense.dtype);
    slot_elems = dense.numel() / dense.shape[0];
    stride = slot_elems + gap;
    bytes.assign(static_cast<size_t>((P - 1) * stride + slot_elems) * es, 0x5A);
    view = dense;
    view.data = bytes.data();
    view.shape[0] = P;
  }
  uint8_t* Slot(int64_t s) { return bytes.data() + s * stride * static_cast<int64_t>(es); }
  void Put(const TensorView& dense, int64_t b, int64_t s) {
    std::memcpy(Slot(s), static_cast<const uint8_t*>(dense.data) + b * slot_elems * static_cast<int64_t>(es),
                static_cast<size_t>(slot_elems) * es);
  }
  bool SlotEquals(int64_t s, const TensorView& dense, int64_t b) {
    return SameBytes(Slot(s), static_cast<const uint8_t*>(dense.data) + b * slot_elems * static_cast<int64_t>(es),
                     static_cast<size_t>(slot_elems) * es);
  }
};

// Prefill on a pool (in place, or from one pool into another; dense slots or
// a slot stride with gaps) gives the bytes of the dense form, and touches
// nothing but the named slots.
TEST(Pools, BitwiseEqualToDenseStates) {
  for (const EngineMode& m : kEngines) {
    for (Algo algo : {Algo::kRecurrent, Algo::kChunk16, Algo::kChunk64}) {
      for (const auto& [state_dt, layout, gap, in_place] :
           {std::tuple{DType::kF32, StateLayout::kVK, int64_t{0}, true}, std::tuple{DType::kBF16, StateLayout::kKV, int64_t{37}, true},
            std::tuple{DType::kF16, StateLayout::kVK, int64_t{16}, false}}) {
        SCOPED_TRACE(std::string(m.name) + " " + AlgoName(algo) + " state " + DTypeName(state_dt) + " gap " +
                     std::to_string(gap) + (in_place ? " in place" : " two pools"));
        Case c = MakeCase(ServingSpec(DType::kF16, state_dt, layout, {50, 0, 33, 70}));
        Options opt = OptionsFor(c, m, algo);
        const Inputs dense_in = c.inputs();
        ASSERT_TRUE(cgdr::Run(dense_in, c.outputs(), opt).ok());
        const Bytes dense_out = c.out, dense_final = c.final_state;
        const std::vector<int32_t> slots{5, 2, 0, 3};
        Pool init(dense_in.initial_state, 7, gap), fin(dense_in.initial_state, 6, gap);
        for (int64_t b = 0; b < 4; ++b) init.Put(dense_in.initial_state, b, slots[static_cast<size_t>(b)]);
        const std::vector<uint8_t> init_before = init.bytes, fin_before = fin.bytes;
        Inputs in = dense_in;
        in.initial_state = init.view;
        in.state_indices = TensorView(slots.data(), DType::kI32, {4});
        Outputs out = c.outputs();
        out.final_state = in_place ? init.view : fin.view;
        opt.state_slot_stride = gap ? init.stride : 0;
        std::fill(c.out.begin(), c.out.end(), 0);
        const Status s = cgdr::Run(in, out, opt);
        ASSERT_TRUE(s.ok()) << s.message();
        EXPECT_EQ(c.out, dense_out);
        Pool& written = in_place ? init : fin;
        const TensorView dense_fs(dense_final.data(), state_dt, {4, 4, layout == StateLayout::kKV ? 40 : 24, layout == StateLayout::kKV ? 24 : 40});
        for (int64_t b = 0; b < 4; ++b) EXPECT_TRUE(written.SlotEquals(slots[static_cast<size_t>(b)], dense_fs, b)) << "sequence " << b;
        // Everything else: as it was (the unused slots 1, 4, 6 and every gap).
        std::vector<uint8_t> expect = in_place ? init_before : fin_before;
        for (int64_t b = 0; b < 4; ++b) {
          const int64_t off = slots[static_cast<size_t>(b)] * written.stride * static_cast<int64_t>(written.es);
          std::memcpy(expect.data() + off, written.Slot(slots[static_cast<size_t>(b)]), static_cast<size_t>(written.slot_elems) * written.es);
        }
        EXPECT_EQ(written.bytes, expect) << "bytes outside the named slots were written";
        if (!in_place) {
          EXPECT_EQ(init.bytes, init_before) << "the initial pool was written";
        }
      }
    }
  }
}

// A negative index: the sequence starts from zeros and writes no state; its
// outputs are those of a dense run with a zero initial state.
TEST(Pools, NegativeIndexStartsFromZeroAndWritesNothing) {
  for (const EngineMode& m : kEngines) {
    Case c = MakeCase(ServingSpec(DType::kF32, DType::kF32, StateLayout::kVK, {20, 31, 12}));
    const Options opt = OptionsFor(c, m, Algo::kChunk16);
    Inputs dense_in = c.inputs();
    Bytes zeroed = c.initial_state;
    const size_t slot_bytes = zeroed.size() / 3;
    std::memset(zeroed.data() + slot_bytes, 0, slot_bytes);  // sequence 1 from zeros
    dense_in.initial_state.data = zeroed.data();
    ASSERT_TRUE(cgdr::Run(dense_in, c.outputs(), opt).ok());
    const Bytes dense_out = c.out, dense_final = c.final_state;

    Bytes pool = c.initial_state;  // slots 0, 1, 2 = sequences 0, 1, 2; sequence 1 named -1
    const Bytes pool_before = pool;
    const std::vector<int32_t> slots{0, -1, 2};
    Inputs in = c.inputs();
    in.initial_state.data = pool.data();
    in.state_indices = TensorView(slots.data(), DType::kI32, {3});
    Outputs out = c.outputs();
    out.final_state = in.initial_state;
    ASSERT_TRUE(cgdr::Run(in, out, opt).ok());
    EXPECT_EQ(c.out, dense_out) << m.name;
    EXPECT_TRUE(SameBytes(pool.data(), dense_final.data(), slot_bytes)) << m.name;
    EXPECT_TRUE(SameBytes(pool.data() + slot_bytes, pool_before.data() + slot_bytes, slot_bytes)) << m.name << ": slot 1 written";
    EXPECT_TRUE(SameBytes(pool.data() + 2 * slot_bytes, dense_final.data() + 2 * slot_bytes, slot_bytes)) << m.name;
  }
}

// ---------------------------------------------------------------- the gate

// g = -exp(A_log) softplus(a + dt_bias) and beta = sigmoid(b) in the kernel
// meet SPEC 6 against the FP64 formulas, on both engines, every formulation
// and dtype.
TEST(Gate, MeetsSpec6AgainstTheFp64Formula) {
  for (const EngineMode& m : kEngines) {
    for (Algo algo : {Algo::kRecurrent, Algo::kChunk16, Algo::kChunk64}) {
      for (const auto& [dt, a_dt, sigmoid] : {std::tuple{DType::kF32, DType::kF32, true}, std::tuple{DType::kF16, DType::kBF16, false},
                                              std::tuple{DType::kBF16, DType::kF32, true}}) {
        SCOPED_TRACE(std::string(m.name) + " " + AlgoName(algo) + " " + DTypeName(dt) + " a " + DTypeName(a_dt) +
                     (sigmoid ? " sigmoid" : ""));
        CaseSpec spec = ServingSpec(dt, dt, StateLayout::kVK, {77, 0, 40});
        spec.raw_gate = true;
        spec.g_dtype = a_dt;
        spec.beta_sigmoid = sigmoid;
        Case c = MakeCase(spec);
        const testing::Errors e = testing::RunAndCompare(c, OptionsFor(c, m, algo));
        const Precision used = algo == Algo::kRecurrent ? Precision::kFp32 : m.precision;  // C = 1: FP32 products
        EXPECT_LE(e.out, ModeLimit(used, e.out_limit));
        EXPECT_LE(e.state, ModeLimit(used, e.state_limit));
      }
    }
  }
}

// The gate's decays are those of the FP64 formula rounded to FP32, to within
// a few ulp: a prefill with g computed outside the kernel agrees to FP32
// rounding (f32 in and out).
TEST(Gate, AgreesWithGivenG) {
  CaseSpec spec = ServingSpec(DType::kF32, DType::kF32, StateLayout::kKV, {90, 25});
  spec.raw_gate = true;
  Case c = MakeCase(spec);
  const Options opt = OptionsFor(c, kEngines[0], Algo::kChunk32);
  ASSERT_TRUE(cgdr::Run(c.inputs(), c.outputs(), opt).ok());
  const Bytes gate_out = c.out;
  std::vector<float> g(static_cast<size_t>(c.T * 4));
  for (int64_t t = 0; t < c.T; ++t)
    for (int64_t h = 0; h < 4; ++h) {
      g[t * 4 + h] = static_cast<float>(ReferenceGate(LoadAsF32(c.a.data(), DType::kF32, t * 4 + h),
                                                      LoadAsF32(c.A_log.data(), DType::kF32, h),
                                                      LoadAsF32(c.dt_bias.data(), DType::kF32, h)));
    }
  Inputs in = c.inputs();
  in.a = in.A_log = in.dt_bias = TensorView();
  in.g = TensorView(g.data(), DType::kF32, {c.T, 4});
  ASSERT_TRUE(cgdr::Run(in, c.outputs(), opt).ok());
  const TensorView a(gate_out.data(), DType::kF32, {c.T, 4, 24});
  std::vector<double> b(static_cast<size_t>(c.T * 4 * 24));
  for (size_t i = 0; i < b.size(); ++i) b[i] = LoadAsF32(c.out.data(), DType::kF32, static_cast<int64_t>(i));
  EXPECT_LE(RelativeError(a, b, 4), 1e-6);
}

TEST(Gate, BitwiseAcrossThreads) {
  for (const EngineMode& m : kEngines) {
    CaseSpec spec = ServingSpec(DType::kBF16, DType::kF32, StateLayout::kVK, {70, 1, 45});
    spec.raw_gate = true;
    spec.beta_sigmoid = true;
    Case c = MakeCase(spec);
    ASSERT_TRUE(cgdr::Run(c.inputs(), c.outputs(), OptionsFor(c, m, Algo::kChunk16, 1)).ok());
    const Bytes out1 = c.out, fs1 = c.final_state;
    for (int threads : {2, 3}) {
      ASSERT_TRUE(cgdr::Run(c.inputs(), c.outputs(), OptionsFor(c, m, Algo::kChunk16, threads)).ok());
      EXPECT_EQ(c.out, out1) << m.name << " threads " << threads;
      EXPECT_EQ(c.final_state, fs1) << m.name << " threads " << threads;
    }
  }
}

// ---------------------------------------------------------------- bad input

constexpr uint8_t kSentinel = 0xA5;

// A small case with every serving input: the raw gate, a pool of 5 slots
// with indices, checkpoints every 2 tokens.
struct Fixture {
  Case c;
  Inputs in;
  Outputs out;
  Options opt;
  std::vector<int32_t> slots{3, 0, 4};
  Bytes pool, ckpt;
  Fixture() : c(MakeCase(Spec())) {
    in = c.inputs();
    out = c.outputs();
    opt = c.options();
    pool.assign(static_cast<size_t>(5 * 4 * 12 * 8) * 4, 0);
    in.initial_state = TensorView(pool.data(), DType::kF32, {5, 4, 12, 8});
    out.final_state = in.initial_state;
    in.state_indices = TensorView(slots.data(), DType::kI32, {3});
    opt.checkpoint_every = 2;
    ckpt.assign(static_cast<size_t>(3 * 4 * 12 * 8) * 4, kSentinel);  // floor(5/2) + 0 + floor(3/2) = 3
    out.checkpoint_states = TensorView(ckpt.data(), DType::kF32, {3, 4, 12, 8});
    std::memset(c.out.data(), kSentinel, c.out.size());
    std::memset(pool.data(), kSentinel, pool.size());
  }
  static CaseSpec Spec() {
    CaseSpec s;
    s.Nk = 2; s.Nv = 4; s.Dk = 8; s.Dv = 12; s.lens = {5, 0, 3};
    s.raw_gate = true;
    return s;
  }
  // What the call may write (out, the pool, the checkpoints), to compare.
  std::vector<Bytes> Written() const { return {c.out, pool, ckpt}; }
};

void ExpectRejected(const std::function<void(Fixture&)>& mutate, std::initializer_list<const char*> needles) {
  Fixture f;
  mutate(f);
  const std::vector<Bytes> before = f.Written();
  const Status s = cgdr::Run(f.in, f.out, f.opt);
  ASSERT_FALSE(s.ok()) << "accepted bad input; expected an error with '" << *needles.begin() << "'";
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  for (const char* n : needles) EXPECT_NE(s.message().find(n), std::string::npos) << "message: " << s.message() << " lacks '" << n << "'";
  EXPECT_EQ(s.message().find('\n'), std::string::npos) << "one line: " << s.message();
  EXPECT_TRUE(f.Written() == before) << "an output was written before the error: " << s.message();
}

TEST(ServingValidate, GoodInputPasses) {
  Fixture f;
  const std::vector<Bytes> before = f.Written();
  const Status s = cgdr::Run(f.in, f.out, f.opt);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_FALSE(f.Written() == before);
}

TEST(ServingValidate, Gate) {
  ExpectRejected([](Fixture& f) { f.in.g = f.in.a; }, {"a: expected either g or the raw gate a", "got both"});
  ExpectRejected([](Fixture& f) { f.in.A_log = TensorView(); }, {"A_log: required tensor is missing", "softplus"});
  ExpectRejected([](Fixture& f) { f.in.a = TensorView(); }, {"A_log: given without the raw gate 'a'"});
  ExpectRejected([](Fixture& f) { f.in.a = f.in.A_log = TensorView(); }, {"dt_bias: given without the raw gate 'a'"});
  ExpectRejected([](Fixture& f) { f.in.a.shape[1] = 3; }, {"a: expected shape [T, Nv] = [8, 4], got [8, 3]"});
  ExpectRejected([](Fixture& f) { f.in.a.dtype = DType::kI32; }, {"a: expected dtype f16, bf16 or f32, got i32"});
  ExpectRejected([](Fixture& f) { f.in.A_log.shape[0] = 2; }, {"A_log: expected shape [Nv] = [4], got [2]"});
  ExpectRejected([](Fixture& f) { f.in.A_log.rank = 2; }, {"A_log: expected rank 1 [Nv]"});
  ExpectRejected([](Fixture& f) { f.in.dt_bias.shape[0] = 5; }, {"dt_bias: expected shape [Nv] = [4], got [5]"});
  ExpectRejected([](Fixture& f) { f.in.dt_bias.dtype = DType::kI32; }, {"dt_bias: expected dtype f16, bf16 or f32"});
}

TEST(ServingValidate, Pools) {
  ExpectRejected([](Fixture& f) { f.slots[2] = 5; }, {"state_indices: expected indices < P = 5", "got 5 at index [2]"});
  ExpectRejected([](Fixture& f) { f.slots[2] = 3; }, {"state_indices: expected distinct non-negative indices, got 3 at indices [0] and [2]"});
  ExpectRejected([](Fixture& f) { f.in.state_indices.shape[0] = 2; }, {"state_indices: expected shape [B] with B of seq_lens = [3], got [2]"});
  ExpectRejected([](Fixture& f) { f.in.state_indices.dtype = DType::kF32; }, {"state_indices: expected dtype i32"});
  ExpectRejected([](Fixture& f) { f.in.initial_state.shape[1] = 3; }, {"initial_state: expected shape [P, Nv, Dv, Dk] (layout vk, a pool) = [5, 4, 12, 8]"});
  ExpectRejected([](Fixture& f) { f.out.final_state = TensorView(f.c.final_state.data(), DType::kF32, {3, 4, 12, 8}); },
                 {"state_indices: expected indices < P = 3", "got 3 at index [0]"});
  ExpectRejected([](Fixture& f) { f.opt.state_slot_stride = 100; }, {"options.state_slot_stride: expected 0 (dense) or 384 (Nv * Dk * Dv)", "got 100"});
  ExpectRejected([](Fixture& f) { f.opt.state_slot_stride = -1; }, {"options.state_slot_stride", "got -1"});
  ExpectRejected([](Fixture& f) { f.opt.state_slot_stride = int64_t{1} << 58; }, {"initial_state: 5 slots", "reach past the element limit"});
  // A stride makes the pool reach into the checkpoints, which follow it.
  ExpectRejected([](Fixture& f) {
    f.pool.resize(f.pool.size() + f.ckpt.size(), kSentinel);
    f.in.initial_state.data = f.out.final_state.data = f.pool.data();
    f.out.checkpoint_states.data = f.pool.data() + 5 * 384 * 4;
    f.opt.state_slot_stride = 385;
  }, {"checkpoint_states: output memory overlaps input 'initial_state'"});
  ExpectRejected([](Fixture& f) { f.out.final_state.data = f.pool.data() + 4; }, {"final_state: output memory overlaps input 'initial_state'"});
}

TEST(ServingValidate, Checkpoints) {
  ExpectRejected([](Fixture& f) { f.opt.checkpoint_every = -2; }, {"options.checkpoint_every: expected 0 (none) or a positive token count, got -2"});
  ExpectRejected([](Fixture& f) { f.opt.checkpoint_every = 0; }, {"checkpoint_states: given but options.checkpoint_every is 0"});
  ExpectRejected([](Fixture& f) { f.out.checkpoint_states = TensorView(); }, {"checkpoint_states: required tensor is missing (options.checkpoint_every = 2)"});
  ExpectRejected([](Fixture& f) { f.opt.checkpoint_every = 3; }, {"checkpoint_states: expected shape [checkpoints, Nv, Dv, Dk] (layout vk) = [2, 4, 12, 8], got [3, 4, 12, 8]"});
  ExpectRejected([](Fixture& f) { f.out.checkpoint_states.dtype = DType::kBF16; }, {"checkpoint_states: expected dtype f32 or the state's f32, got bf16"});
  // out and a inside the checkpoints' buffer (which is larger than either).
  ExpectRejected([](Fixture& f) { f.out.out.data = f.ckpt.data(); }, {"overlaps output 'out'"});
  ExpectRejected([](Fixture& f) { f.in.a.data = f.ckpt.data(); }, {"checkpoint_states: output memory overlaps input 'a'"});
}

TEST(ServingValidate, CheckValuesScansTheNewInputs) {
  ExpectRejected([](Fixture& f) {
    f.opt.check_values = true;
    reinterpret_cast<float*>(f.c.A_log.data())[2] = std::nanf("");
  }, {"A_log: non-finite value", "[2]"});
  ExpectRejected([](Fixture& f) {
    f.opt.check_values = true;  // the pool's marker bytes are finite floats
    reinterpret_cast<float*>(f.pool.data())[4 * 384 + 7] = INFINITY;  // slot 4: sequence 2's
  }, {"initial_state: non-finite value inf at index [4, 0, 0, 7]"});
}

}  // namespace
}  // namespace cgdr
