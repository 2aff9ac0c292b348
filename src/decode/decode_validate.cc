// Everything the decode step checks before touching memory (SPEC 3 applied to
// SPEC 6b). Each failure names the tensor, what was expected and what was
// found; nothing here writes to any output or to the state pool.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "cgdr/decode.hpp"
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

bool IsFloat(DType t) { return t == DType::kF16 || t == DType::kBF16 || t == DType::kF32; }

Status CheckFloatDType(const char* name, const TensorView& t) {
  if (IsFloat(t.dtype)) return Status::Ok();
  return Status::Invalid(Cat(name, ": expected dtype f16, bf16 or f32, got ", DTypeName(t.dtype)));
}

Status CheckSameDType(const char* name, const TensorView& t, DType want, const char* why) {
  if (t.dtype == want) return Status::Ok();
  return Status::Invalid(Cat(name, ": expected dtype ", DTypeName(want), " (", why, "), got ", DTypeName(t.dtype)));
}

Status CheckPresent(const char* name, const TensorView& t) {
  if (t.present()) return Status::Ok();
  return Status::Invalid(Cat(name, ": required tensor is missing (null data pointer)"));
}

// Rank first (so later shape[] reads are meaningful), then sign and size.
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

// Byte range [begin, end) of a tensor, for overlap checks.
struct Range {
  uintptr_t begin = 0, end = 0;
};
Range BytesOf(const TensorView& t) {
  const auto b = reinterpret_cast<uintptr_t>(t.data);
  return {b, b + static_cast<uintptr_t>(t.numel()) * DTypeSize(t.dtype)};
}
bool Overlap(Range a, Range b) { return a.begin < b.end && b.begin < a.end && a.begin != a.end && b.begin != b.end; }

// The two written tensors (out, state_pool) may not share a byte with any
// other tensor: rows are read and written by different threads.
Status CheckNoOverlap(const DecodeInputs& in, const DecodeOutputs& out) {
  const std::pair<const char*, const TensorView*> all[] = {
      {"query", &in.query}, {"key", &in.key}, {"value", &in.value},           {"beta", &in.beta},
      {"g", &in.g},         {"state_indices", &in.state_indices}, {"state_pool", &in.state_pool}, {"out", &out.out}};
  const std::pair<const char*, const TensorView*> written[] = {{"out", &out.out}, {"state_pool", &in.state_pool}};
  for (const auto& [wname, w] : written) {
    for (const auto& [name, t] : all) {
      if (t == w || !t->present()) continue;
      if (Overlap(BytesOf(*w), BytesOf(*t))) {
        return Status::Invalid(Cat(wname, ": memory overlaps '", name, "' (the decode step writes ", wname,
                                   " and reads the others; they must be disjoint)"));
      }
    }
  }
  return Status::Ok();
}

// Every index < P and no pool row used twice (two rows updating one state in
// parallel would race and depend on the order).
Status CheckIndices(const TensorView& idx, int64_t P) {
  const auto* v = static_cast<const int32_t*>(idx.data);
  const int64_t n = idx.shape[0];
  std::vector<std::pair<int32_t, int64_t>> used;  // (index, position)
  used.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    if (v[i] < 0) continue;  // skipped row
    if (v[i] >= P) {
      return Status::Invalid(Cat("state_indices: expected indices < P = ", P, " (pool size) or negative (skip), got ",
                                 v[i], " at index [", i, "]"));
    }
    used.emplace_back(v[i], i);
  }
  std::sort(used.begin(), used.end());
  for (size_t i = 1; i < used.size(); ++i) {
    if (used[i].first == used[i - 1].first) {
      return Status::Invalid(Cat("state_indices: expected distinct non-negative indices, got ", used[i].first,
                                 " at indices [", used[i - 1].second, "] and [", used[i].second, "]"));
    }
  }
  return Status::Ok();
}

// NaN/Inf in the per-token inputs and g > 0, only when asked (check_values);
// the bit-level scans of prefill's check (core/scan.h).
Status CheckValues(const DecodeInputs& in) {
  const std::pair<const char*, const TensorView*> tensors[] = {
      {"query", &in.query}, {"key", &in.key}, {"value", &in.value}, {"beta", &in.beta}, {"g", &in.g}};
  for (const auto& [name, t] : tensors) {
    if (!t->present()) continue;
    const int64_t i = FirstNonFinite(*t);
    if (i >= 0) {
      return Status::Invalid(Cat(name, ": non-finite value ", LoadAsF32(t->data, t->dtype, i), " at flat index ", i,
                                 " (check_values)"));
    }
  }
  if (in.g.present()) {
    const int64_t i = FirstPositive(in.g);
    if (i >= 0) {
      return Status::Invalid(Cat("g: expected log-decay <= 0, got ", LoadAsF32(in.g.data, in.g.dtype, i), " at [",
                                 i / in.g.shape[1], ", ", i % in.g.shape[1], "] (check_values)"));
    }
  }
  return Status::Ok();
}

Status CheckOptions(const Options& opt) {
  if (!(opt.threads >= 0 && opt.threads <= 4096)) {
    return Status::Invalid(Cat("options.threads: expected 0 (all) .. 4096, got ", opt.threads));
  }
  if (!(std::isfinite(opt.scale) || std::isnan(opt.scale))) {
    return Status::Invalid(Cat("options.scale: expected a finite number (0 = 1/sqrt(Dk)), got ", opt.scale));
  }
  if (opt.state_layout != StateLayout::kVK && opt.state_layout != StateLayout::kKV) {
    return Status::Invalid(Cat("options.state_layout: expected vk or kv, got value ", static_cast<int>(opt.state_layout)));
  }
  return Status::Ok();
}

}  // namespace

