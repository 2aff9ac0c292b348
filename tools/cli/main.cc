// `cgdr`: run | plan | bench | tune | demo (SPEC 7), plus the hidden test
// helpers make-case and check. Thin: every step lives in the library.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "args.h"
#include "cgdr/cgdr.hpp"
#include "cgdr/plan.hpp"
#include "commands.h"
#include "core/dtype.h"
#include "core/strcat.h"
#include "core/synthetic.h"
#include "io/case_file.h"
#include "reference/reference.h"

namespace cgdr::cli {
namespace {

const char kUsage[] =
    "usage: cgdr <command> [flags]      cgdr help <command>      cgdr --version\n"
    "\n"
    "commands:\n"
    "  run    --input CASE.safetensors --output RESULT.safetensors [--threads N]\n"
    "         [--algo auto|recurrent|chunk16|chunk32|chunk64] [--precision auto|fp32|bf16|bf16x3|bf16x4]\n"
    "         [--engine auto|vector|amx|amx-emu] [--checkpoint-every E] [--check-values] [--quiet] [--print-plan]\n"
    "         Run one case file (SPEC 7) and write `out` and `final_state` atomically: a prefill case\n"
    "         (seq_lens; state pools, checkpoints), or a decode/verify case (no seq_lens; SPEC 6d).\n"
    "  plan   --t T --nk NK --nv NV --dk DK --dv DV [--b B] [--threads N]\n"
    "         [--dtype f16|bf16|f32] [--algo ...] [--precision ...] [--engine ...]\n"
    "         Print the plan for a shape (B sequences splitting T evenly).\n"
    "  bench  [--shape ROW] [--t T] [--threads N] [--json FILE] ...\n"
    "         Benchmark (SPEC 8); see 'cgdr bench --help'.\n"
    "  tune   Calibrate the planner's cost model; see 'cgdr tune --help'.\n"
    "  demo   [--t T] [--threads N] [--algo ...] [--dir DIR]\n"
    "         A synthetic Qwen3-Next case (Nk=16 Nv=32 Dk=Dv=128 f16, T=2048): write it,\n"
    "         run it as 'cgdr run' does, time it and check it against the FP64 reference.\n"
    "  golden --input CASE --out DIR | --generate [--dist ...] --out DIR\n"
    "         Golden and benchmark (the NPU's precision profile) results of a case in its own file\n"
    "         kind (safetensors, .npy directory, .bin manifest); see 'cgdr golden --help'.\n"
    "  compare --golden G --benchmark B --actual A [--case CASE] [--level L1] [--json]\n"
    "         The verdict on an NPU result by Ascend's precision standard; see 'cgdr compare --help'.\n"
    "  help   This text; 'cgdr help COMMAND' (or 'cgdr COMMAND --help') for one command.\n"
    "\n"
    "exit status: 0 success; 1 a check failed; 2 bad input or usage, with one line on stderr\n"
    "(cgdr: error: ...) and no output file written.\n";

const char kRunUsage[] =
    "usage: cgdr run --input CASE.safetensors --output RESULT.safetensors [--threads N]\n"
    "                [--algo auto|recurrent|chunk16|chunk32|chunk64] [--check-values]\n"
    "                [--precision auto|fp32|bf16|bf16x3|bf16x4] [--engine auto|vector|amx|amx-emu]\n"
    "                [--checkpoint-every E] [--quiet] [--print-plan]\n"
    "  CASE: tensors query, key, value, beta, seq_lens (int32), optional g and initial_state\n"
    "        (out and final_state may ride along, ignored); metadata scale, state_layout (vk|kv),\n"
    "        use_qk_l2norm (true|false), use_beta_sigmoid (true|false); a, A_log, dt_bias (optional):\n"
    "        the gate in the kernel instead of g (SPEC 6d). Header: at most 100 MiB, 1048576 tensors, rank 8.\n"
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
    "  B sequences (default 1) split T evenly; g and initial_state present.\n";

const char kMakeCaseUsage[] =
    "usage: cgdr make-case --out FILE [--t T | --lens 3,0,5] [--nk 2] [--nv 4] [--dk 16] [--dv 16]\n"
    "                      [--dtype f32] [--state-dtype DT] [--g-dtype f32] [--layout vk|kv]\n"
    "                      [--no-g] [--no-state] [--l2norm] [--raw-gate] [--beta-sigmoid] [--scale X]\n"
    "                      [--slots 2,-1,0 [--pool P]] [--checkpoint-every E]\n"
    "                      [--decode [--tokens K] [--dst 3,4,...] [--output-states]] [--seed N] [--break KIND]\n"
    "  --raw-gate: a, A_log, dt_bias instead of g; --beta-sigmoid: beta holds raw logits (SPEC 6d).\n"
    "  --slots: state_indices, initial_state a pool of P slots (default: the largest slot + 2);\n"
    "  --checkpoint-every: metadata checkpoint_every (written as given); --decode: a decode case of\n"
    "  one sequence per slot, K tokens each with --tokens K (a token axis), dst_indices --dst (N x K).\n"
    "  A synthetic, well-conditioned case (testing). --break writes a deliberately bad one:\n"
    "  beta-i32, key-shape, seq-lens, missing-beta, bad-layout, unknown-tensor, slots-f32, dst-f32.\n";

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
    "plan", {"--t", "--nk", "--nv", "--dk", "--dv", "--b", "--threads", "--dtype", "--algo", "--precision", "--engine"}, {}};

const char kCheckUsage[] =
    "usage: cgdr check --input CASE --result RESULT [--heads 0,3,...]\n"
    "  Recomputes the FP64 reference and exits 0 if the result is within SPEC 6, 1 if not.\n";

// The word to print for errors: the message on one line, whatever it holds.
std::string OneLine(std::string s) {
  std::replace_if(
      s.begin(), s.end(), [](char c) { return c == '\n' || c == '\r'; }, ' ');
  return s;
}

// Prints `usage` and succeeds when --help was given; false otherwise.
bool MaybeHelp(const Args& a, const char* usage) {
  if (!a.Has("--help")) return false;
  std::fputs(usage, stdout);
  return true;
}

Status ParseAlgoFlag(const Args& a, Algo* algo) {
  const std::string s = a.Get("--algo", "auto");
  if (!ParseAlgo(s, algo) || *algo == Algo::kChunk128) {
    return Status::Invalid("--algo: expected auto, recurrent, chunk16, chunk32 or chunk64, got '" + s + "'");
  }
  return Status::Ok();
}

Status ParsePrecisionFlag(const Args& a, Precision* prec) {
  const std::string s = a.Get("--precision", "auto");
  if (!ParsePrecision(s, prec)) {
    return Status::Invalid("--precision: expected auto, fp32, bf16, bf16x3 or bf16x4, got '" + s + "'");
  }
  return Status::Ok();
}

Status ParseEngineFlag(const Args& a, Engine* engine) {
  const std::string s = a.Get("--engine", "auto");
  if (!ParseEngine(s, engine)) return Status::Invalid("--engine: expected auto, vector, amx or amx-emu, got '" + s + "'");
  return Status::Ok();
}

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
  p->has_initial_state = true;
  p->state_dtype = p->dtype;
  p->want_final_state = true;
  p->scale = 1.0 / std::sqrt(static_cast<double>(p->Dk));
  // B sequences splitting T evenly: the first T % B get one token more.
  for (int64_t b = 0; b < p->B; ++b) p->seq_lens.push_back(p->T / p->B + (b < p->T % p->B ? 1 : 0));
  return Status::Ok();
}

