// The K side of one chunk with the per-channel gate (KDA, docs/SPEC.md 10):
// every key channel i decays by its own e^(g_ti), so the decayed products
// of SPEC 4 become sums over channels of e^(G_ti - G_si) terms, which no
// row factor can carry. Computing them as (Q e^G)(K e^-G)^T overflows once a
// chunk's cumulative decay passes -88 in any channel; here no exponent is
// ever positive:
//   - the chunk's rows split into blocks of kKdaBlockRows (4); block b's origin o(b) is the
//     last row of block b - 1 (the chunk's start for b = 0);
//   - R_t = e^(G_t - G_o(b_t)), F_s = e^(G_end(b_s) - G_s), E_b = e^(sum of g
//     over block b): each a running product of the rows' e^g (one exp per
//     gate; no difference of prefix sums, which would lose the small decays
//     after a large one; relative error <= 1 ulp per factor, whatever g);
//   - rows t, s of blocks b_t > b_s: e^(G_t - G_s) = R_t E_(b_s+1..b_t-1) F_s,
//     products of factors <= 1, so (Q R)(K F E)^T neither overflows nor
//     underflows where the true value does not;
//   - inside a block: e^(G_t - G_s) = e^g_(s+1) ... e^g_t, chained.
// Then A = (I + L)^-1 (the blocked inverse of kside-inl.h, unchanged) and the
// V side's operands Q e^G, K e^G and K e^(G_last - G) with the state's
// per-channel decay e^G_last (ChunkVSide's KdaOperands).
//
// Per-target code: included once per Highway target.
#if defined(CGDR_KERNELS_KDA_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef CGDR_KERNELS_KDA_INL_H_
#undef CGDR_KERNELS_KDA_INL_H_
#else
#define CGDR_KERNELS_KDA_INL_H_
#endif

#include <algorithm>
#include <cstdint>

#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"
#include "kernels/kside-inl.h"
#include "plan/scratch_layout.h"

