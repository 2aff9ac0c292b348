// RunThreadItems<kDkPad>: one thread's work items (plan.per_thread[t]) run on
// that thread's scratch. Declared here for the driver (kernels.cc); defined in
// item_driver-inl.h and instantiated once per Dk bucket, each bucket in its
// own translation unit (bucket.cc), so the bucket instances compile in
// parallel.
//
// Per-target code: included once per Highway target.
#if defined(CGDR_KERNELS_ITEMS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef CGDR_KERNELS_ITEMS_INL_H_
#undef CGDR_KERNELS_ITEMS_INL_H_
#else
#define CGDR_KERNELS_ITEMS_INL_H_
#endif

#include <cstdint>
#include <vector>

#include "cgdr/plan.hpp"
#include "hwy/highway.h"
#include "plan/scratch_layout.h"

HWY_BEFORE_NAMESPACE();
namespace cgdr {
namespace HWY_NAMESPACE {

// kDkPad: the plan's Dk bucket (64, 80, 96, 128), or 0 for the generic path
// (Dk up to 256, padded at run time). Each bucket reads dk_padded as the
// compile-time constant.
template <int kDkPad>
void RunThreadItems(const Plan& plan, const Inputs& in, const Outputs& out, const std::vector<int64_t>& list,
                    const ScratchLayout& L, float* HWY_RESTRICT base);

// The instances bucket.cc provides (CMake compiles it once per value).
extern template void RunThreadItems<64>(const Plan&, const Inputs&, const Outputs&, const std::vector<int64_t>&,
                                        const ScratchLayout&, float* HWY_RESTRICT);
extern template void RunThreadItems<80>(const Plan&, const Inputs&, const Outputs&, const std::vector<int64_t>&,
                                        const ScratchLayout&, float* HWY_RESTRICT);
extern template void RunThreadItems<96>(const Plan&, const Inputs&, const Outputs&, const std::vector<int64_t>&,
                                        const ScratchLayout&, float* HWY_RESTRICT);
extern template void RunThreadItems<128>(const Plan&, const Inputs&, const Outputs&, const std::vector<int64_t>&,
                                         const ScratchLayout&, float* HWY_RESTRICT);
extern template void RunThreadItems<0>(const Plan&, const Inputs&, const Outputs&, const std::vector<int64_t>&,
                                       const ScratchLayout&, float* HWY_RESTRICT);

}  // namespace HWY_NAMESPACE
}  // namespace cgdr
HWY_AFTER_NAMESPACE();

#endif  // include guard
