// `cgdr bench` (SPEC 8) and `cgdr tune` (the planner's calibration profile).
// Everything here goes through the public API (cgdr::Run with Options.algo /
// Options.threads), so it measures what a caller gets, whichever kernel is in.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <utility>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/peak.h"
#include "cgdr/cgdr.hpp"
#include "cgdr/plan.hpp"
#include "core/cpu_features.h"
#include "core/phase_timers.h"
#include "core/threads.h"
#include "args.h"
#include "commands.h"
#include "core/synthetic.h"
#include "io/file_util.h"
#include "reference/reference.h"

namespace cgdr {
namespace {

using cli::Args;
using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// Other processes on the cores make every number here low and noisy; say so
// up front rather than let a busy machine pass for a slow kernel.
void WarnIfBusy(const char* cmd) {
  std::ifstream f("/proc/loadavg");
  double load = 0.0;
  if (f >> load && load > 0.5) {
    std::printf("note: load average %.2f before %s started: other processes compete for the cores, so timings and "
                "the peak are low and noisy\n", load, cmd);
  }
}

// The thread count Options::threads = 0 resolves to (core/threads.h).
int DefaultThreads() { return ResolveThreadCount(0); }

// ---------------------------------------------------------------- rows

struct RowSpec {
  std::string name, group;  // group: flagship, scaling, sweep, varlen, npu, generic
  int64_t Nk = 16, Nv = 32, Dk = 128, Dv = 128;
  std::vector<int32_t> lens;
  double baseline_ms = 0.0;  // NPU (300I Duo) time for the same shape, 0 if none
  int threads = 0;           // 0: the bench's thread count
};

int64_t TotalTokens(const std::vector<int32_t>& lens) {
  int64_t t = 0;
  for (int32_t l : lens) t += l;
  return t;
}

RowSpec Flagship(int64_t T, const std::string& name, const std::string& group) {
  RowSpec r;
  r.name = name;
  r.group = group;
  r.lens = {static_cast<int32_t>(T)};
  return r;
}

// 16 sequences spread over 1..4096 (both ends included), from raw mt19937
// output (distributions differ between standard libraries), so every run and
// every platform times the same batch.
RowSpec VarlenBatch() {
  RowSpec r = Flagship(0, "qwen3-next-varlen16", "varlen");
  std::mt19937 rng(2024);
  r.lens.clear();
  for (int i = 0; i < 16; ++i) r.lens.push_back(static_cast<int32_t>(1 + rng() % 4096));
  r.lens[3] = 1;
  r.lens[11] = 4096;
  return r;
}

// The 300I Duo NPU measurements of the Ascend kernel: (B, H, T per sequence, Dk, Dv) -> ms.
RowSpec NpuRow(int B, int H, int T, int Dk, int Dv, double ms) {
  RowSpec r;
  r.name = "npu-B" + std::to_string(B) + "-H" + std::to_string(H) + "-T" + std::to_string(T) + "-D" +
           std::to_string(Dk) + "x" + std::to_string(Dv);
  r.group = "npu";
  r.Nk = r.Nv = H;
  r.Dk = Dk;
  r.Dv = Dv;
  r.lens.assign(static_cast<size_t>(B), T);
  r.baseline_ms = ms;
  return r;
}

std::vector<RowSpec> NpuRows() {
  return {NpuRow(1, 8, 64, 64, 64, 1.242),       NpuRow(1, 16, 128, 128, 128, 7.241),
          NpuRow(1, 1, 128, 128, 256, 3.616),    NpuRow(2, 8, 512, 128, 128, 25.145),
          NpuRow(1, 16, 1024, 128, 128, 49.211), NpuRow(1, 16, 2048, 128, 128, 97.188)};
}

RowSpec GenericRow() {
  RowSpec r = Flagship(2048, "generic-D200x200", "generic");
  r.Nk = r.Nv = 16;
  r.Dk = r.Dv = 200;
  return r;
}

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
};

std::vector<RowSpec> SelectRows(const BenchConfig& cfg) {
  const int64_t flag_t = cfg.t_override > 0 ? cfg.t_override : (cfg.quick ? 2048 : 8192);
  std::vector<RowSpec> rows{Flagship(flag_t, "qwen3-next", "flagship")};
  if (cfg.shape == "qwen3-next") return rows;
  const bool scaling = cfg.threads > 1;
  if (scaling) {
    rows.push_back(Flagship(flag_t, "qwen3-next-1thread", "scaling"));
    rows.back().threads = 1;
  }
  if (cfg.quick) {
    const auto npu = NpuRows();
    rows.push_back(npu[1]);
    rows.push_back(npu[4]);
    return rows;
  }
  for (int64_t t : {512, 1024, 2048, 4096, 8192, 16384, 32768}) {
    rows.push_back(Flagship(t, "qwen3-next-T" + std::to_string(t), "sweep"));
  }
  rows.push_back(VarlenBatch());
  for (const auto& r : NpuRows()) rows.push_back(r);
  rows.push_back(GenericRow());
  if (!cfg.shape.empty()) {  // ParseBench checked that the name exists
    std::erase_if(rows, [&](const RowSpec& r) { return r.name != cfg.shape; });
  }
  return rows;
}

// The names --shape accepts: every row of the default run.
std::vector<std::string> RowNames() {
  BenchConfig all;
  all.threads = 2;
  std::vector<std::string> names;
  for (const auto& r : SelectRows(all)) names.push_back(r.name);
  return names;
}

// ---------------------------------------------------------------- data

// Rows with the same heads share one synthetic case big enough for all of
// them (every row is a prefix of its tokens and states): generating 30k
// tokens of flagship inputs takes seconds, so it is done once.
struct PoolKey {
  int64_t Nk, Nv, Dk, Dv;
  auto operator<=>(const PoolKey&) const = default;
};

struct Pool {
  int64_t t_max = 0, b_max = 1;
  std::unique_ptr<Case> data;
};

PoolKey KeyOf(const RowSpec& r) { return {r.Nk, r.Nv, r.Dk, r.Dv}; }

constexpr DType kBenchDType = DType::kF16;  // f16 in/out and state (SPEC 8); g stays f32

std::map<PoolKey, Pool> SizePools(const std::vector<RowSpec>& rows) {
  std::map<PoolKey, Pool> pools;
  for (const auto& r : rows) {
    Pool& p = pools[KeyOf(r)];
    p.t_max = std::max(p.t_max, TotalTokens(r.lens));
    p.b_max = std::max<int64_t>(p.b_max, static_cast<int64_t>(r.lens.size()));
  }
  return pools;
}

Case& PoolCase(Pool& pool, const PoolKey& key) {
  if (!pool.data) {
    CaseSpec s;
    s.Nk = key.Nk;
    s.Nv = key.Nv;
    s.Dk = key.Dk;
    s.Dv = key.Dv;
    s.lens.assign(static_cast<size_t>(pool.b_max), 0);  // b_max states; all tokens in the first
    s.lens[0] = static_cast<int32_t>(pool.t_max);
    s.dtype = kBenchDType;
    s.state_dtype = kBenchDType;
    s.seed = 7;
    pool.data = std::make_unique<Case>(MakeCase(s));
  }
  return *pool.data;
}

// Views of the pool's buffers cut to the row: the first T tokens, the first B
// states, and the row's own sequence lengths (which must outlive the views).
void RowViews(Case& c, const std::vector<int32_t>& lens, Inputs* in, Outputs* out) {
  const int64_t T = TotalTokens(lens), B = static_cast<int64_t>(lens.size());
  *in = c.inputs();
  *out = c.outputs();
  for (TensorView* t : {&in->query, &in->key, &in->value, &in->beta, &in->g, &out->out}) t->shape[0] = T;
  in->initial_state.shape[0] = B;
  out->final_state.shape[0] = B;
  in->seq_lens = TensorView(lens.data(), DType::kI32, {B});
}

// ---------------------------------------------------------------- accuracy

// Rows [outer][count][inner] -> [outer][1][inner] at `index`.
std::vector<uint8_t> SliceHead(const TensorView& t, int64_t outer, int64_t count, int64_t index, int64_t inner) {
  const size_t row = static_cast<size_t>(inner) * DTypeSize(t.dtype);
  std::vector<uint8_t> r(static_cast<size_t>(outer) * row);
  const auto* base = static_cast<const uint8_t*>(t.data);
  for (int64_t o = 0; o < outer; ++o) std::memcpy(r.data() + o * row, base + (o * count + index) * row, row);
  return r;
}

// One value head of a problem as its own problem (Nk = Nv = 1): the FP64
// reference then stores and costs one head, not Nv (1 GB of doubles at T=32k).
class HeadProblem {
 public:
  HeadProblem(const Inputs& in, const Problem& p, int64_t h) : p_(p), h_(h) {
    const int64_t hk = h / (p.Nv / p.Nk);
    q_ = SliceHead(in.query, p.T, p.Nk, hk, p.Dk);
    k_ = SliceHead(in.key, p.T, p.Nk, hk, p.Dk);
    v_ = SliceHead(in.value, p.T, p.Nv, h, p.Dv);
    beta_ = SliceHead(in.beta, p.T, p.Nv, h, 1);
    if (in.g.present()) g_ = SliceHead(in.g, p.T, p.Nv, h, 1);
    if (in.initial_state.present()) state_ = SliceHead(in.initial_state, p.B, p.Nv, h, p.Dk * p.Dv);
    lens_.assign(p.seq_lens.begin(), p.seq_lens.end());
    in_.query = TensorView(q_.data(), in.query.dtype, {p.T, 1, p.Dk});
    in_.key = TensorView(k_.data(), in.key.dtype, {p.T, 1, p.Dk});
    in_.value = TensorView(v_.data(), in.value.dtype, {p.T, 1, p.Dv});
    in_.beta = TensorView(beta_.data(), in.beta.dtype, {p.T, 1});
    if (in.g.present()) in_.g = TensorView(g_.data(), in.g.dtype, {p.T, 1});
    if (in.initial_state.present()) {
      in_.initial_state = TensorView(state_.data(), in.initial_state.dtype,
                                     {p.B, 1, in.initial_state.shape[2], in.initial_state.shape[3]});
    }
    in_.seq_lens = TensorView(lens_.data(), DType::kI32, {p.B});
  }

