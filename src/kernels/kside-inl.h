// K-side preparation of one chunk (SPEC 4 steps 1-5; seeds 001 Phases 1-5)
// and the blocked inverse A = (I + L)^-1 (seeds 000 sections 5.7-5.10).
// Everything here depends on q, k, beta, g only, never on V.
#if defined(CGDR_KERNELS_KSIDE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef CGDR_KERNELS_KSIDE_INL_H_
#undef CGDR_KERNELS_KSIDE_INL_H_
#else
#define CGDR_KERNELS_KSIDE_INL_H_
#endif

#include <cmath>
#include <cstdint>

#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"
#include "kernels/gemm-inl.h"
#include "kernels/gemm_bf16-inl.h"
#include "kernels/transpose-inl.h"
#include "plan/scratch_layout.h"

HWY_BEFORE_NAMESPACE();
namespace cgdr {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Per-chunk vectors inside ScratchLayout::vec (c_pad floats each).
struct ChunkVectors {
  float* beta;   // beta_i
  float* g;      // g_i (0 when g is absent)
  float* G;      // in-chunk prefix sum of g (never a global one: seeds 001 s.6)
  float* eG;     // exp(G_i)
  float* eGl;    // exp(G_last - G_i)
  float* D;      // one row of D_ij = G_i - G_j = g_(j+1) + ... + g_i, built row by row
  float* beG;    // beta_i exp(G_i): the row factor of K S in X (ChunkVSide)
  float* qg;     // scale exp(G_i): the row factor of Q S in O
  explicit ChunkVectors(float* vec, int64_t c_pad)
      : beta(vec), g(vec + c_pad), G(vec + 2 * c_pad), eG(vec + 3 * c_pad), eGl(vec + 4 * c_pad), D(vec + 5 * c_pad),
        beG(vec + 6 * c_pad), qg(vec + 7 * c_pad) {}
  static constexpr int64_t kCount = 8;  // vectors above
  static_assert(kCount == kChunkVectors, "ScratchLayout::vec holds kChunkVectors vectors of c_pad floats");
};

// The 16x16 diagonal blocks by forward substitution on rows of 16 lanes:
// X_i = e_i - sum_{j<i} L_ij X_j, overwriting L in place. Column by column
// (right-looking): once X_j is final, every later row subtracts L_ij X_j, so
// the 15 - j updates of step j are independent and the dependency chain is
// 15 FMAs long instead of 120 (row by row). Each element still sees the
// same FMAs in the same order (j ascending), so the bits are those of the
// row-by-row recurrence.
HWY_INLINE void InvertDiagonalBlocks(float* HWY_RESTRICT m, int64_t ld, int64_t n_blocked) {
  const hn::ScalableTag<float> d;
  using V = hn::Vec<decltype(d)>;
  constexpr int64_t kB = 16;
  constexpr int64_t N = static_cast<int64_t>(hn::MaxLanes(hn::ScalableTag<float>()));
  constexpr int64_t kVecs = (kB + N - 1) / N;  // vectors per row of a block
  for (int64_t o = 0; o < n_blocked; o += kB) {
    V x[kB][kVecs];
    for (int64_t i = 0; i < kB; ++i)
      for (int64_t v = 0; v < kVecs; ++v) x[i][v] = hn::Zero(d);
    for (int64_t j = 0; j < kB; ++j) {
      // X_j is final: its unit diagonal (the entries right of it are exact zeros from the sums).
      x[j][j / N] = hn::IfThenElse(hn::Eq(hn::Iota(d, 0), hn::Set(d, static_cast<float>(j % N))), hn::Set(d, 1.0f),
                                   x[j][j / N]);
      for (int64_t i = j + 1; i < kB; ++i) {
        const V lij = hn::Set(d, m[(o + i) * ld + o + j]);
        for (int64_t v = 0; v < kVecs; ++v) x[i][v] = hn::NegMulAdd(lij, x[j][v], x[i][v]);
      }
    }
    for (int64_t i = 0; i < kB; ++i)
      for (int64_t v = 0; v < kVecs; ++v) hn::Store(x[i][v], d, m + (o + i) * ld + o + v * N);
  }
}

// A = (I + L)^-1 for strictly lower L held in m (n_blocked x n_blocked,
// a multiple of 16; rows past the chunk are zero, i.e. identity rows).
// Diagonal blocks first, then for s = 16, 32, ...: for each pair of s-blocks
//   A10 = -A11 (L10 A00)   (seeds: U10 = U11 A10 U00)
HWY_INLINE void InvertUnitLower(float* HWY_RESTRICT m, int64_t ld, int64_t n_blocked, float* HWY_RESTRICT tmp) {
  InvertDiagonalBlocks(m, ld, n_blocked);
  for (int64_t s = 16; s < n_blocked; s *= 2) {
    for (int64_t o = 0; o + s < n_blocked; o += 2 * s) {
      const int64_t rows = std::min(s, n_blocked - (o + s));  // the second block may be short
      float* a00 = m + o * ld + o;
      float* l10 = m + (o + s) * ld + o;
      float* a11 = m + (o + s) * ld + (o + s);
      GemmJob t1;  // tmp = L10 A00
      t1.rows = rows; t1.cols = s; t1.c = tmp; t1.ldc = ld;
      t1.seg[0] = Segment{l10, ld, a00, ld, s, false, false};
      Gemm(t1);
      GemmJob t2;  // A10 = -A11 tmp  (overwrites L10, already consumed)
      t2.rows = rows; t2.cols = s; t2.c = l10; t2.ldc = ld;
      t2.seg[0] = Segment{a11, ld, tmp, ld, rows, true, true};
      Gemm(t2);
    }
  }
}

// kt[r][i] = k[i][r] for i < n, 0 for n <= i < cp: N x N tiles transposed
// in registers (transpose-inl.h), then the columns past n zeroed (rows n..
// of k may be stale; nothing else reads them). dk and cp: multiples of the
// lanes.
HWY_INLINE void TransposeRows(const float* HWY_RESTRICT k, int64_t dk, int64_t n, int64_t cp, float* HWY_RESTRICT kt) {
  const int64_t N = static_cast<int64_t>(hn::Lanes(hn::ScalableTag<float>()));
  for (int64_t i0 = 0; i0 < cp; i0 += N) {
    for (int64_t r0 = 0; r0 < dk; r0 += N) TransposeTile(k + i0 * dk + r0, dk, kt + r0 * cp + i0, cp);
  }
  for (int64_t r = 0; r < dk && n < cp; ++r) {
    for (int64_t i = n; i < cp; ++i) kt[r * cp + i] = 0.0f;
  }
}

#if HWY_TARGET != HWY_SCALAR
// Lanes of v summed per 128-bit block, blocks added until one is left.
template <class D, class V>
HWY_INLINE auto SumBlocks(D d, V v) {
  if constexpr (hn::MaxLanes(d) * sizeof(float) > 16) {
    const hn::Half<D> dh;
    return SumBlocks(dh, hn::Add(hn::LowerHalf(dh, v), hn::UpperHalf(dh, v)));
  } else {
    return v;
  }
}

// Lane j of the result: the sum of all lanes of acc[j] (four dot products
// from their lane-wise partial sums): pairs of vectors interleaved and added
// within each 128-bit block, then pairs of pairs, then the blocks.
template <class D, class V>
HWY_INLINE auto SumFour(D d, const V (&acc)[4]) {
  const hn::Repartition<uint64_t, D> d64;
  const V x01 = hn::Add(hn::InterleaveLower(d, acc[0], acc[1]), hn::InterleaveUpper(d, acc[0], acc[1]));
  const V x23 = hn::Add(hn::InterleaveLower(d, acc[2], acc[3]), hn::InterleaveUpper(d, acc[2], acc[3]));
  const auto w01 = hn::BitCast(d64, x01), w23 = hn::BitCast(d64, x23);
  const V x = hn::Add(hn::BitCast(d, hn::InterleaveLower(d64, w01, w23)), hn::BitCast(d, hn::InterleaveUpper(d64, w01, w23)));
  return SumBlocks(d, x);
}
#endif  // HWY_TARGET != HWY_SCALAR

#if HWY_TARGET != HWY_SCALAR
// Rows of a per register block in DotBlock: 4 x 4 accumulators and 4
// operands fit AVX-512's 32 vector registers; of the 16 elsewhere 4 x 4
// spilled (AMD EPYC Zen 3, C = 16, Dk = 128: KDA's products with earlier
// blocks took 3.0 us a chunk against 1.3 us in blocks of 2), so two blocks
// of 2 x 4 (8 accumulators) there.
#if HWY_TARGET <= HWY_AVX3
constexpr int kDotBlockRows = 4;
#else
constexpr int kDotBlockRows = 2;
#endif

// The 16 dot products a_i . b_j of rows ar[0..3] and br[0..3] of length dk
// (a multiple of the lanes): lane-wise chains, each row's four sums reduced
// together (SumFour); store(i, v) receives row i, lane j of v = a_i . b_j.
// Shared by K K^T, Q K^T (LowerDotProducts) and KDA's products with earlier
// blocks (kda.cc).
// last_b_use(r, bv): called on the last pass with the b rows' vectors at
// channel r, after their last multiply-add (KDA rescales them there, in
// place, without a pass of its own).
template <class Store, class LastBUse>
HWY_INLINE void DotBlock(const float* const (&ar)[4], const float* const (&br)[4], int64_t dk, const Store& store,
                         const LastBUse& last_b_use) {
  const hn::ScalableTag<float> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  using V = hn::Vec<decltype(d)>;
  constexpr int R = kDotBlockRows;
  for (int i0 = 0; i0 < 4; i0 += R) {
    V acc[R][4];
    for (int i = 0; i < R; ++i)
      for (int j = 0; j < 4; ++j) acc[i][j] = hn::Zero(d);
    for (int64_t r = 0; r < dk; r += N) {
      V bv[4];
      for (int j = 0; j < 4; ++j) bv[j] = hn::Load(d, br[j] + r);
      for (int i = 0; i < R; ++i) {
        const V av = hn::Load(d, ar[i0 + i] + r);
        for (int j = 0; j < 4; ++j) acc[i][j] = hn::MulAdd(av, bv[j], acc[i][j]);
      }
      if (i0 + R == 4) last_b_use(r, bv);
    }
    for (int i = 0; i < R; ++i) store(i0 + i, SumFour(d, acc[i]));
  }
}
template <class Store>
HWY_INLINE void DotBlock(const float* const (&ar)[4], const float* const (&br)[4], int64_t dk, const Store& store) {
  DotBlock(ar, br, dk, store, [](int64_t, const auto&) {});
}
#endif

// c[i][j] = sum_r a[i][r] k[j][r] for j <= i < n (K K^T, Q K^T: SPEC 4 steps
// 2 and 5), as dot products along r: blocks of 4 x 4 (i, j) (DotBlock).
// No transpose of K and only the blocks on or below the diagonal.
// Entries right of the diagonal inside a diagonal block are written too
// (never read: the masks of ApplyDecayMasks select them away). Rows past n
// are never read: the block's row indices are clamped to n - 1 and those
// rows not stored. dk: a multiple of the lanes (rows zero-padded to dk_pad).
HWY_INLINE void LowerDotProducts(const float* HWY_RESTRICT a, const float* HWY_RESTRICT k, int64_t dk, int64_t n,
                                 int64_t cp, float* HWY_RESTRICT c) {
#if HWY_TARGET == HWY_SCALAR  // no 128-bit blocks: plain chains
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j <= i; ++j) {
      float sum = 0.0f;
      for (int64_t r = 0; r < dk; ++r) sum += a[i * dk + r] * k[j * dk + r];
      c[i * cp + j] = sum;
    }
  }
