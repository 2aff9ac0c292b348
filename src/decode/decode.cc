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
//
// With a token axis (docs/SPEC.md 6d: speculative decoding's verify), an item
// runs K tokens on its state read once from the pool: the state lives in a
// per-thread carry buffer in the pool's dtype between tokens (so each token
// is bit for bit a single step, rounding included) and goes to each token's
// destination with streaming stores (no read for ownership of the fresh
// lines; the next call reads them, not this one). Layout vk runs the K tokens
// on one block of rows at a time (rows are independent), so the block stays
// in L1, one pass per token: the update of token t also sums token t + 1's
// S^T k and streams the rows out. Layout kv runs them on the whole head in
// L2 and streams each token's state out in its update pass. Even so verify is
// bound by its bytes (1 read + K writes of each state) and, on a machine whose
// steps already run at memory speed, gains at most 2K / (K + 1) over K steps
// (SPEC 6d.2).
//
// KDA's per-channel gate (docs/SPEC.md 10): S_t = (I - beta k k^T) Diag(exp(g_t)) S_{t-1}
// + beta k v^T, one decay per key channel. Every kernel below takes it as a
// template flag (kPC): element i of a vk row, or row i of a kv head, is
// multiplied by exp(g_t[i]) where the scalar gate multiplies by exp(g_t),
// with no other change, so the scalar-gate kernels are untouched and channels
// that all carry the head's decay give its bits (tests/decode_kda_test.cc).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "decode/decode.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "cgdr/cgdr.hpp"
#include "core/dtype.h"
#include "core/l2norm.h"
#include "decode/head_tokens.h"
#include "hwy/cache_control.h"
#include "kernels/gate-inl.h"
#include "kernels/kda-inl.h"
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
// `bytes` about to be read (prefetches never fault).
constexpr int64_t kPrefetchBytes = CGDR_DECODE_PREFETCH;
HWY_INLINE void PrefetchAhead(const void* p, int64_t bytes, int64_t distance = kPrefetchBytes) {
  if (kPrefetchBytes == 0) return;
  const char* b = static_cast<const char*>(p) + distance;
  for (int64_t off = 0; off < bytes; off += 64) hwy::Prefetch(b + off);
}

// Layout kv (and layout vk's f32 step, StepHeadVK) makes two passes over an
// item's head of `rows` rows: the sums, then the update. The head after it
// in the pool (the same sequence's next value head, which this thread
// usually takes next) is fetched over both passes, half in each: rows
// [j0, j0 + n) of pass p ask for its bytes [(p rows + j0) b / 2,
// (p rows + j0 + n) b / 2), b the bytes of a row. So memory stays busy while
// either pass computes, and the next item's first pass reads from L2 (with
// the next head fetched by the second pass alone, the step ran 10% slower:
// docs/SPEC.md 6b). The first pass also asks for its own rows
// kPrefetchBytes ahead, for a head that was not the one after the previous
// item (the first head of a sequence).
struct HeadPrefetch {
  const void* head = nullptr;
  int64_t rows = 0, row_bytes = 0;
  HWY_INLINE void Rows(int pass, int64_t j0, int64_t n) const {
    if (kPrefetchBytes == 0) return;
    const char* h = static_cast<const char*>(head);
    const int64_t b0 = (pass * rows + j0) * row_bytes / 2, b1 = (pass * rows + j0 + n) * row_bytes / 2;
    for (int64_t off = b0 / 64 * 64; off < b1; off += 64) hwy::Prefetch(h + rows * row_bytes + off);
    if (pass == 0) PrefetchAhead(h + j0 * row_bytes, n * row_bytes);
  }
};

// A block of rows of a head in layout vk, `bytes` from `rows`, about to be
// read once and then updated from L1 (verify's blocks, a 16-bit pool's
// single step): its own lines kPrefetchBytes ahead (for the first head of a
// sequence) and, for f32, the same rows of the head after it in the pool
// (`head_bytes` on), which this thread usually takes next, as HeadPrefetch
// does for two passes: memory stays busy while the block computes (verify
// 1-3% faster on AMD Zen 1). A 16-bit step is bound by its conversions
// there, and the added prefetches made bf16's 3% slower (docs/SPEC.md 6b).
template <DType kT>
HWY_INLINE void PrefetchRowsVK(const void* rows, int64_t bytes, int64_t head_bytes) {
  PrefetchAhead(rows, bytes);
  if constexpr (kT == DType::kF32) PrefetchAhead(rows, bytes, head_bytes);
}

// f(j0, rows) over rows [0, n) in blocks of kRows rows (rows a
// std::integral_constant), then single rows.
template <int kRows = 4, class F>
HWY_INLINE void ForRowBlocks(int64_t n, const F& f) {
  int64_t j = 0;
  for (; j + kRows <= n; j += kRows) f(j, std::integral_constant<int, kRows>());
  for (; j < n; ++j) f(j, std::integral_constant<int, 1>());
}

// The kernels below read and write the pool in its own dtype kT: a 16-bit
// row is widened in registers as it is loaded and each updated element is
// rounded once as it is stored (load-inl.h's converters, nearest even),
// while the output sums use the unrounded FP32 values. That is bit for bit
// a step on an FP32 copy of the state followed by one rounding of the copy,
// without the copy's three extra passes over the head.
template <DType kT>
using PoolElem = std::conditional_t<kT == DType::kF32, float, uint16_t>;

// One head of an item's state in a pool of dtype kT, in bytes: the distance
// from a head to the next one in the pool.
template <DType kT>
HWY_INLINE int64_t HeadBytes(const HeadTokens& h) {
  return h.Dk * h.Dv * kDTypeBytes<kT>;
}

// Layout vk's row length Dk is a template type Len: int64_t, or a
// compile-time constant where it is 128 (Qwen3-Next's and Kimi Linear's key
// head size; HeadTokens::fixed_row_length), so the row loops unroll fully
// (their `#pragma GCC unroll`: GCC 12 left the per-channel gate's longer
// body a loop without it). That changes no operation and no order of one,
// so the bits are the same (tests/decode_kda_test.cc). It is worth the most on
// small cores (AMD EPYC Zen 1's figures: docs/SPEC.md 10.6). Layout kv's row
// loops (over Dv) gained nothing from it and stay loops (docs/SPEC.md 6b).
using Len128 = std::integral_constant<int64_t, 128>;
template <class F>
HWY_INLINE void WithRowLength(int64_t n, bool fixed, const F& f) {
  if (fixed && n == Len128::value) return f(Len128());
  f(n);
}

