// PrefetchQueue: the cache lines of the next chunk's rows (q, k, v, out, beta, g of a
// group of items), issued a few at a time between the register tiles of the
// state products instead of in one burst.
//
// Why: rows are 4-8 KiB apart (strided by heads), so the hardware prefetchers
// do not see the pattern and software prefetches are needed. Issued in one
// burst (~400 lines per chunk on the flagship), they wait for the core's few
// line-fill buffers: perf put ~18% of the non-product time on the prefetch
// instructions themselves. Paced by the products' multiply-adds (Pace,
// Credit), they overlap the FMAs.
//
// The lines are listed when they are queued, outside the products, into a
// buffer the caller lends (the item driver's: kPrefetchListLines), and
// issued from that list by a loop with nothing to decide. Walked from the
// spans between the tiles instead (row by row, a branch at each row's end
// that its 4-8 lines made hard to predict), the walk alone cost O 0.37k and
// the update 0.17k TSC cycles a panel of KDA's chunk, its prefetch
// instructions 0.15k and 0.04k more (AMD EPYC Zen 5, timing build, the
// prefetches replaced by an empty asm). Lines past the buffer are walked.
#ifndef CGDR_KERNELS_PREFETCH_H_
#define CGDR_KERNELS_PREFETCH_H_

#include <algorithm>
#include <cstdint>

namespace cgdr {

class PrefetchQueue {
 public:
  // into_l1: read lines with the T0 hint (L1 and L2), else T1 (L2 alone);
  // the plan's choice (Plan::prefetch_into_l1). Lines to be written take
  // prefetchw either way.
  // list: room for `capacity` line addresses, the queue's until it is gone
  // (null or 0: every line walked from its span).
  PrefetchQueue() = default;
  PrefetchQueue(bool into_l1, uintptr_t* list, int64_t capacity)
      : into_l1_(into_l1), list_(list), capacity_(list ? capacity : 0) {}

  // `rows` rows of `bytes` bytes each, `stride` bytes apart, from `first`.
  // `write`: lines the stores will fill (prefetch with intent to write).
  void Add(const void* first, int64_t stride, int64_t rows, int64_t bytes, bool write) {
    if (count_ == kMaxSpans || rows <= 0 || bytes <= 0) return;  // a prefetch is a hint: dropping one is safe
    spans_[count_++] = Span{static_cast<const uint8_t*>(first), stride, rows, bytes, write};
    const uintptr_t start = reinterpret_cast<uintptr_t>(first) & 63;  // a row's first line may start before it
    total_lines_ += rows * static_cast<int64_t>((start + static_cast<uintptr_t>(bytes) + 63) / 64);
    if (next_ == count_ - 1) List();  // every earlier span listed whole: list this one too
  }

  // Paces the lines over `fmas` multiply-adds of products to come (the
  // chunk's work): Credit() then issues one line per fmas / lines of them,
  // so a product of short tiles (the state update, k = C) issues no more per
  // second than one of long tiles, and tail tiles issue their share too.
  // (At a fixed 4 lines per tile, the state update calls that issued lines
  // took ~1000 TSC cycles more than those that did not; paced, the whole
  // call's time is unchanged within 1% in an in-process A/B: the lines'
  // cost moved, it did not vanish.)
  void Pace(int64_t fmas) { fmas_per_line_ = total_lines_ > 0 ? std::max<int64_t>(1, fmas / total_lines_) : 1; }

  // `fmas` multiply-adds done since the last call: issues the lines they pay for.
  void Credit(int64_t fmas) {
    const int64_t lines = Paid(fmas);
    if (lines > 0) Issue(lines);
  }

  // The lines that `fmas` more multiply-adds pay for; the remainder carries
  // over. A tile pays for a few lines (1-9 on the flagship), counted by
  // subtraction: a 64-bit division per tile cost more than it saved.
  int64_t Paid(int64_t fmas) {
    credit_ += fmas;
    if (credit_ < fmas_per_line_) return 0;
    if (issued_ == listed_ && next_ == count_) {  // all issued: nothing left to pay for
      credit_ = 0;
      return 0;
    }
    if (credit_ >= kMaxLinesCounted * fmas_per_line_) {
      const int64_t lines = credit_ / fmas_per_line_;
      credit_ %= fmas_per_line_;
      return lines;
    }
    int64_t lines = 0;
    do {
      credit_ -= fmas_per_line_;
      ++lines;
    } while (credit_ >= fmas_per_line_);
    return lines;
  }

