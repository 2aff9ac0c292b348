// Everything of SPEC 3 for prefill in one place (the checks it shares with
// decode are in checks.h). Each failure names the tensor, what was expected
// and what was found; nothing here writes to any output.
#include <cstdint>
#include <utility>

#include "cgdr/cgdr.hpp"
#include "core/strcat.h"
#include "validate/checks.h"

namespace cgdr {
namespace {

Status CheckNoOverlap(const char* out_name, const TensorView& out, const Inputs& in, bool allow_state_alias) {
  if (!out.present()) return Status::Ok();
  const std::pair<const char*, const TensorView*> inputs[] = {
      {"query", &in.query}, {"key", &in.key},   {"value", &in.value},         {"beta", &in.beta},
      {"g", &in.g},         {"seq_lens", &in.seq_lens}, {"initial_state", &in.initial_state}};
  const ByteRange r = BytesOf(out);
  for (const auto& [name, t] : inputs) {
    if (!t->present()) continue;
    const bool exact_state_alias = allow_state_alias && t == &in.initial_state && t->data == out.data &&
                                   t->dtype == out.dtype && t->numel() == out.numel();
    if (exact_state_alias) continue;  // in-place state update is supported: items read their tile before writing it
    if (Overlap(r, BytesOf(*t))) {
      return Status::Invalid(Cat(out_name, ": output memory overlaps input '", name, "' (only final_state == initial_state exactly is allowed)"));
    }
  }
  return Status::Ok();
}

}  // namespace

Status Validate(const Inputs& in, const Outputs& out, const Options& opt, Problem* p) {
  CGDR_TRY(CheckPresent("query", in.query));
  CGDR_TRY(CheckPresent("key", in.key));
  CGDR_TRY(CheckPresent("value", in.value));
  CGDR_TRY(CheckPresent("beta", in.beta));
  CGDR_TRY(CheckPresent("seq_lens", in.seq_lens));
  CGDR_TRY(CheckPresent("out", out.out));

  TokenDims dims;
  CGDR_TRY(CheckTokenInputs(TokenAxis::kTokens, in.query, in.key, in.value, in.beta, in.g, &dims));
  const int64_t T = dims.tokens, Nk = dims.Nk, Nv = dims.Nv, Dk = dims.Dk, Dv = dims.Dv;
  const DType dt = dims.dtype;

  CGDR_TRY(CheckRank("seq_lens", in.seq_lens, 1, "[B]"));
  CGDR_TRY(CheckSameDType("seq_lens", in.seq_lens, DType::kI32, "token counts"));
  const int64_t B = in.seq_lens.shape[0];
  if (B < 1) return Status::Invalid(Cat("seq_lens: expected at least one sequence, got shape ", in.seq_lens.ShapeString()));

  const bool kv = opt.state_layout == StateLayout::kKV;
  const char* state_dims = kv ? "[B, Nv, Dk, Dv] (layout kv)" : "[B, Nv, Dv, Dk] (layout vk)";
  const int64_t s2 = kv ? Dk : Dv, s3 = kv ? Dv : Dk;
  DType state_dt = dt;
  if (in.initial_state.present()) {
    CGDR_TRY(CheckRank("initial_state", in.initial_state, 4, state_dims));
    CGDR_TRY(CheckShape("initial_state", in.initial_state, {B, Nv, s2, s3}, state_dims));
    CGDR_TRY(CheckFloatDType("initial_state", in.initial_state));
    state_dt = in.initial_state.dtype;
  }
  CGDR_TRY(CheckRank("out", out.out, 3, "[T, Nv, Dv]"));
  CGDR_TRY(CheckShape("out", out.out, {T, Nv, Dv}, "[T, Nv, Dv]"));
  CGDR_TRY(CheckSameDType("out", out.out, dt, "same as query"));
  if (out.final_state.present()) {
    CGDR_TRY(CheckRank("final_state", out.final_state, 4, state_dims));
    CGDR_TRY(CheckShape("final_state", out.final_state, {B, Nv, s2, s3}, state_dims));
    CGDR_TRY(CheckSameDType("final_state", out.final_state, state_dt,
                            in.initial_state.present() ? "same as initial_state" : "same as query"));
  }
  CGDR_TRY(CheckNoOverlap("out", out.out, in, false));
  CGDR_TRY(CheckNoOverlap("final_state", out.final_state, in, true));
  if (out.final_state.present() && Overlap(BytesOf(out.out), BytesOf(out.final_state))) {
    return Status::Invalid("final_state: output memory overlaps output 'out'");
  }

  // Sequence lengths: non-negative, summing to T, accumulated in 64 bits.
  const auto* lens = static_cast<const int32_t*>(in.seq_lens.data);
  int64_t total = 0;
  p->seq_lens.assign(static_cast<size_t>(B), 0);
  for (int64_t b = 0; b < B; ++b) {
    if (lens[b] < 0) return Status::Invalid(Cat("seq_lens: expected lengths >= 0, got ", lens[b], " at index [", b, "]"));
    total += lens[b];
    p->seq_lens[static_cast<size_t>(b)] = lens[b];
  }
  if (total != T) return Status::Invalid(Cat("seq_lens: expected the lengths to sum to T = ", T, ", got ", total));

  CGDR_TRY(CheckCommonOptions(opt));
  // Enum values from outside the C++ type system (casts, C callers, bindings).
  switch (opt.algo) {
    case Algo::kAuto: case Algo::kRecurrent: case Algo::kChunk16: case Algo::kChunk32: case Algo::kChunk64:
    case Algo::kChunk128:
      break;
    default:
      return Status::Invalid(Cat("options.algo: expected auto, recurrent, chunk16, chunk32, chunk64 or chunk128, got value ",
                                 static_cast<int>(opt.algo)));
  }
  switch (opt.precision) {
    case Precision::kFp32:
    case Precision::kBf16:
    case Precision::kBf16x3:
    case Precision::kBf16x4:
    case Precision::kAuto:
      break;
    default:
      return Status::Invalid(Cat("options.precision: expected fp32, bf16, bf16x3, bf16x4 or auto, got value ",
                                 static_cast<int>(opt.precision)));
  }
  switch (opt.engine) {
    case Engine::kAuto: case Engine::kVector: case Engine::kAmx: case Engine::kAmxEmulated:
      break;
    default:
      return Status::Invalid(Cat("options.engine: expected auto, vector, amx or amx-emu, got value ",
                                 static_cast<int>(opt.engine)));
  }
  if (opt.v_step < 0 || opt.v_step > kMaxHeadDim) {
    return Status::Invalid(Cat("options.v_step: expected 0 (auto) .. ", kMaxHeadDim, ", got ", opt.v_step));
  }
  if (opt.dk_bucket != 0 && opt.dk_bucket != -1 &&
      !((opt.dk_bucket == 64 || opt.dk_bucket == 80 || opt.dk_bucket == 96 || opt.dk_bucket == 128) && opt.dk_bucket >= Dk)) {
    return Status::Invalid(Cat("options.dk_bucket: expected 0 (auto), -1 (generic) or one of 64, 80, 96, 128 >= Dk = ", Dk,
                               ", got ", opt.dk_bucket));
  }
  if (opt.check_values) {
    CGDR_TRY(CheckValues({{"query", &in.query}, {"key", &in.key}, {"value", &in.value}, {"beta", &in.beta},
                          {"g", &in.g}, {"initial_state", &in.initial_state}},
                         in.g, opt.threads));
  }

  p->T = T; p->B = B; p->Nk = Nk; p->Nv = Nv; p->Dk = Dk; p->Dv = Dv;
  p->dtype = dt;
  p->has_g = in.g.present();
  p->g_dtype = in.g.present() ? in.g.dtype : DType::kF32;
  p->has_initial_state = in.initial_state.present();
  p->state_dtype = state_dt;
  p->want_final_state = out.final_state.present();
  p->scale = ResolveScale(opt.scale, Dk);
  p->options = opt;
  return Status::Ok();
}

}  // namespace cgdr