// ---- make-case -------------------------------------------------------------

// make-case's shapes when not given: tiny, f32.
CaseSpec MakeCaseDefaults() {
  CaseSpec d;
  d.lens = {16};
  d.Nk = 2;
  d.Nv = 4;
  d.Dk = 16;
  d.Dv = 16;
  d.dtype = DType::kF32;
  d.state_dtype = DType::kF32;
  d.g_dtype = DType::kF32;
  d.seed = 1;
  return d;
}

// Rewrites the tensors / metadata of a good case into one known bad way.
Status BreakCase(const std::string& kind, Case* c, std::vector<SafetensorsWriteTensor>* t,
                 std::map<std::string, std::string>* md, std::vector<int32_t>* scratch) {
  auto find = [&](const char* name) {
    return std::find_if(t->begin(), t->end(), [&](const auto& x) { return x.name == name; });
  };
  if (kind == "beta-i32") {  // right shape and size, wrong dtype
    auto it = find("beta");
    scratch->assign(static_cast<size_t>(c->T * c->spec.Nv), 1);
    *it = SafetensorsWriteTensor("beta", DType::kI32, it->shape, scratch->data());
  } else if (kind == "key-shape") {  // one token short: [T-1, Nk, Dk]
    if (c->T < 1) return Status::Invalid("--break key-shape needs T >= 1");
    find("key")->shape[0] -= 1;
  } else if (kind == "seq-lens") {  // lengths no longer sum to T
    c->seq_lens[0] += 1;
  } else if (kind == "missing-beta") {
    t->erase(find("beta"));
  } else if (kind == "bad-layout") {
    (*md)["state_layout"] = "xy";
  } else if (kind == "unknown-tensor") {
    t->push_back(*find("query"));
    t->back().name = "querry";
  } else if (kind == "slots-f32" || kind == "dst-f32") {  // int32 indices stored as floats: right size, wrong dtype
    auto it = find(kind == "slots-f32" ? "state_indices" : "dst_indices");
    if (it == t->end()) {
      return Status::Invalid("--break " + kind + " needs " + (kind == "slots-f32" ? "--slots" : "--dst"));
    }
    it->dtype = DType::kF32;
  } else {
    return Status::Invalid("--break: unknown kind '" + kind + "' (see 'cgdr make-case --help')");
  }
  return Status::Ok();
}

