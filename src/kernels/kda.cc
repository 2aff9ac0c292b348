// The K side of one chunk with the per-channel gate (KDA, docs/SPEC.md 10.4),
// compiled once per Highway target (declared in kda-inl.h). Every key
// channel i decays by its own e^(g_ti), so the decayed products of SPEC 4
// become sums over channels of e^(G_ti - G_si) terms, which no row factor can
// carry. Computing them as (Q e^G)(K e^-G)^T overflows once a chunk's
// cumulative decay passes -88 in any channel; here no exponent is ever
// positive:
//   - the chunk's rows split into blocks of kKdaBlockRows (4); block b's
//     origin o(b) is the last row of block b - 1 (the chunk's start for b = 0);
//   - R_t = e^(G_t - G_o(b_t)), F_s = e^(G_end(b_s) - G_s), E_b = e^(sum of g
//     over block b): each a running product of the rows' e^g (one exp per
//     gate; no difference of prefix sums, which would lose the small decays
//     after a large one; relative error <= 1 ulp per factor, whatever g);
//   - rows t, s of blocks b_t > b_s: e^(G_t - G_s) = R_t E_(b_s+1..b_t-1) F_s,
//     products of factors <= 1, so (Q R)(K F E..)^T neither overflows nor
//     underflows where the true value does not;
//   - inside a block: e^(G_t - G_s) = e^g_(s+1) ... e^g_t, chained.
// Then A = (I + L)^-1 (kside-inl.h's blocked inverse, unchanged) and the V
// side's operands Q e^G, K e^G and K e^(G_last - G) with the state's
// per-channel decay e^G_last (ChunkVSide's KdaOperands).
//
// One pass over the blocks in order: block b's factors, its products with
// every earlier block, the earlier blocks' K F rows times E_b (in the pass of
// those products: a pass of its own over them cost 7% of this K side), so that
// when the last block is done they hold K e^(G_last - G) for the V side
// (no separate pass for it), and e^(G_o) times E_b gives the next block's
// Q e^G, K e^G in the same pass as its R_t.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/kda.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <algorithm>
#include <cstdint>

#include "hwy/highway.h"
#include "kernels/kda-inl.h"
#include "kernels/kside-inl.h"
#include "plan/scratch_layout.h"

HWY_BEFORE_NAMESPACE();
namespace cgdr {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

constexpr int64_t kBlock = kKdaBlockRows;
static_assert(kBlock == 4, "DotsWithBlock and DiagonalBlock are written for blocks of 4 rows");

// The chunk's per-channel rows in scratch (ScratchLayout's kda_* buffers).
struct KdaRows {
  int64_t dk = 0;
  const float* eg;     // [n][dk] e^g: every decay below is a product of these
  const float* q;      // [n][dk] normalised rows
  const float* k;
  float* rel_q;        // [kBlock][dk] the current block's Q R_t ...
  float* rel_k;        // ... and K R_t: the rows t of its products with earlier blocks
  float* qd;           // [n][dk] Q e^G
  float* kd;           // [n][dk] K e^G
  float* kf;           // [n][dk] K F_s, times each later block's E: at the end K e^(G_last - G)
  float* block_decay;  // [dk] E of the current block
  float* origin;       // [dk] e^(G_o) of the current block; at the end e^(G_last)
  KdaRows(const ScratchLayout& L, float* base)
      : dk(L.dk_pad), eg(base + L.kda_g), q(base + L.q), k(base + L.k), rel_q(base + L.kda_rel),
        rel_k(base + L.kda_rel + kBlock * L.dk_pad), qd(base + L.kda_q), kd(base + L.kda_k), kf(base + L.kda_kf),
        block_decay(base + L.kda_vec), origin(base + L.kda_decay) {}
};

// Rows [b0, b1) of one block, channel by channel: R_t as the running product
// of e^g from the block's first row (Q R_t, K R_t into rel; Q e^G = Q R_t
// e^(G_o) and K e^G into qd, kd), E_b = R_(b1 - 1), F_s as the running
// product back from the block's last row (K F_s into kf); then the origin
// moves to the block's end (e^(G_o) times E_b).
HWY_INLINE void BlockFactors(const KdaRows& r, int64_t b0, int64_t b1) {
  const hn::ScalableTag<float> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d)), dk = r.dk;
  for (int64_t c = 0; c < dk; c += N) {
    const auto origin = hn::Load(d, r.origin + c);
    auto rt = hn::Set(d, 1.0f);
    for (int64_t t = b0; t < b1; ++t) {
      rt = hn::Mul(rt, hn::Load(d, r.eg + t * dk + c));
      const auto qr = hn::Mul(hn::Load(d, r.q + t * dk + c), rt);
      const auto kr = hn::Mul(hn::Load(d, r.k + t * dk + c), rt);
      hn::Store(qr, d, r.rel_q + (t - b0) * dk + c);
      hn::Store(kr, d, r.rel_k + (t - b0) * dk + c);
      hn::Store(hn::Mul(qr, origin), d, r.qd + t * dk + c);
      hn::Store(hn::Mul(kr, origin), d, r.kd + t * dk + c);
    }
    hn::Store(rt, d, r.block_decay + c);
    hn::Store(hn::Mul(origin, rt), d, r.origin + c);
    auto fs = hn::Set(d, 1.0f);
    for (int64_t s = b1 - 1; s >= b0; --s) {
      hn::Store(hn::Mul(hn::Load(d, r.k + s * dk + c), fs), d, r.kf + s * dk + c);
      fs = hn::Mul(fs, hn::Load(d, r.eg + s * dk + c));
    }
  }
}

