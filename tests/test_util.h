// Shared test helpers: run a synthetic case through cgdr::Run, judge it
// against the FP64 reference with SPEC 6 tolerances, force SIMD targets.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "cgdr/cgdr.hpp"
#include "cgdr/plan.hpp"
#include "core/synthetic.h"
#include "reference/reference.h"

namespace cgdr::testing {

struct Errors {
  double out = 0.0, state = 0.0;          // normwise relative errors vs FP64
  double out_limit = 0.0, state_limit = 0.0;  // SPEC 6 limits for the dtypes
};

// Tolerance of SPEC 6 for a tensor stored in dtype t whose FP64 value is ref.
double Spec6Limit(const std::vector<double>& ref, DType t);

// Runs the case with `opt` (must succeed) and measures it against FP64.
Errors RunAndCompare(Case& c, const Options& opt);

// A precision mode's tolerance over SPEC 6's `limit` for the output dtype
// (docs/SPEC.md 6c): fp32 the limit itself, bf16x3 / bf16x4 (and auto, which
// may be either) twice it, bf16 (8 significant bits per operand) at least
// 1.5e-2.
double ModeTolerance(Precision p, double limit);

// The case run with `opt` as it is (its precision and engine: fp32's
// baseline), then with precision p on engine e (p fp32: the same run).
struct ModeErrors {
  Errors fp32, mode;
};
ModeErrors RunFp32AndMode(Case& c, Options opt, Precision p, Engine e);

// `got` (run in mode p) within ModeTolerance, and for the split modes also
// within twice `fp32`'s error (the same case in fp32; floor: fp32's
// tolerance, for cases near exact).
void ExpectWithinModeBounds(const Errors& got, const Errors& fp32, Precision p, const std::string& what);

// Calls fn once per SIMD target compiled in and supported by this CPU, with
// dispatch forced to it; restores normal dispatch afterwards.
void ForEachTarget(const std::function<void(const std::string& target)>& fn);

// The plan of the case's call under `opt`: Validate, MakePlan with `prof`,
// CheckPlan. ASSERT_TRUE(PlanFor(...)) fails naming the step that refused.
::testing::AssertionResult PlanFor(Case& c, const Options& opt, Plan* plan,
                                   const MachineProfile& prof = DefaultProfile());

// The "before anything is written" checks (SPEC 3): the case's out and
// final_state filled with `byte` before a call that must fail, and whether
// both still hold nothing else after it.
void FillOutputs(Case& c, uint8_t byte);
bool OutputsHold(const Case& c, uint8_t byte);

// All algos the tests force.
std::vector<Algo> AllAlgos();

// A fresh directory per test, removed afterwards.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  std::string operator/(const std::string& name) const;
  const std::string& path() const { return path_; }
  // Everything in the directory, to show that a failed write left nothing behind.
  std::vector<std::string> Entries() const;

 private:
  std::string path_;
};

}  // namespace cgdr::testing