// make-case's serving flags (docs/SPEC.md 6d): a pool with state_indices,
// checkpoint_every, and decode cases.
struct ServingSpec {
  std::vector<int64_t> slots, dst;
  int64_t pool = 0;       // slots of the pool; 0: the largest slot + 2
  int64_t every = 0;      // metadata checkpoint_every, written as given (0: none)
  bool decode = false;
  int64_t tokens = 0;     // K of a token axis; 0: none (one token, query [N, Nk, Dk])
  bool output_states = false;
};

Status ParseServingSpec(const Args& a, ServingSpec* s) {
  if (a.Has("--slots")) CGDR_CLI_TRY(a.IntList("--slots", INT32_MIN, INT32_MAX, &s->slots));
  if (a.Has("--dst")) CGDR_CLI_TRY(a.IntList("--dst", INT32_MIN, INT32_MAX, &s->dst));
  CGDR_CLI_TRY(a.Int("--pool", 1, 1 << 20, 0, &s->pool));
  CGDR_CLI_TRY(a.Int("--checkpoint-every", INT64_MIN, INT64_MAX, 0, &s->every));
  CGDR_CLI_TRY(a.Int("--tokens", 1, 64, 0, &s->tokens));
  s->decode = a.Has("--decode");
  s->output_states = a.Has("--output-states");
  if (s->decode && s->slots.empty()) return Status::Invalid("--decode needs --slots (one sequence per slot)");
  if (!s->decode && a.Has("--tokens")) return Status::Invalid("--tokens: only with --decode");
  if (s->pool == 0) {
    int64_t top = -1;
    for (int64_t v : s->slots) top = std::max(top, v);
    s->pool = std::max<int64_t>(top + 2, 1);
  }
  return Status::Ok();
}

// [N * K, ...] -> [N, K, ...]: the token axis of a decode case.
void SplitTokenAxis(SafetensorsWriteTensor* t, int64_t K) {
  std::vector<int64_t> shape{t->shape[0] / K, K};
  shape.insert(shape.end(), t->shape.begin() + 1, t->shape.end());
  t->shape = shape;
}

Status MakeCaseFile(int argc, char** argv, bool* help) {
  Args a;
  CGDR_CLI_TRY(a.Parse("make-case", argc, argv,
                       {"--out", "--t", "--lens", "--nk", "--nv", "--dk", "--dv", "--dtype", "--state-dtype",
                        "--g-dtype", "--layout", "--scale", "--seed", "--break", "--slots", "--pool",
                        "--checkpoint-every", "--tokens", "--dst"},
                       {"--no-g", "--no-state", "--l2norm", "--raw-gate", "--beta-sigmoid", "--decode",
                        "--output-states"}));
  if ((*help = MaybeHelp(a, kMakeCaseUsage))) return Status::Ok();
  std::string path;
  CGDR_CLI_TRY(a.Require("--out", &path));
  CaseSpec spec;
  CGDR_CLI_TRY(ParseCaseSpec(a, MakeCaseDefaults(), &spec));
  ServingSpec serving;
  CGDR_CLI_TRY(ParseServingSpec(a, &serving));
  const int64_t K = std::max<int64_t>(serving.tokens, 1);
  if (serving.decode) spec.lens.assign(serving.slots.size(), static_cast<int32_t>(K));
  Case c = MakeCase(spec);
  std::vector<SafetensorsWriteTensor> tensors = CaseTensors(c.inputs());
  std::map<std::string, std::string> md = CaseMetadata(c.options());
  auto find = [&](const char* name) {
    return std::find_if(tensors.begin(), tensors.end(), [&](const auto& x) { return x.name == name; });
  };
  // The pool: P synthetic states (a case of P empty sequences), read through state_indices.
  Case pool;
  if (!serving.slots.empty()) {
    CaseSpec pool_spec = spec;
    pool_spec.lens.assign(static_cast<size_t>(serving.pool), 0);
    pool_spec.seed = spec.seed + 1;
    pool = MakeCase(pool_spec);
  }
  const std::vector<int32_t> slots(serving.slots.begin(), serving.slots.end());
  const std::vector<int32_t> dst(serving.dst.begin(), serving.dst.end());
  if (!slots.empty()) {
    if (auto it = find("initial_state"); it != tensors.end()) *it = {"initial_state", pool.inputs().initial_state};
    tensors.emplace_back("state_indices", DType::kI32, std::vector<int64_t>{static_cast<int64_t>(slots.size())},
                         slots.data());
  }
  if (!dst.empty()) {
    const int64_t n = slots.empty() ? 1 : static_cast<int64_t>(slots.size()), all = static_cast<int64_t>(dst.size());
    tensors.emplace_back("dst_indices", DType::kI32,
                         all % n == 0 ? std::vector<int64_t>{n, all / n} : std::vector<int64_t>{all}, dst.data());
  }
  if (serving.decode) {
    tensors.erase(find("seq_lens"));
    for (auto& t : tensors) {
      const bool token_tensor = t.name == "query" || t.name == "key" || t.name == "value" || t.name == "beta" ||
                                t.name == "g" || t.name == "a";
      if (token_tensor && serving.tokens > 0) SplitTokenAxis(&t, K);
    }
  }
  if (serving.every != 0) md["checkpoint_every"] = std::to_string(serving.every);
  if (serving.output_states) md["output_states"] = "true";
  std::vector<int32_t> scratch;
  if (a.Has("--break")) CGDR_CLI_TRY(BreakCase(a.Get("--break"), &c, &tensors, &md, &scratch));
  return WriteSafetensors(path, tensors, md);
}

