// The C API gives bitwise the results of the C++ API for the same options
// (issue 23): each setting sets one option (or several) through cgdr::Options
// and through the C setters, then a prefill (cgdr::Run / cgdr_prefill) and a
// decode step (cgdr::DecodeStep / cgdr_decode_step) run on identical inputs,
// and their bytes, statuses and messages are compared. A new option gets a
// setting here (src/api/c_api.cc stops compiling until it has a C setter).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cgdr/cgdr.h"
#include "cgdr/cgdr.hpp"
#include "cgdr/decode.hpp"
#include "c_args.h"
#include "core/synthetic.h"

namespace cgdr {
using testing::ToCDecode;
using testing::ToCDecodeExtra;
using testing::ToCPrefill;
using testing::ToCPrefillExtra;
namespace {

struct Setting {
  std::string name;
  std::function<void(Options*)> cpp;
  std::function<cgdr_status(cgdr_options*)> c;
};

std::vector<Setting> Settings() {
  auto chunk = [](int c, Algo a) {
    return Setting{"chunk" + std::to_string(c), [a](Options* o) { o->algo = a; },
                   [c](cgdr_options* o) { return cgdr_options_set_chunk(o, c); }};
  };
  auto precision = [](const char* name, Precision p, cgdr_precision cp) {
    return Setting{std::string("precision_") + name + "_chunk16",
                   [p](Options* o) { o->precision = p; o->algo = Algo::kChunk16; },
                   [cp](cgdr_options* o) {
                     const cgdr_status s = cgdr_options_set_precision(o, cp);
                     return s != CGDR_OK ? s : cgdr_options_set_chunk(o, 16);
                   }};
  };
  auto dk_bucket = [](int b) {
    return Setting{"dk_bucket" + std::to_string(b), [b](Options* o) { o->dk_bucket = b; },
                   [b](cgdr_options* o) { return cgdr_options_set_dk_bucket(o, b); }};
  };
  return {
      {"defaults", [](Options*) {}, [](cgdr_options*) { return CGDR_OK; }},
      {"scale", [](Options* o) { o->scale = 0.37; }, [](cgdr_options* o) { return cgdr_options_set_scale(o, 0.37); }},
      {"qk_l2norm", [](Options* o) { o->use_qk_l2norm = true; },
       [](cgdr_options* o) { return cgdr_options_set_qk_l2norm(o, 1); }},
      {"layout_kv", [](Options* o) { o->state_layout = StateLayout::kKV; },
       [](cgdr_options* o) { return cgdr_options_set_state_layout(o, CGDR_LAYOUT_KV); }},
      chunk(1, Algo::kRecurrent), chunk(16, Algo::kChunk16), chunk(32, Algo::kChunk32), chunk(64, Algo::kChunk64),
      chunk(128, Algo::kChunk128),
      {"threads1", [](Options* o) { o->threads = 1; }, [](cgdr_options* o) { return cgdr_options_set_threads(o, 1); }},
      {"threads2", [](Options* o) { o->threads = 2; }, [](cgdr_options* o) { return cgdr_options_set_threads(o, 2); }},
      {"check_values", [](Options* o) { o->check_values = true; },
       [](cgdr_options* o) { return cgdr_options_set_check_values(o, 1); }},
      {"v_step8", [](Options* o) { o->v_step = 8; }, [](cgdr_options* o) { return cgdr_options_set_v_step(o, 8); }},
      dk_bucket(-1), dk_bucket(64), dk_bucket(128),  // 64 < Dk = 100: both calls fail alike
      precision("bf16", Precision::kBf16, CGDR_PRECISION_BF16),
      precision("bf16x3", Precision::kBf16x3, CGDR_PRECISION_BF16X3),
      precision("bf16x4", Precision::kBf16x4, CGDR_PRECISION_BF16X4),
      precision("fp32", Precision::kFp32, CGDR_PRECISION_FP32),
      {"engine_amx_emu_bf16x3",
       [](Options* o) { o->engine = Engine::kAmxEmulated; o->precision = Precision::kBf16x3; o->algo = Algo::kChunk64; },
       [](cgdr_options* o) {
         cgdr_status s = cgdr_options_set_engine(o, CGDR_ENGINE_AMX_EMULATED);
         if (s == CGDR_OK) s = cgdr_options_set_precision(o, CGDR_PRECISION_BF16X3);
         return s != CGDR_OK ? s : cgdr_options_set_chunk(o, 64);
       }},
      {"engine_vector_bf16", [](Options* o) { o->engine = Engine::kVector; o->precision = Precision::kBf16; },
       [](cgdr_options* o) {
         const cgdr_status s = cgdr_options_set_engine(o, CGDR_ENGINE_VECTOR);
         return s != CGDR_OK ? s : cgdr_options_set_precision(o, CGDR_PRECISION_BF16);
       }},
      {"engine_amx_auto", [](Options* o) { o->engine = Engine::kAmx; o->precision = Precision::kAuto; },
       [](cgdr_options* o) {
         const cgdr_status s = cgdr_options_set_engine(o, CGDR_ENGINE_AMX);
         return s != CGDR_OK ? s : cgdr_options_set_precision(o, CGDR_PRECISION_AUTO);
       }},
      // With this case's scalar g (no raw gate) both calls refuse the bound alike (KDA, docs/SPEC.md 10).
      {"gate_lower_bound", [](Options* o) { o->gate_lower_bound = -3.0; },
       [](cgdr_options* o) { return cgdr_options_set_gate_lower_bound(o, -3.0); }},
      {"combined",
       [](Options* o) {
         o->use_qk_l2norm = true;
         o->state_layout = StateLayout::kKV;
         o->algo = Algo::kChunk32;
         o->v_step = 16;
         o->precision = Precision::kBf16x3;
         o->threads = 2;
         o->scale = 0.2;
       },
       [](cgdr_options* o) {
         for (cgdr_status s : {cgdr_options_set_qk_l2norm(o, 1), cgdr_options_set_state_layout(o, CGDR_LAYOUT_KV),
                               cgdr_options_set_chunk(o, 32), cgdr_options_set_v_step(o, 16),
                               cgdr_options_set_precision(o, CGDR_PRECISION_BF16X3), cgdr_options_set_threads(o, 2),
                               cgdr_options_set_scale(o, 0.2)}) {
           if (s != CGDR_OK) return s;
         }
         return CGDR_OK;
       }},
  };
}

// The status of a C++ call as the C API reports it.
struct Outcome {
  int code = 0;
  std::string message;
  bool operator==(const Outcome&) const = default;
};
Outcome Of(const Status& s) { return {static_cast<int>(s.code()), s.message()}; }
Outcome Of(cgdr_status s) { return {static_cast<int>(s), cgdr_last_error()}; }

bool SameBytes(const Bytes& a, const Bytes& b) { return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size()) == 0; }

CaseSpec Spec(int64_t dk, StateLayout layout) {
  CaseSpec s;
  s.Nk = 2;
  s.Nv = 4;
  s.Dk = dk;
  s.Dv = 24;
  s.lens = {37, 0, 20};  // an empty sequence among them
  s.layout = layout;
  s.seed = 23;
  return s;
}

// The decode step's views over a case: one token of each sequence (its first
// rows of q, k, v, beta, g) on a pool that holds the final states, with the
// sequences in reverse order.
struct DecodeCall {
  Bytes pool, out;
  std::vector<int32_t> rows;
  DecodeInputs in;
  DecodeOutputs outs;

