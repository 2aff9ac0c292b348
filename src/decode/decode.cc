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
// Threads take (sequence, head) items; each item's arithmetic is sequential
// and independent of the others, so results do not depend on the thread count.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "decode/decode.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include <cstdint>

#include "core/dtype.h"
#include "core/l2norm.h"
#include "hwy/cache_control.h"

// Prefetch distance in bytes (a tuning knob: -DCGDR_DECODE_PREFETCH=0 turns it off).
#ifndef CGDR_DECODE_PREFETCH
#define CGDR_DECODE_PREFETCH 4096
#endif

HWY_BEFORE_NAMESPACE();
namespace cgdr {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// The hardware prefetchers stop at 4 KiB page boundaries, and a state is a
// long stream of pages: ask for the lines kPrefetchBytes ahead of the `n`
// floats about to be read. Past the end of a head this is the next head of the
// same sequence, which this thread usually takes next (prefetches never fault).
constexpr int64_t kPrefetchBytes = CGDR_DECODE_PREFETCH;
HWY_INLINE void PrefetchAhead(const float* p, int64_t n, int64_t distance = kPrefetchBytes) {
  if (kPrefetchBytes == 0) return;
  const char* b = reinterpret_cast<const char*>(p) + distance;
  for (int64_t off = 0; off < n * 4; off += 64) hwy::Prefetch(b + off);
}

// Rows [j0, j0 + R) of a head in layout vk, R rows interleaved so their
// independent dot products and reductions overlap (a single row's chain of
// dot -> reduce -> update -> dot -> reduce is latency-bound).
template <int R>
HWY_INLINE void StepRowsVK(float* HWY_RESTRICT S, int64_t j0, int64_t Dk, const float* HWY_RESTRICT q,
                           const float* HWY_RESTRICT k, const float* HWY_RESTRICT v, float beta, float a, float scale,
                           float* HWY_RESTRICT o) {
  const hn::ScalableTag<float> d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const int64_t full = Dk - Dk % L;  // vector part; the rest is a scalar tail
  const auto va = hn::Set(d, a);
  float* HWY_RESTRICT row[R];
  for (int r = 0; r < R; ++r) row[r] = S + (j0 + r) * Dk;
  PrefetchAhead(row[0], R * Dk);
  // u = beta (v - (a S)^T k)
  hn::Vec<decltype(d)> acc[R];
  for (int r = 0; r < R; ++r) acc[r] = hn::Zero(d);
  for (int64_t i = 0; i < full; i += L) {
    const auto vk = hn::Load(d, k + i);
    for (int r = 0; r < R; ++r) acc[r] = hn::MulAdd(hn::Mul(va, hn::LoadU(d, row[r] + i)), vk, acc[r]);
  }
  float u[R];
  for (int r = 0; r < R; ++r) {
    float sk = hn::GetLane(hn::SumOfLanes(d, acc[r]));
    for (int64_t i = full; i < Dk; ++i) sk += (a * row[r][i]) * k[i];
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
      const auto s = hn::MulAdd(vk, vu[r], hn::Mul(va, hn::LoadU(d, row[r] + i)));
      hn::StoreU(s, d, row[r] + i);
      acc[r] = hn::MulAdd(s, vq, acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) {
    float oq = hn::GetLane(hn::SumOfLanes(d, acc[r]));
    for (int64_t i = full; i < Dk; ++i) {
      const float s = k[i] * u[r] + a * row[r][i];
      row[r][i] = s;
      oq += s * q[i];
    }
    o[j0 + r] = scale * oq;
  }
}

// One head in layout vk: S is [Dv][Dk] f32 (rows not padded); q and k are
// padded with zeros to a multiple of the vector width. Writes o[0..Dv).
void StepHeadVK(float* HWY_RESTRICT S, int64_t Dk, int64_t Dv, const float* HWY_RESTRICT q,
                const float* HWY_RESTRICT k, const float* HWY_RESTRICT v, float beta, float a, float scale,
                float* HWY_RESTRICT o) {
  int64_t j = 0;
  for (; j + 4 <= Dv; j += 4) StepRowsVK<4>(S, j, Dk, q, k, v, beta, a, scale, o);
  for (; j < Dv; ++j) StepRowsVK<1>(S, j, Dk, q, k, v, beta, a, scale, o);
}

// Layout kv, first pass over rows [i0, i0 + R): acc += (a S_i)^T k_i for
// each row in order (R rows per trip over acc halve its loads and stores;
// the sum is the same, row by row).
template <int R>
HWY_INLINE void AccumulateRowsKV(const float* HWY_RESTRICT S, int64_t i0, int64_t Dv, const float* HWY_RESTRICT k,
                                 float a, float* HWY_RESTRICT acc) {
  const hn::ScalableTag<float> d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const int64_t full = Dv - Dv % L;
  const auto va = hn::Set(d, a);
  const float* HWY_RESTRICT row[R];
  hn::Vec<decltype(d)> vk[R];
  for (int r = 0; r < R; ++r) {
    row[r] = S + (i0 + r) * Dv;
    PrefetchAhead(row[r], Dv);
    vk[r] = hn::Set(d, k[i0 + r]);
  }
  for (int64_t j = 0; j < full; j += L) {
    auto x = hn::Load(d, acc + j);
    for (int r = 0; r < R; ++r) x = hn::MulAdd(hn::Mul(va, hn::LoadU(d, row[r] + j)), vk[r], x);
    hn::Store(x, d, acc + j);
  }
  for (int64_t j = full; j < Dv; ++j) {
    for (int r = 0; r < R; ++r) acc[j] += (a * row[r][j]) * k[i0 + r];
  }
}

// Layout kv, second pass over rows [i0, i0 + R): S_i = a S_i + k_i u^T,
// acc += q_i S_i. It reads the head from L2, so it also prefetches the next
// head (same sequence, usually this thread's next item) meanwhile.
template <int R>
HWY_INLINE void UpdateRowsKV(float* HWY_RESTRICT S, int64_t i0, int64_t Dk, int64_t Dv, const float* HWY_RESTRICT q,
                             const float* HWY_RESTRICT k, const float* HWY_RESTRICT u, float a,
                             float* HWY_RESTRICT acc) {
  const hn::ScalableTag<float> d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const int64_t full = Dv - Dv % L;
  const auto va = hn::Set(d, a);
  float* HWY_RESTRICT row[R];
  hn::Vec<decltype(d)> vk[R], vq[R];
  for (int r = 0; r < R; ++r) {
    row[r] = S + (i0 + r) * Dv;
    PrefetchAhead(row[r], Dv, Dk * Dv * 4);
    vk[r] = hn::Set(d, k[i0 + r]);
    vq[r] = hn::Set(d, q[i0 + r]);
  }
  for (int64_t j = 0; j < full; j += L) {
    const auto vu = hn::Load(d, u + j);
    auto x = hn::Load(d, acc + j);
    for (int r = 0; r < R; ++r) {
      const auto s = hn::MulAdd(vk[r], vu, hn::Mul(va, hn::LoadU(d, row[r] + j)));
      hn::StoreU(s, d, row[r] + j);
      x = hn::MulAdd(vq[r], s, x);
    }
    hn::Store(x, d, acc + j);
  }
  for (int64_t j = full; j < Dv; ++j) {
    for (int r = 0; r < R; ++r) {
      const float s = k[i0 + r] * u[j] + a * row[r][j];
      row[r][j] = s;
      acc[j] += q[i0 + r] * s;
    }
  }
}

// One head in layout kv: S is [Dk][Dv] f32. v and the scratch buffers `acc`
// and `u` hold Dv floats padded to a multiple of the vector width.
void StepHeadKV(float* HWY_RESTRICT S, int64_t Dk, int64_t Dv, const float* HWY_RESTRICT q,
                const float* HWY_RESTRICT k, const float* HWY_RESTRICT v, float beta, float a, float scale,
                float* HWY_RESTRICT o, float* HWY_RESTRICT acc, float* HWY_RESTRICT u) {
  const hn::ScalableTag<float> d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const int64_t padded = (Dv + L - 1) / L * L;
  for (int64_t j = 0; j < padded; j += L) hn::Store(hn::Zero(d), d, acc + j);
  // acc = (a S)^T k, summed over rows in order.
  int64_t i = 0;
  for (; i + 4 <= Dk; i += 4) AccumulateRowsKV<4>(S, i, Dv, k, a, acc);
  for (; i < Dk; ++i) AccumulateRowsKV<1>(S, i, Dv, k, a, acc);
  // u = beta (v - acc); acc is reused for the output sums.
  const auto vb = hn::Set(d, beta);
  for (int64_t j = 0; j < padded; j += L) {
    hn::Store(hn::Mul(vb, hn::Sub(hn::Load(d, v + j), hn::Load(d, acc + j))), d, u + j);
    hn::Store(hn::Zero(d), d, acc + j);
  }
  // S = a S + k u^T; acc = S^T q.
  for (i = 0; i + 4 <= Dk; i += 4) UpdateRowsKV<4>(S, i, Dk, Dv, q, k, u, a, acc);
  for (; i < Dk; ++i) UpdateRowsKV<1>(S, i, Dk, Dv, q, k, u, a, acc);
  for (int64_t j = 0; j < Dv; ++j) o[j] = scale * acc[j];
}

// bf16 pool rows to and from f32, bit-identical to core/dtype.h (round to
// nearest even, NaN kept quiet) on every target, so 16-bit pools stay
// memory-bound instead of conversion-bound.
void BF16ToF32Row(const uint16_t* HWY_RESTRICT src, int64_t n, float* HWY_RESTRICT dst) {
  const hn::ScalableTag<float> df;
  const hn::RebindToUnsigned<decltype(df)> du32;
  const hn::Rebind<uint16_t, decltype(df)> du16;
  const int64_t L = static_cast<int64_t>(hn::Lanes(df));
  int64_t i = 0;
  for (; i + L <= n; i += L) {
    hn::StoreU(hn::BitCast(df, hn::ShiftLeft<16>(hn::PromoteTo(du32, hn::LoadU(du16, src + i)))), df, dst + i);
  }
  for (; i < n; ++i) dst[i] = BF16ToF32(src[i]);
}

void F32ToBF16Row(const float* HWY_RESTRICT src, int64_t n, uint16_t* HWY_RESTRICT dst) {
  const hn::ScalableTag<float> df;
  const hn::RebindToUnsigned<decltype(df)> du32;
  const hn::RebindToSigned<decltype(df)> di32;
  const hn::Rebind<uint16_t, decltype(df)> du16;
  const int64_t L = static_cast<int64_t>(hn::Lanes(df));
  const auto k7fff = hn::Set(du32, 0x7FFFu), one = hn::Set(du32, 1u), quiet = hn::Set(du32, 0x40u);
  const auto abs_mask = hn::Set(du32, 0x7FFFFFFFu);
  const auto inf = hn::Set(di32, 0x7F800000);
  int64_t i = 0;
  for (; i + L <= n; i += L) {
    const auto u = hn::BitCast(du32, hn::LoadU(df, src + i));
    const auto hi = hn::ShiftRight<16>(u);
    const auto rounded = hn::ShiftRight<16>(hn::Add(u, hn::Add(k7fff, hn::And(hi, one))));
    const auto is_nan = hn::Gt(hn::BitCast(di32, hn::And(u, abs_mask)), inf);
    const auto bits = hn::IfThenElse(hn::RebindMask(du32, is_nan), hn::Or(hi, quiet), rounded);  // <= 0xFFFF
    hn::StoreU(hn::DemoteTo(du16, hn::BitCast(di32, bits)), du16, dst + i);
  }
  for (; i < n; ++i) dst[i] = F32ToBF16(src[i]);
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
  int64_t t = opt.threads > 0 ? opt.threads : omp_get_max_threads();
  if (items * state_elems < (int64_t{1} << 15)) t = 1;
  return static_cast<int>(std::max<int64_t>(1, std::min(t, items)));
}

// Runs one (sequence n, value head h) item. `head_f32` is this thread's
// Dk*Dv f32 buffer, used only when the pool is f16/bf16.
void RunItem(const DecodeProblem& p, const DecodeInputs& in, const DecodeOutputs& out, int64_t n, int64_t h,
             ItemScratch& sc, float* head_f32) {
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

  const int64_t head_elems = Dk * Dv;
  const int64_t state_off = (static_cast<int64_t>(idx) * Nv + h) * head_elems;
  const bool f32 = p.state_dtype == DType::kF32;
  float* S = f32 ? static_cast<float*>(in.state_pool.data) + state_off : head_f32;
  const size_t esize = DTypeSize(p.state_dtype);
  void* state_bytes = static_cast<uint8_t*>(in.state_pool.data) + state_off * static_cast<int64_t>(esize);
  if (p.state_dtype == DType::kBF16) {
    HWY_DYNAMIC_DISPATCH(BF16ToF32Row)(static_cast<const uint16_t*>(state_bytes), head_elems, S);
  } else if (!f32) {
    ConvertToF32(state_bytes, p.state_dtype, head_elems, S);
  }

  if (p.options.state_layout == StateLayout::kVK) {
    HWY_DYNAMIC_DISPATCH(StepHeadVK)(S, Dk, Dv, sc.q, sc.k, sc.v, beta, a, scale, sc.o);
  } else {
    HWY_DYNAMIC_DISPATCH(StepHeadKV)(S, Dk, Dv, sc.q, sc.k, sc.v, beta, a, scale, sc.o, sc.acc, sc.u);
  }

  // A 16-bit state is rounded once per step.
  if (p.state_dtype == DType::kBF16) {
    HWY_DYNAMIC_DISPATCH(F32ToBF16Row)(S, head_elems, static_cast<uint16_t*>(state_bytes));
  } else if (!f32) {
    ConvertFromF32(S, head_elems, p.state_dtype, state_bytes);
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
  std::vector<float> head_f32;  // one Dk*Dv staging head per thread for 16-bit pools
  if (p.state_dtype != DType::kF32) head_f32.resize(static_cast<size_t>(threads * p.Dk * p.Dv));
  std::vector<ItemScratch> scratch(static_cast<size_t>(threads));

#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t item = 0; item < items; ++item) {
    const int tid = omp_get_thread_num();
    float* head = head_f32.empty() ? nullptr : head_f32.data() + static_cast<int64_t>(tid) * p.Dk * p.Dv;
    RunItem(p, in, out, item / p.Nv, item % p.Nv, scratch[static_cast<size_t>(tid)], head);
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
