// PrefetchQueue: the cache lines of the next chunk's rows (q, k, v, out, beta, g of a
// group of items), issued a few at a time between the register tiles of the
// state products instead of in one burst.
//
// Why: rows are 4-8 KiB apart (strided by heads), so the hardware prefetchers
// do not see the pattern and software prefetches are needed. Issued in one
// burst (~400 lines per chunk on the flagship), they wait for the core's few
// line-fill buffers: perf put ~18% of the non-product time on the prefetch
// instructions themselves. Spread over the ~160 tiles of a group's chunk,
// they overlap the FMAs.
#ifndef CGDR_KERNELS_PREFETCH_H_
#define CGDR_KERNELS_PREFETCH_H_

#include <cstdint>

namespace cgdr {

class PrefetchQueue {
 public:
  // Lines issued per register tile of a product (Gemm's tile loop).
  static constexpr int64_t kLinesPerTile = 4;
  // Lines issued per product where there is no tile loop to spread them over.
  static constexpr int64_t kLinesPerProduct = 48;

  // `rows` rows of `bytes` bytes each, `stride` bytes apart, from `first`.
  // `write`: lines the stores will fill (prefetch with intent to write).
  void Add(const void* first, int64_t stride, int64_t rows, int64_t bytes, bool write) {
    if (count_ == kMaxSpans || rows <= 0 || bytes <= 0) return;  // a prefetch is a hint: dropping one is safe
    spans_[count_++] = Span{static_cast<const uint8_t*>(first), stride, rows, bytes, write};
  }

  // Issues up to `lines` further lines, in order. Each row is covered from
  // the line holding its first byte to the line holding its last.
  void Issue(int64_t lines) {
    for (; lines > 0 && next_ < count_; --lines) {
      const Span& s = spans_[next_];
      const uintptr_t row = reinterpret_cast<uintptr_t>(s.first + row_ * s.stride);
      const uintptr_t line = (row & ~uintptr_t{63}) + static_cast<uintptr_t>(offset_);
      if (s.write) {
        __builtin_prefetch(reinterpret_cast<const void*>(line), 1, 2);
      } else {
        __builtin_prefetch(reinterpret_cast<const void*>(line), 0, 2);
      }
      offset_ += 64;
      if (line + 64 >= row + static_cast<uintptr_t>(s.bytes)) {
        offset_ = 0;
        if (++row_ == s.rows) {
          row_ = 0;
          ++next_;
        }
      }
    }
  }

  // Everything not yet issued.
  void Drain() { Issue(INT64_MAX); }

 private:
  struct Span {
    const uint8_t* first;
    int64_t stride, rows, bytes;
    bool write;
  };
  static constexpr int kMaxSpans = 6;  // q, k, v, out, beta, g
  Span spans_[kMaxSpans] = {};
  int count_ = 0, next_ = 0;
  int64_t row_ = 0, offset_ = 0;
};

}  // namespace cgdr

#endif  // CGDR_KERNELS_PREFETCH_H_