#else
  const hn::FixedTag<float, 4> d4;
  for (int64_t i0 = 0; i0 < n; i0 += 4) {
    const float* ar[4];
    for (int ii = 0; ii < 4; ++ii) ar[ii] = a + std::min<int64_t>(i0 + ii, n - 1) * dk;
    for (int64_t j0 = 0; j0 <= i0; j0 += 4) {
      const float* kr[4];
      for (int jj = 0; jj < 4; ++jj) kr[jj] = k + std::min<int64_t>(j0 + jj, n - 1) * dk;
      DotBlock(ar, kr, dk, [&](int ii, auto sums) {
        if (i0 + ii < n) hn::StoreU(sums, d4, c + (i0 + ii) * cp + j0);
      });
    }
  }
#endif
}

// Epilogue of K K^T and Q K^T (SPEC 4 steps 3 and 5), a vector of columns at
// a time: L_ij = [j < i] beta_i (K K^T)_ij e^(G_i - G_j),
// P_ij = [j <= i] (Q K^T)_ij e^(G_i - G_j) scale. Entries right of the
// diagonal are selected to zero, never multiplied (they may be unwritten).
// The exponents G_i - G_j are summed directly, D_ij = D_(i-1)j + g_i, not
// subtracted from prefix sums: after one strong decay (g = -200) G is large
// and G_i - G_j would lose the digits of the small decays that follow, and
// decays of -FLT_MAX would give (-Inf) - (-Inf). As a by-product the last row
// gives e^(G_last - G_j) for the state update.
// kkt, qkt: the raw products of the key head (PrepareKeyHead), read only.
HWY_INLINE void ApplyDecayMasks(const ChunkVectors& cv, int64_t n, int64_t cp, float scale, const float* HWY_RESTRICT kkt,
                                const float* HWY_RESTRICT qkt, float* HWY_RESTRICT attn, float* HWY_RESTRICT qk) {
  const hn::ScalableTag<float> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const auto vscale = hn::Set(d, scale);
  for (int64_t j = 0; j < cp; ++j) cv.D[j] = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    const auto gi = hn::Set(d, cv.g[i]);
    const auto bi = hn::Set(d, cv.beta[i]);
    for (int64_t c = 0; c < cp; c += N) {
      float* a = attn + i * cp + c;
      float* p = qk + i * cp + c;
      if (c > i) {
        hn::Store(hn::Zero(d), d, a);
        hn::Store(hn::Zero(d), d, p);
        continue;
      }
      const auto strict = hn::FirstN(d, static_cast<size_t>(i - c));
      const auto incl = hn::FirstN(d, static_cast<size_t>(i - c + 1));
      // Row i of D: previous row plus g_i for j < i, 0 on the diagonal.
      const auto dij = hn::IfThenElseZero(strict, i > 0 ? hn::Add(hn::Load(d, cv.D + c), gi) : hn::Zero(d));
      hn::Store(dij, d, cv.D + c);
      const auto decay = hn::Exp(d, dij);  // exp of a difference, never exp(G_i) * exp(-G_j)
      hn::Store(hn::IfThenElseZero(strict, hn::Mul(hn::Mul(hn::Load(d, kkt + i * cp + c), decay), bi)), d, a);
      hn::Store(hn::IfThenElseZero(incl, hn::Mul(hn::Mul(hn::Load(d, qkt + i * cp + c), decay), vscale)), d, p);
    }
  }
  // e^(G_last - G_j) = e^(D_(n-1)j); 1 for j >= n - 1 (D is 0 there).
  for (int64_t c = 0; c < cp; c += N) hn::Store(hn::Exp(d, hn::Load(d, cv.D + c)), d, cv.eGl + c);
}