  // Runs the FP64 reference once; false (with the reason) if the slice does not validate.
  Status Prepare() {
    Outputs o;
    out_.assign(static_cast<size_t>(p_.T * p_.Dv) * DTypeSize(p_.dtype), 0);
    o.out = TensorView(out_.data(), p_.dtype, {p_.T, 1, p_.Dv});
    if (in_.initial_state.present()) {  // the final state is wanted, of the initial state's shape
      const TensorView& s0 = in_.initial_state;
      state_out_.assign(static_cast<size_t>(s0.numel()) * DTypeSize(s0.dtype), 0);
      o.final_state = TensorView(state_out_.data(), s0.dtype, {p_.B, 1, s0.shape[2], s0.shape[3]});
    }
    Options opt = p_.options;
    opt.scale = p_.scale;
    Problem hp;
    Status s = Validate(in_, o, opt, &hp);
    if (!s.ok()) return s;
    ReferenceRun(in_, hp, &ref_);
    rounding_err_ = RoundingError(ref_.out, p_.dtype);
    rounding_err_state_ = RoundingError(ref_.final_state, p_.state_dtype);
    return Status::Ok();
  }

  // ||out[:, h] - ref|| / ||ref|| for the operator's full output tensor.
  double RelErr(const TensorView& full_out) {
    out_ = SliceHead(full_out, p_.T, p_.Nv, h_, p_.Dv);
    return RelativeError(TensorView(out_.data(), p_.dtype, {p_.T, 1, p_.Dv}), ref_.out, 1);
  }
  // The same for final_state (the reference ran with want_final_state).
  double RelErrState(const TensorView& full_state) {
    if (!full_state.present()) return 0.0;
    const int64_t inner = full_state.shape[2] * full_state.shape[3];
    state_out_ = SliceHead(full_state, p_.B, p_.Nv, h_, inner);
    return RelativeError(TensorView(state_out_.data(), full_state.dtype, {p_.B, 1, full_state.shape[2], full_state.shape[3]}),
                         ref_.final_state, 1);
  }
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

// ---------------------------------------------------------------- timing

double Since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

struct Timing {
  double median_s = 0.0;
  // The fastest rep: on a shared machine, the run least disturbed by other
  // tenants; the same statistic as the peak's (best of many trials).
  double best_s = 0.0;
  int reps = 0;
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// One call of a timed set: its own views (the serving variants differ in
// their tensors, not only in their options).
struct Call {
  Inputs in;
  Outputs out;
  Options opt;
};

// One warm-up run of each option (faults in pages, scratch, dispatch), then
// `reps` rounds in which the options run once each, in turn; when reps == 0,
// enough rounds to fill ~min_s per option (at least 3; fewer only for rounds
// that alone take seconds). In turn, so that a slow minute of a shared
// machine falls on every option alike: what they are compared on (--algo
// all, check_values on/off) is then the options, not the minutes.
Status TimeCallsInTurn(const std::vector<Call>& calls, int reps, double min_s, std::vector<Timing>* timings) {
  auto t0 = Clock::now();
  for (const Call& c : calls) {
    if (Status s = Run(c.in, c.out, c.opt); !s.ok()) return s;
  }
  const double round = Since(t0);
  if (reps <= 0) {
    const double budget = min_s * static_cast<double>(calls.size());
    const int min_reps = round > 3.0 ? 1 : round > 1.0 ? 2 : 3;
    reps = std::clamp(static_cast<int>(std::ceil(budget / std::max(round, 1e-6))), min_reps, 200);
  }
  std::vector<std::vector<double>> times(calls.size());
  for (int i = 0; i < reps; ++i) {
    for (size_t k = 0; k < calls.size(); ++k) {
      t0 = Clock::now();
      const Status s = Run(calls[k].in, calls[k].out, calls[k].opt);
      times[k].push_back(Since(t0));
      if (!s.ok()) return s;
    }
  }
  timings->assign(calls.size(), Timing{});
  for (size_t k = 0; k < calls.size(); ++k) {
    (*timings)[k].median_s = Median(times[k]);
    (*timings)[k].best_s = *std::min_element(times[k].begin(), times[k].end());
    (*timings)[k].reps = reps;
  }
  return Status::Ok();
}

Status TimeRunsInTurn(const Inputs& in, const Outputs& out, const std::vector<Options>& opts, int reps, double min_s,
                      std::vector<Timing>* timings) {
  std::vector<Call> calls;
  for (const Options& o : opts) calls.push_back(Call{in, out, o});
  return TimeCallsInTurn(calls, reps, min_s, timings);
}

Status PlanFor(const Inputs& in, const Outputs& out, const Options& opt, Plan* plan) {
  Problem p;
  Status s = Validate(in, out, opt, &p);
  if (!s.ok()) return s;
  return MakePlan(p, DefaultProfile(), plan);
}

std::string PlanAlgoName(int chunk) { return chunk == 1 ? "recurrent" : "chunk" + std::to_string(chunk); }

// Algorithmic FLOPs (SPEC 8): the three state products, 6 Dk Dv per token and value head.
double AlgoFlops(int64_t tokens, int64_t Nv, int64_t Dk, int64_t Dv) {
  return 6.0 * static_cast<double>(Dk) * static_cast<double>(Dv) * static_cast<double>(tokens) * static_cast<double>(Nv);
}

// Measured once per thread count and reused by every row with that count.
class PeakCache {
 public:
  explicit PeakCache(double seconds) : seconds_(seconds) {}
  const FmaPeak& Get(int threads) {
    auto it = peaks_.find(threads);
    if (it == peaks_.end()) it = peaks_.emplace(threads, MeasureFmaPeak(threads, seconds_)).first;
    return it->second;
  }
  // The AMX TDPBF16PS peak (0 where AMX is not usable).
  double Amx(int threads) {
    auto it = amx_.find(threads);
    if (it == amx_.end()) it = amx_.emplace(threads, MeasureAmxPeak(threads, seconds_).gflops).first;
    return it->second;
  }
  // Each peak measured again (after the rows): threads -> {GFLOP/s first, now}.
  std::map<int, std::pair<double, double>> Remeasure() const {
    std::map<int, std::pair<double, double>> again;
    for (const auto& [threads, peak] : peaks_) again[threads] = {peak.gflops, MeasureFmaPeak(threads, seconds_).gflops};
    return again;
  }
  // The same for the AMX peaks measured (where AMX is usable).
  std::map<int, std::pair<double, double>> RemeasureAmx() const {
    std::map<int, std::pair<double, double>> again;
    for (const auto& [threads, gflops] : amx_) {
      if (gflops > 0) again[threads] = {gflops, MeasureAmxPeak(threads, seconds_).gflops};
    }
    return again;
  }

