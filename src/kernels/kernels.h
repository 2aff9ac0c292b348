// The device side of the seeds' design (their op_kernel): plan + data ->
// results. Inputs have passed Validate and the plan CheckPlan.
#pragma once

#include <cstdint>

#include "cgdr/plan.hpp"

namespace cgdr {

// Walks the plan's work items on plan.threads threads. Writes `out` and, if
// present, `final_state`; nothing else.
Status Execute(const Plan& plan, const Inputs& in, const Outputs& out);

// SIMD targets compiled into this build (Highway bits) and their names, for
// tests that force each one (hwy::SetSupportedTargetsForTest).
int64_t CompiledTargets();

}  // namespace cgdr
