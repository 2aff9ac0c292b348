// Gemm() (gemm-inl.h): the register-blocked FP32 micro-kernel, compiled once
// per Highway target in its own translation unit; every bucket's item driver
// and the bf16 packing fallback call it through the declaration.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/gemm.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <algorithm>
#include <cstdint>

#include "hwy/highway.h"
#include "kernels/gemm-inl.h"

HWY_BEFORE_NAMESPACE();
namespace cgdr {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Step kk of the FMA chains: row kk of B times A[r][kk] into acc[r] for the
// block's rows r >= first (above the diagonal of a lower A: never read).
template <int R, int NV, bool kNegate>
HWY_INLINE void AccumulateStep(DF d, const Segment& s, const float* a, int64_t kk, int64_t c0, int first,
                               VF (&acc)[R][NV]) {
  const size_t N = hn::Lanes(d);
  const float* brow = s.b + kk * s.ldb + c0;
  VF b[NV];
#pragma GCC unroll 8
  for (int v = 0; v < NV; ++v) b[v] = hn::Load(d, brow + v * N);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    if (r < first) continue;
    const VF av = hn::Set(d, a[r * s.lda + kk * s.a_kstride]);
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) acc[r][v] = kNegate ? hn::NegMulAdd(av, b[v], acc[r][v]) : hn::MulAdd(av, b[v], acc[r][v]);
  }
}

template <int R, int NV, bool kNegate>
HWY_INLINE void AccumulateSegment(DF d, const Segment& s, int64_t r0, int64_t c0, VF (&acc)[R][NV]) {
  const float* a = s.a + r0 * s.lda;
  // Dense part: every row of the block may read k < r0 (or all k if not lower).
  const int64_t dense_end = s.lower ? std::min<int64_t>(s.k, r0) : s.k;
  for (int64_t kk = 0; kk < dense_end; ++kk) AccumulateStep<R, NV, kNegate>(d, s, a, kk, c0, 0, acc);
  if (!s.lower) return;
  // Triangle: k = r0 + j is read only by rows r >= j. Loops have compile-time
  // bounds so acc[][] is indexed statically and stays in registers.
#pragma GCC unroll 8
  for (int j = 0; j < R; ++j) {
    const int64_t kk = r0 + j;
    if (kk >= s.k) break;
    AccumulateStep<R, NV, kNegate>(d, s, a, kk, c0, j, acc);
  }
}

template <int R, int NV>
HWY_INLINE void GemmTile(DF d, const GemmJob& job, int64_t r0, int64_t c0) {
  VF acc[R][NV];
  InitTile(d, job.c_init, job.ld_init, job.alpha, job.row_alpha, r0, c0, acc);
  for (int s = 0; s < job.segments; ++s) {
    if (job.seg[s].negate) {
      AccumulateSegment<R, NV, true>(d, job.seg[s], r0, c0, acc);
    } else {
      AccumulateSegment<R, NV, false>(d, job.seg[s], r0, c0, acc);
    }
    ApplyRowEpilogue(d, job.seg[s].then, r0, c0, acc);
  }
  StoreTiles(d, acc, job, r0, c0);
}

// Columns [c0, c0 + NV vectors) for every row block. Column panels are the
// outer loop so one panel of B stays in L1 while all row blocks stream past.
// After each tile, the next chunk's lines that its multiply-adds pay for
// (PrefetchQueue::Credit; k_sum: GemmJob::KSum).
template <int R, int NV>
HWY_INLINE void GemmTileAndPrefetch(DF d, const GemmJob& job, int64_t r0, int64_t c0, int64_t k_sum) {
  GemmTile<R, NV>(d, job, r0, c0);
  if (job.prefetch) job.prefetch->Credit(R * NV * static_cast<int64_t>(hn::Lanes(d)) * k_sum);
}

// A plain product: one dense segment, no epilogue, C stored as it is (no
// output rows, no scaled copy): the state update S = e^(G_last) S + K^T Vdec.
HWY_INLINE bool IsPlain(const GemmJob& job) {
  const Segment& s = job.seg[0];
  return job.segments == 1 && !s.lower && !s.negate && s.then.scale == nullptr && job.also.c == nullptr &&
         job.out_rows.at == nullptr && !job.lower_result;
}

