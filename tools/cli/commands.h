// The subcommands of `cgdr` (SPEC 7) and the pieces they share. Each *Main
// takes the words after the subcommand and returns the exit status;
// command_table.cc names them, says what each does and dispatches.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cgdr/cgdr.hpp"
#include "cgdr/decode.hpp"
#include "cgdr/plan.hpp"
#include "core/synthetic.h"

namespace cgdr::cli {

// Exit statuses: a failed check is not the same as input the tool refused.
constexpr int kExitOk = 0;
constexpr int kExitCheckFailed = 1;
constexpr int kExitError = 2;

int RunMain(int argc, char** argv);       // run.cc
int PlanMain(int argc, char** argv);      // run.cc
int FlagsMain(int argc, char** argv);     // run.cc (hidden: the flags of run and plan, for tests)
int MakeCaseMain(int argc, char** argv);  // make_case.cc (hidden: test helper)
int CheckMain(int argc, char** argv);     // check.cc (hidden: test helper)
int DemoMain(int argc, char** argv);      // demo.cc
int GoldenMain(int argc, char** argv);    // golden.cc
int CompareMain(int argc, char** argv);   // golden.cc
int BenchMain(int argc, char** argv);     // bench.cc: `cgdr bench` (SPEC 8)
int TuneMain(int argc, char** argv);      // tune.cc: the planner's profile

// ---- common.cc

// Prints "cgdr: error: MESSAGE" as exactly one line on stderr; returns kExitError.
int ReportError(const Status& s);
// The message on one line, whatever it holds.
std::string OneLine(std::string s);
// "WHAT: message".
std::string Prefixed(const std::string& what, const Status& s);

class Args;
// Prints `usage` and succeeds when --help was given; false otherwise.
bool MaybeHelp(const Args& a, const char* usage);
// --algo (auto, recurrent, chunk16, chunk32, chunk64), --precision, --engine; auto when absent.
Status ParseAlgoFlag(const Args& a, Algo* algo);
Status ParsePrecisionFlag(const Args& a, Precision* prec);
Status ParseEngineFlag(const Args& a, Engine* engine);
// A float dtype flag (f16, bf16, f32); `def` when absent.
Status ParseFloatDType(const Args& a, const char* flag, DType def, DType* out);
// The synthetic case flags of make-case (and golden --generate): --t/--lens, --nk, --nv, --dk, --dv, --dtype,
// --state-dtype, --g-dtype, --layout, --no-g, --no-state, --l2norm, --scale, --seed; `defaults` when absent.
Status ParseCaseSpec(const Args& a, const CaseSpec& defaults, CaseSpec* spec);
// Defaults for ParseCaseSpec: one sequence of T tokens, Nk key and Nv value
// heads of D x D, `dtype` for the tensors and the state, g f32, seed 1.
CaseSpec CaseSpecDefaults(int32_t T, int64_t Nk, int64_t Nv, int64_t D, DType dtype);

// ---- run.cc

// `cgdr run` as a function: load the case, allocate outputs, Run, write the
// result atomically. Nothing is written unless every step before succeeded.
struct RunRequest {
  std::string input, output;
  int threads = 0;
  Algo algo = Algo::kAuto;
  Precision precision = Precision::kAuto;
  Engine engine = Engine::kAuto;
  bool check_values = false;
  int64_t checkpoint_every = -1;  // --checkpoint-every; -1: the case's metadata decides
  bool quiet = false;  // no summary line on success
  bool print_plan = false;  // --print-plan: the plan it ran and the time, on stdout
};
struct RunReport {
  double seconds = 0.0;  // the cgdr::Run (or DecodeStep) call alone
  Problem problem;
  bool decode = false;  // a decode case: decode_problem, not problem
  DecodeProblem decode_problem;
};
Status RunCaseFile(const RunRequest& req, RunReport* report);
// "chunk64, bf16x3 on amx, 2 threads": the plan in a few words.
std::string PlanSummary(const Plan& plan);

// ---- check.cc

// Accuracy of a result file against the FP64 reference of its case (SPEC 6).
struct TensorAccuracy {
  const char* name = "";
  DType dtype = DType::kF32;
  double rel_err = 0.0;
  double rounding_floor = 0.0;  // error of the FP64 answer itself stored in dtype
  double limit = 0.0;
  bool ok() const { return rel_err <= limit; }
};
struct AccuracyReport {
  std::vector<TensorAccuracy> tensors;  // out, final_state (and checkpoint_states, states)
  bool ok() const {
    for (const auto& t : tensors) {
      if (!t.ok()) return false;
    }
    return true;
  }
};
// `heads`: value heads to recompute (all when empty). `cap`: a further upper
// bound on every limit (0: SPEC 6 limits alone).
Status CheckResultFile(const std::string& case_path, const std::string& result_path, const std::vector<int64_t>& heads,
                       double cap, AccuracyReport* report);
void PrintAccuracy(const AccuracyReport& r);

}  // namespace cgdr::cli
