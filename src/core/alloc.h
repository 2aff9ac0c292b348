// Kernel scratch allocation behind one function, so tests can make it fail
// (issue 8: an allocation failure must give a clear error and write nothing).
#pragma once

#include <cstddef>

#include "hwy/aligned_allocator.h"

namespace cgdr {

// hwy::AllocateAligned<float>(n), or null when it fails or when the test hook
// below says this call must fail. Callers turn null into kResourceExhausted.
hwy::AlignedFreeUniquePtr<float[]> AllocateScratch(size_t n);

// A kernel scratch buffer of at least n floats, taken from the buffers
// earlier calls gave back (contents stale: kernels never read scratch they
// did not write) or else from AllocateScratch. It goes back to that cache
// when the lease ends. Why: a call's scratch is freshly mapped memory more
// often than not (glibc maps and unmaps blocks of ~100 KB and more), and
// faulting it in cost ~50 us per call on this VM, a third of a 128-token
// call. The cache keeps at most kMaxCachedScratch buffers and
// kMaxCachedScratchBytes; a buffer that does not fit is freed. Thread-safe.
// While the failure hook below is armed, leases bypass the cache (every
// lease allocates), so the hook sees every call's allocations.
class ScratchLease {
 public:
  ScratchLease() = default;
  explicit ScratchLease(size_t n);
  ScratchLease(ScratchLease&& other) noexcept;
  ScratchLease& operator=(ScratchLease&& other) noexcept;
  ScratchLease(const ScratchLease&) = delete;
  ScratchLease& operator=(const ScratchLease&) = delete;
  ~ScratchLease();

  float* get() const { return buf_.get(); }
  explicit operator bool() const { return buf_ != nullptr; }

 private:
  hwy::AlignedFreeUniquePtr<float[]> buf_{nullptr, hwy::AlignedFreer(nullptr, nullptr)};
  size_t capacity_ = 0;
  bool cacheable_ = false;
};

// Advises transparent huge pages (madvise MADV_HUGEPAGE) for the whole 4 KiB
// pages inside [p, p + bytes), before their first touch. For a large buffer
// that is about to be written whole (a prefill's `out`): faulting 64 MiB in
// on 4 KiB pages cost ~20 ms of a 210 ms KDA call (AMD EPYC Zen 4, 2
// threads; docs/python.md). The advice is a hint: on a kernel with THP off,
// or on pages already faulted in, nothing else changes. Returns whether the
// kernel took the advice (false for an empty range or an error).
bool AdviseHugePages(void* p, size_t bytes);

constexpr int kMaxCachedScratch = 64;
constexpr size_t kMaxCachedScratchBytes = size_t{64} << 20;

namespace testing_hooks {

// Test-only fault injection, thread-safe: after this call the next `n` calls
// to AllocateScratch succeed and every later one fails, until
// ResetAllocationFailures(). n < 0 (the default state) never fails.
void FailAllocationsAfter(int n);
void ResetAllocationFailures();
// AllocateScratch calls that failed because of the hook since the last reset.
int InjectedAllocationFailures();

// While on, a buffer taken from the scratch cache is first filled with NaN,
// so a kernel that read scratch it had not written would show it.
void PoisonReusedScratch(bool on);
// Frees every cached scratch buffer; returns how many there were.
int DropCachedScratch();

}  // namespace testing_hooks
}  // namespace cgdr
