// The AMX engine's tile products (docs/SPEC.md 6c): one blocked product
// C (+)= sum over terms of A_part * B_part on 16 x 16 FP32 tiles, run on the
// hardware tiles (TDPBF16PS) or on their portable emulation, and the packing
// of FP32 operands into the tiles' bf16 layouts (hi and lo planes: the seeds'
// compensated products, 000 s.5.6, with bf16 halves on the tiles).
//
// Per-target code: included once per Highway target (by amx_chunk.cc).
#if defined(CGDR_KERNELS_AMX_TILES_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef CGDR_KERNELS_AMX_TILES_INL_H_
#undef CGDR_KERNELS_AMX_TILES_INL_H_
#else
#define CGDR_KERNELS_AMX_TILES_INL_H_
#endif

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "core/phase_timers.h"
#include "hwy/highway.h"
#include "kernels/amx.h"
#include "kernels/bf16-inl.h"
#include "kernels/prefetch.h"
#include "kernels/transpose-inl.h"
#include "plan/scratch_layout.h"

HWY_BEFORE_NAMESPACE();
namespace cgdr {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// ---------------------------------------------------------------------------
// Operand layouts. Every tile is one contiguous KiB (rows 64 bytes apart), so
// each tile load reads 16 consecutive lines.

// A [M x K] bf16, pairs along k (row-major bf16): the tile of row tile mt and
// k tile kt (32 elements) at plane + (kt * m_alloc + mt * 16) * 16 words.
struct TileA {
  const uint32_t* hi = nullptr;
  const uint32_t* lo = nullptr;  // null: no lo plane (bf16 mode, or every lo half zero)
  int64_t m_alloc = 0;
  const uint32_t* Tile(const uint32_t* plane, int64_t mt, int64_t kt) const {
    return plane + (kt * m_alloc + mt * kTileRows) * 16;
  }
};

// B [K x N] in pairs across rows ("VNNI": word (p, n) holds B[2p][n] in its
// low half, B[2p + 1][n] in its high half): the tile of k tile kt and column
// tile nt at plane + (nt * kp_alloc + kt * 16) * 16 words.
struct TileB {
  const uint32_t* hi = nullptr;
  const uint32_t* lo = nullptr;
  int64_t kp_alloc = 0;  // pairs of k per column tile
  const uint32_t* Tile(const uint32_t* plane, int64_t kt, int64_t nt) const {
    return plane + (nt * kp_alloc + kt * 16) * 16;
  }
};

// C [M x N] FP32: tile (mt, nt) at c + mt * 16 * row_stride + nt * block_stride.
// Row-major: row_stride = ld, block_stride = 16. Panels of 16 columns
// ([N / 16][rows][16]): row_stride = 16, block_stride = 16 * rows.
struct TileC {
  float* c = nullptr;
  int64_t row_stride = 0, block_stride = 0;
  float* Tile(int64_t mt, int64_t nt) const { return c + mt * kTileRows * row_stride + nt * block_stride; }
  int64_t StrideBytes() const { return row_stride * static_cast<int64_t>(sizeof(float)); }
};

struct TileJob {
  TileC c;
  bool accumulate = false;  // C starts from its contents, else from zero
  TileA a;
  TileB b;
  int64_t m_tiles = 0, n_tiles = 0, k_tiles = 0;
  // A is lower triangular (A[i][k] = 0 for k > i, stored as zeros): row
  // tiles stop at the k tile holding their last row.
  bool lower_a = false;
  // Only tiles on or below the diagonal (nt <= mt) are wanted.
  bool lower_result = false;
  bool lolo = false;  // bf16x4: the lo * lo term too
  // Lines to issue between the blocks (may be null), credited with each
  // block's multiply-adds (one term's: PrefetchQueue::Pace counts the
  // chunk's state products in multiply-adds of FP32).
  PrefetchQueue* prefetch = nullptr;
};

// ---------------------------------------------------------------------------
// Tile backends: C tiles 0..3 (tmm0..3), A tiles 0..1 (tmm4, 5), B tiles 0..1
// (tmm6, 7). Dp<i, j>() is C[2i + j] += A[i] * B[j].

#if HWY_ARCH_X86_64
// The hardware tiles through inline assembly: gcc's intrinsics take tile
// numbers as literal tokens and give the compiler no memory operands; these
// clobber memory, so the vector stores that build an operand are done before
// the tile load that reads it, and tile stores before the vector loads.
#define CGDR_TMM_ZERO(n) __asm__ volatile("tilezero %%tmm" #n ::: "memory")
#define CGDR_TMM_LOAD(n, p, s) __asm__ volatile("tileloadd (%0,%1,1), %%tmm" #n ::"r"(p), "r"(s) : "memory")
#define CGDR_TMM_STORE(n, p, s) __asm__ volatile("tilestored %%tmm" #n ", (%0,%1,1)" ::"r"(p), "r"(s) : "memory")
#define CGDR_TMM_DP(c, a, b) __asm__ volatile("tdpbf16ps %%tmm" #b ", %%tmm" #a ", %%tmm" #c ::)
#define CGDR_TMM_C(i, OP, ...)             \
  if constexpr (i == 0) {                  \
    OP(0, __VA_ARGS__);                    \
  } else if constexpr (i == 1) {           \
    OP(1, __VA_ARGS__);                    \
  } else if constexpr (i == 2) {           \
    OP(2, __VA_ARGS__);                    \
  } else {                                 \
    static_assert(i == 3, "C tiles 0..3"); \
    OP(3, __VA_ARGS__);                    \
  }

struct AmxHwTiles {
  static constexpr bool kHardware = true;
  template <int i>
  HWY_INLINE void ZeroC() {
#define CGDR_ZERO_OP(n, unused) CGDR_TMM_ZERO(n)
    CGDR_TMM_C(i, CGDR_ZERO_OP, 0)
#undef CGDR_ZERO_OP
  }
  template <int i>
  HWY_INLINE void LoadC(const float* p, int64_t stride_bytes) {
    CGDR_TMM_C(i, CGDR_TMM_LOAD, p, stride_bytes)
  }
  template <int i>
  HWY_INLINE void StoreC(float* p, int64_t stride_bytes) {
    CGDR_TMM_C(i, CGDR_TMM_STORE, p, stride_bytes)
  }
  template <int j>
  HWY_INLINE void LoadA(const uint32_t* p) {
    if constexpr (j == 0) {
      CGDR_TMM_LOAD(4, p, kTileBytes);
    } else {
      CGDR_TMM_LOAD(5, p, kTileBytes);
    }
  }
  template <int j>
  HWY_INLINE void LoadB(const uint32_t* p) {
    if constexpr (j == 0) {
      CGDR_TMM_LOAD(6, p, kTileBytes);
    } else {
      CGDR_TMM_LOAD(7, p, kTileBytes);
    }
  }
  template <int i, int j>
  HWY_INLINE void Dp() {
    if constexpr (i == 0 && j == 0) {
      CGDR_TMM_DP(0, 4, 6);
    } else if constexpr (i == 0 && j == 1) {
      CGDR_TMM_DP(1, 4, 7);
    } else if constexpr (i == 1 && j == 0) {
      CGDR_TMM_DP(2, 5, 6);
    } else {
      CGDR_TMM_DP(3, 5, 7);
    }
  }
};
#undef CGDR_TMM_C
#undef CGDR_TMM_ZERO
#undef CGDR_TMM_LOAD
#undef CGDR_TMM_STORE
#undef CGDR_TMM_DP
#endif  // HWY_ARCH_X86_64

// TDPBF16PS as Intel's SDM documents it, for one 16 x 16 C tile: for each
// row m and column n, two FP32 chains from +0, one over the even and one
// over the odd bf16 elements of the 16 pairs, each FMA with denormal inputs
// read as zero, denormal results flushed to zero and round to nearest even;
// then C = C + (even + odd), flushed likewise. The hardware accumulates in
// its own way, which no simple scalar model reproduces bit for bit (see the
// engine test): the two agree within a few units in the last place of the
// magnitudes involved, and each is deterministic.
HWY_INLINE void TdpBf16psEmulated(float* HWY_RESTRICT c, const uint32_t* HWY_RESTRICT a,
                                  const uint32_t* HWY_RESTRICT b) {
  const DBF d;
  const DU32 du;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const auto odd_half = hn::Set(du, 0xFFFF0000u);
  for (int64_t m = 0; m < kTileRows; ++m) {
    for (int64_t n0 = 0; n0 < 16; n0 += N) {
      hn::Vec<DBF> even = hn::Zero(d), odd = hn::Zero(d);
      for (int64_t p = 0; p < 16; ++p) {
        const uint32_t aw = a[m * 16 + p];
        const auto a_even = FlushDenormal(hn::BitCast(d, hn::Set(du, aw << 16)));
        const auto a_odd = FlushDenormal(hn::BitCast(d, hn::Set(du, aw & 0xFFFF0000u)));
        const auto bw = hn::LoadU(du, b + p * 16 + n0);
        const auto b_even = FlushDenormal(hn::BitCast(d, hn::ShiftLeft<16>(bw)));
        const auto b_odd = FlushDenormal(hn::BitCast(d, hn::And(bw, odd_half)));
        even = FlushDenormal(DotEmu::Fma(a_even, b_even, even));
        odd = FlushDenormal(DotEmu::Fma(a_odd, b_odd, odd));
      }
      const auto sum = FlushDenormal(hn::Add(even, odd));
      float* cr = c + m * 16 + n0;
      hn::StoreU(FlushDenormal(hn::Add(FlushDenormal(hn::LoadU(d, cr)), sum)), d, cr);
    }
  }
}

// The emulated tiles: the same interface on 8 KiB of memory.
struct AmxEmuTiles {
  static constexpr bool kHardware = false;
  HWY_ALIGN float c[4][kTileWords];
  HWY_ALIGN uint32_t a[2][kTileWords];
  HWY_ALIGN uint32_t b[2][kTileWords];

