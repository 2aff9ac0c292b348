// Loading rows into FP32 panels and storing results, converting dtypes in
// registers (issue 5). f16 uses the F16C instructions where the target has
// them (AVX2, AVX-512: exact promotion, round-to-nearest-even demotion) and
// the portable converters of core/dtype.h elsewhere; bf16 is a shift in, and
// rounded to nearest even out (Highway 1.0.3's DemoteTo truncates).
#if defined(CGDR_KERNELS_LOAD_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef CGDR_KERNELS_LOAD_INL_H_
#undef CGDR_KERNELS_LOAD_INL_H_
#else
#define CGDR_KERNELS_LOAD_INL_H_
#endif

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/dtype.h"
#include "core/l2norm.h"
#include "hwy/highway.h"
#include "kernels/bf16-inl.h"

HWY_BEFORE_NAMESPACE();
namespace cgdr {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// The dtype as a compile-time constant: the row loops of the item driver
// dispatch once per tile (ForDType) instead of once per row, so each row is
// its conversion loop and nothing else.
template <DType kT>
using DTypeTag = std::integral_constant<DType, kT>;

template <class Fn>
HWY_INLINE void ForDType(DType t, const Fn& fn) {
  switch (t) {
    case DType::kF32: return fn(DTypeTag<DType::kF32>{});
    case DType::kBF16: return fn(DTypeTag<DType::kBF16>{});
    default: return fn(DTypeTag<DType::kF16>{});
  }
}

template <DType kT>
constexpr int64_t kDTypeBytes = kT == DType::kF32 ? 4 : 2;

// Whether a 16-bit kT converts in registers here (BitsAs, FromBitsAs): bf16
// everywhere, f16 where F16C does it (elsewhere the portable converter goes
// lane by lane through memory). True for f32, which needs no conversion.
template <DType kT>
constexpr bool kRoundsInRegisters = kT != DType::kF16 || HWY_TARGET <= HWY_AVX2;

// The 16-bit lanes (f16 or bf16 bits, round to nearest even) that the lanes
// of v round to as kT: what StoreVectorAs<kT> writes. A value that goes to
// several places or is read back is rounded once (StoreRoundedAs below;
// docs/SPEC.md 6b).
template <DType kT, class D>
HWY_INLINE hn::Vec<hn::Rebind<uint16_t, D>> BitsAs(D d, hn::Vec<D> v) {
  static_assert(kT != DType::kF32 && kRoundsInRegisters<kT>, "16-bit dtypes rounded in registers only");
  const hn::Rebind<uint16_t, D> du16;
  if constexpr (kT == DType::kF16) {
    return hn::BitCast(du16, hn::DemoteTo(hn::Rebind<hwy::float16_t, D>(), v));
  } else {
    // Bf16Bits: the rounding of F32ToBF16 (nearest even, NaN kept) in registers.
    const VU32 bits = Bf16Bits(hn::BitCast(DU32(), v));  // < 2^16: the i32 demote is exact
    (void)d;
    return hn::DemoteTo(du16, hn::BitCast(DI32(), bits));
  }
}

// The f32 value of 16-bit lanes of kT: what LoadVectorAs<kT> reads from them
// (it is built on this), without a trip through memory.
template <DType kT, class D>
HWY_INLINE hn::Vec<D> FromBitsAs(D d, hn::Vec<hn::Rebind<uint16_t, D>> bits) {
  static_assert(kT != DType::kF32 && kRoundsInRegisters<kT>, "16-bit dtypes rounded in registers only");
  if constexpr (kT == DType::kF16) {
    return hn::PromoteTo(d, hn::BitCast(hn::Rebind<hwy::float16_t, D>(), bits));
  } else {
    return hn::BitCast(d, hn::ShiftLeft<16>(hn::PromoteTo(hn::RebindToUnsigned<D>(), bits)));
  }
}

// Elements [i, i + lanes) of src as f32.
template <DType kT, class D>
HWY_INLINE hn::Vec<D> LoadVectorAs(D d, const void* HWY_RESTRICT src, int64_t i) {
  if constexpr (kT == DType::kF32) {
    return hn::LoadU(d, static_cast<const float*>(src) + i);
  } else if constexpr (kRoundsInRegisters<kT>) {
    return FromBitsAs<kT>(d, hn::LoadU(hn::Rebind<uint16_t, D>(), static_cast<const uint16_t*>(src) + i));
  } else {
    const uint16_t* bits = static_cast<const uint16_t*>(src) + i;  // no F16C: the portable converter
    HWY_ALIGN float lanes[hn::MaxLanes(d)];
    for (size_t l = 0; l < hn::Lanes(d); ++l) lanes[l] = F16ToF32(bits[l]);
    return hn::Load(d, lanes);
  }
}

// Element i of src as f32.
template <DType kT>
HWY_INLINE float LoadElementAs(const void* HWY_RESTRICT src, int64_t i) {
  if constexpr (kT == DType::kF32) return static_cast<const float*>(src)[i];
  if constexpr (kT == DType::kBF16) return BF16ToF32(static_cast<const uint16_t*>(src)[i]);
  return F16ToF32(static_cast<const uint16_t*>(src)[i]);
}

// dst[0, n) = src[0, n) as f32; dst[n, n_pad) = 0.
template <DType kT>
HWY_INLINE void LoadRowAs(const void* HWY_RESTRICT src, int64_t n, float* HWY_RESTRICT dst, int64_t n_pad) {
  const hn::ScalableTag<float> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(LoadVectorAs<kT>(d, src, i), d, dst + i);
  for (; i < n; ++i) dst[i] = LoadElementAs<kT>(src, i);
  for (; i < n_pad; ++i) dst[i] = 0.0f;
}

// dst[0, n) = factor * src[0, n) as f32, for n a multiple of the lanes (whole
// vectors: no tail, no padding). The product is the one Mul of a separate
// scaling pass (bitwise), without that pass's second trip through the row.
template <DType kT>
HWY_INLINE void LoadScaledVectorsAs(const void* HWY_RESTRICT src, int64_t n, float factor, float* HWY_RESTRICT dst) {
  const hn::ScalableTag<float> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const auto f = hn::Set(d, factor);
  for (int64_t i = 0; i < n; i += N) hn::Store(hn::Mul(f, LoadVectorAs<kT>(d, src, i)), d, dst + i);
}

HWY_INLINE void LoadRow(const void* src, DType t, int64_t n, float* HWY_RESTRICT dst, int64_t n_pad) {
  ForDType(t, [&](auto tag) { LoadRowAs<decltype(tag)::value>(src, n, dst, n_pad); });
}

// Whether StoreVectorAs<kT, true> writes with one streaming store here:
// not f16 without F16C (it converts lane by lane), and not where a vector of
// kT is under 16 bytes (16-bit rows on the 128-bit targets): Highway streams
// such a partial vector with a 16-byte store, which faulted on 8-byte-aligned
// addresses and writes past the vector (prefill checkpoints and verify on a
// bf16 pool, SSE4).
template <DType kT>
constexpr bool kStreamableAs =
    (kT != DType::kF16 || HWY_TARGET <= HWY_AVX2) &&
    (HWY_TARGET == HWY_SCALAR || hn::MaxLanes(hn::ScalableTag<float>()) * kDTypeBytes<kT> >= 16);

// The lanes of v stored as kT at element i of dst (round to nearest even).
// kStream (only where kStreamableAs<kT>): a streaming store past the caches;
// dst + i must then be aligned to the stored vector's bytes.
template <DType kT, bool kStream = false, class D>
HWY_INLINE void StoreVectorAs(D d, hn::Vec<D> v, void* HWY_RESTRICT dst, int64_t i) {
  static_assert(!kStream || kStreamableAs<kT>, "no vector store of this dtype on this target");
  const auto store = [](auto vec, auto dv, auto* p) {
    if constexpr (kStream) {
      hn::Stream(vec, dv, p);
    } else {
      hn::StoreU(vec, dv, p);
    }
  };
  if constexpr (kT == DType::kF32) {
    store(v, d, static_cast<float*>(dst) + i);
  } else if constexpr (kRoundsInRegisters<kT>) {
    store(BitsAs<kT>(d, v), hn::Rebind<uint16_t, D>(), static_cast<uint16_t*>(dst) + i);
  } else {
    HWY_ALIGN float lanes[hn::MaxLanes(d)];  // no F16C: the portable converter
    hn::Store(v, d, lanes);
    uint16_t* bits = static_cast<uint16_t*>(dst) + i;
    for (size_t l = 0; l < hn::Lanes(d); ++l) bits[l] = F32ToF16(lanes[l]);
  }
}

// How many vectors of kT the hot loops hand to StoreVectorsAs at a time: two
// where that saves work (bf16 on AVX2), else one (pairing f32 rows slowed
// the memory-bound decode step by 3-4% on AMD Zen 1: the loops stay as they
// were).
template <DType kT>
constexpr int kStoreVectors = (kT == DType::kBF16 && HWY_TARGET == HWY_AVX2) ? 2 : 1;

// f(i, P) for the vectors [0, full) of a row in groups of P =
// kStoreVectors<kT> (the bf16 stores pair up on AVX2: StoreVectorsAs below), a
// last single vector where a group does not fit; L: the lanes.
template <DType kT, class F>
HWY_INLINE void ForStoreGroups(int64_t full, int64_t L, const F& f) {
  constexpr int P = kStoreVectors<kT>;
  int64_t i = 0;
#pragma GCC unroll 16
  for (; i + P * L <= full; i += P * L) f(i, std::integral_constant<int, P>());
  if constexpr (P > 1) {
    if (i < full) f(i, std::integral_constant<int, 1>());
  }
}

// v stored as kT at element i of dst and, where stream_dst is not null (only
// where kStreamableAs<kT>; aligned as StoreVectorAs<kT, true> asks), streamed
// to stream_dst at i: one rounding for both. Returns the stored value as f32,
// what LoadVectorAs<kT> would read back, from registers where the dtype
// rounds there (docs/SPEC.md 6b: verify's next sums, layout vk).
template <DType kT, class D>
HWY_INLINE hn::Vec<D> StoreRoundedAs(D d, hn::Vec<D> v, void* HWY_RESTRICT dst, int64_t i,
                                     void* HWY_RESTRICT stream_dst) {
  if constexpr (!kStreamableAs<kT>) HWY_DASSERT(stream_dst == nullptr);
  if constexpr (kT == DType::kF32) {
    static_assert(kStreamableAs<kT>, "f32 vectors stream on every target");
    hn::StoreU(v, d, static_cast<float*>(dst) + i);
    if (stream_dst != nullptr) hn::Stream(v, d, static_cast<float*>(stream_dst) + i);
    return v;
  } else if constexpr (kRoundsInRegisters<kT>) {
    const hn::Rebind<uint16_t, D> du16;
    const auto bits = BitsAs<kT>(d, v);
    hn::StoreU(bits, du16, static_cast<uint16_t*>(dst) + i);
    if constexpr (kStreamableAs<kT>) {
      if (stream_dst != nullptr) hn::Stream(bits, du16, static_cast<uint16_t*>(stream_dst) + i);
    }
    return FromBitsAs<kT>(d, bits);
  } else {
    StoreVectorAs<kT>(d, v, dst, i);  // the portable converter: nothing to stream
    return LoadVectorAs<kT>(d, dst, i);
  }
}

// P vectors v[0, P) stored as kT at elements i, i + Lanes(d), ... of dst, and
// streamed to stream_dst there where it is not null: StoreRoundedAs P times,
// bit for bit. On AVX2 a bf16 pair shares one pack and one lane permute, which
// a single vector needs as well (the 32-to-16-bit pack works within 128-bit
// blocks); that is most of the bf16 store's cost on cores that split 256-bit
// operations (AMD Zen 1: docs/SPEC.md 6b).
template <DType kT, int P, class D>
HWY_INLINE void StoreVectorsAs(D d, const hn::Vec<D>* v, void* HWY_RESTRICT dst, int64_t i,
                               void* HWY_RESTRICT stream_dst = nullptr) {
#if HWY_TARGET == HWY_AVX2
  if constexpr (kT == DType::kBF16 && P == 2 && hn::MaxLanes(D()) == 8) {
    const DU32 du;
    const __m256i packed = _mm256_packus_epi32(Bf16Bits(hn::BitCast(du, v[0])).raw,  // both < 2^16: exact
                                               Bf16Bits(hn::BitCast(du, v[1])).raw);
    const __m256i ordered = _mm256_permute4x64_epi64(packed, _MM_SHUFFLE(3, 1, 2, 0));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(static_cast<uint16_t*>(dst) + i), ordered);
    if (stream_dst != nullptr) {  // each half aligned as one vector's store (16 bytes), not the pair's 32
      __m128i* to = reinterpret_cast<__m128i*>(static_cast<uint16_t*>(stream_dst) + i);
      _mm_stream_si128(to, _mm256_castsi256_si128(ordered));
      _mm_stream_si128(to + 1, _mm256_extracti128_si256(ordered, 1));
    }
    return;
  }
#endif
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  for (int p = 0; p < P; ++p) StoreRoundedAs<kT>(d, v[p], dst, i + p * N, stream_dst);
}