// out[i * ldo + j] = factor(i) * (a_i . b_j) for rows i < na (<= 4) of a and
// the 4 rows j of b (a full earlier block), rows of length dk (DotBlock).
// Rows of a past na read row na - 1 and are not stored. Then, where
// rescale_b is not null, b's rows times it in place (in DotBlock's last pass
// over them: the later blocks' E, with no pass of its own).
template <class Factor>
HWY_INLINE void DotsWithBlock(const float* HWY_RESTRICT a, int64_t na, float* HWY_RESTRICT b, int64_t dk,
                              const Factor& factor, float* HWY_RESTRICT out, int64_t ldo,
                              const float* HWY_RESTRICT rescale_b = nullptr) {
#if HWY_TARGET == HWY_SCALAR
  for (int64_t i = 0; i < na; ++i) {
    for (int64_t j = 0; j < kBlock; ++j) {
      float sum = 0.0f;
      for (int64_t c = 0; c < dk; ++c) sum += a[i * dk + c] * b[j * dk + c];
      out[i * ldo + j] = factor(i) * sum;
    }
  }
  if (rescale_b != nullptr) {
    for (int64_t j = 0; j < kBlock; ++j) MulRow(b + j * dk, rescale_b, dk, b + j * dk);
  }
#else
  const hn::ScalableTag<float> d;
  const hn::FixedTag<float, 4> d4;
  const float* ar[4];
  const float* br[4];
  for (int i = 0; i < 4; ++i) ar[i] = a + std::min<int64_t>(i, na - 1) * dk;
  for (int j = 0; j < 4; ++j) br[j] = b + j * dk;
  const auto store = [&](int i, auto sums) {
    if (i < na) hn::StoreU(hn::Mul(hn::Set(d4, factor(i)), sums), d4, out + i * ldo);
  };
  if (rescale_b == nullptr) return DotBlock(ar, br, dk, store);
  DotBlock(ar, br, dk, store, [&](int64_t c, const auto& bv) {
    const auto e = hn::Load(d, rescale_b + c);
    for (int j = 0; j < 4; ++j) hn::Store(hn::Mul(bv[j], e), d, b + j * dk + c);
  });
#endif
}

