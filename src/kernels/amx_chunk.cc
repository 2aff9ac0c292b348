// The AMX engine's chunk stages (amx_chunk-inl.h), compiled once per Highway
// target in their own translation unit: the packing and epilogues run on the
// target's vectors, the products on the hardware tiles or their emulation
// (amx_tiles-inl.h). Also the engine's test hooks (kernels.h).
//
// The V-side buffers (the state, vb, x, vnew, o) are row-major [rows][w_pad]
// here (ScratchLayout::panel_cols = w_pad): a tile of C is 16 rows of 64
// bytes anywhere in them, and rows convert to and from the caller's dtype in
// one pass each.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/amx_chunk.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <cstdint>

#include "core/cpu_features.h"
#include "core/phase_timers.h"
#include "hwy/highway.h"
#include "kernels/amx.h"
#include "kernels/amx_chunk-inl.h"
#include "kernels/amx_tiles-inl.h"
#include "kernels/gemm-inl.h"
#include "kernels/kernels.h"
#include "kernels/kside-inl.h"
#include "plan/scratch_layout.h"

// The planner sizes the scratch for this tile shape without the kernels' header.
static_assert(cgdr::kAmxN == cgdr::kTileBytes / 4 && cgdr::kAmxK == cgdr::kTileK,
              "scratch_layout.h's tile shape is amx.h's");

HWY_BEFORE_NAMESPACE();
namespace cgdr {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

namespace {

uint32_t* Words(float* base, int64_t offset) { return reinterpret_cast<uint32_t*>(base + offset); }

// Which operands have a nonzero lo plane: written by the stage that packs
// them, read by later stages (the items of a group share the key- and
// value-head stages, so the flags live in scratch beside the operands).
struct LoPlanes {
  uint32_t k, q, kt_b, attn, p, kt_a;
};
LoPlanes& Flags(const ScratchLayout& L, float* base) { return *reinterpret_cast<LoPlanes*>(base + L.amx_flags); }

// The layout's operands as the tile product reads them.
TileA OperandA(const uint32_t* hi, int64_t plane, bool has_lo, int64_t m_alloc) {
  TileA a;
  a.hi = hi;
  a.lo = has_lo ? hi + plane : nullptr;
  a.m_alloc = m_alloc;
  return a;
}
TileB OperandB(const uint32_t* hi, int64_t plane, bool has_lo, int64_t kp_alloc) {
  TileB b;
  b.hi = hi;
  b.lo = has_lo ? hi + plane : nullptr;
  b.kp_alloc = kp_alloc;
  return b;
}
// A row-major FP32 buffer of rows `ld` floats apart as C.
TileC RowMajor(float* buf, int64_t ld) { return TileC{buf, ld, kAmxN}; }
// The lo plane of a packed operand, or null when the mode has none (bf16).
uint32_t* LoPlane(uint32_t* hi, int64_t plane, Precision prec) {
  return prec == Precision::kBf16 ? nullptr : hi + plane;
}

int64_t RowTiles(int64_t n) { return (n + kTileRows - 1) / kTileRows; }
int64_t KTiles(int64_t n) { return (n + kTileK - 1) / kTileK; }

TileJob Job(const TileC& c, bool accumulate, const TileA& a, const TileB& b, int64_t m_tiles, int64_t n_tiles,
            int64_t k_tiles, Precision prec) {
  TileJob j;
  j.c = c;
  j.accumulate = accumulate;
  j.a = a;
  j.b = b;
  j.m_tiles = m_tiles;
  j.n_tiles = n_tiles;
  j.k_tiles = k_tiles;
  j.lolo = prec == Precision::kBf16x4;
  return j;
}

// The converter this CPU runs (amx_tiles-inl.h): the same bits either way.
template <class Fn>
HWY_INLINE void WithConverter(const Fn& fn) {
#if CGDR_HAVE_BF16_ASM
  if (Bf16HardwareEnabled()) return fn(Bf16Asm{});
#endif
  fn(Bf16Soft{});
}

// Pair p of rows of X = Vb - diag(beta e^G) T (T = K S, in x; Vb in vb):
// rows 2p, 2p + 1 where below n, else zero (the B operand's padding rows
// must be zeros), packed as the B operand of Vnew = A X; the FP32 rows are
// kept in x for the vector path (CausalProductOnVectors).
template <class Cvt>
HWY_INLINE void FinishAndPackXPair(const ScratchLayout& L, float* HWY_RESTRICT base, int64_t n, int64_t n_tiles,
                                   int64_t p, uint32_t* HWY_RESTRICT hi, uint32_t* HWY_RESTRICT lo, PackFlags& f) {
  const DBF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d)), ld = L.w_pad, kp = L.amx_ck / 2;
  const ChunkVectors cv(base + L.vec, L.c_pad);
  float* x = base + L.x;
  const float* vb = base + L.vb;
  const int64_t i0 = 2 * p, i1 = 2 * p + 1;
  const auto f0 = hn::Set(d, i0 < n ? cv.beG[i0] : 0.0f), f1 = hn::Set(d, i1 < n ? cv.beG[i1] : 0.0f);
  for (int64_t c = 0; c < n_tiles * 16; c += N) {
    auto x0 = hn::Zero(d), x1 = hn::Zero(d);
    if (i0 < n) {
      x0 = hn::NegMulAdd(f0, hn::LoadU(d, x + i0 * ld + c), hn::LoadU(d, vb + i0 * ld + c));
      hn::StoreU(x0, d, x + i0 * ld + c);
    }
    if (i1 < n) {
      x1 = hn::NegMulAdd(f1, hn::LoadU(d, x + i1 * ld + c), hn::LoadU(d, vb + i1 * ld + c));
      hn::StoreU(x1, d, x + i1 * ld + c);
    }
    const int64_t off = ((c / 16) * kp + p) * 16 + c % 16;
    Cvt::Across(x0, x1, hi + off, lo ? lo + off : nullptr, f);
    f.Note(x0);
    f.Note(x1);
  }
}

