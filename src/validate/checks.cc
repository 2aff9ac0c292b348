#include "validate/checks.h"

#include <cmath>
#include <limits>
#include <sstream>
#include <string>

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

namespace {

// The dimension strings of CheckTokenInputs' messages, per token axis.
struct TokenAxisNames {
  const char *query, *key, *value, *value_tokens, *head;
};
constexpr TokenAxisNames kAxisT{"[T, Nk, Dk]", "[T, Nk, Dk] as query", "[T, Nv, Dv]", "[T, Nv, Dv] with T of query",
                                "[T, Nv]"};
constexpr TokenAxisNames kAxisN{"[N, Nk, Dk]", "[N, Nk, Dk] as query", "[N, Nv, Dv]", "[N, Nv, Dv] with N of query",
                                "[N, Nv]"};

}  // namespace

Status CheckTokenInputs(TokenAxis axis, const TensorView& query, const TensorView& key, const TensorView& value,
                        const TensorView& beta, const TensorView& g, TokenDims* dims) {
  const TokenAxisNames& x = axis == TokenAxis::kTokens ? kAxisT : kAxisN;
  CGDR_TRY(CheckRank("query", query, 3, x.query));
  CGDR_TRY(CheckFloatDType("query", query));
  const int64_t tokens = query.shape[0], Nk = query.shape[1], Dk = query.shape[2];
  CGDR_TRY(CheckRank("value", value, 3, x.value));
  const int64_t Nv = value.shape[1], Dv = value.shape[2];
  if (Nk == 0) return Status::Invalid(Cat("query: expected Nk >= 1 heads, got shape ", query.ShapeString()));
  if (Nv == 0) return Status::Invalid(Cat("value: expected Nv >= 1 heads, got shape ", value.ShapeString()));
  if (Nv % Nk != 0) {
    return Status::Invalid(Cat("value: expected Nv to be a multiple of Nk = ", Nk, " (grouped heads), got Nv = ", Nv));
  }
  if (Dk < 1 || Dk > kMaxHeadDim) return Status::Invalid(Cat("query: expected Dk in [1, ", kMaxHeadDim, "], got Dk = ", Dk));
  if (Dv < 1 || Dv > kMaxHeadDim) return Status::Invalid(Cat("value: expected Dv in [1, ", kMaxHeadDim, "], got Dv = ", Dv));

  const DType dt = query.dtype;
  CGDR_TRY(CheckShape("key", key, {tokens, Nk, Dk}, x.key));
  CGDR_TRY(CheckSameDType("key", key, dt, "same as query"));
  CGDR_TRY(CheckShape("value", value, {tokens, Nv, Dv}, x.value_tokens));
  CGDR_TRY(CheckSameDType("value", value, dt, "same as query"));
  CGDR_TRY(CheckRank("beta", beta, 2, x.head));
  CGDR_TRY(CheckShape("beta", beta, {tokens, Nv}, x.head));
  CGDR_TRY(CheckSameDType("beta", beta, dt, "same as query"));
  if (g.present()) {
    CGDR_TRY(CheckRank("g", g, 2, x.head));
    CGDR_TRY(CheckShape("g", g, {tokens, Nv}, x.head));
    CGDR_TRY(CheckFloatDType("g", g));
  }
  *dims = TokenDims{tokens, Nk, Nv, Dk, Dv, dt};
  return Status::Ok();
}

ByteRange BytesOf(const TensorView& t) {
  const auto b = reinterpret_cast<uintptr_t>(t.data);
  return {b, b + static_cast<uintptr_t>(t.numel()) * DTypeSize(t.dtype)};
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
