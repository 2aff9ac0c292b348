// Everything of SPEC 3 in one place. Each failure names the tensor, what was
// expected and what was found; nothing here writes to any output.
#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>

#include "cgdr/cgdr.hpp"
#include "core/dtype.h"
#include "core/scan.h"

namespace cgdr {
namespace {

// Byte offsets must fit in int64 with room to spare (SPEC 3: never wrap).
constexpr int64_t kMaxElements = std::numeric_limits<int64_t>::max() / 16;

template <typename... Args>
std::string Cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

Status CheckFloatDType(const char* name, const TensorView& t) {
  if (t.dtype == DType::kF16 || t.dtype == DType::kBF16 || t.dtype == DType::kF32) return Status::Ok();
  return Status::Invalid(Cat(name, ": expected dtype f16, bf16 or f32, got ", DTypeName(t.dtype)));
}

Status CheckSameDType(const char* name, const TensorView& t, DType want, const char* why) {
  if (t.dtype == want) return Status::Ok();
  return Status::Invalid(Cat(name, ": expected dtype ", DTypeName(want), " (", why, "), got ", DTypeName(t.dtype)));
}

Status CheckRank(const char* name, const TensorView& t, int rank, const char* dims) {
  if (t.rank == rank) {
    for (int i = 0; i < rank; ++i) {
      if (t.shape[i] < 0) {
        return Status::Invalid(Cat(name, ": expected non-negative dimensions ", dims, ", got ", t.ShapeString()));
      }
    }
    if (t.numel() > kMaxElements) {
      return Status::Invalid(Cat(name, ": shape ", t.ShapeString(), " has more elements than 64-bit offsets allow (max ",
                                 kMaxElements, ")"));
    }
    return Status::Ok();
  }
  return Status::Invalid(Cat(name, ": expected rank ", rank, " ", dims, ", got rank ", t.rank, " ", t.ShapeString()));
}

Status CheckShape(const char* name, const TensorView& t, std::initializer_list<int64_t> want, const char* dims) {
  std::ostringstream ws;
  ws << "[";
  int i = 0;
  bool same = t.rank == static_cast<int>(want.size());
  for (int64_t w : want) {
    ws << (i ? ", " : "") << w;
    if (same && t.shape[i] != w) same = false;
    ++i;
  }
  ws << "]";
  if (same) return Status::Ok();
  return Status::Invalid(Cat(name, ": expected shape ", dims, " = ", ws.str(), ", got ", t.ShapeString()));
}

Status CheckPresent(const char* name, const TensorView& t) {
  if (t.present()) return Status::Ok();
  return Status::Invalid(Cat(name, ": required tensor is missing (null data pointer)"));
}

// Byte range [begin, end) of a tensor, for overlap checks.
struct Range {
  uintptr_t begin = 0, end = 0;
};
Range BytesOf(const TensorView& t) {
  const auto b = reinterpret_cast<uintptr_t>(t.data);
  return {b, b + static_cast<uintptr_t>(t.numel()) * DTypeSize(t.dtype)};
}
bool Overlap(Range a, Range b) { return a.begin < b.end && b.begin < a.end && a.begin != a.end && b.begin != b.end; }

Status CheckNoOverlap(const char* out_name, const TensorView& out, const Inputs& in, bool allow_state_alias) {
  if (!out.present()) return Status::Ok();
  const std::pair<const char*, const TensorView*> inputs[] = {
      {"query", &in.query}, {"key", &in.key},   {"value", &in.value},         {"beta", &in.beta},
      {"g", &in.g},         {"seq_lens", &in.seq_lens}, {"initial_state", &in.initial_state}};
  const Range r = BytesOf(out);
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

std::string IndexString(const TensorView& t, int64_t flat) {
  std::ostringstream os;
  os << "[";
  int64_t idx[TensorView::kMaxRank] = {};
  for (int i = t.rank - 1; i >= 0; --i) {
    idx[i] = t.shape[i] ? flat % t.shape[i] : 0;
    flat = t.shape[i] ? flat / t.shape[i] : 0;
  }
  for (int i = 0; i < t.rank; ++i) os << (i ? ", " : "") << idx[i];
  os << "]";
  return os.str();
}

// threads: Options::threads, for the scans of large tensors.
Status CheckValues(const Inputs& in, int threads) {
  const std::pair<const char*, const TensorView*> tensors[] = {{"query", &in.query}, {"key", &in.key},
                                                               {"value", &in.value}, {"beta", &in.beta},
                                                               {"g", &in.g},         {"initial_state", &in.initial_state}};
  for (const auto& [name, t] : tensors) {
    if (!t->present()) continue;
    const int64_t bad = FirstNonFinite(*t, threads);
    if (bad >= 0) {
      return Status::Invalid(Cat(name, ": non-finite value ", LoadAsF32(t->data, t->dtype, bad), " at index ",
                                 IndexString(*t, bad), " (check_values)"));
    }
  }
  if (in.g.present()) {
    const int64_t i = FirstPositive(in.g, threads);
    if (i >= 0) {
      return Status::Invalid(Cat("g: expected log-decay <= 0, got ", LoadAsF32(in.g.data, in.g.dtype, i), " at index ",
                                 IndexString(in.g, i), " (exp of its prefix sum can overflow FP32; check_values)"));
    }
  }
  return Status::Ok();
}

}  // namespace

Status Validate(const Inputs& in, const Outputs& out, const Options& opt, Problem* p) {
  Status s;
#define CGDR_TRY(expr) \
  do {                 \
    s = (expr);        \
    if (!s.ok()) return s; \
  } while (0)

  CGDR_TRY(CheckPresent("query", in.query));
  CGDR_TRY(CheckPresent("key", in.key));
  CGDR_TRY(CheckPresent("value", in.value));
  CGDR_TRY(CheckPresent("beta", in.beta));
  CGDR_TRY(CheckPresent("seq_lens", in.seq_lens));
  CGDR_TRY(CheckPresent("out", out.out));

  CGDR_TRY(CheckRank("query", in.query, 3, "[T, Nk, Dk]"));
  CGDR_TRY(CheckFloatDType("query", in.query));
  const int64_t T = in.query.shape[0], Nk = in.query.shape[1], Dk = in.query.shape[2];
  CGDR_TRY(CheckRank("value", in.value, 3, "[T, Nv, Dv]"));
  const int64_t Nv = in.value.shape[1], Dv = in.value.shape[2];

  if (Nk == 0) return Status::Invalid(Cat("query: expected Nk >= 1 heads, got shape ", in.query.ShapeString()));
  if (Nv == 0) return Status::Invalid(Cat("value: expected Nv >= 1 heads, got shape ", in.value.ShapeString()));
  if (Nv % Nk != 0) {
    return Status::Invalid(Cat("value: expected Nv to be a multiple of Nk = ", Nk, " (grouped heads), got Nv = ", Nv));
  }
  if (Dk < 1 || Dk > kMaxHeadDim) {
    return Status::Invalid(Cat("query: expected Dk in [1, ", kMaxHeadDim, "], got Dk = ", Dk));
  }
  if (Dv < 1 || Dv > kMaxHeadDim) {
    return Status::Invalid(Cat("value: expected Dv in [1, ", kMaxHeadDim, "], got Dv = ", Dv));
  }

  const DType dt = in.query.dtype;
  CGDR_TRY(CheckShape("key", in.key, {T, Nk, Dk}, "[T, Nk, Dk] as query"));
  CGDR_TRY(CheckSameDType("key", in.key, dt, "same as query"));
  CGDR_TRY(CheckShape("value", in.value, {T, Nv, Dv}, "[T, Nv, Dv] with T of query"));
  CGDR_TRY(CheckSameDType("value", in.value, dt, "same as query"));
  CGDR_TRY(CheckRank("beta", in.beta, 2, "[T, Nv]"));
  CGDR_TRY(CheckShape("beta", in.beta, {T, Nv}, "[T, Nv]"));
  CGDR_TRY(CheckSameDType("beta", in.beta, dt, "same as query"));
  if (in.g.present()) {
    CGDR_TRY(CheckRank("g", in.g, 2, "[T, Nv]"));
    CGDR_TRY(CheckShape("g", in.g, {T, Nv}, "[T, Nv]"));
    CGDR_TRY(CheckFloatDType("g", in.g));
  }

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

  // Enum values from outside the C++ type system (casts, C callers, bindings).
  if (opt.state_layout != StateLayout::kVK && opt.state_layout != StateLayout::kKV) {
    return Status::Invalid(Cat("options.state_layout: expected vk or kv, got value ", static_cast<int>(opt.state_layout)));
  }
  switch (opt.algo) {
    case Algo::kAuto: case Algo::kRecurrent: case Algo::kChunk16: case Algo::kChunk32: case Algo::kChunk64:
    case Algo::kChunk128:
      break;
    default:
      return Status::Invalid(Cat("options.algo: expected auto, recurrent, chunk16, chunk32, chunk64 or chunk128, got value ",
                                 static_cast<int>(opt.algo)));
  }
  if (!(opt.threads >= 0 && opt.threads <= 4096)) {
    return Status::Invalid(Cat("options.threads: expected 0 (all) .. 4096, got ", opt.threads));
  }
  switch (opt.precision) {
    case Precision::kFp32:
    case Precision::kBf16:
    case Precision::kBf16x3:
    case Precision::kBf16x4:
      break;
    default:
      return Status::Invalid(Cat("options.precision: expected fp32, bf16, bf16x3 or bf16x4, got value ",
                                 static_cast<int>(opt.precision)));
  }
  if (opt.v_step < 0 || opt.v_step > kMaxHeadDim) {
    return Status::Invalid(Cat("options.v_step: expected 0 (auto) .. ", kMaxHeadDim, ", got ", opt.v_step));
  }
  if (opt.dk_bucket != 0 && opt.dk_bucket != -1 &&
      !((opt.dk_bucket == 64 || opt.dk_bucket == 80 || opt.dk_bucket == 96 || opt.dk_bucket == 128) && opt.dk_bucket >= Dk)) {
    return Status::Invalid(Cat("options.dk_bucket: expected 0 (auto), -1 (generic) or one of 64, 80, 96, 128 >= Dk = ", Dk,
                               ", got ", opt.dk_bucket));
  }
  if (!(std::isfinite(opt.scale) || std::isnan(opt.scale))) {
    return Status::Invalid(Cat("options.scale: expected a finite number (0 = 1/sqrt(Dk)), got ", opt.scale));
  }
  if (opt.check_values) CGDR_TRY(CheckValues(in, opt.threads));
#undef CGDR_TRY

  p->T = T; p->B = B; p->Nk = Nk; p->Nv = Nv; p->Dk = Dk; p->Dv = Dv;
  p->dtype = dt;
  p->has_g = in.g.present();
  p->g_dtype = in.g.present() ? in.g.dtype : DType::kF32;
  p->has_initial_state = in.initial_state.present();
  p->state_dtype = state_dt;
  p->want_final_state = out.final_state.present();
  p->scale = (opt.scale > 0.0 || opt.scale < 0.0) && std::isfinite(opt.scale) ? opt.scale : 1.0 / std::sqrt(static_cast<double>(Dk));
  p->options = opt;
  return Status::Ok();
}

}  // namespace cgdr