HWY_BEFORE_NAMESPACE();
namespace cgdr {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

constexpr int64_t kKdaBlock = kKdaBlockRows;

// The per-channel vectors of one chunk inside ScratchLayout::kda_vec.
struct KdaVectors {
  float* block_decay;  // [blocks][dk] E_b
  float* chain;        // [dk] running product inside a diagonal block
  float* running;      // [dk] running product over blocks
  float* state_decay;  // [dk] e^(G_last): the carried state's decay per channel
  KdaVectors(const ScratchLayout& L, float* base) {
    float* v = base + L.kda_vec;
    const int64_t blocks = L.c_pad / kKdaBlock;
    block_decay = v;
    chain = v + blocks * L.dk_pad;
    running = chain + L.dk_pad;
    state_decay = base + L.kda_decay;
  }
};

// dst[i] = a[i] * b[i] for i < dk (a multiple of the lanes); dst may be a or b.
HWY_INLINE void MulRow(const float* a, const float* b, int64_t dk, float* dst) {
  const hn::ScalableTag<float> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  for (int64_t c = 0; c < dk; c += N) hn::Store(hn::Mul(hn::Load(d, a + c), hn::Load(d, b + c)), d, dst + c);
}

// c[i * ldc + j] = factor(i) * (a_i . b_j) for i < na, j < nb (both <= 16),
// rows of length dk: 4 x 4 blocks of dot products reduced at the end
// (SumFour), indices clamped so padded lanes read real rows and are not stored.
template <class Factor>
HWY_INLINE void BlockDots(const float* HWY_RESTRICT a, int64_t na, const float* HWY_RESTRICT b, int64_t nb, int64_t dk,
                          const Factor& factor, float* HWY_RESTRICT c, int64_t ldc) {
#if HWY_TARGET == HWY_SCALAR
  for (int64_t i = 0; i < na; ++i) {
    for (int64_t j = 0; j < nb; ++j) {
      float sum = 0.0f;
      for (int64_t r = 0; r < dk; ++r) sum += a[i * dk + r] * b[j * dk + r];
      c[i * ldc + j] = factor(i) * sum;
    }
  }
#else
  const hn::ScalableTag<float> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  using V = hn::Vec<decltype(d)>;
  const hn::FixedTag<float, 4> d4;
  for (int64_t i0 = 0; i0 < na; i0 += 4) {
    const float* ar[4];
    for (int ii = 0; ii < 4; ++ii) ar[ii] = a + std::min<int64_t>(i0 + ii, na - 1) * dk;
    for (int64_t j0 = 0; j0 < nb; j0 += 4) {
      const float* br[4];
      for (int jj = 0; jj < 4; ++jj) br[jj] = b + std::min<int64_t>(j0 + jj, nb - 1) * dk;
      V acc[4][4];
      for (int ii = 0; ii < 4; ++ii)
        for (int jj = 0; jj < 4; ++jj) acc[ii][jj] = hn::Zero(d);
      for (int64_t r = 0; r < dk; r += N) {
        V bv[4];
        for (int jj = 0; jj < 4; ++jj) bv[jj] = hn::Load(d, br[jj] + r);
        for (int ii = 0; ii < 4; ++ii) {
          const V av = hn::Load(d, ar[ii] + r);
          for (int jj = 0; jj < 4; ++jj) acc[ii][jj] = hn::MulAdd(av, bv[jj], acc[ii][jj]);
        }
      }
      for (int ii = 0; ii < 4 && i0 + ii < na; ++ii) {
        HWY_ALIGN float sums[4];
        hn::Store(SumFour(d, acc[ii]), d4, sums);
        for (int jj = 0; jj < 4 && j0 + jj < nb; ++jj) c[(i0 + ii) * ldc + j0 + jj] = factor(i0 + ii) * sums[jj];
      }
    }
  }
#endif
}

// Rows [b0, b1) of one block: R_t (Q R, K R into kda_q, kda_k), F_s (K F
// into kda_kf) and E_b, as running products of e^g (kda_g after ExpRows).
HWY_INLINE void BlockFactors(const ScratchLayout& L, float* HWY_RESTRICT base, int64_t dk, int64_t b0, int64_t b1,
                             float* HWY_RESTRICT block_decay) {
  const hn::ScalableTag<float> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const float* eg = base + L.kda_g;
  const float* q = base + L.q;
  const float* k = base + L.k;
  float* qr = base + L.kda_q;
  float* kr = base + L.kda_k;
  float* kf = base + L.kda_kf;
  for (int64_t c = 0; c < dk; c += N) {
    auto r = hn::Set(d, 1.0f);  // e^g from the block's first row to t: R_t
    for (int64_t t = b0; t < b1; ++t) {
      r = hn::Mul(r, hn::Load(d, eg + t * dk + c));
      hn::Store(hn::Mul(hn::Load(d, q + t * dk + c), r), d, qr + t * dk + c);
      hn::Store(hn::Mul(hn::Load(d, k + t * dk + c), r), d, kr + t * dk + c);
    }
    hn::Store(r, d, block_decay + c);
    auto f = hn::Set(d, 1.0f);  // e^g from s + 1 to the block's last row: F_s
    for (int64_t s = b1 - 1; s >= b0; --s) {
      hn::Store(hn::Mul(hn::Load(d, k + s * dk + c), f), d, kf + s * dk + c);
      f = hn::Mul(f, hn::Load(d, eg + s * dk + c));
    }
  }
}

// The diagonal block's entries (rows and columns [b0, b1)): for s <= t,
// e^(G_t - G_s) = e^g_(s+1) ... e^g_t chained, then
// attn_ts = beta_t k_t . (k_s e^..) for s < t and qk_ts = scale q_t . (k_s e^..).
// Columns s one at a time, rows t four at a time: the chain stays in a
// register along the four, and their eight sums reduce together (SumFour).
HWY_INLINE void DiagonalBlock(const ScratchLayout& L, float* HWY_RESTRICT base, int64_t dk, int64_t b0, int64_t b1,
                              const float* HWY_RESTRICT beta, float scale, float* HWY_RESTRICT chain) {
  const hn::ScalableTag<float> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const int64_t cp = L.c_pad;
  const float* eg = base + L.kda_g;
  const float* q = base + L.q;
  const float* k = base + L.k;
  float* attn = base + L.attn;
  float* qk = base + L.qk;
  for (int64_t s = b0; s < b1; ++s) {
    const float* ks = k + s * dk;
    auto dot_qk = hn::Zero(d);
    for (int64_t c = 0; c < dk; c += N) {
      hn::Store(hn::Set(d, 1.0f), d, chain + c);
      dot_qk = hn::MulAdd(hn::Load(d, q + s * dk + c), hn::Load(d, ks + c), dot_qk);
    }
    qk[s * cp + s] = scale * hn::GetLane(hn::SumOfLanes(d, dot_qk));
    for (int64_t t0 = s + 1; t0 < b1; t0 += 4) {
      const int64_t nt = std::min<int64_t>(4, b1 - t0);
#if HWY_TARGET == HWY_SCALAR
      for (int64_t j = 0; j < nt; ++j) {
        const int64_t t = t0 + j;
        float dot_k = 0.0f, dot_q = 0.0f;
        for (int64_t c = 0; c < dk; ++c) {
          chain[c] *= eg[t * dk + c];
          const float kse = ks[c] * chain[c];
          dot_k += k[t * dk + c] * kse;
          dot_q += q[t * dk + c] * kse;
        }
        attn[t * cp + s] = beta[t] * dot_k;
        qk[t * cp + s] = scale * dot_q;
      }
#else
      using V = hn::Vec<decltype(d)>;
      V acc_k[4], acc_q[4];
      for (int j = 0; j < 4; ++j) acc_k[j] = acc_q[j] = hn::Zero(d);
      for (int64_t c = 0; c < dk; c += N) {
        V e = hn::Load(d, chain + c);
        const V kc = hn::Load(d, ks + c);
        for (int j = 0; j < 4; ++j) {  // unrolled; nt is the same for the whole group
          if (j >= nt) break;
          const int64_t t = t0 + j;
          e = hn::Mul(e, hn::Load(d, eg + t * dk + c));
          const V kse = hn::Mul(kc, e);
          acc_k[j] = hn::MulAdd(hn::Load(d, k + t * dk + c), kse, acc_k[j]);
          acc_q[j] = hn::MulAdd(hn::Load(d, q + t * dk + c), kse, acc_q[j]);
        }
        hn::Store(e, d, chain + c);
      }
      const hn::FixedTag<float, 4> d4;
      HWY_ALIGN float sum_k[4], sum_q[4];
      hn::Store(SumFour(d, acc_k), d4, sum_k);
      hn::Store(SumFour(d, acc_q), d4, sum_q);
      for (int64_t j = 0; j < nt; ++j) {
        attn[(t0 + j) * cp + s] = beta[t0 + j] * sum_k[j];
        qk[(t0 + j) * cp + s] = scale * sum_q[j];
      }
#endif
    }
  }
}

// e^x over rows [0, n) of width dk, in place.
HWY_INLINE void ExpRows(float* HWY_RESTRICT x, int64_t dk, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  for (int64_t i = 0; i < n * dk; i += N) hn::Store(hn::Exp(d, hn::Load(d, x + i)), d, x + i);
}

// The K side of a chunk of n rows for one value head, per channel: expects
// q, k (normalised, zero-padded to dk_pad) in L.q, L.k, the log-decays in
// L.kda_g ([n][dk_pad], padding 0) and beta in the ChunkVectors. Leaves
//   attn = A = (I + L)^-1, qk = P (lower, incl. the diagonal, scaled),
//   kda_q = Q e^G, kda_k = K e^G, kda_kf = K e^(G_last - G), state_decay = e^G_last,
// and the row factors beta (X) and scale (O) where ChunkVSide reads them.
template <int kDkPad>
HWY_INLINE void KdaPrepareValueHead(const ScratchLayout& L, float* HWY_RESTRICT base, int64_t n, float scale) {
  const int64_t dk = kDkPad ? kDkPad : L.dk_pad, cp = L.c_pad;
  ChunkVectors cv(base + L.vec, cp);
  KdaVectors kv(L, base);
  const int64_t blocks = (n + kKdaBlock - 1) / kKdaBlock;
  const auto block_end = [n](int64_t b) { return std::min(n, (b + 1) * kKdaBlock); };
  float* attn = base + L.attn;
  float* qk = base + L.qk;
  for (int64_t i = 0; i < L.c * cp; ++i) {
    attn[i] = 0.0f;
    qk[i] = 0.0f;
  }
  ExpRows(base + L.kda_g, dk, n);  // e^g: every decay below is a product of these
  for (int64_t b = 0; b < blocks; ++b) {
    BlockFactors(L, base, dk, b * kKdaBlock, block_end(b), kv.block_decay + b * dk);
  }

  // Blocks below the diagonal: (Q R)(K F E..)^T and (K R)(K F E..)^T.
  const float* qr = base + L.kda_q;
  const float* kr = base + L.kda_k;
  float* blk = base + L.kda_blk;
  for (int64_t bs = 0; bs + 1 < blocks; ++bs) {
    const int64_t s0 = bs * kKdaBlock;
    for (int64_t i = 0; i < kKdaBlock * dk; ++i) blk[i] = base[L.kda_kf + s0 * dk + i];
    for (int64_t bt = bs + 1; bt < blocks; ++bt) {
      if (bt > bs + 1) {
        for (int64_t s = 0; s < kKdaBlock; ++s) MulRow(blk + s * dk, kv.block_decay + (bt - 1) * dk, dk, blk + s * dk);
      }
      const int64_t t0 = bt * kKdaBlock, rows = block_end(bt) - t0;
      BlockDots(kr + t0 * dk, rows, blk, kKdaBlock, dk, [&](int64_t i) { return cv.beta[t0 + i]; }, attn + t0 * cp + s0, cp);
      BlockDots(qr + t0 * dk, rows, blk, kKdaBlock, dk, [&](int64_t) { return scale; }, qk + t0 * cp + s0, cp);
    }
  }
  for (int64_t b = 0; b < blocks; ++b) DiagonalBlock(L, base, dk, b * kKdaBlock, block_end(b), cv.beta, scale, kv.chain);

  // The V side's operands: rows of block b times the decay of the blocks
  // before it (Q e^G, K e^G) or after it (K e^(G_last - G)).
  float* qd = base + L.kda_q;
  float* kd = base + L.kda_k;
  float* kl = base + L.kda_kf;
  for (int64_t c = 0; c < dk; ++c) kv.running[c] = 1.0f;
  for (int64_t b = 0; b < blocks; ++b) {
    if (b > 0) {
      MulRow(kv.running, kv.block_decay + (b - 1) * dk, dk, kv.running);
      for (int64_t t = b * kKdaBlock; t < block_end(b); ++t) {
        MulRow(qd + t * dk, kv.running, dk, qd + t * dk);
        MulRow(kd + t * dk, kv.running, dk, kd + t * dk);
      }
    }
  }
  MulRow(kv.running, kv.block_decay + (blocks - 1) * dk, dk, kv.state_decay);
  for (int64_t c = 0; c < dk; ++c) kv.running[c] = 1.0f;
  for (int64_t b = blocks - 1; b >= 0; --b) {
    if (b < blocks - 1) {
      MulRow(kv.running, kv.block_decay + (b + 1) * dk, dk, kv.running);
      for (int64_t s = b * kKdaBlock; s < block_end(b); ++s) MulRow(kl + s * dk, kv.running, dk, kl + s * dk);
    }
  }
  for (int64_t i = 0; i < cp; ++i) {
    cv.beG[i] = i < n ? cv.beta[i] : 0.0f;  // X = Vb - diag(beta) (K e^G) S
    cv.qg[i] = scale;                      // O = scale (Q e^G) S + P Vnew
  }
  const int64_t nb = RoundUp(n, 16);
  InvertUnitLower(attn, cp, nb, base + L.tmp);
}

}  // namespace HWY_NAMESPACE
}  // namespace cgdr
HWY_AFTER_NAMESPACE();

#endif  // include guard