// sums[r] = S_{j0 + r} . ak for rows [j0, j0 + R) of a head in layout vk
// (rows of Dk), R rows interleaved: the first pass of a step (StepRowsVK,
// StepHeadVK) and token 0's sums of a verify item (VerifyRowsVK), which
// must be the same sums bit for bit (a verify token is a single step).
template <DType kT, int R, class Len>
HWY_INLINE void RowSumsVK(const PoolElem<kT>* HWY_RESTRICT S, int64_t j0, Len Dk, const float* HWY_RESTRICT ak,
                          float* HWY_RESTRICT sums) {
  const hn::ScalableTag<float> d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const int64_t full = Dk - Dk % L;
  hn::Vec<decltype(d)> acc[R];
  for (int r = 0; r < R; ++r) acc[r] = hn::Zero(d);
#pragma GCC unroll 16
  for (int64_t i = 0; i < full; i += L) {
    const auto vak = hn::Load(d, ak + i);
    for (int r = 0; r < R; ++r) acc[r] = hn::MulAdd(LoadVectorAs<kT>(d, S + (j0 + r) * Dk, i), vak, acc[r]);
  }
  for (int r = 0; r < R; ++r) {
    sums[r] = hn::GetLane(hn::SumOfLanes(d, acc[r]));
    for (int64_t i = full; i < Dk; ++i) sums[r] += LoadElementAs<kT>(S + (j0 + r) * Dk, i) * ak[i];
  }
}

// Rows [j0, j0 + R) of a head in layout vk given each row's u = beta (v -
// S^T (a k)): S = a S + k u^T, o = scale S^T q. R rows interleaved so their
// independent dot products and reductions overlap (a single row's chain of
// update -> dot -> reduce is latency-bound). The rows are read from `src` and
// the updated rows written to `dst`: the same head (in place) or another one.
// kPC (the per-channel gate, KDA): element i of every row decays by ac[i]
// instead of by a; the same operations lane for lane, so channels that all
// decay by a give the scalar gate's bits.
template <DType kT, int R, bool kPC = false, class Len = int64_t>
HWY_INLINE void UpdateRowsVK(const PoolElem<kT>* src, PoolElem<kT>* dst, int64_t j0, Len Dk,
                             const float* HWY_RESTRICT q, const float* HWY_RESTRICT k, const float* HWY_RESTRICT u,
                             float a, const float* HWY_RESTRICT ac, float scale, float* HWY_RESTRICT o) {
  const hn::ScalableTag<float> d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const int64_t full = Dk - Dk % L;  // vector part; the rest is a scalar tail
  const auto va = hn::Set(d, a);
  const PoolElem<kT>* row[R];
  PoolElem<kT>* out_row[R];
  for (int r = 0; r < R; ++r) {
    row[r] = src + (j0 + r) * Dk;
    out_row[r] = dst + (j0 + r) * Dk;
  }
  // S = a S + k u^T; o = scale S^T q, P vectors of a row at a time
  // (ForStoreGroups).
  hn::Vec<decltype(d)> vu[R], acc[R];
  for (int r = 0; r < R; ++r) {
    vu[r] = hn::Set(d, u[r]);
    acc[r] = hn::Zero(d);
  }
  const auto update = [&](int64_t i, auto vectors) {
    constexpr int P = decltype(vectors)::value;
    hn::Vec<decltype(d)> vk[P], vq[P], vai[P], s[P];
    for (int p = 0; p < P; ++p) {
      vk[p] = hn::Load(d, k + i + p * L);
      vq[p] = hn::Load(d, q + i + p * L);
      vai[p] = kPC ? hn::Load(d, ac + i + p * L) : va;
    }
    for (int r = 0; r < R; ++r) {
      for (int p = 0; p < P; ++p) {
        s[p] = hn::MulAdd(vk[p], vu[r], hn::Mul(vai[p], LoadVectorAs<kT>(d, row[r], i + p * L)));
      }
      StoreVectorsAs<kT, P>(d, s, out_row[r], i);
      for (int p = 0; p < P; ++p) acc[r] = hn::MulAdd(s[p], vq[p], acc[r]);
    }
  };
  ForStoreGroups<kT>(full, L, update);
  for (int r = 0; r < R; ++r) {
    float oq = hn::GetLane(hn::SumOfLanes(d, acc[r]));
    for (int64_t i = full; i < Dk; ++i) {
      const float s = k[i] * u[r] + (kPC ? ac[i] : a) * LoadElementAs<kT>(row[r], i);
      StoreElementAs<kT>(out_row[r], i, s);
      oq += s * q[i];
    }
    o[j0 + r] = scale * oq;
  }
}

// A single step on rows [j0, j0 + R) of a head in layout vk, read once and
// then updated from L1: their sums (RowSumsVK), then their update. ak: the
// key times the decays (HeadTokens::decayed_k), for (a S)^T k = S^T (a k).
// head_bytes: one head's bytes in the pool, the distance to the next head.
template <DType kT, int R, bool kPC = false, class Len = int64_t>
HWY_INLINE void StepRowsVK(const PoolElem<kT>* src, PoolElem<kT>* dst, int64_t j0, Len Dk,
                           const float* HWY_RESTRICT q, const float* HWY_RESTRICT k, const float* HWY_RESTRICT ak,
                           const float* HWY_RESTRICT v, float beta, float a, const float* HWY_RESTRICT ac, float scale,
                           float* HWY_RESTRICT o, int64_t head_bytes) {
  PrefetchRowsVK<kT>(src + j0 * Dk, R * Dk * kDTypeBytes<kT>, head_bytes);
  // u = beta (v - S^T (a k))
  float u[R];
  RowSumsVK<kT, R>(src, j0, Dk, ak, u);
  for (int r = 0; r < R; ++r) u[r] = beta * (v[j0 + r] - u[r]);
  UpdateRowsVK<kT, R, kPC>(src, dst, j0, Dk, q, k, u, a, ac, scale, o);
}

