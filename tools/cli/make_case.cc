// The hidden `cgdr make-case` (a test helper): a synthetic case file, with
// the serving tensors (a state pool, checkpoints, decode cases) on request,
// or one deliberately broken in a named way.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "args.h"
#include "cgdr/cgdr.hpp"
#include "commands.h"
#include "core/synthetic.h"
#include "io/case_file.h"
#include "io/safetensors.h"

namespace cgdr::cli {
namespace {

const char kMakeCaseUsage[] =
    "usage: cgdr make-case --out FILE [--t T | --lens 3,0,5] [--nk 2] [--nv 4] [--dk 16] [--dv 16]\n"
    "                      [--dtype f32] [--state-dtype DT] [--g-dtype f32] [--layout vk|kv]\n"
    "                      [--no-g] [--no-state] [--l2norm] [--raw-gate] [--beta-sigmoid] [--scale X]\n"
    "                      [--per-channel-gate] [--gate-lower-bound X] [--no-a-log]\n"
    "                      [--slots 2,-1,0 [--pool P]] [--checkpoint-every E]\n"
    "                      [--decode [--tokens K] [--dst 3,4,...] [--output-states]] [--seed N] [--break KIND]\n"
    "  --raw-gate: a, A_log, dt_bias instead of g; --beta-sigmoid: beta holds raw logits (SPEC 6d).\n"
    "  --per-channel-gate: KDA (SPEC 10): g (or a) [T, Nv, Dk], dt_bias [Nv * Dk]; --gate-lower-bound X:\n"
    "  metadata gate_lower_bound (written as given; with --raw-gate: g = X sigmoid(exp(A_log) (a + dt_bias)));\n"
    "  --no-a-log: the raw gate without A_log (only a bounded gate may omit it).\n"
    "  --slots: state_indices, initial_state a pool of P slots (default: the largest slot + 2);\n"
    "  --checkpoint-every: metadata checkpoint_every (written as given); --decode: a decode case of\n"
    "  one sequence per slot, K tokens each with --tokens K (a token axis), dst_indices --dst (N x K).\n"
    "  A synthetic, well-conditioned case (testing). --break writes a deliberately bad one:\n"
    "  beta-i32, key-shape, seq-lens, missing-beta, bad-layout, unknown-tensor, slots-f32, dst-f32.\n";

// make-case's shapes when not given: tiny, f32.
CaseSpec MakeCaseDefaults() { return CaseSpecDefaults(16, 2, 4, 16, DType::kF32); }

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

// KDA (docs/SPEC.md 10): the per-channel gate and the gate's lower bound
// (any finite number: a bad one is for 'cgdr run' to refuse).
Status ParseKdaSpec(const Args& a, CaseSpec* spec) {
  spec->per_channel_gate = a.Has("--per-channel-gate");
  if (a.Has("--gate-lower-bound")) {
    const std::string s = a.Get("--gate-lower-bound");
    char* end = nullptr;
    spec->gate_lower_bound = std::strtod(s.c_str(), &end);
    if (s.empty() || *end != '\0' || !std::isfinite(spec->gate_lower_bound)) {
      return Status::Invalid("--gate-lower-bound: expected a finite number (0: none, else < 0), got '" + s + "'");
    }
  }
  if (a.Has("--no-a-log") && !spec->raw_gate) return Status::Invalid("--no-a-log: only with --raw-gate");
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
                        "--checkpoint-every", "--tokens", "--dst", "--gate-lower-bound"},
                       {"--no-g", "--no-state", "--l2norm", "--raw-gate", "--beta-sigmoid", "--decode",
                        "--output-states", "--per-channel-gate", "--no-a-log"}));
  if ((*help = MaybeHelp(a, kMakeCaseUsage))) return Status::Ok();
  std::string path;
  CGDR_CLI_TRY(a.Require("--out", &path));
  CaseSpec spec;
  CGDR_CLI_TRY(ParseCaseSpec(a, MakeCaseDefaults(), &spec));
  CGDR_CLI_TRY(ParseKdaSpec(a, &spec));
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
  if (a.Has("--no-a-log")) {
    if (auto it = find("A_log"); it != tensors.end()) tensors.erase(it);
  }
  if (serving.every != 0) md["checkpoint_every"] = std::to_string(serving.every);
  if (serving.output_states) md["output_states"] = "true";
  std::vector<int32_t> scratch;
  if (a.Has("--break")) CGDR_CLI_TRY(BreakCase(a.Get("--break"), &c, &tensors, &md, &scratch));
  return WriteSafetensors(path, tensors, md);
}

}  // namespace

int MakeCaseMain(int argc, char** argv) {
  bool help = false;
  if (Status s = MakeCaseFile(argc, argv, &help); !s.ok()) return ReportError(s);
  return kExitOk;
}

}  // namespace cgdr::cli
