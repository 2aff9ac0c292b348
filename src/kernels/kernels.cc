// The driver: walks the plan's work items on the plan's threads, once for
// every formulation and bucket (the seeds duplicated ProcessHead and
// ProcessHeadVTile; here one item loop serves both). Compiled once per
// Highway target; the best one the CPU supports is picked at run time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/kernels.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <omp.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/alloc.h"
#include "hwy/aligned_allocator.h"
#include "hwy/highway.h"
#include "kernels/items-inl.h"
#include "kernels/kernels.h"
#include "plan/scratch_layout.h"

HWY_BEFORE_NAMESPACE();
namespace cgdr {
namespace HWY_NAMESPACE {

// One template instance per Dk bucket; the plan picked the bucket.
void RunThreadItemsForBucket(const Plan& plan, const Inputs& in, const Outputs& out, const std::vector<int64_t>& list,
                             const ScratchLayout& L, float* HWY_RESTRICT base) {
  switch (plan.dk_bucket) {
    case 64: return RunThreadItems<64>(plan, in, out, list, L, base);
    case 80: return RunThreadItems<80>(plan, in, out, list, L, base);
    case 96: return RunThreadItems<96>(plan, in, out, list, L, base);
    case 128: return RunThreadItems<128>(plan, in, out, list, L, base);
    default: return RunThreadItems<0>(plan, in, out, list, L, base);
  }
}

Status ExecuteImpl(const Plan& plan, const Inputs& in, const Outputs& out) {
  const ScratchLayout L(plan.chunk, plan.dk_padded, plan.v_step, plan.group_items,
                        plan.precision != Precision::kFp32 && plan.chunk > 1);
  if (plan.group_items < 1 || plan.group_items > kMaxGroupItems) {
    return Status(Code::kInternal, "plan.group_items outside [1, kMaxGroupItems]");
  }
  if (L.bytes() > plan.scratch_bytes_per_thread) {
    return Status(Code::kInternal, "kernel scratch layout exceeds the plan's scratch_bytes_per_thread");
  }
  // All scratch is allocated before any output is written: an allocation
  // failure leaves the outputs untouched.
  std::vector<hwy::AlignedFreeUniquePtr<float[]>> scratch;
  scratch.reserve(static_cast<size_t>(plan.threads));
  for (int t = 0; t < plan.threads; ++t) {
    if (plan.per_thread[t].empty()) {
      scratch.emplace_back(nullptr, hwy::AlignedFreer(nullptr, nullptr));
      continue;
    }
    scratch.push_back(AllocateScratch(static_cast<size_t>(L.total)));  // core/alloc.h: fault injection in tests
    if (!scratch.back()) return Status(Code::kResourceExhausted, "cannot allocate kernel scratch (" + std::to_string(L.bytes()) + " bytes per thread)");
  }
#pragma omp parallel num_threads(plan.threads)
  {
    // OpenMP may grant fewer threads than asked: each runs every list t with
    // t = id (mod granted), so all lists run and results do not change.
    const int granted = omp_get_num_threads();
    for (int t = omp_get_thread_num(); t < plan.threads; t += granted) {
      RunThreadItemsForBucket(plan, in, out, plan.per_thread[t], L, scratch[t].get());
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

std::string ActiveTarget() {
  const int64_t usable = hwy::SupportedTargets() & HWY_TARGETS;
  return usable ? hwy::TargetName(usable & -usable) : "none";
}

}  // namespace cgdr
#endif  // HWY_ONCE