// ---- check -----------------------------------------------------------------

// SPEC 6: f32 within 2e-5; f16/bf16 within 2x the rounding floor.
double SpecLimit(DType t, double floor) { return t == DType::kF32 ? 2e-5 : 2.0 * floor; }

TensorAccuracy Accuracy(const char* name, const TensorView& x, const std::vector<double>& ref, int64_t Nv,
                        const std::vector<int64_t>& heads, double cap) {
  TensorAccuracy a;
  a.name = name;
  a.dtype = x.dtype;
  a.rel_err = RelativeError(x, ref, Nv, heads);
  a.rounding_floor = RoundingError(ref, x.dtype);  // other heads' entries are 0 in ref and add nothing
  a.limit = SpecLimit(x.dtype, a.rounding_floor);
  if (cap > 0) a.limit = std::min(a.limit, cap);
  return a;
}

std::string Prefixed(const std::string& path, const Status& s) { return path + ": " + s.message(); }

Status CheckArgs(int argc, char** argv, std::string* input, std::string* result, std::vector<int64_t>* heads,
                 bool* help) {
  Args a;
  CGDR_CLI_TRY(a.Parse("check", argc, argv, {"--input", "--result", "--heads"}, {}));
  if ((*help = MaybeHelp(a, kCheckUsage))) return Status::Ok();
  CGDR_CLI_TRY(a.Require("--input", input));
  CGDR_CLI_TRY(a.Require("--result", result));
  if (a.Has("--heads")) CGDR_CLI_TRY(a.IntList("--heads", 0, 1 << 16, heads));
  return Status::Ok();
}

}  // namespace

Status ParseFloatDType(const Args& a, const char* flag, DType def, DType* out) {
  if (!a.Has(flag)) {
    *out = def;
    return Status::Ok();
  }
  const std::string s = a.Get(flag);
  if (!ParseDType(s, out) || *out == DType::kI32) {
    return Status::Invalid(std::string(flag) + ": expected f16, bf16 or f32, got '" + s + "'");
  }
  return Status::Ok();
}

Status ParseCaseSpec(const Args& a, const CaseSpec& defaults, CaseSpec* spec) {
  int64_t v = 0;
  std::vector<int64_t> lens;
  if (a.Has("--lens")) {
    CGDR_CLI_TRY(a.IntList("--lens", 0, 1 << 24, &lens));
  } else {
    CGDR_CLI_TRY(a.Int("--t", 0, 1 << 24, defaults.lens.empty() ? 0 : defaults.lens[0], &v));
    lens = {v};
  }
  spec->lens.assign(lens.begin(), lens.end());
  CGDR_CLI_TRY(a.Int("--nk", 1, 256, defaults.Nk, &spec->Nk));
  CGDR_CLI_TRY(a.Int("--nv", 1, 256, defaults.Nv, &spec->Nv));
  CGDR_CLI_TRY(a.Int("--dk", 1, kMaxHeadDim, defaults.Dk, &spec->Dk));
  CGDR_CLI_TRY(a.Int("--dv", 1, kMaxHeadDim, defaults.Dv, &spec->Dv));
  CGDR_CLI_TRY(ParseFloatDType(a, "--dtype", defaults.dtype, &spec->dtype));
  const DType state_default = a.Has("--dtype") ? spec->dtype : defaults.state_dtype;
  CGDR_CLI_TRY(ParseFloatDType(a, "--state-dtype", state_default, &spec->state_dtype));
  CGDR_CLI_TRY(ParseFloatDType(a, "--g-dtype", defaults.g_dtype, &spec->g_dtype));
  const std::string layout = a.Get("--layout", "vk");
  if (layout != "vk" && layout != "kv") return Status::Invalid("--layout: expected vk or kv, got '" + layout + "'");
  spec->layout = layout == "kv" ? StateLayout::kKV : StateLayout::kVK;
  spec->has_g = !a.Has("--no-g");
  spec->has_initial_state = !a.Has("--no-state");
  spec->use_qk_l2norm = a.Has("--l2norm");
  spec->raw_gate = a.Has("--raw-gate");
  spec->beta_sigmoid = a.Has("--beta-sigmoid");
  if (a.Has("--scale")) {
    const std::string s = a.Get("--scale");
    char* end = nullptr;
    spec->scale = std::strtod(s.c_str(), &end);
    if (s.empty() || *end != '\0' || !std::isfinite(spec->scale))
      return Status::Invalid("--scale: expected a number, got '" + s + "'");
  }
  CGDR_CLI_TRY(a.Int("--seed", 0, INT64_MAX, static_cast<int64_t>(defaults.seed), &v));
  spec->seed = static_cast<uint64_t>(v);
  return Status::Ok();
}