// Layout kv, first pass over rows [i0, i0 + R): acc += S_i^T (a_i k_i) for
// each row in order (R rows per trip over acc halve its loads and stores;
// the sum is the same, row by row), ak the key times the decays
// (HeadTokens::decayed_k).
template <DType kT, int R>
HWY_INLINE void AccumulateRowsKV(const PoolElem<kT>* HWY_RESTRICT S, int64_t i0, int64_t Dv,
                                 const float* HWY_RESTRICT ak, float* HWY_RESTRICT acc) {
  const hn::ScalableTag<float> d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const int64_t full = Dv - Dv % L;
  const PoolElem<kT>* HWY_RESTRICT row[R];
  hn::Vec<decltype(d)> vak[R];
  for (int r = 0; r < R; ++r) {
    row[r] = S + (i0 + r) * Dv;
    vak[r] = hn::Set(d, ak[i0 + r]);
  }
  for (int64_t j = 0; j < full; j += L) {
    auto x = hn::Load(d, acc + j);
    for (int r = 0; r < R; ++r) x = hn::MulAdd(LoadVectorAs<kT>(d, row[r], j), vak[r], x);
    hn::Store(x, d, acc + j);
  }
  for (int64_t j = full; j < Dv; ++j) {
    for (int r = 0; r < R; ++r) acc[j] += LoadElementAs<kT>(row[r], j) * ak[i0 + r];
  }
}

// Layout kv, second pass over rows [i0, i0 + R): S_i = a S_i + k_i u^T,
// acc += q_i S_i, the head read from L2.
// `stream_to` (verify; rows of whole vectors, aligned): the updated rows also
// go there with streaming stores in the same pass. kPC: row i decays by ac[i].
template <DType kT, int R, bool kPC = false>
HWY_INLINE void UpdateRowsKV(const PoolElem<kT>* src, PoolElem<kT>* dst, int64_t i0, int64_t Dv,
                             const float* HWY_RESTRICT q, const float* HWY_RESTRICT k, const float* HWY_RESTRICT u,
                             float a, const float* HWY_RESTRICT ac, float* HWY_RESTRICT acc, PoolElem<kT>* stream_to) {
  const hn::ScalableTag<float> d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const int64_t full = Dv - Dv % L;
  const auto va = hn::Set(d, a);
  const PoolElem<kT>* row[R];
  PoolElem<kT>* out_row[R];
  hn::Vec<decltype(d)> vk[R], vq[R], var[R];
  float ar[R];
  for (int r = 0; r < R; ++r) {
    row[r] = src + (i0 + r) * Dv;
    out_row[r] = dst + (i0 + r) * Dv;
    vk[r] = hn::Set(d, k[i0 + r]);
    vq[r] = hn::Set(d, q[i0 + r]);
    ar[r] = kPC ? ac[i0 + r] : a;
    var[r] = kPC ? hn::Set(d, ar[r]) : va;
  }
  // P vectors of a row at a time (ForStoreGroups).
  const auto update = [&](int64_t j, auto vectors) {
    constexpr int P = decltype(vectors)::value;
    hn::Vec<decltype(d)> vu[P], x[P], s[P];
    for (int p = 0; p < P; ++p) {
      vu[p] = hn::Load(d, u + j + p * L);
      x[p] = hn::Load(d, acc + j + p * L);
    }
    for (int r = 0; r < R; ++r) {
      for (int p = 0; p < P; ++p) {
        s[p] = hn::MulAdd(vk[r], vu[p], hn::Mul(kPC ? var[r] : va, LoadVectorAs<kT>(d, row[r], j + p * L)));
      }
      if constexpr (kT == DType::kF32) {
        // The stream on its own line: handing it to StoreVectorsAs as for
        // 16 bits made the single step 4-8% slower from L2 (AMD Zen 1: GCC
        // shapes the loop differently; docs/SPEC.md 6b).
        StoreVectorsAs<kT, P>(d, s, out_row[r], j);
        for (int p = 0; p < P; ++p) {
          if (stream_to != nullptr) StoreVectorAs<kT, true>(d, s[p], stream_to + (i0 + r) * Dv, j + p * L);
          x[p] = hn::MulAdd(vq[r], s[p], x[p]);
        }
      } else {  // 16-bit: rounded once for both stores
        StoreVectorsAs<kT, P>(d, s, out_row[r], j, stream_to != nullptr ? stream_to + (i0 + r) * Dv : nullptr);
        for (int p = 0; p < P; ++p) x[p] = hn::MulAdd(vq[r], s[p], x[p]);
      }
    }
    for (int p = 0; p < P; ++p) hn::Store(x[p], d, acc + j + p * L);
  };
  ForStoreGroups<kT>(full, L, update);
  for (int64_t j = full; j < Dv; ++j) {
    for (int r = 0; r < R; ++r) {
      const float s = k[i0 + r] * u[j] + ar[r] * LoadElementAs<kT>(row[r], j);
      StoreElementAs<kT>(out_row[r], j, s);
      acc[j] += q[i0 + r] * s;
    }
  }
}

