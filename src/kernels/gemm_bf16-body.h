// The bf16-pair micro-kernel, included by gemm_bf16-inl.h inside a namespace
// that defines `Dot` (the vdpbf16ps step: hardware or exact emulation) — once
// for the emulation, and on AVX3 a second time inside a region compiled for
// AVX512_BF16. No include guard, no includes: intentionally re-included.
//
// Same structure as Gemm() (gemm-inl.h): column panels outer, register blocks
// of R rows x NV column vectors, each element one chain in a fixed order
// (segments, then k pairs ascending; per pair lo*lo, lo*hi, hi*lo, hi*hi), so
// results do not depend on blocking or thread count.

// Register blocks: the hardware step uses Gemm()'s blocks; the emulation
// (Dot::kSmallBlocks), tens of instructions per step, uses small ones, which
// changes no result (one chain per element) and keeps its compile time and
// code size down.
constexpr int kPackedBlockVecs = Dot::kSmallBlocks ? 1 : kBlockVecs;
// Blocks of 3+ vectors take 4 rows here, not Gemm()'s 8 x 3 and 6 x 4: a
// packed step also holds B's lo parts, which would not fit the registers.
template <int NV>
constexpr int PackedRowsPerBlock() {
  return Dot::kSmallBlocks ? (HWY_NATIVE_FMA ? 4 : 1) : (NV >= 3 ? 4 : RowsPerBlock<NV>());
}

template <int R, int NV, bool kALo, bool kBLo, bool kLoLo>
HWY_INLINE void AccumulatePacked(const PackedSeg& s, int64_t r0, int64_t c0, hn::Vec<DBF> (&acc)[R][NV]) {
  const DU32 du;
  const size_t N = hn::Lanes(du);
  // Pairs every row of the block reads in full (lower: pairs below row r0).
  const int64_t dense_end = s.lower ? std::min<int64_t>(s.kp, r0 / 2) : s.kp;
  for (int64_t p = 0; p < dense_end; ++p) {
    const uint32_t* bh_row = s.b_hi + p * s.b_ld + c0;
    const uint32_t* bl_row = kBLo ? s.b_lo + p * s.b_ld + c0 : nullptr;
    VU32 bh[NV], bl[NV];
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) {
      bh[v] = hn::Load(du, bh_row + v * N);
      if constexpr (kBLo) bl[v] = hn::Load(du, bl_row + v * N);
    }
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const int64_t ai = (r0 + r) * s.a_ld + p * s.a_pstride;
      const VU32 ah = hn::Set(du, s.a_hi[ai]);
      VU32 al;
      if constexpr (kALo) al = hn::Set(du, s.a_lo[ai]);
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) {
        if constexpr (kLoLo) acc[r][v] = Dot::Apply(acc[r][v], al, bl[v]);
        if constexpr (kALo) acc[r][v] = Dot::Apply(acc[r][v], al, bh[v]);
        if constexpr (kBLo) acc[r][v] = Dot::Apply(acc[r][v], ah, bl[v]);
        acc[r][v] = Dot::Apply(acc[r][v], ah, bh[v]);
      }
    }
  }
  if (!s.lower) return;
  // Triangle: pair p = (2p, 2p + 1) is read by rows i >= 2p; row i = 2p reads
  // it with B's odd element masked to zero, so nothing of a later row reaches
  // an earlier one, not even as 0 * x (causality by construction, SPEC 4).
  const auto even_only = hn::Set(du, 0x0000FFFFu);
  for (int64_t p = dense_end; p < s.kp && 2 * p <= r0 + R - 1; ++p) {
    const uint32_t* bh_row = s.b_hi + p * s.b_ld + c0;
    const uint32_t* bl_row = kBLo ? s.b_lo + p * s.b_ld + c0 : nullptr;
    VU32 bh[NV], bl[NV], bhm[NV], blm[NV];
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) {
      bh[v] = hn::Load(du, bh_row + v * N);
      bhm[v] = hn::And(bh[v], even_only);
      if constexpr (kBLo) {
        bl[v] = hn::Load(du, bl_row + v * N);
        blm[v] = hn::And(bl[v], even_only);
      }
    }
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const int64_t i = r0 + r;
      if (2 * p > i) continue;
      const bool full = 2 * p + 1 <= i;
      const int64_t ai = i * s.a_ld + p * s.a_pstride;
      const VU32 ah = hn::Set(du, s.a_hi[ai]);
      VU32 al;
      if constexpr (kALo) al = hn::Set(du, s.a_lo[ai]);
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) {
        const VU32 bhv = full ? bh[v] : bhm[v];
        if constexpr (kBLo) {
          const VU32 blv = full ? bl[v] : blm[v];
          if constexpr (kLoLo) acc[r][v] = Dot::Apply(acc[r][v], al, blv);
          if constexpr (kALo) acc[r][v] = Dot::Apply(acc[r][v], al, bhv);
          acc[r][v] = Dot::Apply(acc[r][v], ah, blv);
        } else {
          if constexpr (kALo) acc[r][v] = Dot::Apply(acc[r][v], al, bhv);
        }
        acc[r][v] = Dot::Apply(acc[r][v], ah, bhv);
      }
    }
  }
}