  explicit DecodeCall(Case& c) : pool(c.final_state), rows(c.seq_lens.size()) {
    const CaseSpec& s = c.spec;
    const int64_t n = static_cast<int64_t>(rows.size());
    for (int64_t i = 0; i < n; ++i) rows[i] = static_cast<int32_t>(n - 1 - i);
    out.assign(c.out.size() / c.T * n, 0);
    in.query = TensorView(c.query.data(), s.dtype, {n, s.Nk, s.Dk});
    in.key = TensorView(c.key.data(), s.dtype, {n, s.Nk, s.Dk});
    in.value = TensorView(c.value.data(), s.dtype, {n, s.Nv, s.Dv});
    in.beta = TensorView(c.beta.data(), s.dtype, {n, s.Nv});
    in.g = TensorView(c.g.data(), s.g_dtype, {n, s.Nv});
    in.state_pool = c.outputs().final_state;  // its shape and dtype, over the copy
    in.state_pool.data = pool.data();
    in.state_indices = TensorView(rows.data(), DType::kI32, {n});
    outs.out = TensorView(out.data(), s.dtype, {n, s.Nv, s.Dv});
  }

  cgdr_decode_args ToCArgs() const { return ToCDecode(in, outs); }
};

cgdr_prefill_args PrefillArgs(Case& c) { return ToCPrefill(c.inputs(), c.outputs()); }

// c_args.h's ToC casts DType to cgdr_dtype: the values must agree.
TEST(CApiDtypes, AgreeWithCpp) {
  EXPECT_EQ(static_cast<int>(DType::kF16), CGDR_F16);
  EXPECT_EQ(static_cast<int>(DType::kBF16), CGDR_BF16);
  EXPECT_EQ(static_cast<int>(DType::kF32), CGDR_F32);
  EXPECT_EQ(static_cast<int>(DType::kI32), CGDR_I32);
}

class CApiParity : public ::testing::TestWithParam<int64_t> {};  // Dk

TEST_P(CApiParity, SameBitsAndErrorsAsCpp) {
  for (const Setting& setting : Settings()) {
    SCOPED_TRACE(setting.name);
    Options opt;
    setting.cpp(&opt);
    cgdr_options* handle = nullptr;
    ASSERT_EQ(cgdr_options_create(&handle), CGDR_OK);
    ASSERT_EQ(setting.c(handle), CGDR_OK) << cgdr_last_error();

    Case cpp = MakeCase(Spec(GetParam(), opt.state_layout));
    Case c = MakeCase(cpp.spec);
    const Outcome cpp_prefill = Of(cgdr::Run(cpp.inputs(), cpp.outputs(), opt));
    const cgdr_prefill_args c_args = PrefillArgs(c);
    const Outcome c_prefill = Of(cgdr_prefill(&c_args, handle));
    EXPECT_EQ(c_prefill, cpp_prefill) << "C: " << c_prefill.message << "\nC++: " << cpp_prefill.message;
    EXPECT_TRUE(SameBytes(c.out, cpp.out)) << "out";
    EXPECT_TRUE(SameBytes(c.final_state, cpp.final_state)) << "final_state";

    DecodeCall cpp_step(cpp), c_step(c);
    const Outcome cpp_decode = Of(cgdr::DecodeStep(cpp_step.in, cpp_step.outs, opt));
    const cgdr_decode_args c_decode_args = c_step.ToCArgs();
    const Outcome c_decode = Of(cgdr_decode_step(&c_decode_args, handle));
    EXPECT_EQ(c_decode, cpp_decode) << "C: " << c_decode.message << "\nC++: " << cpp_decode.message;
    EXPECT_TRUE(SameBytes(c_step.out, cpp_step.out)) << "decode out";
    EXPECT_TRUE(SameBytes(c_step.pool, cpp_step.pool)) << "decode pool";
    cgdr_options_destroy(handle);
  }
}

// Dk = 40 (bucket 64), Dk = 100 (bucket 128: a forced bucket 64 is an error).
INSTANTIATE_TEST_SUITE_P(Dk, CApiParity, ::testing::Values(40, 100));

// The serving tensors (docs/SPEC.md 6d) through cgdr_prefill_ex and
// cgdr_decode_ex give the bytes and errors of the C++ calls: the gate in the
// kernel with beta's sigmoid, a pool of P slots with a slot stride and
// state_indices, checkpoints; and verify's token axis into named pool slots
// or into dense per-token states.
struct ServingCall {
  static constexpr int64_t kP = 8, kN = 3, kK = 4, kGap = 8;
  Case c;
  int64_t slot = 0, stride = 0;
  std::vector<float> pool;
  Bytes ckpt, states, verify_out;
  std::vector<int32_t> prefill_slots{4, -1, 1}, src{4, 1, 0}, dst{5, 6, -1, 7, 2, 3, -1, -1, -1, -1, -1, -1};
  ServingCall() : c(MakeCase(ServingSpec())) {
    const CaseSpec& s = c.spec;
    slot = s.Nv * s.Dk * s.Dv;
    stride = slot + kGap;
    pool.resize(static_cast<size_t>(kP * stride));
    for (size_t i = 0; i < pool.size(); ++i) pool[i] = static_cast<float>(static_cast<int64_t>(i % 61) - 30) / 64.0f;
    ckpt.assign(static_cast<size_t>(3 * slot) * sizeof(float), 0);  // floor(37/16) + 0 + floor(20/16)
    states.assign(static_cast<size_t>(kN * kK * slot) * sizeof(float), 0);
    verify_out.assign(static_cast<size_t>(kN * kK * s.Nv * s.Dv) * sizeof(float), 0);
  }
  static CaseSpec ServingSpec() {
    CaseSpec s = Spec(40, StateLayout::kVK);
    s.raw_gate = true;
    s.beta_sigmoid = true;
    return s;
  }
  Options options() const {
    Options o = c.options();
    o.checkpoint_every = 16;
    o.state_slot_stride = stride;
    return o;
  }
  TensorView Pool() { return TensorView(pool.data(), DType::kF32, {kP, c.spec.Nv, c.spec.Dv, c.spec.Dk}); }
  std::pair<Inputs, Outputs> Prefill() {
    Inputs in = c.inputs();
    Outputs out = c.outputs();
    in.initial_state = out.final_state = Pool();
    in.state_indices = TensorView(prefill_slots.data(), DType::kI32, {kN});
    out.checkpoint_states = TensorView(ckpt.data(), DType::kF32, {3, c.spec.Nv, c.spec.Dv, c.spec.Dk});
    return {in, out};
  }
  // The first N K rows of the case as N sequences of K draft tokens.
  std::pair<DecodeInputs, DecodeOutputs> Verify(bool dense) {
    const Inputs in = c.inputs();
    const auto tokens = [](const TensorView& t) {
      std::vector<int64_t> dims{kN, kK};
      for (int i = 1; i < t.rank; ++i) dims.push_back(t.shape[i]);
      return TensorView(t.data, t.dtype, dims);
    };
    DecodeInputs d;
    d.query = tokens(in.query);
    d.key = tokens(in.key);
    d.value = tokens(in.value);
    d.beta = tokens(in.beta);
    d.a = tokens(in.a);
    d.A_log = in.A_log;
    d.dt_bias = in.dt_bias;
    d.state_pool = Pool();
    d.state_indices = TensorView(src.data(), DType::kI32, {kN});
    DecodeOutputs o;
    o.out = TensorView(verify_out.data(), DType::kF32, {kN, kK, c.spec.Nv, c.spec.Dv});
    if (dense) {
      o.states = TensorView(states.data(), DType::kF32, {kN * kK, c.spec.Nv, c.spec.Dv, c.spec.Dk});
    } else {
      d.dst_indices = TensorView(dst.data(), DType::kI32, {kN, kK});
    }
    return {d, o};
  }
};

cgdr_options* ServingHandle(const Options& o) {
  cgdr_options* h = nullptr;
  EXPECT_EQ(cgdr_options_create(&h), CGDR_OK);
  EXPECT_EQ(cgdr_options_set_checkpoint_every(h, o.checkpoint_every), CGDR_OK);
  EXPECT_EQ(cgdr_options_set_state_slot_stride(h, o.state_slot_stride), CGDR_OK);
  EXPECT_EQ(cgdr_options_set_beta_sigmoid(h, o.use_beta_sigmoid ? 1 : 0), CGDR_OK);
  return h;
}

// mutate: applied to both calls' tensors (a bad input: both fail alike, and
// `ok` says whether the calls are to succeed).
void ExpectServingParity(const std::function<void(Inputs&, Outputs&, DecodeInputs&)>& mutate, bool dense, bool ok) {
  ServingCall cpp, c;
  const Options opt = cpp.options();
  cgdr_options* handle = ServingHandle(opt);
  auto [cpp_in, cpp_out] = cpp.Prefill();
  auto [c_in, c_out] = c.Prefill();
  auto [cpp_din, cpp_dout] = cpp.Verify(dense);
  auto [c_din, c_dout] = c.Verify(dense);
  mutate(cpp_in, cpp_out, cpp_din);
  mutate(c_in, c_out, c_din);

  const Outcome cpp_prefill = Of(cgdr::Run(cpp_in, cpp_out, opt));
  EXPECT_EQ(cpp_prefill.code == 0, ok) << cpp_prefill.message;
  const cgdr_prefill_args pa = ToCPrefill(c_in, c_out);
  const cgdr_prefill_extra pe = ToCPrefillExtra(c_in, c_out);
  const Outcome c_prefill = Of(cgdr_prefill_ex(&pa, &pe, handle));
  EXPECT_EQ(c_prefill, cpp_prefill) << "C: " << c_prefill.message << "\nC++: " << cpp_prefill.message;
  EXPECT_TRUE(SameBytes(c.c.out, cpp.c.out)) << "out";
  EXPECT_TRUE(c.pool == cpp.pool) << "pool after prefill";
  EXPECT_TRUE(SameBytes(c.ckpt, cpp.ckpt)) << "checkpoint_states";

  const Outcome cpp_verify = Of(cgdr::DecodeStep(cpp_din, cpp_dout, opt));
  EXPECT_EQ(cpp_verify.code == 0, ok) << cpp_verify.message;
  const cgdr_decode_args da = ToCDecode(c_din, c_dout);
  const cgdr_decode_extra de = ToCDecodeExtra(c_din, c_dout);
  const Outcome c_verify = Of(cgdr_decode_ex(&da, &de, handle));
  EXPECT_EQ(c_verify, cpp_verify) << "C: " << c_verify.message << "\nC++: " << cpp_verify.message;
  EXPECT_TRUE(SameBytes(c.verify_out, cpp.verify_out)) << "verify out";
  EXPECT_TRUE(c.pool == cpp.pool) << "pool after verify";
  EXPECT_TRUE(SameBytes(c.states, cpp.states)) << "verify states";
  cgdr_options_destroy(handle);
}

TEST(CApiParity, ServingTensors) {
  for (bool dense : {false, true}) {
    SCOPED_TRACE(dense ? "dense states" : "pool slots");
    ExpectServingParity([](Inputs&, Outputs&, DecodeInputs&) {}, dense, true);
  }
}

TEST(CApiParity, ServingErrors) {
  ExpectServingParity([](Inputs& in, Outputs&, DecodeInputs& d) {
    in.g = in.a;  // g and the raw gate both
    d.g = d.a;
  }, false, false);
  ExpectServingParity([](Inputs&, Outputs& out, DecodeInputs& d) {
    out.checkpoint_states.shape[0] = 2;
    static int32_t twice[] = {5, 5, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1};
    d.dst_indices.data = twice;
  }, false, false);
}

// KDA (docs/SPEC.md 10): a per-channel gate through both APIs, bit for bit:
// g [T, Nv, Dk]; the raw gate a [T, Nv, Dk] with dt_bias [Nv * Dk], with and
// without a lower bound, and bounded without A_log; prefill (token by token
// and the plan's choice) and a decode step of one token per sequence, whose
// gate is [N, Nv, Dk]. The bad settings fail alike.
struct KdaVariant {
  const char* name;
  bool raw_gate;
  double lower_bound;
  bool drop_a_log;
  bool ok;
};

// A named precision mode and engine for the chunked products, in both APIs
// (kAuto: the option left unset).
struct ModeAndEngine {
  Precision precision = Precision::kAuto;
  cgdr_precision c_precision = CGDR_PRECISION_AUTO;
  Engine engine = Engine::kAuto;
  cgdr_engine c_engine = CGDR_ENGINE_AUTO;
};

void ExpectKdaParity(const KdaVariant& v, Algo algo, const ModeAndEngine& mode = {}) {
  CaseSpec spec = Spec(40, StateLayout::kVK);
  spec.per_channel_gate = true;
  spec.raw_gate = v.raw_gate;
  spec.gate_lower_bound = v.lower_bound;
  Case cpp = MakeCase(spec), c = MakeCase(spec);
  Options opt = cpp.options();
  opt.algo = algo;
  opt.precision = mode.precision;
  opt.engine = mode.engine;
  cgdr_options* handle = nullptr;
  ASSERT_EQ(cgdr_options_create(&handle), CGDR_OK);
  ASSERT_EQ(cgdr_options_set_chunk(handle, algo == Algo::kRecurrent ? 1 : (algo == Algo::kChunk16 ? 16 : 0)), CGDR_OK);
  ASSERT_EQ(cgdr_options_set_precision(handle, mode.c_precision), CGDR_OK);
  ASSERT_EQ(cgdr_options_set_engine(handle, mode.c_engine), CGDR_OK);
  ASSERT_EQ(cgdr_options_set_gate_lower_bound(handle, v.lower_bound), CGDR_OK);
  Inputs cpp_in = cpp.inputs(), c_in = c.inputs();
  if (v.drop_a_log) cpp_in.A_log = c_in.A_log = TensorView();
  const Outcome cpp_prefill = Of(cgdr::Run(cpp_in, cpp.outputs(), opt));
  const cgdr_prefill_args pa = ToCPrefill(c_in, c.outputs());
  const cgdr_prefill_extra pe = ToCPrefillExtra(c_in, c.outputs());
  const Outcome c_prefill = Of(cgdr_prefill_ex(&pa, &pe, handle));
  EXPECT_EQ(c_prefill, cpp_prefill) << "C: " << c_prefill.message << "\nC++: " << cpp_prefill.message;
  if (algo == Algo::kRecurrent) {
    EXPECT_EQ(cpp_prefill.code == 0, v.ok) << cpp_prefill.message;
  }
  EXPECT_TRUE(SameBytes(c.out, cpp.out)) << "out";
  EXPECT_TRUE(SameBytes(c.final_state, cpp.final_state)) << "final_state";

  // One token per sequence (each sequence's first rows) from the final states, as DecodeCall.
  DecodeCall cpp_step(cpp), c_step(c);
  for (auto* d : {&cpp_step, &c_step}) {
    Case& src = d == &cpp_step ? cpp : c;
    const Inputs in = src.inputs();
    const int64_t n = static_cast<int64_t>(d->rows.size());
    const auto rows = [n](const TensorView& t) {
      if (!t.present()) return t;
      std::vector<int64_t> dims{n};
      for (int i = 1; i < t.rank; ++i) dims.push_back(t.shape[i]);
      return TensorView(t.data, t.dtype, dims);
    };
    d->in.g = rows(in.g);
    d->in.a = rows(in.a);
    d->in.A_log = v.drop_a_log ? TensorView() : in.A_log;
    d->in.dt_bias = in.dt_bias;
  }
  const Outcome cpp_decode = Of(cgdr::DecodeStep(cpp_step.in, cpp_step.outs, opt));
  const cgdr_decode_args da = c_step.ToCArgs();
  const cgdr_decode_extra de = ToCDecodeExtra(c_step.in, c_step.outs);
  const Outcome c_decode = Of(cgdr_decode_ex(&da, &de, handle));
  EXPECT_EQ(c_decode, cpp_decode) << "C: " << c_decode.message << "\nC++: " << cpp_decode.message;
  EXPECT_EQ(cpp_decode.code == 0, v.ok) << cpp_decode.message;
  EXPECT_TRUE(SameBytes(c_step.out, cpp_step.out)) << "decode out";
  EXPECT_TRUE(SameBytes(c_step.pool, cpp_step.pool)) << "decode pool";
  cgdr_options_destroy(handle);
}

TEST(CApiParity, PerChannelGate) {
  const KdaVariant variants[] = {
      {"g [T, Nv, Dk]", false, 0.0, false, true},
      {"a [T, Nv, Dk]", true, 0.0, false, true},
      {"a, lower bound -5", true, -5.0, false, true},
      {"a, lower bound -5, no A_log", true, -5.0, true, true},
      {"a, no A_log, no bound", true, 0.0, true, false},
      {"a, lower bound 1", true, 1.0, false, false},
      {"a, lower bound NaN", true, std::nan(""), false, false},
      {"g, lower bound -5", false, -5.0, false, false},
  };
  for (const KdaVariant& v : variants) {
    for (Algo algo : {Algo::kRecurrent, Algo::kAuto}) {
      SCOPED_TRACE(std::string(v.name) + (algo == Algo::kRecurrent ? ", C = 1" : ", auto"));
      ExpectKdaParity(v, algo);
    }
  }
}

// KDA's chunked products in the bf16 modes (docs/SPEC.md 10.4), on the
// vector units and on the AMX emulation, named through each API: the same
// bits, and not fp32's.
TEST(CApiParity, PerChannelGateInThePrecisionModes) {
  const KdaVariant g{"g [T, Nv, Dk]", false, 0.0, false, true};
  const ModeAndEngine modes[] = {
      {Precision::kBf16x3, CGDR_PRECISION_BF16X3, Engine::kVector, CGDR_ENGINE_VECTOR},
      {Precision::kBf16, CGDR_PRECISION_BF16, Engine::kAmxEmulated, CGDR_ENGINE_AMX_EMULATED},
      {Precision::kBf16x4, CGDR_PRECISION_BF16X4, Engine::kAmxEmulated, CGDR_ENGINE_AMX_EMULATED},
  };
  for (const ModeAndEngine& m : modes) {
    SCOPED_TRACE(std::string(PrecisionName(m.precision)) + " on " + EngineName(m.engine));
    ExpectKdaParity(g, Algo::kChunk16, m);
  }
  // The modes reach the kernel: bf16x3's answer is not fp32's.
  CaseSpec spec = Spec(40, StateLayout::kVK);
  spec.per_channel_gate = true;
  Case fp32 = MakeCase(spec), split = MakeCase(spec);
  Options opt = fp32.options();
  opt.algo = Algo::kChunk16;
  opt.precision = Precision::kFp32;
  ASSERT_TRUE(cgdr::Run(fp32.inputs(), fp32.outputs(), opt).ok());
  opt.precision = Precision::kBf16x3;
  ASSERT_TRUE(cgdr::Run(split.inputs(), split.outputs(), opt).ok());
  EXPECT_FALSE(SameBytes(fp32.out, split.out));
}

TEST(CApiSetters, RejectValuesOutsideTheirRange) {
  cgdr_options* handle = nullptr;
  ASSERT_EQ(cgdr_options_create(&handle), CGDR_OK);
  EXPECT_EQ(cgdr_options_set_v_step(handle, -1), CGDR_INVALID_ARGUMENT);
  EXPECT_STREQ(cgdr_last_error(), "cgdr_options_set_v_step: expected 0 (auto) .. 256, got -1");
  EXPECT_EQ(cgdr_options_set_v_step(handle, 257), CGDR_INVALID_ARGUMENT);
  EXPECT_EQ(cgdr_options_set_v_step(handle, 256), CGDR_OK);
  EXPECT_EQ(cgdr_options_set_dk_bucket(handle, 72), CGDR_INVALID_ARGUMENT);
  EXPECT_STREQ(cgdr_last_error(),
               "cgdr_options_set_dk_bucket: expected 0 (auto), -1 (generic), 64, 80, 96 or 128, got 72");
  EXPECT_EQ(cgdr_options_set_dk_bucket(handle, 80), CGDR_OK);
  EXPECT_EQ(cgdr_options_set_v_step(nullptr, 8), CGDR_INVALID_ARGUMENT);
  EXPECT_EQ(cgdr_options_set_dk_bucket(nullptr, 64), CGDR_INVALID_ARGUMENT);
  // The serving options (docs/SPEC.md 6d): signs here, against the shapes in the call.
  EXPECT_EQ(cgdr_options_set_checkpoint_every(handle, -1), CGDR_INVALID_ARGUMENT);
  EXPECT_STREQ(cgdr_last_error(), "cgdr_options_set_checkpoint_every: expected 0 (none) or a positive token count, got -1");
  EXPECT_EQ(cgdr_options_set_checkpoint_every(handle, 256), CGDR_OK);
  EXPECT_EQ(cgdr_options_set_state_slot_stride(handle, -8), CGDR_INVALID_ARGUMENT);
  EXPECT_STREQ(cgdr_last_error(),
               "cgdr_options_set_state_slot_stride: expected 0 (dense) or a positive element count, got -8");
  EXPECT_EQ(cgdr_options_set_state_slot_stride(handle, 0), CGDR_OK);
  EXPECT_EQ(cgdr_options_set_beta_sigmoid(handle, 1), CGDR_OK);
  EXPECT_EQ(cgdr_options_set_checkpoint_every(nullptr, 1), CGDR_INVALID_ARGUMENT);
  EXPECT_EQ(cgdr_options_set_state_slot_stride(nullptr, 0), CGDR_INVALID_ARGUMENT);
  EXPECT_EQ(cgdr_options_set_beta_sigmoid(nullptr, 1), CGDR_INVALID_ARGUMENT);
  // KDA's bound (API version 6): any double here, its range checked by the call.
  EXPECT_EQ(cgdr_options_set_gate_lower_bound(handle, 2.0), CGDR_OK);
  EXPECT_EQ(cgdr_options_set_gate_lower_bound(nullptr, -1.0), CGDR_INVALID_ARGUMENT);
  EXPECT_STREQ(cgdr_last_error(), "cgdr_options_set_gate_lower_bound: options handle is NULL");
  EXPECT_EQ(cgdr_prefill_ex(nullptr, nullptr, handle), CGDR_INVALID_ARGUMENT);
  EXPECT_EQ(cgdr_decode_ex(nullptr, nullptr, handle), CGDR_INVALID_ARGUMENT);
  cgdr_options_destroy(handle);
}

TEST(CApiVersion, MatchesTheHeaders) {
  EXPECT_STREQ(cgdr_version(), CGDR_VERSION_STRING);
  EXPECT_EQ(std::string(cgdr_version()), std::to_string(CGDR_VERSION_MAJOR) + "." + std::to_string(CGDR_VERSION_MINOR) +
                                             "." + std::to_string(CGDR_VERSION_PATCH));
  EXPECT_EQ(cgdr_api_version(), CGDR_API_VERSION);
}

// API version 7: the C entry gives the C++ description, a thread's string
// living until that thread's next call.
TEST(CApiVersion, CpuDescriptionIsTheLibrarys) {
  const char* first = cgdr_cpu_description();
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(std::string(first), CpuDescription());
#if defined(__x86_64__) || defined(__i386__)
  EXPECT_NE(std::string(first).find(" (family "), std::string::npos) << first;
#endif
  std::string other;
  std::thread([&] { other = cgdr_cpu_description(); }).join();
  EXPECT_STREQ(first, other.c_str());  // still valid: another thread's call has its own string
}

}  // namespace
}  // namespace cgdr
