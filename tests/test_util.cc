#include "test_util.h"

#include <gtest/gtest.h>
#include <hwy/targets.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>

#include "core/cpu_features.h"
#include "kernels/kernels.h"

namespace cgdr::testing {

double Spec6Limit(const std::vector<double>& ref, DType t) {
  if (t == DType::kF32) return 2e-5;
  // "within 2x the error of rounding the FP64 answer itself to that dtype",
  // plus the f32 allowance for the computation itself.
  return 2.0 * RoundingError(ref, t) + 2e-5;
}

Errors RunAndCompare(Case& c, const Options& opt) {
  Errors e;
  Inputs in = c.inputs();
  Outputs out = c.outputs();
  const Status s = Run(in, out, opt);
  EXPECT_TRUE(s.ok()) << s.message();
  if (!s.ok()) return e;
  Problem p;
  EXPECT_TRUE(Validate(in, out, opt, &p).ok());
  ReferenceResult ref;
  ReferenceRun(in, p, &ref);
  e.out = RelativeError(out.out, ref.out, p.Nv);
  e.out_limit = Spec6Limit(ref.out, out.out.dtype);
  if (out.final_state.present()) {
    e.state = RelativeError(out.final_state, ref.final_state, p.Nv);
    e.state_limit = Spec6Limit(ref.final_state, out.final_state.dtype);
  }
  return e;
}

double ModeTolerance(Precision p, double limit) {
  switch (p) {
    case Precision::kFp32: return limit;
    case Precision::kBf16x3:
    case Precision::kBf16x4:
    case Precision::kAuto: return 2.0 * limit;
    case Precision::kBf16: return std::max(1.5e-2, 2.0 * limit);
  }
  return 0.0;
}

ModeErrors RunFp32AndMode(Case& c, Options opt, Precision p, Engine e) {
  ModeErrors r;
  r.fp32 = RunAndCompare(c, opt);
  opt.precision = p;
  opt.engine = e;
  r.mode = p == Precision::kFp32 && e == Engine::kAuto ? r.fp32 : RunAndCompare(c, opt);
  return r;
}

void ExpectWithinModeBounds(const Errors& got, const Errors& fp32, Precision p, const std::string& what) {
  EXPECT_LE(got.out, ModeTolerance(p, got.out_limit)) << what << " out";
  EXPECT_LE(got.state, ModeTolerance(p, got.state_limit)) << what << " final_state";
  if (p == Precision::kBf16x3 || p == Precision::kBf16x4) {
    EXPECT_LE(got.out, std::max(2.0 * fp32.out, ModeTolerance(Precision::kFp32, got.out_limit))) << what << " out";
    EXPECT_LE(got.state, std::max(2.0 * fp32.state, ModeTolerance(Precision::kFp32, got.state_limit)))
        << what << " final_state";
  }
}

void ForEachTarget(const std::function<void(const std::string&)>& fn) {
  const int64_t targets = UsableTargets();
  for (int64_t bits = targets; bits != 0; bits &= bits - 1) {
    const int64_t target = bits & -bits;
    hwy::SetSupportedTargetsForTest(target);
    fn(hwy::TargetName(target));
  }
  hwy::SetSupportedTargetsForTest(0);
}

::testing::AssertionResult PlanFor(Case& c, const Options& opt, Plan* plan, const MachineProfile& prof) {
  Problem p;
  if (Status s = Validate(c.inputs(), c.outputs(), opt, &p); !s.ok()) {
    return ::testing::AssertionFailure() << "Validate: " << s.message();
  }
  if (Status s = MakePlan(p, prof, plan); !s.ok()) return ::testing::AssertionFailure() << "MakePlan: " << s.message();
  if (Status s = CheckPlan(*plan); !s.ok()) return ::testing::AssertionFailure() << "CheckPlan: " << s.message();
  return ::testing::AssertionSuccess();
}

void FillOutputs(Case& c, uint8_t byte) {
  std::fill(c.out.begin(), c.out.end(), byte);
  std::fill(c.final_state.begin(), c.final_state.end(), byte);
}

bool OutputsHold(const Case& c, uint8_t byte) {
  const auto is_byte = [byte](uint8_t b) { return b == byte; };
  return std::all_of(c.out.begin(), c.out.end(), is_byte) && std::all_of(c.final_state.begin(), c.final_state.end(), is_byte);
}

std::vector<Algo> AllAlgos() { return {Algo::kRecurrent, Algo::kChunk16, Algo::kChunk32, Algo::kChunk64}; }

TempDir::TempDir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "cgdr_test_XXXXXX").string();
  path_ = ::mkdtemp(tmpl.data()) ? tmpl : "";
}

TempDir::~TempDir() {
  std::error_code ec;
  if (!path_.empty()) std::filesystem::remove_all(path_, ec);
}

std::string TempDir::operator/(const std::string& name) const { return (std::filesystem::path(path_) / name).string(); }

std::vector<std::string> TempDir::Entries() const {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(path_)) names.push_back(e.path().filename().string());
  return names;
}

}  // namespace cgdr::testing
