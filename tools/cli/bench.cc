// `cgdr bench` (SPEC 8): the rows (bench_rows.cc) timed against the peaks
// measured in the same run, each row with its error against FP64, and the
// flagship's extra comparisons; or the precision table (bench_precision.cc).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "args.h"
#include "bench.h"
#include "commands.h"
#include "core/cpu_features.h"
#include "core/threads.h"
#include "io/file_util.h"

namespace cgdr::cli {
namespace {

// The thread count Options::threads = 0 resolves to (core/threads.h).
int DefaultThreads() { return ResolveThreadCount(0); }

// One way to run a row: a formulation on a number of threads.
struct Variant {
  Algo algo = Algo::kAuto;
  int threads = 1;
};

// Times one row under each variant (in turn, TimeRunsInTurn) and fills
// everything but `extra`, one result per variant.
Status BenchRow(const RowSpec& spec, Case& data, const std::vector<Variant>& variants, const BenchConfig& cfg,
                PeakCache& peaks, HeadProblem& head, std::vector<RowResult>* results) {
  Inputs in;
  Outputs out;
  RowViews(data, spec.lens, &in, &out);
  std::vector<Options> opts;
  std::vector<Plan> plans(variants.size());
  for (size_t k = 0; k < variants.size(); ++k) {
    Options opt = data.options();
    opt.algo = variants[k].algo;
    opt.precision = cfg.precision;
    opt.engine = cfg.engine;
    opt.threads = variants[k].threads;
    if (Status s = PlanFor(in, out, opt, &plans[k]); !s.ok()) return s;
    opts.push_back(opt);
  }
  std::vector<Timing> timings;
  ResetPhaseTimers();
  if (Status s = TimeRunsInTurn(in, out, opts, cfg.reps, cfg.quick ? 0.15 : 0.5, &timings); !s.ok()) return s;
  // The stages of each variant: the timed reps' where one variant ran; where
  // several ran in turn (their counters mixed), one more untimed run each.
  std::vector<std::vector<PhaseTotal>> phases(variants.size());
  if (variants.size() == 1) {
    phases[0] = PhaseTotals();
  } else if (PhaseTimersCompiled()) {
    for (size_t k = 0; k < variants.size(); ++k) {
      ResetPhaseTimers();
      if (Status s = Run(in, out, opts[k]); !s.ok()) return s;
      phases[k] = PhaseTotals();
    }
  }
  const int64_t T = TotalTokens(spec.lens);
  // `out` holds the last option's result, and outputs do not depend on the
  // thread count (SPEC 5): a variant runs once more for its error only where
  // `out` holds another formulation's (the variants share precision and engine).
  Algo in_out = variants.back().algo;
  for (size_t k = 0; k < variants.size(); ++k) {
    RowResult r;
    r.spec = spec;
    r.requested = variants[k].algo;
    r.precision = plans[k].precision;
    r.engine = PlanEngineName(plans[k]);
    r.threads = opts[k].threads;
    r.chunk = plans[k].chunk;
    r.v_step = plans[k].v_step;
    r.phases = phases[k];
    FillTiming(timings[k], T, AlgoFlops(T, spec.Nv, spec.Dk, spec.Dv), peaks.Get(opts[k].threads).gflops,
               peaks.Amx(opts[k].threads), &r);
    if (variants[k].algo != in_out) {
      if (Status s = Run(in, out, opts[k]); !s.ok()) return s;
      in_out = variants[k].algo;
    }
    r.rel_err = head.RelErr(out.out);
    r.rounding_err = head.rounding_err();
    r.rel_err_state = head.RelErrState(out.final_state);
    r.rounding_err_state = head.rounding_err_state();
    results->push_back(std::move(r));
  }
  return Status::Ok();
}

// check_values (SPEC 3) scans every input before the run and every output
// after it: its cost on the flagship, timed next to the same run without it
// (off runs no extra code at all).
Status CheckValuesOverhead(Case& data, const RowSpec& spec, const BenchConfig& cfg, RowResult* r) {
  Inputs in;
  Outputs out;
  RowViews(data, spec.lens, &in, &out);
  Options opt = data.options();
  opt.algo = r->requested;
  opt.precision = cfg.precision;
  opt.engine = cfg.engine;
  opt.threads = r->threads;
  Options checked = opt;
  checked.check_values = true;
  std::vector<Timing> timings;
  Status s = TimeRunsInTurn(in, out, {opt, checked}, cfg.reps, cfg.quick ? 0.15 : 0.5, &timings);
  if (!s.ok()) return s;
  const Timing& off = timings[0];
  const Timing& on = timings[1];
  const double pct = 100.0 * (on.median_s - off.median_s) / off.median_s;
  std::printf("  -> check_values: off %.3f ms, on %.3f ms: %+.1f%% (input scan + output finiteness scan)\n",
              off.median_s * 1e3, on.median_s * 1e3, pct);
  r->extra["check_values_off_seconds"] = off.median_s;
  r->extra["check_values_on_seconds"] = on.median_s;
  r->extra["check_values_overhead_pct"] = pct;
  return Status::Ok();
}

// The serving features (docs/SPEC.md 6d) on the flagship, timed in turn with
// the same run: the gate in the kernel (a, A_log, dt_bias instead of g: the
// row's g serves as a, A_log = dt_bias = 0) and checkpoints every 256 tokens
// (f32).
Status ServingOverhead(Case& data, const RowSpec& spec, const BenchConfig& cfg, RowResult* r) {
  constexpr int64_t kEvery = 256;
  Call base;
  RowViews(data, spec.lens, &base.in, &base.out);
  base.opt = data.options();
  base.opt.algo = r->requested;
  base.opt.precision = cfg.precision;
  base.opt.engine = cfg.engine;
  base.opt.threads = r->threads;
  std::vector<float> zeros(static_cast<size_t>(spec.Nv), 0.0f);
  Call gate = base;
  gate.in.a = base.in.g;
  gate.in.g = TensorView();
  gate.in.A_log = TensorView(zeros.data(), DType::kF32, {spec.Nv});
  gate.in.dt_bias = gate.in.A_log;
  Call ckpt = base;
  int64_t rows = 0;
  for (int32_t l : spec.lens) rows += l / kEvery;
  const TensorView& fs = base.out.final_state;
  Bytes states(static_cast<size_t>(rows * fs.shape[1] * fs.shape[2] * fs.shape[3]) * sizeof(float) + 1);
  ckpt.opt.checkpoint_every = kEvery;
  ckpt.out.checkpoint_states = TensorView(states.data(), DType::kF32, {rows, fs.shape[1], fs.shape[2], fs.shape[3]});
  std::vector<Timing> t;
  if (Status s = TimeCallsInTurn({base, gate, ckpt}, cfg.reps, cfg.quick ? 0.15 : 0.5, &t); !s.ok()) return s;
  const double gate_pct = 100.0 * (t[1].median_s - t[0].median_s) / t[0].median_s;
  const double ckpt_pct = 100.0 * (t[2].median_s - t[0].median_s) / t[0].median_s;
  std::printf("  -> serving: g given %.3f ms; gate in the kernel %.3f ms: %+.1f%%; checkpoints every %lld %.3f ms: %+.1f%%\n",
              t[0].median_s * 1e3, t[1].median_s * 1e3, gate_pct, static_cast<long long>(kEvery), t[2].median_s * 1e3,
              ckpt_pct);
  r->extra["serving_base_seconds"] = t[0].median_s;
  r->extra["gate_in_kernel_seconds"] = t[1].median_s;
  r->extra["gate_in_kernel_overhead_pct"] = gate_pct;
  r->extra["checkpoints_256_seconds"] = t[2].median_s;
  r->extra["checkpoints_256_overhead_pct"] = ckpt_pct;
  return Status::Ok();
}

// --algo all: which formulation was fastest, and what auto's choice cost.
void CompareAlgos(std::vector<RowResult>& variants) {
  const RowResult* best = &variants[0];
  RowResult* autorow = nullptr;
  for (auto& v : variants) {
    if (v.requested != Algo::kAuto && (best->requested == Algo::kAuto || v.seconds < best->seconds)) best = &v;
    if (v.requested == Algo::kAuto) autorow = &v;
  }
  if (!autorow || best->requested == Algo::kAuto) return;
  const double slowdown = autorow->seconds / best->seconds;
  std::printf("  -> fastest: %s (%.3f ms); auto chose %s: %.3f ms, %.2fx the fastest\n", AlgoName(best->requested),
              best->seconds * 1e3, PlanAlgoName(autorow->chunk).c_str(), autorow->seconds * 1e3, slowdown);
  autorow->extra["fastest_algo"] = AlgoName(best->requested);
  autorow->extra["auto_slowdown"] = slowdown;
}

// A KDA row's chunked run against the recurrent form timed in turn with it.
void AddRecurrentRatio(std::vector<RowResult>& variants) {
  RowResult& chunked = variants.front();
  const RowResult& recurrent = variants.back();
  const double speedup = recurrent.seconds / chunked.seconds;
  std::printf("  -> the recurrent form (timed in turn): %.3f ms; %s is %.2fx faster\n", recurrent.seconds * 1e3,
              PlanAlgoName(chunked.chunk).c_str(), speedup);
  chunked.extra["recurrent_seconds"] = recurrent.seconds;
  chunked.extra["speedup_vs_recurrent"] = speedup;
}

// The scaling row (1 thread) was timed in turn with the same formulation on
// all threads (`all`, not a row of its own): the speedup compares them on
// the same minutes of this shared machine.
void AddScaling(const RowResult& all, RowResult& one) {
  const double speedup = one.seconds / all.seconds;
  std::printf("  -> thread scaling (T=%lld, timed in turn): 1 thread %.3f ms, %d threads %.3f ms: %.2fx (ideal %dx)\n",
              static_cast<long long>(one.T), one.seconds * 1e3, all.threads, all.seconds * 1e3, speedup, all.threads);
  one.extra["scaling_speedup"] = speedup;
  one.extra["scaling_threads"] = all.threads;
  one.extra["scaling_all_threads_seconds"] = all.seconds;
}

Status ParseBenchFlags(int argc, char** argv, BenchConfig* cfg, bool* help) {
  Args a;
  Status s = a.Parse("bench", argc, argv,
                     {"--shape", "--t", "--threads", "--json", "--algo", "--reps", "--precision", "--engine", "--target"},
                     {"--quick", "--skip-emulated-products"});
  if (!s.ok()) return s;
  *help = a.Has("--help");
  int64_t t = 0, threads = 0, reps = 0;
  if (s = a.Int("--t", 1, int64_t{1} << 24, 0, &t); !s.ok()) return s;
  if (s = a.Int("--threads", 1, 4096, DefaultThreads(), &threads); !s.ok()) return s;
  if (s = a.Int("--reps", 1, 100000, 0, &reps); !s.ok()) return s;
  cfg->t_override = t;
  cfg->threads = static_cast<int>(threads);
  cfg->reps = static_cast<int>(reps);
  cfg->quick = a.Has("--quick");
  cfg->skip_emulated_products = a.Has("--skip-emulated-products");
  if (cfg->skip_emulated_products && !PhaseTimersCompiled()) {
    return Status::Invalid("--skip-emulated-products: only in a timing build (cmake -DCGDR_PHASE_TIMERS=ON); "
                           "this build would give wrong results for nothing");
  }
  if (a.Has("--shape")) {
    const std::vector<std::string> names = RowNames();
    cfg->shape = a.Get("--shape");
    if (std::find(names.begin(), names.end(), cfg->shape) == names.end()) {
      std::string known;
      for (const auto& n : names) known += (known.empty() ? "" : ", ") + n;
      return Status::Invalid("--shape: no row '" + cfg->shape + "' (rows: " + known + ")");
    }
    if (cfg->quick) return Status::Invalid("--shape and --quick: pick one");
  }
  if (a.Has("--json")) {
    cfg->json_path = a.Get("--json");
    // Fail now, not after minutes of timing.
    const std::filesystem::path dir = std::filesystem::path(cfg->json_path).parent_path();
    std::error_code ec;
    if (cfg->json_path.empty() || (!dir.empty() && !std::filesystem::is_directory(dir, ec))) {
      return Status::Invalid("--json: cannot write '" + cfg->json_path + "' (no such directory)");
    }
  }
  const std::string algo = a.Get("--algo", "auto");
  Algo one;
  if (algo == "all") {
    cfg->all_algos = true;
    cfg->algos = {Algo::kAuto, Algo::kRecurrent, Algo::kChunk16, Algo::kChunk32, Algo::kChunk64};
  } else if (ParseAlgo(algo, &one)) {
    cfg->algos = {one};
  } else {
    return Status::Invalid("--algo: expected auto|recurrent|chunk16|chunk32|chunk64|all, got '" + algo + "'");
  }
  if (a.Has("--target")) {
    const std::string name = a.Get("--target");
    cfg->target = UsableTargetNamed(name);
    if (cfg->target == 0) {
      std::string names;
      for (const auto& n : UsableTargetNames()) names += (names.empty() ? "" : ", ") + n;
      return Status::Invalid("--target: '" + name + "' is not a target this build runs on this CPU (" + names + ")");
    }
  }
  const std::string prec = a.Get("--precision", "auto");
  if (prec == "all") {
    cfg->all_precisions = true;
  } else if (!ParsePrecision(prec, &cfg->precision)) {
    return Status::Invalid("--precision: expected auto|fp32|bf16|bf16x3|bf16x4|all, got '" + prec + "'");
  }
  return ParseEngineFlag(a, &cfg->engine);
}

const char* kBenchUsage =
    "usage: cgdr bench [--shape ROW] [--t T] [--threads N] [--json FILE]\n"
    "                  [--algo auto|recurrent|chunk16|chunk32|chunk64|all] [--quick] [--reps N]\n"
    "                  [--target NAME]\n"
    "  default: flagship, 1-thread scaling, T sweep 512..32768, varlen batch, NPU rows, Dk=Dv=200,\n"
    "           Kimi Linear's KDA (per-channel gate, bf16, f32 state) at T=2048, 8192 with its recurrent form\n"
    "  --shape ROW         one row by name: qwen3-next (the flagship; --t overrides its length),\n"
    "                      qwen3-next-T512, npu-B1-H16-T128-D128x128, generic-D200x200, kimi-linear-T8192, ...\n"
    "  --algo all          every row with auto and each forced formulation, compared\n"
    "  --quick             flagship at T=2048, two NPU rows and kimi-linear-T2048, short timing\n"
    "  --precision MODE    auto (default), fp32, bf16, bf16x3 or bf16x4 for every row\n"
    "  --engine ENGINE     auto (default), vector, amx or amx-emu for every row\n"
    "  --target NAME       dispatch no higher than this SIMD target (avx3, avx2, sse4, scalar, as\n"
    "                      compiled and usable here), the FMA peak included: e.g. AVX2's kernels\n"
    "                      timed on an AVX-512 CPU\n"
    "  --skip-emulated-products  timing builds only: amx-emu rows skip the emulated tile\n"
    "                      products and time the AMX engine's passes around them (results wrong)\n"
    "  --precision all     the flagship (--t T, default 8192) with f16 and with bf16 inputs, and\n"
    "                      Kimi Linear's KDA layer in bf16, in each mode on each engine, and auto:\n"
    "                      time, % of the FP32 FMA and AMX peaks, error of out and final_state\n";

// Written as results are (docs/cli.md, "Output paths"): atomically, to a new or
// regular file or where a symbolic link leads, never to a device or FIFO.
Status WriteJson(const std::string& path, const Json& j) {
  const Status s = WriteFileAtomically(path, j.dump(2) + "\n");
  return s.ok() ? s : Status(s.code(), "--json: " + s.message());
}

// The peaks measured again after the rows. A neighbour busy while the first
// peak was measured lowers it and inflates every %peak; the rows then also
// get %peak against the higher of the two (pct_peak_conservative in the
// JSON), and a note says so when they differ by more than 3%.
void RecheckPeaks(const PeakCache& peaks, std::vector<RowResult>* results) {
  const std::map<int, std::pair<double, double>> again = peaks.Remeasure();
  bool inflated = false;
  for (const auto& [threads, peak] : again) {
    const auto [before, after] = peak;
    std::printf("FMA peak measured again after the rows: %.1f GFLOP/s on %d thread%s (%.1f before them)\n", after,
                threads, threads == 1 ? "" : "s", before);
    inflated |= after > 1.03 * before;
  }
  for (RowResult& r : *results) {
    const auto it = again.find(r.threads);
    if (it == again.end() || r.peak <= 0.0) continue;
    const double after = it->second.second, higher = std::max(r.peak, after);
    r.extra["peak_gflops_after"] = after;
    r.extra["pct_peak_conservative"] = r.pct_peak * r.peak / higher;
    r.extra["pct_peak_best_conservative"] = r.pct_peak_best * r.peak / higher;
  }
  // The matrix unit can be shared with another tenant's thread on the same
  // core: its throughput has been seen to move 2x within seconds, and every
  // AMX ratio of the rows with it (docs/design-notes.md, "Third look").
  for (const auto& [threads, peak] : peaks.RemeasureAmx()) {
    const auto [before, after] = peak;
    std::printf("AMX bf16 peak measured again after the rows: %.1f GFLOP/s on %d thread%s (%.1f before them)\n", after,
                threads, threads == 1 ? "" : "s", before);
    if (std::max(before, after) > 1.10 * std::min(before, after)) {
      std::printf("note: the AMX peak moved by more than 10%% during the rows: the tile rows' times and their ratios "
                  "to the vector rows carry that spread\n");
    }
    for (RowResult& r : *results) {
      if (r.threads == threads && r.amx_peak > 0) r.extra["amx_peak_gflops_after"] = after;
    }
  }
  if (inflated) {
    std::printf("note: the peak rose by more than 3%%: the host was busy while it was first measured, so the %%peak "
                "figures above are inflated; against the higher peak:\n");
    for (const RowResult& r : *results) {
      std::printf("  %-28s %6.1f%% (best %.1f%%)\n", r.spec.name.c_str(), r.extra["pct_peak_conservative"].get<double>(),
                  r.extra["pct_peak_best_conservative"].get<double>());
    }
  }
}

// After the rows: the peaks again, the time taken, the JSON (--json).
int FinishBench(const BenchConfig& cfg, const PeakCache& peaks, Clock::time_point start, const std::string& target,
                double copy_gbps, std::vector<RowResult>* results) {
  RecheckPeaks(peaks, results);
  std::printf("\n%zu rows in %.1f s\n", results->size(), Since(start));
  if (!cfg.json_path.empty()) {
    Json arr = Json::array();
    for (const auto& r : *results) arr.push_back(ToJson(r, target, copy_gbps));
    if (Status s = WriteJson(cfg.json_path, arr); !s.ok()) return ReportError(s);
    std::printf("wrote %s\n", cfg.json_path.c_str());
  }
  return 0;
}

}  // namespace

int BenchMain(int argc, char** argv) {
  BenchConfig cfg;
  bool help = false;
  if (Status s = ParseBenchFlags(argc, argv, &cfg, &help); !s.ok()) return ReportError(s);
  if (help) {
    std::fputs(kBenchUsage, stdout);
    return 0;
  }
  // Before anything dispatches: the peak is measured on the same target.
  if (cfg.target != 0) DispatchNoHigherThan(cfg.target);
  WarnIfBusy("bench");
  const auto start = Clock::now();
  PeakCache peaks(cfg.quick ? 0.1 : 0.25);
  const FmaPeak& peak = peaks.Get(cfg.threads);
  const CopyBandwidth copy = MeasureCopyBandwidth(cfg.threads, cfg.quick ? size_t{64} << 20 : size_t{256} << 20);
  const std::string target = ActiveTarget();
  std::printf("cgdr bench: %s, kernel target %s%s, %d threads, profile: %s\n", CpuDescription().c_str(), target.c_str(),
              cfg.target == 0 ? "" : " (--target)", cfg.threads, DefaultProfile().source.c_str());
  std::printf("measured FP32 FMA peak: %.1f GFLOP/s on %d threads (%.1f per thread, %zu lanes, %s); "
              "memory copy: %.1f GB/s (read+write, %zu MiB)\n",
              peak.gflops, peak.threads, peak.gflops / peak.threads, peak.lanes, peak.target.c_str(),
              copy.gbytes_per_s, copy.bytes >> 20);
  const double amx_peak = peaks.Amx(cfg.threads);
  if (amx_peak > 0) {
    std::printf("measured AMX bf16 peak (TDPBF16PS, operands in tiles): %.1f GFLOP/s on %d threads (%.1f per thread, "
                "%.1fx the FP32 FMA peak)\n",
                amx_peak, cfg.threads, amx_peak / cfg.threads, amx_peak / peak.gflops);
  } else {
    std::printf("AMX: %s\n", AmxHardware().why.c_str());
  }
  if (cfg.skip_emulated_products && SkipEmulatedProducts()) {
    std::printf("TIMING BUILD (--skip-emulated-products): the AMX emulation's tile products are skipped; results "
                "and errors are wrong, times of amx-emu rows are the passes around the products\n");
  }
  std::printf("gflops = 6*Dk*Dv*tokens*Nv / s (algorithmic, SPEC 8), median of the reps; best%% = the fastest rep's "
              "%%peak (the peak is the best of its trials too); rel_err vs FP64 on value head Nv/2; algo with ! = forced\n\n");
  if (cfg.all_precisions) {
    std::vector<RowResult> results;
    if (Status s = PrecisionTable(cfg, peaks, &results); !s.ok()) return ReportError(s);
    return FinishBench(cfg, peaks, start, target, copy.gbytes_per_s, &results);
  }
  PrintHeader();

  const std::vector<RowSpec> rows = SelectRows(cfg);
  std::map<PoolKey, Pool> pools = SizePools(rows);
  std::vector<RowResult> results;
  for (const RowSpec& spec : rows) {
    Case& data = PoolCase(pools[KeyOf(spec)], KeyOf(spec));
    Inputs in;
    Outputs out;
    RowViews(data, spec.lens, &in, &out);
    Problem p;
    Status s = Validate(in, out, data.options(), &p);
    std::unique_ptr<HeadProblem> head;
    if (s.ok()) {
      head = std::make_unique<HeadProblem>(in, p, spec.Nv / 2);
      s = head->Prepare();
    }
    // The scaling row: the flagship on 1 thread, timed in turn with all threads.
    const bool scaling = spec.group == "scaling";
    std::vector<Variant> runs;
    if (scaling) {
      runs = {Variant{cfg.algos[0], 1}, Variant{cfg.algos[0], cfg.threads}};
    } else {
      for (Algo a : cfg.algos) runs.push_back(Variant{a, spec.threads > 0 ? spec.threads : cfg.threads});
    }
    // KDA rows: the recurrent form in turn with the chunked one (issue 33's ratio).
    const bool vs_recurrent = spec.per_channel_gate && !cfg.all_algos && cfg.algos[0] != Algo::kRecurrent;
    if (vs_recurrent) runs.push_back(Variant{Algo::kRecurrent, runs[0].threads});
    std::vector<RowResult> variants;
    if (s.ok()) s = BenchRow(spec, data, runs, cfg, peaks, *head, &variants);
    if (s.ok() && scaling) {
      AddScaling(variants[1], variants[0]);
      variants.pop_back();
    }
    if (s.ok()) {
      for (const RowResult& r : variants) {
        PrintRow(r);
        PrintPhases(r);
      }
    }
    if (s.ok() && spec.group == "flagship") s = CheckValuesOverhead(data, spec, cfg, &variants[0]);
    if (s.ok() && spec.group == "flagship") s = ServingOverhead(data, spec, cfg, &variants[0]);
    if (!s.ok()) return ReportError(Status(s.code(), "bench row " + spec.name + ": " + s.message()));
    if (cfg.all_algos && variants.size() > 1) CompareAlgos(variants);
    if (vs_recurrent) AddRecurrentRatio(variants);
    for (auto& v : variants) results.push_back(std::move(v));
  }

  return FinishBench(cfg, peaks, start, target, copy.gbytes_per_s, &results);
}

}  // namespace cgdr::cli
