#include "golden/compare.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <sstream>

#include "core/dtype.h"
#include "core/strcat.h"
#include "core/threads.h"

namespace cgdr::golden {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr int kJsonCells = 20;  // worst cells kept in the JSON report

// a / max(b, floor), with 0 / 0 = 0.
double Ratio(double a, double b, double floor) {
  const double d = std::max(b, floor);
  if (a == 0.0) return 0.0;
  return d > 0.0 ? a / d : kInf;
}

bool SameNonFinite(double x, double g) {
  if (std::isnan(g)) return std::isnan(x);
  return x == g;  // both the same infinity
}

// The three tensors of one name and where their elements are.
struct Triple {
  const char* name;
  TensorView golden, bench, actual;
};

// One unit of work: `rows` rows of `width` elements, `stride` elements apart,
// the first at flat element index `base`.
struct Block {
  int64_t base = 0, rows = 0, stride = 0, width = 0;
};

void Accumulate(const Triple& tr, const Block& b, double eps, const DTypeThresholds& th, Part* part,
                std::vector<float>* scratch) {
  scratch->resize(static_cast<size_t>(3 * b.width));
  float* g = scratch->data();
  float* xb = g + b.width;
  float* xa = xb + b.width;
  for (int64_t r = 0; r < b.rows; ++r) {
    const int64_t off = b.base + r * b.stride;
    LoadRowAsF32(tr.golden.data, tr.golden.dtype, off, b.width, g);
    LoadRowAsF32(tr.bench.data, tr.bench.dtype, off, b.width, xb);
    LoadRowAsF32(tr.actual.data, tr.actual.dtype, off, b.width, xa);
    for (int64_t j = 0; j < b.width; ++j) {
      part->actual.Add(xa[j], g[j], off + j, eps, th);
      part->bench.Add(xb[j], g[j], off + j, eps, th);
    }
  }
}

// A part with more non-finite values than the benchmark's ranks worst of all.
void FinishPart(const DTypeThresholds& th, Part* p) {
  const bool nonfinite = p->actual.nonfinite > p->bench.nonfinite;
  p->rmse_ratio = nonfinite ? kInf : Ratio(p->actual.rmse(), p->bench.rmse(), th.floor * p->bench.golden_rms());
  p->mere_ratio = nonfinite ? kInf : Ratio(p->actual.mere(), p->bench.mere(), th.floor);
}

// JSON has no infinity or NaN: those become the strings "inf" and "nan".
nlohmann::json Number(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  return x;
}

// Parts merged by `key` (sequence or head) in index order.
std::vector<Part> Group(const std::vector<Part>& cells, int64_t n, bool by_sequence, const DTypeThresholds& th) {
  std::vector<Part> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) (by_sequence ? out[i].sequence : out[i].head) = i;
  for (const Part& c : cells) {
    Part& p = out[static_cast<size_t>(by_sequence ? c.sequence : c.head)];
    if (by_sequence && p.actual.count == 0) p.t0 = c.t0;
    if (by_sequence) p.t1 = std::max(p.t1, c.t1);
    p.actual.Merge(c.actual);
    p.bench.Merge(c.bench);
  }
  for (Part& p : out) FinishPart(th, &p);
  return out;
}

// The thresholds of the NPU's output dtype: forced, else the lower precision of actual and benchmark.
DType ThresholdDType(const Triple& tr, const CompareOptions& opt) {
  if (opt.dtype_given) return opt.dtype;
  for (DType t : {DType::kBF16, DType::kF16}) {
    if (tr.actual.dtype == t || tr.bench.dtype == t) return t;
  }
  return DType::kF32;
}

Status CheckTriple(const Triple& tr, int rank, const CompareOptions& opt) {
  const std::pair<const std::string*, const TensorView*> others[] = {{&opt.golden_label, &tr.golden},
                                                                     {&opt.bench_label, &tr.bench}};
  for (const auto& [who, v] : others) {
    if (!v->present()) return Status::Invalid(Cat(*who, ": has no '", tr.name, "', which the actual holds"));
    if (v->ShapeString() != tr.actual.ShapeString()) {
      return Status::Invalid(Cat(*who, ": '", tr.name, "' has shape ", v->ShapeString(), ", ", opt.actual_label,
                                 " has ", tr.actual.ShapeString()));
    }
  }
  if (tr.actual.rank != rank) {
    return Status::Invalid(Cat(opt.actual_label, ": '", tr.name, "' has rank ", tr.actual.rank, ", expected ", rank,
                               rank == 3 ? " ([T, Nv, Dv])" : " ([B, Nv, Dv, Dk] or [B, Nv, Dk, Dv])"));
  }
  for (const TensorView* v : {&tr.golden, &tr.bench, &tr.actual}) {
    if (v->dtype == DType::kI32) return Status::Invalid(Cat("'", tr.name, "': expected a float dtype, got i32"));
  }
  return Status::Ok();
}