// out (+)= a * in on the vector units in FP32 (row-major, ld floats), with
// `a` lower triangular read only on and below its diagonal: the products
// whose contraction runs over the chunk's tokens, when one of their B rows is
// not finite. A tile multiplies a whole k tile of B rows into every row of C,
// and 0 * Inf = NaN would carry a later token's Inf back to earlier rows;
// this path keeps causality by construction (SPEC 4 step 3).
void CausalProductOnVectors(const float* a, int64_t lda, const float* in, float* out, bool accumulate, int64_t n,
                            int64_t ld) {
  GemmJob j;
  j.rows = n;
  j.cols = ld;
  j.c = out;
  j.ldc = ld;
  if (accumulate) {
    j.c_init = out;
    j.ld_init = ld;
  }
  j.seg[0] = Segment{a, lda, in, ld, n, true, false};
  Gemm(j);
}

// Rows [0, rows) of a row-major buffer times factor[i].
void ScaleRowsBy(float* HWY_RESTRICT buf, int64_t ld, int64_t rows, const float* HWY_RESTRICT factor) {
  const DBF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  for (int64_t i = 0; i < rows; ++i) {
    const auto f = hn::Set(d, factor[i]);
    for (int64_t c = 0; c < ld; c += N) hn::Store(hn::Mul(f, hn::Load(d, buf + i * ld + c)), d, buf + i * ld + c);
  }
}

// FP32 rows k and q ([n][dk_pad]) as the A operands of X and O (amx_ka,
// amx_qa), and into K^T in FP32 (kt, zero past the chunk's n rows), the A
// operand of the update: the scalar gate's K and Q per key head, KDA's
// K e^G, Q e^G and K e^(G_last - G) per value head.
template <class Cvt>
void PackKeyAndQueryRows(const ScratchLayout& L, float* HWY_RESTRICT base, const float* k, const float* q,
                         const float* k_update, int64_t n, Precision prec) {
  const int64_t m_tiles = RowTiles(n), kd = L.amx_dk / kAmxK, plane = L.amx_cd_plane;
  uint32_t* ka = Words(base, L.amx_ka);
  uint32_t* qa = Words(base, L.amx_qa);
  PackFlags fk, fq;
  PackA<Cvt>(k, L.dk_pad, n, L.dk_pad, false, nullptr, m_tiles, kd, ka, LoPlane(ka, plane, prec), L.c_pad, fk);
  PackA<Cvt>(q, L.dk_pad, n, L.dk_pad, false, nullptr, m_tiles, kd, qa, LoPlane(qa, plane, prec), L.c_pad, fq);
  TransposeRows(k_update, L.dk_pad, n, L.c_pad, base + L.kt);
  LoPlanes& lo = Flags(L, base);
  lo.k = fk.AnyLo();
  lo.q = fq.AnyLo();
}