// One head in layout kv, one token: S is [Dk][Dv] in the pool's dtype, read
// from src and written to dst (and streamed to `stream_to`, UpdateRowsKV). v
// and the scratch buffers `acc` and `u` hold Dv floats padded to a multiple
// of the vector width. kPC: row i (key channel i) decays by ac[i] instead of a.
// ak: the key times the decays (HeadTokens::decayed_k). prefetch: the item's
// head in the pool (HeadPrefetch).
template <DType kT, bool kPC = false>
HWY_INLINE void StepHeadKVAs(const PoolElem<kT>* src, PoolElem<kT>* dst, int64_t Dk, int64_t Dv,
                             const float* HWY_RESTRICT q, const float* HWY_RESTRICT k, const float* HWY_RESTRICT ak,
                             const float* HWY_RESTRICT v, float beta, float a, const float* HWY_RESTRICT ac,
                             float scale, float* HWY_RESTRICT o, float* HWY_RESTRICT acc, float* HWY_RESTRICT u,
                             const HeadPrefetch& prefetch, PoolElem<kT>* stream_to = nullptr) {
  const hn::ScalableTag<float> d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  const int64_t padded = (Dv + L - 1) / L * L;
  for (int64_t j = 0; j < padded; j += L) hn::Store(hn::Zero(d), d, acc + j);
  // acc = S^T (a k), summed over rows in order.
  ForRowBlocks(Dk, [&](int64_t i, auto rows) {
    prefetch.Rows(0, i, rows.value);
    AccumulateRowsKV<kT, rows.value>(src, i, Dv, ak, acc);
  });
  // u = beta (v - acc); acc is reused for the output sums.
  const auto vb = hn::Set(d, beta);
  for (int64_t j = 0; j < padded; j += L) {
    hn::Store(hn::Mul(vb, hn::Sub(hn::Load(d, v + j), hn::Load(d, acc + j))), d, u + j);
    hn::Store(hn::Zero(d), d, acc + j);
  }
  // S = a S + k u^T; acc = S^T q.
  ForRowBlocks(Dk, [&](int64_t i, auto rows) {
    prefetch.Rows(1, i, rows.value);
    UpdateRowsKV<kT, rows.value, kPC>(src, dst, i, Dv, q, k, u, a, ac, acc, stream_to);
  });
  for (int64_t j = 0; j < Dv; ++j) o[j] = scale * acc[j];
}

// A token's state out of the carry buffer to its destination with streaming
// stores (it is written once and read by a later call, not by this one):
// they skip the read-for-ownership an ordinary store of a fresh line costs and
// keep the destinations from evicting the source. Only whole aligned vectors
// stream (a pool need not be aligned: a std::vector's is 16 bytes off); the
// ragged ends are plain copies.
HWY_INLINE void CopyOut(const void* HWY_RESTRICT from, void* HWY_RESTRICT to, int64_t bytes) {
  const hn::ScalableTag<uint8_t> d8;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d8));
  const auto* src = static_cast<const uint8_t*>(from);
  auto* dst = static_cast<uint8_t*>(to);
  const int64_t misaligned = static_cast<int64_t>(reinterpret_cast<uintptr_t>(dst) % static_cast<uintptr_t>(N));
  const int64_t head = std::min<int64_t>(bytes, misaligned == 0 ? 0 : N - misaligned);
  std::memcpy(dst, src, static_cast<size_t>(head));
  int64_t i = head;
  for (; i + N <= bytes; i += N) hn::Stream(hn::LoadU(d8, src + i), d8, dst + i);
  std::memcpy(dst + i, src + i, static_cast<size_t>(bytes - i));
}

// Token t of a verify item on rows [j0, j0 + R) in layout vk, given each
// row's sum (a S)^T k of this token in `sk`: S = a S + k u^T read from `from`
// (the source or the carry buffer) into the carry buffer, o = scale S^T q,
// and, where `next` is given, the next token's sums from the values just
// stored (read back as stored: rounded to the pool's dtype) in the same pass.
// That is the sum a separate pass would form, in the same order, so each
// token is bit for bit a single step (StepRowsVK, StepHeadVK) with one pass
// over the rows instead of two. `stream_to`: the destination rows, written
// in the same pass with streaming stores (aligned rows, no scalar tail), or
// null.
// kPC: the per-channel gate, element i of the rows decays by h.decay_ch.
template <DType kT, int R, bool kPC = false, class Len = int64_t>
HWY_INLINE void VerifyTokenRowsVK(const HeadTokens& h, Len Dk, int64_t t, int64_t j0, const PoolElem<kT>* from,
                                  PoolElem<kT>* stream_to, float* HWY_RESTRICT sk, bool next) {
  const hn::ScalableTag<float> d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d)), full = Dk - Dk % L;
  const float* HWY_RESTRICT q = h.q + t * h.row;
  const float* HWY_RESTRICT k = h.k + t * h.row;
  const float* HWY_RESTRICT ak1 = h.decayed_k + (next ? t + 1 : t) * h.row;  // the next token's a k
  const float a = h.decay[t];
  const auto va = hn::Set(d, a);
  const float* HWY_RESTRICT ac = kPC ? h.decay_ch + t * h.row : nullptr;   // this token's decays
  auto* carry = static_cast<PoolElem<kT>*>(h.carry);
  float u[R];
  hn::Vec<decltype(d)> vu[R], oacc[R], nacc[R];
  for (int r = 0; r < R; ++r) {
    u[r] = h.beta[t] * (h.v[t * h.row + j0 + r] - sk[r]);
    vu[r] = hn::Set(d, u[r]);
    oacc[r] = hn::Zero(d);
    nacc[r] = hn::Zero(d);
  }
#pragma GCC unroll 16
  for (int64_t i = 0; i < full; i += L) {
    const auto vk = hn::Load(d, k + i);
    const auto vq = hn::Load(d, q + i);
    const auto vak1 = hn::Load(d, ak1 + i);
    const auto vai = kPC ? hn::Load(d, ac + i) : va;
    for (int r = 0; r < R; ++r) {
      const int64_t row = (j0 + r) * Dk;
      const auto s = hn::MulAdd(vk, vu[r], hn::Mul(vai, LoadVectorAs<kT>(d, from + row, i)));
      // Rounded once: stored, streamed and read back for the next sums.
      const auto stored = StoreRoundedAs<kT>(d, s, carry + row, i, stream_to != nullptr ? stream_to + row : nullptr);
      oacc[r] = hn::MulAdd(s, vq, oacc[r]);
      if (next) nacc[r] = hn::MulAdd(stored, vak1, nacc[r]);
    }
  }
  for (int r = 0; r < R; ++r) {
    const int64_t row = (j0 + r) * Dk;
    float oq = hn::GetLane(hn::SumOfLanes(d, oacc[r]));
    for (int64_t i = full; i < Dk; ++i) {
      const float s = k[i] * u[r] + (kPC ? ac[i] : a) * LoadElementAs<kT>(from + row, i);
      StoreElementAs<kT>(carry + row, i, s);
      oq += s * q[i];
    }
    h.o[t * h.row + j0 + r] = h.scale * oq;
    if (!next) continue;
    sk[r] = hn::GetLane(hn::SumOfLanes(d, nacc[r]));
    for (int64_t i = full; i < Dk; ++i) sk[r] += LoadElementAs<kT>(carry + row, i) * ak1[i];
  }
}