  template <int i>
  HWY_INLINE void ZeroC() {
    std::memset(c[i], 0, sizeof c[i]);
  }
  template <int i>
  HWY_INLINE void LoadC(const float* p, int64_t stride_bytes) {
    for (int64_t r = 0; r < kTileRows; ++r) std::memcpy(c[i] + r * 16, Row(p, r, stride_bytes), kTileBytes);
  }
  template <int i>
  HWY_INLINE void StoreC(float* p, int64_t stride_bytes) {
    for (int64_t r = 0; r < kTileRows; ++r) std::memcpy(Row(p, r, stride_bytes), c[i] + r * 16, kTileBytes);
  }
  template <int j>
  HWY_INLINE void LoadA(const uint32_t* p) {
    std::memcpy(a[j], p, sizeof a[j]);
  }
  template <int j>
  HWY_INLINE void LoadB(const uint32_t* p) {
    std::memcpy(b[j], p, sizeof b[j]);
  }
  template <int i, int j>
  HWY_INLINE void Dp() {
    TdpBf16psEmulated(c[2 * i + j], a[i], b[j]);
  }

 private:
  template <class T>
  static T* Row(T* p, int64_t r, int64_t stride_bytes) {
    using Byte = std::conditional_t<std::is_const_v<T>, const uint8_t, uint8_t>;
    return reinterpret_cast<T*>(reinterpret_cast<Byte*>(p) + r * stride_bytes);
  }
};

// ---------------------------------------------------------------------------
// The blocked product: blocks of MR x NR C tiles (at most 2 x 2: the 4 C, 2 A
// and 2 B tiles of the 8), k tile by k tile. Per k tile the terms of the
// precision mode, the small ones first (hi*lo, lo*lo, lo*hi, then hi*hi),
// loading an operand's tiles only when the term needs another plane. Every
// element is one accumulation chain in a fixed order whatever the thread or
// tiling of the item, so results are bitwise reproducible on each engine.

struct TileTerm {
  bool a_lo, b_lo;
};

// The terms of a job, in accumulation order: each term changes one operand
// where it can, so a 2 x 2 block loads each of its 8 operand tiles of a k
// tile once (bf16x3: hi*lo, hi*hi, lo*hi), not 10 times; else the small
// terms first (hi*lo, lo*lo, lo*hi, then hi*hi).
HWY_INLINE int JobTerms(const TileJob& job, TileTerm (&terms)[4]) {
  const bool al = job.a.lo != nullptr, bl = job.b.lo != nullptr;
  int count = 0;
  if (al && bl && !job.lolo) {
    terms[count++] = TileTerm{false, true};
    terms[count++] = TileTerm{false, false};
    terms[count++] = TileTerm{true, false};
    return count;
  }
  if (bl) terms[count++] = TileTerm{false, true};
  if (al && bl && job.lolo) terms[count++] = TileTerm{true, true};
  if (al) terms[count++] = TileTerm{true, false};
  terms[count++] = TileTerm{false, false};
  return count;
}

template <class Tiles, int MR, int NR>
HWY_INLINE void TileBlock(Tiles& t, const TileJob& job, const TileTerm* terms, int term_count, int64_t mt,
                          int64_t nt, int64_t k_tiles) {
  const int64_t stride = job.c.StrideBytes();
  const auto for_c = [&](auto fn) {
    fn(std::integral_constant<int, 0>{}, std::integral_constant<int, 0>{});
    if constexpr (NR > 1) fn(std::integral_constant<int, 0>{}, std::integral_constant<int, 1>{});
    if constexpr (MR > 1) fn(std::integral_constant<int, 1>{}, std::integral_constant<int, 0>{});
    if constexpr (MR > 1 && NR > 1) fn(std::integral_constant<int, 1>{}, std::integral_constant<int, 1>{});
  };
  for_c([&](auto i, auto j) {
    if (job.accumulate) {
      t.template LoadC<2 * decltype(i)::value + decltype(j)::value>(job.c.Tile(mt + i, nt + j), stride);
    } else {
      t.template ZeroC<2 * decltype(i)::value + decltype(j)::value>();
    }
  });
  for (int64_t kt = 0; kt < k_tiles; ++kt) {
    int a_in = -1, b_in = -1;  // the plane in the A / B tiles: 0 hi, 1 lo
    for (int ti = 0; ti < term_count; ++ti) {
      const TileTerm& term = terms[ti];
      if (a_in != term.a_lo) {
        const uint32_t* plane = term.a_lo ? job.a.lo : job.a.hi;
        t.template LoadA<0>(job.a.Tile(plane, mt, kt));
        if constexpr (MR > 1) t.template LoadA<1>(job.a.Tile(plane, mt + 1, kt));
        a_in = term.a_lo;
      }
      if (b_in != term.b_lo) {
        const uint32_t* plane = term.b_lo ? job.b.lo : job.b.hi;
        t.template LoadB<0>(job.b.Tile(plane, kt, nt));
        if constexpr (NR > 1) t.template LoadB<1>(job.b.Tile(plane, kt, nt + 1));
        b_in = term.b_lo;
      }
      for_c([&](auto i, auto j) { t.template Dp<decltype(i)::value, decltype(j)::value>(); });
    }
  }
  for_c([&](auto i, auto j) {
    t.template StoreC<2 * decltype(i)::value + decltype(j)::value>(job.c.Tile(mt + i, nt + j), stride);
  });
}

// Vector work run between the blocks of tile products: TDPBF16PS runs on the
// matrix unit while the core goes on with other instructions, so a pass that
// does not touch the product's operands or results (loading V, converting
// out, packing the next operand) costs nearly nothing there (measured on
// this Xeon: 4 TDPBF16PS and ~60 vector instructions per iteration took as
// long as the TDPBF16PS alone). `units` calls of run(unit), in order; the
// product runs them spread over its blocks and finishes them after its last.
class SideTask {
 public:
  SideTask() = default;
  template <class Fn>
  SideTask(int64_t units, Fn& fn)
      : units_(units), ctx_(&fn), thunk_([](void* c, int64_t u) { (*static_cast<Fn*>(c))(u); }) {}
  int64_t units() const { return units_; }
  // Runs the units up to `fraction` of all of them.
  HWY_INLINE void RunTo(int64_t done, int64_t of) {
    const int64_t target = of > 0 ? units_ * done / of : units_;
    for (; next_ < target; ++next_) thunk_(ctx_, next_);
  }
  HWY_INLINE void Finish() { RunTo(1, 1); }