// The diagonal block's entries (rows and columns [b0, b1), s <= t):
// e^(G_t - G_s) = e^g_(s+1) ... e^g_t chained from the block's e^g, then
// attn_ts = beta_t k_t . (k_s e^..) for s < t and qk_ts = scale q_t . (k_s
// e^..) for s <= t (e^0 = 1 on the diagonal).
// Vector targets: the block's 6 pairs s < t at once, in two passes over the
// channels (the k pairs with the diagonal's q . k, then the q pairs), each
// chain product formed once per pass in registers; rows past b1 read row
// b1 - 1 and are not stored.
HWY_INLINE void DiagonalBlock(const KdaRows& r, int64_t b0, int64_t b1, const float* HWY_RESTRICT beta, float scale,
                              float* HWY_RESTRICT attn, float* HWY_RESTRICT qk, int64_t cp) {
  const int64_t dk = r.dk;
#if HWY_TARGET == HWY_SCALAR
  for (int64_t s = b0; s < b1; ++s) {
    for (int64_t t = s; t < b1; ++t) {
      float dot_k = 0.0f, dot_q = 0.0f;
      for (int64_t c = 0; c < dk; ++c) {
        float e = 1.0f;
        for (int64_t u = s + 1; u <= t; ++u) e *= r.eg[u * dk + c];
        const float kse = r.k[s * dk + c] * e;
        dot_k += r.k[t * dk + c] * kse;
        dot_q += r.q[t * dk + c] * kse;
      }
      if (t > s) attn[t * cp + s] = beta[t] * dot_k;
      qk[t * cp + s] = scale * dot_q;
    }
  }
#else
  const hn::ScalableTag<float> d;
  const hn::FixedTag<float, 4> d4;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  using V = hn::Vec<decltype(d)>;
  const int64_t nb = b1 - b0;
  int64_t row[4];
  for (int i = 0; i < 4; ++i) row[i] = (b0 + std::min<int64_t>(i, nb - 1)) * dk;
  // Pair p is (s, t) = (kS[p], kT[p]) inside the block.
  constexpr int kS[6] = {0, 0, 0, 1, 1, 2};
  constexpr int kT[6] = {1, 2, 3, 2, 3, 3};
  // The decays of the six pairs at channels [c, c + N): e^g_1, e^g_1 e^g_2, ...
  const auto decays = [&](int64_t c, V (&e)[6]) {
    const V e1 = hn::Load(d, r.eg + row[1] + c), e2 = hn::Load(d, r.eg + row[2] + c), e3 = hn::Load(d, r.eg + row[3] + c);
    e[0] = e1;
    e[1] = hn::Mul(e1, e2);
    e[2] = hn::Mul(e[1], e3);
    e[3] = e2;
    e[4] = hn::Mul(e2, e3);
    e[5] = e3;
  };
  V acc_k[8], acc_q[8];  // 6 pairs (+2 zero lanes of the second SumFour); acc_q[6..7]: unused
  V acc_d[4];            // q_i . k_i
  for (int p = 0; p < 8; ++p) acc_k[p] = acc_q[p] = hn::Zero(d);
  for (int i = 0; i < 4; ++i) acc_d[i] = hn::Zero(d);
  for (int64_t c = 0; c < dk; c += N) {  // the k pairs and the diagonal
    V e[6];
    decays(c, e);
    for (int p = 0; p < 6; ++p) {
      const V kse = hn::Mul(hn::Load(d, r.k + row[kS[p]] + c), e[p]);
      acc_k[p] = hn::MulAdd(hn::Load(d, r.k + row[kT[p]] + c), kse, acc_k[p]);
    }
    for (int i = 0; i < 4; ++i) {
      acc_d[i] = hn::MulAdd(hn::Load(d, r.q + row[i] + c), hn::Load(d, r.k + row[i] + c), acc_d[i]);
    }
  }
  for (int64_t c = 0; c < dk; c += N) {  // the q pairs
    V e[6];
    decays(c, e);
    for (int p = 0; p < 6; ++p) {
      const V kse = hn::Mul(hn::Load(d, r.k + row[kS[p]] + c), e[p]);
      acc_q[p] = hn::MulAdd(hn::Load(d, r.q + row[kT[p]] + c), kse, acc_q[p]);
    }
  }
  HWY_ALIGN float sum_k[8], sum_q[8], sum_d[4];
  const auto sum_four = [&](const V* v, float* out) {
    const V four[4] = {v[0], v[1], v[2], v[3]};
    hn::Store(SumFour(d, four), d4, out);
  };
  sum_four(acc_k, sum_k);
  sum_four(acc_k + 4, sum_k + 4);
  sum_four(acc_q, sum_q);
  sum_four(acc_q + 4, sum_q + 4);
  sum_four(acc_d, sum_d);
  for (int p = 0; p < 6; ++p) {
    if (kT[p] >= nb) continue;
    const int64_t s = b0 + kS[p], t = b0 + kT[p];
    attn[t * cp + s] = beta[t] * sum_k[p];
    qk[t * cp + s] = scale * sum_q[p];
  }
  for (int64_t i = 0; i < nb; ++i) qk[(b0 + i) * cp + b0 + i] = scale * sum_d[i];
#endif
}

void KdaPrepareValueHead(const ScratchLayout& L, float* HWY_RESTRICT base, int64_t n, float scale) {
  const int64_t dk = L.dk_pad, cp = L.c_pad;
  ChunkVectors cv(base + L.vec, cp);
  const KdaRows r(L, base);
  float* attn = base + L.attn;
  float* qk = base + L.qk;
  for (int64_t i = 0; i < L.c * cp; ++i) {
    attn[i] = 0.0f;
    qk[i] = 0.0f;
  }
  for (int64_t c = 0; c < dk; ++c) r.origin[c] = 1.0f;
  for (int64_t b0 = 0; b0 < n; b0 += kBlock) {
    const int64_t b1 = std::min(n, b0 + kBlock), rows = b1 - b0;
    BlockFactors(r, b0, b1);
    // (Q R)(K F E..)^T and (K R)(K F E..)^T with every earlier block.
    // The earlier blocks' K F rows then take E_b, for the next blocks.
    for (int64_t s0 = 0; s0 < b0; s0 += kBlock) {
      DotsWithBlock(r.rel_k, rows, r.kf + s0 * dk, dk, [&](int64_t i) { return cv.beta[b0 + i]; }, attn + b0 * cp + s0, cp);
      DotsWithBlock(r.rel_q, rows, r.kf + s0 * dk, dk, [&](int64_t) { return scale; }, qk + b0 * cp + s0, cp,
                    r.block_decay);
    }
    DiagonalBlock(r, b0, b1, cv.beta, scale, attn, qk, cp);
  }
  for (int64_t i = 0; i < cp; ++i) {
    cv.beG[i] = i < n ? cv.beta[i] : 0.0f;  // X = Vb - diag(beta) (K e^G) S
    cv.qg[i] = scale;                      // O = scale (Q e^G) S + P Vnew
  }
  InvertUnitLower(attn, cp, RoundUp(n, 16), base + L.tmp);
}

}  // namespace HWY_NAMESPACE
}  // namespace cgdr
HWY_AFTER_NAMESPACE();