template <int R, int NV>
HWY_INLINE void PackedTile(const PackedJob& job, int64_t r0, int64_t c0) {
  const DBF d;
  hn::Vec<DBF> acc[R][NV];
  InitTile(d, job.c_init, job.ld_init, job.alpha, job.row_alpha, r0, c0, acc);
  for (int si = 0; si < job.segments; ++si) {
    const PackedSeg& s = job.seg[si];
    if (s.a_has_lo && s.b_has_lo) {
      if (job.lolo) {
        AccumulatePacked<R, NV, true, true, true>(s, r0, c0, acc);
      } else {
        AccumulatePacked<R, NV, true, true, false>(s, r0, c0, acc);
      }
    } else if (s.a_has_lo) {
      AccumulatePacked<R, NV, true, false, false>(s, r0, c0, acc);
    } else if (s.b_has_lo) {
      AccumulatePacked<R, NV, false, true, false>(s, r0, c0, acc);
    } else {
      AccumulatePacked<R, NV, false, false, false>(s, r0, c0, acc);
    }
    ApplyRowEpilogue(d, s.then, r0, c0, acc);
  }
  StoreTiles(d, acc, job, r0, c0);
}

template <int NV>
HWY_INLINE void PackedColumnPanel(const PackedJob& job, int64_t c0) {
  constexpr int R = PackedRowsPerBlock<NV>();
  int64_t r0 = job.lower_result ? std::min<int64_t>(job.rows, c0) : 0;
  for (; r0 + R <= job.rows; r0 += R) PackedTile<R, NV>(job, r0, c0);
  if constexpr (R > 4) {
    for (; r0 + 4 <= job.rows; r0 += 4) PackedTile<4, NV>(job, r0, c0);
  }
  if constexpr (R > 1) {
    for (; r0 < job.rows; ++r0) PackedTile<1, NV>(job, r0, c0);
  }
}

inline HWY_NOINLINE void RunPacked(const PackedJob& job) {
  const DBF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const int64_t vecs = job.cols / N;
  int64_t v = 0;
  for (; v + kPackedBlockVecs <= vecs; v += kPackedBlockVecs) PackedColumnPanel<kPackedBlockVecs>(job, v * N);
  switch (vecs - v) {
    case 1: if constexpr (kPackedBlockVecs > 1) PackedColumnPanel<1>(job, v * N); break;
    case 2: if constexpr (kPackedBlockVecs > 2) PackedColumnPanel<2>(job, v * N); break;
    case 3: if constexpr (kPackedBlockVecs > 3) PackedColumnPanel<3>(job, v * N); break;
    default: break;
  }
}
