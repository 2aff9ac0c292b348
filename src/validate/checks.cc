#include "validate/checks.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/scan.h"
#include "core/strcat.h"

namespace cgdr {
namespace {

// Byte offsets must fit in int64 with room to spare (SPEC 3: never wrap).
constexpr int64_t kMaxElements = std::numeric_limits<int64_t>::max() / 16;

}  // namespace

Status CheckPresent(const char* name, const TensorView& t) {
  if (t.present()) return Status::Ok();
  return Status::Invalid(Cat(name, ": required tensor is missing (null data pointer)"));
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
  if (t.rank != rank) {
    return Status::Invalid(Cat(name, ": expected rank ", rank, " ", dims, ", got rank ", t.rank, " ", t.ShapeString()));
  }
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

Status CheckShape(const char* name, const TensorView& t, std::initializer_list<int64_t> want, const char* dims) {
  bool same = t.rank == static_cast<int>(want.size());
  for (int i = 0; same && i < t.rank; ++i) same = t.shape[i] == want.begin()[i];
  if (same) return Status::Ok();  // the message is built only for a failure (Validate runs on every call)
  std::ostringstream ws;
  ws << "[";
  for (const int64_t* w = want.begin(); w != want.end(); ++w) ws << (w == want.begin() ? "" : ", ") << *w;
  ws << "]";
  return Status::Invalid(Cat(name, ": expected shape ", dims, " = ", ws.str(), ", got ", t.ShapeString()));
}

Status CheckShape(const char* name, const TensorView& t, const std::vector<int64_t>& want, const char* dims) {
  bool same = t.rank == static_cast<int>(want.size());
  for (int i = 0; same && i < t.rank; ++i) same = t.shape[i] == want[static_cast<size_t>(i)];
  if (same) return Status::Ok();
  std::ostringstream ws;
  ws << "[";
  for (size_t i = 0; i < want.size(); ++i) ws << (i ? ", " : "") << want[i];
  ws << "]";
  return Status::Invalid(Cat(name, ": expected shape ", dims, " = ", ws.str(), ", got ", t.ShapeString()));
}

namespace {

// The dimension strings of CheckTokenInputs' messages, per token axis.
struct TokenAxisNames {
  const char *query, *key, *value, *value_tokens, *head;
  int lead;  // leading (token) dimensions
};
constexpr TokenAxisNames kAxisT{"[T, Nk, Dk]", "[T, Nk, Dk] as query", "[T, Nv, Dv]", "[T, Nv, Dv] with T of query",
                                "[T, Nv]", 1};
constexpr TokenAxisNames kAxisN{"[N, Nk, Dk]", "[N, Nk, Dk] as query", "[N, Nv, Dv]", "[N, Nv, Dv] with N of query",
                                "[N, Nv]", 1};
constexpr TokenAxisNames kAxisNK{"[N, K, Nk, Dk]", "[N, K, Nk, Dk] as query", "[N, K, Nv, Dv]",
                                 "[N, K, Nv, Dv] with N, K of query", "[N, K, Nv]", 2};

const TokenAxisNames& AxisNames(TokenAxis axis) {
  switch (axis) {
    case TokenAxis::kTokens: return kAxisT;
    case TokenAxis::kSequences: return kAxisN;
    default: return kAxisNK;
  }
}

}  // namespace

std::vector<int64_t> TokenDims::Shape(std::initializer_list<int64_t> tail) const {
  std::vector<int64_t> s{tokens};
  if (axis == TokenAxis::kDraftTokens) s.push_back(per_sequence);
  s.insert(s.end(), tail.begin(), tail.end());
  return s;
}

const char* TokenDims::HeadDims() const { return AxisNames(axis).head; }

std::string TokenDims::GateDims() const {
  const std::string head = HeadDims();
  const std::string channel = head.substr(0, head.size() - 1) + ", Dk]";
  if (per_channel) return channel;  // the rank chose the form: its shape alone
  return head + " (one log-decay per head) or " + channel + " (one per key channel)";
}

Status CheckTokenInputs(TokenAxis axis, const TensorView& query, const TensorView& key, const TensorView& value,
                        const TensorView& beta, const TensorView& g, TokenDims* dims) {
  const TokenAxisNames& x = AxisNames(axis);
  const int lead = x.lead;
  CGDR_TRY(CheckRank("query", query, lead + 2, x.query));
  CGDR_TRY(CheckFloatDType("query", query));
  const int64_t tokens = query.shape[0], Nk = query.shape[lead], Dk = query.shape[lead + 1];
  const int64_t K = lead == 2 ? query.shape[1] : 1;
  if (lead == 2 && (K < 1 || K > kMaxDraftTokens)) {
    return Status::Invalid(Cat("query: expected K in [1, ", kMaxDraftTokens, "] tokens per sequence, got shape ",
                               query.ShapeString()));
  }
  CGDR_TRY(CheckRank("value", value, lead + 2, x.value));
  const int64_t Nv = value.shape[lead], Dv = value.shape[lead + 1];
  if (Nk == 0) return Status::Invalid(Cat("query: expected Nk >= 1 heads, got shape ", query.ShapeString()));
  if (Nv == 0) return Status::Invalid(Cat("value: expected Nv >= 1 heads, got shape ", value.ShapeString()));
  if (Nv % Nk != 0) {
    return Status::Invalid(Cat("value: expected Nv to be a multiple of Nk = ", Nk, " (grouped heads), got Nv = ", Nv));
  }
  if (Dk < 1 || Dk > kMaxHeadDim) return Status::Invalid(Cat("query: expected Dk in [1, ", kMaxHeadDim, "], got Dk = ", Dk));
  if (Dv < 1 || Dv > kMaxHeadDim) return Status::Invalid(Cat("value: expected Dv in [1, ", kMaxHeadDim, "], got Dv = ", Dv));

  const DType dt = query.dtype;
  TokenDims d;
  d.tokens = tokens;
  d.per_sequence = K;
  d.Nk = Nk;
  d.Nv = Nv;
  d.Dk = Dk;
  d.Dv = Dv;
  d.dtype = dt;
  d.axis = axis;
  CGDR_TRY(CheckShape("key", key, d.Shape({Nk, Dk}), x.key));
  CGDR_TRY(CheckSameDType("key", key, dt, "same as query"));
  CGDR_TRY(CheckShape("value", value, d.Shape({Nv, Dv}), x.value_tokens));
  CGDR_TRY(CheckSameDType("value", value, dt, "same as query"));
  CGDR_TRY(CheckRank("beta", beta, lead + 1, x.head));
  CGDR_TRY(CheckShape("beta", beta, d.Shape({Nv}), x.head));
  CGDR_TRY(CheckSameDType("beta", beta, dt, "same as query"));
  if (g.present()) {
    // [X, Nv]: one log-decay per head; [X, Nv, Dk]: one per key channel (KDA, docs/SPEC.md 10).
    d.per_channel = g.rank == lead + 2;
    CGDR_TRY(CheckRank("g", g, d.per_channel ? lead + 2 : lead + 1, d.GateDims().c_str()));
    const std::string dims_g = d.per_channel ? d.GateDims() : std::string(x.head);
    CGDR_TRY(CheckShape("g", g, d.per_channel ? d.Shape({Nv, Dk}) : d.Shape({Nv}), dims_g.c_str()));
    CGDR_TRY(CheckFloatDType("g", g));
  }
  *dims = d;
  return Status::Ok();
}

Status CheckGate(const GateViews& gate, const TensorView& g, double lower_bound, TokenDims* dims) {
  const bool bounded = lower_bound != 0.0;
  if (bounded && !(lower_bound < 0.0 && std::isfinite(lower_bound))) {
    return Status::Invalid(Cat("options.gate_lower_bound: expected 0 (none) or a finite bound < 0, got ", lower_bound));
  }
  if (!gate.a.present()) {
    if (gate.A_log.present()) return Status::Invalid("A_log: given without the raw gate 'a' it applies to");
    if (gate.dt_bias.present()) return Status::Invalid("dt_bias: given without the raw gate 'a' it applies to");
    if (bounded) return Status::Invalid("options.gate_lower_bound: given without the raw gate 'a' it applies to");
    return Status::Ok();
  }
  if (g.present()) {
    return Status::Invalid(
        "a: expected either g or the raw gate a (g = -exp(A_log) * softplus(a + dt_bias) in the kernel), got both");
  }
  const int lead = dims->axis == TokenAxis::kDraftTokens ? 2 : 1;
  const int64_t Nv = dims->Nv, Dk = dims->Dk;
  dims->per_channel = gate.a.rank == lead + 2;  // KDA's gate (docs/SPEC.md 10)
  CGDR_TRY(CheckRank("a", gate.a, dims->per_channel ? lead + 2 : lead + 1, dims->GateDims().c_str()));
  const std::string dims_a = dims->per_channel ? dims->GateDims() : dims->HeadDims();
  CGDR_TRY(CheckShape("a", gate.a, dims->per_channel ? dims->Shape({Nv, Dk}) : dims->Shape({Nv}), dims_a.c_str()));
  CGDR_TRY(CheckFloatDType("a", gate.a));
  if (!gate.A_log.present() && !bounded) {
    return Status::Invalid("A_log: required tensor is missing (the raw gate a needs A_log [Nv]: g = -exp(A_log) * "
                           "softplus(a + dt_bias); only a gate with options.gate_lower_bound may omit it)");
  }
  if (gate.A_log.present()) {
    CGDR_TRY(CheckRank("A_log", gate.A_log, 1, "[Nv]"));
    CGDR_TRY(CheckShape("A_log", gate.A_log, {Nv}, "[Nv]"));
    CGDR_TRY(CheckFloatDType("A_log", gate.A_log));
  }
  if (gate.dt_bias.present()) {
    const char* dims_b = dims->per_channel ? "[Nv * Dk] (a per-channel gate)" : "[Nv]";
    CGDR_TRY(CheckRank("dt_bias", gate.dt_bias, 1, dims_b));
    CGDR_TRY(CheckShape("dt_bias", gate.dt_bias, {dims->per_channel ? Nv * Dk : Nv}, dims_b));
    CGDR_TRY(CheckFloatDType("dt_bias", gate.dt_bias));
  }
  return Status::Ok();
}

Status CheckSlotIndices(const char* name, const TensorView& idx, int64_t slots, const char* negative) {
  const auto* v = static_cast<const int32_t*>(idx.data);
  const int64_t n = idx.numel();
  std::vector<std::pair<int32_t, int64_t>> used;  // (index, position)
  used.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    if (v[i] < 0) continue;  // no slot
    if (v[i] >= slots) {
      return Status::Invalid(Cat(name, ": expected indices < P = ", slots, " (pool size) or negative (", negative, "), got ", v[i],
                                 " at index ", IndexString(idx, i)));
    }
    used.emplace_back(v[i], i);
  }
  std::sort(used.begin(), used.end());
  for (size_t i = 1; i < used.size(); ++i) {
    if (used[i].first == used[i - 1].first) {
      return Status::Invalid(Cat(name, ": expected distinct non-negative indices, got ", used[i].first, " at indices ",
                                 IndexString(idx, used[i - 1].second), " and ", IndexString(idx, used[i].second)));
    }
  }
  return Status::Ok();
}

Status CheckSlotStride(const Options& opt, int64_t slot_elems, int64_t* stride) {
  if (opt.state_slot_stride == 0) {
    *stride = slot_elems;
    return Status::Ok();
  }
  if (opt.state_slot_stride < slot_elems || opt.state_slot_stride > kMaxElements) {
    return Status::Invalid(Cat("options.state_slot_stride: expected 0 (dense) or ", slot_elems,
                               " (Nv * Dk * Dv) .. ", kMaxElements, " elements, got ", opt.state_slot_stride));
  }
  *stride = opt.state_slot_stride;
  return Status::Ok();
}

Status CheckSlotExtent(const char* name, const TensorView& t, int64_t stride) {
  const int64_t slots = t.shape[0], slot = slots > 0 ? t.numel() / slots : 0;
  if (slots > 0 && (slots - 1) > (kMaxElements - slot) / stride) {
    return Status::Invalid(Cat(name, ": ", slots, " slots ", stride,
                               " elements apart (options.state_slot_stride) reach past the element limit (max ",
                               kMaxElements, ")"));
  }
  return Status::Ok();
}

ByteRange BytesOf(const TensorView& t) {
  const auto b = reinterpret_cast<uintptr_t>(t.data);
  return {b, b + static_cast<uintptr_t>(t.numel()) * DTypeSize(t.dtype)};
}

ByteRange BytesOfSlots(const TensorView& t, int64_t slot_stride) {
  const ByteRange dense = BytesOf(t);
  const int64_t slots = t.rank > 0 ? t.shape[0] : 0;
  if (slots < 1) return dense;
  const auto esize = static_cast<uintptr_t>(DTypeSize(t.dtype));
  const auto slot_bytes = static_cast<uintptr_t>(t.numel() / slots) * esize;
  return {dense.begin, dense.begin + static_cast<uintptr_t>(slots - 1) * static_cast<uintptr_t>(slot_stride) * esize + slot_bytes};
}

bool Overlap(ByteRange a, ByteRange b) {
  return a.begin < b.end && b.begin < a.end && a.begin != a.end && b.begin != b.end;
}

// Enum values from outside the C++ type system (casts, C callers, bindings).
Status CheckCommonOptions(const Options& opt) {
  if (opt.state_layout != StateLayout::kVK && opt.state_layout != StateLayout::kKV) {
    return Status::Invalid(Cat("options.state_layout: expected vk or kv, got value ", static_cast<int>(opt.state_layout)));
  }
  if (!(opt.threads >= 0 && opt.threads <= 4096)) {
    return Status::Invalid(Cat("options.threads: expected 0 (all) .. 4096, got ", opt.threads));
  }
  if (!(std::isfinite(opt.scale) || std::isnan(opt.scale))) {
    return Status::Invalid(Cat("options.scale: expected a finite number (0 = 1/sqrt(Dk)), got ", opt.scale));
  }
  // > 0: a zero row must normalise to zeros, not 0/0 (SPEC 1).
  if (!(opt.qk_l2norm_eps > 0.0 && std::isfinite(opt.qk_l2norm_eps))) {
    return Status::Invalid(Cat("options.qk_l2norm_eps: expected a finite number > 0, got ", opt.qk_l2norm_eps));
  }
  return Status::Ok();
}

double ResolveScale(double scale, int64_t Dk) {
  const bool given = (scale > 0.0 || scale < 0.0) && std::isfinite(scale);
  return given ? scale : 1.0 / std::sqrt(static_cast<double>(Dk));
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

Status CheckValues(std::initializer_list<CheckedTensor> tensors, const TensorView& g, int threads) {
  for (const CheckedTensor& nt : tensors) {
    const TensorView& t = *nt.tensor;
    if (!t.present()) continue;
    const int64_t bad = FirstNonFinite(t, threads);
    if (bad >= 0) {
      return Status::Invalid(Cat(nt.name, ": non-finite value ", LoadAsF32(t.data, t.dtype, bad), " at index ",
                                 IndexString(t, bad), " (check_values)"));
    }
  }
  if (g.present()) {
    const int64_t i = FirstPositive(g, threads);
    if (i >= 0) {
      return Status::Invalid(Cat("g: expected log-decay <= 0, got ", LoadAsF32(g.data, g.dtype, i), " at index ",
                                 IndexString(g, i), " (a decay above 1 can overflow FP32; check_values)"));
    }
  }
  return Status::Ok();
}

}  // namespace cgdr
