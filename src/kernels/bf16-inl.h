// bf16 operands for the precision modes (Options.precision): rounding to
// bf16 (nearest even, as core/dtype.h's F32ToBF16), the hi/lo split of the
// seeds' compensated products (000 s.5.6: x = hi + lo, both 16-bit), packing
// into bf16 pairs along k (what vdpbf16ps consumes per 32-bit lane), and the
// exact emulation of vdpbf16ps for targets and CPUs without AVX512_BF16.
//
// Per-target code: included once per Highway target.
#if defined(CGDR_KERNELS_BF16_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef CGDR_KERNELS_BF16_INL_H_
#undef CGDR_KERNELS_BF16_INL_H_
#else
#define CGDR_KERNELS_BF16_INL_H_
#endif

#include <cfloat>
#include <cmath>
#include <cstdint>

#include "core/dtype.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace cgdr {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DBF = hn::ScalableTag<float>;
using DU32 = hn::RebindToUnsigned<DBF>;
using DI32 = hn::RebindToSigned<DBF>;
using VU32 = hn::Vec<DU32>;

// bf16 bits (low 16 bits of each lane) of the f32 lanes u, rounded to nearest
// even; NaN stays NaN (quiet). Bit-identical to F32ToBF16.
// The NaN test is the float compare (one operation; an integer test of the
// magnitude takes two), and u >> 16 serves both the rounding and the NaN.
HWY_INLINE VU32 Bf16Bits(VU32 u) {
  const DBF d;
  const DU32 du;
  const auto top = hn::ShiftRight<16>(u);
  const auto rounding = hn::Add(hn::Set(du, 0x7FFFu), hn::And(top, hn::Set(du, 1u)));
  const auto rounded = hn::ShiftRight<16>(hn::Add(u, rounding));
  const auto nan = hn::RebindMask(du, hn::IsNaN(hn::BitCast(d, u)));
  return hn::IfThenElse(nan, hn::Or(top, hn::Set(du, 0x40u)), rounded);
}

// hi = bf16(x); lo = bf16(x - hi), 0 where hi is not finite. x - hi is exact
// in f32, so hi + lo == x whenever x's significand fits 16 bits.
HWY_INLINE void SplitBf16(hn::Vec<DBF> x, VU32* hi, VU32* lo) {
  const DBF d;
  const DU32 du;
  *hi = Bf16Bits(hn::BitCast(du, x));
  const auto hif = hn::BitCast(d, hn::ShiftLeft<16>(*hi));
  const auto lob = Bf16Bits(hn::BitCast(du, hn::Sub(x, hif)));
  const auto expo = hn::Set(du, 0x7F80u);
  *lo = hn::IfThenZeroElse(hn::Eq(hn::And(*hi, expo), expo), lob);
}

// Scalar twin of SplitBf16 (tails), bit-identical.
inline void SplitBf16Scalar(float x, uint32_t* hi, uint32_t* lo) {
  const uint16_t h = F32ToBF16(x);
  *hi = h;
  *lo = (h & 0x7F80u) == 0x7F80u ? 0u : F32ToBF16(x - BF16ToF32(h));
}

