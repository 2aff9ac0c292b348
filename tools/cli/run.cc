// `cgdr run` (one case file through cgdr::Run or DecodeStep, the result
// written atomically), `cgdr plan` (the plan for a shape) and the hidden
// `cgdr flags` (their parsers' flags, for the tests).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "args.h"
#include "cgdr/cgdr.hpp"
#include "cgdr/plan.hpp"
#include "commands.h"
#include "core/dtype.h"
#include "core/strcat.h"
#include "io/case_file.h"

namespace cgdr::cli {
namespace {

const char kRunUsage[] =
    "usage: cgdr run --input CASE.safetensors --output RESULT.safetensors [--threads N]\n"
    "                [--algo auto|recurrent|chunk16|chunk32|chunk64] [--check-values]\n"
    "                [--precision auto|fp32|bf16|bf16x3|bf16x4] [--engine auto|vector|amx|amx-emu]\n"
    "                [--checkpoint-every E] [--quiet] [--print-plan]\n"
    "  CASE: tensors query, key, value, beta, seq_lens (int32), optional g and initial_state\n"
    "        (out and final_state may ride along, ignored); metadata scale, state_layout (vk|kv),\n"
    "        use_qk_l2norm (true|false), use_beta_sigmoid (true|false); a, A_log, dt_bias (optional):\n"
    "        the gate in the kernel instead of g (SPEC 6d). KDA (SPEC 10): g or a [T, Nv, Dk] (a per-channel\n"
    "        gate) with dt_bias [Nv * Dk]; metadata gate_lower_bound (< 0) bounds the raw gate.\n"
    "        Header: at most 100 MiB, 1048576 tensors, rank 8.\n"
    "        Serving (SPEC 6d): state_indices (int32 [B]) makes initial_state a pool [P, Nv, ...] whose\n"
    "        slots the sequences read and write; metadata checkpoint_every E (or --checkpoint-every E)\n"
    "        adds checkpoint_states (f32), the state after every E tokens of each sequence.\n"
    "        A decode case has no seq_lens: query [N, Nk, Dk] (one token) or [N, K, Nk, Dk] (verify,\n"
    "        K <= 16), state_indices [N], the pool in initial_state, optional dst_indices [N, K]\n"
    "        (the state after token j into slot dst_indices[n, j]) or metadata output_states true.\n"
    "  RESULT: out (dtype of query) and final_state (dtype of initial_state, else query; a pool case's\n"
    "        and a decode case's: the pool after the call), checkpoint_states, states (output_states),\n"
    "        written to a temporary file and renamed over RESULT: a new file, a regular file,\n"
    "        or where a symbolic link leads; never a directory, device, FIFO or socket.\n"
    "  On success one line on stdout: the plan, the time of the run (ms), tokens/s.\n"
    "  --quiet         print nothing on success.\n"
    "  --check-values  also reject NaN/Inf inputs and g > 0 (SPEC 3).\n"
    "  --precision     products of the chunked formulations: auto (default: the fastest mode\n"
    "                  that meets SPEC 6 for the dtype: bf16x3 on AMX for f16/bf16 inputs,\n"
    "                  else fp32); fp32; bf16 (operands rounded to bf16, FP32 accumulation);\n"
    "                  bf16x3/bf16x4 (hi/lo split, compensated).\n"
    "  --engine        where bf16 products run: auto (default: AMX tiles where the CPU has\n"
    "                  them, else the vector units), vector, amx, amx-emu (TDPBF16PS emulated).\n"
    "  --checkpoint-every E  checkpoints every E tokens (prefill; overrides the case's checkpoint_every;\n"
    "                  0: none).\n"
    "  --print-plan    print the plan the run used (as 'cgdr plan' does) and its time on stdout.\n";

const char kPlanUsage[] =
    "usage: cgdr plan --t T --nk NK --nv NV --dk DK --dv DV [--b B] [--threads N]\n"
    "                 [--dtype f16|bf16|f32] [--algo auto|recurrent|chunk16|chunk32|chunk64]\n"
    "                 [--precision auto|fp32|bf16|bf16x3|bf16x4] [--engine auto|vector|amx|amx-emu]\n"
    "                 [--per-channel-gate]\n"
    "  B sequences (default 1) split T evenly; g and initial_state present.\n"
    "  --per-channel-gate  g of shape [T, Nv, Dk] (KDA, docs/SPEC.md 10) instead of [T, Nv].\n";

// The flags of run and plan: their parsers' lists, which `cgdr flags`
// prints (tests/cli_conformance_test.py gives every one a row).
struct CommandFlags {
  const char* command;
  FlagList valued, switches;
};
const CommandFlags kRunFlags{
    "run", {"--input", "--output", "--threads", "--algo", "--precision", "--engine", "--checkpoint-every"},
    {"--check-values", "--quiet", "--print-plan"}};
const CommandFlags kPlanFlags{
    "plan", {"--t", "--nk", "--nv", "--dk", "--dv", "--b", "--threads", "--dtype", "--algo", "--precision", "--engine"},
    {"--per-channel-gate"}};

// ---- run -------------------------------------------------------------------

Status ParseRun(int argc, char** argv, RunRequest* req, bool* help) {
  Args a;
  CGDR_CLI_TRY(a.Parse("run", argc, argv, kRunFlags.valued, kRunFlags.switches));
  if ((*help = MaybeHelp(a, kRunUsage))) return Status::Ok();
  CGDR_CLI_TRY(a.Require("--input", &req->input));
  CGDR_CLI_TRY(a.Require("--output", &req->output));
  int64_t threads = 0;
  CGDR_CLI_TRY(a.Int("--threads", 0, 4096, 0, &threads));
  req->threads = static_cast<int>(threads);
  CGDR_CLI_TRY(ParseAlgoFlag(a, &req->algo));
  CGDR_CLI_TRY(ParsePrecisionFlag(a, &req->precision));
  CGDR_CLI_TRY(ParseEngineFlag(a, &req->engine));
  if (a.Has("--checkpoint-every")) {
    CGDR_CLI_TRY(a.Int("--checkpoint-every", 0, int64_t{1} << 62, 0, &req->checkpoint_every));
  }
  req->check_values = a.Has("--check-values");
  req->quiet = a.Has("--quiet");
  req->print_plan = a.Has("--print-plan");
  return Status::Ok();
}

// ---- plan ------------------------------------------------------------------

// The Problem a real call with these shapes would validate into; filled
// directly because T may be far too large to allocate.
Status ParsePlanProblem(const Args& a, Problem* p) {
  int64_t v = 0;
  std::string dummy;
  for (const char* f : {"--t", "--nk", "--nv", "--dk", "--dv"}) CGDR_CLI_TRY(a.Require(f, &dummy));
  CGDR_CLI_TRY(a.Int("--t", 0, int64_t{1} << 40, 0, &p->T));
  CGDR_CLI_TRY(a.Int("--nk", 1, 1 << 16, 1, &p->Nk));
  CGDR_CLI_TRY(a.Int("--nv", 1, 1 << 16, 1, &p->Nv));
  CGDR_CLI_TRY(a.Int("--dk", 1, kMaxHeadDim, 1, &p->Dk));
  CGDR_CLI_TRY(a.Int("--dv", 1, kMaxHeadDim, 1, &p->Dv));
  CGDR_CLI_TRY(a.Int("--b", 1, 1 << 20, 1, &p->B));
  if (p->Nv % p->Nk != 0) {
    return Status::Invalid("--nv: expected a multiple of --nk = " + std::to_string(p->Nk) + ", got " +
                           std::to_string(p->Nv));
  }
  CGDR_CLI_TRY(a.Int("--threads", 0, 4096, 0, &v));
  p->options.threads = static_cast<int>(v);
  CGDR_CLI_TRY(ParseAlgoFlag(a, &p->options.algo));
  CGDR_CLI_TRY(ParsePrecisionFlag(a, &p->options.precision));
  CGDR_CLI_TRY(ParseEngineFlag(a, &p->options.engine));
  CGDR_CLI_TRY(ParseFloatDType(a, "--dtype", DType::kF16, &p->dtype));
  p->has_g = true;
  p->per_channel_gate = a.Has("--per-channel-gate");  // KDA's g [T, Nv, Dk] (docs/SPEC.md 10)
  p->has_initial_state = true;
  p->state_dtype = p->dtype;
  p->want_final_state = true;
  p->scale = 1.0 / std::sqrt(static_cast<double>(p->Dk));
  // B sequences splitting T evenly: the first T % B get one token more.
  for (int64_t b = 0; b < p->B; ++b) p->seq_lens.push_back(p->T / p->B + (b < p->T % p->B ? 1 : 0));
  return Status::Ok();
}

// A decode case (docs/SPEC.md 6b, 6d.2): DecodeStep on a copy of the case's
// pool; the result holds out, the pool after the call and the states asked for.
Status RunDecodeCase(const RunRequest& req, const LoadedCase& c, const Options& opt, RunReport* report) {
  if (req.checkpoint_every > 0) {
    return Status::Invalid(Cat(req.input, ": --checkpoint-every: only for a prefill case (one with seq_lens), ",
                               "not a decode case"));
  }
  DecodeBuffers d;
  if (Status s = PrepareDecodeOutputs(c.decode, opt, &d); !s.ok()) return Status(s.code(), Prefixed(req.input, s));
  const auto t0 = std::chrono::steady_clock::now();
  const Status s = DecodeStep(d.inputs, d.views, opt);
  report->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!s.ok()) return Status(s.code(), Prefixed(req.input, s));
  report->decode = true;
  report->decode_problem = d.problem;
  return SaveDecodeResult(req.output, d, opt);
}

}  // namespace

