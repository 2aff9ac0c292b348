#include "core/threads.h"

#include <omp.h>

#include <algorithm>

namespace cgdr {

int ResolveThreadCount(int requested) { return requested > 0 ? requested : std::max(1, omp_get_max_threads()); }

}  // namespace cgdr
