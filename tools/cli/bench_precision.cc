// `cgdr bench --precision all` (bench.h): the precision modes on each engine,
// their time and their error against FP64.
#include <cstdio>

#include "bench.h"
#include "core/cpu_features.h"

namespace cgdr::cli {
namespace {

// --precision all: the flagship with f16 and with bf16 inputs, and Kimi
// Linear's KDA layer (the per-channel gate, bf16 inputs, f32 state; SPEC
// 10), each precision mode on each engine that runs here (the vector units;
// the AMX tiles where the CPU has them), then auto; timed in turn with fp32
// on the vector units,
// with the normwise error of out and final_state of value head Nv/2 against
// the FP64 reference. The vector engine's bf16 modes run fp32's formulation
// (forced), so those rows compare the products; the tile rows and auto run
// their plan's own pick. The fastest row whose errors meet SPEC 6 (within 2x
// the rounding of the FP64 answer, plus 2e-5) is named, and auto's time
// against it.
struct PrecisionRun {
  Precision precision;
  Engine engine;
  bool fp32_formulation;  // force fp32's chunk size
};

std::vector<PrecisionRun> PrecisionRuns() {
  std::vector<PrecisionRun> runs{{Precision::kFp32, Engine::kVector, false}};
  for (Precision p : {Precision::kBf16, Precision::kBf16x3, Precision::kBf16x4}) runs.push_back({p, Engine::kVector, true});
  if (AmxHardwareEnabled()) {
    for (Precision p : {Precision::kBf16, Precision::kBf16x3, Precision::kBf16x4}) runs.push_back({p, Engine::kAmx, false});
  }
  runs.push_back({Precision::kAuto, Engine::kAuto, false});
  return runs;
}

// The rows of the table, cut from the bench's own data (SizePools, PoolCase):
// the flagship (Qwen3-Next's shape) in f16 and in bf16, and Kimi Linear's
// KDA row (KimiLinearRow: bf16 in and out, f32 state).
std::vector<RowSpec> PrecisionRows(int64_t T) {
  std::vector<RowSpec> rows;
  for (DType dt : {DType::kF16, DType::kBF16}) {
    rows.push_back(Flagship(T, std::string("qwen3-next-") + DTypeName(dt), "precision"));
    rows.back().dtype = rows.back().state_dtype = dt;
  }
  rows.push_back(KimiLinearRow(T));
  rows.back().name = "kimi-linear-bf16";
  rows.back().group = "precision";
  return rows;
}

}  // namespace

Status PrecisionTable(const BenchConfig& cfg, PeakCache& peaks, std::vector<RowResult>* results) {
  const int64_t T = cfg.t_override > 0 ? cfg.t_override : (cfg.quick ? 2048 : 8192);
  std::printf("precision modes on each engine, T=%lld (%d threads); errors of value head 16 vs FP64; %%peak of "
              "the FP32 FMA peak, %%amx of the AMX bf16 peak\n",
              static_cast<long long>(T), cfg.threads);
  std::printf("%-16s %-7s %-7s %-10s %9s %8s %6s %5s %7s %10s %10s %10s %10s\n", "case", "prec", "engine", "algo", "ms",
              "GFLOP/s", "%peak", "%amx", "vs_fp32", "err_out", "err_state", "round_out", "round_st");
  const std::vector<PrecisionRun> runs = PrecisionRuns();
  for (const RowSpec& row : PrecisionRows(T)) {
    const DType dt = row.dtype;
    std::map<PoolKey, Pool> pool = SizePools({row});  // one row's data at a time
    Case& data = PoolCase(pool.begin()->second, KeyOf(row));
    Inputs in;
    Outputs out;
    RowViews(data, row.lens, &in, &out);
    Options base = data.options();
    base.threads = cfg.threads;
    base.precision = Precision::kFp32;
    base.engine = Engine::kVector;
    Problem p;
    if (Status s = Validate(in, out, base, &p); !s.ok()) return s;
    const int64_t h = p.Nv / 2;
    ReferenceResult ref;
    ReferenceRun(in, p, &ref, {h});
    Plan fp32_plan;
    if (Status s = PlanFor(in, out, base, &fp32_plan); !s.ok()) return s;
    std::vector<Options> opts;
    std::vector<Plan> plans(runs.size());
    for (size_t k = 0; k < runs.size(); ++k) {
      Options opt = base;
      opt.precision = runs[k].precision;
      opt.engine = runs[k].engine;
      opt.algo = runs[k].fp32_formulation ? static_cast<Algo>(fp32_plan.chunk) : Algo::kAuto;
      if (Status s = PlanFor(in, out, opt, &plans[k]); !s.ok()) return s;
      opts.push_back(opt);
    }
    std::vector<Timing> timings;
    if (Status s = TimeRunsInTurn(in, out, opts, cfg.reps, cfg.quick ? 0.15 : 0.5, &timings); !s.ok()) return s;
    const double round_out = RoundingError(ref.out, dt), round_state = RoundingError(ref.final_state, row.state_dtype);
    const size_t first = results->size();
    int fastest_accurate = -1;
    for (size_t k = 0; k < runs.size(); ++k) {
      if (Status s = Run(in, out, opts[k]); !s.ok()) return s;
      RowResult r;
      r.spec = row;
      r.spec.name = row.name + "-" + PrecisionName(runs[k].precision) + "-" +
                    (runs[k].precision == Precision::kAuto ? "auto" : PlanEngineName(plans[k]));
      r.precision = plans[k].precision;
      r.engine = PlanEngineName(plans[k]);
      r.requested = opts[k].algo;
      r.threads = opts[k].threads;
      r.chunk = plans[k].chunk;
      r.v_step = plans[k].v_step;
      FillTiming(timings[k], T, AlgoFlops(T, row.Nv, row.Dk, row.Dv), peaks.Get(opts[k].threads).gflops,
                 peaks.Amx(opts[k].threads), &r);
      r.rel_err = RelativeError(out.out, ref.out, p.Nv, {h});
      r.rel_err_state = RelativeError(out.final_state, ref.final_state, p.Nv, {h});
      r.rounding_err = round_out;
      r.rounding_err_state = round_state;
      const double speedup = timings[0].median_s / timings[k].median_s;
      const bool accurate = r.rel_err <= 2.0 * round_out + 2e-5 && r.rel_err_state <= 2.0 * round_state + 2e-5;
      const bool is_auto = runs[k].precision == Precision::kAuto;
      if (accurate && !is_auto && (fastest_accurate < 0 || timings[k].median_s < timings[fastest_accurate].median_s)) {
        fastest_accurate = static_cast<int>(k);
      }
      const std::string algo = PlanAlgoName(plans[k].chunk) + (runs[k].fp32_formulation ? "!" : "");
      std::printf("%-16s %-7s %-7s %-10s %9.3f %8.1f %6.1f %5.1f %6.2fx %10.2e %10.2e %10.2e %10.2e%s\n", row.name.c_str(),
                  is_auto ? ("auto:" + std::string(PrecisionName(r.precision))).c_str() : PrecisionName(r.precision),
                  r.engine.c_str(), algo.c_str(), r.seconds * 1e3, r.gflops, r.pct_peak, r.pct_amx_peak, speedup,
                  r.rel_err, r.rel_err_state, round_out, round_state, accurate ? "" : "  (beyond SPEC 6)");
      std::fflush(stdout);
      r.extra["dtype"] = DTypeName(dt);
      r.extra["state_dtype"] = DTypeName(row.state_dtype);
      r.extra["speedup_vs_fp32"] = speedup;
      r.extra["meets_spec6"] = accurate;
      r.extra["bf16_hardware"] = Bf16HardwareEnabled() && ActiveTarget() == "AVX3";
      results->push_back(std::move(r));
    }
    RowResult& autorow = (*results)[first + runs.size() - 1];
    if (fastest_accurate >= 0) {
      const RowResult& best = (*results)[first + static_cast<size_t>(fastest_accurate)];
      const double slowdown = autorow.seconds / best.seconds;
      std::printf("  -> %s: fastest within SPEC 6: %s on %s (%.3f ms); auto (%s on %s, %s): %.2fx its time\n",
                  row.name.c_str(), PrecisionName(best.precision), best.engine.c_str(), best.seconds * 1e3,
                  PrecisionName(autorow.precision), autorow.engine.c_str(), PlanAlgoName(autorow.chunk).c_str(),
                  slowdown);
      autorow.extra["fastest_accurate"] = best.spec.name;
      autorow.extra["auto_slowdown"] = slowdown;
    }
  }
  return Status::Ok();
}

}  // namespace cgdr::cli
