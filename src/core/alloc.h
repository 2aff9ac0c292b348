// Kernel scratch allocation behind one function, so tests can make it fail
// (issue 8: an allocation failure must give a clear error and write nothing).
#pragma once

#include <cstddef>

#include "hwy/aligned_allocator.h"

namespace cgdr {

// hwy::AllocateAligned<float>(n), or null when it fails or when the test hook
// below says this call must fail. Callers turn null into kResourceExhausted.
hwy::AlignedFreeUniquePtr<float[]> AllocateScratch(size_t n);

namespace testing_hooks {

// Test-only fault injection, thread-safe: after this call the next `n` calls
// to AllocateScratch succeed and every later one fails, until
// ResetAllocationFailures(). n < 0 (the default state) never fails.
void FailAllocationsAfter(int n);
void ResetAllocationFailures();
// AllocateScratch calls that failed because of the hook since the last reset.
int InjectedAllocationFailures();

}  // namespace testing_hooks
}  // namespace cgdr
