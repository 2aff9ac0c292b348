// Results against the FP64 reference of their case (SPEC 6): the hidden
// `cgdr check`, and CheckResultFile for the demo. A decode case's reference
// is a prefill of its tokens from the slots it reads.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "args.h"
#include "cgdr/cgdr.hpp"
#include "commands.h"
#include "core/dtype.h"
#include "core/strcat.h"
#include "io/case_file.h"
#include "reference/reference.h"

namespace cgdr::cli {
namespace {

const char kCheckUsage[] =
    "usage: cgdr check --input CASE --result RESULT [--heads 0,3,...]\n"
    "  Recomputes the FP64 reference and exits 0 if the result is within SPEC 6, 1 if not.\n";

// SPEC 6: f32 within 2e-5; f16/bf16 within 2x the rounding floor.
double SpecLimit(DType t, double floor) { return t == DType::kF32 ? 2e-5 : 2.0 * floor; }

TensorAccuracy Accuracy(const char* name, const TensorView& x, const std::vector<double>& ref, int64_t Nv,
                        const std::vector<int64_t>& heads, double cap) {
  TensorAccuracy a;
  a.name = name;
  a.dtype = x.dtype;
  a.rel_err = RelativeError(x, ref, Nv, heads);
  a.rounding_floor = RoundingError(ref, x.dtype);  // other heads' entries are 0 in ref and add nothing
  a.limit = SpecLimit(x.dtype, a.rounding_floor);
  if (cap > 0) a.limit = std::min(a.limit, cap);
  return a;
}

Status CheckArgs(int argc, char** argv, std::string* input, std::string* result, std::vector<int64_t>* heads,
                 bool* help) {
  Args a;
  CGDR_CLI_TRY(a.Parse("check", argc, argv, {"--input", "--result", "--heads"}, {}));
  if ((*help = MaybeHelp(a, kCheckUsage))) return Status::Ok();
  CGDR_CLI_TRY(a.Require("--input", input));
  CGDR_CLI_TRY(a.Require("--result", result));
  if (a.Has("--heads")) CGDR_CLI_TRY(a.IntList("--heads", 0, 1 << 16, heads));
  return Status::Ok();
}

// Copies row `from` of `src` (rows of `row` elements) into row `to` of `dst`.
void CopyRow(const std::vector<double>& src, int64_t from, std::vector<double>* dst, int64_t to, int64_t row) {
  std::copy_n(src.begin() + from * row, row, dst->begin() + to * row);
}

// The checkpoint_every the result was computed with: its own metadata (cgdr
// run writes it with checkpoints), else none without checkpoint_states (a run
// with --checkpoint-every 0), else the case's.
Status ResultCheckpointEvery(const std::string& path, const LoadedResult& r, int64_t* every) {
  const auto& md = r.file.metadata();
  const auto it = md.find("checkpoint_every");
  if (it != md.end()) return Args::ParseInt(path + ": metadata 'checkpoint_every'", it->second, 0, INT64_MAX, every);
  if (!r.outputs.checkpoint_states.present()) *every = 0;
  return Status::Ok();
}

// A pool case's expected final_state: the case's pool with the slot of each
// sequence (state_indices[b] >= 0) replaced by its FP64 final state.
std::vector<double> ExpectedPool(const Inputs& in, const Problem& p, const std::vector<double>& final_states) {
  std::vector<double> pool = TensorAsDoubles(in.initial_state);
  const int64_t slot = p.Nv * p.Dk * p.Dv;
  for (int64_t b = 0; b < p.B; ++b) {
    if (p.Slot(b) >= 0) CopyRow(final_states, b, &pool, p.Slot(b), slot);
  }
  return pool;
}

Status CheckDecodeResult(const std::string& case_path, const std::string& result_path, const LoadedCase& c,
                         const LoadedResult& r, const std::vector<int64_t>& heads, double cap, AccuracyReport* report);

Status CheckHeads(const std::vector<int64_t>& heads, int64_t Nv) {
  for (int64_t h : heads) {
    if (h >= Nv) return Status::Invalid(Cat("--heads: head ", h, " out of range (Nv = ", Nv, ")"));
  }
  return Status::Ok();
}

}  // namespace

Status CheckResultFile(const std::string& case_path, const std::string& result_path, const std::vector<int64_t>& heads,
                       double cap, AccuracyReport* report) {
  LoadedCase c;
  CGDR_CLI_TRY(LoadCase(case_path, &c));
  LoadedResult r;
  CGDR_CLI_TRY(LoadResult(result_path, &r));
  if (c.decode.present) return CheckDecodeResult(case_path, result_path, c, r, heads, cap, report);
  CGDR_CLI_TRY(ResultCheckpointEvery(result_path, r, &c.options.checkpoint_every));
  // Validate with the result as the outputs: its shapes and dtypes must be the ones the case implies.
  Problem p;
  if (Status s = Validate(c.inputs, r.outputs, c.options, &p); !s.ok()) {
    return Status::Invalid(case_path + " + " + result_path + ": " + s.message());
  }
  CGDR_CLI_TRY(CheckHeads(heads, p.Nv));
  ReferenceResult ref;
  ReferenceRun(c.inputs, p, &ref, heads);
  const std::vector<double> final_ref =
      p.state_slots.empty() ? ref.final_state : ExpectedPool(c.inputs, p, ref.final_state);
  report->tensors = {Accuracy("out", r.outputs.out, ref.out, p.Nv, heads, cap),
                     Accuracy("final_state", r.outputs.final_state, final_ref, p.Nv, heads, cap)};
  if (r.outputs.checkpoint_states.present()) {
    report->tensors.push_back(
        Accuracy("checkpoint_states", r.outputs.checkpoint_states, ref.checkpoint_states, p.Nv, heads, cap));
  }
  return Status::Ok();
}

namespace {

// [N, K, ...] -> [N * K, ...]: a decode case's token tensors as a prefill's.
TensorView MergeTokenAxis(const TensorView& t, bool token_axis) {
  if (!t.present() || !token_axis || t.rank < 2) return t;
  std::vector<int64_t> shape{t.shape[0] * t.shape[1]};
  shape.insert(shape.end(), t.shape.begin() + 2, t.shape.begin() + t.rank);
  return TensorView(t.data, t.dtype, shape);
}

// A decode case's FP64 reference: a prefill of K tokens per sequence from its
// slot, with a checkpoint after every token (the per-token states). Rows of
// skipped sequences (negative index) are zeros, as DecodeStep writes them.
struct DecodeReference {
  std::vector<double> out, states, pool;
};

// Token j of each of the N sequences of a token tensor [N, K, ...], as [N, ...]
// in `buf` (absent stays absent).
TensorView TokenOf(const TensorView& t, int64_t K, int64_t j, std::vector<uint8_t>* buf) {
  if (!t.present()) return t;
  const TensorView m = MergeTokenAxis(t, true);  // [N * K, ...]
  const int64_t N = m.shape[0] / K;
  const size_t row = DTypeSize(m.dtype) * static_cast<size_t>(m.numel() / m.shape[0]);
  buf->resize(static_cast<size_t>(N) * row);
  for (int64_t n = 0; n < N; ++n) {
    std::memcpy(buf->data() + n * row, static_cast<const uint8_t*>(m.data) + (n * K + j) * row, row);
  }
  std::vector<int64_t> shape(m.shape.begin(), m.shape.begin() + m.rank);
  shape[0] = N;
  return TensorView(buf->data(), m.dtype, shape);
}

// The states a result wrote after each token (for the reference of a 16-bit
// pool): its `states` rows [N * K, slot] (may be absent), and its pool (the
// slots dst_indices name).
struct WrittenStates {
  TensorView rows, pool;
};

// The reference of K > 1 tokens on a 16-bit pool: K FP64 steps, each from
// the state the token before left in the pool's dtype, as the kernel's K
// steps each round it (SPEC 6b; verify is bitwise K single steps, 6d.2):
// the state the result wrote for that token (its states row or dst slot),
// so each step is judged on its own, else the FP64 state rounded to the
// pool's dtype. One FP64 run of K tokens would leave out K - 1 roundings: a
// correct result then measured 1.4x the 16-bit limit (K = 16, g = 0) and
// 100x the f32 limit of out.
void DecodeReferenceRoundedRun(const DecodeCase& dc, const DecodeProblem& dp, const Options& opt,
                               const std::vector<int64_t>& heads, const WrittenStates& written,
                               DecodeReference* result) {
  const DecodeInputs& d = dc.inputs;
  const int64_t N = dp.N, K = dp.K, slot = dp.Nv * dp.Dk * dp.Dv, row = dp.Nv * dp.Dv;
  const std::vector<double> pool = TensorAsDoubles(d.state_pool);
  const auto* src = static_cast<const int32_t*>(d.state_indices.data);
  const auto* dst = static_cast<const int32_t*>(d.dst_indices.data);
  const std::vector<double> written_rows = written.rows.present() ? TensorAsDoubles(written.rows) : std::vector<double>{};
  const std::vector<double> written_pool = dst != nullptr ? TensorAsDoubles(written.pool) : std::vector<double>{};
  // The sequences' states, dense [N, Nv, ...] (zeros for skipped ones); 16-bit
  // values, exact in f32.
  std::vector<float> state(static_cast<size_t>(N * slot), 0.0f);
  for (int64_t n = 0; n < N; ++n) {
    if (src[n] >= 0) std::copy_n(pool.begin() + src[n] * slot, slot, state.begin() + n * slot);
  }
  std::vector<int32_t> ones(static_cast<size_t>(N), 1);
  Options step = opt;
  step.checkpoint_every = 0;
  step.state_slot_stride = 0;
  result->out.assign(static_cast<size_t>(N * K * row), 0.0);
  result->states.assign(static_cast<size_t>(N * K * slot), 0.0);
  result->pool = pool;
  std::vector<uint8_t> q, k, v, beta, g, a;
  for (int64_t j = 0; j < K; ++j) {
    Inputs in{TokenOf(d.query, K, j, &q), TokenOf(d.key, K, j, &k), TokenOf(d.value, K, j, &v),
              TokenOf(d.beta, K, j, &beta), TokenOf(d.g, K, j, &g),
              TensorView(state.data(), DType::kF32, {N, dp.Nv, d.state_pool.shape[2], d.state_pool.shape[3]}),
              TensorView(ones.data(), DType::kI32, {N}), TokenOf(d.a, K, j, &a), d.A_log, d.dt_bias};
    Problem p;
    ValidateInputs(in, step, &p);  // the decode validation passed: these are its tensors, one token each
    ReferenceResult ref;
    ReferenceRun(in, p, &ref, heads);
    for (int64_t n = 0; n < N; ++n) {
      if (src[n] < 0) continue;
      CopyRow(ref.out, n, &result->out, n * K + j, row);
      CopyRow(ref.final_state, n, &result->states, n * K + j, slot);
      if (dst != nullptr && dst[n * K + j] >= 0) CopyRow(ref.final_state, n, &result->pool, dst[n * K + j], slot);
      if (j == K - 1 && dst == nullptr && !dc.output_states) CopyRow(ref.final_state, n, &result->pool, src[n], slot);
    }
    for (int64_t n = 0; n < N; ++n) {
      const double* next = nullptr;  // the state the result wrote after this token
      if (!written_rows.empty()) {
        next = written_rows.data() + (n * K + j) * slot;
      } else if (dst != nullptr && dst[n * K + j] >= 0) {
        next = written_pool.data() + dst[n * K + j] * slot;
      }
      for (int64_t i = n * slot; i < (n + 1) * slot; ++i) {
        state[i] = static_cast<float>(next ? next[i - n * slot] : RoundTrip(ref.final_state[i], dp.state_dtype));
      }
    }
  }
}

void DecodeReferenceRun(const DecodeCase& dc, const DecodeProblem& dp, const Options& opt,
                        const std::vector<int64_t>& heads, const WrittenStates& written, DecodeReference* result) {
  if (dp.K > 1 && dp.state_dtype != DType::kF32) {
    return DecodeReferenceRoundedRun(dc, dp, opt, heads, written, result);
  }
  const DecodeInputs& d = dc.inputs;
  const bool axis = d.query.rank == 4;
  const int64_t N = dp.N, K = dp.K, slot = dp.Nv * dp.Dk * dp.Dv, row = dp.Nv * dp.Dv;
  std::vector<int32_t> lens(static_cast<size_t>(N), static_cast<int32_t>(K));
  Inputs in{MergeTokenAxis(d.query, axis), MergeTokenAxis(d.key, axis), MergeTokenAxis(d.value, axis),
            MergeTokenAxis(d.beta, axis), MergeTokenAxis(d.g, axis), d.state_pool,
            TensorView(lens.data(), DType::kI32, {N}), MergeTokenAxis(d.a, axis), d.A_log, d.dt_bias, d.state_indices};
  Options prefill = opt;
  prefill.checkpoint_every = 1;
  prefill.state_slot_stride = 0;
  Problem p;
  ValidateInputs(in, prefill, &p);  // the decode validation passed: these are the same tensors
  ReferenceResult ref;
  ReferenceRun(in, p, &ref, heads);
  result->out.assign(ref.out.size(), 0.0);
  result->states.assign(ref.checkpoint_states.size(), 0.0);
  result->pool = TensorAsDoubles(d.state_pool);
  const auto* src = static_cast<const int32_t*>(d.state_indices.data);
  const auto* dst = static_cast<const int32_t*>(d.dst_indices.data);
  for (int64_t n = 0; n < N; ++n) {
    if (src[n] < 0) continue;
    for (int64_t j = 0; j < K; ++j) {
      CopyRow(ref.out, n * K + j, &result->out, n * K + j, row);
      CopyRow(ref.checkpoint_states, n * K + j, &result->states, n * K + j, slot);
      if (dst != nullptr && dst[n * K + j] >= 0) {
        CopyRow(ref.checkpoint_states, n * K + j, &result->pool, dst[n * K + j], slot);
      }
    }
    if (dst == nullptr && !dc.output_states) CopyRow(ref.final_state, n, &result->pool, src[n], slot);
  }
}

Status CheckDecodeResult(const std::string& case_path, const std::string& result_path, const LoadedCase& c,
                         const LoadedResult& r, const std::vector<int64_t>& heads, double cap, AccuracyReport* report) {
  const TensorView& pool = c.decode.inputs.state_pool;
  const TensorView& after = r.outputs.final_state;
  DecodeProblem dp;
  Status s = ValidateDecode(c.decode.inputs, DecodeOutputs{r.outputs.out, r.states}, c.options, &dp);
  if (s.ok() && c.decode.output_states != r.states.present()) {
    s = Status::Invalid(Cat("states: expected ", c.decode.output_states ? "it (metadata output_states)" : "none"));
  }
  if (s.ok() && (after.dtype != pool.dtype || after.ShapeString() != pool.ShapeString())) {
    s = Status::Invalid(Cat("final_state: expected the pool's dtype and shape ", DTypeName(pool.dtype), " ",
                            pool.ShapeString(), ", got ", DTypeName(after.dtype), " ", after.ShapeString()));
  }
  if (!s.ok()) return Status::Invalid(case_path + " + " + result_path + ": " + s.message());
  CGDR_CLI_TRY(CheckHeads(heads, dp.Nv));
  DecodeReference ref;
  DecodeReferenceRun(c.decode, dp, c.options, heads, WrittenStates{r.states, after}, &ref);
  report->tensors = {Accuracy("out", r.outputs.out, ref.out, dp.Nv, heads, cap),
                     Accuracy("final_state", after, ref.pool, dp.Nv, heads, cap)};
  if (r.states.present()) report->tensors.push_back(Accuracy("states", r.states, ref.states, dp.Nv, heads, cap));
  return Status::Ok();
}

}  // namespace

void PrintAccuracy(const AccuracyReport& r) {
  for (const auto& t : r.tensors) {
    std::printf("  %-17s rel err %.3e  (%s; rounding floor %.3e, limit %.3e)  %s\n", t.name, t.rel_err,
                DTypeName(t.dtype), t.rounding_floor, t.limit, t.ok() ? "ok" : "FAIL");
  }
}

int CheckMain(int argc, char** argv) {
  std::string input, result;
  std::vector<int64_t> heads;
  bool help = false;
  if (Status s = CheckArgs(argc, argv, &input, &result, &heads, &help); !s.ok()) return ReportError(s);
  if (help) return kExitOk;
  AccuracyReport report;
  if (Status s = CheckResultFile(input, result, heads, 0.0, &report); !s.ok()) return ReportError(s);
  std::printf("check %s against the FP64 reference of %s:\n", result.c_str(), input.c_str());
  PrintAccuracy(report);
  return report.ok() ? kExitOk : kExitCheckFailed;
}

}  // namespace cgdr::cli
