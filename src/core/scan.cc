#include "core/scan.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include <omp.h>

#include "core/threads.h"

namespace cgdr {
namespace {

// Bit layout of a floating-point dtype: exponent field and magnitude bits.
template <typename Bits>
struct Layout {
  Bits exponent, magnitude;
};
constexpr Layout<uint16_t> kF16{0x7C00u, 0x7FFFu};
constexpr Layout<uint16_t> kBF16{0x7F80u, 0x7FFFu};
constexpr Layout<uint32_t> kF32{0x7F800000u, 0x7FFFFFFFu};

// Element i's bits (memcpy: the tensor holds floats, not integers).
template <typename Bits>
inline Bits BitsAt(const unsigned char* x, int64_t i) {
  Bits v;
  std::memcpy(&v, x + i * static_cast<int64_t>(sizeof(Bits)), sizeof v);
  return v;
}

constexpr int64_t kBlock = 2048;
// Below this many elements per thread a part is not worth a thread's start.
constexpr int64_t kMinPartElements = int64_t{1} << 18;

// First i in [begin, end) with pred(element i), or -1. Each block is first
// reduced with OR (a loop without early exit, which vectorises); only a block
// that matched is searched element by element.
template <typename Bits, typename Pred>
int64_t FirstMatchIn(const unsigned char* x, int64_t begin, int64_t end, Pred pred) {
  for (int64_t b = begin; b < end; b += kBlock) {
    const int64_t e = std::min(end, b + kBlock);
    unsigned any = 0;
    for (int64_t i = b; i < e; ++i) any |= pred(BitsAt<Bits>(x, i)) ? 1u : 0u;
    if (!any) continue;
    for (int64_t i = b; i < e; ++i) {
      if (pred(BitsAt<Bits>(x, i))) return i;
    }
  }
  return -1;
}

// FirstMatchIn over [0, n) in up to `threads` contiguous parts at once.
template <typename Bits, typename Pred>
int64_t FirstMatch(const void* data, int64_t n, int threads, Pred pred) {
  const auto* x = static_cast<const unsigned char*>(data);
  const int64_t parts = std::clamp<int64_t>(n / kMinPartElements, 1, ResolveThreadCount(threads));
  if (parts == 1) return FirstMatchIn<Bits>(x, 0, n, pred);
  const int64_t part = (n + parts - 1) / parts;
  std::vector<int64_t> first(static_cast<size_t>(parts), -1);
#pragma omp parallel for num_threads(static_cast<int>(parts)) schedule(static, 1)
  for (int64_t p = 0; p < parts; ++p) {
    first[static_cast<size_t>(p)] = FirstMatchIn<Bits>(x, p * part, std::min(n, (p + 1) * part), pred);
  }
  for (const int64_t i : first) {
    if (i >= 0) return i;
  }
  return -1;
}

template <typename Bits>
int64_t FirstNonFiniteBits(const void* x, int64_t n, int threads, Layout<Bits> l) {
  return FirstMatch<Bits>(x, n, threads, [l](Bits v) { return (v & l.exponent) == l.exponent; });
}

// > 0: sign clear and magnitude non-zero; NaN (all exponent bits, non-zero
// fraction) excluded.
template <typename Bits>
int64_t FirstPositiveBits(const void* x, int64_t n, int threads, Layout<Bits> l) {
  const Bits sign = static_cast<Bits>(~l.magnitude);
  return FirstMatch<Bits>(x, n, threads, [l, sign](Bits v) {
    const Bits mag = v & l.magnitude;
    return (v & sign) == 0 && mag != 0 && mag <= l.exponent;
  });
}

// Calls scan(t.data, n, layout) with the bit layout of t's dtype; -1 for
// dtypes without one (int32: never non-finite, never checked for sign).
template <typename Scan>
int64_t ScanByDtype(const TensorView& t, Scan scan) {
  const int64_t n = t.numel();
  switch (t.dtype) {
    case DType::kF16: return scan(t.data, n, kF16);
    case DType::kBF16: return scan(t.data, n, kBF16);
    case DType::kF32: return scan(t.data, n, kF32);
    default: return -1;
  }
}

}  // namespace

int64_t FirstNonFinite(const TensorView& t, int threads) {
  return ScanByDtype(t, [threads](const void* x, int64_t n, auto layout) {
    return FirstNonFiniteBits(x, n, threads, layout);
  });
}

int64_t FirstPositive(const TensorView& t, int threads) {
  return ScanByDtype(t, [threads](const void* x, int64_t n, auto layout) {
    return FirstPositiveBits(x, n, threads, layout);
  });
}

}  // namespace cgdr
