#include "core/alloc.h"

#include <atomic>

namespace cgdr {
namespace {

// Successful allocations still allowed; negative: injection off. The only
// mutable global of the library besides the calibration profile, atomic
// because Run may be called from many threads at once.
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

namespace testing_hooks {

void FailAllocationsAfter(int n) {
  g_injected_failures.store(0, std::memory_order_relaxed);
  g_allocations_left.store(n < 0 ? -1 : n, std::memory_order_relaxed);
}

void ResetAllocationFailures() { FailAllocationsAfter(-1); }

int InjectedAllocationFailures() { return g_injected_failures.load(std::memory_order_relaxed); }

}  // namespace testing_hooks
}  // namespace cgdr