int ReportError(const Status& s) {
  std::fprintf(stderr, "cgdr: error: %s\n", OneLine(s.message()).c_str());
  return kExitError;
}

namespace {

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

namespace {

// Copies row `from` of `src` (rows of `row` elements) into row `to` of `dst`.
void CopyRow(const std::vector<double>& src, int64_t from, std::vector<double>* dst, int64_t to, int64_t row) {
  std::copy_n(src.begin() + from * row, row, dst->begin() + to * row);
}

// The checkpoint_every the result was computed with: its own metadata (cgdr
// run writes it with checkpoints), else none without checkpoint_states (a run
// with --checkpoint-every 0), else the case's.
Status ResultCheckpointEvery(const std::string& path, const LoadedResult& r, int64_t* every) {
  const auto& md = r.file.metadata();
  const auto it = md.find("checkpoint_every");
  if (it != md.end()) return Args::ParseInt(path + ": metadata 'checkpoint_every'", it->second, 0, INT64_MAX, every);
  if (!r.outputs.checkpoint_states.present()) *every = 0;
  return Status::Ok();
}

// A pool case's expected final_state: the case's pool with the slot of each
// sequence (state_indices[b] >= 0) replaced by its FP64 final state.
std::vector<double> ExpectedPool(const Inputs& in, const Problem& p, const std::vector<double>& final_states) {
  std::vector<double> pool = TensorAsDoubles(in.initial_state);
  const int64_t slot = p.Nv * p.Dk * p.Dv;
  for (int64_t b = 0; b < p.B; ++b) {
    if (p.Slot(b) >= 0) CopyRow(final_states, b, &pool, p.Slot(b), slot);
  }
  return pool;
}

Status CheckDecodeResult(const std::string& case_path, const std::string& result_path, const LoadedCase& c,
                         const LoadedResult& r, const std::vector<int64_t>& heads, double cap, AccuracyReport* report);

Status CheckHeads(const std::vector<int64_t>& heads, int64_t Nv) {
  for (int64_t h : heads) {
    if (h >= Nv) return Status::Invalid(Cat("--heads: head ", h, " out of range (Nv = ", Nv, ")"));
  }
  return Status::Ok();
}

}  // namespace

Status CheckResultFile(const std::string& case_path, const std::string& result_path, const std::vector<int64_t>& heads,
                       double cap, AccuracyReport* report) {
  LoadedCase c;
  CGDR_CLI_TRY(LoadCase(case_path, &c));
  LoadedResult r;
  CGDR_CLI_TRY(LoadResult(result_path, &r));
  if (c.decode.present) return CheckDecodeResult(case_path, result_path, c, r, heads, cap, report);
  CGDR_CLI_TRY(ResultCheckpointEvery(result_path, r, &c.options.checkpoint_every));
  // Validate with the result as the outputs: its shapes and dtypes must be the ones the case implies.
  Problem p;
  if (Status s = Validate(c.inputs, r.outputs, c.options, &p); !s.ok()) {
    return Status::Invalid(case_path + " + " + result_path + ": " + s.message());
  }
  CGDR_CLI_TRY(CheckHeads(heads, p.Nv));
  ReferenceResult ref;
  ReferenceRun(c.inputs, p, &ref, heads);
  const std::vector<double> final_ref =
      p.state_slots.empty() ? ref.final_state : ExpectedPool(c.inputs, p, ref.final_state);
  report->tensors = {Accuracy("out", r.outputs.out, ref.out, p.Nv, heads, cap),
                     Accuracy("final_state", r.outputs.final_state, final_ref, p.Nv, heads, cap)};
  if (r.outputs.checkpoint_states.present()) {
    report->tensors.push_back(
        Accuracy("checkpoint_states", r.outputs.checkpoint_states, ref.checkpoint_states, p.Nv, heads, cap));
  }
  return Status::Ok();
}

namespace {

// [N, K, ...] -> [N * K, ...]: a decode case's token tensors as a prefill's.
TensorView MergeTokenAxis(const TensorView& t, bool token_axis) {
  if (!t.present() || !token_axis || t.rank < 2) return t;
  std::vector<int64_t> shape{t.shape[0] * t.shape[1]};
  shape.insert(shape.end(), t.shape.begin() + 2, t.shape.begin() + t.rank);
  return TensorView(t.data, t.dtype, shape);
}

// A decode case's FP64 reference: a prefill of K tokens per sequence from its
// slot, with a checkpoint after every token (the per-token states). Rows of
// skipped sequences (negative index) are zeros, as DecodeStep writes them.
struct DecodeReference {
  std::vector<double> out, states, pool;
};

// Token j of each of the N sequences of a token tensor [N, K, ...], as [N, ...]
// in `buf` (absent stays absent).
TensorView TokenOf(const TensorView& t, int64_t K, int64_t j, std::vector<uint8_t>* buf) {
  if (!t.present()) return t;
  const TensorView m = MergeTokenAxis(t, true);  // [N * K, ...]
  const int64_t N = m.shape[0] / K;
  const size_t row = DTypeSize(m.dtype) * static_cast<size_t>(m.numel() / m.shape[0]);
  buf->resize(static_cast<size_t>(N) * row);
  for (int64_t n = 0; n < N; ++n) {
    std::memcpy(buf->data() + n * row, static_cast<const uint8_t*>(m.data) + (n * K + j) * row, row);
  }
  std::vector<int64_t> shape(m.shape.begin(), m.shape.begin() + m.rank);
  shape[0] = N;
  return TensorView(buf->data(), m.dtype, shape);
}

// The states a result wrote after each token (for the reference of a 16-bit
// pool): its `states` rows [N * K, slot] (may be absent), and its pool (the
// slots dst_indices name).
struct WrittenStates {
  TensorView rows, pool;
};

// The reference of K > 1 tokens on a 16-bit pool: K FP64 steps, each from
// the state the token before left in the pool's dtype, as the kernel's K
// steps each round it (SPEC 6b; verify is bitwise K single steps, 6d.2):
// the state the result wrote for that token (its states row or dst slot),
// so each step is judged on its own, else the FP64 state rounded to the
// pool's dtype. One FP64 run of K tokens would leave out K - 1 roundings: a
// correct result then measured 1.4x the 16-bit limit (K = 16, g = 0) and
// 100x the f32 limit of out.
void DecodeReferenceRoundedRun(const DecodeCase& dc, const DecodeProblem& dp, const Options& opt,
                               const std::vector<int64_t>& heads, const WrittenStates& written,
                               DecodeReference* result) {
  const DecodeInputs& d = dc.inputs;
  const int64_t N = dp.N, K = dp.K, slot = dp.Nv * dp.Dk * dp.Dv, row = dp.Nv * dp.Dv;
  const std::vector<double> pool = TensorAsDoubles(d.state_pool);
  const auto* src = static_cast<const int32_t*>(d.state_indices.data);
  const auto* dst = static_cast<const int32_t*>(d.dst_indices.data);
  const std::vector<double> written_rows = written.rows.present() ? TensorAsDoubles(written.rows) : std::vector<double>{};
  const std::vector<double> written_pool = dst != nullptr ? TensorAsDoubles(written.pool) : std::vector<double>{};
  // The sequences' states, dense [N, Nv, ...] (zeros for skipped ones); 16-bit
  // values, exact in f32.
  std::vector<float> state(static_cast<size_t>(N * slot), 0.0f);
  for (int64_t n = 0; n < N; ++n) {
    if (src[n] >= 0) std::copy_n(pool.begin() + src[n] * slot, slot, state.begin() + n * slot);
  }
  std::vector<int32_t> ones(static_cast<size_t>(N), 1);
  Options step = opt;
  step.checkpoint_every = 0;
  step.state_slot_stride = 0;
  result->out.assign(static_cast<size_t>(N * K * row), 0.0);
  result->states.assign(static_cast<size_t>(N * K * slot), 0.0);
  result->pool = pool;
  std::vector<uint8_t> q, k, v, beta, g, a;
  for (int64_t j = 0; j < K; ++j) {
    Inputs in{TokenOf(d.query, K, j, &q), TokenOf(d.key, K, j, &k), TokenOf(d.value, K, j, &v),
              TokenOf(d.beta, K, j, &beta), TokenOf(d.g, K, j, &g),
              TensorView(state.data(), DType::kF32, {N, dp.Nv, d.state_pool.shape[2], d.state_pool.shape[3]}),
              TensorView(ones.data(), DType::kI32, {N}), TokenOf(d.a, K, j, &a), d.A_log, d.dt_bias};
    Problem p;
    ValidateInputs(in, step, &p);  // the decode validation passed: these are its tensors, one token each
    ReferenceResult ref;
    ReferenceRun(in, p, &ref, heads);
    for (int64_t n = 0; n < N; ++n) {
      if (src[n] < 0) continue;
      CopyRow(ref.out, n, &result->out, n * K + j, row);
      CopyRow(ref.final_state, n, &result->states, n * K + j, slot);
      if (dst != nullptr && dst[n * K + j] >= 0) CopyRow(ref.final_state, n, &result->pool, dst[n * K + j], slot);
      if (j == K - 1 && dst == nullptr && !dc.output_states) CopyRow(ref.final_state, n, &result->pool, src[n], slot);
    }
    for (int64_t n = 0; n < N; ++n) {
      const double* next = nullptr;  // the state the result wrote after this token
      if (!written_rows.empty()) {
        next = written_rows.data() + (n * K + j) * slot;
      } else if (dst != nullptr && dst[n * K + j] >= 0) {
        next = written_pool.data() + dst[n * K + j] * slot;
      }
      for (int64_t i = n * slot; i < (n + 1) * slot; ++i) {
        state[i] = static_cast<float>(next ? next[i - n * slot] : RoundTrip(ref.final_state[i], dp.state_dtype));
      }
    }
  }
}

void DecodeReferenceRun(const DecodeCase& dc, const DecodeProblem& dp, const Options& opt,
                        const std::vector<int64_t>& heads, const WrittenStates& written, DecodeReference* result) {
  if (dp.K > 1 && dp.state_dtype != DType::kF32) {
    return DecodeReferenceRoundedRun(dc, dp, opt, heads, written, result);
  }
  const DecodeInputs& d = dc.inputs;
  const bool axis = d.query.rank == 4;
  const int64_t N = dp.N, K = dp.K, slot = dp.Nv * dp.Dk * dp.Dv, row = dp.Nv * dp.Dv;
  std::vector<int32_t> lens(static_cast<size_t>(N), static_cast<int32_t>(K));
  Inputs in{MergeTokenAxis(d.query, axis), MergeTokenAxis(d.key, axis), MergeTokenAxis(d.value, axis),
            MergeTokenAxis(d.beta, axis), MergeTokenAxis(d.g, axis), d.state_pool,
            TensorView(lens.data(), DType::kI32, {N}), MergeTokenAxis(d.a, axis), d.A_log, d.dt_bias, d.state_indices};
  Options prefill = opt;
  prefill.checkpoint_every = 1;
  prefill.state_slot_stride = 0;
  Problem p;
  ValidateInputs(in, prefill, &p);  // the decode validation passed: these are the same tensors
  ReferenceResult ref;
  ReferenceRun(in, p, &ref, heads);
  result->out.assign(ref.out.size(), 0.0);
  result->states.assign(ref.checkpoint_states.size(), 0.0);
  result->pool = TensorAsDoubles(d.state_pool);
  const auto* src = static_cast<const int32_t*>(d.state_indices.data);
  const auto* dst = static_cast<const int32_t*>(d.dst_indices.data);
  for (int64_t n = 0; n < N; ++n) {
    if (src[n] < 0) continue;
    for (int64_t j = 0; j < K; ++j) {
      CopyRow(ref.out, n * K + j, &result->out, n * K + j, row);
      CopyRow(ref.checkpoint_states, n * K + j, &result->states, n * K + j, slot);
      if (dst != nullptr && dst[n * K + j] >= 0) {
        CopyRow(ref.checkpoint_states, n * K + j, &result->pool, dst[n * K + j], slot);
      }
    }
    if (dst == nullptr && !dc.output_states) CopyRow(ref.final_state, n, &result->pool, src[n], slot);
  }
}

Status CheckDecodeResult(const std::string& case_path, const std::string& result_path, const LoadedCase& c,
                         const LoadedResult& r, const std::vector<int64_t>& heads, double cap, AccuracyReport* report) {
  const TensorView& pool = c.decode.inputs.state_pool;
  const TensorView& after = r.outputs.final_state;
  DecodeProblem dp;
  Status s = ValidateDecode(c.decode.inputs, DecodeOutputs{r.outputs.out, r.states}, c.options, &dp);
  if (s.ok() && c.decode.output_states != r.states.present()) {
    s = Status::Invalid(Cat("states: expected ", c.decode.output_states ? "it (metadata output_states)" : "none"));
  }
  if (s.ok() && (after.dtype != pool.dtype || after.ShapeString() != pool.ShapeString())) {
    s = Status::Invalid(Cat("final_state: expected the pool's dtype and shape ", DTypeName(pool.dtype), " ",
                            pool.ShapeString(), ", got ", DTypeName(after.dtype), " ", after.ShapeString()));
  }
  if (!s.ok()) return Status::Invalid(case_path + " + " + result_path + ": " + s.message());
  CGDR_CLI_TRY(CheckHeads(heads, dp.Nv));
  DecodeReference ref;
  DecodeReferenceRun(c.decode, dp, c.options, heads, WrittenStates{r.states, after}, &ref);
  report->tensors = {Accuracy("out", r.outputs.out, ref.out, dp.Nv, heads, cap),
                     Accuracy("final_state", after, ref.pool, dp.Nv, heads, cap)};
  if (r.states.present()) report->tensors.push_back(Accuracy("states", r.states, ref.states, dp.Nv, heads, cap));
  return Status::Ok();
}

}  // namespace

void PrintAccuracy(const AccuracyReport& r) {
  for (const auto& t : r.tensors) {
    std::printf("  %-17s rel err %.3e  (%s; rounding floor %.3e, limit %.3e)  %s\n", t.name, t.rel_err,
                DTypeName(t.dtype), t.rounding_floor, t.limit, t.ok() ? "ok" : "FAIL");
  }
}

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
  const std::string how =
      MakePlan(p, DefaultProfile(), &plan).ok()
          ? Cat(AlgoName(static_cast<Algo>(plan.chunk)), ", ", PrecisionName(plan.precision), " on ",
                PlanEngineName(plan), ", ", plan.threads, plan.threads == 1 ? " thread" : " threads")
          : "?";
  const double tokens_per_s = static_cast<double>(p.T) / std::max(r.seconds, 1e-9);
  char figures[96];
  std::snprintf(figures, sizeof figures, "%.3f ms, %.0f tokens/s", r.seconds * 1e3, tokens_per_s);
  return Cat("cgdr run: ", p.T, " tokens (B=", p.B, " Nk=", p.Nk, " Nv=", p.Nv, " Dk=", p.Dk, " Dv=", p.Dv, " ",
             DTypeName(p.dtype), "), plan ", how, ": ", figures, "; wrote ", req.output);
}

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

