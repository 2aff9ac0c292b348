// The V side of one chunk (SPEC 4 steps 4, 6, 7) on a state tile
// S [dk_pad x w_pad], FP32 between chunks (seeds 003 s.2). All three state
// products and both in-chunk V products are Gemm() calls with fused
// epilogues: the row factors (beta, e^G, e^(G_last - G)), the subtraction in
// X, the decay e^(G_last) in the update.
#if defined(CGDR_KERNELS_CHUNK_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef CGDR_KERNELS_CHUNK_INL_H_
#undef CGDR_KERNELS_CHUNK_INL_H_
#else
#define CGDR_KERNELS_CHUNK_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/phase_timers.h"
#include "hwy/highway.h"
#include "kernels/gemm-inl.h"
#include "kernels/gemm_bf16-inl.h"
#include "kernels/kside-inl.h"
#include "plan/scratch_layout.h"

HWY_BEFORE_NAMESPACE();
namespace cgdr {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// A panel of S (dk x 64 FP32) up to this size stays in L1 while the row
// blocks of Vnew and O stream past it; a larger one (Dk above 128) is read
// in row blocks that do, rather than from L2 once per row block.
constexpr int64_t kStateBlockBytes = 32 * 1024;

// Rows of S per block: the fewest equal blocks within kStateBlockBytes, even
// (the bf16 modes pair k, and an even split keeps their pairs).
HWY_INLINE int64_t StateRowsPerBlock(int64_t dk, int64_t pw) {
  const int64_t bytes = dk * pw * static_cast<int64_t>(sizeof(float));
  const int64_t blocks = std::max<int64_t>(1, (bytes + kStateBlockBytes - 1) / kStateBlockBytes);
  return RoundUp((dk + blocks - 1) / blocks, 2);
}

// job with its segment `si` (dense, A read by rows) split along k into
// blocks of `kb`: the segments before si run with the first block, those
// after with the last, and each later block continues the chains from C
// (alpha 1: exact), so every element sees the FMAs of one pass in the same
// order and the bits do not depend on the blocking. si's epilogue and the
// scaled copy come with its last block.
HWY_INLINE void GemmBlockedK(const GemmJob& job, int si, int64_t kb, Precision prec, const ScratchLayout& L,
                             float* HWY_RESTRICT base) {
  const Segment& big = job.seg[si];
  if (big.k <= kb) return GemmPrec(job, prec, L, base);  // one block: the job itself, not a copy
  for (int64_t k0 = 0; k0 < big.k; k0 += kb) {
    const bool first = k0 == 0, last = k0 + kb >= big.k;
    GemmJob part = job;
    part.segments = 0;
    if (!first) {
      part.c_init = job.c; part.ld_init = job.ldc; part.alpha = 1.0f;
    }
    if (!last) {  // the chains continue from C: only the last block stores elsewhere
      part.also = ScaledCopy{};
      part.out_rows = TensorRows{};
    }
    for (int s = 0; s < job.segments; ++s) {
      if (s == si) {
        Segment block = big;
        block.a = big.a + k0;
        block.b = big.b + k0 * big.ldb;
        block.k = std::min(kb, big.k - k0);
        if (!last) block.then = RowEpilogue{};
        part.seg[part.segments++] = block;
      } else if ((s < si && first) || (s > si && last)) {
        part.seg[part.segments++] = job.seg[s];
      }
    }
    GemmPrec(part, prec, L, base);
  }
}

// The caller's V and out rows of one item and chunk (row 0 at the item's first
// column). A column panel lying wholly inside the item's `width` columns
// reads V in X's epilogue and stores its output rows from O's tiles, rounded
// to out's dtype: no conversion passes through scratch, and the lines of V
// and out are touched between the products' tiles. Panels past `width`
// (padding of a narrow tile) go through the vb and o scratch panels
// (LoadValueTile, StoreOutputRows). width 0 (ChunkVSide's default, as in the
// phase benchmarks): every panel goes through vb and o.
struct ChunkTensors {
  TensorRows v, out;
  int64_t width = 0;
  bool direct = true;  // false: every panel through vb and o (the AMX engine's products write no rows directly)
  bool Direct(int64_t c0, int64_t pw) const { return direct && c0 + pw <= width; }
  static TensorRows Columns(const TensorRows& rows, int64_t c0) {
    TensorRows r = rows;
    r.at = static_cast<uint8_t*>(rows.at) + c0 * static_cast<int64_t>(DTypeSize(rows.dtype));
    return r;
  }
};

// Rows [r0, r1) of the item's V tile (io from ItemTensors) into the vb panels,
// row i times row_factor(i) (beta_i for Vb = diag(beta) V; 1 keeps V
// exactly), for the panels ChunkVSide does not read in place (io.Direct).
// Whole panels convert and scale in one pass over whole vectors.
template <class RowFactor>
HWY_INLINE void LoadValueTile(const ScratchLayout& L, float* HWY_RESTRICT base, const ChunkTensors& io, int64_t r0,
                              int64_t r1, const RowFactor& row_factor) {
  const Panels rp(L.c, L);
  ForDType(io.v.dtype, [&](auto tag) {
    constexpr DType kT = decltype(tag)::value;
    for (int64_t c0 = 0; c0 < L.w_pad; c0 = rp.Next(c0)) {
      const int64_t pw = rp.Width(c0), cols = std::clamp<int64_t>(io.width - c0, 0, pw);
      if (io.Direct(c0, pw)) continue;
      const uint8_t* first = static_cast<const uint8_t*>(ChunkTensors::Columns(io.v, c0).at);
      for (int64_t i = r0; i < r1; ++i) {
        const uint8_t* src = first + i * io.v.stride;
        float* dst = rp.Base(base + L.vb, c0) + i * pw;
        if (cols == pw) {
          LoadScaledVectorsAs<kT>(src, pw, row_factor(i), dst);
        } else {
          LoadRowAs<kT>(src, cols, dst, pw);
          ScaleRows(dst, pw, 1, [&](int64_t) { return row_factor(i); }, dst);
        }
      }
    }
  });
}

// Output rows [r0, r1) of the item (io from ItemTensors) from the o panels,
// for the panels ChunkVSide did not write in place (io.Direct); with
// streaming stores where out's rows take them (StreamsOutput) and the
// panel's part of each row is whole lines.
HWY_INLINE void StoreOutputRows(const ScratchLayout& L, const float* HWY_RESTRICT o, const ChunkTensors& io, int64_t r0,
                                int64_t r1) {
  const Panels rp(L.c, L);
  ForDType(io.out.dtype, [&](auto tag) {
    constexpr DType kT = decltype(tag)::value;
    for (int64_t c0 = 0; c0 < io.width; c0 = rp.Next(c0)) {
      const int64_t pw = rp.Width(c0), cols = std::min(pw, io.width - c0);
      if (io.Direct(c0, pw)) continue;
      uint8_t* row = static_cast<uint8_t*>(ChunkTensors::Columns(io.out, c0).at) + r0 * io.out.stride;
      if constexpr (kStreamableAs<kT>) {
        const bool lines = (c0 * kDTypeBytes<kT>) % kLineBytes == 0 && (cols * kDTypeBytes<kT>) % kLineBytes == 0;
        if (io.out.stream && lines) {
          for (int64_t i = r0; i < r1; ++i, row += io.out.stride) StreamRowAs<kT>(rp.Base(o, c0) + i * pw, cols, row);
          continue;
        }
      }
      for (int64_t i = r0; i < r1; ++i, row += io.out.stride) StoreRowAs<kT>(rp.Base(o, c0) + i * pw, cols, row);
    }
  });
}

// Expects the K side's results (PrepareKeyHead, PrepareValueHead) and, for
// panels not io.Direct, vb = diag(beta) V for the chunk's n rows.
// Leaves the chunk's output rows in out (io.Direct panels) or o, and the
// updated state in state.
// Works one column panel at a time: the panel of S (dk x 64 FP32 = 32 KiB
// for dk = 128 on AVX-512) stays in L1 across its three products; a larger
// one is read in row blocks (StateRowsPerBlock).
// A = (I + L)^-1 multiplies after the state product, Vnew = A (Vb - diag(beta
// e^G) K S), not before it as Kcd = A diag(beta e^G) K: the same multiply-adds
// against S, and A's product with K (c x c x dk per value head) disappears.
// prec: the three products in the plan's precision (the state stays FP32).
// prefetch: lines to issue between the products' tiles (may be null).
// The per-channel gate (KDA, docs/SPEC.md 10; kda.cc) swaps the operands:
// X reads K e^G, O reads Q e^G, the update reads K e^(G_last - G) against
// Vnew itself, and the state decays by e^G_last row by row (per key channel)
// instead of by one factor.
struct KdaOperands {
  const float* k_x = nullptr;          // null: the scalar gate's q, k with row factors
  const float* q_o = nullptr;
  const float* k_update = nullptr;
  const float* state_decay = nullptr;  // [dk_pad]
  static KdaOperands Of(const ScratchLayout& L, float* base) {
    if (!L.kda) return KdaOperands{};
    return KdaOperands{base + L.kda_k, base + L.kda_q, base + L.kda_kf, base + L.kda_decay};
  }
};

HWY_INLINE void ChunkVSide(const ScratchLayout& L, float* HWY_RESTRICT base, float* HWY_RESTRICT state, int64_t n,
                           Precision prec = Precision::kFp32, PrefetchQueue* prefetch = nullptr,
                           const ChunkTensors& io = ChunkTensors{}) {
  const int64_t dk = L.dk_pad, cp = L.c_pad;
  const Panels sp(dk, L), rp(L.c, L);  // state panels; chunk-row panels
  const ChunkVectors cv(base + L.vec, cp);
  const KdaOperands kda = KdaOperands::Of(L, base);
  const bool per_channel = kda.k_x != nullptr;
  const float decay_last = per_channel ? 1.0f : (n > 0 ? cv.eG[n - 1] : 1.0f);
  const float* q = per_channel ? kda.q_o : base + L.q;
  const float* k = per_channel ? kda.k_x : base + L.k;
  const float* k_update = per_channel ? kda.k_update : base + L.k;
  // The four jobs are built once per chunk and each panel assigns every field
  // it uses: zeroing a GemmJob (344 bytes, a `rep stos`) per panel and
  // product cost ~1% of the call (in-process A/B 0.989-0.995).
  GemmJob xj, vj, oj, sj;
  for (int64_t c0 = 0; c0 < L.w_pad; c0 = sp.Next(c0)) {
    const int64_t pw = sp.Width(c0), kb = StateRowsPerBlock(dk, pw);
    float* s = sp.Base(state, c0);
    float* x = rp.Base(base + L.x, c0);
    float* vnew = rp.Base(base + L.vnew, c0);
    float* vdec = rp.Base(base + L.vdec, c0);
    const bool direct = io.Direct(c0, pw);

    // X = Vb - diag(beta e^G) K S.
    xj.rows = n; xj.cols = pw; xj.c = x; xj.ldc = pw;
    xj.prefetch = prefetch;
    xj.seg[0] = Segment{k, dk, s, pw, dk, false, true};
    if (direct) {
      xj.seg[0].then = RowEpilogue{cv.beG, nullptr, 0, ChunkTensors::Columns(io.v, c0), cv.beta};
    } else {
      xj.seg[0].then = RowEpilogue{cv.beG, rp.Base(base + L.vb, c0), pw};
    }
    {
      CGDR_PHASE(kXProduct);
      GemmBlockedK(xj, 0, kb, prec, L, base);
    }

    // Vnew = A X, and its copy with row i times e^(G_last - G_i) for the update.
    vj.rows = n; vj.cols = pw; vj.c = vnew; vj.ldc = pw;
    vj.prefetch = prefetch;
    vj.seg[0] = Segment{base + L.attn, cp, x, pw, n, true, false};
    vj.also = per_channel ? ScaledCopy{} : ScaledCopy{vdec, pw, cv.eGl};
    {
      CGDR_PHASE(kVnewProduct);
      GemmPrec(vj, prec, L, base);
    }

    // O = diag(scale e^G) Q S + P Vnew   (scale and e^G also folded into P).
    oj.rows = n; oj.cols = pw; oj.c = rp.Base(base + L.o, c0); oj.ldc = pw; oj.segments = 2;
    oj.prefetch = prefetch;
    oj.seg[0] = Segment{q, dk, s, pw, dk, false, false};
    oj.seg[0].then = RowEpilogue{cv.qg};
    oj.seg[1] = Segment{base + L.qk, cp, vnew, pw, n, true, false};
    oj.out_rows = direct ? ChunkTensors::Columns(io.out, c0) : TensorRows{};
    {
      CGDR_PHASE(kOProduct);
      GemmBlockedK(oj, 0, kb, prec, L, base);
    }

    // S = e^(G_last) S + K^T diag(e^(G_last - G)) Vnew, with the transposed
    // operand read in place: A[r][i] = k[i][r]. Per channel:
    // S = diag(e^G_last) S + (K e^(G_last - G))^T Vnew.
    sj.rows = dk; sj.cols = pw; sj.c = s; sj.ldc = pw;
    sj.c_init = s; sj.ld_init = pw; sj.alpha = decay_last; sj.row_alpha = kda.state_decay;
    sj.prefetch = prefetch;
    sj.seg[0] = Segment{k_update, 1, per_channel ? vnew : vdec, pw, n, false, false, dk};
    CGDR_PHASE(kStateUpdate);
    GemmPrec(sj, prec, L, base);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace cgdr
HWY_AFTER_NAMESPACE();

#endif  // include guard
