// The decode step (SPEC 6b): one token per sequence, the recurrence of SPEC 1
// applied once to each (sequence, value head) state in the pool, in place.
//
// The step is bound by memory: every state is read once and written once, and
// the arithmetic (3 Dk Dv multiply-adds) is far below what the cores can do.
// So the kernels stream each state through registers once from memory:
//   layout vk ([Dv][Dk]): each row of Dk is an independent dot/update/dot; the
//     second pass over a row reads it from L1.
//   layout kv ([Dk][Dv]): S^T k needs a whole column sum before the update, so
//     one pass accumulates it, the second updates (the head is L2-resident).
// A 16-bit pool is read and written in its own dtype, converted in registers
// (no FP32 copy of the head: a step on bf16 pools ran at 30% of memory copy
// bandwidth through one).
// Threads take (sequence, head) items; each item's arithmetic is sequential
// and independent of the others, so results do not depend on the thread count.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "decode/decode.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include <cstdint>
#include <type_traits>

#include "core/dtype.h"
#include "core/l2norm.h"
#include "hwy/cache_control.h"
#include "kernels/load-inl.h"

// Prefetch distance in bytes (a tuning knob: -DCGDR_DECODE_PREFETCH=0 turns it off).
#ifndef CGDR_DECODE_PREFETCH
#define CGDR_DECODE_PREFETCH 4096
#endif

