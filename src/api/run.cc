// The public entry: validate -> plan -> execute (SPEC 5.1: data flow).
#include <new>

#include "cgdr/cgdr.hpp"
#include "cgdr/plan.hpp"
#include "core/dtype.h"
#include "core/scan.h"
#include "core/strcat.h"
#include "kernels/kernels.h"
#include "validate/checks.h"

namespace cgdr {
namespace {

// check_values, after the run: finite inputs can still overflow FP32 inside
// the computation (e.g. keys of norm 1e20 without l2norm). Such outputs are
// reported, never handed back as a silent success (issue "hardening" 4).
Status CheckOutputFinite(const char* name, const TensorView& t, int threads) {
  if (!t.present()) return Status::Ok();
  const int64_t i = FirstNonFinite(t, threads);
  if (i < 0) return Status::Ok();
  return Status::Invalid(Cat(name, ": non-finite value ", LoadAsF32(t.data, t.dtype, i), " at index ", IndexString(t, i),
                             " computed from finite inputs (FP32/", DTypeName(t.dtype),
                             " range exceeded; check_values); the outputs are invalid"));
}

}  // namespace

Status Run(const Inputs& in, const Outputs& out, const Options& opt) {
  try {
    Problem problem;
    Status s = Validate(in, out, opt, &problem);
    if (!s.ok()) return s;
    Plan plan;
    s = MakePlan(problem, DefaultProfile(), &plan);
    if (!s.ok()) return s;
    s = Execute(plan, in, out);
    if (!s.ok() || !opt.check_values) return s;
    s = CheckOutputFinite("out", out.out, opt.threads);
    return s.ok() ? CheckOutputFinite("final_state", out.final_state, opt.threads) : s;
  } catch (const std::bad_alloc&) {
    return Status(Code::kResourceExhausted, "out of memory while planning or allocating scratch");
  }
}

}  // namespace cgdr
