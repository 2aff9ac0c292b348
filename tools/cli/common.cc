// What the subcommands share (commands.h): the one-line error report, --help,
// and the parsers of the flags several commands take.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "args.h"
#include "cgdr/cgdr.hpp"
#include "commands.h"
#include "core/dtype.h"

namespace cgdr::cli {

int ReportError(const Status& s) {
  std::fprintf(stderr, "cgdr: error: %s\n", OneLine(s.message()).c_str());
  return kExitError;
}

std::string OneLine(std::string s) {
  std::replace_if(
      s.begin(), s.end(), [](char c) { return c == '\n' || c == '\r'; }, ' ');
  return s;
}

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

std::string Prefixed(const std::string& what, const Status& s) { return what + ": " + s.message(); }

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

CaseSpec CaseSpecDefaults(int32_t T, int64_t Nk, int64_t Nv, int64_t D, DType dtype) {
  return CaseSpec{.Nk = Nk, .Nv = Nv, .Dk = D, .Dv = D, .lens = {T}, .dtype = dtype, .g_dtype = DType::kF32,
                  .state_dtype = dtype, .seed = 1};
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

}  // namespace cgdr::cli
