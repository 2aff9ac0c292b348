// `cgdr demo` (what `make demo` runs), a first look at cgdr: a synthetic
// Qwen3-Next linear-attention case written to a case file and run through the
// same path as `cgdr run`; the same inputs timed (a warm-up, then the median
// of a few calls) against this machine's FP32 FMA peak, measured in the same
// run, and against the simple baseline, the recurrent form (C = 1); the
// result checked against the FP64 reference on a few heads (SPEC 6).
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "args.h"
#include "bench.h"
#include "cgdr/cgdr.hpp"
#include "cgdr/plan.hpp"
#include "commands.h"
#include "core/cpu_features.h"
#include "core/strcat.h"
#include "core/synthetic.h"
#include "io/case_file.h"

namespace cgdr::cli {
namespace {

const char kDemoUsage[] =
    "usage: cgdr demo [--t T] [--threads N] [--algo auto|recurrent|chunk16|chunk32|chunk64] [--dir DIR]\n"
    "  Qwen3-Next linear-attention shape: Nk=16 Nv=32 Dk=Dv=128, f16, g and initial_state,\n"
    "  one sequence of T tokens (default 2048). Files go to DIR (default: beside the binary).\n"
    "  Runs it as 'cgdr run' does, then times it (a warm-up, the median of 5 calls) against the\n"
    "  FP32 FMA peak measured in the same run and against the recurrent form (C = 1).\n"
    "  Fails (exit 1) if an error exceeds 2x the f16 rounding floor or 1e-3.\n";

// The heads the FP64 reference recomputes: first, a middle one, last (keeps the demo short).
const std::vector<int64_t> kCheckedHeads = {0, 13, 31};
constexpr double kDemoErrorCap = 1e-3;
// Few enough to keep the demo short, enough for a median that one slow call
// of a shared machine does not move.
constexpr int kTimedCalls = 5;

// Default folder: the one holding the binary (the build dir), else /tmp.
std::filesystem::path DefaultDir() {
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::filesystem::path("/tmp") : exe.parent_path();
}

struct DemoConfig {
  int64_t T = 2048;
  RunRequest run;
};

Status ParseDemo(int argc, char** argv, DemoConfig* cfg, bool* help) {
  Args a;
  CGDR_CLI_TRY(a.Parse("demo", argc, argv, {"--t", "--threads", "--algo", "--dir"}, {}));
  if ((*help = MaybeHelp(a, kDemoUsage))) return Status::Ok();
  int64_t threads = 0;
  CGDR_CLI_TRY(a.Int("--t", 1, 1 << 20, 2048, &cfg->T));
  CGDR_CLI_TRY(a.Int("--threads", 0, 4096, 0, &threads));
  cfg->run.threads = static_cast<int>(threads);
  CGDR_CLI_TRY(ParseAlgoFlag(a, &cfg->run.algo));
  const std::filesystem::path dir = a.Has("--dir") ? std::filesystem::path(a.Get("--dir")) : DefaultDir();
  cfg->run.input = (dir / "demo_case.safetensors").string();
  cfg->run.output = (dir / "demo_result.safetensors").string();
  return Status::Ok();
}

CaseSpec DemoSpec(int64_t T) {
  CaseSpec s;
  s.Nk = 16;
  s.Nv = 32;
  s.Dk = 128;
  s.Dv = 128;
  s.lens = {static_cast<int32_t>(T)};
  s.dtype = DType::kF16;
  s.has_g = true;
  s.g_dtype = DType::kF32;
  s.has_initial_state = true;
  s.state_dtype = DType::kF16;
  s.seed = 2024;
  return s;
}

// Writes the case file; the in-memory case is dropped before the run.
Status WriteDemoCase(const CaseSpec& spec, const std::string& path) {
  Case c = MakeCase(spec);
  return SaveCase(path, c.inputs(), c.options());
}

// What the demo is doing, on one line of stderr rewritten in place, where
// stderr is a terminal: at a large --t a step takes minutes with nothing on
// stdout. Nothing at all in a pipe or a file (logs, the tests).
class Progress {
 public:
  Progress() : on_(isatty(STDERR_FILENO) == 1) {}
  ~Progress() { Clear(); }
  void Say(const std::string& what) {
    if (!on_) return;
    std::fprintf(stderr, "\r\033[K%s ...", what.c_str());
    std::fflush(stderr);
  }
  // Before a line on stdout, which shares the terminal.
  void Clear() {
    if (!on_) return;
    std::fputs("\r\033[K", stderr);
    std::fflush(stderr);
  }