int MakeCaseMain(int argc, char** argv) {
  bool help = false;
  if (Status s = MakeCaseFile(argc, argv, &help); !s.ok()) return ReportError(s);
  return kExitOk;
}

int CheckMain(int argc, char** argv) {
  std::string input, result;
  std::vector<int64_t> heads;
  bool help = false;
  if (Status s = CheckArgs(argc, argv, &input, &result, &heads, &help); !s.ok()) return ReportError(s);
  if (help) return kExitOk;
  AccuracyReport report;
  if (Status s = CheckResultFile(input, result, heads, 0.0, &report); !s.ok()) return ReportError(s);
  std::printf("check %s against the FP64 reference of %s:\n", result.c_str(), input.c_str());
  PrintAccuracy(report);
  return report.ok() ? kExitOk : kExitCheckFailed;
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

namespace {

struct Command {
  const char* name;
  int (*main)(int, char**);
};
constexpr Command kCommands[] = {{"run", RunMain},         {"plan", PlanMain},        {"bench", cgdr::BenchMain},
                                 {"tune", cgdr::TuneMain}, {"demo", DemoMain},        {"golden", GoldenMain},
                                 {"compare", CompareMain}, {"make-case", MakeCaseMain}, {"check", CheckMain},
                                 {"flags", FlagsMain}};

const Command* FindCommand(const std::string& name) {
  for (const auto& c : kCommands) {
    if (name == c.name) return &c;
  }
  return nullptr;
}

// `cgdr help [COMMAND]`: the overview, or the command's own --help.
int HelpMain(int argc, char** argv) {
  if (argc == 0) {
    std::fputs(kUsage, stdout);
    return kExitOk;
  }
  const Command* c = FindCommand(argv[0]);
  if (argc > 1 || c == nullptr) {
    return ReportError(Status::Invalid(Cat("'cgdr help' takes one command name (run, plan, bench, tune, demo, golden, ",
                                           "compare), got '", PrintableName(argc > 1 ? argv[1] : argv[0]), "'")));
  }
  char help_flag[] = "--help";
  char* args[] = {help_flag, nullptr};
  return c->main(1, args);
}

}  // namespace
}  // namespace cgdr::cli

int main(int argc, char** argv) {
  using namespace cgdr::cli;
  if (argc < 2) return ReportError(cgdr::Status::Invalid("no command given (try 'cgdr --help')"));
  const std::string cmd = argv[1];
  if (cmd == "help" || cmd == "--help" || cmd == "-h") return HelpMain(argc - 2, argv + 2);
  if (cmd == "--version" || cmd == "version") {
    std::printf("cgdr %s\n", CGDR_VERSION_STRING);
    return kExitOk;
  }
  if (const Command* c = FindCommand(cmd)) return c->main(argc - 2, argv + 2);
  return ReportError(cgdr::Status::Invalid("unknown command '" + cmd + "' (try 'cgdr --help')"));
}