Status RunCaseFile(const RunRequest& req, RunReport* report) {
  LoadedCase c;
  CGDR_CLI_TRY(LoadCase(req.input, &c));
  c.options.threads = req.threads;
  c.options.algo = req.algo;
  c.options.precision = req.precision;
  c.options.engine = req.engine;
  c.options.check_values = req.check_values;
  if (c.decode.present) return RunDecodeCase(req, c, c.options, report);
  if (req.checkpoint_every >= 0) c.options.checkpoint_every = req.checkpoint_every;
  OutputBuffers out;
  if (Status s = PrepareOutputs(c.inputs, c.options, &out); !s.ok()) return Status(s.code(), Prefixed(req.input, s));
  const auto t0 = std::chrono::steady_clock::now();
  const Status s = Run(c.inputs, out.views, c.options);
  report->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!s.ok()) return Status(s.code(), Prefixed(req.input, s));
  report->problem = out.problem;
  return SaveResult(req.output, out.views, c.options);
}

std::string PlanSummary(const Plan& plan) {
  return Cat(AlgoName(static_cast<Algo>(plan.chunk)), ", ", PrecisionName(plan.precision), " on ", PlanEngineName(plan),
             ", ", plan.threads, plan.threads == 1 ? " thread" : " threads");
}

namespace {

std::string RunSummary(const RunRequest& req, const RunReport& r) {
  if (r.decode) {
    const DecodeProblem& d = r.decode_problem;
    char ms[32];
    std::snprintf(ms, sizeof ms, "%.3f ms", r.seconds * 1e3);
    return Cat("cgdr run: decode of ", d.N, " sequences x ", d.K, d.K == 1 ? " token" : " tokens", " (P=", d.P,
               " Nk=", d.Nk, " Nv=", d.Nv, " Dk=", d.Dk, " Dv=", d.Dv, " ", DTypeName(d.dtype), ", pool ",
               DTypeName(d.state_dtype), "): ", ms, "; wrote ", req.output);
  }
  const Problem& p = r.problem;
  Plan plan;
  const std::string how = MakePlan(p, DefaultProfile(), &plan).ok() ? PlanSummary(plan) : "?";
  const double tokens_per_s = static_cast<double>(p.T) / std::max(r.seconds, 1e-9);
  char figures[96];
  std::snprintf(figures, sizeof figures, "%.3f ms, %.0f tokens/s", r.seconds * 1e3, tokens_per_s);
  return Cat("cgdr run: ", p.T, " tokens (B=", p.B, " Nk=", p.Nk, " Nv=", p.Nv, " Dk=", p.Dk, " Dv=", p.Dv, " ",
             DTypeName(p.dtype), "), plan ", how, ": ", figures, "; wrote ", req.output);
}

}  // namespace