template <class Tiles, class Cvt>
void KeyHeadOnTiles(const ScratchLayout& L, float* HWY_RESTRICT base, int64_t n, Precision prec) {
  Tiles t;
  const int64_t m_tiles = RowTiles(n), kd = L.amx_dk / kAmxK, plane = L.amx_cd_plane;
  uint32_t* ka = Words(base, L.amx_ka);
  uint32_t* qa = Words(base, L.amx_qa);
  uint32_t* ktb = Words(base, L.amx_ktb);
  PackKeyAndQueryRows<Cvt>(L, base, base + L.k, base + L.q, base + L.k, n, prec);
  LoPlanes& lo = Flags(L, base);
  lo.kt_b = lo.k;  // K^T's halves are K's
  // K^T as the B operand of K K^T and Q K^T: K's tiles transposed (a lo
  // plane only where one is read).
  const TileA k_a = OperandA(ka, plane, lo.k, L.c_pad);
  const TileB kt = OperandB(ktb, plane, lo.kt_b, L.amx_dk / 2);
  TransposeAToB(k_a, k_a.hi, m_tiles, kd, kt, ktb);
  if (lo.kt_b) TransposeAToB(k_a, k_a.lo, m_tiles, kd, kt, ktb + plane);
  TileJob kk = Job(RowMajor(base + L.kkt, L.c_pad), false, k_a, kt, m_tiles, m_tiles, kd, prec);
  kk.lower_result = true;
  RunTileJob(t, kk);
  TileJob qk = Job(RowMajor(base + L.qkt, L.c_pad), false, OperandA(qa, plane, lo.q, L.c_pad), kt, m_tiles, m_tiles, kd, prec);
  qk.lower_result = true;
  RunTileJob(t, qk);
}

template <class Cvt>
void ValueHeadOperands(const ScratchLayout& L, float* HWY_RESTRICT base, int64_t n, Precision prec) {
  const ChunkVectors cv(base + L.vec, L.c_pad);
  const int64_t m_tiles = RowTiles(n), kc = KTiles(n);
  uint32_t* attn = Words(base, L.amx_attn);
  uint32_t* p = Words(base, L.amx_p);
  uint32_t* kt = Words(base, L.amx_kta);
  PackFlags fa, fp, fk;
  // A = (I + L)^-1 and P, lower triangular: nothing right of the diagonal read.
  PackA<Cvt>(base + L.attn, L.c_pad, n, n, true, nullptr, m_tiles, kc, attn, LoPlane(attn, L.amx_cc_plane, prec), L.c_pad, fa);
  PackA<Cvt>(base + L.qk, L.c_pad, n, n, true, nullptr, m_tiles, kc, p, LoPlane(p, L.amx_cc_plane, prec), L.c_pad, fp);
  // The per-channel gate (docs/SPEC.md 10.4): this value head's K e^G and
  // Q e^G, and K e^(G_last - G) for the update, in the key head's operand
  // buffers (KDA's key-head stage leaves them unused).
  if (L.kda) PackKeyAndQueryRows<Cvt>(L, base, base + L.kda_k, base + L.kda_q, base + L.kda_kf, n, prec);
  LoPlanes& lo = Flags(L, base);
  // The update's A: K^T with column c times e^(G_last - G_c) (per channel:
  // the factors are in the rows already).
  PackA<Cvt>(base + L.kt, L.c_pad, L.dk_pad, n, false, L.kda ? nullptr : cv.eGl, L.dk_pad / kTileRows, kc, kt,
             LoPlane(kt, L.amx_kta_plane, prec), L.dk_pad, fk);
  lo.attn = fa.AnyLo();
  lo.p = fp.AnyLo();
  lo.kt_a = fk.AnyLo();
}