// Rows [j0, j0 + R) of a verify item in layout vk through all K tokens: read
// from the source once, kept in the carry buffer (L1) between tokens, each
// token's rows written to its destination once. `stream`: every destination
// row is aligned for whole-vector streaming stores.
template <DType kT, int R, bool kPC = false, class Len = int64_t>
HWY_INLINE void VerifyRowsVK(const HeadTokens& h, Len Dk, int64_t j0, bool stream) {
  const auto* src = static_cast<const PoolElem<kT>*>(h.src);
  auto* carry = static_cast<PoolElem<kT>*>(h.carry);
  PrefetchRowsVK<kT>(src + j0 * Dk, R * Dk * kDTypeBytes<kT>, HeadBytes<kT>(h));
  // Token 0's sums S^T (a k) from the source, as a single step forms them.
  float sk[R];
  RowSumsVK<kT, R>(src, j0, Dk, h.decayed_k, sk);
  for (int64_t t = 0; t < h.K; ++t) {
    auto* to = static_cast<PoolElem<kT>*>(h.dst[t]);
    VerifyTokenRowsVK<kT, R, kPC>(h, Dk, t, j0, t == 0 ? src : carry, stream ? to : nullptr, sk, t + 1 < h.K);
    if (to != nullptr && !stream) CopyOut(carry + j0 * Dk, to + j0 * Dk, R * Dk * kDTypeBytes<kT>);
  }
}

// Whether every destination row of an item (rows of `row` elements) can take
// whole-vector streaming stores: rows of whole vectors, each destination
// aligned to a vector. Never where a stored vector is under 16 bytes (a
// 16-bit pool on a 128-bit target: kStreamableAs says why).
template <DType kT>
HWY_INLINE bool StreamsRows(const HeadTokens& h, int64_t row) {
  const hn::ScalableTag<float> d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  if (!kStreamableAs<kT> || row % L != 0) return false;
  const auto vector_bytes = static_cast<uintptr_t>(L * kDTypeBytes<kT>);
  for (int64_t t = 0; t < h.K; ++t) {
    if (reinterpret_cast<uintptr_t>(h.dst[t]) % vector_bytes != 0) return false;
  }
  return true;
}

// A single step on a whole head in layout vk in place, f32 pools: two passes
// over the head as layout kv makes them, every row's sums, then every row's
// update from L2, with the next head in the pool prefetched half during each
// pass (HeadPrefetch). The read-only first pass keeps memory busier than
// blocks of rows that are each read and then computed on: on AMD Zen 1 the
// step ran 1.2x faster (docs/SPEC.md 6b). 16-bit pools keep the blocks
// (StepRowsVK): their step is bound by its conversions, and reading each
// block from L1 is then worth more (two passes ran them 9-13% slower). Each
// row's operations and their order are those of StepRowsVK, so the bits are
// the same and a verify token is still a single step.
template <bool kPC, class Len>
HWY_INLINE void StepHeadVK(const HeadTokens& h, float* S, Len Dk) {
  const HeadPrefetch prefetch{S, h.Dv, Dk * kDTypeBytes<DType::kF32>};
  ForRowBlocks(h.Dv, [&](int64_t j0, auto rows) {
    prefetch.Rows(0, j0, rows.value);
    RowSumsVK<DType::kF32, rows.value>(S, j0, Dk, h.decayed_k, h.u + j0);
    for (int r = 0; r < rows.value; ++r) h.u[j0 + r] = h.beta[0] * (h.v[j0 + r] - h.u[j0 + r]);
  });
  ForRowBlocks(h.Dv, [&](int64_t j0, auto rows) {
    prefetch.Rows(1, j0, rows.value);
    UpdateRowsVK<DType::kF32, rows.value, kPC>(S, S, j0, Dk, h.q, h.k, h.u + j0, h.decay[0], h.decay_ch, h.scale,
                                               h.o);
  });
}

// An item's K tokens in layout vk (HeadTokens). A single step whose
// destination is its source runs in place: an f32 pool in two passes over
// the head (StepHeadVK), a 16-bit one in blocks of rows (StepRowsVK).
// Otherwise each block of rows runs all K tokens (VerifyRowsVK). kPC: the
// per-channel gate (h.decay_ch).
// Dk: h.Dk, as a constant where WithRowLength makes it one.
template <DType kT, bool kPC, class Len>
HWY_INLINE void StepTokensVK(const HeadTokens& h, Len Dk) {
  if (h.InPlace()) {
    auto* S = static_cast<PoolElem<kT>*>(h.dst[0]);
    if constexpr (kT == DType::kF32) {
      StepHeadVK<kPC>(h, S, Dk);
    } else {
      ForRowBlocks(h.Dv, [&](int64_t j0, auto rows) {
        StepRowsVK<kT, rows.value, kPC>(S, S, j0, Dk, h.q, h.k, h.decayed_k, h.v, h.beta[0], h.decay[0],
                                        h.decay_ch, h.scale, h.o, HeadBytes<kT>(h));
      });
    }
    return;
  }
  const bool stream = StreamsRows<kT>(h, h.Dk);
  ForRowBlocks<kT == DType::kF32 ? 4 : 2>(h.Dv, [&](int64_t j0, auto rows) { VerifyRowsVK<kT, rows.value, kPC>(h, Dk, j0, stream); });
}

