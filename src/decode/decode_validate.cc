// Everything the decode step checks before touching memory (SPEC 3 applied to
// SPEC 6b and the token axis of docs/SPEC.md 6d). Each failure names the
// tensor, what was expected and what was found; nothing here writes to any
// output or to the state pool.
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

// The written tensors (out, state_pool, states) may not share a byte with any
// other tensor: rows are read and written by different threads. The pool
// spans all its slots (Options::state_slot_stride apart).
Status CheckNoOverlap(const DecodeInputs& in, const DecodeOutputs& out, int64_t slot_stride) {
  const auto bytes = [&](const TensorView* t) { return t == &in.state_pool ? BytesOfSlots(*t, slot_stride) : BytesOf(*t); };
  const std::pair<const char*, const TensorView*> all[] = {
      {"query", &in.query}, {"key", &in.key}, {"value", &in.value}, {"beta", &in.beta}, {"g", &in.g}, {"a", &in.a},
      {"A_log", &in.A_log}, {"dt_bias", &in.dt_bias}, {"state_indices", &in.state_indices},
      {"dst_indices", &in.dst_indices}, {"state_pool", &in.state_pool}, {"out", &out.out}, {"states", &out.states}};
  const std::pair<const char*, const TensorView*> written[] = {
      {"out", &out.out}, {"state_pool", &in.state_pool}, {"states", &out.states}};
  for (const auto& [wname, w] : written) {
    if (!w->present()) continue;
    for (const auto& [name, t] : all) {
      if (t == w || !t->present()) continue;
      if (Overlap(bytes(w), bytes(t))) {
        return Status::Invalid(Cat(wname, ": memory overlaps '", name, "' (the decode step writes ", wname,
                                   " and reads the others; they must be disjoint)"));
      }
    }
  }
  return Status::Ok();
}

