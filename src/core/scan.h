// Value scans for check_values (SPEC 3, issue "hardening" 6): the first
// non-finite element of a tensor, the first positive one. They test the bits
// of each element in its own dtype (no conversion), a block at a time with
// Highway vectors (dispatched per target), and locate the element only inside
// a block that has one.
#pragma once

#include <cstdint>

#include "cgdr/cgdr.hpp"

namespace cgdr {

// threads: as Options::threads (0: all hardware threads). Large tensors are
// split into one contiguous part per thread; the answer is the first match of
// the first part that has one, the same index for every thread count.

// Flat index of the first NaN or +-Inf element of t (f16, bf16, f32), or -1.
int64_t FirstNonFinite(const TensorView& t, int threads = 1);

// Flat index of the first element > 0 (NaN does not count), or -1.
int64_t FirstPositive(const TensorView& t, int threads = 1);

}  // namespace cgdr
