// Timing of cgdr::Run calls in turn, the plans they run, their algorithmic
// FLOPs and the peaks they are held against (bench.h).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>

#include "bench.h"

namespace cgdr::cli {

void WarnIfBusy(const char* cmd) {
  std::ifstream f("/proc/loadavg");
  double load = 0.0;
  if (f >> load && load > 0.5) {
    std::printf("note: load average %.2f before %s started: other processes compete for the cores, so timings and "
                "the peak are low and noisy\n", load, cmd);
  }
}

double Since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

Status TimeCallsInTurn(const std::vector<Call>& calls, int reps, double min_s, std::vector<Timing>* timings,
                       const CallProgress& progress) {
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
  const int total = reps * static_cast<int>(calls.size());
  std::vector<std::vector<double>> times(calls.size());
  for (int i = 0; i < reps; ++i) {
    for (size_t k = 0; k < calls.size(); ++k) {
      t0 = Clock::now();
      const Status s = Run(calls[k].in, calls[k].out, calls[k].opt);
      times[k].push_back(Since(t0));
      if (!s.ok()) return s;
      if (progress) progress(i * static_cast<int>(calls.size()) + static_cast<int>(k) + 1, total);
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
                      std::vector<Timing>* timings, const CallProgress& progress) {
  std::vector<Call> calls;
  for (const Options& o : opts) calls.push_back(Call{in, out, o});
  return TimeCallsInTurn(calls, reps, min_s, timings, progress);
}

Status PlanFor(const Inputs& in, const Outputs& out, const Options& opt, Plan* plan) {
  Problem p;
  Status s = Validate(in, out, opt, &p);
  if (!s.ok()) return s;
  return MakePlan(p, DefaultProfile(), plan);
}

std::string PlanAlgoName(int chunk) { return chunk == 1 ? "recurrent" : "chunk" + std::to_string(chunk); }

double AlgoFlops(int64_t tokens, int64_t Nv, int64_t Dk, int64_t Dv) {
  return 6.0 * static_cast<double>(Dk) * static_cast<double>(Dv) * static_cast<double>(tokens) * static_cast<double>(Nv);
}

const FmaPeak& PeakCache::Get(int threads) {
  auto it = peaks_.find(threads);
  if (it == peaks_.end()) it = peaks_.emplace(threads, MeasureFmaPeak(threads, seconds_)).first;
  return it->second;
}

double PeakCache::Amx(int threads) {
  auto it = amx_.find(threads);
  if (it == amx_.end()) it = amx_.emplace(threads, MeasureAmxPeak(threads, seconds_).gflops).first;
  return it->second;
}

std::map<int, std::pair<double, double>> PeakCache::Remeasure() const {
  std::map<int, std::pair<double, double>> again;
  for (const auto& [threads, peak] : peaks_) again[threads] = {peak.gflops, MeasureFmaPeak(threads, seconds_).gflops};
  return again;
}

std::map<int, std::pair<double, double>> PeakCache::RemeasureAmx() const {
  std::map<int, std::pair<double, double>> again;
  for (const auto& [threads, gflops] : amx_) {
    if (gflops > 0) again[threads] = {gflops, MeasureAmxPeak(threads, seconds_).gflops};
  }
  return again;
}

}  // namespace cgdr::cli