// Runs the cells (in parallel; each cell on one thread, so the sums do not
// depend on the thread count), then the totals and groupings in index order.
void Evaluate(const Triple& tr, std::vector<Part> cells, const std::vector<Block>& blocks, int64_t n_seq,
              int64_t n_heads, const CompareOptions& opt, TensorReport* rep) {
  rep->name = tr.name;
  rep->shape.assign(tr.actual.shape.begin(), tr.actual.shape.begin() + tr.actual.rank);
  rep->dtype = ThresholdDType(tr, opt);
  const DTypeThresholds th = ThresholdsFor(rep->dtype);
  const int64_t n = static_cast<int64_t>(cells.size());
#pragma omp parallel num_threads(ResolveThreadCount(opt.threads))
  {
    std::vector<float> scratch;
#pragma omp for schedule(dynamic, 16)
    for (int64_t i = 0; i < n; ++i) {
      Accumulate(tr, blocks[i], opt.eps, th, &cells[i], &scratch);
      FinishPart(th, &cells[i]);
    }
  }
  for (const Part& c : cells) {
    rep->actual.Merge(c.actual);
    rep->bench.Merge(c.bench);
  }
  rep->ratios = RatiosOf(rep->actual, rep->bench, th);
  for (int l = 0; l < kLevels; ++l) rep->pass[l] = Passes(rep->actual, rep->bench, rep->ratios, l, &rep->why[l]);
  rep->sequences = Group(cells, n_seq, true, th);
  rep->heads = Group(cells, n_heads, false, th);
  std::stable_sort(cells.begin(), cells.end(),
                   [](const Part& a, const Part& b) { return a.rmse_ratio > b.rmse_ratio; });
  if (cells.size() > static_cast<size_t>(kJsonCells)) cells.resize(kJsonCells);
  rep->cells = std::move(cells);
}

// out [T, Nv, Dv]: one cell per (sequence, chunk, head).
void EvaluateOut(const Triple& tr, const std::vector<int64_t>& lens, const CompareOptions& opt, TensorReport* rep) {
  const int64_t Nv = tr.actual.shape[1], Dv = tr.actual.shape[2];
  std::vector<Part> cells;
  std::vector<Block> blocks;
  int64_t t = 0;
  for (size_t b = 0; b < lens.size(); ++b) {
    for (int64_t c0 = 0; c0 < lens[b]; c0 += opt.chunk) {
      const int64_t rows = std::min<int64_t>(opt.chunk, lens[b] - c0);
      for (int64_t h = 0; h < Nv; ++h) {
        Part p;
        p.sequence = static_cast<int64_t>(b);
        p.chunk = c0 / opt.chunk;
        p.head = h;
        p.t0 = t + c0;
        p.t1 = t + c0 + rows;
        cells.push_back(p);
        blocks.push_back(Block{((t + c0) * Nv + h) * Dv, rows, Nv * Dv, Dv});
      }
    }
    t += lens[b];
  }
  Evaluate(tr, std::move(cells), blocks, static_cast<int64_t>(lens.size()), Nv, opt, rep);
}

// final_state [B, Nv, X, Y]: one cell per (sequence, head).
void EvaluateState(const Triple& tr, const CompareOptions& opt, TensorReport* rep) {
  const int64_t B = tr.actual.shape[0], Nv = tr.actual.shape[1], X = tr.actual.shape[2], Y = tr.actual.shape[3];
  std::vector<Part> cells;
  std::vector<Block> blocks;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < Nv; ++h) {
      Part p;
      p.sequence = b;
      p.head = h;
      cells.push_back(p);
      blocks.push_back(Block{(b * Nv + h) * X * Y, X, Y, Y});
    }
  }
  Evaluate(tr, std::move(cells), blocks, B, Nv, opt, rep);
}