// The token axis's destinations (docs/SPEC.md 6d), for the rows that run
// (state_indices >= 0): each slot below P or negative (not written), no slot
// written twice, and none written by one row and read by another (a row may
// overwrite its own source: it reads each part of it before writing it).
Status CheckDestinations(const TensorView& src_idx, const TensorView& dst_idx, int64_t P) {
  const auto* src = static_cast<const int32_t*>(src_idx.data);
  const auto* dst = static_cast<const int32_t*>(dst_idx.data);
  const int64_t N = dst_idx.shape[0], K = dst_idx.shape[1];
  std::vector<std::pair<int32_t, int64_t>> written, read;  // (slot, flat index in dst / row)
  for (int64_t n = 0; n < N; ++n) {
    if (src[n] < 0) continue;  // a skipped row writes nothing
    read.emplace_back(src[n], n);
    for (int64_t j = 0; j < K; ++j) {
      const int32_t d = dst[n * K + j];
      if (d < 0) continue;
      if (d >= P) {
        return Status::Invalid(Cat("dst_indices: expected indices < P = ", P, " (pool size) or negative (not written), got ",
                                   d, " at index ", IndexString(dst_idx, n * K + j)));
      }
      written.emplace_back(d, n * K + j);
    }
  }
  std::sort(written.begin(), written.end());
  std::sort(read.begin(), read.end());
  for (size_t i = 1; i < written.size(); ++i) {
    if (written[i].first == written[i - 1].first) {
      return Status::Invalid(Cat("dst_indices: expected distinct non-negative indices (a slot written once), got ",
                                 written[i].first, " at indices ", IndexString(dst_idx, written[i - 1].second), " and ",
                                 IndexString(dst_idx, written[i].second)));
    }
  }
  for (const auto& [slot, at] : written) {
    const auto r = std::lower_bound(read.begin(), read.end(), std::make_pair(slot, int64_t{-1}));
    if (r != read.end() && r->first == slot && r->second != at / K) {
      return Status::Invalid(Cat("dst_indices: slot ", slot, " at index ", IndexString(dst_idx, at),
                                 " is the source of row ", r->second, " (state_indices[", r->second,
                                 "]); a row may overwrite only its own source"));
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

  // A token axis when query has rank 4 ([N, K, Nk, Dk]).
  const TokenAxis axis = in.query.rank == 4 ? TokenAxis::kDraftTokens : TokenAxis::kSequences;
  TokenDims dims;
  CGDR_TRY(CheckTokenInputs(axis, in.query, in.key, in.value, in.beta, in.g, &dims));
  CGDR_TRY(CheckGate(GateViews{in.a, in.A_log, in.dt_bias}, in.g, opt.gate_lower_bound, &dims));
  const int64_t N = dims.tokens, K = dims.per_sequence, Nk = dims.Nk, Nv = dims.Nv, Dk = dims.Dk, Dv = dims.Dv;
  const DType dt = dims.dtype;

  const bool kv = opt.state_layout == StateLayout::kKV;
  const char* pool_dims = kv ? "[P, Nv, Dk, Dv] (layout kv)" : "[P, Nv, Dv, Dk] (layout vk)";
  int64_t stride = 0;
  CGDR_TRY(CheckSlotStride(opt, Nv * Dk * Dv, &stride));
  CGDR_TRY(CheckRank("state_pool", in.state_pool, 4, pool_dims));
  const int64_t P = in.state_pool.shape[0];
  CGDR_TRY(CheckShape("state_pool", in.state_pool, {P, Nv, kv ? Dk : Dv, kv ? Dv : Dk}, pool_dims));
  CGDR_TRY(CheckFloatDType("state_pool", in.state_pool));
  CGDR_TRY(CheckSlotExtent("state_pool", in.state_pool, stride));
  CGDR_TRY(CheckRank("state_indices", in.state_indices, 1, "[N]"));
  CGDR_TRY(CheckShape("state_indices", in.state_indices, {N}, "[N] with N of query"));
  CGDR_TRY(CheckSameDType("state_indices", in.state_indices, DType::kI32, "pool rows"));
  if (in.dst_indices.present()) {
    CGDR_TRY(CheckRank("dst_indices", in.dst_indices, 2, "[N, K]"));
    CGDR_TRY(CheckShape("dst_indices", in.dst_indices, {N, K}, "[N, K] with N, K of query"));
    CGDR_TRY(CheckSameDType("dst_indices", in.dst_indices, DType::kI32, "pool rows"));
  }
  const char* out_dims = axis == TokenAxis::kDraftTokens ? "[N, K, Nv, Dv]" : "[N, Nv, Dv]";
  CGDR_TRY(CheckRank("out", out.out, axis == TokenAxis::kDraftTokens ? 4 : 3, out_dims));
  CGDR_TRY(CheckShape("out", out.out, dims.Shape({Nv, Dv}), out_dims));
  CGDR_TRY(CheckSameDType("out", out.out, dt, "same as query"));
  if (out.states.present()) {
    if (in.dst_indices.present()) {
      return Status::Invalid("states: expected either dst_indices (states into pool slots) or states (dense), got both");
    }
    const char* states_dims = kv ? "[N * K, Nv, Dk, Dv] (layout kv)" : "[N * K, Nv, Dv, Dk] (layout vk)";
    CGDR_TRY(CheckRank("states", out.states, 4, states_dims));
    CGDR_TRY(CheckShape("states", out.states, {N * K, Nv, kv ? Dk : Dv, kv ? Dv : Dk}, states_dims));
    CGDR_TRY(CheckSameDType("states", out.states, in.state_pool.dtype, "same as state_pool"));
  }
  CGDR_TRY(CheckNoOverlap(in, out, stride));
  CGDR_TRY(CheckCommonOptions(opt));
  CGDR_TRY(CheckSlotIndices("state_indices", in.state_indices, P, "skip"));
  if (in.dst_indices.present()) CGDR_TRY(CheckDestinations(in.state_indices, in.dst_indices, P));
  if (opt.check_values) {
    CGDR_TRY(CheckValues({{"query", &in.query}, {"key", &in.key}, {"value", &in.value}, {"beta", &in.beta}, {"g", &in.g},
                          {"a", &in.a}, {"A_log", &in.A_log}, {"dt_bias", &in.dt_bias}},
                         in.g, opt.threads));
    CGDR_TRY(CheckPoolRows(in.state_pool, in.state_indices, opt.threads));
  }

  p->N = N; p->P = P; p->Nk = Nk; p->Nv = Nv; p->Dk = Dk; p->Dv = Dv;
  p->K = K;
  p->dtype = dt;
  p->has_g = in.g.present();
  p->g_dtype = in.g.present() ? in.g.dtype : DType::kF32;
  p->has_gate = in.a.present();
  p->per_channel_gate = dims.per_channel;
  p->state_dtype = in.state_pool.dtype;
  p->slot_stride = stride;
  p->scale = ResolveScale(opt.scale, Dk);
  p->options = opt;
  return Status::Ok();
}

}  // namespace cgdr