// An item's K tokens in layout kv: a single step whose destination is its
// source in place; otherwise the whole head through the carry buffer (in L2),
// each token's state streamed to its destination in its update pass where
// the rows take it (StreamsRows), else copied out after it. kPC: the
// per-channel gate (h.decay_ch).
template <DType kT, bool kPC>
HWY_INLINE void StepTokensKV(const HeadTokens& h) {
  const auto* src = static_cast<const PoolElem<kT>*>(h.src);
  const HeadPrefetch prefetch{src, h.Dk, h.Dv * kDTypeBytes<kT>};
  const auto token = [&](int64_t t, const PoolElem<kT>* from, PoolElem<kT>* to, PoolElem<kT>* stream_to) {
    StepHeadKVAs<kT, kPC>(from, to, h.Dk, h.Dv, h.q + t * h.row, h.k + t * h.row, h.decayed_k + t * h.row,
                          h.v + t * h.row, h.beta[t], h.decay[t], kPC ? h.decay_ch + t * h.row : nullptr, h.scale,
                          h.o + t * h.row, h.acc, h.u, prefetch, stream_to);
  };
  if (h.InPlace()) {
    auto* S = static_cast<PoolElem<kT>*>(h.dst[0]);
    token(0, S, S, nullptr);
    return;
  }
  auto* carry = static_cast<PoolElem<kT>*>(h.carry);
  const bool stream = StreamsRows<kT>(h, h.Dv);
  for (int64_t t = 0; t < h.K; ++t) {
    auto* to = static_cast<PoolElem<kT>*>(h.dst[t]);
    token(t, t == 0 ? src : carry, carry, stream ? to : nullptr);
    if (to != nullptr && !stream) CopyOut(carry, to, HeadBytes<kT>(h));
  }
}

// Each token's key times its decays into h.decayed_k, channels [0, Dk)
// rounded up to whole vectors (k's padding is zero). One rounded multiply
// per channel: the same bits on every target, and equal channels give the
// scalar gate's.
HWY_INLINE void DecayKeys(const HeadTokens& h) {
  const hn::ScalableTag<float> d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d));
  for (int64_t t = 0; t < h.K; ++t) {
    const float* k = h.k + t * h.row;
    float* ak = h.decayed_k + t * h.row;
    const auto va = hn::Set(d, h.decay[t]);
    for (int64_t i = 0; i < h.Dk; i += L) {
      const auto a = h.decay_ch != nullptr ? hn::Load(d, h.decay_ch + t * h.row + i) : va;
      hn::Store(hn::Mul(a, hn::Load(d, k + i)), d, ak + i);
    }
  }
}

// The dispatched entry point: one item's tokens on a pool of dtype `pool`.
void StepHeadTokens(const HeadTokens& h, DType pool, StateLayout layout) {
  DecayKeys(h);
  ForDType(pool, [&](auto tag) {
    constexpr DType kT = decltype(tag)::value;
    const bool per_channel = h.decay_ch != nullptr;
    if (layout == StateLayout::kVK) {
      WithRowLength(h.Dk, h.fixed_row_length, [&](auto dk) {
        per_channel ? StepTokensVK<kT, true>(h, dk) : StepTokensVK<kT, false>(h, dk);
      });
    } else {
      per_channel ? StepTokensKV<kT, true>(h) : StepTokensKV<kT, false>(h);
    }
  });
  hwy::FlushStream();  // the copies' streaming stores ordered before the call returns
}

// The gate in the kernel (gate-inl.h), dispatched: x[0, n) raw gate a in,
// log-decays out; beta = sigmoid(b) in place.
void GateValues(float* HWY_RESTRICT x, int64_t n, float a_log, float dt_bias, float lower_bound, bool has_a_log) {
  GateRow(x, n, MakeHeadGate(a_log, dt_bias, lower_bound, has_a_log));
}

// KDA's per-channel gate (gate-inl.h GateChannels): x[0, n) one token's raw
// gates of one head's n = Dk key channels in, log-decays out; bias: the head's
// Dk dt_bias values as f32, or null (none).
void GateChannelValues(float* HWY_RESTRICT x, int64_t n, float a_log, float lower_bound, bool has_a_log,
                       const float* HWY_RESTRICT bias) {
  HeadGate gate = MakeHeadGate(a_log, 0.0f, lower_bound, has_a_log);
  gate.dt_bias_row = bias;
  GateChannels(x, n, gate);
}

void SigmoidValues(float* HWY_RESTRICT x, int64_t n) { SigmoidRow(x, n); }