// dst row i = factor(i) * src row i, for rows [0, n) of width dk (a multiple
// of the lanes); dst may be src (each element is read before it is written).
template <class Factor>
HWY_INLINE void ScaleRows(const float* src, int64_t dk, int64_t n, const Factor& factor, float* dst) {
  const hn::ScalableTag<float> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  for (int64_t i = 0; i < n; ++i) {
    const auto f = hn::Set(d, factor(i));
    for (int64_t c = 0; c < dk; c += N) hn::Store(hn::Mul(f, hn::Load(d, src + i * dk + c)), d, dst + i * dk + c);
  }
}

// The K side of a chunk in two stages, so that what does not depend on the
// value head is computed once per key head (GQA: Nv / Nk value heads share
// q and k) and what does not depend on V once per value head (its V tiles).
// A stage's results depend only on its inputs, so sharing them changes no bit.
//
// kDkPad: the Dk bucket (64, 80, 96, 128) as a compile-time trip count, or 0
// for the generic path (SPEC 5, seeds' kSpecializedDk).
// prec: K K^T and Q K^T in the plan's precision (the inverse stays FP32).

// Stage 1, per key head, from the n rows of q and k (normalised):
//   kkt = K K^T, qkt = Q K^T (lower triangles incl. the diagonal).
// FP32: dot products along Dk (LowerDotProducts), 3.5-8% of the whole call
// faster than K^T by gathers and outer-product blocks of 8 x 1 vector, which
// load 9 operands per 8 FMAs (in-process A/B: flagship 1.5-6.8%, Nk = Nv
// 5-6%, Dk = 64 8.5%). The bf16 modes keep the packed products on kt = K^T.
template <int kDkPad>
HWY_INLINE void PrepareKeyHead(const ScratchLayout& L, float* HWY_RESTRICT base, int64_t n,
                               Precision prec = Precision::kFp32) {
  const int64_t dk = kDkPad ? kDkPad : L.dk_pad, cp = L.c_pad;
  if (prec == Precision::kFp32) {
    LowerDotProducts(base + L.k, base + L.k, dk, n, cp, base + L.kkt);
    LowerDotProducts(base + L.q, base + L.k, dk, n, cp, base + L.qkt);
    return;
  }
  // The bf16 modes' packed products read B = K^T by rows.
  float* kt = base + L.kt;
  TransposeRows(base + L.k, dk, n, cp, kt);
  GemmJob kk;
  kk.rows = n; kk.cols = cp; kk.c = base + L.kkt; kk.ldc = cp; kk.lower_result = true;
  kk.seg[0] = Segment{base + L.k, dk, kt, cp, dk, false, false};
  GemmPrec(kk, prec, L, base);
  GemmJob qkj = kk;
  qkj.c = base + L.qkt;
  qkj.seg[0].a = base + L.q;
  GemmPrec(qkj, prec, L, base);
}

