// `cgdr demo` (what `make demo` runs): a synthetic Qwen3-Next linear-attention
// case written to a case file, run through the same path as `cgdr run`, timed,
// and checked against the FP64 reference on a few heads (SPEC 6).
#include <cstdio>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "args.h"
#include "cgdr/cgdr.hpp"
#include "cgdr/plan.hpp"
#include "commands.h"
#include "core/synthetic.h"
#include "io/case_file.h"

namespace cgdr::cli {
namespace {

const char kDemoUsage[] =
    "usage: cgdr demo [--t T] [--threads N] [--algo auto|recurrent|chunk16|chunk32|chunk64] [--dir DIR]\n"
    "  Qwen3-Next linear-attention shape: Nk=16 Nv=32 Dk=Dv=128, f16, g and initial_state,\n"
    "  one sequence of T tokens (default 2048). Files go to DIR (default: beside the binary).\n"
    "  Fails (exit 1) if an error exceeds 2x the f16 rounding floor or 1e-3.\n";

// The heads the FP64 reference recomputes: first, a middle one, last (keeps the demo short).
const std::vector<int64_t> kCheckedHeads = {0, 13, 31};
constexpr double kDemoErrorCap = 1e-3;

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
  if (Status s = a.Parse("demo", argc, argv, {"--t", "--threads", "--algo", "--dir"}, {}); !s.ok()) return s;
  if (a.Has("--help")) {
    std::fputs(kDemoUsage, stdout);
    *help = true;
    return Status::Ok();
  }
  int64_t threads = 0;
  if (Status s = a.Int("--t", 1, 1 << 20, 2048, &cfg->T); !s.ok()) return s;
  if (Status s = a.Int("--threads", 0, 4096, 0, &threads); !s.ok()) return s;
  cfg->run.threads = static_cast<int>(threads);
  const std::string algo = a.Get("--algo", "auto");
  if (!ParseAlgo(algo, &cfg->run.algo) || cfg->run.algo == Algo::kChunk128) {
    return Status::Invalid("--algo: expected auto, recurrent, chunk16, chunk32 or chunk64, got '" + algo + "'");
  }
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

void PrintRun(const RunReport& r) {
  const Problem& p = r.problem;
  Plan plan;
  if (MakePlan(p, DefaultProfile(), &plan).ok()) std::printf("plan:   %s", PlanToString(plan).c_str());
  const double flops = 6.0 * static_cast<double>(p.Dk * p.Dv) * static_cast<double>(p.T * p.Nv);
  std::printf("run:    %.2f ms, %.0f tokens/s, %.2f GFLOP/s algorithmic (6*Dk*Dv per token and value head)\n",
              r.seconds * 1e3, static_cast<double>(p.T) / r.seconds, flops / r.seconds / 1e9);
}

}  // namespace

int DemoMain(int argc, char** argv) {
  DemoConfig cfg;
  bool help = false;
  if (Status s = ParseDemo(argc, argv, &cfg, &help); !s.ok()) return ReportError(s);
  if (help) return kExitOk;
  const CaseSpec spec = DemoSpec(cfg.T);
  std::printf("cgdr demo: Qwen3-Next linear attention, B=1 T=%lld Nk=16 Nv=32 Dk=Dv=128, f16, g and initial_state\n",
              static_cast<long long>(cfg.T));
  if (Status s = WriteDemoCase(spec, cfg.run.input); !s.ok()) return ReportError(s);
  std::printf("case:   %s\n", cfg.run.input.c_str());
  RunReport report;
  if (Status s = RunCaseFile(cfg.run, &report); !s.ok()) return ReportError(s);
  PrintRun(report);
  std::printf("result: %s\n", cfg.run.output.c_str());
  AccuracyReport acc;
  if (Status s = CheckResultFile(cfg.run.input, cfg.run.output, kCheckedHeads, kDemoErrorCap, &acc); !s.ok()) {
    return ReportError(s);
  }
  std::printf("check against the FP64 reference on value heads 0, 13, 31 (limit: 2x rounding floor, at most 1e-3):\n");
  PrintAccuracy(acc);
  std::printf("demo: %s\n", acc.ok() ? "PASS" : "FAIL");
  return acc.ok() ? kExitOk : kExitCheckFailed;
}

}  // namespace cgdr::cli