 private:
  int64_t units_ = 0, next_ = 0;
  void* ctx_ = nullptr;
  void (*thunk_)(void*, int64_t) = nullptr;
};

// The job's blocks in order (row-tile pairs outer, column-tile pairs inner)
// and the k tiles each reads.
struct TileBlockRef {
  int64_t mt, nt, k_tiles;
  int mr, nr;
};
template <class Fn>
HWY_INLINE void ForEachBlock(const TileJob& job, const Fn& fn) {
  for (int64_t mt = 0; mt < job.m_tiles; mt += 2) {
    const int mr = mt + 1 < job.m_tiles ? 2 : 1;
    const int64_t last_row_tile = mt + mr - 1;
    // Lower A: the block's last row is 16 * last_row_tile + 15, so k tiles
    // up to the one holding it; entries right of the diagonal are zeros.
    const int64_t k_tiles =
        job.lower_a ? std::min(job.k_tiles, ((last_row_tile + 1) * kTileRows + kTileK - 1) / kTileK) : job.k_tiles;
    for (int64_t nt = 0; nt < job.n_tiles; nt += 2) {
      if (job.lower_result && nt > last_row_tile) break;
      fn(TileBlockRef{mt, nt, k_tiles, mr, nt + 1 < job.n_tiles ? 2 : 1});
    }
  }
}

HWY_INLINE int64_t CountBlocks(const TileJob& job) {
  int64_t blocks = 0;
  ForEachBlock(job, [&](const TileBlockRef&) { ++blocks; });
  return blocks;
}

// The product; `side` (may be null) runs spread over its blocks and is
// finished when it returns.
template <class Tiles>
HWY_INLINE void RunTileJob(Tiles& t, const TileJob& job, SideTask* side = nullptr) {
  TileTerm terms[4];
  const int term_count = JobTerms(job, terms);
  const int64_t blocks = side ? CountBlocks(job) : 0;
  int64_t done = 0;
  ForEachBlock(job, [&](const TileBlockRef& b) {
#ifdef CGDR_PHASE_TIMERS
    // A timing build asked to skip them (core/phase_timers.h): the passes around the products alone.
    if constexpr (!Tiles::kHardware) {
      if (EmulatedProductsSkipped()) {
        if (side) side->RunTo(++done, blocks);
        return;
      }
    }
#endif
    if (b.mr == 2 && b.nr == 2) {
      TileBlock<Tiles, 2, 2>(t, job, terms, term_count, b.mt, b.nt, b.k_tiles);
    } else if (b.mr == 2) {
      TileBlock<Tiles, 2, 1>(t, job, terms, term_count, b.mt, b.nt, b.k_tiles);
    } else if (b.nr == 2) {
      TileBlock<Tiles, 1, 2>(t, job, terms, term_count, b.mt, b.nt, b.k_tiles);
    } else {
      TileBlock<Tiles, 1, 1>(t, job, terms, term_count, b.mt, b.nt, b.k_tiles);
    }
    if (side) side->RunTo(++done, blocks);
    if (job.prefetch) job.prefetch->Credit(b.mr * b.nr * b.k_tiles * kTileRows * kAmxN * kTileK);
  });
  if (side) side->Finish();
}

// ---------------------------------------------------------------------------
// Packing FP32 into the tile layouts: hi = bf16(x) and lo = bf16(x - hi),
// both rounded to nearest even with denormal inputs read as zero, and lo = 0
// where hi is not finite: VCVTNE2PS2BF16's conversion (AVX512_BF16), run by
// that instruction where the CPU has it (Bf16Asm) and by integer arithmetic
// elsewhere (Bf16Soft), bit for bit the same. (TDPBF16PS reads denormal bf16
// as zero anyway: flushing them here changes no product.)

// The packers' running flags: any lo half nonzero (terms with that lo plane
// are needed), any input not finite (AnyNonFinite).
struct PackFlags {
  VU32 lo, bad;
  // (Written out: an implicit constructor would lack the target's attributes.)
  HWY_INLINE PackFlags() : lo(hn::Zero(DU32())), bad(hn::Zero(DU32())) {}
  bool AnyLo() const { return !hn::AllTrue(DU32(), hn::Eq(lo, hn::Zero(DU32()))); }
  bool AnyNonFinite() const { return !hn::AllTrue(DU32(), hn::Eq(bad, hn::Zero(DU32()))); }
  void Note(hn::Vec<DBF> x) {
    const DU32 du;
    const auto expo = hn::Set(du, 0x7F800000u);
    bad = hn::Or(bad, hn::VecFromMask(du, hn::Eq(hn::And(hn::BitCast(du, x), expo), expo)));
  }
};

// bf16 bits of f32 lanes u (low 16 bits): Bf16Bits (nearest even, quiet
// NaN) with zero and denormal inputs giving a zero of their sign.
HWY_INLINE VU32 Bf16BitsFtz(VU32 u) {
  const DU32 du;
  const auto tiny = hn::Eq(hn::And(u, hn::Set(du, 0x7F800000u)), hn::Zero(du));
  return hn::IfThenElse(tiny, hn::ShiftRight<16>(hn::And(u, hn::Set(du, 0x80000000u))), Bf16Bits(u));
}

// x - hi as f32, zero where hi is Inf or NaN.
HWY_INLINE hn::Vec<DBF> LoRemainder(hn::Vec<DBF> x, hn::Vec<DBF> hi_f32) {
  return hn::IfThenElseZero(hn::IsFinite(hi_f32), hn::Sub(x, hi_f32));
}

struct Bf16Soft {
  // Word n of hi/lo = (x0[n], x1[n]): pairs across rows, N words.
  static HWY_INLINE void Across(hn::Vec<DBF> x0, hn::Vec<DBF> x1, uint32_t* HWY_RESTRICT hi, uint32_t* HWY_RESTRICT lo,
                                PackFlags& f) {
    const DBF d;
    const DU32 du;
    const VU32 h0 = Bf16BitsFtz(hn::BitCast(du, x0)), h1 = Bf16BitsFtz(hn::BitCast(du, x1));
    hn::StoreU(hn::Or(h0, hn::ShiftLeft<16>(h1)), du, hi);
    if (lo == nullptr) return;
    const auto l0 = LoRemainder(x0, hn::BitCast(d, hn::ShiftLeft<16>(h0)));
    const auto l1 = LoRemainder(x1, hn::BitCast(d, hn::ShiftLeft<16>(h1)));
    const VU32 w = hn::Or(Bf16BitsFtz(hn::BitCast(du, l0)), hn::ShiftLeft<16>(Bf16BitsFtz(hn::BitCast(du, l1))));
    f.lo = hn::Or(f.lo, w);
    hn::StoreU(w, du, lo);
  }
  // Words of the 2N consecutive values a, b (pairs along k): N words.
  static HWY_INLINE void Along(hn::Vec<DBF> a, hn::Vec<DBF> b, uint32_t* HWY_RESTRICT hi, uint32_t* HWY_RESTRICT lo,
                               PackFlags& f) {
    const DBF d;
    const DU32 du;
    const DI32 di;
    const hn::Rebind<uint16_t, DI32> du16;
    const int64_t N = static_cast<int64_t>(hn::Lanes(d));
    const VU32 ha = Bf16BitsFtz(hn::BitCast(du, a)), hb = Bf16BitsFtz(hn::BitCast(du, b));
    uint16_t* h = reinterpret_cast<uint16_t*>(hi);
    hn::StoreU(hn::DemoteTo(du16, hn::BitCast(di, ha)), du16, h);
    hn::StoreU(hn::DemoteTo(du16, hn::BitCast(di, hb)), du16, h + N);
    if (lo == nullptr) return;
    const VU32 la = Bf16BitsFtz(hn::BitCast(du, LoRemainder(a, hn::BitCast(d, hn::ShiftLeft<16>(ha)))));
    const VU32 lb = Bf16BitsFtz(hn::BitCast(du, LoRemainder(b, hn::BitCast(d, hn::ShiftLeft<16>(hb)))));
    f.lo = hn::Or(f.lo, hn::Or(la, lb));
    uint16_t* l = reinterpret_cast<uint16_t*>(lo);
    hn::StoreU(hn::DemoteTo(du16, hn::BitCast(di, la)), du16, l);
    hn::StoreU(hn::DemoteTo(du16, hn::BitCast(di, lb)), du16, l + N);
  }
};

#undef CGDR_HAVE_BF16_ASM
#if HWY_TARGET == HWY_AVX3 && HWY_ARCH_X86_64
#define CGDR_HAVE_BF16_ASM 1
// VCVTNE2PS2BF16 through inline assembly (Highway 1.0.3 has no AVX512_BF16
// target, and inline functions of another target cannot be inlined here):
// 16-bit lanes [bf16(low) 0..15, bf16(high) 0..15]. Run only where the CPU
// has AVX512_BF16 (Bf16HardwareEnabled).
HWY_INLINE __m512i CvtTwoToBf16(__m512 high, __m512 low) {
  __m512i r;
  __asm__("vcvtne2ps2bf16 %2, %1, %0" : "=v"(r) : "v"(high), "v"(low));
  return r;
}

struct Bf16Asm {
  static HWY_INLINE void Across(hn::Vec<DBF> x0, hn::Vec<DBF> x1, uint32_t* HWY_RESTRICT hi, uint32_t* HWY_RESTRICT lo,
                                PackFlags& f) {
    const DBF d;
    const DU32 du;
    // Word n = (x0[n], x1[n]): the 16-bit lanes 0, 16, 1, 17, ... of [x0 | x1].
    const __m512i interleave = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22,
                                                6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    const VU32 w = VU32{_mm512_permutexvar_epi16(interleave, CvtTwoToBf16(x1.raw, x0.raw))};
    hn::StoreU(w, du, hi);
    if (lo == nullptr) return;
    const auto l0 = LoRemainder(x0, hn::BitCast(d, hn::ShiftLeft<16>(w)));
    const auto l1 = LoRemainder(x1, hn::BitCast(d, hn::And(w, hn::Set(du, 0xFFFF0000u))));
    const VU32 wl = VU32{_mm512_permutexvar_epi16(interleave, CvtTwoToBf16(l1.raw, l0.raw))};
    f.lo = hn::Or(f.lo, wl);
    hn::StoreU(wl, du, lo);
  }
  static HWY_INLINE void Along(hn::Vec<DBF> a, hn::Vec<DBF> b, uint32_t* HWY_RESTRICT hi, uint32_t* HWY_RESTRICT lo,
                               PackFlags& f) {
    const DBF d;
    const DU32 du;
    const __m512i h = CvtTwoToBf16(b.raw, a.raw);  // 32 bf16 in k order
    hn::StoreU(VU32{h}, du, hi);
    if (lo == nullptr) return;
    const auto ha = hn::BitCast(d, VU32{_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(h)), 16)});
    const auto hb = hn::BitCast(d, VU32{_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(h, 1)), 16)});
    const VU32 w = VU32{CvtTwoToBf16(LoRemainder(b, hb).raw, LoRemainder(a, ha).raw)};
    f.lo = hn::Or(f.lo, w);
    hn::StoreU(w, du, lo);
  }
};
#else
#define CGDR_HAVE_BF16_ASM 0
#endif

