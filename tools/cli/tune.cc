// `cgdr tune`: the planner's calibration profile. Times the formulations on a
// few head shapes and fits the cost model's constants (cgdr::ModelTerms),
// the precision modes' and the AMX engine's costs; writes them as JSON that
// the planner reads (src/plan/profile.cc).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "args.h"
#include "bench.h"
#include "commands.h"
#include "core/cpu_features.h"
#include "io/file_util.h"

namespace cgdr::cli {
namespace {

// Per-core working-set budget: half of this core's L2 (the rest is left to
// the streamed inputs and outputs), 1 MiB if the OS does not say.
int64_t CacheBudgetBytes() {
  const int64_t l2 = L2CacheBytes();
  return l2 >= (256 << 10) ? l2 / 2 : int64_t{1} << 20;
}

constexpr Algo kTuneAlgos[4] = {Algo::kRecurrent, Algo::kChunk16, Algo::kChunk32, Algo::kChunk64};

struct TunePoint {
  int64_t Dk = 0, Dv = 0, dk_pad = 0, T = 0, Nv = 0;
  double seconds = 0;
  double units = 0;  // cost per (token, value head) in FMAs at the measured peak
};

// The planner's model (cgdr::ModelTerms) per token, with the two constants
// as unknowns: units = a*x_state + b*x_inchunk + fixed.
CostTerms PerToken(const TunePoint& p, int c) {
  CostTerms t = ModelTerms(DefaultProfile(), c, p.T, p.dk_pad, p.Dv);
  const double n = static_cast<double>(p.T);
  return {t.state / n, t.inchunk / n, t.fixed / n};
}
double XState(const TunePoint& p, int c) { return PerToken(p, c).state; }
double XInchunk(const TunePoint& p, int c) { return PerToken(p, c).inchunk; }
double Fixed(const TunePoint& p, int c) { return PerToken(p, c).fixed; }

// Least squares on relative residuals weighted by each shape's work (Dk*Dv):
// big heads dominate run time, so their misfit costs most. a > 0 and b >= 0
// (what profile.cc accepts).
void FitConstants(const std::vector<TunePoint>& pts, int c, double* a, double* b) {
  double s11 = 0, s12 = 0, s22 = 0, r1 = 0, r2 = 0;
  for (const auto& p : pts) {
    const double w = static_cast<double>(p.Dk * p.Dv) / (p.units * p.units);
    const double x1 = XState(p, c), x2 = XInchunk(p, c), y = p.units - Fixed(p, c);
    s11 += w * x1 * x1;
    s12 += w * x1 * x2;
    s22 += w * x2 * x2;
    r1 += w * x1 * y;
    r2 += w * x2 * y;
  }
  const double det = s11 * s22 - s12 * s12;
  *a = 0.0;
  *b = 0.0;
  if (c != 1 && det > 1e-12 * s11 * s22) {
    *a = (r1 * s22 - r2 * s12) / det;
    *b = (r2 * s11 - r1 * s12) / det;
  }
  if (*b <= 0.0 || *a <= 0.0) {  // one-parameter fit: the in-chunk term is not resolved
    *b = 0.0;
    *a = r1 / s11;
  }
  *a = std::max(*a, 0.01);
}

// A tuning case: one sequence of T tokens, Nk key and Nv value heads of Dk x
// Dv, in the bench's dtype.
Case TuneCase(int64_t Nk, int64_t Nv, int64_t Dk, int64_t Dv, int64_t T) {
  CaseSpec s;
  s.Nk = Nk;
  s.Nv = Nv;
  s.Dk = Dk;
  s.Dv = Dv;
  s.lens = {static_cast<int32_t>(T)};
  s.dtype = kBenchDType;
  s.state_dtype = kBenchDType;
  return MakeCase(s);
}

// The case's options, run in one way.
Options TuneOptions(const Case& c, Algo algo, int threads, Precision prec, Engine engine) {
  Options opt = c.options();
  opt.algo = algo;
  opt.threads = threads;
  opt.precision = prec;
  opt.engine = engine;
  return opt;
}

// One head shape under every tuned formulation, timed in turn (TimeRunsInTurn)
// so the fit compares formulations on the same minutes. pts[i] comes in with
// the shape and leaves with formulation i's time; chunks[i] is its C.
Status MeasureShape(int threads, double min_s, TunePoint (&pts)[4], int (&chunks)[4]) {
  Case c = TuneCase(pts[0].Nv, pts[0].Nv, pts[0].Dk, pts[0].Dv, pts[0].T);
  std::vector<Options> opts;
  for (int i = 0; i < 4; ++i) {
    // fp32: the vector engine's formulations
    const Options opt = TuneOptions(c, kTuneAlgos[i], threads, Precision::kFp32, Engine::kAuto);
    Plan plan;
    if (Status st = PlanFor(c.inputs(), c.outputs(), opt, &plan); !st.ok()) return st;
    pts[i].dk_pad = plan.dk_padded;
    chunks[i] = plan.chunk;
    opts.push_back(opt);
  }
  std::vector<Timing> t;
  if (Status st = TimeRunsInTurn(c.inputs(), c.outputs(), opts, 0, min_s, &t); !st.ok()) return st;
  for (int i = 0; i < 4; ++i) pts[i].seconds = t[i].median_s;
  return Status::Ok();
}

// The chunked products in each precision mode against fp32
// (MachineProfile::precision_cost): the flagship's head shape with C = 16
// forced, the modes timed in turn.
Status MeasurePrecisionCost(int threads, int64_t T, double min_s, double (&cost)[4]) {
  Case c = TuneCase(2 * threads, 2 * threads, 128, 128, T);
  std::vector<Options> opts;
  for (Precision prec : {Precision::kFp32, Precision::kBf16, Precision::kBf16x3, Precision::kBf16x4}) {
    opts.push_back(TuneOptions(c, Algo::kChunk16, threads, prec, Engine::kVector));
  }
  std::vector<Timing> t;
  if (Status st = TimeRunsInTurn(c.inputs(), c.outputs(), opts, 0, min_s, &t); !st.ok()) return st;
  for (int i = 0; i < 4; ++i) cost[i] = t[i].median_s / t[0].median_s;
  return Status::Ok();
}

// The AMX engine's constants (MachineProfile::amx_fma_cost, amx_state_pass_cost):
// each bf16 mode at C = 32, 64 and 128 on the flagship's head shape, in FMA
// units at the measured FP32 peak per token and value head, fitted by least
// squares to units = a * (state + inchunk) / n + (fixed + p * chunk_passes) / n
// (cgdr::ModelCost with tiles), a and p per mode.
Status MeasureAmxCost(int threads, int64_t T, double min_s, double fma_per_s, double (&fma_cost)[4],
                      double (&state_pass)[4]) {
  // Two value heads per key head, as the flagship (Qwen3-Next): the K side,
  // a larger share of the work on tiles than on the vector units, serves both.
  const int64_t Nk = 2 * threads, Nv = 2 * Nk, D = 128;
  Case c = TuneCase(Nk, Nv, D, D, T);
  constexpr int kChunks[3] = {32, 64, 128};
  const Precision modes[3] = {Precision::kBf16, Precision::kBf16x3, Precision::kBf16x4};
  std::vector<Options> opts;
  for (Precision prec : modes) {
    for (int chunk : kChunks) opts.push_back(TuneOptions(c, static_cast<Algo>(chunk), threads, prec, Engine::kAmx));
  }
  std::vector<Timing> t;
  if (Status st = TimeRunsInTurn(c.inputs(), c.outputs(), opts, 0, min_s, &t); !st.ok()) return st;
  const double n = static_cast<double>(T), per_token = 1.0 / (n * static_cast<double>(Nv));
  fma_cost[0] = 0.0;
  for (int m = 0; m < 3; ++m) {
    // Normal equations of y = a x + p z, y = units - fixed / n.
    double sxx = 0, sxz = 0, szz = 0, sxy = 0, szy = 0;
    for (int k = 0; k < 3; ++k) {
      const CostTerms terms = ModelTerms(DefaultProfile(), kChunks[k], T, D, D, /*tiles=*/true);
      const double x = (terms.state + terms.inchunk) / n, z = terms.chunk_passes / n;
      const double y = t[m * 3 + k].median_s * fma_per_s * per_token - terms.fixed / n;
      std::printf("%-7s chunk%-3d %10.3f ms %10.0f units\n", PrecisionName(modes[m]), kChunks[k], t[m * 3 + k].median_s * 1e3,
                  t[m * 3 + k].median_s * fma_per_s * per_token);
      sxx += x * x; sxz += x * z; szz += z * z; sxy += x * y; szy += z * y;
    }
    const double det = sxx * szz - sxz * sxz;
    double a = det > 0 ? (sxy * szz - szy * sxz) / det : sxy / sxx;
    double p = det > 0 ? (szy * sxx - sxy * sxz) / det : 0.0;
    if (p < 0 || a <= 0) {  // the per-chunk term not resolved: one parameter
      p = 0.0;
      a = sxy / sxx;
    }
    fma_cost[static_cast<int>(modes[m])] = std::max(a, 1e-3);
    state_pass[static_cast<int>(modes[m])] = p;
  }
  return Status::Ok();
}

std::string DefaultProfilePath() {
  const char* home = std::getenv("HOME");
  return std::string(home ? home : ".") + "/.cache/cgdr/profile.json";
}

// Temp file + rename (docs/cli.md, "Output paths"): a reader (profile.cc) sees the
// old profile or the new one, never half of one.
Status WriteAtomically(const std::string& path, const std::string& text) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path target(path);
  if (target.has_parent_path()) fs::create_directories(target.parent_path(), ec);
  if (ec) return Status::Invalid("--out: cannot create directory '" + target.parent_path().string() + "': " + ec.message());
  const Status s = WriteFileAtomically(path, text);
  return s.ok() ? s : Status(s.code(), "--out: " + s.message());
}

const char* kTuneUsage =
    "usage: cgdr tune [--out FILE] [--threads N (default 1)] [--quick]\n"
    "  times recurrent/chunk16/chunk32/chunk64 on a few head shapes and fits the planner's\n"
    "  cost constants, chunk16 in each precision mode against fp32, and where the CPU has AMX\n"
    "  the AMX engine's constants (each bf16 mode at C = 32, 64, 128); writes them to FILE\n"
    "  (default $HOME/.cache/cgdr/profile.json)\n";

}  // namespace