// Sequence lengths for the breakdown: given, else one sequence when that is all there can be.
Status SequenceLengths(const Outputs& actual, const CompareOptions& opt, std::vector<int64_t>* lens, bool* known) {
  const int64_t T = actual.out.shape[0];
  *known = true;
  if (!opt.seq_lens.empty()) {
    int64_t sum = 0;
    for (int64_t l : opt.seq_lens) {
      if (l < 0) return Status::Invalid(Cat("seq_lens: expected lengths >= 0, got ", l));
      sum += l;
    }
    if (sum != T)
      return Status::Invalid(
          Cat("seq_lens: expected the lengths to sum to T = ", T, " (out's first dimension), got ", sum));
    if (actual.final_state.present() && actual.final_state.shape[0] != static_cast<int64_t>(opt.seq_lens.size())) {
      return Status::Invalid(
          Cat("seq_lens: ", opt.seq_lens.size(), " sequences, but final_state holds ", actual.final_state.shape[0]));
    }
    *lens = opt.seq_lens;
    return Status::Ok();
  }
  *known = actual.final_state.present() && actual.final_state.shape[0] == 1;
  *lens = {T};
  return Status::Ok();
}

// "[t=5, h=3, j=17]" for out, "[b=0, h=3, v=2, k=7]" (layout vk) for final_state.
std::vector<int64_t> Unflatten(const std::vector<int64_t>& shape, int64_t index) {
  std::vector<int64_t> idx(shape.size(), 0);
  for (size_t i = shape.size(); i-- > 0;) {
    if (shape[i] > 0) {
      idx[i] = index % shape[i];
      index /= shape[i];
    }
  }
  return idx;
}

std::vector<const char*> AxisNames(const TensorReport& r, StateLayout layout) {
  if (r.name == "out") return {"t", "h", "j"};
  return layout == StateLayout::kVK ? std::vector<const char*>{"b", "h", "v", "k"}
                                    : std::vector<const char*>{"b", "h", "k", "v"};
}

std::string IndexString(const TensorReport& r, int64_t index, StateLayout layout) {
  if (index < 0) return "-";
  const auto idx = Unflatten(r.shape, index);
  const auto names = AxisNames(r, layout);
  std::string s = "[";
  for (size_t i = 0; i < idx.size(); ++i) s += Cat(i ? ", " : "", names[i], "=", idx[i]);
  return s + "]";
}

nlohmann::json StatsJson(const TensorReport& r, const ErrorStats& s) {
  nlohmann::json j = {{"mare", Number(s.mare())},
                      {"mere", Number(s.mere())},
                      {"rmse", Number(s.rmse())},
                      {"small_value_errors", s.small_errors},
                      {"small_values", s.small},
                      {"normal_values", s.normal},
                      {"cosine_similarity", Number(s.cosine())},
                      {"max_abs_error", Number(s.max_abs)},
                      {"max_rel_error", Number(s.max_rel)},
                      {"nonfinite", s.nonfinite}};
  j["max_abs_index"] = s.max_abs_at >= 0 ? nlohmann::json(Unflatten(r.shape, s.max_abs_at)) : nlohmann::json();
  j["max_rel_index"] = s.max_rel_at >= 0 ? nlohmann::json(Unflatten(r.shape, s.max_rel_at)) : nlohmann::json();
  return j;
}

nlohmann::json PartJson(const Part& p, bool out) {
  nlohmann::json j;
  if (p.sequence >= 0) j["sequence"] = p.sequence;
  if (p.chunk >= 0) j["chunk"] = p.chunk;
  if (p.head >= 0) j["head"] = p.head;
  if (out && p.sequence >= 0) j["tokens"] = {p.t0, p.t1};
  j["rmse_ratio"] = Number(p.rmse_ratio);
  j["mere_ratio"] = Number(p.mere_ratio);
  j["rmse"] = {{"actual", Number(p.actual.rmse())}, {"benchmark", Number(p.bench.rmse())}};
  j["nonfinite"] = p.actual.nonfinite;
  return j;
}

std::string Num(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", x);
  return buf;
}

std::string Sci(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3e", x);
  return buf;
}

