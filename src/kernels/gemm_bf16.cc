// GemmBf16(): the products of Gemm() (gemm-inl.h, same GemmJob) in the bf16
// precision modes. Operands are rounded (kBf16) or split hi + lo (kBf16x3,
// kBf16x4) and packed as bf16 pairs along k once per product (the CPU analogue
// of the seeds' NZ panels), then multiplied on vdpbf16ps where the CPU has
// AVX512_BF16 (AVX3 target) and on its exact emulation elsewhere: the same
// bits on every target. Also the bf16 test hooks of kernels.h.
//
// Its own translation unit, compiled once per Highway target; the kernels
// reach it through the declaration in gemm_bf16-inl.h.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/gemm_bf16.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <algorithm>
#include <cstdint>

#include "cgdr/cgdr.hpp"
#include "core/cpu_features.h"
#include "hwy/highway.h"
#include "kernels/bf16-inl.h"
#include "kernels/gemm-inl.h"
#include "kernels/gemm_bf16-inl.h"
#include "kernels/load-inl.h"
#include "kernels/kernels.h"

HWY_BEFORE_NAMESPACE();
namespace cgdr {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// One packed A*B term: pair p of row i of A at a[i * a_ld + p * a_pstride],
// pair p of column c of B at b[p * b_ld + c]; kp pairs (k rounded up to even,
// padding zero). Negation is folded into A's sign bits.
struct PackedSeg {
  const uint32_t* a_hi = nullptr;
  const uint32_t* a_lo = nullptr;
  int64_t a_ld = 0, a_pstride = 1;
  const uint32_t* b_hi = nullptr;
  const uint32_t* b_lo = nullptr;
  int64_t b_ld = 0;
  int64_t kp = 0;
  bool lower = false;
  bool a_has_lo = false, b_has_lo = false;  // lo halves present and not all zero
  RowEpilogue then = {};  // Segment::then, in FP32 on the accumulators
};

struct PackedJob {
  int64_t rows = 0, cols = 0;
  float* c = nullptr;
  int64_t ldc = 0;
  const float* c_init = nullptr;
  int64_t ld_init = 0;
  float alpha = 1.0f;
  const float* row_alpha = nullptr;  // GemmJob::row_alpha (KDA's per-channel state decay)
  PackedSeg seg[2];
  int segments = 1;
  bool lower_result = false;
  bool lolo = false;  // kBf16x4: the lo*lo term too
  ScaledCopy also;
  TensorRows out_rows;
};

namespace bf16_emu {
using Dot = DotEmu;
#include "kernels/gemm_bf16-body.h"
}  // namespace bf16_emu

}  // namespace HWY_NAMESPACE
}  // namespace cgdr
HWY_AFTER_NAMESPACE();

// The hardware path: vdpbf16ps (AVX512_BF16), compiled on the AVX3 target in
// a region that also enables avx512bf16 (Highway 1.0.3 has no target for it),
// and called only when the CPU reports AVX512_BF16 (Bf16HardwareEnabled()).
#undef CGDR_HAVE_BF16_HW
#if HWY_TARGET == HWY_AVX3
#define CGDR_HAVE_BF16_HW 1
// In place of HWY_BEFORE_NAMESPACE(): the AVX3 target's features plus
// avx512bf16 (a nested push would not add to the outer one under clang).
HWY_PUSH_ATTRIBUTES(HWY_TARGET_STR ",avx512bf16")
namespace cgdr {
namespace HWY_NAMESPACE {
namespace bf16_hw {
struct Dot {
  static constexpr bool kSmallBlocks = false;
  static HWY_INLINE hn::Vec<DBF> Apply(hn::Vec<DBF> acc, VU32 a, VU32 b) {
    return hn::Vec<DBF>{_mm512_dpbf16_ps(acc.raw, (__m512bh)a.raw, (__m512bh)b.raw)};
  }
};
#include "kernels/gemm_bf16-body.h"
inline HWY_NOINLINE void DotOnce(hn::Vec<DBF>* acc, VU32 a, VU32 b) { *acc = Dot::Apply(*acc, a, b); }
}  // namespace bf16_hw
}  // namespace HWY_NAMESPACE
}  // namespace cgdr
HWY_POP_ATTRIBUTES
#else
#define CGDR_HAVE_BF16_HW 0
#endif

