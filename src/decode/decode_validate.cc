// Everything the decode step checks before touching memory (SPEC 3 applied to
// SPEC 6b). Each failure names the tensor, what was expected and what was
// found; nothing here writes to any output or to the state pool.
#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "cgdr/decode.hpp"
#include "core/dtype.h"
#include "core/scan.h"
#include "core/strcat.h"
#include "validate/checks.h"

namespace cgdr {
namespace {

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

// check_values on the pool: the rows this step reads and writes (the
// non-negative indices), in index order; other rows are not the step's.
Status CheckPoolRows(const TensorView& pool, const TensorView& idx, int threads) {
  const auto* v = static_cast<const int32_t*>(idx.data);
  const int64_t row = pool.shape[1] * pool.shape[2] * pool.shape[3];
  for (int64_t n = 0; n < idx.shape[0]; ++n) {
    if (v[n] < 0) continue;
    const int64_t first = v[n] * row;
    const TensorView r(static_cast<const uint8_t*>(pool.data) + first * static_cast<int64_t>(DTypeSize(pool.dtype)),
                       pool.dtype, {row});
    const int64_t bad = FirstNonFinite(r, threads);
    if (bad >= 0) {
      return Status::Invalid(Cat("state_pool: non-finite value ", LoadAsF32(r.data, r.dtype, bad), " at index ",
                                 IndexString(pool, first + bad), " (the row of state_indices[", n, "]; check_values)"));
    }
  }
  return Status::Ok();
}

}  // namespace

Status ValidateDecode(const DecodeInputs& in, const DecodeOutputs& out, const Options& opt, DecodeProblem* p) {
  CGDR_TRY(CheckPresent("query", in.query));
  CGDR_TRY(CheckPresent("key", in.key));
  CGDR_TRY(CheckPresent("value", in.value));
  CGDR_TRY(CheckPresent("beta", in.beta));
  CGDR_TRY(CheckPresent("state_pool", in.state_pool));
  CGDR_TRY(CheckPresent("state_indices", in.state_indices));
  CGDR_TRY(CheckPresent("out", out.out));

  TokenDims dims;
  CGDR_TRY(CheckTokenInputs(TokenAxis::kSequences, in.query, in.key, in.value, in.beta, in.g, &dims));
  const int64_t N = dims.tokens, Nk = dims.Nk, Nv = dims.Nv, Dk = dims.Dk, Dv = dims.Dv;
  const DType dt = dims.dtype;

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
  CGDR_TRY(CheckCommonOptions(opt));
  CGDR_TRY(CheckIndices(in.state_indices, P));
  if (opt.check_values) {
    CGDR_TRY(CheckValues({{"query", &in.query}, {"key", &in.key}, {"value", &in.value}, {"beta", &in.beta}, {"g", &in.g}},
                         in.g, opt.threads));
    CGDR_TRY(CheckPoolRows(in.state_pool, in.state_indices, opt.threads));
  }

  p->N = N; p->P = P; p->Nk = Nk; p->Nv = Nv; p->Dk = Dk; p->Dv = Dv;
  p->dtype = dt;
  p->has_g = in.g.present();
  p->g_dtype = in.g.present() ? in.g.dtype : DType::kF32;
  p->state_dtype = in.state_pool.dtype;
  p->scale = ResolveScale(opt.scale, Dk);
  p->options = opt;
  return Status::Ok();
}

}  // namespace cgdr