// "3: 25.1 (tokens 64-127), 0: 1.01, ..." worst first.
std::string WorstParts(std::vector<Part> parts, int worst, bool sequences, bool out) {
  std::stable_sort(parts.begin(), parts.end(),
                   [](const Part& a, const Part& b) { return a.rmse_ratio > b.rmse_ratio; });
  std::string s;
  int shown = 0;
  for (const Part& p : parts) {
    if (p.actual.count == 0) continue;
    if (shown++ == worst) break;
    s += Cat(shown > 1 ? ", " : "", sequences ? p.sequence : p.head, ": ", Num(p.rmse_ratio));
    if (p.actual.nonfinite > p.bench.nonfinite) s += Cat(" (", p.actual.nonfinite, " non-finite)");
    if (sequences && out) s += Cat(" (tokens ", p.t0, "-", p.t1 - 1, ")");
  }
  const size_t n = parts.size();
  if (n > static_cast<size_t>(worst)) s += Cat("  [worst ", worst, " of ", n, "]");
  return s;
}

void AppendTensorText(const TensorReport& r, const CompareReport& rep, int worst, StateLayout layout,
                      std::ostream& os) {
  std::string shape = "[";
  for (size_t i = 0; i < r.shape.size(); ++i) shape += Cat(i ? ", " : "", r.shape[i]);
  shape += "]";
  os << r.name << " " << shape << ", thresholds of " << DTypeName(r.dtype) << ": "
     << (r.pass[rep.level] ? "PASS" : "FAIL") << " at " << kLevelLimits[rep.level].name << "\n";
  char line[200];
  std::snprintf(line, sizeof line, "  %-22s %-12s %-12s %-9s %s\n", "metric", "actual", "benchmark", "ratio",
                "limit L0/L1/L2");
  os << line;
  const auto row = [&](const char* name, double a, double b, double ratio, double l0, double l1, double l2) {
    std::snprintf(line, sizeof line, "  %-22s %-12s %-12s %-9s %s/%s/%s\n", name, Sci(a).c_str(), Sci(b).c_str(),
                  Num(ratio).c_str(), Num(l0).c_str(), Num(l1).c_str(), Num(l2).c_str());
    os << line;
  };
  const auto& L = kLevelLimits;
  row("MARE", r.actual.mare(), r.bench.mare(), r.ratios.mare, L[0].mare, L[1].mare, L[2].mare);
  row("MERE", r.actual.mere(), r.bench.mere(), r.ratios.mere, L[0].mere, L[1].mere, L[2].mere);
  row("RMSE", r.actual.rmse(), r.bench.rmse(), r.ratios.rmse, L[0].rmse, L[1].rmse, L[2].rmse);
  std::snprintf(line, sizeof line, "  %-22s %-12s %-12s %-9s %s/%s/%s\n", "small-value errors",
                Cat(r.actual.small_errors, "/", r.actual.small).c_str(),
                Cat(r.bench.small_errors, "/", r.bench.small).c_str(), Num(r.ratios.small).c_str(),
                Num(L[0].small).c_str(), Num(L[1].small).c_str(), Num(L[2].small).c_str());
  os << line;
  std::snprintf(line, sizeof line, "  %-22s %-12.9f %-12.9f\n", "cosine similarity", r.actual.cosine(),
                r.bench.cosine());
  os << line;
  os << "  max abs error          actual " << Sci(r.actual.max_abs) << " at "
     << IndexString(r, r.actual.max_abs_at, layout) << ", benchmark " << Sci(r.bench.max_abs) << " at "
     << IndexString(r, r.bench.max_abs_at, layout) << "\n";
  os << "  max rel error          actual " << Sci(r.actual.max_rel) << " at "
     << IndexString(r, r.actual.max_rel_at, layout) << ", benchmark " << Sci(r.bench.max_rel) << " at "
     << IndexString(r, r.bench.max_rel_at, layout) << "\n";
  if (r.actual.nonfinite || r.bench.nonfinite) {
    os << "  non-finite values      actual " << r.actual.nonfinite << ", benchmark " << r.bench.nonfinite << "\n";
  }
  os << "  verdict               ";
  for (int l = 0; l < kLevels; ++l) {
    os << " " << L[l].name << " " << (r.pass[l] ? "pass" : "FAIL");
    if (!r.pass[l]) os << " (" << r.why[l] << ")";
    os << (l + 1 < kLevels ? ";" : "\n");
  }
  const bool out = r.name == "out";
  os << "  where the error is (RMSE ratio actual/benchmark, worst first):\n";
  if (out && !rep.sequences_known) {
    os << "    sequences:  unknown (give --case or --seq-lens); T taken as one sequence\n";
  } else {
    os << "    sequences:  " << WorstParts(r.sequences, worst, true, out) << "\n";
  }
  os << "    heads:      " << WorstParts(r.heads, worst, false, out) << "\n";
  os << (out ? "    chunks:     " : "    states:     ");
  for (int i = 0; i < worst && i < static_cast<int>(r.cells.size()); ++i) {
    const Part& p = r.cells[i];
    os << (i ? ", " : "") << "seq " << p.sequence;
    if (out) os << " chunk " << p.chunk << " (tokens " << p.t0 << "-" << p.t1 - 1 << ")";
    os << " head " << p.head << ": " << Num(p.rmse_ratio);
    if (p.actual.nonfinite > p.bench.nonfinite) os << " (" << p.actual.nonfinite << " non-finite)";
  }
  os << "\n";
}

}  // namespace