Status ValidateDecode(const DecodeInputs& in, const DecodeOutputs& out, const Options& opt, DecodeProblem* p) {
  Status s;
#define CGDR_TRY(expr)     \
  do {                     \
    s = (expr);            \
    if (!s.ok()) return s; \
  } while (0)

  CGDR_TRY(CheckPresent("query", in.query));
  CGDR_TRY(CheckPresent("key", in.key));
  CGDR_TRY(CheckPresent("value", in.value));
  CGDR_TRY(CheckPresent("beta", in.beta));
  CGDR_TRY(CheckPresent("state_pool", in.state_pool));
  CGDR_TRY(CheckPresent("state_indices", in.state_indices));
  CGDR_TRY(CheckPresent("out", out.out));

  CGDR_TRY(CheckRank("query", in.query, 3, "[N, Nk, Dk]"));
  CGDR_TRY(CheckFloatDType("query", in.query));
  const int64_t N = in.query.shape[0], Nk = in.query.shape[1], Dk = in.query.shape[2];
  CGDR_TRY(CheckRank("value", in.value, 3, "[N, Nv, Dv]"));
  const int64_t Nv = in.value.shape[1], Dv = in.value.shape[2];
  if (Nk == 0) return Status::Invalid(Cat("query: expected Nk >= 1 heads, got shape ", in.query.ShapeString()));
  if (Nv == 0) return Status::Invalid(Cat("value: expected Nv >= 1 heads, got shape ", in.value.ShapeString()));
  if (Nv % Nk != 0) {
    return Status::Invalid(Cat("value: expected Nv to be a multiple of Nk = ", Nk, " (grouped heads), got Nv = ", Nv));
  }
  if (Dk < 1 || Dk > kMaxHeadDim) return Status::Invalid(Cat("query: expected Dk in [1, ", kMaxHeadDim, "], got Dk = ", Dk));
  if (Dv < 1 || Dv > kMaxHeadDim) return Status::Invalid(Cat("value: expected Dv in [1, ", kMaxHeadDim, "], got Dv = ", Dv));

  const DType dt = in.query.dtype;
  CGDR_TRY(CheckShape("key", in.key, {N, Nk, Dk}, "[N, Nk, Dk] as query"));
  CGDR_TRY(CheckSameDType("key", in.key, dt, "same as query"));
  CGDR_TRY(CheckShape("value", in.value, {N, Nv, Dv}, "[N, Nv, Dv] with N of query"));
  CGDR_TRY(CheckSameDType("value", in.value, dt, "same as query"));
  CGDR_TRY(CheckRank("beta", in.beta, 2, "[N, Nv]"));
  CGDR_TRY(CheckShape("beta", in.beta, {N, Nv}, "[N, Nv]"));
  CGDR_TRY(CheckSameDType("beta", in.beta, dt, "same as query"));
  if (in.g.present()) {
    CGDR_TRY(CheckRank("g", in.g, 2, "[N, Nv]"));
    CGDR_TRY(CheckShape("g", in.g, {N, Nv}, "[N, Nv]"));
    CGDR_TRY(CheckFloatDType("g", in.g));
  }

  const bool kv = opt.state_layout == StateLayout::kKV;
  const char* pool_dims = kv ? "[P, Nv, Dk, Dv] (layout kv)" : "[P, Nv, Dv, Dk] (layout vk)";
  CGDR_TRY(CheckRank("state_pool", in.state_pool, 4, pool_dims));
  const int64_t P = in.state_pool.shape[0];
  CGDR_TRY(CheckShape("state_pool", in.state_pool, {P, Nv, kv ? Dk : Dv, kv ? Dv : Dk}, pool_dims));
  CGDR_TRY(CheckFloatDType("state_pool", in.state_pool));
  CGDR_TRY(CheckRank("state_indices", in.state_indices, 1, "[N]"));
  CGDR_TRY(CheckShape("state_indices", in.state_indices, {N}, "[N] with N of query"));
  CGDR_TRY(CheckSameDType("state_indices", in.state_indices, DType::kI32, "pool rows"));
  CGDR_TRY(CheckRank("out", out.out, 3, "[N, Nv, Dv]"));
  CGDR_TRY(CheckShape("out", out.out, {N, Nv, Dv}, "[N, Nv, Dv]"));
  CGDR_TRY(CheckSameDType("out", out.out, dt, "same as query"));
  CGDR_TRY(CheckNoOverlap(in, out));
  CGDR_TRY(CheckOptions(opt));
  CGDR_TRY(CheckIndices(in.state_indices, P));
  if (opt.check_values) CGDR_TRY(CheckValues(in));
#undef CGDR_TRY

  p->N = N; p->P = P; p->Nk = Nk; p->Nv = Nv; p->Dk = Dk; p->Dv = Dv;
  p->dtype = dt;
  p->has_g = in.g.present();
  p->g_dtype = in.g.present() ? in.g.dtype : DType::kF32;
  p->state_dtype = in.state_pool.dtype;
  const bool explicit_scale = (opt.scale > 0.0 || opt.scale < 0.0) && std::isfinite(opt.scale);
  p->scale = explicit_scale ? opt.scale : 1.0 / std::sqrt(static_cast<double>(Dk));
  p->options = opt;
  return Status::Ok();
}

}  // namespace cgdr
