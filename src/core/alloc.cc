#include "core/alloc.h"

#include <sys/mman.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <mutex>
#include <utility>

namespace cgdr {

bool AdviseHugePages(void* p, size_t bytes) {
  constexpr uintptr_t kPage = 4096;  // x86-64's base page: madvise takes whole ones
  const uintptr_t lo = (reinterpret_cast<uintptr_t>(p) + kPage - 1) & ~(kPage - 1);
  const uintptr_t hi = (reinterpret_cast<uintptr_t>(p) + bytes) & ~(kPage - 1);
  return hi > lo && madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_HUGEPAGE) == 0;
}

namespace {

// Successful allocations still allowed; negative: injection off. Atomic
// because Run may be called from many threads at once (the library's other
// globals: the calibration profile and the scratch cache below).
std::atomic<int> g_allocations_left{-1};
std::atomic<int> g_injected_failures{0};

// True when the hook is armed and this call is past its budget.
bool InjectFailure() {
  int left = g_allocations_left.load(std::memory_order_relaxed);
  while (left >= 0) {
    if (left == 0) {
      g_injected_failures.fetch_add(1, std::memory_order_relaxed);
      return true;
    }
    if (g_allocations_left.compare_exchange_weak(left, left - 1, std::memory_order_relaxed)) return false;
  }
  return false;
}

}  // namespace

hwy::AlignedFreeUniquePtr<float[]> AllocateScratch(size_t n) {
  if (InjectFailure()) return hwy::AlignedFreeUniquePtr<float[]>(nullptr, hwy::AlignedFreer(nullptr, nullptr));
  return hwy::AllocateAligned<float>(n);
}

namespace {

// The buffers leases gave back: fixed slots, so giving one back (in a
// destructor) never allocates.
struct ScratchCache {
  std::mutex mu;
  hwy::AlignedFreeUniquePtr<float[]> buf[kMaxCachedScratch];
  size_t capacity[kMaxCachedScratch] = {};
  size_t bytes = 0;
  bool poison = false;
};

// Never destroyed: a lease that ends during static destruction (a caller's
// global, an interpreter shutting down) still finds it.
ScratchCache& Cache() {
  static ScratchCache* const cache = new ScratchCache;
  return *cache;
}

bool HookArmed() { return g_allocations_left.load(std::memory_order_relaxed) >= 0; }

}  // namespace

ScratchLease::ScratchLease(size_t n) : capacity_(n), cacheable_(!HookArmed()) {
  if (cacheable_) {
    ScratchCache& c = Cache();
    std::lock_guard<std::mutex> lock(c.mu);
    int best = -1;  // the smallest cached buffer that is large enough
    for (int i = 0; i < kMaxCachedScratch; ++i) {
      if (c.buf[i] && c.capacity[i] >= n && (best < 0 || c.capacity[i] < c.capacity[best])) best = i;
    }
    if (best >= 0) {
      buf_ = std::move(c.buf[best]);
      capacity_ = c.capacity[best];
      c.bytes -= capacity_ * sizeof(float);
      if (c.poison) {
        for (size_t i = 0; i < capacity_; ++i) buf_[i] = std::nanf("");
      }
      return;
    }
  }
  buf_ = AllocateScratch(n);
}

ScratchLease::ScratchLease(ScratchLease&& other) noexcept
    : buf_(std::move(other.buf_)), capacity_(other.capacity_), cacheable_(other.cacheable_) {}

ScratchLease& ScratchLease::operator=(ScratchLease&& other) noexcept {
  if (this != &other) {
    ScratchLease old(std::move(*this));  // gives this lease's buffer back
    buf_ = std::move(other.buf_);
    capacity_ = other.capacity_;
    cacheable_ = other.cacheable_;
  }
  return *this;
}

ScratchLease::~ScratchLease() {
  if (!buf_ || !cacheable_) return;
  ScratchCache& c = Cache();
  std::lock_guard<std::mutex> lock(c.mu);
  if (c.bytes + capacity_ * sizeof(float) > kMaxCachedScratchBytes) return;  // freed
  for (int i = 0; i < kMaxCachedScratch; ++i) {
    if (!c.buf[i]) {
      c.buf[i] = std::move(buf_);
      c.capacity[i] = capacity_;
      c.bytes += capacity_ * sizeof(float);
      return;
    }
  }
}

namespace testing_hooks {

void FailAllocationsAfter(int n) {
  g_injected_failures.store(0, std::memory_order_relaxed);
  g_allocations_left.store(n < 0 ? -1 : n, std::memory_order_relaxed);
}

void ResetAllocationFailures() { FailAllocationsAfter(-1); }

int InjectedAllocationFailures() { return g_injected_failures.load(std::memory_order_relaxed); }

void PoisonReusedScratch(bool on) {
  ScratchCache& c = Cache();
  std::lock_guard<std::mutex> lock(c.mu);
  c.poison = on;
}

int DropCachedScratch() {
  ScratchCache& c = Cache();
  std::lock_guard<std::mutex> lock(c.mu);
  int dropped = 0;
  for (int i = 0; i < kMaxCachedScratch; ++i) {
    if (c.buf[i]) ++dropped;
    c.buf[i].reset();
    c.capacity[i] = 0;
  }
  c.bytes = 0;
  return dropped;
}

}  // namespace testing_hooks
}  // namespace cgdr
