// BucketDriver<kDkPad>::RunGroup: one group of work items (Plan::GroupItems)
// run on the scratch of the thread that claimed it. Declared here for the
// driver (kernels.cc); defined in item_driver-inl.h and instantiated once per
// Dk bucket, each bucket in its own translation unit (bucket.cc), so the
// bucket instances compile in parallel.
//
// Per-target code: included once per Highway target.
#if defined(CGDR_KERNELS_ITEMS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef CGDR_KERNELS_ITEMS_INL_H_
#undef CGDR_KERNELS_ITEMS_INL_H_
#else
#define CGDR_KERNELS_ITEMS_INL_H_
#endif

#include <cstdint>

#include "cgdr/plan.hpp"
#include "hwy/highway.h"
#include "plan/scratch_layout.h"

HWY_BEFORE_NAMESPACE();
namespace cgdr {
namespace HWY_NAMESPACE {

// kDkPad: the plan's Dk bucket (64, 80, 96, 128), or 0 for the generic path
// (Dk up to 256, padded at run time). Each bucket reads dk_padded as the
// compile-time constant. A class so that one line declares each instance.
template <int kDkPad>
struct BucketDriver {
  // Runs group g of the plan (Plan::GroupItems) on one thread's scratch.
  static void RunGroup(const Plan& plan, const Inputs& in, const Outputs& out, int64_t g, const ScratchLayout& L,
                       float* HWY_RESTRICT base);
};

// The instances bucket.cc provides (CMake compiles it once per value).
extern template struct BucketDriver<64>;
extern template struct BucketDriver<80>;
extern template struct BucketDriver<96>;
extern template struct BucketDriver<128>;
extern template struct BucketDriver<0>;

}  // namespace HWY_NAMESPACE
}  // namespace cgdr
HWY_AFTER_NAMESPACE();

#endif  // include guard