int RunMain(int argc, char** argv) {
  RunRequest req;
  bool help = false;
  if (Status s = ParseRun(argc, argv, &req, &help); !s.ok()) return ReportError(s);
  if (help) return kExitOk;
  RunReport report;
  if (Status s = RunCaseFile(req, &report); !s.ok()) return ReportError(s);
  if (!req.quiet) std::printf("%s\n", OneLine(RunSummary(req, report)).c_str());
  if (req.print_plan && report.decode) {
    std::printf("decode: no plan (the decode step, docs/SPEC.md 6b)\nrun: %.6f s\n", report.seconds);
  } else if (req.print_plan) {
    // The plan is a function of the validated problem and the profile: the one Run made.
    Plan plan;
    if (Status s = MakePlan(report.problem, DefaultProfile(), &plan); !s.ok()) return ReportError(s);
    std::printf("%srun: %.6f s\n", PlanToString(plan).c_str(), report.seconds);
  }
  return kExitOk;
}

int PlanMain(int argc, char** argv) {
  Args a;
  Problem p;
  if (Status s = a.Parse("plan", argc, argv, kPlanFlags.valued, kPlanFlags.switches); !s.ok()) return ReportError(s);
  if (MaybeHelp(a, kPlanUsage)) return kExitOk;
  if (Status s = ParsePlanProblem(a, &p); !s.ok()) return ReportError(s);
  Plan plan;
  if (Status s = MakePlan(p, DefaultProfile(), &plan); !s.ok()) return ReportError(s);
  std::fputs(PlanToString(plan).c_str(), stdout);
  return kExitOk;
}

// Hidden: the flags a command's parser accepts, one per line ("--name VALUE"
// or "--switch"), for the tests that hold every flag to a row.
int FlagsMain(int argc, char** argv) {
  const std::string cmd = argc == 1 ? argv[0] : "";
  for (const CommandFlags* c : {&kRunFlags, &kPlanFlags}) {
    if (cmd != c->command) continue;
    for (const char* f : c->valued) std::printf("%s VALUE\n", f);
    for (const char* f : c->switches) std::printf("%s\n", f);
    return kExitOk;
  }
  return ReportError(Status::Invalid("usage: cgdr flags run|plan (the flags each command accepts)"));
}

}  // namespace cgdr::cli
