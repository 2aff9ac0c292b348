// What Options::threads = 0 ("all") means, in one place for prefill, decode
// and the value scans.
#pragma once

namespace cgdr {

// `requested` if positive, else OpenMP's default team size: the CPUs this
// process may run on (its affinity mask, e.g. a container's cpuset) or
// OMP_NUM_THREADS; at least 1. (std::thread::hardware_concurrency counts
// every online CPU of the machine, and reads /sys on each call.)
int ResolveThreadCount(int requested);

}  // namespace cgdr