bool ParseLevel(const std::string& s, int* level) {
  for (int l = 0; l < kLevels; ++l) {
    if (s == kLevelLimits[l].name || s == std::to_string(l) || s == Cat("l", l)) {
      *level = l;
      return true;
    }
  }
  return false;
}

DTypeThresholds ThresholdsFor(DType t) {
  switch (t) {
    case DType::kF16: return {0x1p-11, 0x1p-16, 0x1p-11};
    case DType::kBF16: return {0x1p-8, 0x1p-16, 0x1p-8};
    default: return {0x1p-14, 0x1p-30, 0x1p-24};
  }
}

double ErrorStats::cosine() const {
  if (xx == 0.0 && gg == 0.0) return 1.0;
  if (xx == 0.0 || gg == 0.0) return 0.0;
  return dot / (std::sqrt(xx) * std::sqrt(gg));
}

void ErrorStats::Add(double x, double g, int64_t index, double eps, const DTypeThresholds& th) {
  ++count;
  if (!std::isfinite(g) || !std::isfinite(x)) {
    if (std::isfinite(g) || !SameNonFinite(x, g)) ++nonfinite;
    return;
  }
  const double d = std::fabs(x - g);
  if (d > max_abs) {
    max_abs = d;
    max_abs_at = index;
  }
  dot += x * g;
  xx += x * x;
  gg += g * g;
  if (std::fabs(g) < th.small_value) {
    ++small;
    if (d > th.small_atol) ++small_errors;
    return;
  }
  ++normal;
  const double rel = d / (std::fabs(g) + eps);
  sum_rel += rel;
  if (rel > max_rel) {
    max_rel = rel;
    max_rel_at = index;
  }
  sum_sq += d * d;
  sum_gg += g * g;
}

void ErrorStats::Merge(const ErrorStats& o) {
  count += o.count;
  normal += o.normal;
  small += o.small;
  small_errors += o.small_errors;
  nonfinite += o.nonfinite;
  sum_rel += o.sum_rel;
  sum_sq += o.sum_sq;
  sum_gg += o.sum_gg;
  dot += o.dot;
  xx += o.xx;
  gg += o.gg;
  if (o.max_rel > max_rel) {
    max_rel = o.max_rel;
    max_rel_at = o.max_rel_at;
  }
  if (o.max_abs > max_abs) {
    max_abs = o.max_abs;
    max_abs_at = o.max_abs_at;
  }
}

Ratios RatiosOf(const ErrorStats& a, const ErrorStats& b, const DTypeThresholds& th) {
  Ratios r;
  r.mare = Ratio(a.mare(), b.mare(), th.floor);
  r.mere = Ratio(a.mere(), b.mere(), th.floor);
  r.rmse = Ratio(a.rmse(), b.rmse(), th.floor * b.golden_rms());
  r.small = Ratio(static_cast<double>(a.small_errors), static_cast<double>(b.small_errors), 1.0);
  return r;
}

bool Passes(const ErrorStats& a, const ErrorStats& b, const Ratios& r, int level, std::string* why) {
  const LevelLimits& L = kLevelLimits[level];
  std::vector<std::string> fails;
  if (a.nonfinite > b.nonfinite) fails.push_back(Cat(a.nonfinite, " non-finite values"));
  const struct {
    const char* name;
    double ratio, limit;
  } checks[] = {
      {"MARE", r.mare, L.mare}, {"MERE", r.mere, L.mere}, {"RMSE", r.rmse, L.rmse}, {"small-value", r.small, L.small}};
  for (const auto& c : checks) {
    if (!(c.ratio <= c.limit)) fails.push_back(Cat(c.name, " ratio ", Num(c.ratio), " > ", Num(c.limit)));
  }
  why->clear();
  for (size_t i = 0; i < fails.size(); ++i) *why += Cat(i ? ", " : "", fails[i]);
  return fails.empty();
}

