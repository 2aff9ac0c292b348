// Two plans of one problem timed in turn, rep by rep, in one process: the
// time of each and the ratio of each pair. On the shared 2-vCPU hosts a
// neighbour moves a chunked call by up to 1.5x from one minute to the next
// (docs/SPEC.md 10.6, AMD EPYC Zen 3), more than most changes worth
// measuring, so runs in separate processes cannot tell them apart; the two
// calls of a pair run within a second of each other and see the same
// neighbour (which of the two runs first alternates). A variant sets options
// (the planner then decides the rest) and may override the plan's own hints
// afterwards (the plan is checked again).
//
//   bench_ab [--shape kda|qwen3-next] [--t T] [--threads N] [--reps N] A B
//   A, B: "plan" (the plan as made) or comma-separated settings:
//     algo=auto|recurrent|chunk16|chunk32|chunk64|chunk128, v_step=N,
//     precision=auto|fp32|bf16|bf16x3|bf16x4, engine=auto|vector|amx|amx-emu,
//     prefetch=l1|l2, stream_out=0|1
//   e.g. bench_ab --shape kda prefetch=l1 prefetch=l2
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "cgdr/cgdr.hpp"
#include "cgdr/plan.hpp"
#include "core/synthetic.h"
#include "kernels/kernels.h"

namespace {

using cgdr::Plan;

[[noreturn]] void Usage(const std::string& why) {
  std::fprintf(stderr,
               "bench_ab: %s\nusage: bench_ab [--shape kda|qwen3-next] [--t T] [--threads N] [--reps N] A B\n"
               "  A, B: 'plan' or comma-separated settings: algo=auto|recurrent|chunk16|chunk32|chunk64|chunk128,\n"
               "        v_step=N, precision=auto|fp32|bf16|bf16x3|bf16x4, engine=auto|vector|amx|amx-emu,\n"
               "        prefetch=l1|l2, stream_out=0|1\n",
               why.c_str());
  std::exit(2);
}

int PositiveInt(const std::string& flag, const char* v) {
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  if (end == v || *end != '\0' || x < 1 || x > (1L << 30)) Usage(flag + " expects a positive integer, got '" + v + "'");
  return static_cast<int>(x);
}

// A variant: options for the planner, then overrides of the plan's hints.
struct Variant {
  std::string text;
  cgdr::Options options;
  std::optional<bool> prefetch_into_l1;  // empty: as planned
  std::optional<bool> stream_out;
};

Variant ParseVariant(const std::string& text, const cgdr::Options& base) {
  Variant v;
  v.text = text;
  v.options = base;
  if (text == "plan") return v;
  size_t at = 0;
  while (at <= text.size()) {
    const size_t comma = std::min(text.find(',', at), text.size());
    const std::string item = text.substr(at, comma - at);
    at = comma + 1;
    const size_t eq = item.find('=');
    if (eq == std::string::npos) Usage("a setting is key=value, got '" + item + "' in '" + text + "'");
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    bool ok = true;
    if (key == "algo") {
      ok = cgdr::ParseAlgo(value, &v.options.algo);
    } else if (key == "v_step") {
      v.options.v_step = PositiveInt("v_step", value.c_str());
    } else if (key == "precision") {
      ok = cgdr::ParsePrecision(value, &v.options.precision);
    } else if (key == "engine") {
      ok = cgdr::ParseEngine(value, &v.options.engine);
    } else if (key == "prefetch") {
      ok = value == "l1" || value == "l2";
      v.prefetch_into_l1 = value == "l1";
    } else if (key == "stream_out") {
      ok = value == "0" || value == "1";
      v.stream_out = value == "1";
    } else {
      Usage("unknown setting '" + key + "' in '" + text + "'");
    }
    if (!ok) Usage("bad value '" + value + "' for " + key);
  }
  return v;
}

// The shapes and dtypes of `cgdr bench`'s rows of the same names
// (tools/cli/bench_rows.cc, which this single-file tool cannot link): the
// flagship in f16 with an f16 state (kBenchDType), Kimi Linear's KDA layer in
// bf16 with an f32 state and per-channel g in [-1, 0].
cgdr::CaseSpec Shape(const std::string& name, int64_t T) {
  cgdr::CaseSpec s;
  s.Nk = 16;
  s.Nv = 32;
  s.Dk = s.Dv = 128;
  s.lens = {static_cast<int32_t>(T)};
  if (name == "qwen3-next") {
    s.dtype = s.state_dtype = cgdr::DType::kF16;
  } else if (name == "kda") {
    s.Nk = 32;
    s.dtype = cgdr::DType::kBF16;
    s.state_dtype = cgdr::DType::kF32;
    s.per_channel_gate = true;
    s.g_min = -1.0f;
  } else {
    Usage("--shape expects kda or qwen3-next, got '" + name + "'");
  }
  return s;
}

std::string FirstLine(const std::string& s) { return s.substr(0, s.find('\n')); }

double Median(std::vector<double> x) {
  std::sort(x.begin(), x.end());
  return x[x.size() / 2];
}

// FNV-1a of a buffer: whether the two variants wrote the same bits.
uint64_t Hash(const cgdr::Bytes& b) {
  uint64_t h = 1469598103934665603ull;
  for (uint8_t c : b) h = (h ^ c) * 1099511628211ull;
  return h;
}

}  // namespace