// Pairs across rows (the B operand, and a transposed A):
//   hi[p * ld_dst + c] = bf16(src[2p][c]) | bf16(src[2p + 1][c]) << 16
// for p < ceil(k / 2), c < cols; a missing odd row is 0. `sign` is XORed into
// both halves (0x80008000 negates). lo null: hi only. Returns whether any lo
// half is nonzero (false when lo is null).
HWY_INLINE bool PackPairsAcrossRows(const float* HWY_RESTRICT src, int64_t ld, int64_t k, int64_t cols,
                                    uint32_t* HWY_RESTRICT hi, uint32_t* HWY_RESTRICT lo, int64_t ld_dst,
                                    uint32_t sign) {
  const DBF d;
  const DU32 du;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const auto vsign = hn::Set(du, sign);
  auto any = hn::Zero(du);
  uint32_t any_s = 0;
  for (int64_t kk = 0; kk < k; kk += 2) {
    const float* r0 = src + kk * ld;
    const float* r1 = kk + 1 < k ? src + (kk + 1) * ld : nullptr;
    uint32_t* h = hi + (kk / 2) * ld_dst;
    uint32_t* l = lo ? lo + (kk / 2) * ld_dst : nullptr;
    int64_t c = 0;
    for (; c + N <= cols; c += N) {
      VU32 h0, l0, h1 = hn::Zero(du), l1 = hn::Zero(du);
      SplitBf16(hn::LoadU(d, r0 + c), &h0, &l0);
      if (r1) SplitBf16(hn::LoadU(d, r1 + c), &h1, &l1);
      hn::StoreU(hn::Xor(hn::Or(h0, hn::ShiftLeft<16>(h1)), vsign), du, h + c);
      if (l) {
        const auto pair = hn::Or(l0, hn::ShiftLeft<16>(l1));
        any = hn::Or(any, pair);
        hn::StoreU(hn::Xor(pair, vsign), du, l + c);
      }
    }
    for (; c < cols; ++c) {
      uint32_t h0, l0, h1 = 0, l1 = 0;
      SplitBf16Scalar(r0[c], &h0, &l0);
      if (r1) SplitBf16Scalar(r1[c], &h1, &l1);
      h[c] = (h0 | (h1 << 16)) ^ sign;
      if (l) {
        any_s |= l0 | (l1 << 16);
        l[c] = (l0 | (l1 << 16)) ^ sign;
      }
    }
  }
  return any_s != 0 || !hn::AllTrue(du, hn::Eq(any, hn::Zero(du)));
}

// Pairs along k of a row-major A (a[i * lda + kk]): dst row i holds the bf16
// values of a[i][0, kend) as consecutive 16-bit halves, kend = k, or
// min(k, i + 1) when `lower` (nothing right of the diagonal is read), then
// zeros up to 2 * kp. Row stride kp pairs.
HWY_INLINE bool PackPairsAlongK(const float* HWY_RESTRICT a, int64_t lda, int64_t rows, int64_t k, bool lower,
                                int64_t kp, uint32_t* HWY_RESTRICT hi, uint32_t* HWY_RESTRICT lo, uint32_t sign) {
  const DBF d;
  const DU32 du;
  const DI32 di;
  const hn::Rebind<uint16_t, DI32> du16;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const auto vsign = hn::Set(du, sign & 0xFFFFu);
  const uint16_t ssign = static_cast<uint16_t>(sign & 0xFFFFu);
  auto any = hn::Zero(du);
  uint32_t any_s = 0;
  for (int64_t i = 0; i < rows; ++i) {
    const float* src = a + i * lda;
    uint16_t* h = reinterpret_cast<uint16_t*>(hi + i * kp);
    uint16_t* l = lo ? reinterpret_cast<uint16_t*>(lo + i * kp) : nullptr;
    const int64_t kend = lower ? std::min<int64_t>(k, i + 1) : k;
    int64_t kk = 0;
    for (; kk + N <= kend; kk += N) {
      VU32 vh, vl;
      SplitBf16(hn::LoadU(d, src + kk), &vh, &vl);
      hn::StoreU(hn::DemoteTo(du16, hn::BitCast(di, hn::Xor(vh, vsign))), du16, h + kk);
      if (l) {
        any = hn::Or(any, vl);
        hn::StoreU(hn::DemoteTo(du16, hn::BitCast(di, hn::Xor(vl, vsign))), du16, l + kk);
      }
    }
    for (; kk < kend; ++kk) {
      uint32_t vh, vl;
      SplitBf16Scalar(src[kk], &vh, &vl);
      h[kk] = static_cast<uint16_t>(vh ^ ssign);
      if (l) {
        any_s |= vl;
        l[kk] = static_cast<uint16_t>(vl ^ ssign);
      }
    }
    for (; kk < 2 * kp; ++kk) {
      h[kk] = 0;
      if (l) l[kk] = 0;
    }
  }
  return any_s != 0 || !hn::AllTrue(du, hn::Eq(any, hn::Zero(du)));
}

