// The V side of one chunk (SPEC 4 steps 4 (U), 6, 7) on a state tile
// S [dk_pad x w_pad], FP32 between chunks (seeds 003 s.2). All three state
// products and both in-chunk V products are Gemm() calls with fused
// epilogues: the subtraction in Vnew, the decay e^(G_last) in the update.
#if defined(CGDR_KERNELS_CHUNK_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef CGDR_KERNELS_CHUNK_INL_H_
#undef CGDR_KERNELS_CHUNK_INL_H_
#else
#define CGDR_KERNELS_CHUNK_INL_H_
#endif

#include <cmath>
#include <cstdint>

#include "hwy/highway.h"
#include "kernels/gemm-inl.h"
#include "kernels/kside-inl.h"
#include "plan/scratch_layout.h"

HWY_BEFORE_NAMESPACE();
namespace cgdr {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Expects PrepareKSide's results and vb = diag(beta) V for the chunk's n rows.
// Leaves the chunk's output rows in o and the updated state in state.
HWY_INLINE void ChunkVSide(const ScratchLayout& L, float* HWY_RESTRICT base, float* HWY_RESTRICT state, int64_t n) {
  const int64_t dk = L.dk_pad, cp = L.c_pad, w = L.w_pad;
  float* vnew = base + L.vnew;
  const ChunkVectors cv(base + L.vec, cp);

  // Vnew = A Vb - Kcd S   (U = A Vb fused with the subtraction).
  GemmJob vj;
  vj.rows = n; vj.cols = w; vj.c = vnew; vj.ldc = w; vj.segments = 2;
  vj.seg[0] = Segment{base + L.attn, cp, base + L.vb, w, n, true, false};
  vj.seg[1] = Segment{base + L.kcd, dk, state, w, dk, false, true};
  Gemm(vj);

  // O = scale diag(e^G) Q S + P Vnew   (scale and e^G folded into q and P).
  GemmJob oj;
  oj.rows = n; oj.cols = w; oj.c = base + L.o; oj.ldc = w; oj.segments = 2;
  oj.seg[0] = Segment{base + L.q, dk, state, w, dk, false, false};
  oj.seg[1] = Segment{base + L.qk, cp, vnew, w, n, true, false};
  Gemm(oj);

  // S = e^(G_last) S + (diag(e^(G_last - G)) K)^T Vnew.
  GemmJob sj;
  sj.rows = dk; sj.cols = w; sj.c = state; sj.ldc = w;
  sj.c_init = state; sj.ld_init = w; sj.alpha = n > 0 ? cv.eG[n - 1] : 1.0f;
  // (e^(G_last - G) K)^T read in place: A[r][i] = k[i][r].
  sj.seg[0] = Segment{base + L.k, 1, vnew, w, n, false, false, dk};
  Gemm(sj);
}

}  // namespace HWY_NAMESPACE
}  // namespace cgdr
HWY_AFTER_NAMESPACE();

#endif  // include guard