// Lanes [k, k + N) of a row of `ld` floats whose first `kend` are valid:
// zero past kend, and nothing read past the row.
HWY_INLINE hn::Vec<DBF> LoadValid(const float* HWY_RESTRICT row, int64_t k, int64_t kend, int64_t ld) {
  const DBF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  if (k + N <= kend) return hn::LoadU(d, row + k);
  if (k >= kend) return hn::Zero(d);
  if (k + N <= ld) return hn::IfThenElseZero(hn::FirstN(d, static_cast<size_t>(kend - k)), hn::LoadU(d, row + k));
  HWY_ALIGN float part[hn::MaxLanes(d)] = {};
  for (int64_t e = 0; e < kend - k; ++e) part[e] = row[k + e];
  return hn::Load(d, part);
}

// A from FP32 rows: A[i][k] = src[i * ld + k] * col_scale[k] (col_scale null:
// 1) for i < rows and k < kend(i) = cols, or min(cols, i + 1) when `lower`
// (nothing right of the diagonal is read); zero elsewhere, over m_tiles row
// tiles and k_tiles k tiles. col_scale is read only where valid.
template <class Cvt>
HWY_INLINE void PackA(const float* HWY_RESTRICT src, int64_t ld, int64_t rows, int64_t cols, bool lower,
                      const float* HWY_RESTRICT col_scale, int64_t m_tiles, int64_t k_tiles, uint32_t* HWY_RESTRICT hi,
                      uint32_t* HWY_RESTRICT lo, int64_t m_alloc, PackFlags& f) {
  const DBF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  for (int64_t i = 0; i < m_tiles * kTileRows; ++i) {
    const int64_t kend = i >= rows ? 0 : (lower ? std::min(cols, i + 1) : cols);
    const float* row = src + i * ld;
    for (int64_t kt = 0; kt < k_tiles; ++kt) {
      const int64_t off = (kt * m_alloc + i) * 16;  // this row's 64 bytes of the tile
      for (int64_t k0 = 0; k0 < kTileK; k0 += 2 * N) {
        const int64_t k = kt * kTileK + k0;
        auto a = LoadValid(row, k, kend, ld), b = LoadValid(row, k + N, kend, ld);
        if (col_scale) {
          a = hn::Mul(a, LoadValid(col_scale, k, kend, kend));
          b = hn::Mul(b, LoadValid(col_scale, k + N, kend, kend));
        }
        Cvt::Along(a, b, hi + off + k0 / 2, lo ? lo + off + k0 / 2 : nullptr, f);
      }
    }
  }
}

