// The C API (include/cgdr/cgdr.h): a thin translation to the C++ API. Every
// entry catches everything, so no exception crosses into C, and records the
// message of a failure in a per-thread string.
#include "cgdr/cgdr.h"

#include <cstring>
#include <exception>
#include <new>
#include <string>

#include "cgdr/cgdr.hpp"
#include "cgdr/decode.hpp"

struct cgdr_options {
  cgdr::Options options;
};

namespace {

// The C API covers every option of the C++ one (issue 23). This binding names
// each field of cgdr::Options and stops compiling when one is added: give the
// new field its setter below and in cgdr.h (bumping CGDR_API_VERSION), a case
// in tests/c_api_parity_test.cc, and its name here.
[[maybe_unused]] void EveryOptionHasACSetter(const cgdr::Options& o) {
  [[maybe_unused]] const auto& [scale, use_qk_l2norm, state_layout, algo, threads, check_values, v_step, dk_bucket,
                                precision, engine, checkpoint_every, state_slot_stride, use_beta_sigmoid, qk_l2norm_eps,
                                gate_lower_bound] = o;
}

thread_local std::string g_last_error;

cgdr_status Fail(cgdr_status code, std::string msg) {
  g_last_error = std::move(msg);
  return code;
}

cgdr_status FromStatus(const cgdr::Status& s) {
  if (s.ok()) {
    g_last_error.clear();
    return CGDR_OK;
  }
  switch (s.code()) {
    case cgdr::Code::kInvalidArgument: return Fail(CGDR_INVALID_ARGUMENT, s.message());
    case cgdr::Code::kResourceExhausted: return Fail(CGDR_RESOURCE_EXHAUSTED, s.message());
    default: return Fail(CGDR_INTERNAL, s.message());
  }
}

// The int a C caller stored in an enum-typed field or argument. C lets any
// int through; in C++ loading a value outside the enumerators' range is
// undefined (UBSan reports it), so the bits are read as an int first.
template <class Enum>
int RawEnum(const Enum& e) {
  static_assert(sizeof(Enum) == sizeof(int), "C enums are int-sized");
  int v = 0;
  std::memcpy(&v, &e, sizeof v);
  return v;
}

// Maps a C descriptor to a view, rejecting what the C++ side cannot express
// (unknown dtype enum values, ranks outside 0..4) with the tensor's name.
cgdr::Status ToView(const char* name, const cgdr_tensor& t, cgdr::TensorView* v) {
  *v = cgdr::TensorView();
  if (t.data == nullptr) return cgdr::Status::Ok();  // absent; required ones are reported by validation
  const int dtype = RawEnum(t.dtype);
  switch (dtype) {
    case CGDR_F16: v->dtype = cgdr::DType::kF16; break;
    case CGDR_BF16: v->dtype = cgdr::DType::kBF16; break;
    case CGDR_F32: v->dtype = cgdr::DType::kF32; break;
    case CGDR_I32: v->dtype = cgdr::DType::kI32; break;
    default:
      return cgdr::Status::Invalid(std::string(name) + ": unknown dtype enum value " + std::to_string(dtype));
  }
  if (t.rank < 0 || t.rank > CGDR_MAX_RANK) {
    return cgdr::Status::Invalid(std::string(name) + ": expected rank 0.." + std::to_string(CGDR_MAX_RANK) + ", got " +
                                 std::to_string(t.rank));
  }
  v->data = t.data;
  v->rank = t.rank;
  for (int i = 0; i < t.rank; ++i) v->shape[i] = t.shape[i];
  return cgdr::Status::Ok();
}

// Runs `body` (which returns a cgdr::Status) with every exception turned into a status.
template <typename F>
cgdr_status Guard(F&& body) {
  try {
    return FromStatus(body());
  } catch (const std::bad_alloc&) {
    return Fail(CGDR_RESOURCE_EXHAUSTED, "out of memory");
  } catch (const std::exception& e) {
    return Fail(CGDR_INTERNAL, std::string("internal error: ") + e.what());
  } catch (...) {
    return Fail(CGDR_INTERNAL, "internal error: unknown exception");
  }
}

#define CGDR_C_TRY(expr)     \
  do {                       \
    cgdr::Status s_ = (expr); \
    if (!s_.ok()) return s_; \
  } while (0)

cgdr::Options OptionsOf(const cgdr_options* opt) { return opt ? opt->options : cgdr::Options(); }

cgdr_status NullHandle(const char* fn) { return Fail(CGDR_INVALID_ARGUMENT, std::string(fn) + ": options handle is NULL"); }

// `text` in a string of this thread's, kept until the next call of `slot`'s
// function on the thread; "unknown" where making it threw.
template <class Fn>
const char* ThreadLocalText(std::string& slot, const Fn& text) {
  try {
    slot = text();
  } catch (...) {
    slot = "unknown";
  }
  return slot.c_str();
}

}  // namespace