HWY_BEFORE_NAMESPACE();
namespace cgdr {
namespace HWY_NAMESPACE {

HWY_INLINE void RunPackedJob(const PackedJob& pj) {
#if CGDR_HAVE_BF16_HW
  if (Bf16HardwareEnabled()) {
    bf16_hw::RunPacked(pj);
    return;
  }
#endif
  bf16_emu::RunPacked(pj);
}

// job as for Gemm(); `pack` is ScratchLayout::pack (8 parts of `part` words).
HWY_NOINLINE void GemmBf16(const GemmJob& job, Precision prec, uint32_t* HWY_RESTRICT pack, int64_t part) {
  const bool split = prec != Precision::kBf16;
  // The packed kernel has no tile hook: the product's lines at its start.
  if (job.prefetch) job.prefetch->Credit(job.rows * job.cols * job.KSum());
  PackedJob pj;
  pj.rows = job.rows; pj.cols = job.cols; pj.c = job.c; pj.ldc = job.ldc;
  pj.c_init = job.c_init; pj.ld_init = job.ld_init; pj.alpha = job.alpha; pj.row_alpha = job.row_alpha;
  pj.segments = job.segments; pj.lower_result = job.lower_result;
  pj.lolo = prec == Precision::kBf16x4;
  pj.also = job.also;
  pj.out_rows = job.out_rows;
  const int64_t N = static_cast<int64_t>(hn::Lanes(DBF()));
  for (int si = 0; si < job.segments; ++si) {
    const Segment& s = job.seg[si];
    PackedSeg& ps = pj.seg[si];
    uint32_t* a_hi = pack + (4 * si + 0) * part;
    uint32_t* a_lo = split ? pack + (4 * si + 1) * part : nullptr;
    uint32_t* b_hi = pack + (4 * si + 2) * part;
    uint32_t* b_lo = split ? pack + (4 * si + 3) * part : nullptr;
    const uint32_t sign = s.negate ? 0x80008000u : 0u;
    ps.kp = (s.k + 1) / 2;
    ps.lower = s.lower;
    ps.then = s.then;
    if (s.a_kstride == 1) {  // row-major A: pairs along its rows
      ps.a_has_lo = PackPairsAlongK(s.a, s.lda, job.rows, s.k, s.lower, ps.kp, a_hi, a_lo, sign);
      ps.a_ld = ps.kp;
      ps.a_pstride = 1;
    } else if (s.lda == 1 && !s.lower && job.rows % N == 0) {  // A read transposed: pairs across the source rows
      ps.a_has_lo = PackPairsAcrossRows(s.a, s.a_kstride, s.k, job.rows, a_hi, a_lo, job.rows, sign);
      ps.a_ld = 1;
      ps.a_pstride = job.rows;
    } else {
      ps.a_has_lo = PackPairsScalar(s.a, s.lda, s.a_kstride, job.rows, s.k, s.lower, ps.kp, a_hi, a_lo, sign);
      ps.a_ld = ps.kp;
      ps.a_pstride = 1;
    }
    ps.b_has_lo = PackPairsAcrossRows(s.b, s.ldb, s.k, job.cols, b_hi, b_lo, job.cols, 0u);
    ps.b_ld = job.cols;
    ps.a_hi = a_hi; ps.a_lo = a_lo; ps.b_hi = b_hi; ps.b_lo = b_lo;
  }
  RunPackedJob(pj);
}

// Test hook: n (a multiple of the lane count) lanes of acc += dpbf16(a, b),
// on the hardware instruction when `hw` and available, else the emulation.
inline HWY_NOINLINE void Bf16DotPairsImpl(const uint32_t* a, const uint32_t* b, float* acc, int64_t n, bool hw) {
  const DBF d;
  const DU32 du;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  for (int64_t i = 0; i + N <= n; i += N) {
    const auto va = hn::LoadU(du, a + i), vb = hn::LoadU(du, b + i);
    auto vacc = hn::LoadU(d, acc + i);
#if CGDR_HAVE_BF16_HW
    if (hw && Bf16HardwareEnabled()) {
      bf16_hw::DotOnce(&vacc, va, vb);
    } else {
      vacc = DotEmu::Apply(vacc, va, vb);
    }
#else
    (void)hw;
    vacc = DotEmu::Apply(vacc, va, vb);
#endif
    hn::StoreU(vacc, d, acc + i);
  }
}

// Test hook: the hi/lo split of n floats (vectors, then the scalar tail).
inline HWY_NOINLINE void Bf16SplitImpl(const float* x, int64_t n, uint16_t* hi, uint16_t* lo) {
  const DBF d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = 0;
  uint32_t h[64], l[64];  // >= lanes of any target
  for (; i + N <= n; i += N) {
    VU32 vh, vl;
    SplitBf16(hn::LoadU(d, x + i), &vh, &vl);
    hn::StoreU(vh, DU32(), h);
    hn::StoreU(vl, DU32(), l);
    for (int64_t j = 0; j < N; ++j) {
      hi[i + j] = static_cast<uint16_t>(h[j]);
      lo[i + j] = static_cast<uint16_t>(l[j]);
    }
  }
  for (; i < n; ++i) {
    uint32_t a, b;
    SplitBf16Scalar(x[i], &a, &b);
    hi[i] = static_cast<uint16_t>(a);
    lo[i] = static_cast<uint16_t>(b);
  }
}

// Test hook: StoreRow (load-inl.h), the conversion of every output row.
inline HWY_NOINLINE void StoreRowImpl(const float* src, int64_t n, DType t, void* dst) { StoreRow(src, n, t, dst); }

}  // namespace HWY_NAMESPACE
}  // namespace cgdr
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace cgdr {

HWY_EXPORT(Bf16DotPairsImpl);
HWY_EXPORT(Bf16SplitImpl);
HWY_EXPORT(StoreRowImpl);

void Bf16DotPairs(const uint32_t* a, const uint32_t* b, float* acc, int64_t n, bool hw) {
  HWY_DYNAMIC_DISPATCH(Bf16DotPairsImpl)(a, b, acc, n, hw);
}

void Bf16Split(const float* x, int64_t n, uint16_t* hi, uint16_t* lo) { HWY_DYNAMIC_DISPATCH(Bf16SplitImpl)(x, n, hi, lo); }

void StoreRowForTest(const float* src, int64_t n, DType t, void* dst) { HWY_DYNAMIC_DISPATCH(StoreRowImpl)(src, n, t, dst); }

}  // namespace cgdr
#endif  // HWY_ONCE