// e^g of x[0, n) in place, by prefill's exponential for log-decays
// (ExpOfLogDecay, docs/SPEC.md 10.4), for both gates: std::exp, a call per
// value, took ~4% of a KDA step in layout kv (128 per item; perf, AMD EPYC
// Zen 1), and one exponential for both keeps equal channels the scalar gate's
// bits.
void ExpLogDecayValues(float* HWY_RESTRICT x, int64_t n) {
  MapRow(x, n, [](auto d, auto g) {
    hn::Vec<decltype(d)> v[1] = {g};
    ExpOfLogDecay(d, v);
    return v[0];
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
#include <atomic>
#include <cmath>
#include <cstring>
#include <memory>
#include <new>
#include <vector>

#include "cgdr/decode.hpp"
#include "core/cpu_features.h"
#include "core/fpenv.h"
#include "hwy/aligned_allocator.h"
#include "core/threads.h"
#include "decode/decode_internal.h"

namespace cgdr {

HWY_EXPORT(StepHeadTokens);
HWY_EXPORT(GateValues);
HWY_EXPORT(GateChannelValues);
HWY_EXPORT(SigmoidValues);
HWY_EXPORT(ExpLogDecayValues);
HWY_EXPORT(BF16ToF32Row);
HWY_EXPORT(F32ToBF16Row);

namespace {

// SetDecodeFixedRowLengthsForTest's switch.
std::atomic<bool> g_fixed_row_lengths{true};

// Room for Dk/Dv up to kMaxHeadDim plus padding to the widest vector (16 f32).
constexpr int64_t kPad = 16;
constexpr int64_t kBuf = kMaxHeadDim + kPad;
constexpr int64_t kMaxK = kMaxDraftTokens;

// Per-thread f32 staging of an item's K tokens' rows, aligned for the vector
// loads, and the carry buffer of states with a token axis.
struct alignas(64) ItemScratch {
  float q[kMaxK][kBuf], k[kMaxK][kBuf], v[kMaxK][kBuf], o[kMaxK][kBuf];
  float acc[kBuf], u[kBuf];
  float beta[kMaxK], decay[kMaxK];
  float decay_ch[kMaxK][kBuf];  // the per-channel gate (KDA): exp(g) per key channel of each token
  float decayed_k[kMaxK][kBuf]; // k times its decays (HeadTokens::decayed_k)
  float bias[kBuf];             // the head's per-channel dt_bias as f32
  void* dst[kMaxK];
};

// Loads n elements as f32 into dst and zero-fills the padding. Rows, not
// elements, pick the dtype's conversion (LoadRowAsF32): a switch per element
// of q, k, v, g and out took ~10% of a KDA decode step (perf, AMD EPYC Zen 1).
void LoadRow(const void* base, DType t, int64_t offset, int64_t n, float* dst) {
  LoadRowAsF32(base, t, offset, n, dst);
  for (int64_t i = n; i < n + kPad && i < kBuf; ++i) dst[i] = 0.0f;
}

// Threads for `items` heads of Dk x Dv: never more than items, and one for
// steps too small to pay for waking a team.
int ResolveThreads(const Options& opt, int64_t items, int64_t state_elems) {
  int64_t t = ResolveThreadCount(opt.threads);
  if (items * state_elems < (int64_t{1} << 15)) t = 1;
  return static_cast<int>(std::max<int64_t>(1, std::min(t, items)));
}

uint8_t* ElementAt(const TensorView& t, int64_t index) {
  return static_cast<uint8_t*>(t.data) + index * static_cast<int64_t>(DTypeSize(t.dtype));
}

// The per-channel gate (KDA, docs/SPEC.md 10): exp(g) of each key channel of
// each of the item's K tokens into sc.decay_ch, from g [.., Nv, Dk] or from
// the raw gate a [.., Nv, Dk] with dt_bias [Nv * Dk] (GateChannels, as
// prefill computes it); the padding past Dk is 1 (no decay). exp is
// ExpLogDecayValues, as the scalar gate's: channels that all carry the head's
// g give its bits.
void LoadChannelDecays(const DecodeProblem& p, const DecodeInputs& in, int64_t n, int64_t h, ItemScratch& sc) {
  const int64_t K = p.K, Nv = p.Nv, Dk = p.Dk;
  const bool has_a_log = in.A_log.present();
  const float a_log = p.has_gate && has_a_log ? LoadAsF32(in.A_log.data, in.A_log.dtype, h) : 0.0f;
  const bool has_bias = p.has_gate && in.dt_bias.present();
  if (has_bias) {
    LoadRowAsF32(in.dt_bias.data, in.dt_bias.dtype, h * Dk, Dk, sc.bias);
  }
  for (int64_t j = 0; j < K; ++j) {
    float* x = sc.decay_ch[j];
    const int64_t at = ((n * K + j) * Nv + h) * Dk;
    if (p.has_g) {
      LoadRowAsF32(in.g.data, p.g_dtype, at, Dk, x);
    } else {
      LoadRowAsF32(in.a.data, in.a.dtype, at, Dk, x);
      HWY_DYNAMIC_DISPATCH(GateChannelValues)(x, Dk, a_log, static_cast<float>(p.options.gate_lower_bound), has_a_log,
                                              has_bias ? sc.bias : nullptr);
    }
    HWY_DYNAMIC_DISPATCH(ExpLogDecayValues)(x, Dk);
    for (int64_t i = Dk; i < kBuf; ++i) x[i] = 1.0f;
    sc.decay[j] = 1.0f;  // unused with decay_ch
  }
}

// beta and exp(g) of each of the item's K tokens (rows n * K + j of the flat
// token axis): the gate in the kernel and beta's sigmoid as prefill computes
// them (gate-inl.h); the per-channel gate's decays (LoadChannelDecays).
void LoadTokenScalars(const DecodeProblem& p, const DecodeInputs& in, int64_t n, int64_t h, ItemScratch& sc) {
  const int64_t K = p.K, Nv = p.Nv;
  for (int64_t j = 0; j < K; ++j) sc.beta[j] = LoadAsF32(in.beta.data, p.dtype, (n * K + j) * Nv + h);
  if (p.options.use_beta_sigmoid) HWY_DYNAMIC_DISPATCH(SigmoidValues)(sc.beta, K);
  if (p.per_channel_gate) return LoadChannelDecays(p, in, n, h, sc);
  for (int64_t j = 0; j < K; ++j) {
    sc.decay[j] = p.has_g ? LoadAsF32(in.g.data, p.g_dtype, (n * K + j) * Nv + h)
                  : p.has_gate ? LoadAsF32(in.a.data, in.a.dtype, (n * K + j) * Nv + h) : 0.0f;
  }
  if (p.has_gate) {
    const float dt_bias = in.dt_bias.present() ? LoadAsF32(in.dt_bias.data, in.dt_bias.dtype, h) : 0.0f;
    const bool has_a_log = in.A_log.present();
    HWY_DYNAMIC_DISPATCH(GateValues)(sc.decay, K, has_a_log ? LoadAsF32(in.A_log.data, in.A_log.dtype, h) : 0.0f,
                                     dt_bias, static_cast<float>(p.options.gate_lower_bound), has_a_log);
  }
  if (p.has_g || p.has_gate) {
    HWY_DYNAMIC_DISPATCH(ExpLogDecayValues)(sc.decay, K);
  } else {
    std::fill(sc.decay, sc.decay + K, 1.0f);
  }
}

// Where the item's state goes after token j (docs/SPEC.md 6d): pool slot
// dst_indices[n, j], row n * K + j of the dense `states`, or (neither given)
// its own slot after the last token.
void Destinations(const DecodeProblem& p, const DecodeInputs& in, const DecodeOutputs& out, int64_t n, int64_t h,
                  void* src, ItemScratch& sc) {
  const int64_t K = p.K, head = p.Dk * p.Dv;
  const auto* dst_idx = static_cast<const int32_t*>(in.dst_indices.data);
  for (int64_t j = 0; j < K; ++j) {
    if (in.dst_indices.present()) {
      const int32_t d = dst_idx[n * K + j];
      sc.dst[j] = d < 0 ? nullptr : ElementAt(in.state_pool, d * p.slot_stride + h * head);
    } else if (out.states.present()) {
      sc.dst[j] = ElementAt(out.states, ((n * K + j) * p.Nv + h) * head);
    } else {
      sc.dst[j] = j == K - 1 ? src : nullptr;
    }
  }
}

// A skipped row (negative index): defined zeros in out and in its dense
// states; the pool is not touched. +0 is all zero bits in f32, bf16 and f16.
void SkipItem(const DecodeProblem& p, const DecodeOutputs& out, int64_t n, int64_t h) {
  const int64_t head = p.Dk * p.Dv;
  for (int64_t j = 0; j < p.K; ++j) {
    std::memset(ElementAt(out.out, ((n * p.K + j) * p.Nv + h) * p.Dv), 0,
                static_cast<size_t>(p.Dv) * DTypeSize(out.out.dtype));
    if (out.states.present()) {
      std::memset(ElementAt(out.states, ((n * p.K + j) * p.Nv + h) * head), 0,
                  static_cast<size_t>(head) * DTypeSize(out.states.dtype));
    }
  }
}

// Runs one (sequence n, value head h) item: K tokens on its state in the pool.
void RunItem(const DecodeProblem& p, const DecodeInputs& in, const DecodeOutputs& out, int64_t n, int64_t h,
             ItemScratch& sc, void* carry) {
  const int64_t Dk = p.Dk, Dv = p.Dv, Nv = p.Nv, K = p.K, hk = h / (Nv / p.Nk);
  const int32_t idx = static_cast<const int32_t*>(in.state_indices.data)[n];
  if (idx < 0) return SkipItem(p, out, n, h);
  for (int64_t j = 0; j < K; ++j) {
    const int64_t token = n * K + j;
    LoadRow(in.query.data, p.dtype, (token * p.Nk + hk) * Dk, Dk, sc.q[j]);
    LoadRow(in.key.data, p.dtype, (token * p.Nk + hk) * Dk, Dk, sc.k[j]);
    LoadRow(in.value.data, p.dtype, (token * Nv + h) * Dv, Dv, sc.v[j]);
    if (p.options.use_qk_l2norm) {
      L2NormalizeRow(sc.q[j], Dk, p.options.qk_l2norm_eps);
      L2NormalizeRow(sc.k[j], Dk, p.options.qk_l2norm_eps);
    }
  }
  LoadTokenScalars(p, in, n, h, sc);
  void* S = ElementAt(in.state_pool, static_cast<int64_t>(idx) * p.slot_stride + h * Dk * Dv);
  Destinations(p, in, out, n, h, S, sc);
  HeadTokens ht;
  ht.K = K;
  ht.Dk = Dk;
  ht.Dv = Dv;
  ht.row = kBuf;
  ht.q = sc.q[0];
  ht.k = sc.k[0];
  ht.v = sc.v[0];
  ht.o = sc.o[0];
  ht.beta = sc.beta;
  ht.decay = sc.decay;
  ht.decay_ch = p.per_channel_gate ? sc.decay_ch[0] : nullptr;
  ht.decayed_k = sc.decayed_k[0];
  ht.scale = static_cast<float>(p.scale);
  ht.src = S;
  ht.dst = sc.dst;
  ht.carry = carry;
  ht.acc = sc.acc;
  ht.u = sc.u;
  ht.fixed_row_length = g_fixed_row_lengths.load(std::memory_order_relaxed);
  HWY_DYNAMIC_DISPATCH(StepHeadTokens)(ht, p.state_dtype, p.options.state_layout);
  for (int64_t j = 0; j < K; ++j) {
    const int64_t out_off = ((n * K + j) * Nv + h) * Dv;
    StoreRowFromF32(out.out.data, out.out.dtype, out_off, Dv, sc.o[j]);
  }
}

}  // namespace

std::vector<int64_t> DecodeTargets() {
  std::vector<int64_t> targets;
  for (int64_t t = UsableTargets(); t != 0; t &= t - 1) targets.push_back(t & -t);
  return targets;
}

void SetDecodeFixedRowLengthsForTest(bool enabled) { g_fixed_row_lengths.store(enabled, std::memory_order_relaxed); }

void DecodeBF16ToF32(const uint16_t* src, int64_t n, float* dst) { HWY_DYNAMIC_DISPATCH(BF16ToF32Row)(src, n, dst); }
void DecodeF32ToBF16(const float* src, int64_t n, uint16_t* dst) { HWY_DYNAMIC_DISPATCH(F32ToBF16Row)(src, n, dst); }

namespace {

Status ValidateAndRun(const DecodeInputs& in, const DecodeOutputs& out, const Options& opt) {
  DecodeProblem p;
  Status s = ValidateDecode(in, out, opt, &p);
  if (!s.ok()) return s;
  const int64_t items = p.N * p.Nv;
  if (items == 0) return Status::Ok();
  const int threads = ResolveThreads(opt, items, p.K * p.Dk * p.Dv);

  // Allocated before any state is written; a failure is DecodeStep's
  // kResourceExhausted. A carry buffer per thread unless every item is a
  // single step in place (no token axis, no destinations).
  // Not zeroed: every byte an item reads it has written first.
  std::unique_ptr<ItemScratch[]> scratch(new ItemScratch[static_cast<size_t>(threads)]);
  const bool in_place = p.K == 1 && !in.dst_indices.present() && !out.states.present();
  const size_t carry_bytes = in_place ? 0 : (static_cast<size_t>(p.Dk * p.Dv) * DTypeSize(p.state_dtype) + 63) / 64 * 64;
  const auto carry = hwy::AllocateAligned<uint8_t>(std::max<size_t>(1, carry_bytes * static_cast<size_t>(threads)));
  if (!carry) return Status(Code::kResourceExhausted, "decode: cannot allocate the carry buffers of the token axis");

#pragma omp parallel num_threads(threads)
  {
    const FlushDenormalsScope ftz;  // as prefill (core/fpenv.h)
#pragma omp for schedule(static)
    for (int64_t item = 0; item < items; ++item) {
      const int t = omp_get_thread_num();
      RunItem(p, in, out, item / p.Nv, item % p.Nv, scratch[t], carry.get() + carry_bytes * static_cast<size_t>(t));
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