template <class Tiles, class Cvt>
void VSideOnTiles(const ScratchLayout& L, float* HWY_RESTRICT base, float* HWY_RESTRICT state, int64_t n,
                  Precision prec, const ChunkTensors& io, PrefetchQueue* prefetch) {
  Tiles t;
  const LoPlanes& lo = Flags(L, base);
  const ChunkVectors cv(base + L.vec, L.c_pad);
  const int64_t m_tiles = RowTiles(n), kc = KTiles(n), kd = L.amx_dk / kAmxK, ld = L.w_pad;
  const int64_t n_tiles = L.w_pad / kAmxN, dk_tiles = L.dk_pad / kTileRows;
  const TileA k_a = OperandA(Words(base, L.amx_ka), L.amx_cd_plane, lo.k, L.c_pad);
  const TileA q_a = OperandA(Words(base, L.amx_qa), L.amx_cd_plane, lo.q, L.c_pad);
  const TileA attn_a = OperandA(Words(base, L.amx_attn), L.amx_cc_plane, lo.attn, L.c_pad);
  const TileA p_a = OperandA(Words(base, L.amx_p), L.amx_cc_plane, lo.p, L.c_pad);
  const TileA kt_a = OperandA(Words(base, L.amx_kta), L.amx_kta_plane, lo.kt_a, L.dk_pad);
  float* x = base + L.x;
  float* vnew = base + L.vnew;
  float* o = base + L.o;

  // S as the B operand of X and O, split once per chunk, and in the same
  // pass scaled by e^(G_last) in place, where the update's tiles accumulate
  // (per channel: row i of S by e^(G_last,i), KdaOperands' state decay).
  uint32_t* sb = Words(base, L.amx_s);
  PackFlags fs;
  {
    CGDR_PHASE(kAmxStateSplit);
    PackB<Cvt, true, false>(state, ld, L.dk_pad, n_tiles, kd, sb, LoPlane(sb, L.amx_s_plane, prec), L.amx_dk / 2, fs,
                            L.kda ? 1.0f : cv.eG[n - 1], KdaOperands::Of(L, base).state_decay);
  }
  const TileB s_b = OperandB(sb, L.amx_s_plane, fs.AnyLo(), L.amx_dk / 2);

  // T = K S (X's product) while Vb = diag(beta) V comes in, row by row.
  auto load_v = [&](int64_t i) { LoadValueTile(L, base, io, i, i + 1, [&](int64_t r) { return cv.beta[r]; }); };
  SideTask load_v_task(n, load_v);
  TileJob xj = Job(RowMajor(x, ld), false, k_a, s_b, m_tiles, n_tiles, kd, prec);
  xj.prefetch = prefetch;  // the next chunk's lines, paced over the three state products (PrefetchQueue::Pace)
  {
    CGDR_PHASE(kAmxX);
    RunTileJob(t, xj, &load_v_task);
  }

  // Q S (O's first product) while X = Vb - diag(beta e^G) T is finished and
  // packed, a pair of rows at a time.
  uint32_t* xb = Words(base, L.amx_x);
  PackFlags fx;
  auto finish_x = [&](int64_t p) {
    FinishAndPackXPair<Cvt>(L, base, n, n_tiles, p, xb, LoPlane(xb, L.amx_cw_plane, prec), fx);
  };
  SideTask finish_x_task(kc * 16, finish_x);
  TileJob qj = Job(RowMajor(o, ld), false, q_a, s_b, m_tiles, n_tiles, kd, prec);
  qj.prefetch = prefetch;
  {
    CGDR_PHASE(kAmxQS);
    RunTileJob(t, qj, &finish_x_task);
  }

  // Vnew = A X (A = (I + L)^-1, unit lower triangular) while Q S is scaled
  // by scale e^G row by row.
  auto scale_o = [&](int64_t i) { ScaleRowsBy(o + i * ld, ld, 1, cv.qg + i); };
  SideTask scale_o_task(m_tiles * kTileRows, scale_o);
  {
    CGDR_PHASE(kAmxVnew);
    if (!fx.AnyNonFinite()) {
      TileJob vj = Job(RowMajor(vnew, ld), false, attn_a, OperandB(xb, L.amx_cw_plane, fx.AnyLo(), L.amx_ck / 2),
                       m_tiles, n_tiles, kc, prec);
      vj.lower_a = true;
      RunTileJob(t, vj, &scale_o_task);
    } else {
      CausalProductOnVectors(base + L.attn, L.c_pad, x, vnew, false, n, ld);
      scale_o_task.Finish();
    }
  }
  uint32_t* vw = Words(base, L.amx_v);
  PackFlags fv;
  {
    CGDR_PHASE(kAmxVnewPack);
    PackB<Cvt>(vnew, ld, n, n_tiles, kc, vw, LoPlane(vw, L.amx_cw_plane, prec), L.amx_ck / 2, fv);
  }
  const TileB vnew_b = OperandB(vw, L.amx_cw_plane, fv.AnyLo(), L.amx_ck / 2);

  // O = diag(scale e^G) Q S + P Vnew.
  {
    CGDR_PHASE(kAmxPV);
    if (!fv.AnyNonFinite()) {
      TileJob oj = Job(RowMajor(o, ld), true, p_a, vnew_b, m_tiles, n_tiles, kc, prec);
      oj.lower_a = true;
      RunTileJob(t, oj);
    } else {
      CausalProductOnVectors(base + L.qk, L.c_pad, vnew, o, true, n, ld);
    }
  }

  // S = e^(G_last) S + K^T diag(e^(G_last - G)) Vnew, while O goes out to
  // the caller's rows in its dtype.
  auto store_out = [&](int64_t i) { StoreOutputRows(L, o, io, i, i + 1); };
  SideTask store_out_task(n, store_out);
  TileJob sj = Job(RowMajor(state, ld), true, kt_a, vnew_b, dk_tiles, n_tiles, kc, prec);
  sj.prefetch = prefetch;
  CGDR_PHASE(kAmxStateUpdate);
  RunTileJob(t, sj, &store_out_task);
}

}  // namespace