// x stored as kT at element i of dst (round to nearest even).
template <DType kT>
HWY_INLINE void StoreElementAs(void* HWY_RESTRICT dst, int64_t i, float x) {
  if constexpr (kT == DType::kF32) {
    static_cast<float*>(dst)[i] = x;
  } else if constexpr (kT == DType::kBF16) {
    static_cast<uint16_t*>(dst)[i] = F32ToBF16(x);
  } else {
    static_cast<uint16_t*>(dst)[i] = F32ToF16(x);
  }
}

// dst[0, n) = src[0, n) converted to kT (round to nearest even).
template <DType kT>
HWY_INLINE void StoreRowAs(const float* HWY_RESTRICT src, int64_t n, void* HWY_RESTRICT dst) {
  if constexpr (kT == DType::kF32) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
  } else {
    const hn::ScalableTag<float> d;
    const int64_t N = static_cast<int64_t>(hn::Lanes(d));
    const int64_t full = n - n % N;
    ForStoreGroups<kT>(full, N, [&](int64_t i, auto vectors) {
      constexpr int P = decltype(vectors)::value;
      hn::Vec<decltype(d)> v[P];
      for (int p = 0; p < P; ++p) v[p] = hn::LoadU(d, src + i + p * N);
      StoreVectorsAs<kT, P>(d, v, dst, i);
    });
    for (int64_t i = full; i < n; ++i) StoreElementAs<kT>(dst, i, src[i]);
  }
}

// StoreRowAs with streaming stores past the caches (kStreamableAs<kT>):
// dst on a 64-byte line and n * sizeof(kT) a multiple of 64, so the row is
// whole lines, each written in one go.
template <DType kT>
HWY_INLINE void StreamRowAs(const float* HWY_RESTRICT src, int64_t n, void* HWY_RESTRICT dst) {
  const hn::ScalableTag<float> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  for (int64_t i = 0; i < n; i += N) StoreVectorAs<kT, true>(d, hn::LoadU(d, src + i), dst, i);
}

HWY_INLINE void StoreRow(const float* HWY_RESTRICT src, int64_t n, DType t, void* dst) {
  ForDType(t, [&](auto tag) { StoreRowAs<decltype(tag)::value>(src, n, dst); });
}

}  // namespace HWY_NAMESPACE
}  // namespace cgdr
HWY_AFTER_NAMESPACE();

#endif  // include guard
