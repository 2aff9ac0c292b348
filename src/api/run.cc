// The public entry: validate -> plan -> execute (ARCHITECTURE data flow).
#include <new>

#include "cgdr/cgdr.hpp"
#include "cgdr/plan.hpp"
#include "kernels/kernels.h"

namespace cgdr {

Status Run(const Inputs& in, const Outputs& out, const Options& opt) {
  try {
    Problem problem;
    Status s = Validate(in, out, opt, &problem);
    if (!s.ok()) return s;
    Plan plan;
    s = MakePlan(problem, DefaultProfile(), &plan);
    if (!s.ok()) return s;
    return Execute(plan, in, out);
  } catch (const std::bad_alloc&) {
    return Status(Code::kResourceExhausted, "out of memory while planning or allocating scratch");
  }
}

}  // namespace cgdr
