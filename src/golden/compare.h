// `cgdr compare`: an NPU result (actual) and the CPU benchmark, each against
// the golden result, by Ascend's precision standard (docs/golden.md): MARE,
// MERE and RMSE on the normal-value domain, error counts on the small-value
// domain, the actual/benchmark ratios and the verdict at levels L0/L1/L2, plus
// where the error concentrates (sequences, heads, chunks).
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cgdr/cgdr.hpp"

namespace cgdr::golden {

// Pass limits of one level: the ratios actual / benchmark (docs/golden.md).
struct LevelLimits {
  const char* name;
  double mare, mere, rmse, small;
};
constexpr int kLevels = 3;
constexpr std::array<LevelLimits, kLevels> kLevelLimits{{
    {"L0", 10.0, 2.0, 2.0, 2.0},
    {"L1", 5.0, 1.5, 1.5, 2.0},
    {"L2", 2.0, 1.2, 1.2, 2.0},
}};
bool ParseLevel(const std::string& s, int* level);  // "L0" | "L1" | "L2" (or 0, 1, 2)

// The standard's per-dtype constants: |golden| below `small_value` is the
// small-value domain, where an element is an error when |x - golden| exceeds
// `small_atol`; ratio denominators are floored at `floor` (the dtype's unit
// roundoff: 2^-8 for bf16).
struct DTypeThresholds {
  double small_value, small_atol, floor;
};
DTypeThresholds ThresholdsFor(DType t);

// Error of one tensor against golden over a set of elements.
struct ErrorStats {
  int64_t count = 0;                    // elements compared
  int64_t normal = 0;                   // |golden| >= small_value
  int64_t small = 0;                    // |golden| < small_value
  int64_t small_errors = 0;             // small ones with |x - golden| > small_atol
  int64_t nonfinite = 0;                // x not finite where golden is (or a different non-finite)
  double sum_rel = 0.0, max_rel = 0.0;  // rel = |x - g| / (|g| + eps), normal domain
  int64_t max_rel_at = -1;
  double sum_sq = 0.0, sum_gg = 0.0;  // (x - g)^2 and g^2, normal domain
  double max_abs = 0.0;               // all finite elements
  int64_t max_abs_at = -1;
  double dot = 0.0, xx = 0.0, gg = 0.0;  // cosine similarity, all finite elements

  double mare() const { return max_rel; }
  double mere() const { return normal ? sum_rel / static_cast<double>(normal) : 0.0; }
  double rmse() const { return normal ? std::sqrt(sum_sq / static_cast<double>(normal)) : 0.0; }
  double golden_rms() const { return normal ? std::sqrt(sum_gg / static_cast<double>(normal)) : 0.0; }
  double cosine() const;
  void Add(double x, double g, int64_t index, double eps, const DTypeThresholds& th);
  void Merge(const ErrorStats& o);
};

// actual / max(benchmark, floor) for the three ratio metrics, and the small-value count ratio.
struct Ratios {
  double mare = 0.0, mere = 0.0, rmse = 0.0, small = 0.0;
};
Ratios RatiosOf(const ErrorStats& actual, const ErrorStats& bench, const DTypeThresholds& th);
// Whether the actual passes `level` (and, when not, why, in a few words).
bool Passes(const ErrorStats& actual, const ErrorStats& bench, const Ratios& r, int level, std::string* why);

// A part of a tensor the breakdown names: a sequence, a head, or one
// (sequence, chunk, head) cell of out / (sequence, head) of final_state.
struct Part {
  int64_t sequence = -1, chunk = -1, head = -1;
  int64_t t0 = 0, t1 = 0;  // tokens (out)
  ErrorStats actual, bench;
  double rmse_ratio = 0.0, mere_ratio = 0.0;
};

struct TensorReport {
  std::string name;  // "out" or "final_state"
  std::vector<int64_t> shape;
  DType dtype = DType::kF32;  // whose thresholds apply (the NPU's output dtype)
  ErrorStats actual, bench;
  Ratios ratios;
  std::array<bool, kLevels> pass{};
  std::array<std::string, kLevels> why;
  std::vector<Part> sequences, heads, cells;  // cells: worst first
};

struct CompareReport {
  int level = 1;
  double eps = 1e-3;
  bool sequences_known = true;
  StateLayout layout = StateLayout::kVK;  // names final_state's axes
  std::vector<TensorReport> tensors;
  bool pass() const;
};

struct CompareOptions {
  int level = 1;             // the level the exit status reflects
  double eps = 1e-3;         // relative error denominators |golden| + eps
  bool dtype_given = false;  // force `dtype`'s thresholds, else the NPU output's
  DType dtype = DType::kBF16;
  std::vector<int64_t> seq_lens;  // empty: one sequence when final_state has B = 1
  StateLayout layout = StateLayout::kVK;
  int chunk = 64;  // token block of the chunk breakdown (the NPU's C)
  int threads = 0;
  int worst = 5;  // parts listed in the text report
  // How errors name the three results (the CLI adds their paths).
  std::string golden_label = "golden", bench_label = "benchmark", actual_label = "actual";
};

// golden, benchmark and actual hold out and (optionally) final_state; every
// tensor the actual holds must be in the other two with the same shape.
Status Compare(const Outputs& golden, const Outputs& bench, const Outputs& actual, const CompareOptions& opt,
               CompareReport* report);

// The report for machines (`--json`, Python) and for people.
nlohmann::json ReportJson(const CompareReport& r);
std::string ReportText(const CompareReport& r, int worst);

}  // namespace cgdr::golden