bool CompareReport::pass() const {
  for (const auto& t : tensors) {
    if (!t.pass[level]) return false;
  }
  return true;
}

Status Compare(const Outputs& golden, const Outputs& bench, const Outputs& actual, const CompareOptions& opt,
               CompareReport* report) {
  if (opt.level < 0 || opt.level >= kLevels)
    return Status::Invalid(Cat("level: expected L0, L1 or L2, got ", opt.level));
  if (!(opt.eps >= 0.0) || !std::isfinite(opt.eps))
    return Status::Invalid(Cat("eps: expected a number >= 0, got ", opt.eps));
  if (opt.chunk < 1) return Status::Invalid(Cat("chunk: expected >= 1, got ", opt.chunk));
  const Triple out{"out", golden.out, bench.out, actual.out};
  Status s = CheckTriple(out, 3, opt);
  if (!s.ok()) return s;
  const Triple state{"final_state", golden.final_state, bench.final_state, actual.final_state};
  if (actual.final_state.present()) {
    s = CheckTriple(state, 4, opt);
    if (!s.ok()) return s;
    if (state.actual.shape[1] != out.actual.shape[1]) {
      return Status::Invalid(
          Cat(opt.actual_label, ": final_state has ", state.actual.shape[1], " heads, out ", out.actual.shape[1]));
    }
  }
  CompareReport r;
  r.level = opt.level;
  r.eps = opt.eps;
  r.layout = opt.layout;
  std::vector<int64_t> lens;
  s = SequenceLengths(actual, opt, &lens, &r.sequences_known);
  if (!s.ok()) return s;
  r.tensors.emplace_back();
  EvaluateOut(out, lens, opt, &r.tensors.back());
  if (actual.final_state.present()) {
    r.tensors.emplace_back();
    EvaluateState(state, opt, &r.tensors.back());
  }
  *report = std::move(r);
  return Status::Ok();
}

nlohmann::json ReportJson(const CompareReport& r) {
  nlohmann::json j;
  j["level"] = kLevelLimits[r.level].name;
  j["pass"] = r.pass();
  j["eps"] = r.eps;
  j["sequences_known"] = r.sequences_known;
  j["tensors"] = nlohmann::json::object();
  for (const auto& t : r.tensors) {
    nlohmann::json tj;
    tj["shape"] = t.shape;
    tj["dtype"] = DTypeName(t.dtype);
    const DTypeThresholds th = ThresholdsFor(t.dtype);
    tj["thresholds"] = {{"small_value", th.small_value}, {"small_value_atol", th.small_atol}, {"floor", th.floor}};
    tj["actual"] = StatsJson(t, t.actual);
    tj["benchmark"] = StatsJson(t, t.bench);
    tj["ratio"] = {{"mare", Number(t.ratios.mare)},
                   {"mere", Number(t.ratios.mere)},
                   {"rmse", Number(t.ratios.rmse)},
                   {"small_value", Number(t.ratios.small)}};
    for (int l = 0; l < kLevels; ++l) {
      tj["levels"][kLevelLimits[l].name] = {{"pass", t.pass[l]}, {"why", t.why[l]}};
    }
    const bool out = t.name == "out";
    for (const auto& p : t.sequences) tj["sequences"].push_back(PartJson(p, out));
    for (const auto& p : t.heads) tj["heads"].push_back(PartJson(p, out));
    for (const auto& p : t.cells) tj[out ? "worst_chunks" : "worst_states"].push_back(PartJson(p, out));
    tj["pass"] = t.pass[r.level];
    j["tensors"][t.name] = tj;
  }
  return j;
}

std::string ReportText(const CompareReport& r, int worst) {
  std::ostringstream os;
  for (const auto& t : r.tensors) AppendTensorText(t, r, worst, r.layout, os);
  os << "verdict at " << kLevelLimits[r.level].name << ": " << (r.pass() ? "PASS" : "FAIL") << "\n";
  return os.str();
}

}  // namespace cgdr::golden
