// `cgdr golden` and `cgdr compare` (docs/golden.md): golden data and the
// verdict by Ascend's precision standard for NPU ports of the operator.
#include "golden/golden.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <string>
#include <vector>

#include "args.h"
#include "cgdr/cgdr.hpp"
#include "commands.h"
#include "core/threads.h"
#include "golden/compare.h"
#include "io/case_file.h"

namespace cgdr::cli {
namespace {

const char kGoldenUsage[] =
    "usage: cgdr golden --input CASE --out DIR [options]\n"
    "       cgdr golden --generate [--dist domain|strong-decay|long-t|empty] [shape flags] --out DIR [options]\n"
    "  Writes DIR/golden and DIR/benchmark (and DIR/case when generating) in the case's file kind:\n"
    "  CASE.safetensors -> DIR/golden.safetensors; a directory of .npy files -> DIR/golden/out.npy, ...;\n"
    "  a .json manifest of .bin tensors -> DIR/golden.json + DIR/golden.out.bin, ...\n"
    "    golden     cgdr::Run with FP32 products and state, on the inputs widened to f32; f32 files.\n"
    "    benchmark  the NPU's precision profile (docs/golden.md): products on bf16 (or f16) operands\n"
    "               with FP32 accumulation, C = 64, FP32 state rounded to its dtype once; NPU dtypes.\n"
    "  options:\n"
    "    --operands bf16|f16   the Cube's operand format (default: f16 for an f16 case, else bf16)\n"
    "    --engine auto|kernels|emulation   benchmark code (auto: kernels for bf16, emulation for f16)\n"
    "    --dtype DT            dtype the NPU ran query/key/value/beta/out in (default: the case's)\n"
    "    --state-dtype DT      dtype of the NPU's state (default: initial_state's, else --dtype)\n"
    "    --format safetensors|npy|bin   file kind written (default: the input's; safetensors when generating)\n"
    "    --check-heads N       recompute N value heads in FP64 and report golden's error (default 1; 0: none)\n"
    "    --fault KIND          also write DIR/actual: the benchmark with a planted NPU kernel bug:\n"
    "                          dropped-state, tail-mask, swapped-heads, g-sign\n"
    "    --threads N\n"
    "  generate: --t T | --lens 3,0,5, --nk 4 --nv 8 --dk 128 --dv 128 --dtype bf16 --state-dtype bf16\n"
    "    --g-dtype f32 --layout vk|kv --no-g --no-state --l2norm --scale X --seed N (defaults shown)\n"
    "    dist: domain (q, k unit rows, g in [-1, 0], beta in (0.05, 0.95)); strong-decay (g in [-1, -0.9]);\n"
    "    long-t (T = 65535 unless given); empty (empty sequences around the given ones)\n";

const char kCompareUsage[] =
    "usage: cgdr compare --golden G --benchmark B --actual A [--case CASE | --seq-lens 3,0,5]\n"
    "                    [--level L0|L1|L2] [--json] [--dtype bf16|f16|f32] [--eps 1e-3] [--threads N]\n"
    "       cgdr compare --dir DIR --actual A ...   (DIR/golden.*, DIR/benchmark.*, DIR/case.* as golden wrote)\n"
    "  G, B, A: results (out, and final_state unless A lacks it) as a .safetensors file, a directory of\n"
    "  .npy files or a .json manifest of .bin tensors. Prints, per tensor, MARE, MERE, RMSE, small-value\n"
    "  errors, cosine similarity and max errors (with their index) of the actual and the benchmark\n"
    "  against golden, the ratios and the verdicts at L0/L1/L2, and where the error concentrates.\n"
    "  --dtype: the NPU output dtype whose thresholds apply (default: actual's or benchmark's 16-bit one).\n"
    "  exit status: 0 pass at --level (default L1), 1 fail, 2 bad input.\n";

// Wall and CPU time of each step ("12.3 s, 24.1 CPU-s"): on a shared machine
// the wall time depends on the neighbours, the CPU time (all threads) much less.
class Stopwatch {
 public:
  std::string Lap() {
    const auto wall = std::chrono::steady_clock::now();
    const std::clock_t cpu = std::clock();
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.2f s, %.1f CPU-s", std::chrono::duration<double>(wall - wall_).count(),
                  static_cast<double>(cpu - cpu_) / CLOCKS_PER_SEC);
    wall_ = wall;
    cpu_ = cpu;
    return buf;
  }