 private:
  bool on_;
};

// The case's inputs in memory, run with the options of the run (`opt`) and
// with the recurrent form, in turn: a warm-up of each, then kTimedCalls
// rounds (TimeRunsInTurn), so a busy moment of the machine slows both alike.
Status TimeDemo(const std::string& case_path, const Options& opt, Progress& progress, Timing* chosen,
                Timing* recurrent) {
  LoadedCase c;
  CGDR_CLI_TRY(LoadCase(case_path, &c));
  OutputBuffers out;
  CGDR_CLI_TRY(PrepareOutputs(c.inputs, opt, &out));
  Options baseline = opt;
  baseline.algo = Algo::kRecurrent;
  std::vector<Timing> t;
  progress.Say("timing: a warm-up call of each form");
  CGDR_CLI_TRY(TimeRunsInTurn(c.inputs, out.views, {opt, baseline}, kTimedCalls, 0.0, &t, [&](int done, int total) {
    progress.Say(Cat("timing: call ", done, " of ", total, " (the run's form and the recurrent form in turn)"));
  }));
  *chosen = t[0];
  *recurrent = t[1];
  return Status::Ok();
}

void PrintTiming(const Problem& p, const Plan& plan, const Timing& chosen, const Timing& recurrent,
                 const FmaPeak& peak) {
  const double gflops = AlgoFlops(p.T, p.Nv, p.Dk, p.Dv) / chosen.median_s / 1e9;
  std::printf("time:     %.2f ms, the median of %d calls after a warm-up (fastest %.2f ms): %.0f tokens/s\n",
              chosen.median_s * 1e3, chosen.reps, chosen.best_s * 1e3, static_cast<double>(p.T) / chosen.median_s);
  std::printf("peak:     %.1f GFLOP/s, the FP32 FMA peak of this %s on %d threads (%s, %zu lanes), measured now\n",
              peak.gflops, CpuDescription().c_str(), peak.threads, peak.target.c_str(), peak.lanes);
  std::printf("speed:    %.1f GFLOP/s algorithmic (6*Dk*Dv per token and value head, SPEC 8): %.1f%% of FP32 peak\n",
              gflops, 100.0 * gflops / peak.gflops);
  const std::string form = PlanAlgoName(plan.chunk);
  std::printf("baseline: the recurrent form (algo recurrent, C = 1) on the same inputs: %.2f ms, the median of %d; "
              "%s runs %.2fx as fast%s\n",
              recurrent.median_s * 1e3, recurrent.reps, form.c_str(), recurrent.median_s / chosen.median_s,
              plan.chunk == 1 ? " (the run is the recurrent form itself)" : "");
}

}  // namespace

int DemoMain(int argc, char** argv) {
  DemoConfig cfg;
  bool help = false;
  if (Status s = ParseDemo(argc, argv, &cfg, &help); !s.ok()) return ReportError(s);
  if (help) return kExitOk;
  const CaseSpec spec = DemoSpec(cfg.T);
  WarnIfBusy("demo");
  std::printf("cgdr demo: Qwen3-Next linear attention, B=1 T=%lld Nk=16 Nv=32 Dk=Dv=128, f16, g and initial_state\n",
              static_cast<long long>(cfg.T));
  Progress progress;
  const auto fail = [&](const Status& s) {
    progress.Clear();
    return ReportError(s);
  };
  progress.Say("writing the case");
  if (Status s = WriteDemoCase(spec, cfg.run.input); !s.ok()) return fail(s);
  progress.Clear();
  std::printf("case:     %s\n", cfg.run.input.c_str());

  progress.Say("running it as 'cgdr run' does");
  RunReport report;
  if (Status s = RunCaseFile(cfg.run, &report); !s.ok()) return fail(s);
  const Problem& p = report.problem;
  Plan plan;
  if (Status s = MakePlan(p, DefaultProfile(), &plan); !s.ok()) return fail(s);
  progress.Clear();
  std::string why = Cat("cgdr plan --t ", cfg.T, " --nk 16 --nv 32 --dk 128 --dv 128");
  if (cfg.run.threads > 0) why += Cat(" --threads ", cfg.run.threads);
  if (cfg.run.algo != Algo::kAuto) why += Cat(" --algo ", AlgoName(cfg.run.algo));
  std::printf("plan:     %s ('%s' says why)\n", PlanSummary(plan).c_str(), why.c_str());
  std::printf("run:      %.2f ms for one call, as 'cgdr run' makes it (the process's first: threads, pages and "
              "scratch start cold)\n",
              report.seconds * 1e3);
  std::printf("result:   %s\n", cfg.run.output.c_str());

  Timing chosen, recurrent;
  if (Status s = TimeDemo(cfg.run.input, p.options, progress, &chosen, &recurrent); !s.ok()) return fail(s);
  progress.Say("measuring the FP32 FMA peak");
  const FmaPeak peak = MeasureFmaPeak(plan.threads);
  progress.Clear();
  PrintTiming(p, plan, chosen, recurrent, peak);

  progress.Say("checking against the FP64 reference");
  AccuracyReport acc;
  if (Status s = CheckResultFile(cfg.run.input, cfg.run.output, kCheckedHeads, kDemoErrorCap, &acc); !s.ok()) {
    return fail(s);
  }
  progress.Clear();
  std::printf("check vs FP64 (the reference, src/reference) on value heads 0, 13, 31 (limit: 2x rounding floor, at "
              "most 1e-3):\n");
  PrintAccuracy(acc);
  std::printf("demo: %s\n", acc.ok() ? "PASS" : "FAIL");
  return acc.ok() ? kExitOk : kExitCheckFailed;
}

}  // namespace cgdr::cli