// Row blocks [0, r_end) of a plain product (IsPlain), columns [c0, c0 + NV
// vectors), from locals read once per panel (restrict pointers, row
// addresses stepped per block). The state update's tiles are short (k = C
// = 16), so what a tile does before its first multiply-add counts: through
// GemmTile they ran ~10% slower (micro-benchmark, one 128 x 64 panel of S
// in L1: 2760-2790 ns -> 2470-2540 ns; the flagship 0.5-1.5% faster).
// InitTile, AccumulateSegment and StoreTile on the same locals measured as
// slow as GemmTile, so the tile is written out here. The chains are
// GemmTile's, in the same order: the same bits. (Vnew = A X, lower and with
// a scaled copy, gained nothing from the same treatment.)
template <int R, int NV>
HWY_NOINLINE void PlainRows(const GemmJob& job, int64_t c0, int64_t r_end) {
  const DF d;
  const size_t N = hn::Lanes(d);
  const Segment& s = job.seg[0];
  const int64_t k = s.k, lda = s.lda, a_kstride = s.a_kstride, ldb = s.ldb, ldc = job.ldc, ld_init = job.ld_init;
  const float* HWY_RESTRICT b = s.b + c0;
  const float* HWY_RESTRICT a_rows = s.a;
  const float* HWY_RESTRICT c_init = job.c_init ? job.c_init + c0 : nullptr;
  float* HWY_RESTRICT c = job.c + c0;
  const VF alpha = hn::Set(d, job.alpha);
  const float* HWY_RESTRICT row_alpha = job.row_alpha;
  PrefetchQueue* const prefetch = job.prefetch;
  const int64_t tile_fmas = R * NV * static_cast<int64_t>(N) * k;
  for (int64_t r0 = 0; r0 + R <= r_end; r0 += R) {
    VF acc[R][NV];
    if (c_init) {
      const float* init = c_init + r0 * ld_init;
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        const VF a_r = row_alpha ? hn::Set(d, row_alpha[r0 + r]) : alpha;
#pragma GCC unroll 8
        for (int v = 0; v < NV; ++v) acc[r][v] = hn::Mul(a_r, hn::Load(d, init + r * ld_init + v * N));
      }
    } else {
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
        for (int v = 0; v < NV; ++v) acc[r][v] = hn::Zero(d);
    }
    const float* a = a_rows + r0 * lda;
    for (int64_t kk = 0; kk < k; ++kk) {
      VF bk[NV];
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) bk[v] = hn::Load(d, b + kk * ldb + v * N);
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        const VF ar = hn::Set(d, a[r * lda + kk * a_kstride]);
#pragma GCC unroll 8
        for (int v = 0; v < NV; ++v) acc[r][v] = hn::MulAdd(ar, bk[v], acc[r][v]);
      }
    }
    float* out = c + r0 * ldc;
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) hn::Store(acc[r][v], d, out + r * ldc + v * N);
    if (prefetch) prefetch->Credit(tile_fmas);
  }
}

template <int NV>
HWY_INLINE void GemmColumnPanel(DF d, const GemmJob& job, int64_t c0) {
  constexpr int R = RowsPerBlock<NV>();
  const int64_t k_sum = job.KSum();
  // Lower-triangular results need columns <= row only: rows before c0 skip the panel.
  int64_t r0 = job.lower_result ? std::min<int64_t>(job.rows, c0) : 0;
  if (IsPlain(job)) {  // its full row blocks in PlainRows, the rest below
    r0 = job.rows / R * R;
    PlainRows<R, NV>(job, c0, r0);
  }
  for (; r0 + R <= job.rows; r0 += R) GemmTileAndPrefetch<R, NV>(d, job, r0, c0, k_sum);
  if constexpr (R > 4) {
    for (; r0 + 4 <= job.rows; r0 += 4) GemmTileAndPrefetch<4, NV>(d, job, r0, c0, k_sum);
  }
  if constexpr (R > 2) {
    for (; r0 + 2 <= job.rows; r0 += 2) GemmTileAndPrefetch<2, NV>(d, job, r0, c0, k_sum);
  }
  for (; r0 < job.rows; ++r0) GemmTileAndPrefetch<1, NV>(d, job, r0, c0, k_sum);
}

HWY_NOINLINE void Gemm(const GemmJob& job) {
  const DF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const int64_t vecs = job.cols / N;
  int64_t v = 0;
  for (; v + kBlockVecs <= vecs; v += kBlockVecs) {
    if constexpr (kMergeTail) {
      if (vecs - v == kTailBlockVecs) {  // a merged tail panel (Panels): one block for all of it
        GemmColumnPanel<kTailBlockVecs>(d, job, v * N);
        return;
      }
    }
    GemmColumnPanel<kBlockVecs>(d, job, v * N);
  }
  switch (vecs - v) {
    case 1: GemmColumnPanel<1>(d, job, v * N); break;
    case 2: if constexpr (kBlockVecs > 2) GemmColumnPanel<2>(d, job, v * N); break;
    case 3: if constexpr (kBlockVecs > 3) GemmColumnPanel<3>(d, job, v * N); break;
    default: break;
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace cgdr
HWY_AFTER_NAMESPACE();
