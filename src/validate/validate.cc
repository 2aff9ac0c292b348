// Everything of SPEC 3 for prefill in one place (the checks it shares with
// decode are in checks.h). Each failure names the tensor, what was expected
// and what was found; nothing here writes to any output.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "cgdr/cgdr.hpp"
#include "core/dtype.h"
#include "core/scan.h"
#include "core/strcat.h"
#include "validate/checks.h"

namespace cgdr {
namespace {

// A tensor of the call with the bytes it spans (state tensors: all their
// slots, Options::state_slot_stride apart).
struct Span {
  const char* name;
  const TensorView* t;
  ByteRange bytes;
  bool state = false;  // initial_state or final_state
};

// final_state may be initial_state exactly (in-place update): items read
// their tile before writing it, and a pool's sequences name distinct slots.
bool ExactStateAlias(const TensorView& a, const TensorView& b) {
  return a.data == b.data && a.dtype == b.dtype && a.numel() == b.numel();
}

// Each output against every input and every other output.
Status CheckNoOverlap(const std::vector<Span>& inputs, const std::vector<Span>& outputs) {
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Span& o = outputs[i];
    for (const Span& in : inputs) {
      const bool alias = o.state && in.state && ExactStateAlias(*o.t, *in.t);
      if (alias || !Overlap(o.bytes, in.bytes)) continue;
      return Status::Invalid(Cat(o.name, ": output memory overlaps input '", in.name,
                                 "' (only final_state == initial_state exactly is allowed)"));
    }
    for (size_t j = 0; j < i; ++j) {
      if (Overlap(o.bytes, outputs[j].bytes)) {
        return Status::Invalid(Cat(o.name, ": output memory overlaps output '", outputs[j].name, "'"));
      }
    }
  }
  return Status::Ok();
}

// The state tensors of a call: [B, Nv, ...] per sequence, or pools [P, Nv,
// ...] with state_indices (docs/SPEC.md 6d), slots `stride` elements apart.
Status CheckStateTensor(const char* name, const TensorView& t, bool pool, int64_t B, int64_t Nv, int64_t s2,
                        int64_t s3, const char* dims, int64_t stride) {
  CGDR_TRY(CheckRank(name, t, 4, dims));
  CGDR_TRY(CheckShape(name, t, {pool ? t.shape[0] : B, Nv, s2, s3}, dims));
  return CheckSlotExtent(name, t, stride);
}

// Options::checkpoint_every and checkpoint_states (docs/SPEC.md 6d): both or
// neither; [sum over b of floor(len_b / every), Nv, ...], f32 or the state's dtype.
Status CheckCheckpoints(const Options& opt, const TensorView& ckpt, const std::vector<int64_t>& lens, int64_t Nv,
                        int64_t s2, int64_t s3, const char* dims, DType state_dt, int64_t* count) {
  *count = 0;
  if (opt.checkpoint_every < 0) {
    return Status::Invalid(Cat("options.checkpoint_every: expected 0 (none) or a positive token count, got ",
                               opt.checkpoint_every));
  }
  if (opt.checkpoint_every == 0) {
    if (ckpt.present()) {
      return Status::Invalid("checkpoint_states: given but options.checkpoint_every is 0 (no checkpoints)");
    }
    return Status::Ok();
  }
  if (!ckpt.present()) {
    return Status::Invalid(Cat("checkpoint_states: required tensor is missing (options.checkpoint_every = ",
                               opt.checkpoint_every, ")"));
  }
  for (int64_t len : lens) *count += len / opt.checkpoint_every;
  CGDR_TRY(CheckRank("checkpoint_states", ckpt, 4, dims));
  CGDR_TRY(CheckShape("checkpoint_states", ckpt, {*count, Nv, s2, s3}, dims));
  if (ckpt.dtype != DType::kF32 && ckpt.dtype != state_dt) {
    return Status::Invalid(Cat("checkpoint_states: expected dtype f32 or the state's ", DTypeName(state_dt),
                               ", got ", DTypeName(ckpt.dtype)));
  }
  return Status::Ok();
}

// check_values on a state tensor: the slots the call reads, each scanned
// alone when slots are not dense (a pool, or a slot stride).
Status CheckStateValues(const char* name, const TensorView& t, const Problem& p, int threads) {
  if (!t.present()) return Status::Ok();
  const int64_t slot_elems = p.Nv * p.Dk * p.Dv;
  if (p.state_slots.empty() && p.slot_stride == slot_elems) {
    return CheckValues({{name, &t}}, TensorView(), threads);
  }
  for (int64_t b = 0; b < p.B; ++b) {
    const int64_t slot = p.Slot(b);
    if (slot < 0) continue;
    TensorView one(static_cast<const uint8_t*>(t.data) + slot * p.SlotStride() * static_cast<int64_t>(DTypeSize(t.dtype)),
                   t.dtype, {1, t.shape[1], t.shape[2], t.shape[3]});
    const int64_t bad = FirstNonFinite(one, threads);
    if (bad >= 0) {
      const std::string at = IndexString(one, bad);  // "[0, h, i, j]": the slot goes first
      return Status::Invalid(Cat(name, ": non-finite value ", LoadAsF32(one.data, one.dtype, bad), " at index [", slot,
                                 at.substr(2), " (check_values)"));
    }
  }
  return Status::Ok();
}

Status CheckOptionEnums(const Options& opt, int64_t Dk) {
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
  CGDR_TRY(CheckGate(GateViews{in.a, in.A_log, in.dt_bias}, in.g, opt.gate_lower_bound, &dims));
  const int64_t T = dims.tokens, Nk = dims.Nk, Nv = dims.Nv, Dk = dims.Dk, Dv = dims.Dv;
  const DType dt = dims.dtype;

  CGDR_TRY(CheckRank("seq_lens", in.seq_lens, 1, "[B]"));
  CGDR_TRY(CheckSameDType("seq_lens", in.seq_lens, DType::kI32, "token counts"));
  const int64_t B = in.seq_lens.shape[0];
  if (B < 1) return Status::Invalid(Cat("seq_lens: expected at least one sequence, got shape ", in.seq_lens.ShapeString()));
  const bool pool = in.state_indices.present();
  if (pool) {
    CGDR_TRY(CheckRank("state_indices", in.state_indices, 1, "[B]"));
    CGDR_TRY(CheckShape("state_indices", in.state_indices, {B}, "[B] with B of seq_lens"));
    CGDR_TRY(CheckSameDType("state_indices", in.state_indices, DType::kI32, "pool slots"));
  }

  const bool kv = opt.state_layout == StateLayout::kKV;
  const char* state_dims = kv ? (pool ? "[P, Nv, Dk, Dv] (layout kv, a pool)" : "[B, Nv, Dk, Dv] (layout kv)")
                              : (pool ? "[P, Nv, Dv, Dk] (layout vk, a pool)" : "[B, Nv, Dv, Dk] (layout vk)");
  const int64_t s2 = kv ? Dk : Dv, s3 = kv ? Dv : Dk;
  int64_t stride = 0;
  CGDR_TRY(CheckCommonOptions(opt));
  CGDR_TRY(CheckSlotStride(opt, Nv * Dk * Dv, &stride));
  DType state_dt = dt;
  if (in.initial_state.present()) {
    CGDR_TRY(CheckStateTensor("initial_state", in.initial_state, pool, B, Nv, s2, s3, state_dims, stride));
    CGDR_TRY(CheckFloatDType("initial_state", in.initial_state));
    state_dt = in.initial_state.dtype;
  }
  CGDR_TRY(CheckRank("out", out.out, 3, "[T, Nv, Dv]"));
  CGDR_TRY(CheckShape("out", out.out, {T, Nv, Dv}, "[T, Nv, Dv]"));
  CGDR_TRY(CheckSameDType("out", out.out, dt, "same as query"));
  if (out.final_state.present()) {
    CGDR_TRY(CheckStateTensor("final_state", out.final_state, pool, B, Nv, s2, s3, state_dims, stride));
    CGDR_TRY(CheckSameDType("final_state", out.final_state, state_dt,
                            in.initial_state.present() ? "same as initial_state" : "same as query"));
  }
  const auto state_bytes = [&](const TensorView& t) { return BytesOfSlots(t, stride); };
  std::vector<Span> inputs;
  for (const auto& [name, t] : {std::pair<const char*, const TensorView*>{"query", &in.query}, {"key", &in.key},
                                {"value", &in.value}, {"beta", &in.beta}, {"g", &in.g}, {"a", &in.a},
                                {"A_log", &in.A_log}, {"dt_bias", &in.dt_bias}, {"seq_lens", &in.seq_lens},
                                {"state_indices", &in.state_indices}}) {
    if (t->present()) inputs.push_back(Span{name, t, BytesOf(*t)});
  }
  if (in.initial_state.present()) {
    inputs.push_back(Span{"initial_state", &in.initial_state, state_bytes(in.initial_state), true});
  }
  std::vector<Span> outputs{{"out", &out.out, BytesOf(out.out)}};
  if (out.final_state.present()) {
    outputs.push_back(Span{"final_state", &out.final_state, state_bytes(out.final_state), true});
  }
  if (out.checkpoint_states.present()) {
    outputs.push_back(Span{"checkpoint_states", &out.checkpoint_states, BytesOf(out.checkpoint_states)});
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
  int64_t checkpoints = 0;
  CGDR_TRY(CheckCheckpoints(opt, out.checkpoint_states, p->seq_lens, Nv, s2, s3,
                            kv ? "[checkpoints, Nv, Dk, Dv] (layout kv)" : "[checkpoints, Nv, Dv, Dk] (layout vk)",
                            state_dt, &checkpoints));
  CGDR_TRY(CheckNoOverlap(inputs, outputs));
  if (pool) {
    // Each slot below every pool's size; without pools only distinctness matters.
    int64_t slots = std::numeric_limits<int64_t>::max();
    if (in.initial_state.present()) slots = in.initial_state.shape[0];
    if (out.final_state.present()) slots = std::min(slots, out.final_state.shape[0]);
    CGDR_TRY(CheckSlotIndices("state_indices", in.state_indices, slots, "zeros in, no final state"));
  }
  CGDR_TRY(CheckOptionEnums(opt, Dk));

  p->T = T; p->B = B; p->Nk = Nk; p->Nv = Nv; p->Dk = Dk; p->Dv = Dv;
  p->dtype = dt;
  p->has_g = in.g.present();
  p->g_dtype = in.g.present() ? in.g.dtype : DType::kF32;
  p->has_gate = in.a.present();
  p->per_channel_gate = dims.per_channel;
  p->has_initial_state = in.initial_state.present();
  p->state_dtype = state_dt;
  p->want_final_state = out.final_state.present();
  p->scale = ResolveScale(opt.scale, Dk);
  p->options = opt;
  p->state_slots.clear();
  if (pool) {
    const auto* idx = static_cast<const int32_t*>(in.state_indices.data);
    p->state_slots.assign(idx, idx + B);
  }
  p->slot_stride = stride;
  p->checkpoints = checkpoints;
  if (opt.check_values) {
    CGDR_TRY(CheckValues({{"query", &in.query}, {"key", &in.key}, {"value", &in.value}, {"beta", &in.beta},
                          {"g", &in.g}, {"a", &in.a}, {"A_log", &in.A_log}, {"dt_bias", &in.dt_bias}},
                         TensorView(), opt.threads));
    CGDR_TRY(CheckStateValues("initial_state", in.initial_state, *p, opt.threads));
    CGDR_TRY(CheckValues({}, in.g, opt.threads));  // then g > 0 (SPEC 3: after every non-finite check)
  }
  return Status::Ok();
}

}  // namespace cgdr