// Any A (a[i * lda + kk * kstride]) into pairs along k, scalar: the general
// case (A[i][p] at dst[i * kp + p]).
inline bool PackPairsScalar(const float* a, int64_t lda, int64_t kstride, int64_t rows, int64_t k, bool lower,
                            int64_t kp, uint32_t* hi, uint32_t* lo, uint32_t sign) {
  uint32_t any = 0;
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t kend = lower ? std::min<int64_t>(k, i + 1) : k;
    for (int64_t p = 0; p < kp; ++p) {
      uint32_t h[2] = {0, 0}, l[2] = {0, 0};
      for (int64_t e = 0; e < 2; ++e) {
        const int64_t kk = 2 * p + e;
        if (kk < kend) SplitBf16Scalar(a[i * lda + kk * kstride], &h[e], &l[e]);
      }
      hi[i * kp + p] = (h[0] | (h[1] << 16)) ^ sign;
      if (lo) {
        any |= l[0] | (l[1] << 16);
        lo[i * kp + p] = (l[0] | (l[1] << 16)) ^ sign;
      }
    }
  }
  return any != 0;
}

// Exact emulation of one vdpbf16ps lane step (Intel SDM, VDPBF16PS):
//   acc += f32(a.bf16[1]) * f32(b.bf16[1]);  acc += f32(a.bf16[0]) * f32(b.bf16[0])
// two FMAs in that order (odd element first), each with denormal inputs read
// as zero and denormal results flushed to zero (sign kept), round to nearest
// even, MXCSR ignored. Products of two bf16 are exact in f32, so MulAdd gives
// the same bits as a fused FMA except where a product underflows: Fma() below.
HWY_INLINE hn::Vec<DBF> FlushDenormal(hn::Vec<DBF> x) {
  const DBF d;
  const DU32 du;
  const auto tiny = hn::Lt(hn::Abs(x), hn::Set(d, FLT_MIN));
  return hn::IfThenElse(tiny, hn::And(x, hn::BitCast(d, hn::Set(du, 0x80000000u))), x);
}

struct DotEmu {
  static constexpr bool kSmallBlocks = true;  // gemm_bf16-body.h
  static HWY_INLINE hn::Vec<DBF> Apply(hn::Vec<DBF> acc, VU32 a, VU32 b) {
    const DBF d;
    const DU32 du;
    const auto himask = hn::Set(du, 0xFFFF0000u);
    const auto a1 = FlushDenormal(hn::BitCast(d, hn::And(a, himask)));
    const auto b1 = FlushDenormal(hn::BitCast(d, hn::And(b, himask)));
    const auto a0 = FlushDenormal(hn::BitCast(d, hn::ShiftLeft<16>(a)));
    const auto b0 = FlushDenormal(hn::BitCast(d, hn::ShiftLeft<16>(b)));
    acc = FlushDenormal(Fma(a1, b1, FlushDenormal(acc)));
    return FlushDenormal(Fma(a0, b0, acc));
  }
  // A fused multiply-add: a product of two bf16 is exact unless it underflows,
  // and then only a single rounding gives the instruction's bits (a tiny
  // negative product added to +0 is -0, not +0). Targets without FMA
  // instructions (SSE4, scalar) fuse lane by lane in libm.
  static HWY_INLINE hn::Vec<DBF> Fma(hn::Vec<DBF> a, hn::Vec<DBF> b, hn::Vec<DBF> c) {
#if HWY_NATIVE_FMA
    return hn::MulAdd(a, b, c);
#else
    const DBF d;
    float va[64], vb[64], vc[64];  // >= lanes of any target
    hn::StoreU(a, d, va);
    hn::StoreU(b, d, vb);
    hn::StoreU(c, d, vc);
    for (size_t i = 0; i < hn::Lanes(d); ++i) vc[i] = std::fma(va[i], vb[i], vc[i]);
    return hn::LoadU(d, vc);
#endif
  }
};

}  // namespace HWY_NAMESPACE
}  // namespace cgdr
HWY_AFTER_NAMESPACE();

#endif  // include guard