 private:
  std::chrono::steady_clock::time_point wall_ = std::chrono::steady_clock::now();
  std::clock_t cpu_ = std::clock();
};

// ---- golden ----------------------------------------------------------------

struct GoldenRequest {
  bool generate = false;
  std::string input, dir;
  golden::Distribution dist = golden::Distribution::kDomain;
  CaseSpec spec;
  bool operands_given = false;
  golden::Profile profile;
  DType io = DType::kI32, state = DType::kI32;  // kI32: keep the case's
  bool format_given = false;
  FileKind format = FileKind::kSafetensors;
  int64_t check_heads = 1;
  golden::Fault fault = golden::Fault::kNone;
  int threads = 0;
};

CaseSpec GenerateDefaults() { return CaseSpecDefaults(1000, 4, 8, 128, DType::kBF16); }

Status ParseGolden(int argc, char** argv, GoldenRequest* r, bool* help) {
  Args a;
  CGDR_CLI_TRY(a.Parse("golden", argc, argv,
                       {"--input",  "--out",         "--dist",  "--operands", "--engine", "--dtype", "--state-dtype",
                        "--format", "--check-heads", "--fault", "--threads",  "--t",      "--lens",  "--nk",
                        "--nv",     "--dk",          "--dv",    "--g-dtype",  "--layout", "--scale", "--seed"},
                       {"--generate", "--no-g", "--no-state", "--l2norm"}));
  if (a.Has("--help")) {
    std::fputs(kGoldenUsage, stdout);
    *help = true;
    return Status::Ok();
  }
  r->generate = a.Has("--generate");
  if (r->generate == a.Has("--input")) return Status::Invalid("'cgdr golden' needs either --input CASE or --generate");
  CGDR_CLI_TRY(a.Require("--out", &r->dir));
  if (r->generate) {
    const std::string dist = a.Get("--dist", "domain");
    if (!golden::ParseDistribution(dist, &r->dist)) {
      return Status::Invalid("--dist: expected domain, strong-decay, long-t or empty, got '" + dist + "'");
    }
    CaseSpec spec;
    CGDR_CLI_TRY(ParseCaseSpec(a, GenerateDefaults(), &spec));
    r->spec = golden::GenerateSpec(r->dist, spec, a.Has("--t") || a.Has("--lens"));
  } else {
    r->input = a.Get("--input");
    for (const char* f : {"--dist", "--t", "--lens", "--nk", "--nv", "--dk", "--dv", "--g-dtype", "--layout", "--scale",
                          "--seed", "--no-g", "--no-state", "--l2norm"}) {
      if (a.Has(f)) return Status::Invalid(std::string(f) + ": only with --generate (the case file has its own)");
    }
    if (a.Has("--dtype")) CGDR_CLI_TRY(ParseFloatDType(a, "--dtype", DType::kBF16, &r->io));
    if (a.Has("--state-dtype")) CGDR_CLI_TRY(ParseFloatDType(a, "--state-dtype", DType::kBF16, &r->state));
  }
  r->operands_given = a.Has("--operands");
  if (r->operands_given && !golden::ParseOperands(a.Get("--operands"), &r->profile.operands)) {
    return Status::Invalid("--operands: expected bf16 or f16, got '" + a.Get("--operands") + "'");
  }
  const std::string engine = a.Get("--engine", "auto");
  if (!golden::ParseEngine(engine, &r->profile.engine)) {
    return Status::Invalid("--engine: expected auto, kernels or emulation, got '" + engine + "'");
  }
  r->format_given = a.Has("--format");
  if (r->format_given && !ParseFileKind(a.Get("--format"), &r->format)) {
    return Status::Invalid("--format: expected safetensors, npy or bin, got '" + a.Get("--format") + "'");
  }
  CGDR_CLI_TRY(a.Int("--check-heads", 0, 1 << 16, 1, &r->check_heads));
  const std::string fault = a.Get("--fault", "none");
  if (!golden::ParseFault(fault, &r->fault)) {
    return Status::Invalid("--fault: expected dropped-state, tail-mask, swapped-heads or g-sign, got '" + fault + "'");
  }
  int64_t threads = 0;
  CGDR_CLI_TRY(a.Int("--threads", 0, 4096, 0, &threads));
  r->threads = static_cast<int>(threads);
  return Status::Ok();
}

// Golden data is of prefill cases with dense states: the NPU operator has no
// pools, checkpoints or decode (docs/SPEC.md 6d).
Status RefuseServingCase(const std::string& path, const CaseFiles& c) {
  const char* what = c.decode.present                      ? "a decode case"
                     : c.inputs.state_indices.present()    ? "a state pool (state_indices)"
                     : c.options.checkpoint_every > 0      ? "checkpoints (checkpoint_every)"
                                                           : nullptr;
  if (what == nullptr) return Status::Ok();
  return Status::Invalid(path + ": " + what + " has no golden data (golden and compare take prefill cases with " +
                         "dense states; docs/SPEC.md 6d)");
}

// The case: generated (and written to DIR/case) or read.
struct LoadedInputs {
  Case generated;
  CaseFiles files;
  Inputs inputs;
  Options options;
  FileKind kind = FileKind::kSafetensors;
};

Status GetCase(GoldenRequest* r, LoadedInputs* c) {
  std::error_code ec;
  std::filesystem::create_directories(r->dir, ec);
  if (ec) return Status::Invalid(r->dir + ": cannot create the directory: " + ec.message());
  if (r->generate) {
    c->generated = MakeCase(r->spec);
    c->inputs = c->generated.inputs();
    c->options = c->generated.options();
    c->kind = r->format_given ? r->format : FileKind::kSafetensors;
    return SaveCaseFiles(c->kind, BundlePath(c->kind, r->dir, "case"), c->inputs, c->options);
  }
  CGDR_CLI_TRY(LoadCaseFiles(r->input, &c->files));
  CGDR_CLI_TRY(RefuseServingCase(r->input, c->files));
  c->inputs = c->files.inputs;
  c->options = c->files.options;
  c->kind = r->format_given ? r->format : c->files.files.kind();
  return Status::Ok();
}

// Value heads the FP64 check recomputes: n of them, evenly spread.
std::vector<int64_t> CheckedHeads(int64_t n, int64_t nv) {
  std::vector<int64_t> heads;
  for (int64_t i = 0; i < std::min(n, nv); ++i) heads.push_back(i * nv / std::min(n, nv));
  return heads;
}

int GoldenRun(GoldenRequest& r) {
  LoadedInputs c;
  Stopwatch watch;
  if (Status s = GetCase(&r, &c); !s.ok()) return ReportError(s);
  const std::string case_time = watch.Lap();
  c.options.threads = r.threads;
  golden::OwnedInputs npu;
  if (Status s = golden::CastCase(c.inputs, c.options, r.io, r.state, &npu); !s.ok()) {
    return ReportError(Status(s.code(), Prefixed(r.generate ? "generated case" : r.input, s)));
  }
  const Inputs& in = npu.views;
  if (!r.operands_given)
    r.profile.operands = in.query.dtype == DType::kF16 ? golden::Operands::kF16 : golden::Operands::kBf16;

  watch.Lap();
  golden::OwnedOutputs g, b, actual;
  if (Status s = golden::ComputeGolden(in, c.options, &g); !s.ok()) return ReportError(s);
  const std::string golden_time = watch.Lap();
  std::vector<golden::HeadCheck> checks;
  for (int64_t h : CheckedHeads(r.check_heads, g.problem.Nv)) {
    checks.emplace_back();
    if (Status s = golden::CheckGoldenHead(in, c.options, g.views, h, &checks.back()); !s.ok()) return ReportError(s);
  }
  const std::string check_time = watch.Lap();
  if (Status s = golden::ComputeBenchmark(in, c.options, r.profile, &b); !s.ok()) return ReportError(s);
  const std::string bench_time = watch.Lap();
  if (r.fault != golden::Fault::kNone) {
    if (Status s = golden::ComputeFaulty(in, c.options, r.profile, r.fault, &actual); !s.ok()) return ReportError(s);
  }

  const std::string golden_path = BundlePath(c.kind, r.dir, "golden"),
                    bench_path = BundlePath(c.kind, r.dir, "benchmark");
  if (Status s = SaveResultFiles(c.kind, golden_path, g.views, c.options); !s.ok()) return ReportError(s);
  if (Status s = SaveResultFiles(c.kind, bench_path, b.views, c.options); !s.ok()) return ReportError(s);
  const std::string actual_path = BundlePath(c.kind, r.dir, "actual");
  if (r.fault != golden::Fault::kNone) {
    if (Status s = SaveResultFiles(c.kind, actual_path, actual.views, c.options); !s.ok()) return ReportError(s);
  }

  const Problem& p = g.problem;
  std::printf("cgdr golden: T=%lld B=%lld Nk=%lld Nv=%lld Dk=%lld Dv=%lld, %s in, state %s, %d threads\n",
              static_cast<long long>(p.T), static_cast<long long>(p.B), static_cast<long long>(p.Nk),
              static_cast<long long>(p.Nv), static_cast<long long>(p.Dk), static_cast<long long>(p.Dv),
              DTypeName(in.query.dtype), DTypeName(b.views.final_state.dtype), ResolveThreadCount(r.threads));
  std::printf("  case       %s  %s  (%s)\n", r.generate ? BundlePath(c.kind, r.dir, "case").c_str() : r.input.c_str(),
              case_time.c_str(), r.generate ? golden::DistributionName(r.dist) : "read");
  std::printf("  golden     %s  %s  (f32; FP32 products and state)\n", golden_path.c_str(), golden_time.c_str());
  for (const auto& hc : checks) {
    std::printf("             FP64 check, value head %lld: out %.2e, final_state %.2e (normwise relative error)\n",
                static_cast<long long>(hc.head), hc.out_err, hc.state_err);
  }
  if (!checks.empty()) std::printf("             (FP64 check %s)\n", check_time.c_str());
  const golden::Engine engine = golden::EngineFor(r.profile);
  std::printf("  benchmark  %s  %s  (%s out; %s operands, FP32 accumulation, C=64; %s)\n", bench_path.c_str(),
              bench_time.c_str(), DTypeName(b.views.out.dtype), golden::OperandsName(r.profile.operands),
              golden::EngineName(engine));
  if (r.fault != golden::Fault::kNone) {
    std::printf("  actual     %s  (the benchmark with fault %s planted)\n", actual_path.c_str(),
                golden::FaultName(r.fault));
  }
  return kExitOk;
}

// ---- compare ---------------------------------------------------------------

struct CompareRequest {
  std::string golden, bench, actual, case_path;
  bool json = false;
  golden::CompareOptions opt;
};

// DIR/stem in whichever file kind exists there ("" if none).
std::string FindBundle(const std::string& dir, const std::string& stem) {
  for (FileKind k : {FileKind::kSafetensors, FileKind::kNpy, FileKind::kBin}) {
    const std::string p = BundlePath(k, dir, stem);
    std::error_code ec;
    if (std::filesystem::exists(p, ec)) return p;
  }
  return "";
}

Status ParseCompare(int argc, char** argv, CompareRequest* r, bool* help) {
  Args a;
  CGDR_CLI_TRY(a.Parse("compare", argc, argv,
                       {"--golden", "--benchmark", "--actual", "--dir", "--case", "--seq-lens", "--level", "--dtype",
                        "--eps", "--threads"},
                       {"--json"}));
  if (a.Has("--help")) {
    std::fputs(kCompareUsage, stdout);
    *help = true;
    return Status::Ok();
  }
  if (a.Has("--dir")) {
    const std::string dir = a.Get("--dir");
    r->golden = FindBundle(dir, "golden");
    r->bench = FindBundle(dir, "benchmark");
    r->case_path = FindBundle(dir, "case");
    if (r->golden.empty() || r->bench.empty()) {
      return Status::Invalid("--dir " + dir +
                             ": expected golden and benchmark results there (as 'cgdr golden' writes)");
    }
  }
  if (a.Has("--golden")) r->golden = a.Get("--golden");
  if (a.Has("--benchmark")) r->bench = a.Get("--benchmark");
  if (a.Has("--case")) r->case_path = a.Get("--case");
  if (r->golden.empty()) CGDR_CLI_TRY(a.Require("--golden", &r->golden));
  if (r->bench.empty()) CGDR_CLI_TRY(a.Require("--benchmark", &r->bench));
  CGDR_CLI_TRY(a.Require("--actual", &r->actual));
  if (a.Has("--seq-lens")) {
    if (a.Has("--case")) return Status::Invalid("--seq-lens: give either --case or --seq-lens, not both");
    r->case_path.clear();
    CGDR_CLI_TRY(a.IntList("--seq-lens", 0, int64_t{1} << 40, &r->opt.seq_lens));
  }
  const std::string level = a.Get("--level", "L1");
  if (!golden::ParseLevel(level, &r->opt.level))
    return Status::Invalid("--level: expected L0, L1 or L2, got '" + level + "'");
  if (a.Has("--dtype")) {
    r->opt.dtype_given = true;
    CGDR_CLI_TRY(ParseFloatDType(a, "--dtype", DType::kBF16, &r->opt.dtype));
  }
  if (a.Has("--eps")) {
    const std::string s = a.Get("--eps");
    char* end = nullptr;
    r->opt.eps = std::strtod(s.c_str(), &end);
    if (s.empty() || *end != '\0' || !(r->opt.eps >= 0.0) || !std::isfinite(r->opt.eps)) {
      return Status::Invalid("--eps: expected a number >= 0, got '" + s + "'");
    }
  }
  int64_t threads = 0;
  CGDR_CLI_TRY(a.Int("--threads", 0, 4096, 0, &threads));
  r->opt.threads = static_cast<int>(threads);
  r->json = a.Has("--json");
  r->opt.golden_label = "golden " + r->golden;
  r->opt.bench_label = "benchmark " + r->bench;
  r->opt.actual_label = "actual " + r->actual;
  return Status::Ok();
}

// Sequence lengths and state layout from the case, if one was given; else the layout golden recorded.
Status CaseFacts(CompareRequest* r, const ResultFiles& golden) {
  const auto& md = golden.files.metadata();
  if (md.count("state_layout")) r->opt.layout = md.at("state_layout") == "kv" ? StateLayout::kKV : StateLayout::kVK;
  if (r->case_path.empty()) return Status::Ok();
  CaseFiles c;
  CGDR_CLI_TRY(LoadCaseFiles(r->case_path, &c));
  CGDR_CLI_TRY(RefuseServingCase(r->case_path, c));
  const TensorView& lens = c.inputs.seq_lens;
  if (lens.dtype != DType::kI32 || lens.rank != 1) {
    return Status::Invalid(r->case_path + ": seq_lens: expected int32 [B], got " + DTypeName(lens.dtype) + " " +
                           lens.ShapeString());
  }
  r->opt.seq_lens.clear();
  for (int64_t i = 0; i < lens.shape[0]; ++i) r->opt.seq_lens.push_back(static_cast<const int32_t*>(lens.data)[i]);
  r->opt.layout = c.options.state_layout;
  return Status::Ok();
}

}  // namespace