HWY_BEFORE_NAMESPACE();
namespace cgdr {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// The hardware prefetchers stop at 4 KiB page boundaries, and a state is a
// long stream of pages: ask for the lines `distance` bytes ahead of the
// `bytes` about to be read. Past the end of a head this is the next head of
// the same sequence, which this thread usually takes next (prefetches never
// fault).
constexpr int64_t kPrefetchBytes = CGDR_DECODE_PREFETCH;
HWY_INLINE void PrefetchAhead(const void* p, int64_t bytes, int64_t distance = kPrefetchBytes) {
  if (kPrefetchBytes == 0) return;
  const char* b = static_cast<const char*>(p) + distance;
  for (int64_t off = 0; off < bytes; off += 64) hwy::Prefetch(b + off);
}

// The kernels below read and write the pool in its own dtype kT: a 16-bit
// row is widened in registers as it is loaded and each updated element is
// rounded once as it is stored (load-inl.h's converters, nearest even),
// while the output sums use the unrounded FP32 values. That is bit for bit
// a step on an FP32 copy of the state followed by one rounding of the copy,
// without the copy's three extra passes over the head.
template <DType kT>
using PoolElem = std::conditional_t<kT == DType::kF32, float, uint16_t>;

// Rows [j0, j0 + R) of a head in layout vk, R rows interleaved so their
// independent dot products and reductions overlap (a single row's chain of
// dot -> reduce -> update -> dot -> reduce is latency-bound).
template <DType kT, int R>
HWY_INLINE void StepRowsVK(PoolElem<kT>* HWY_RESTRICT S, int64_t j0, int64_t Dk, const float* HWY_RESTRICT q,
                           const float* HWY_RESTRICT k, const float* HWY_RESTRICT v, float beta, float a, float scale,
                           float* HWY_RESTRICT o) {
  const hn::ScalableTag<float> d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const int64_t full = Dk - Dk % L;  // vector part; the rest is a scalar tail
  const auto va = hn::Set(d, a);
  PoolElem<kT>* HWY_RESTRICT row[R];
  for (int r = 0; r < R; ++r) row[r] = S + (j0 + r) * Dk;
  PrefetchAhead(row[0], R * Dk * kDTypeBytes<kT>);
  // u = beta (v - (a S)^T k)
  hn::Vec<decltype(d)> acc[R];
  for (int r = 0; r < R; ++r) acc[r] = hn::Zero(d);
  for (int64_t i = 0; i < full; i += L) {
    const auto vk = hn::Load(d, k + i);
    for (int r = 0; r < R; ++r) acc[r] = hn::MulAdd(hn::Mul(va, LoadVectorAs<kT>(d, row[r], i)), vk, acc[r]);
  }
  float u[R];
  for (int r = 0; r < R; ++r) {
    float sk = hn::GetLane(hn::SumOfLanes(d, acc[r]));
    for (int64_t i = full; i < Dk; ++i) sk += (a * LoadElementAs<kT>(row[r], i)) * k[i];
    u[r] = beta * (v[j0 + r] - sk);
  }
  // S = a S + k u^T; o = scale S^T q
  hn::Vec<decltype(d)> vu[R];
  for (int r = 0; r < R; ++r) {
    vu[r] = hn::Set(d, u[r]);
    acc[r] = hn::Zero(d);
  }
  for (int64_t i = 0; i < full; i += L) {
    const auto vk = hn::Load(d, k + i);
    const auto vq = hn::Load(d, q + i);
    for (int r = 0; r < R; ++r) {
      const auto s = hn::MulAdd(vk, vu[r], hn::Mul(va, LoadVectorAs<kT>(d, row[r], i)));
      StoreVectorAs<kT>(d, s, row[r], i);
      acc[r] = hn::MulAdd(s, vq, acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) {
    float oq = hn::GetLane(hn::SumOfLanes(d, acc[r]));
    for (int64_t i = full; i < Dk; ++i) {
      const float s = k[i] * u[r] + a * LoadElementAs<kT>(row[r], i);
      StoreElementAs<kT>(row[r], i, s);
      oq += s * q[i];
    }
    o[j0 + r] = scale * oq;
  }
}

// Layout kv, first pass over rows [i0, i0 + R): acc += (a S_i)^T k_i for
// each row in order (R rows per trip over acc halve its loads and stores;
// the sum is the same, row by row).
template <DType kT, int R>
HWY_INLINE void AccumulateRowsKV(const PoolElem<kT>* HWY_RESTRICT S, int64_t i0, int64_t Dv,
                                 const float* HWY_RESTRICT k, float a, float* HWY_RESTRICT acc) {
  const hn::ScalableTag<float> d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const int64_t full = Dv - Dv % L;
  const auto va = hn::Set(d, a);
  const PoolElem<kT>* HWY_RESTRICT row[R];
  hn::Vec<decltype(d)> vk[R];
  for (int r = 0; r < R; ++r) {
    row[r] = S + (i0 + r) * Dv;
    PrefetchAhead(row[r], Dv * kDTypeBytes<kT>);
    vk[r] = hn::Set(d, k[i0 + r]);
  }
  for (int64_t j = 0; j < full; j += L) {
    auto x = hn::Load(d, acc + j);
    for (int r = 0; r < R; ++r) x = hn::MulAdd(hn::Mul(va, LoadVectorAs<kT>(d, row[r], j)), vk[r], x);
    hn::Store(x, d, acc + j);
  }
  for (int64_t j = full; j < Dv; ++j) {
    for (int r = 0; r < R; ++r) acc[j] += (a * LoadElementAs<kT>(row[r], j)) * k[i0 + r];
  }
}

// Layout kv, second pass over rows [i0, i0 + R): S_i = a S_i + k_i u^T,
// acc += q_i S_i. It reads the head from L2, so it also prefetches the next
// head (same sequence, usually this thread's next item) meanwhile.
template <DType kT, int R>
HWY_INLINE void UpdateRowsKV(PoolElem<kT>* HWY_RESTRICT S, int64_t i0, int64_t Dk, int64_t Dv,
                             const float* HWY_RESTRICT q, const float* HWY_RESTRICT k, const float* HWY_RESTRICT u,
                             float a, float* HWY_RESTRICT acc) {
  const hn::ScalableTag<float> d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const int64_t full = Dv - Dv % L;
  const auto va = hn::Set(d, a);
  PoolElem<kT>* HWY_RESTRICT row[R];
  hn::Vec<decltype(d)> vk[R], vq[R];
  for (int r = 0; r < R; ++r) {
    row[r] = S + (i0 + r) * Dv;
    PrefetchAhead(row[r], Dv * kDTypeBytes<kT>, Dk * Dv * kDTypeBytes<kT>);
    vk[r] = hn::Set(d, k[i0 + r]);
    vq[r] = hn::Set(d, q[i0 + r]);
  }
  for (int64_t j = 0; j < full; j += L) {
    const auto vu = hn::Load(d, u + j);
    auto x = hn::Load(d, acc + j);
    for (int r = 0; r < R; ++r) {
      const auto s = hn::MulAdd(vk[r], vu, hn::Mul(va, LoadVectorAs<kT>(d, row[r], j)));
      StoreVectorAs<kT>(d, s, row[r], j);
      x = hn::MulAdd(vq[r], s, x);
    }
    hn::Store(x, d, acc + j);
  }
  for (int64_t j = full; j < Dv; ++j) {
    for (int r = 0; r < R; ++r) {
      const float s = k[i0 + r] * u[j] + a * LoadElementAs<kT>(row[r], j);
      StoreElementAs<kT>(row[r], j, s);
      acc[j] += q[i0 + r] * s;
    }
  }
}

// One head in layout vk: S is [Dv][Dk] in the pool's dtype (rows not
// padded); q and k are padded with zeros to a multiple of the vector width.
// Writes o[0..Dv).
template <DType kT>
HWY_INLINE void StepHeadVKAs(void* state, int64_t Dk, int64_t Dv, const float* HWY_RESTRICT q,
                             const float* HWY_RESTRICT k, const float* HWY_RESTRICT v, float beta, float a, float scale,
                             float* HWY_RESTRICT o) {
  auto* S = static_cast<PoolElem<kT>*>(state);
  int64_t j = 0;
  for (; j + 4 <= Dv; j += 4) StepRowsVK<kT, 4>(S, j, Dk, q, k, v, beta, a, scale, o);
  for (; j < Dv; ++j) StepRowsVK<kT, 1>(S, j, Dk, q, k, v, beta, a, scale, o);
}

// One head in layout kv: S is [Dk][Dv] in the pool's dtype. v and the
// scratch buffers `acc` and `u` hold Dv floats padded to a multiple of the
// vector width.
template <DType kT>
HWY_INLINE void StepHeadKVAs(void* state, int64_t Dk, int64_t Dv, const float* HWY_RESTRICT q,
                             const float* HWY_RESTRICT k, const float* HWY_RESTRICT v, float beta, float a, float scale,
                             float* HWY_RESTRICT o, float* HWY_RESTRICT acc, float* HWY_RESTRICT u) {
  auto* S = static_cast<PoolElem<kT>*>(state);
  const hn::ScalableTag<float> d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const int64_t padded = (Dv + L - 1) / L * L;
  for (int64_t j = 0; j < padded; j += L) hn::Store(hn::Zero(d), d, acc + j);
  // acc = (a S)^T k, summed over rows in order.
  int64_t i = 0;
  for (; i + 4 <= Dk; i += 4) AccumulateRowsKV<kT, 4>(S, i, Dv, k, a, acc);
  for (; i < Dk; ++i) AccumulateRowsKV<kT, 1>(S, i, Dv, k, a, acc);
  // u = beta (v - acc); acc is reused for the output sums.
  const auto vb = hn::Set(d, beta);
  for (int64_t j = 0; j < padded; j += L) {
    hn::Store(hn::Mul(vb, hn::Sub(hn::Load(d, v + j), hn::Load(d, acc + j))), d, u + j);
    hn::Store(hn::Zero(d), d, acc + j);
  }
  // S = a S + k u^T; acc = S^T q.
  for (i = 0; i + 4 <= Dk; i += 4) UpdateRowsKV<kT, 4>(S, i, Dk, Dv, q, k, u, a, acc);
  for (; i < Dk; ++i) UpdateRowsKV<kT, 1>(S, i, Dk, Dv, q, k, u, a, acc);
  for (int64_t j = 0; j < Dv; ++j) o[j] = scale * acc[j];
}

// The dispatched entry points: one head of a pool of dtype `pool`.
void StepHeadVK(void* state, DType pool, int64_t Dk, int64_t Dv, const float* HWY_RESTRICT q,
                const float* HWY_RESTRICT k, const float* HWY_RESTRICT v, float beta, float a, float scale,
                float* HWY_RESTRICT o) {
  ForDType(pool, [&](auto tag) { StepHeadVKAs<decltype(tag)::value>(state, Dk, Dv, q, k, v, beta, a, scale, o); });
}

void StepHeadKV(void* state, DType pool, int64_t Dk, int64_t Dv, const float* HWY_RESTRICT q,
                const float* HWY_RESTRICT k, const float* HWY_RESTRICT v, float beta, float a, float scale,
                float* HWY_RESTRICT o, float* HWY_RESTRICT acc, float* HWY_RESTRICT u) {
  ForDType(pool, [&](auto tag) {
    StepHeadKVAs<decltype(tag)::value>(state, Dk, Dv, q, k, v, beta, a, scale, o, acc, u);
  });
}

// load-inl.h's bf16 row converters, dispatched for the tests that hold them
// to core/dtype.h bit for bit (the pool kernels above use them per vector).
void BF16ToF32Row(const uint16_t* HWY_RESTRICT src, int64_t n, float* HWY_RESTRICT dst) {
  LoadRowAs<DType::kBF16>(src, n, dst, n);
}

void F32ToBF16Row(const float* HWY_RESTRICT src, int64_t n, uint16_t* HWY_RESTRICT dst) {
  StoreRowAs<DType::kBF16>(src, n, dst);
}

}  // namespace HWY_NAMESPACE
}  // namespace cgdr
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <new>
#include <vector>

#include "cgdr/decode.hpp"
#include "core/fpenv.h"
#include "core/threads.h"
#include "decode/decode_internal.h"

namespace cgdr {

HWY_EXPORT(StepHeadVK);
HWY_EXPORT(StepHeadKV);
HWY_EXPORT(BF16ToF32Row);
HWY_EXPORT(F32ToBF16Row);

namespace {

// Room for Dk/Dv up to kMaxHeadDim plus padding to the widest vector (16 f32).
constexpr int64_t kPad = 16;
constexpr int64_t kBuf = kMaxHeadDim + kPad;

// Per-item f32 staging of the token's rows; aligned for the vector loads.
struct alignas(64) ItemScratch {
  float q[kBuf], k[kBuf], v[kBuf], o[kBuf], acc[kBuf], u[kBuf];
};

// Loads n elements as f32 into dst and zero-fills the padding.
void LoadRow(const void* base, DType t, int64_t offset, int64_t n, float* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = LoadAsF32(base, t, offset + i);
  for (int64_t i = n; i < n + kPad && i < kBuf; ++i) dst[i] = 0.0f;
}

// Threads for `items` heads of Dk x Dv: never more than items, and one for
// steps too small to pay for waking a team.
int ResolveThreads(const Options& opt, int64_t items, int64_t state_elems) {
  int64_t t = ResolveThreadCount(opt.threads);
  if (items * state_elems < (int64_t{1} << 15)) t = 1;
  return static_cast<int>(std::max<int64_t>(1, std::min(t, items)));
}

// Runs one (sequence n, value head h) item on its state in the pool.
void RunItem(const DecodeProblem& p, const DecodeInputs& in, const DecodeOutputs& out, int64_t n, int64_t h,
             ItemScratch& sc) {
  const int64_t Dk = p.Dk, Dv = p.Dv, Nv = p.Nv, hk = h / (Nv / p.Nk);
  const int64_t out_off = (n * Nv + h) * Dv;
  const int32_t idx = static_cast<const int32_t*>(in.state_indices.data)[n];
  if (idx < 0) {  // skipped row: defined zeros, state untouched
    for (int64_t j = 0; j < Dv; ++j) StoreFromF32(out.out.data, out.out.dtype, out_off + j, 0.0f);
    return;
  }
  LoadRow(in.query.data, p.dtype, (n * p.Nk + hk) * Dk, Dk, sc.q);
  LoadRow(in.key.data, p.dtype, (n * p.Nk + hk) * Dk, Dk, sc.k);
  LoadRow(in.value.data, p.dtype, out_off, Dv, sc.v);
  if (p.options.use_qk_l2norm) {
    L2NormalizeRow(sc.q, Dk);
    L2NormalizeRow(sc.k, Dk);
  }
  const float beta = LoadAsF32(in.beta.data, p.dtype, n * Nv + h);
  const float a = p.has_g ? std::exp(LoadAsF32(in.g.data, p.g_dtype, n * Nv + h)) : 1.0f;
  const float scale = static_cast<float>(p.scale);

  const int64_t state_off = (static_cast<int64_t>(idx) * Nv + h) * Dk * Dv;
  void* S = static_cast<uint8_t*>(in.state_pool.data) + state_off * static_cast<int64_t>(DTypeSize(p.state_dtype));
  if (p.options.state_layout == StateLayout::kVK) {
    HWY_DYNAMIC_DISPATCH(StepHeadVK)(S, p.state_dtype, Dk, Dv, sc.q, sc.k, sc.v, beta, a, scale, sc.o);
  } else {
    HWY_DYNAMIC_DISPATCH(StepHeadKV)(S, p.state_dtype, Dk, Dv, sc.q, sc.k, sc.v, beta, a, scale, sc.o, sc.acc, sc.u);
  }
  for (int64_t j = 0; j < Dv; ++j) StoreFromF32(out.out.data, out.out.dtype, out_off + j, sc.o[j]);
}

}  // namespace

std::vector<int64_t> DecodeTargets() {
  std::vector<int64_t> targets;
  for (int64_t t = HWY_TARGETS & hwy::SupportedTargets(); t != 0; t &= t - 1) targets.push_back(t & -t);
  return targets;
}

void DecodeBF16ToF32(const uint16_t* src, int64_t n, float* dst) { HWY_DYNAMIC_DISPATCH(BF16ToF32Row)(src, n, dst); }
void DecodeF32ToBF16(const float* src, int64_t n, uint16_t* dst) { HWY_DYNAMIC_DISPATCH(F32ToBF16Row)(src, n, dst); }

namespace {

Status ValidateAndRun(const DecodeInputs& in, const DecodeOutputs& out, const Options& opt) {
  DecodeProblem p;
  Status s = ValidateDecode(in, out, opt, &p);
  if (!s.ok()) return s;
  const int64_t items = p.N * p.Nv;
  if (items == 0) return Status::Ok();
  const int threads = ResolveThreads(opt, items, p.Dk * p.Dv);

  // Allocated before any state is written; a failure is DecodeStep's
  // kResourceExhausted.
  std::vector<ItemScratch> scratch(static_cast<size_t>(threads));

#pragma omp parallel num_threads(threads)
  {
    const FlushDenormalsScope ftz;  // as prefill (core/fpenv.h)
#pragma omp for schedule(static)
    for (int64_t item = 0; item < items; ++item) {
      RunItem(p, in, out, item / p.Nv, item % p.Nv, scratch[static_cast<size_t>(omp_get_thread_num())]);
    }
  }
  return Status::Ok();
}

}  // namespace

// Validation allocates too (the index check sorts a copy of the indices):
// any allocation failure becomes kResourceExhausted, before a state is written.
Status DecodeStep(const DecodeInputs& in, const DecodeOutputs& out, const Options& opt) {
  try {
    return ValidateAndRun(in, out, opt);
  } catch (const std::bad_alloc&) {
    return Status(Code::kResourceExhausted, "decode: out of memory while validating or allocating scratch");
  }
}

}  // namespace cgdr
#endif  // HWY_ONCE
