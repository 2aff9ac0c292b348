// The driver: runs the plan's groups of work items on the plan's threads,
// once for every formulation and bucket (the seeds duplicated ProcessHead
// and ProcessHeadVTile; here one item loop serves both). Compiled once per
// Highway target; the best one the CPU supports is picked at run time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/kernels.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "core/alloc.h"
#include "core/cpu_features.h"
#include "core/fpenv.h"
#include "hwy/aligned_allocator.h"
#include "hwy/highway.h"
#include "kernels/amx.h"
#include "kernels/items-inl.h"
#include "kernels/kernels.h"
#include "plan/scratch_layout.h"

HWY_BEFORE_NAMESPACE();
namespace cgdr {
namespace HWY_NAMESPACE {

// One template instance per Dk bucket; the plan picked the bucket.
void RunGroupForBucket(const Plan& plan, const Inputs& in, const Outputs& out, int64_t g, const ScratchLayout& L,
                       float* HWY_RESTRICT base) {
  switch (plan.dk_bucket) {
    case 64: return BucketDriver<64>::RunGroup(plan, in, out, g, L, base);
    case 80: return BucketDriver<80>::RunGroup(plan, in, out, g, L, base);
    case 96: return BucketDriver<96>::RunGroup(plan, in, out, g, L, base);
    case 128: return BucketDriver<128>::RunGroup(plan, in, out, g, L, base);
    default: return BucketDriver<0>::RunGroup(plan, in, out, g, L, base);
  }
}

Status ExecuteImpl(const Plan& plan, const Inputs& in, const Outputs& out) {
  const ScratchLayout L = KernelScratch(plan);
  if (plan.group_items < 1 || plan.group_items > kMaxGroupItems) {
    return Status(Code::kInternal, "plan.group_items outside [1, kMaxGroupItems]");
  }
  if (L.bytes() > plan.scratch_bytes_per_thread) {
    return Status(Code::kInternal, "kernel scratch layout exceeds the plan's scratch_bytes_per_thread");
  }
  // The hardware tiles: the plan chose them because this process may run
  // them (AmxHardware); each worker configures its own and releases them.
  const bool hw_tiles = RunsOnTiles(plan) && plan.engine == Engine::kAmx;
  if (hw_tiles && !AmxHardwareEnabled()) return Status(Code::kInternal, "plan.engine is amx but AMX is not usable");
  // One scratch per thread that can run: no more threads than groups.
  const int workers = static_cast<int>(std::min<int64_t>(plan.threads, plan.groups()));
  // All scratch is allocated before any output is written: an allocation
  // failure leaves the outputs untouched.
  std::vector<ScratchLease> scratch;
  scratch.reserve(static_cast<size_t>(workers));
  for (int t = 0; t < workers; ++t) {
    scratch.emplace_back(static_cast<size_t>(L.total));  // core/alloc.h: reused between calls; fault injection in tests
    if (!scratch.back()) return Status(Code::kResourceExhausted, "cannot allocate kernel scratch (" + std::to_string(L.bytes()) + " bytes per thread)");
  }
  // Each thread claims the next group when it is done with one (Plan: groups
  // in claim order). A group's results do not depend on the thread that runs
  // it, so any claim order gives the same bits. OpenMP may grant fewer
  // threads than asked; those granted run all groups.
  std::atomic<int64_t> next_group{0};
  if (workers > 0) {
#pragma omp parallel num_threads(workers)
    {
      float* base = scratch[static_cast<size_t>(omp_get_thread_num())].get();
      const FlushDenormalsScope ftz;
      if (hw_tiles) ConfigureTilesOnThisThread();
      for (int64_t g = next_group.fetch_add(1, std::memory_order_relaxed); g < plan.groups();
           g = next_group.fetch_add(1, std::memory_order_relaxed)) {
        RunGroupForBucket(plan, in, out, g, L, base);
      }
      if (hw_tiles) ReleaseTilesOnThisThread();  // no tile state outlives the call on a pooled thread
    }
  }
  return Status::Ok();
}

}  // namespace HWY_NAMESPACE
}  // namespace cgdr
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace cgdr {

HWY_EXPORT(ExecuteImpl);

Status Execute(const Plan& plan, const Inputs& in, const Outputs& out) {
  return HWY_DYNAMIC_DISPATCH(ExecuteImpl)(plan, in, out);
}

int64_t CompiledTargets() { return HWY_TARGETS; }

}  // namespace cgdr
#endif  // HWY_ONCE