extern "C" {

cgdr_status cgdr_options_create(cgdr_options** out) {
  if (out == nullptr) return Fail(CGDR_INVALID_ARGUMENT, "cgdr_options_create: out pointer is NULL");
  *out = nullptr;
  auto* o = new (std::nothrow) cgdr_options();
  if (o == nullptr) return Fail(CGDR_RESOURCE_EXHAUSTED, "cgdr_options_create: out of memory");
  *out = o;
  g_last_error.clear();
  return CGDR_OK;
}

void cgdr_options_destroy(cgdr_options* opt) { delete opt; }

cgdr_status cgdr_options_set_scale(cgdr_options* opt, double scale) {
  if (!opt) return NullHandle("cgdr_options_set_scale");
  opt->options.scale = scale;  // range checked by validation, with the call's context
  return CGDR_OK;
}

cgdr_status cgdr_options_set_qk_l2norm(cgdr_options* opt, int enable) {
  if (!opt) return NullHandle("cgdr_options_set_qk_l2norm");
  opt->options.use_qk_l2norm = enable != 0;
  return CGDR_OK;
}

cgdr_status cgdr_options_set_state_layout(cgdr_options* opt, cgdr_state_layout layout) {
  if (!opt) return NullHandle("cgdr_options_set_state_layout");
  const int raw = RawEnum(layout);
  if (raw != CGDR_LAYOUT_VK && raw != CGDR_LAYOUT_KV) {
    return Fail(CGDR_INVALID_ARGUMENT, "cgdr_options_set_state_layout: expected CGDR_LAYOUT_VK (0) or CGDR_LAYOUT_KV (1), got " +
                                           std::to_string(raw));
  }
  opt->options.state_layout = raw == CGDR_LAYOUT_KV ? cgdr::StateLayout::kKV : cgdr::StateLayout::kVK;
  return CGDR_OK;
}

cgdr_status cgdr_options_set_threads(cgdr_options* opt, int threads) {
  if (!opt) return NullHandle("cgdr_options_set_threads");
  if (threads < 0 || threads > 4096) {
    return Fail(CGDR_INVALID_ARGUMENT, "cgdr_options_set_threads: expected 0 (all) .. 4096, got " + std::to_string(threads));
  }
  opt->options.threads = threads;
  return CGDR_OK;
}

cgdr_status cgdr_options_set_check_values(cgdr_options* opt, int enable) {
  if (!opt) return NullHandle("cgdr_options_set_check_values");
  opt->options.check_values = enable != 0;
  return CGDR_OK;
}

cgdr_status cgdr_options_set_chunk(cgdr_options* opt, int chunk) {
  if (!opt) return NullHandle("cgdr_options_set_chunk");
  switch (chunk) {
    case 0: opt->options.algo = cgdr::Algo::kAuto; return CGDR_OK;
    case 1: opt->options.algo = cgdr::Algo::kRecurrent; return CGDR_OK;
    case 16: opt->options.algo = cgdr::Algo::kChunk16; return CGDR_OK;
    case 32: opt->options.algo = cgdr::Algo::kChunk32; return CGDR_OK;
    case 64: opt->options.algo = cgdr::Algo::kChunk64; return CGDR_OK;
    case 128: opt->options.algo = cgdr::Algo::kChunk128; return CGDR_OK;
    default:
      return Fail(CGDR_INVALID_ARGUMENT, "cgdr_options_set_chunk: expected 0 (auto), 1, 16, 32, 64 or 128, got " + std::to_string(chunk));
  }
}

cgdr_status cgdr_options_set_precision(cgdr_options* opt, cgdr_precision precision) {
  if (!opt) return NullHandle("cgdr_options_set_precision");
  const int raw = RawEnum(precision);
  if (raw < CGDR_PRECISION_FP32 || raw > CGDR_PRECISION_AUTO) {
    return Fail(CGDR_INVALID_ARGUMENT,
                "cgdr_options_set_precision: expected CGDR_PRECISION_FP32 (0) .. CGDR_PRECISION_AUTO (4), got " +
                    std::to_string(raw));
  }
  static_assert(static_cast<int>(cgdr::Precision::kBf16x4) == CGDR_PRECISION_BF16X4, "C and C++ precision values agree");
  static_assert(static_cast<int>(cgdr::Precision::kAuto) == CGDR_PRECISION_AUTO, "C and C++ precision values agree");
  opt->options.precision = static_cast<cgdr::Precision>(raw);
  return CGDR_OK;
}

cgdr_status cgdr_options_set_engine(cgdr_options* opt, cgdr_engine engine) {
  if (!opt) return NullHandle("cgdr_options_set_engine");
  const int raw = RawEnum(engine);
  if (raw < CGDR_ENGINE_AUTO || raw > CGDR_ENGINE_AMX_EMULATED) {
    return Fail(CGDR_INVALID_ARGUMENT,
                "cgdr_options_set_engine: expected CGDR_ENGINE_AUTO (0) .. CGDR_ENGINE_AMX_EMULATED (3), got " +
                    std::to_string(raw));
  }
  static_assert(static_cast<int>(cgdr::Engine::kVector) == CGDR_ENGINE_VECTOR &&
                    static_cast<int>(cgdr::Engine::kAmxEmulated) == CGDR_ENGINE_AMX_EMULATED,
                "C and C++ engine values agree");
  opt->options.engine = static_cast<cgdr::Engine>(raw);
  return CGDR_OK;
}

cgdr_status cgdr_options_set_v_step(cgdr_options* opt, int v_step) {
  if (!opt) return NullHandle("cgdr_options_set_v_step");
  if (v_step < 0 || v_step > cgdr::kMaxHeadDim) {
    return Fail(CGDR_INVALID_ARGUMENT, "cgdr_options_set_v_step: expected 0 (auto) .. " +
                                           std::to_string(cgdr::kMaxHeadDim) + ", got " + std::to_string(v_step));
  }
  opt->options.v_step = v_step;
  return CGDR_OK;
}

cgdr_status cgdr_options_set_dk_bucket(cgdr_options* opt, int dk_bucket) {
  if (!opt) return NullHandle("cgdr_options_set_dk_bucket");
  switch (dk_bucket) {
    case 0: case -1: case 64: case 80: case 96: case 128:
      opt->options.dk_bucket = dk_bucket;  // whether it holds Dk is checked by the call, which knows Dk
      return CGDR_OK;
    default:
      return Fail(CGDR_INVALID_ARGUMENT, "cgdr_options_set_dk_bucket: expected 0 (auto), -1 (generic), 64, 80, 96 or 128, got " +
                                             std::to_string(dk_bucket));
  }
}

cgdr_status cgdr_options_set_checkpoint_every(cgdr_options* opt, int64_t checkpoint_every) {
  if (!opt) return NullHandle("cgdr_options_set_checkpoint_every");
  if (checkpoint_every < 0) {
    return Fail(CGDR_INVALID_ARGUMENT, "cgdr_options_set_checkpoint_every: expected 0 (none) or a positive token count, got " +
                                           std::to_string(checkpoint_every));
  }
  opt->options.checkpoint_every = checkpoint_every;
  return CGDR_OK;
}

cgdr_status cgdr_options_set_state_slot_stride(cgdr_options* opt, int64_t stride) {
  if (!opt) return NullHandle("cgdr_options_set_state_slot_stride");
  if (stride < 0) {
    return Fail(CGDR_INVALID_ARGUMENT, "cgdr_options_set_state_slot_stride: expected 0 (dense) or a positive element count, got " +
                                           std::to_string(stride));
  }
  opt->options.state_slot_stride = stride;  // against Nv * Dk * Dv: checked by the call, which knows them
  return CGDR_OK;
}

cgdr_status cgdr_options_set_beta_sigmoid(cgdr_options* opt, int enable) {
  if (!opt) return NullHandle("cgdr_options_set_beta_sigmoid");
  opt->options.use_beta_sigmoid = enable != 0;
  return CGDR_OK;
}

cgdr_status cgdr_options_set_qk_l2norm_eps(cgdr_options* opt, double eps) {
  if (!opt) return NullHandle("cgdr_options_set_qk_l2norm_eps");
  opt->options.qk_l2norm_eps = eps;  // > 0 and finite: checked by the call, as the C++ API checks it
  return CGDR_OK;
}

cgdr_status cgdr_options_set_gate_lower_bound(cgdr_options* opt, double lower_bound) {
  if (!opt) return NullHandle("cgdr_options_set_gate_lower_bound");
  opt->options.gate_lower_bound = lower_bound;  // 0 or finite < 0, with the raw gate: checked by the call
  return CGDR_OK;
}

cgdr_status cgdr_prefill_ex(const cgdr_prefill_args* args, const cgdr_prefill_extra* extra, const cgdr_options* opt) {
  if (!args) return Fail(CGDR_INVALID_ARGUMENT, "cgdr_prefill: args pointer is NULL");
  return Guard([&]() -> cgdr::Status {
    cgdr::Inputs in;
    cgdr::Outputs out;
    CGDR_C_TRY(ToView("query", args->query, &in.query));
    CGDR_C_TRY(ToView("key", args->key, &in.key));
    CGDR_C_TRY(ToView("value", args->value, &in.value));
    CGDR_C_TRY(ToView("beta", args->beta, &in.beta));
    CGDR_C_TRY(ToView("g", args->g, &in.g));
    CGDR_C_TRY(ToView("initial_state", args->initial_state, &in.initial_state));
    CGDR_C_TRY(ToView("seq_lens", args->seq_lens, &in.seq_lens));
    CGDR_C_TRY(ToView("out", args->out, &out.out));
    CGDR_C_TRY(ToView("final_state", args->final_state, &out.final_state));
    if (extra) {
      CGDR_C_TRY(ToView("a", extra->a, &in.a));
      CGDR_C_TRY(ToView("A_log", extra->A_log, &in.A_log));
      CGDR_C_TRY(ToView("dt_bias", extra->dt_bias, &in.dt_bias));
      CGDR_C_TRY(ToView("state_indices", extra->state_indices, &in.state_indices));
      CGDR_C_TRY(ToView("checkpoint_states", extra->checkpoint_states, &out.checkpoint_states));
    }
    return cgdr::Run(in, out, OptionsOf(opt));
  });
}

cgdr_status cgdr_prefill(const cgdr_prefill_args* args, const cgdr_options* opt) {
  return cgdr_prefill_ex(args, nullptr, opt);
}

cgdr_status cgdr_decode_ex(const cgdr_decode_args* args, const cgdr_decode_extra* extra, const cgdr_options* opt) {
  if (!args) return Fail(CGDR_INVALID_ARGUMENT, "cgdr_decode_step: args pointer is NULL");
  return Guard([&]() -> cgdr::Status {
    cgdr::DecodeInputs in;
    cgdr::DecodeOutputs out;
    CGDR_C_TRY(ToView("query", args->query, &in.query));
    CGDR_C_TRY(ToView("key", args->key, &in.key));
    CGDR_C_TRY(ToView("value", args->value, &in.value));
    CGDR_C_TRY(ToView("beta", args->beta, &in.beta));
    CGDR_C_TRY(ToView("g", args->g, &in.g));
    CGDR_C_TRY(ToView("state_pool", args->state_pool, &in.state_pool));
    CGDR_C_TRY(ToView("state_indices", args->state_indices, &in.state_indices));
    CGDR_C_TRY(ToView("out", args->out, &out.out));
    if (extra) {
      CGDR_C_TRY(ToView("a", extra->a, &in.a));
      CGDR_C_TRY(ToView("A_log", extra->A_log, &in.A_log));
      CGDR_C_TRY(ToView("dt_bias", extra->dt_bias, &in.dt_bias));
      CGDR_C_TRY(ToView("dst_indices", extra->dst_indices, &in.dst_indices));
      CGDR_C_TRY(ToView("states", extra->states, &out.states));
    }
    return cgdr::DecodeStep(in, out, OptionsOf(opt));
  });
}

cgdr_status cgdr_decode_step(const cgdr_decode_args* args, const cgdr_options* opt) {
  return cgdr_decode_ex(args, nullptr, opt);
}

const char* cgdr_last_error(void) { return g_last_error.c_str(); }

const char* cgdr_status_name(cgdr_status status) {
  switch (status) {
    case CGDR_OK: return "ok";
    case CGDR_INVALID_ARGUMENT: return "invalid_argument";
    case CGDR_RESOURCE_EXHAUSTED: return "resource_exhausted";
    case CGDR_INTERNAL: return "internal";
  }
  return "unknown";
}

const char* cgdr_version(void) { return CGDR_VERSION_STRING; }

int cgdr_api_version(void) { return CGDR_API_VERSION; }

const char* cgdr_simd_target(void) {
  static thread_local std::string name;
  return ThreadLocalText(name, [] { return cgdr::ActiveTarget(); });
}

const char* cgdr_cpu_description(void) {
  static thread_local std::string description;
  return ThreadLocalText(description, [] { return cgdr::CpuDescription(); });
}

}  // extern "C"
