// PrefetchQueue (kernels/prefetch.h): which lines it hands out, in what
// order, and how many a given amount of work pays for. The prefetches are
// hints, so a wrong queue would only cost speed; these tests see it anyway.
#include "kernels/prefetch.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "core/synthetic.h"  // Bytes

namespace cgdr {
namespace {

using Lines = std::vector<std::pair<uintptr_t, bool>>;  // (line address, write)

// A buffer on 64-byte lines (Bytes: LineAlignedAllocator); addresses are only computed.
struct LineBuffer {
  Bytes bytes = Bytes(1 << 16);
  const uint8_t* base() const { return bytes.data(); }
};

// The lines of `rows` rows as the queue promises them: each row from the line
// of its first byte to the line of its last.
void ExpectRows(const uint8_t* first, int64_t stride, int64_t rows, int64_t bytes, bool write, Lines* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(first + r * stride);
    for (uintptr_t line = a & ~uintptr_t{63}; line <= ((a + static_cast<uintptr_t>(bytes) - 1) & ~uintptr_t{63});
         line += 64) {
      out->emplace_back(line, write);
    }
  }
}

Lines Walked(PrefetchQueue* q, int64_t lines) {
  Lines got;
  q->Walk(lines, [&](uintptr_t line, bool write) { got.emplace_back(line, write); });
  return got;
}

// The same lines in the same order whatever the list holds of them: none,
// part of a span (the rest walked from there, mid-row too: 1, 4, 11),
// whole spans (8, 16), or all.
TEST(PrefetchQueue, WalksEveryLineOfEveryRowOnceInOrder) {
  LineBuffer buf;
  const uint8_t* b = buf.base();
  Lines want;
  ExpectRows(b + 16, 1000, 3, 100, false, &want);  // rows off their lines, 2-3 lines each
  ExpectRows(b + 8192, 256, 2, 256, true, &want);  // whole lines, for writing
  ExpectRows(b + 20000 + 63, 64, 2, 2, false, &want);  // 2 bytes across a line boundary
  ASSERT_EQ(want.size(), 18u);  // 8 + 8 + 2
  for (int64_t capacity : {0, 1, 4, 8, 11, 16, 18, 64}) {
    std::vector<uintptr_t> list(static_cast<size_t>(capacity) + 1, 0);
    PrefetchQueue q(false, capacity ? list.data() : nullptr, capacity);
    q.Add(b + 16, 1000, 3, 100, false);
    q.Add(b + 8192, 256, 2, 256, true);
    q.Add(b + 20000 + 63, 64, 2, 2, false);
    EXPECT_EQ(q.listed_lines(), std::min<int64_t>(capacity, 18)) << "capacity " << capacity;
    EXPECT_EQ(list.back(), 0u) << "capacity " << capacity << ": listed past the buffer";

    Lines got;
    for (int64_t bite : {1, 3, 2, 5, 100}) {  // any bites give the same sequence
      const Lines part = Walked(&q, bite);
      EXPECT_LE(static_cast<int64_t>(part.size()), bite);
      got.insert(got.end(), part.begin(), part.end());
    }
    EXPECT_EQ(got, want) << "capacity " << capacity;
    EXPECT_TRUE(Walked(&q, 10).empty());  // nothing twice
  }
}

TEST(PrefetchQueue, PaysOneLinePerPacedShareOfTheWork) {
  LineBuffer buf;
  uintptr_t list[40];  // 40 of the 100 listed, 60 walked
  PrefetchQueue q(false, list, 40);
  q.Add(buf.base(), 64, 100, 64, false);  // 100 lines
  ASSERT_EQ(q.total_lines(), 100);
  q.Pace(100 * 50);  // one line per 50 multiply-adds
  int64_t credited = 0, walked = 0;
  // Small credits (counted by subtraction; 80 leaves exactly two lines' worth),
  // one of 16+ lines (divided), and more than the rest of the queue.
  for (int64_t fmas : {30, 20, 70, 49, 1, 80, 900, 799, 26, 24, 5000, 50}) {
    credited += fmas;
    walked += static_cast<int64_t>(Walked(&q, q.Paid(fmas)).size());
    EXPECT_EQ(walked, std::min<int64_t>(100, credited / 50)) << "after " << credited << " multiply-adds";
  }
  EXPECT_EQ(q.Paid(1000), 0);  // all issued: nothing more is paid for
}

TEST(PrefetchQueue, DrainIssuesTheRestAndExtraSpansAreDropped) {
  LineBuffer buf;
  PrefetchQueue q;
  for (int i = 0; i < 7; ++i) q.Add(buf.base() + i * 4096, 128, 4, 128, false);  // the 7th is dropped
  q.Add(buf.base(), 64, 0, 64, false);  // empty spans are ignored
  q.Add(buf.base(), 64, 3, 0, false);
  EXPECT_EQ(q.total_lines(), 6 * 4 * 2);
  EXPECT_EQ(Walked(&q, 5).size(), 5u);
  EXPECT_EQ(static_cast<int64_t>(Walked(&q, INT64_MAX).size()), q.total_lines() - 5);
}

}  // namespace
}  // namespace cgdr