// B from FP32 rows (row r at src + r * ld, 16 columns per column tile):
// B[r][c] = src row r for r < rows, zero up to k_tiles k tiles; n_tiles
// column tiles. kDecay: each row read is then stored back times `decay`,
// or times row_decay[r] where that is given (the state: split for X and O,
// then scaled for the update, in one pass; row_decay: KDA's decay per key
// channel, docs/SPEC.md 10). kNote: the values go through PackFlags::Note.
template <class Cvt, bool kDecay = false, bool kNote = true>
HWY_INLINE void PackB(float* HWY_RESTRICT src, int64_t ld, int64_t rows, int64_t n_tiles, int64_t k_tiles,
                      uint32_t* HWY_RESTRICT hi, uint32_t* HWY_RESTRICT lo, int64_t kp_alloc, PackFlags& f,
                      float decay = 1.0f, const float* HWY_RESTRICT row_decay = nullptr) {
  const DBF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const auto decay_of = [&](int64_t r) { return hn::Set(d, row_decay ? row_decay[r] : decay); };
  // Column tile by column tile: each tile's words are written in order (by
  // rows of pairs, the planes' 2 x n_tiles tiles would be written 64 bytes
  // at a time, 4 KiB apart).
  for (int64_t nt = 0; nt < n_tiles; ++nt) {
    for (int64_t p = 0; p < k_tiles * 16; ++p) {
      float* r0 = 2 * p < rows ? src + 2 * p * ld : nullptr;
      float* r1 = 2 * p + 1 < rows ? src + (2 * p + 1) * ld : nullptr;
      const int64_t off = (nt * kp_alloc + p) * 16;
      for (int64_t n0 = 0; n0 < 16; n0 += N) {
        const int64_t c = nt * 16 + n0;
        const auto x0 = r0 ? hn::LoadU(d, r0 + c) : hn::Zero(d);
        const auto x1 = r1 ? hn::LoadU(d, r1 + c) : hn::Zero(d);
        Cvt::Across(x0, x1, hi + off + n0, lo ? lo + off + n0 : nullptr, f);
        if constexpr (kNote) {
          f.Note(x0);
          f.Note(x1);
        }
        if constexpr (kDecay) {
          if (r0) hn::StoreU(hn::Mul(decay_of(2 * p), x0), d, r0 + c);
          if (r1) hn::StoreU(hn::Mul(decay_of(2 * p + 1), x1), d, r1 + c);
        }
      }
    }
  }
}

