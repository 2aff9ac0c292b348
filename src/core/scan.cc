// Value scans for check_values (core/scan.h). Each block of elements is first
// tested as a whole with Highway vectors (compiled per target, dispatched at
// run time); only a block that has a match is searched element by element.
// (The plain C++ loop this replaces vectorised for the baseline target only,
// 16 bytes at a time: 15.7 GB/s over 128 MB of f16 on 2 threads here; these
// blocks on AVX-512: 48.8 GB/s.)
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "core/scan.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include <omp.h>

#include "core/scan.h"
#include "core/threads.h"

// Target-independent pieces, defined once (foreach_target includes this file
// once per target): the element read and the two predicates on an element's
// bits, which decide every answer; the vector tests below only find the
// blocks worth searching.
#ifndef CGDR_CORE_SCAN_SHARED_
#define CGDR_CORE_SCAN_SHARED_
namespace cgdr::scan_bits {

// Element i of x as its bits (memcpy: the tensor need not be aligned).
template <typename Bits>
inline Bits ElementBits(const uint8_t* x, int64_t i) {
  Bits v;
  std::memcpy(&v, x + i * static_cast<int64_t>(sizeof(Bits)), sizeof v);
  return v;
}

// Non-finite: every bit of the exponent field set (Inf, NaN).
template <typename Bits>
inline bool IsNonFinite(Bits v, Bits exponent) { return (v & exponent) == exponent; }

// Positive: the bits, as an unsigned number, in [1, exponent] (sign clear,
// not zero, not NaN; +Inf included). v - 1 <= exponent - 1, wrapping at 0.
template <typename Bits>
inline bool IsPositive(Bits v, Bits exponent) { return static_cast<Bits>(v - 1) <= static_cast<Bits>(exponent - 1); }

}  // namespace cgdr::scan_bits
#endif  // CGDR_CORE_SCAN_SHARED_

HWY_BEFORE_NAMESPACE();
namespace cgdr {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Whether any of the n elements at x matches: match(d, v) on whole vectors,
// scalar_match on the last few.
template <typename Bits, class VectorMatch, class ScalarMatch>
HWY_INLINE bool AnyMatch(const uint8_t* HWY_RESTRICT x, int64_t n, const VectorMatch& match,
                         const ScalarMatch& scalar_match) {
  const hn::ScalableTag<Bits> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  auto any = hn::Zero(d);
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    const auto v = hn::LoadU(d, reinterpret_cast<const Bits*>(x) + i);
    any = hn::Or(any, hn::VecFromMask(d, match(d, v)));
  }
  bool found = !hn::AllFalse(d, hn::MaskFromVec(any));
  for (; i < n; ++i) found |= scalar_match(scan_bits::ElementBits<Bits>(x, i));
  return found;
}

// scan_bits::IsNonFinite on vectors.
template <typename Bits>
HWY_INLINE bool AnyAllOnes(const uint8_t* x, int64_t n, Bits exponent) {
  return AnyMatch<Bits>(
      x, n,
      [exponent](auto d, auto v) {
        const auto e = hn::Set(d, exponent);
        return hn::Eq(hn::And(v, e), e);
      },
      [exponent](Bits v) { return scan_bits::IsNonFinite(v, exponent); });
}

// scan_bits::IsPositive on vectors (unsigned v - 1 <= exponent - 1 as a Min).
template <typename Bits>
HWY_INLINE bool AnyInOneToTop(const uint8_t* x, int64_t n, Bits exponent) {
  return AnyMatch<Bits>(
      x, n,
      [exponent](auto d, auto v) {
        const auto shifted = hn::Sub(v, hn::Set(d, Bits{1}));
        return hn::Eq(hn::Min(shifted, hn::Set(d, static_cast<Bits>(exponent - 1))), shifted);
      },
      [exponent](Bits v) { return scan_bits::IsPositive(v, exponent); });
}