int TuneMain(int argc, char** argv) {
  Args a;
  Status s = a.Parse("tune", argc, argv, {"--out", "--threads"}, {"--quick"});
  if (!s.ok()) return ReportError(s);
  if (a.Has("--help")) {
    std::fputs(kTuneUsage, stdout);
    return 0;
  }
  // One thread by default: the model's constants are per-core costs, and one
  // thread is not held up by a neighbour process on another core.
  int64_t threads_flag = 1;
  if (s = a.Int("--threads", 1, 4096, 1, &threads_flag); !s.ok()) return ReportError(s);
  const int threads = static_cast<int>(threads_flag);
  if (a.Has("--out") && a.Get("--out").empty()) return ReportError(Status::Invalid("--out: empty file name"));
  const std::string out_path = a.Get("--out", DefaultProfilePath());
  const bool quick = a.Has("--quick");

  WarnIfBusy("tune");
  const FmaPeak peak = MeasureFmaPeak(threads, quick ? 0.1 : 0.25);
  const double fma_per_s = peak.gflops * 1e9 / 2.0;
  std::printf("cgdr tune: kernel target %s, %d threads, FMA peak %.1f GFLOP/s\n", ActiveTarget().c_str(), threads,
              peak.gflops);
  std::printf("cost unit: one FMA at peak, per token and value head (model: cgdr::ModelTerms, a*state + b*inchunk + fixed)\n\n");
  // Shapes that separate the D^2 state term from the D*C in-chunk term; 2 heads
  // per thread so the work splits evenly without V tiling.
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{64, 64}, {64, 128}, {128, 64}, {128, 128}};
  const int64_t T = quick ? 512 : 4096;
  Json measured = Json::array();
  double state_cost[4], inchunk_cost[4];
  std::vector<std::vector<TunePoint>> all(4);
  std::printf("%-10s %4s %4s %10s %10s %10s %7s\n", "algo", "Dk", "Dv", "ms", "units", "model", "err%");
  int chunks[4] = {1, 1, 1, 1};
  for (const auto& [dk, dv] : shapes) {
    TunePoint pts[4];
    for (TunePoint& pt : pts) {
      pt.Dk = dk;
      pt.Dv = dv;
      pt.T = T;
      pt.Nv = 2 * threads;
    }
    if (s = MeasureShape(threads, quick ? 0.05 : 0.25, pts, chunks); !s.ok()) {
      return ReportError(Status(s.code(), "tune Dk=" + std::to_string(dk) + " Dv=" + std::to_string(dv) + ": " + s.message()));
    }
    for (int i = 0; i < 4; ++i) {
      pts[i].units = pts[i].seconds * fma_per_s / static_cast<double>(pts[i].T * pts[i].Nv);
      all[i].push_back(pts[i]);
    }
  }
  for (int i = 0; i < 4; ++i) {
    const int chunk = chunks[i];
    FitConstants(all[i], chunk, &state_cost[i], &inchunk_cost[i]);
    for (const auto& pt : all[i]) {
      const double model = state_cost[i] * XState(pt, chunk) + inchunk_cost[i] * XInchunk(pt, chunk) + Fixed(pt, chunk);
      std::printf("%-10s %4lld %4lld %10.3f %10.0f %10.0f %6.1f%%\n", AlgoName(kTuneAlgos[i]),
                  static_cast<long long>(pt.Dk), static_cast<long long>(pt.Dv), pt.seconds * 1e3, pt.units, model,
                  100.0 * (model - pt.units) / pt.units);
      measured.push_back({{"algo", AlgoName(kTuneAlgos[i])}, {"Dk", pt.Dk}, {"Dv", pt.Dv}, {"T", pt.T},
                          {"Nv", pt.Nv}, {"seconds", pt.seconds}, {"units", pt.units}});
    }
    std::printf("%-10s fit: state_fma_cost %.3f, inchunk_fma_cost %.3f\n", AlgoName(kTuneAlgos[i]), state_cost[i],
                inchunk_cost[i]);
  }
  inchunk_cost[0] = 0.0;  // the recurrence has no in-chunk products

  // Which formulation the fitted model would pick per shape, against the measurement.
  int misranked = 0;
  for (size_t k = 0; k < shapes.size(); ++k) {
    int best_meas = 0, best_model = 0;
    double best_model_cost = 0;
    for (int i = 0; i < 4; ++i) {
      const TunePoint& pt = all[i][k];
      const int c = static_cast<int>(kTuneAlgos[i]);
      const double m = state_cost[i] * XState(pt, c) + inchunk_cost[i] * XInchunk(pt, c) + Fixed(pt, c);
      if (pt.seconds < all[best_meas][k].seconds) best_meas = i;
      if (i == 0 || m < best_model_cost) { best_model_cost = m; best_model = i; }
    }
    misranked += best_meas != best_model;
    std::printf("Dk=%lld Dv=%lld: fastest measured %s, model picks %s\n", static_cast<long long>(shapes[k].first),
                static_cast<long long>(shapes[k].second), AlgoName(kTuneAlgos[best_meas]), AlgoName(kTuneAlgos[best_model]));
  }

  if (misranked > 0) {
    std::printf("note: the fitted model picks a slower formulation on %d of %zu shapes: the kernel's cost is not "
                "linear in these terms there (e.g. a state tile outgrowing L1); see err%% above\n",
                misranked, shapes.size());
  }

  double precision_cost[4];
  if (s = MeasurePrecisionCost(threads, T, quick ? 0.05 : 0.25, precision_cost); !s.ok()) {
    return ReportError(Status(s.code(), "tune precision modes: " + s.message()));
  }
  std::printf("\nchunk16 products against fp32 (Dk=Dv=128): bf16 %.2fx, bf16x3 %.2fx, bf16x4 %.2fx the time "
              "(precision_cost; C = 1 keeps FP32 products)\n",
              precision_cost[1], precision_cost[2], precision_cost[3]);
  const MachineProfile defaults;
  double amx_cost[4] = {0, defaults.amx_fma_cost[1], defaults.amx_fma_cost[2], defaults.amx_fma_cost[3]};
  double amx_state_pass[4] = {0, defaults.amx_state_pass_cost[1], defaults.amx_state_pass_cost[2],
                              defaults.amx_state_pass_cost[3]};
  if (AmxHardwareEnabled()) {
    std::printf("\nthe AMX engine (Dk=Dv=128):\n");
    if (s = MeasureAmxCost(threads, T, quick ? 0.05 : 0.25, fma_per_s, amx_cost, amx_state_pass); !s.ok()) {
      return ReportError(Status(s.code(), "tune AMX engine: " + s.message()));
    }
    std::printf("AMX fit: amx_fma_cost bf16 %.3f, bf16x3 %.3f, bf16x4 %.3f; amx_state_pass_cost bf16 %.1f, bf16x3 %.1f, "
                "bf16x4 %.1f\n",
                amx_cost[1], amx_cost[2], amx_cost[3], amx_state_pass[1], amx_state_pass[2], amx_state_pass[3]);
  } else {
    std::printf("\nAMX: %s (amx_fma_cost left at the built-in defaults)\n", AmxHardware().why.c_str());
  }

  const Json profile = {{"cache_budget_bytes", CacheBudgetBytes()},
                        {"state_fma_cost", {state_cost[0], state_cost[1], state_cost[2], state_cost[3]}},
                        {"inchunk_fma_cost", {inchunk_cost[0], inchunk_cost[1], inchunk_cost[2], inchunk_cost[3]}},
                        {"precision_cost", {1.0, precision_cost[1], precision_cost[2], precision_cost[3]}},
                        {"amx_fma_cost", {0.0, amx_cost[1], amx_cost[2], amx_cost[3]}},
                        {"amx_state_pass_cost", {0.0, amx_state_pass[1], amx_state_pass[2], amx_state_pass[3]}},
                        {"amx_measured", AmxHardwareEnabled()},
                        {"created_by", "cgdr tune"},
                        {"target", ActiveTarget()},
                        {"cpu", CpuDescription()},  // the planner ignores the file on another CPU
                        {"threads", threads},
                        {"peak_gflops", peak.gflops},
                        {"measured", measured}};
  if (s = WriteAtomically(out_path, profile.dump(2) + "\n"); !s.ok()) return ReportError(s);
  std::printf("\nwrote %s (cache_budget_bytes %lld)\n", out_path.c_str(),
              static_cast<long long>(profile["cache_budget_bytes"].get<int64_t>()));
  return 0;
}

}  // namespace cgdr::cli