// Stage 2, per value head, from stage 1 and the vectors beta and g:
//   attn = A = (I + L)^-1              [c x c_pad]
//   qk   = P = lower_incl((Q K^T) * e^(G_i - G_j)) * scale
// and the row factors e^(G_last - G), beta e^G, scale e^G (ChunkVectors):
// the V side applies them in its products' epilogues, to the key head's q
// and k as they are, so nothing of size c x dk is written per value head.
HWY_INLINE void PrepareValueHead(const ScratchLayout& L, float* HWY_RESTRICT base, int64_t n, float scale) {
  const hn::ScalableTag<float> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const int64_t cp = L.c_pad;
  float* attn = base + L.attn;
  ChunkVectors cv(base + L.vec, cp);

  // Step 1: G = cumsum(g) inside the chunk; decays as exp of differences only
  // (exp(G_i) * exp(-G_j) overflows: executorch#21417).
  float run = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    run += cv.g[i];
    cv.G[i] = run;
  }
  for (int64_t i = n; i < cp; ++i) cv.G[i] = 0.0f;  // finite padding for the vector exp
  for (int64_t c = 0; c < cp; c += N) hn::Store(hn::Exp(d, hn::Load(d, cv.G + c)), d, cv.eG + c);
  for (int64_t i = 0; i < cp; ++i) {
    cv.beG[i] = i < n ? cv.beta[i] * cv.eG[i] : 0.0f;
    cv.qg[i] = cv.eG[i] * scale;
  }

  // Step 3: L = strictly_lower((Kb K^T) * e^(G_i - G_j)); P likewise from Q
  // (step 5). Step 2 folded: Kb K^T = diag(beta) (K K^T), so beta scales rows
  // of L in the epilogue.
  ApplyDecayMasks(cv, n, cp, scale, base + L.kkt, base + L.qkt, attn, base + L.qk);

  const int64_t nb = RoundUp(n, 16);
  for (int64_t i = n; i < nb; ++i)
    for (int64_t j = 0; j < cp; ++j) attn[i * cp + j] = 0.0f;
  InvertUnitLower(attn, cp, nb, base + L.tmp);
}

// Both stages for one item alone (the phase benchmarks).
template <int kDkPad>
HWY_INLINE void PrepareKSide(const ScratchLayout& L, float* HWY_RESTRICT base, int64_t n, float scale,
                             Precision prec = Precision::kFp32) {
  PrepareKeyHead<kDkPad>(L, base, n, prec);
  PrepareValueHead(L, base, n, scale);
}

}  // namespace HWY_NAMESPACE
}  // namespace cgdr
HWY_AFTER_NAMESPACE();

#endif  // include guard