int GoldenMain(int argc, char** argv) {
  GoldenRequest r;
  bool help = false;
  if (Status s = ParseGolden(argc, argv, &r, &help); !s.ok()) return ReportError(s);
  if (help) return kExitOk;
  return GoldenRun(r);
}

int CompareMain(int argc, char** argv) {
  CompareRequest r;
  bool help = false;
  if (Status s = ParseCompare(argc, argv, &r, &help); !s.ok()) return ReportError(s);
  if (help) return kExitOk;
  ResultFiles g, b, a;
  if (Status s = LoadResultFiles(r.golden, &g); !s.ok()) return ReportError(s);
  if (Status s = LoadResultFiles(r.bench, &b); !s.ok()) return ReportError(s);
  if (Status s = LoadResultFiles(r.actual, &a); !s.ok()) return ReportError(s);
  if (Status s = CaseFacts(&r, g); !s.ok()) return ReportError(s);
  golden::CompareReport report;
  if (Status s = golden::Compare(g.outputs, b.outputs, a.outputs, r.opt, &report); !s.ok()) return ReportError(s);
  if (r.json) {
    std::printf("%s\n", golden::ReportJson(report).dump(1).c_str());
  } else {
    std::printf("cgdr compare: actual %s against golden %s, benchmark %s\n", r.actual.c_str(), r.golden.c_str(),
                r.bench.c_str());
    std::fputs(golden::ReportText(report, r.opt.worst).c_str(), stdout);
  }
  return report.pass() ? kExitOk : kExitCheckFailed;
}

}  // namespace cgdr::cli
