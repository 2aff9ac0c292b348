// The rows of `cgdr bench` (the flagship, its T sweep, the varlen batch, the
// NPU's shapes, a generic head), the synthetic data they are cut from, the
// FP64 error of one head, and a row's line in the table and its JSON (bench.h).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>

#include "bench.h"
#include "core/cpu_features.h"

namespace cgdr::cli {

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

namespace {

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

}  // namespace

// Kimi Linear's KDA layers (Kimi-Linear-48B-A3B's config: 32 heads of
// Dk = Dv = 128, no grouping), bf16 activations and an f32 state; the
// per-channel log-decays drawn in [-1, 0] (a chunk's channels then span
// e^-64 .. 1 at C = 64).
RowSpec KimiLinearRow(int64_t T) {
  RowSpec r = Flagship(T, "kimi-linear-T" + std::to_string(T), "kda");
  r.Nk = r.Nv = 32;
  r.per_channel_gate = true;
  r.dtype = DType::kBF16;
  r.state_dtype = DType::kF32;
  return r;
}

namespace {

RowSpec GenericRow() {
  RowSpec r = Flagship(2048, "generic-D200x200", "generic");
  r.Nk = r.Nv = 16;
  r.Dk = r.Dv = 200;
  return r;
}

}  // namespace

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
    rows.push_back(KimiLinearRow(2048));
    return rows;
  }
  for (int64_t t : {512, 1024, 2048, 4096, 8192, 16384, 32768}) {
    rows.push_back(Flagship(t, "qwen3-next-T" + std::to_string(t), "sweep"));
  }
  rows.push_back(VarlenBatch());
  for (const auto& r : NpuRows()) rows.push_back(r);
  rows.push_back(GenericRow());
  for (int64_t t : {2048, 8192}) rows.push_back(KimiLinearRow(t));
  if (!cfg.shape.empty()) {  // ParseBench checked that the name exists
    std::erase_if(rows, [&](const RowSpec& r) { return r.name != cfg.shape; });
  }
  return rows;
}

std::vector<std::string> RowNames() {
  BenchConfig all;
  all.threads = 2;
  std::vector<std::string> names;
  for (const auto& r : SelectRows(all)) names.push_back(r.name);
  return names;
}

PoolKey KeyOf(const RowSpec& r) { return {r.Nk, r.Nv, r.Dk, r.Dv, r.per_channel_gate, r.dtype, r.state_dtype}; }

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
    s.dtype = key.dtype;
    s.state_dtype = key.state_dtype;
    s.per_channel_gate = key.per_channel_gate;
    if (key.per_channel_gate) s.g_min = -1.0f;
    s.seed = 7;
    pool.data = std::make_unique<Case>(MakeCase(s));
  }
  return *pool.data;
}

void RowViews(Case& c, const std::vector<int32_t>& lens, Inputs* in, Outputs* out) {
  const int64_t T = TotalTokens(lens), B = static_cast<int64_t>(lens.size());
  *in = c.inputs();
  *out = c.outputs();
  for (TensorView* t : {&in->query, &in->key, &in->value, &in->beta, &in->g, &out->out}) t->shape[0] = T;
  in->initial_state.shape[0] = B;
  out->final_state.shape[0] = B;
  in->seq_lens = TensorView(lens.data(), DType::kI32, {B});
}

namespace {

// Rows [outer][count][inner] -> [outer][1][inner] at `index`.
std::vector<uint8_t> SliceHead(const TensorView& t, int64_t outer, int64_t count, int64_t index, int64_t inner) {
  const size_t row = static_cast<size_t>(inner) * DTypeSize(t.dtype);
  std::vector<uint8_t> r(static_cast<size_t>(outer) * row);
  const auto* base = static_cast<const uint8_t*>(t.data);
  for (int64_t o = 0; o < outer; ++o) std::memcpy(r.data() + o * row, base + (o * count + index) * row, row);
  return r;
}

}  // namespace

HeadProblem::HeadProblem(const Inputs& in, const Problem& p, int64_t h) : p_(p), h_(h) {
  const int64_t hk = h / (p.Nv / p.Nk);
  q_ = SliceHead(in.query, p.T, p.Nk, hk, p.Dk);
  k_ = SliceHead(in.key, p.T, p.Nk, hk, p.Dk);
  v_ = SliceHead(in.value, p.T, p.Nv, h, p.Dv);
  beta_ = SliceHead(in.beta, p.T, p.Nv, h, 1);
  const int64_t gates = p.per_channel_gate ? p.Dk : 1;  // per (token, head)
  if (in.g.present()) g_ = SliceHead(in.g, p.T, p.Nv, h, gates);
  if (in.initial_state.present()) state_ = SliceHead(in.initial_state, p.B, p.Nv, h, p.Dk * p.Dv);
  lens_.assign(p.seq_lens.begin(), p.seq_lens.end());
  in_.query = TensorView(q_.data(), in.query.dtype, {p.T, 1, p.Dk});
  in_.key = TensorView(k_.data(), in.key.dtype, {p.T, 1, p.Dk});
  in_.value = TensorView(v_.data(), in.value.dtype, {p.T, 1, p.Dv});
  in_.beta = TensorView(beta_.data(), in.beta.dtype, {p.T, 1});
  if (in.g.present()) {
    in_.g = p.per_channel_gate ? TensorView(g_.data(), in.g.dtype, {p.T, 1, p.Dk}) : TensorView(g_.data(), in.g.dtype, {p.T, 1});
  }
  if (in.initial_state.present()) {
    in_.initial_state = TensorView(state_.data(), in.initial_state.dtype,
                                   {p.B, 1, in.initial_state.shape[2], in.initial_state.shape[3]});
  }
  in_.seq_lens = TensorView(lens_.data(), DType::kI32, {p.B});
}

Status HeadProblem::Prepare() {
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

double HeadProblem::RelErr(const TensorView& full_out) {
  out_ = SliceHead(full_out, p_.T, p_.Nv, h_, p_.Dv);
  return RelativeError(TensorView(out_.data(), p_.dtype, {p_.T, 1, p_.Dv}), ref_.out, 1);
}

double HeadProblem::RelErrState(const TensorView& full_state) {
  if (!full_state.present()) return 0.0;
  const int64_t inner = full_state.shape[2] * full_state.shape[3];
  state_out_ = SliceHead(full_state, p_.B, p_.Nv, h_, inner);
  return RelativeError(TensorView(state_out_.data(), full_state.dtype, {p_.B, 1, full_state.shape[2], full_state.shape[3]}),
                       ref_.final_state, 1);
}

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
            {"dtype", DTypeName(s.dtype)},
            {"state_dtype", DTypeName(s.state_dtype)},
            {"per_channel_gate", s.per_channel_gate},
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
            {"target", target},
            {"cpu", CpuDescription()}};
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

void PrintPhases(const RowResult& r) {
  if (r.phases.empty()) return;
  uint64_t all = 0;
  for (const PhaseTotal& t : r.phases) all += t.ticks;
  std::printf("  -> phases (%s, summed over threads and runs; a call is one chunk of one item or head):\n", PhaseTickUnit());
  for (const PhaseTotal& t : r.phases) {
    std::printf("     %-32s %10llu calls %10.0f per call %5.1f%%\n", PhaseName(t.phase),
                static_cast<unsigned long long>(t.calls), static_cast<double>(t.ticks) / static_cast<double>(t.calls),
                100.0 * static_cast<double>(t.ticks) / static_cast<double>(all));
  }
}

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

}  // namespace cgdr::cli