// One plane of B = M^T from the plane of A = M: word (p, n) of B and word
// (n, p) of A both hold the pair (M[n][2p], M[n][2p + 1]), so B's tile
// (kt, nt) is A's tile (nt, kt) transposed as 16 x 16 words: the bits PackB
// makes from M^T in FP32, without a second conversion pass over it.
HWY_INLINE void TransposeAToB(const TileA& a, const uint32_t* a_plane, int64_t m_tiles, int64_t k_tiles, const TileB& b,
                              uint32_t* b_plane) {
  const int64_t N = static_cast<int64_t>(hn::Lanes(hn::ScalableTag<float>()));
  for (int64_t mt = 0; mt < m_tiles; ++mt) {
    for (int64_t kt = 0; kt < k_tiles; ++kt) {
      // Words moved through float vectors: shuffles only, every bit kept.
      const float* src = reinterpret_cast<const float*>(a.Tile(a_plane, mt, kt));
      float* dst = reinterpret_cast<float*>(b_plane + (b.Tile(b_plane, kt, mt) - b_plane));
      for (int64_t r0 = 0; r0 < kTileRows; r0 += N) {
        for (int64_t c0 = 0; c0 < 16; c0 += N) TransposeTile(src + r0 * 16 + c0, 16, dst + c0 * 16 + r0, 16);
      }
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace cgdr
HWY_AFTER_NAMESPACE();

#endif  // include guard