bool AnyNonFinite16(const uint8_t* x, int64_t n, uint16_t exponent) { return AnyAllOnes<uint16_t>(x, n, exponent); }
bool AnyNonFinite32(const uint8_t* x, int64_t n, uint32_t exponent) { return AnyAllOnes<uint32_t>(x, n, exponent); }
bool AnyPositive16(const uint8_t* x, int64_t n, uint16_t exponent) { return AnyInOneToTop<uint16_t>(x, n, exponent); }
bool AnyPositive32(const uint8_t* x, int64_t n, uint32_t exponent) { return AnyInOneToTop<uint32_t>(x, n, exponent); }

}  // namespace HWY_NAMESPACE
}  // namespace cgdr
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace cgdr {

HWY_EXPORT(AnyNonFinite16);
HWY_EXPORT(AnyNonFinite32);
HWY_EXPORT(AnyPositive16);
HWY_EXPORT(AnyPositive32);

namespace {

// The exponent field of a floating-point dtype, as its bits.
constexpr uint16_t kF16Exponent = 0x7C00u;
constexpr uint16_t kBF16Exponent = 0x7F80u;
constexpr uint32_t kF32Exponent = 0x7F800000u;

constexpr int64_t kBlock = 2048;
// Below this many elements per thread a part is not worth a thread's start.
constexpr int64_t kMinPartElements = int64_t{1} << 18;

// One scan: whether a run of elements has a match (vectorised, dispatched),
// and whether one element is a match (the same predicate on its bits).
template <typename Bits>
struct Scan {
  bool (*any)(const uint8_t*, int64_t, Bits);
  bool (*one)(Bits, Bits);
  Bits exponent;
};

// First i in [begin, end) that matches, or -1: each block tested as a whole,
// only a block that has a match searched element by element. The element
// test decides: a vector test that flagged a block without a match would cost
// time, not change the answer (one that missed a match fails the tests).
template <typename Bits>
int64_t FirstMatchIn(const uint8_t* x, int64_t begin, int64_t end, const Scan<Bits>& scan) {
  for (int64_t b = begin; b < end; b += kBlock) {
    const int64_t e = std::min(end, b + kBlock);
    if (!scan.any(x + b * static_cast<int64_t>(sizeof(Bits)), e - b, scan.exponent)) continue;
    for (int64_t i = b; i < e; ++i) {
      if (scan.one(scan_bits::ElementBits<Bits>(x, i), scan.exponent)) return i;
    }
  }
  return -1;
}

// FirstMatchIn over [0, n) in up to `threads` contiguous parts at once.
template <typename Bits>
int64_t FirstMatch(const void* data, int64_t n, int threads, const Scan<Bits>& scan) {
  const auto* x = static_cast<const uint8_t*>(data);
  const int64_t parts = std::clamp<int64_t>(n / kMinPartElements, 1, ResolveThreadCount(threads));
  if (parts == 1) return FirstMatchIn<Bits>(x, 0, n, scan);
  const int64_t part = (n + parts - 1) / parts;
  std::vector<int64_t> first(static_cast<size_t>(parts), -1);
#pragma omp parallel for num_threads(static_cast<int>(parts)) schedule(static, 1)
  for (int64_t p = 0; p < parts; ++p) {
    first[static_cast<size_t>(p)] = FirstMatchIn<Bits>(x, p * part, std::min(n, (p + 1) * part), scan);
  }
  for (const int64_t i : first) {
    if (i >= 0) return i;
  }
  return -1;
}

// A predicate for both widths of element bits.
struct Predicate {
  Scan<uint16_t> on16;  // exponent filled in per dtype
  Scan<uint32_t> on32;
};

// The first match in t in its own dtype; -1 for dtypes without an exponent
// field (int32: never non-finite, never checked for sign).
int64_t ScanByDtype(const TensorView& t, int threads, Predicate p) {
  const int64_t n = t.numel();
  switch (t.dtype) {
    case DType::kF16: p.on16.exponent = kF16Exponent; return FirstMatch(t.data, n, threads, p.on16);
    case DType::kBF16: p.on16.exponent = kBF16Exponent; return FirstMatch(t.data, n, threads, p.on16);
    case DType::kF32: p.on32.exponent = kF32Exponent; return FirstMatch(t.data, n, threads, p.on32);
    default: return -1;
  }
}

}  // namespace

int64_t FirstNonFinite(const TensorView& t, int threads) {
  return ScanByDtype(t, threads, {{HWY_DYNAMIC_DISPATCH(AnyNonFinite16), scan_bits::IsNonFinite<uint16_t>, 0},
                                  {HWY_DYNAMIC_DISPATCH(AnyNonFinite32), scan_bits::IsNonFinite<uint32_t>, 0}});
}

int64_t FirstPositive(const TensorView& t, int threads) {
  return ScanByDtype(t, threads, {{HWY_DYNAMIC_DISPATCH(AnyPositive16), scan_bits::IsPositive<uint16_t>, 0},
                                  {HWY_DYNAMIC_DISPATCH(AnyPositive32), scan_bits::IsPositive<uint32_t>, 0}});
}

}  // namespace cgdr
#endif  // HWY_ONCE
