// One Dk bucket's item driver (SPEC 5: bucketed Dk specialisations, seeds'
// template instances per Dk), compiled once per Highway target. CMake builds
// this file once per bucket with CGDR_DK_BUCKET set (64, 80, 96, 128, or 0
// for the generic path): the buckets are the heaviest code of the library and
// compile in parallel this way.
#ifndef CGDR_DK_BUCKET
#error "CGDR_DK_BUCKET must be defined (CMakeLists.txt compiles bucket.cc once per Dk bucket)"
#endif

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/bucket.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/highway.h"
#include "kernels/item_driver-inl.h"
#include "kernels/items-inl.h"

HWY_BEFORE_NAMESPACE();
namespace cgdr {
namespace HWY_NAMESPACE {

template struct BucketDriver<CGDR_DK_BUCKET>;

}  // namespace HWY_NAMESPACE
}  // namespace cgdr
HWY_AFTER_NAMESPACE();
