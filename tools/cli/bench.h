// What `cgdr bench` (bench.cc, bench_rows.cc, bench_precision.cc), `cgdr
// tune` (tune.cc) and `cgdr demo` (demo.cc) share: timing calls in turn, the
// algorithmic FLOP count, the peaks measured in the same run (bench_timing.cc),
// and the bench's rows, their results and their table and JSON (bench_rows.cc).
// Everything goes through the public API (cgdr::Run with Options.algo /
// Options.threads), so it measures what a caller gets, whichever kernel is in.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/peak.h"
#include "cgdr/cgdr.hpp"
#include "cgdr/plan.hpp"
#include "core/phase_timers.h"
#include "core/synthetic.h"
#include "reference/reference.h"

namespace cgdr::cli {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr DType kBenchDType = DType::kF16;  // f16 in/out and state (SPEC 8); g stays f32

// ---------------------------------------------------------------- timing (bench_timing.cc)

// Other processes on the cores make every number here low and noisy; say so
// up front rather than let a busy machine pass for a slow kernel.
void WarnIfBusy(const char* cmd);

double Since(Clock::time_point t0);

struct Timing {
  double median_s = 0.0;
  // The fastest rep: on a shared machine, the run least disturbed by other
  // tenants; the same statistic as the peak's (best of many trials).
  double best_s = 0.0;
  int reps = 0;
};

// One call of a timed set: its own views (the serving variants differ in
// their tensors, not only in their options).
struct Call {
  Inputs in;
  Outputs out;
  Options opt;
};

// Told after each timed call (not the warm-ups): `done` of `total`.
using CallProgress = std::function<void(int done, int total)>;

// One warm-up run of each option (faults in pages, scratch, dispatch), then
// `reps` rounds in which the options run once each, in turn; when reps == 0,
// enough rounds to fill ~min_s per option (at least 3; fewer only for rounds
// that alone take seconds). In turn, so that a slow minute of a shared
// machine falls on every option alike: what they are compared on (--algo
// all, check_values on/off) is then the options, not the minutes.
Status TimeCallsInTurn(const std::vector<Call>& calls, int reps, double min_s, std::vector<Timing>* timings,
                       const CallProgress& progress = {});
Status TimeRunsInTurn(const Inputs& in, const Outputs& out, const std::vector<Options>& opts, int reps, double min_s,
                      std::vector<Timing>* timings, const CallProgress& progress = {});

// The plan cgdr::Run makes for this call.
Status PlanFor(const Inputs& in, const Outputs& out, const Options& opt, Plan* plan);
std::string PlanAlgoName(int chunk);

// Algorithmic FLOPs (SPEC 8): the three state products, 6 Dk Dv per token and value head.
double AlgoFlops(int64_t tokens, int64_t Nv, int64_t Dk, int64_t Dv);

// Measured once per thread count and reused by every row with that count.
class PeakCache {
 public:
  explicit PeakCache(double seconds) : seconds_(seconds) {}
  const FmaPeak& Get(int threads);
  // The AMX TDPBF16PS peak (0 where AMX is not usable).
  double Amx(int threads);
  // Each peak measured again (after the rows): threads -> {GFLOP/s first, now}.
  std::map<int, std::pair<double, double>> Remeasure() const;
  // The same for the AMX peaks measured (where AMX is usable).
  std::map<int, std::pair<double, double>> RemeasureAmx() const;