  // Issues up to `lines` further lines, in order.
  void Issue(int64_t lines) {
    if (into_l1_) {
      Walk(lines, [](uintptr_t line, bool write) { Fetch<3>(line, write); });
    } else {
      Walk(lines, [](uintptr_t line, bool write) { Fetch<2>(line, write); });
    }
  }

  // Calls fetch(line address, write) for up to `lines` further lines, in
  // order: the listed ones, then those walked from the spans. Each row is
  // covered from the line holding its first byte to the line holding its
  // last.
  template <class Fetch>
  void Walk(int64_t lines, const Fetch& fetch) {
    const int64_t end = issued_ + std::min(lines, listed_ - issued_);
    for (int64_t i = issued_; i < end; ++i) fetch(list_[i] & ~kWriteBit, (list_[i] & kWriteBit) != 0);
    lines -= end - issued_;
    issued_ = end;
    if (lines > 0 && next_ < count_) WalkSpans(lines, fetch);
  }

  // Everything not yet issued.
  void Drain() { Issue(INT64_MAX); }

  int64_t total_lines() const { return total_lines_; }
  // The lines in the list (the rest are walked).
  int64_t listed_lines() const { return listed_; }

 private:
  // Bit 0 of a listed line address (a multiple of 64): a line to write.
  static constexpr uintptr_t kWriteBit = 1;

  // The lines of span next_ (just added) into the list, while it has room.
  void List() {
    WalkSpans(capacity_ - listed_, [this](uintptr_t line, bool write) { list_[listed_++] = line | (write ? kWriteBit : 0); });
  }

  // visit(line, write) for up to `lines` lines from the cursor (span next_,
  // row_, offset_ bytes into the row's first line) on through the spans,
  // leaving the cursor after the last: List's lines, and Walk's past the
  // list. Row by row, a row's lines in an inner loop whose length the span
  // keeps. The cursor is kept in locals: as members it went to memory after
  // every line.
  template <class Visit>
  void WalkSpans(int64_t lines, const Visit& visit) {
    int next = next_;
    int64_t row = row_, offset = offset_;
    for (; next < count_ && lines > 0; ++next, row = 0) {
      const Span& s = spans_[next];
      for (; row < s.rows; ++row, offset = 0) {
        const uintptr_t first = reinterpret_cast<uintptr_t>(s.first + row * s.stride);
        const uintptr_t first_line = first & ~uintptr_t{63};
        const uintptr_t end_line = (first + static_cast<uintptr_t>(s.bytes) + 63) & ~uintptr_t{63};
        for (uintptr_t line = first_line + static_cast<uintptr_t>(offset); line < end_line; line += 64, --lines) {
          if (lines == 0) {
            offset = static_cast<int64_t>(line - first_line);
            next_ = next;
            row_ = row;
            offset_ = offset;
            return;
          }
          visit(line, s.write);
        }
      }
    }
    next_ = next;
    row_ = row;
    offset_ = offset;
  }

  // One line, read with locality kReadHint (3: T0, 2: T1) or for writing.
  template <int kReadHint>
  static void Fetch(uintptr_t line, bool write) {
    if (write) {
      __builtin_prefetch(reinterpret_cast<const void*>(line), 1, 2);
    } else {
      __builtin_prefetch(reinterpret_cast<const void*>(line), 0, kReadHint);
    }
  }

  struct Span {
    const uint8_t* first;
    int64_t stride, rows, bytes;
    bool write;
  };
  static constexpr int kMaxSpans = 6;  // q, k, v, out, beta, g
  static constexpr int64_t kMaxLinesCounted = 16;
  Span spans_[kMaxSpans] = {};
  int count_ = 0, next_ = 0;
  int64_t row_ = 0, offset_ = 0;
  int64_t total_lines_ = 0, fmas_per_line_ = 1, credit_ = 0;
  bool into_l1_ = false;
  uintptr_t* list_ = nullptr;
  int64_t capacity_ = 0, listed_ = 0, issued_ = 0;
};

}  // namespace cgdr

#endif  // CGDR_KERNELS_PREFETCH_H_