void AmxPrepareKeyHead(const ScratchLayout& L, float* HWY_RESTRICT base, int64_t n, Precision prec, bool hw) {
  WithConverter([&](auto cvt) {
    using Cvt = decltype(cvt);
#if HWY_ARCH_X86_64
    if (hw) return KeyHeadOnTiles<AmxHwTiles, Cvt>(L, base, n, prec);
#endif
    KeyHeadOnTiles<AmxEmuTiles, Cvt>(L, base, n, prec);
  });
}

void AmxPrepareValueHead(const ScratchLayout& L, float* HWY_RESTRICT base, int64_t n, Precision prec) {
  WithConverter([&](auto cvt) { ValueHeadOperands<decltype(cvt)>(L, base, n, prec); });
}

void AmxChunkVSide(const ScratchLayout& L, float* HWY_RESTRICT base, float* HWY_RESTRICT state, int64_t n,
                   Precision prec, bool hw, const ChunkTensors& io, PrefetchQueue* prefetch) {
  WithConverter([&](auto cvt) {
    using Cvt = decltype(cvt);
#if HWY_ARCH_X86_64
    if (hw) return VSideOnTiles<AmxHwTiles, Cvt>(L, base, state, n, prec, io, prefetch);
#endif
    VSideOnTiles<AmxEmuTiles, Cvt>(L, base, state, n, prec, io, prefetch);
  });
}

// Test hook: c += a * b, one TDPBF16PS on 16 x 16 tiles, on the hardware
// (configuring and releasing the tiles of this thread) or the emulation.
inline HWY_NOINLINE void TileDotForTestImpl(const uint32_t* a, const uint32_t* b, float* c, bool hw) {
  const auto run = [&](auto& t) {
    t.template LoadC<0>(c, kTileBytes);
    t.template LoadA<0>(a);
    t.template LoadB<0>(b);
    t.template Dp<0, 0>();
    t.template StoreC<0>(c, kTileBytes);
  };
#if HWY_ARCH_X86_64
  if (hw) {
    ConfigureTilesOnThisThread();
    AmxHwTiles t;
    run(t);
    ReleaseTilesOnThisThread();
    return;
  }
#endif
  AmxEmuTiles t;
  run(t);
}

// Test hook: 32 floats packed as one A row (pairs along k) and as two B rows
// (pairs across rows: x[0, 16) and x[16, 32)), hi and lo, by the converter
// `hw` picks: VCVTNE2PS2BF16 where usable, else the integer arithmetic.
inline HWY_NOINLINE void AmxPackForTestImpl(const float* x, uint32_t* along_hi, uint32_t* along_lo, uint32_t* across_hi,
                                            uint32_t* across_lo, bool hw) {
  const auto pack = [&](auto cvt) {
    using Cvt = decltype(cvt);
    const DBF d;
    const int64_t N = static_cast<int64_t>(hn::Lanes(d));
    PackFlags f;
    for (int64_t k0 = 0; k0 < 32; k0 += 2 * N) {
      Cvt::Along(hn::LoadU(d, x + k0), hn::LoadU(d, x + k0 + N), along_hi + k0 / 2, along_lo + k0 / 2, f);
    }
    for (int64_t n0 = 0; n0 < 16; n0 += N) {
      Cvt::Across(hn::LoadU(d, x + n0), hn::LoadU(d, x + 16 + n0), across_hi + n0, across_lo + n0, f);
    }
  };
#if CGDR_HAVE_BF16_ASM
  if (hw && Bf16HardwareEnabled()) return pack(Bf16Asm{});
#endif
  (void)hw;
  pack(Bf16Soft{});
}

}  // namespace HWY_NAMESPACE
}  // namespace cgdr
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace cgdr {

HWY_EXPORT(TileDotForTestImpl);
HWY_EXPORT(AmxPackForTestImpl);

void TileDotForTest(const uint32_t* a, const uint32_t* b, float* c, bool hw) {
  HWY_DYNAMIC_DISPATCH(TileDotForTestImpl)(a, b, c, hw && AmxHardwareEnabled());
}

void AmxPackForTest(const float* x, uint32_t* along_hi, uint32_t* along_lo, uint32_t* across_hi, uint32_t* across_lo,
                    bool hw) {
  HWY_DYNAMIC_DISPATCH(AmxPackForTestImpl)(x, along_hi, along_lo, across_hi, across_lo, hw);
}

}  // namespace cgdr
#endif  // HWY_ONCE