int main(int argc, char** argv) {
  std::string shape = "kda";
  int64_t T = 8192;
  int threads = 2, reps = 10;
  std::vector<std::string> texts;
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    if (f.rfind("--", 0) != 0) {
      texts.push_back(f);
      continue;
    }
    if (i + 1 >= argc) Usage("missing value after " + f);
    const char* v = argv[++i];
    if (f == "--shape") {
      shape = v;
    } else if (f == "--t") {
      T = PositiveInt(f, v);
    } else if (f == "--threads") {
      threads = PositiveInt(f, v);
    } else if (f == "--reps") {
      reps = PositiveInt(f, v);
    } else {
      Usage("unknown flag " + f);
    }
  }
  if (texts.size() != 2) Usage("expects two variants, got " + std::to_string(texts.size()));

  const cgdr::CaseSpec spec = Shape(shape, T);
  cgdr::Case c = cgdr::MakeCase(spec);
  cgdr::Options base = c.options();
  base.threads = threads;
  const cgdr::Inputs in = c.inputs();
  const cgdr::Outputs out = c.outputs();
  Variant var[2] = {ParseVariant(texts[0], base), ParseVariant(texts[1], base)};
  Plan plan[2];
  for (int v = 0; v < 2; ++v) {
    cgdr::Problem problem;
    cgdr::Status s = cgdr::Validate(in, out, var[v].options, &problem);
    if (s.ok()) s = cgdr::MakePlan(problem, cgdr::DefaultProfile(), &plan[v]);
    if (s.ok()) plan[v].prefetch_into_l1 = var[v].prefetch_into_l1.value_or(plan[v].prefetch_into_l1);
    if (s.ok()) plan[v].stream_out = var[v].stream_out.value_or(plan[v].stream_out);
    if (s.ok()) s = cgdr::CheckPlan(plan[v]);
    if (!s.ok()) Usage("variant '" + var[v].text + "': " + s.message());
  }

  std::printf("bench_ab: %s, T=%lld, %d threads, %s; %d pairs (A first, then B first, in turn) after a warm-up pair\n",
              shape.c_str(), static_cast<long long>(T), threads, cgdr::CpuDescription().c_str(), reps);
  std::vector<double> ms[2], ratio;
  uint64_t out_hash[2] = {0, 0}, state_hash[2] = {0, 0};
  for (int r = 0; r <= reps; ++r) {
    double pair[2];
    for (int turn = 0; turn < 2; ++turn) {
      const int v = turn ^ (r & 1);  // A first in even pairs, B first in odd ones: no order bias
      const auto t0 = std::chrono::steady_clock::now();
      const cgdr::Status s = cgdr::Execute(plan[v], in, out);
      pair[v] = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (!s.ok()) Usage("variant '" + var[v].text + "' failed: " + s.message());
      if (r == 0) {
        out_hash[v] = Hash(c.out);
        state_hash[v] = Hash(c.final_state);
      }
    }
    if (r == 0) continue;  // the warm-up pair: first touch of the outputs and the scratch
    ms[0].push_back(pair[0]);
    ms[1].push_back(pair[1]);
    ratio.push_back(pair[0] / pair[1]);
  }
  const double gflop = 6.0 * static_cast<double>(spec.Dk * spec.Dv * T * spec.Nv) / 1e9;  // SPEC 8, algorithmic
  for (int v = 0; v < 2; ++v) {
    const double best = *std::min_element(ms[v].begin(), ms[v].end());
    std::printf("%c %-28s min %9.2f ms  median %9.2f ms  %7.1f GFLOP/s (median)\n  %s\n", 'A' + v,
                var[v].text.c_str(), best, Median(ms[v]), gflop / (Median(ms[v]) / 1e3),
                FirstLine(cgdr::PlanToString(plan[v])).c_str());
  }
  std::printf("A/B per pair: median %.3f, min %.3f, max %.3f; out %s, final_state %s\n", Median(ratio),
              *std::min_element(ratio.begin(), ratio.end()), *std::max_element(ratio.begin(), ratio.end()),
              out_hash[0] == out_hash[1] ? "the same bits" : "DIFFERENT bits",
              state_hash[0] == state_hash[1] ? "the same bits" : "DIFFERENT bits");
  return 0;
}