 private:
  double seconds_;
  std::map<int, FmaPeak> peaks_;
  std::map<int, double> amx_;
};

// ---------------------------------------------------------------- rows (bench_rows.cc)

struct RowSpec {
  std::string name, group;  // group: flagship, scaling, sweep, varlen, npu, generic
  int64_t Nk = 16, Nv = 32, Dk = 128, Dv = 128;
  std::vector<int32_t> lens;
  double baseline_ms = 0.0;  // NPU (300I Duo) time for the same shape, 0 if none
  int threads = 0;           // 0: the bench's thread count
  // KDA (docs/SPEC.md 10): g [T, Nv, Dk], one log-decay per key channel; its
  // rows are Kimi Linear's (bf16 in and out, f32 state) and time the
  // recurrent form in turn with the chunked one.
  bool per_channel_gate = false;
  DType dtype = kBenchDType;        // query, key, value, beta, out
  DType state_dtype = kBenchDType;  // initial_state, final_state
};

int64_t TotalTokens(const std::vector<int32_t>& lens);
RowSpec Flagship(int64_t T, const std::string& name, const std::string& group);
// Kimi Linear's KDA layer at T tokens (bench_rows.cc): the rows kimi-linear-T*.
RowSpec KimiLinearRow(int64_t T);

struct BenchConfig {
  std::string shape;  // --shape ROW: that row alone ("qwen3-next": the flagship, --t applies)
  bool quick = false;
  int64_t t_override = 0;
  int threads = 0;
  int reps = 0;  // 0: by time
  std::string json_path;
  std::vector<Algo> algos{Algo::kAuto};
  bool all_algos = false;
  Precision precision = Precision::kAuto;  // --precision MODE: every row in that mode
  Engine engine = Engine::kAuto;           // --engine: every row on that engine
  bool all_precisions = false;             // --precision all: the precision table instead
  bool skip_emulated_products = false;     // timing builds: amx-emu rows skip the emulated products
  int64_t target = 0;  // --target NAME: dispatch no higher than that target (Highway's bit; 0: the best usable)
};

std::vector<RowSpec> SelectRows(const BenchConfig& cfg);
// The names --shape accepts: every row of the default run.
std::vector<std::string> RowNames();

// Rows with the same heads share one synthetic case big enough for all of
// them (every row is a prefix of its tokens and states): generating 30k
// tokens of flagship inputs takes seconds, so it is done once.
struct PoolKey {
  int64_t Nk, Nv, Dk, Dv;
  bool per_channel_gate;
  DType dtype, state_dtype;
  auto operator<=>(const PoolKey&) const = default;
};

struct Pool {
  int64_t t_max = 0, b_max = 1;
  std::unique_ptr<Case> data;
};

PoolKey KeyOf(const RowSpec& r);
std::map<PoolKey, Pool> SizePools(const std::vector<RowSpec>& rows);
Case& PoolCase(Pool& pool, const PoolKey& key);
// Views of the pool's buffers cut to the row: the first T tokens, the first B
// states, and the row's own sequence lengths (which must outlive the views).
void RowViews(Case& c, const std::vector<int32_t>& lens, Inputs* in, Outputs* out);

// One value head of a problem as its own problem (Nk = Nv = 1): the FP64
// reference then stores and costs one head, not Nv (1 GB of doubles at T=32k).
class HeadProblem {
 public:
  HeadProblem(const Inputs& in, const Problem& p, int64_t h);
  // Runs the FP64 reference once; false (with the reason) if the slice does not validate.
  Status Prepare();
  // ||out[:, h] - ref|| / ||ref|| for the operator's full output tensor.
  double RelErr(const TensorView& full_out);
  // The same for final_state (the reference ran with want_final_state).
  double RelErrState(const TensorView& full_state);
  double rounding_err() const { return rounding_err_; }  // of the FP64 answer stored in the dtype (SPEC 6)
  double rounding_err_state() const { return rounding_err_state_; }

 private:
  Problem p_;
  int64_t h_;
  std::vector<uint8_t> q_, k_, v_, beta_, g_, state_, out_, state_out_;
  std::vector<int32_t> lens_;
  Inputs in_;
  ReferenceResult ref_;
  double rounding_err_ = 0.0, rounding_err_state_ = 0.0;
};

struct RowResult {
  RowSpec spec;
  Algo requested = Algo::kAuto;
  Precision precision = Precision::kFp32;  // the plan's (resolved)
  std::string engine;                      // the plan's (PlanEngineName)
  int threads = 0, chunk = 0, reps = 0;
  int64_t v_step = 0, T = 0;
  double seconds = 0, tokens_per_s = 0, gflops = 0, peak = 0, pct_peak = 0, rel_err = 0, rounding_err = 0;
  double amx_peak = 0, pct_amx_peak = 0;           // against the AMX bf16 peak (0: no AMX)
  double rel_err_state = 0, rounding_err_state = 0;  // final_state of the sampled head
  double seconds_best = 0, pct_peak_best = 0;  // fastest rep, against the same best-of-trials peak
  Json extra = Json::object();  // speedup, comparison and scaling fields
  std::vector<PhaseTotal> phases;  // a timing build's (CGDR_PHASE_TIMERS) ticks per stage over the row's reps
};

Json ToJson(const RowResult& r, const std::string& target, double copy_gbps);
void PrintHeader();
void PrintRow(const RowResult& r);
// A timing build's ticks per stage (core/phase_timers.h), summed over the
// row's reps and threads: per call, and as a share of all the stages timed.
void PrintPhases(const RowResult& r);
// A row's timing fields from its reps: the median (SPEC 8's `seconds`) and
// the fastest rep, each against `peak` (GFLOP/s, measured in the same run).
void FillTiming(const Timing& t, int64_t T, double flops, double peak, double amx_peak, RowResult* r);

// ---------------------------------------------------------------- --precision all (bench_precision.cc)

// The flagship with f16 and with bf16 inputs in each precision mode on each
// engine, and auto: the table, one result per line.
Status PrecisionTable(const BenchConfig& cfg, PeakCache& peaks, std::vector<RowResult>* results);

}  // namespace cgdr::cli