 private:
  double seconds_;
  std::map<int, FmaPeak> peaks_;
  std::map<int, double> amx_;
};

// ---------------------------------------------------------------- bench

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

Json ToJson(const RowResult& r, const std::string& target, double copy_gbps) {
  const RowSpec& s = r.spec;
  Json j = {{"name", s.name},
            {"group", s.group},
            {"B", s.lens.size()},
            {"T", r.T},
            {"Nk", s.Nk},
            {"Nv", s.Nv},
            {"Dk", s.Dk},
            {"Dv", s.Dv},
            {"dtype", DTypeName(kBenchDType)},
            {"state_dtype", DTypeName(kBenchDType)},
            {"threads", r.threads},
            {"algo", PlanAlgoName(r.chunk)},
            {"algo_requested", AlgoName(r.requested)},
            {"precision", PrecisionName(r.precision)},
            {"engine", r.engine},
            {"amx_peak_gflops", r.amx_peak},
            {"pct_amx_peak", r.pct_amx_peak},
            {"rel_err_state", r.rel_err_state},
            {"ref_rounding_err_state", r.rounding_err_state},
            {"chunk", r.chunk},
            {"v_step", r.v_step},
            {"reps", r.reps},
            {"seconds", r.seconds},
            {"tokens_per_s", r.tokens_per_s},
            {"gflops", r.gflops},
            {"peak_gflops", r.peak},
            {"pct_peak", r.pct_peak},
            {"seconds_best", r.seconds_best},
            {"pct_peak_best", r.pct_peak_best},
            {"rel_err", r.rel_err},
            {"ref_rounding_err", r.rounding_err},
            {"mem_copy_gbps", copy_gbps},
            {"target", target}};
  if (s.baseline_ms > 0) {
    j["baseline_ms"] = s.baseline_ms;
    j["speedup"] = s.baseline_ms / (r.seconds * 1e3);
  }
  if (s.group == "varlen") j["seq_lens"] = s.lens;
  if (!r.phases.empty()) {
    Json phases = Json::array();
    for (const PhaseTotal& t : r.phases) phases.push_back({{"phase", PhaseName(t.phase)}, {"calls", t.calls}, {"ticks", t.ticks}});
    j["phases"] = phases;
    j["phase_tick_unit"] = PhaseTickUnit();
  }
  j.update(r.extra);
  return j;
}

void PrintHeader() {
  std::printf("%-26s %3s %6s %-10s %-7s %-7s %5s %3s %9s %8s %8s %6s %6s %5s %9s %9s %8s %7s\n", "name", "B", "T", "algo",
              "prec", "engine", "vstep", "thr", "ms", "ktok/s", "GFLOP/s", "%peak", "best%", "%amx", "err_out",
              "err_state", "npu_ms", "speedup");
}

void PrintRow(const RowResult& r) {
  const std::string algo = r.requested == Algo::kAuto ? PlanAlgoName(r.chunk) : std::string(AlgoName(r.requested)) + "!";
  std::printf("%-26s %3zu %6lld %-10s %-7s %-7s %5lld %3d %9.3f %8.1f %8.1f %6.1f %6.1f %5.1f %9.2e %9.2e",
              r.spec.name.c_str(), r.spec.lens.size(), static_cast<long long>(r.T), algo.c_str(),
              PrecisionName(r.precision), r.engine.c_str(), static_cast<long long>(r.v_step), r.threads,
              r.seconds * 1e3, r.tokens_per_s / 1e3, r.gflops, r.pct_peak, r.pct_peak_best, r.pct_amx_peak, r.rel_err,
              r.rel_err_state);
  if (r.spec.baseline_ms > 0) std::printf(" %8.3f %6.2fx", r.spec.baseline_ms, r.spec.baseline_ms / (r.seconds * 1e3));
  std::printf("\n");
  std::fflush(stdout);
}

// A timing build's ticks per stage (core/phase_timers.h), summed over the
// row's reps and threads: per call, and as a share of all the stages timed.
void PrintPhases(const RowResult& r) {
  if (r.phases.empty()) return;
  uint64_t all = 0;
  for (const PhaseTotal& t : r.phases) all += t.ticks;
  std::printf("  -> phases (%s, every rep and thread; a call is one chunk of one item or head):\n", PhaseTickUnit());
  for (const PhaseTotal& t : r.phases) {
    std::printf("     %-32s %10llu calls %10.0f per call %5.1f%%\n", PhaseName(t.phase),
                static_cast<unsigned long long>(t.calls), static_cast<double>(t.ticks) / static_cast<double>(t.calls),
                100.0 * static_cast<double>(t.ticks) / static_cast<double>(all));
  }
}

// A row's timing fields from its reps: the median (SPEC 8's `seconds`) and
// the fastest rep, each against `peak` (GFLOP/s, measured in the same run).
void FillTiming(const Timing& t, int64_t T, double flops, double peak, double amx_peak, RowResult* r) {
  r->reps = t.reps;
  r->T = T;
  r->seconds = t.median_s;
  r->tokens_per_s = static_cast<double>(T) / t.median_s;
  r->gflops = flops / t.median_s / 1e9;
  r->peak = peak;
  r->pct_peak = 100.0 * r->gflops / peak;
  r->seconds_best = t.best_s;
  r->pct_peak_best = 100.0 * flops / t.best_s / 1e9 / peak;
  r->amx_peak = amx_peak;
  r->pct_amx_peak = amx_peak > 0 ? 100.0 * r->gflops / amx_peak : 0.0;
}

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
  // Stages are told apart per row only where one variant ran.
  const std::vector<PhaseTotal> phases = variants.size() == 1 ? PhaseTotals() : std::vector<PhaseTotal>{};
  const int64_t T = TotalTokens(spec.lens);
  for (size_t k = 0; k < variants.size(); ++k) {
    RowResult r;
    r.spec = spec;
    r.requested = variants[k].algo;
    r.precision = plans[k].precision;
    r.engine = PlanEngineName(plans[k]);
    r.threads = opts[k].threads;
    r.chunk = plans[k].chunk;
    r.v_step = plans[k].v_step;
    r.phases = phases;
    FillTiming(timings[k], T, AlgoFlops(T, spec.Nv, spec.Dk, spec.Dv), peaks.Get(opts[k].threads).gflops,
               peaks.Amx(opts[k].threads), &r);
    // `out` holds the last option's result, and outputs do not depend on the
    // thread count (SPEC 5): only another formulation runs once more for its error.
    if (variants[k].algo != variants.back().algo) {
      if (Status s = Run(in, out, opts[k]); !s.ok()) return s;
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
                     {"--shape", "--t", "--threads", "--json", "--algo", "--reps", "--precision", "--engine"}, {"--quick"});
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
  const std::string prec = a.Get("--precision", "auto");
  if (prec == "all") {
    cfg->all_precisions = true;
  } else if (!ParsePrecision(prec, &cfg->precision)) {
    return Status::Invalid("--precision: expected auto|fp32|bf16|bf16x3|bf16x4|all, got '" + prec + "'");
  }
  const std::string engine = a.Get("--engine", "auto");
  if (!ParseEngine(engine, &cfg->engine)) {
    return Status::Invalid("--engine: expected auto, vector, amx or amx-emu, got '" + engine + "'");
  }
  return Status::Ok();
}

const char* kBenchUsage =
    "usage: cgdr bench [--shape ROW] [--t T] [--threads N] [--json FILE]\n"
    "                  [--algo auto|recurrent|chunk16|chunk32|chunk64|all] [--quick] [--reps N]\n"
    "  default: flagship, 1-thread scaling, T sweep 512..32768, varlen batch, NPU rows, Dk=Dv=200\n"
    "  --shape ROW         one row by name: qwen3-next (the flagship; --t overrides its length),\n"
    "                      qwen3-next-T512, npu-B1-H16-T128-D128x128, generic-D200x200, ...\n"
    "  --algo all          every row with auto and each forced formulation, compared\n"
    "  --quick             flagship at T=2048 and two NPU rows, short timing\n"
    "  --precision MODE    auto (default), fp32, bf16, bf16x3 or bf16x4 for every row\n"
    "  --engine ENGINE     auto (default), vector, amx or amx-emu for every row\n"
    "  --precision all     the flagship (--t T, default 8192) with f16 and with bf16 inputs in\n"
    "                      each mode on each engine, and auto: time, % of the FP32 FMA and AMX\n"
    "                      peaks, error of out and final_state\n";

// Written as results are (README, "Output paths"): atomically, to a new or
// regular file or where a symbolic link leads, never to a device or FIFO.
Status WriteJson(const std::string& path, const Json& j) {
  const Status s = WriteFileAtomically(path, j.dump(2) + "\n");
  return s.ok() ? s : Status(s.code(), "--json: " + s.message());
}

// --precision all: the flagship with f16 and with bf16 inputs, each precision
// mode on each engine that runs here (the vector units; the AMX tiles where
// the CPU has them), then auto; timed in turn with fp32 on the vector units,
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

Status PrecisionTable(const BenchConfig& cfg, PeakCache& peaks, std::vector<RowResult>* results) {
  const int64_t T = cfg.t_override > 0 ? cfg.t_override : (cfg.quick ? 2048 : 8192);
  std::printf("precision modes on each engine, flagship T=%lld (%d threads); errors of value head 16 vs FP64; %%peak of "
              "the FP32 FMA peak, %%amx of the AMX bf16 peak\n",
              static_cast<long long>(T), cfg.threads);
  std::printf("%-6s %-7s %-7s %-10s %9s %8s %6s %5s %7s %10s %10s %10s %10s\n", "dtype", "prec", "engine", "algo", "ms",
              "GFLOP/s", "%peak", "%amx", "vs_fp32", "err_out", "err_state", "round_out", "round_st");
  const std::vector<PrecisionRun> runs = PrecisionRuns();
  for (DType dt : {DType::kF16, DType::kBF16}) {
    CaseSpec cs;
    cs.Nk = 16;
    cs.Nv = 32;
    cs.Dk = cs.Dv = 128;
    cs.lens = {static_cast<int32_t>(T)};
    cs.dtype = dt;
    cs.state_dtype = dt;
    cs.seed = 7;
    Case data = MakeCase(cs);
    Inputs in = data.inputs();
    Outputs out = data.outputs();
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
    const double round_out = RoundingError(ref.out, dt), round_state = RoundingError(ref.final_state, dt);
    const size_t first = results->size();
    int fastest_accurate = -1;
    for (size_t k = 0; k < runs.size(); ++k) {
      if (Status s = Run(in, out, opts[k]); !s.ok()) return s;
      RowResult r;
      r.spec = Flagship(T, std::string("qwen3-next-") + DTypeName(dt) + "-" + PrecisionName(runs[k].precision) + "-" +
                               (runs[k].precision == Precision::kAuto ? "auto" : PlanEngineName(plans[k])),
                        "precision");
      r.precision = plans[k].precision;
      r.engine = PlanEngineName(plans[k]);
      r.requested = opts[k].algo;
      r.threads = opts[k].threads;
      r.chunk = plans[k].chunk;
      r.v_step = plans[k].v_step;
      FillTiming(timings[k], T, AlgoFlops(T, cs.Nv, cs.Dk, cs.Dv), peaks.Get(opts[k].threads).gflops,
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
      std::printf("%-6s %-7s %-7s %-10s %9.3f %8.1f %6.1f %5.1f %6.2fx %10.2e %10.2e %10.2e %10.2e%s\n", DTypeName(dt),
                  is_auto ? ("auto:" + std::string(PrecisionName(r.precision))).c_str() : PrecisionName(r.precision),
                  r.engine.c_str(), algo.c_str(), r.seconds * 1e3, r.gflops, r.pct_peak, r.pct_amx_peak, speedup,
                  r.rel_err, r.rel_err_state, round_out, round_state, accurate ? "" : "  (beyond SPEC 6)");
      std::fflush(stdout);
      r.extra["dtype"] = DTypeName(dt);
      r.extra["state_dtype"] = DTypeName(dt);
      r.extra["speedup_vs_fp32"] = speedup;
      r.extra["meets_spec6"] = accurate;
      r.extra["bf16_hardware"] = Bf16HardwareEnabled() && ActiveTarget() == "AVX3";
      results->push_back(std::move(r));
    }
    RowResult& autorow = (*results)[first + runs.size() - 1];
    if (fastest_accurate >= 0) {
      const RowResult& best = (*results)[first + static_cast<size_t>(fastest_accurate)];
      const double slowdown = autorow.seconds / best.seconds;
      std::printf("  -> %s inputs: fastest within SPEC 6: %s on %s (%.3f ms); auto (%s on %s, %s): %.2fx its time\n",
                  DTypeName(dt), PrecisionName(best.precision), best.engine.c_str(), best.seconds * 1e3,
                  PrecisionName(autorow.precision), autorow.engine.c_str(), PlanAlgoName(autorow.chunk).c_str(),
                  slowdown);
      autorow.extra["fastest_accurate"] = best.spec.name;
      autorow.extra["auto_slowdown"] = slowdown;
    }
  }
  return Status::Ok();
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

}  // namespace

int BenchMain(int argc, char** argv) {
  BenchConfig cfg;
  bool help = false;
  if (Status s = ParseBenchFlags(argc, argv, &cfg, &help); !s.ok()) return cli::ReportError(s);
  if (help) {
    std::fputs(kBenchUsage, stdout);
    return 0;
  }
  WarnIfBusy("bench");
  const auto start = Clock::now();
  PeakCache peaks(cfg.quick ? 0.1 : 0.25);
  const FmaPeak& peak = peaks.Get(cfg.threads);
  const CopyBandwidth copy = MeasureCopyBandwidth(cfg.threads, cfg.quick ? size_t{64} << 20 : size_t{256} << 20);
  const std::string target = ActiveTarget();
  std::printf("cgdr bench: kernel target %s, %d threads, profile: %s\n", target.c_str(), cfg.threads,
              DefaultProfile().source.c_str());
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
  if (EmulatedProductsSkipped()) {
    std::printf("TIMING BUILD (CGDR_SKIP_EMULATED_PRODUCTS): the AMX emulation's tile products are skipped; results "
                "and errors are wrong, times of amx-emu rows are the passes around the products\n");
  }
  std::printf("gflops = 6*Dk*Dv*tokens*Nv / s (algorithmic, SPEC 8), median of the reps; best%% = the fastest rep's "
              "%%peak (the peak is the best of its trials too); rel_err vs FP64 on value head Nv/2; algo with ! = forced\n\n");
  if (cfg.all_precisions) {
    std::vector<RowResult> results;
    if (Status s = PrecisionTable(cfg, peaks, &results); !s.ok()) return cli::ReportError(s);
    RecheckPeaks(peaks, &results);
    std::printf("\n%zu rows in %.1f s\n", results.size(), Since(start));
    if (!cfg.json_path.empty()) {
      Json arr = Json::array();
      for (const auto& r : results) arr.push_back(ToJson(r, target, copy.gbytes_per_s));
      if (Status s = WriteJson(cfg.json_path, arr); !s.ok()) return cli::ReportError(s);
      std::printf("wrote %s\n", cfg.json_path.c_str());
    }
    return 0;
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
    if (!s.ok()) return cli::ReportError(Status(s.code(), "bench row " + spec.name + ": " + s.message()));
    if (cfg.all_algos && variants.size() > 1) CompareAlgos(variants);
    for (auto& v : variants) results.push_back(std::move(v));
  }

  RecheckPeaks(peaks, &results);
  std::printf("\n%zu rows in %.1f s\n", results.size(), Since(start));
  if (!cfg.json_path.empty()) {
    Json arr = Json::array();
    for (const auto& r : results) arr.push_back(ToJson(r, target, copy.gbytes_per_s));
    if (Status s = WriteJson(cfg.json_path, arr); !s.ok()) return cli::ReportError(s);
    std::printf("wrote %s\n", cfg.json_path.c_str());
  }
  return 0;
}

// ================================================================ tune

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

// One head shape under every tuned formulation, timed in turn (TimeRunsInTurn)
// so the fit compares formulations on the same minutes. pts[i] comes in with
// the shape and leaves with formulation i's time; chunks[i] is its C.
Status MeasureShape(int threads, double min_s, TunePoint (&pts)[4], int (&chunks)[4]) {
  CaseSpec s;
  s.Nk = s.Nv = pts[0].Nv;
  s.Dk = pts[0].Dk;
  s.Dv = pts[0].Dv;
  s.lens = {static_cast<int32_t>(pts[0].T)};
  s.dtype = kBenchDType;
  s.state_dtype = kBenchDType;
  Case c = MakeCase(s);
  std::vector<Options> opts;
  for (int i = 0; i < 4; ++i) {
    Options opt = c.options();
    opt.algo = kTuneAlgos[i];
    opt.threads = threads;
    opt.precision = Precision::kFp32;  // the vector engine's formulations
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
  CaseSpec s;
  s.Nk = s.Nv = 2 * threads;
  s.Dk = s.Dv = 128;
  s.lens = {static_cast<int32_t>(T)};
  s.dtype = kBenchDType;
  s.state_dtype = kBenchDType;
  Case c = MakeCase(s);
  std::vector<Options> opts;
  for (Precision prec : {Precision::kFp32, Precision::kBf16, Precision::kBf16x3, Precision::kBf16x4}) {
    Options opt = c.options();
    opt.algo = Algo::kChunk16;
    opt.threads = threads;
    opt.precision = prec;
    opt.engine = Engine::kVector;
    opts.push_back(opt);
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
  CaseSpec s;
  // Two value heads per key head, as the flagship (Qwen3-Next): the K side,
  // a larger share of the work on tiles than on the vector units, serves both.
  s.Nk = 2 * threads;
  s.Nv = 2 * s.Nk;
  s.Dk = s.Dv = 128;
  s.lens = {static_cast<int32_t>(T)};
  s.dtype = kBenchDType;
  s.state_dtype = kBenchDType;
  Case c = MakeCase(s);
  constexpr int kChunks[3] = {32, 64, 128};
  const Precision modes[3] = {Precision::kBf16, Precision::kBf16x3, Precision::kBf16x4};
  std::vector<Options> opts;
  for (Precision prec : modes) {
    for (int chunk : kChunks) {
      Options opt = c.options();
      opt.algo = static_cast<Algo>(chunk);
      opt.threads = threads;
      opt.precision = prec;
      opt.engine = Engine::kAmx;
      opts.push_back(opt);
    }
  }
  std::vector<Timing> t;
  if (Status st = TimeRunsInTurn(c.inputs(), c.outputs(), opts, 0, min_s, &t); !st.ok()) return st;
  const double n = static_cast<double>(T), per_token = 1.0 / (n * static_cast<double>(s.Nv));
  fma_cost[0] = 0.0;
  for (int m = 0; m < 3; ++m) {
    // Normal equations of y = a x + p z, y = units - fixed / n.
    double sxx = 0, sxz = 0, szz = 0, sxy = 0, szy = 0;
    for (int k = 0; k < 3; ++k) {
      const CostTerms terms = ModelTerms(DefaultProfile(), kChunks[k], T, s.Dk, s.Dv, /*tiles=*/true);
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

// Temp file + rename (README, "Output paths"): a reader (profile.cc) sees the
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
  if (!s.ok()) return cli::ReportError(s);
  if (a.Has("--help")) {
    std::fputs(kTuneUsage, stdout);
    return 0;
  }
  // One thread by default: the model's constants are per-core costs, and one
  // thread is not held up by a neighbour process on another core.
  int64_t threads_flag = 1;
  if (s = a.Int("--threads", 1, 4096, 1, &threads_flag); !s.ok()) return cli::ReportError(s);
  const int threads = static_cast<int>(threads_flag);
  if (a.Has("--out") && a.Get("--out").empty()) return cli::ReportError(Status::Invalid("--out: empty file name"));
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
      return cli::ReportError(Status(s.code(), "tune Dk=" + std::to_string(dk) + " Dv=" + std::to_string(dv) + ": " + s.message()));
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
    return cli::ReportError(Status(s.code(), "tune precision modes: " + s.message()));
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
      return cli::ReportError(Status(s.code(), "tune AMX engine: " + s.message()));
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
                        {"threads", threads},
                        {"peak_gflops", peak.gflops},
                        {"measured", measured}};
  if (s = WriteAtomically(out_path, profile.dump(2) + "\n"); !s.ok()) return cli::ReportError(s);
  std::printf("\nwrote %s (cache_budget_bytes %lld)\n", out_path.c_str(),
              static_cast<long long>(profile["cache_budget_bytes"].get<int64_t>()));
  return 0;
}

}  // namespace cgdr
