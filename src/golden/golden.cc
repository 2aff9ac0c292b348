#include "golden/golden.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "core/dtype.h"
#include "core/strcat.h"
#include "core/threads.h"
#include "golden/emulate.h"
#include "reference/reference.h"

namespace cgdr::golden {
namespace {

constexpr int64_t kChunk = 64;  // the NPU's chunk size (the profile's C)

template <typename E>
struct Named {
  E value;
  const char* name;
};

constexpr Named<Operands> kOperands[] = {{Operands::kBf16, "bf16"}, {Operands::kF16, "f16"}};
constexpr Named<Engine> kEngines[] = {
    {Engine::kAuto, "auto"}, {Engine::kKernels, "kernels"}, {Engine::kEmulation, "emulation"}};
constexpr Named<Fault> kFaults[] = {{Fault::kNone, "none"},
                                    {Fault::kDroppedState, "dropped-state"},
                                    {Fault::kTailMask, "tail-mask"},
                                    {Fault::kSwappedHeads, "swapped-heads"},
                                    {Fault::kGSign, "g-sign"}};
constexpr Named<Distribution> kDistributions[] = {{Distribution::kDomain, "domain"},
                                                  {Distribution::kStrongDecay, "strong-decay"},
                                                  {Distribution::kLongT, "long-t"},
                                                  {Distribution::kEmpty, "empty"}};

template <typename E, size_t N>
const char* NameOf(const Named<E> (&table)[N], E v) {
  for (const auto& x : table) {
    if (x.value == v) return x.name;
  }
  return "?";
}

template <typename E, size_t N>
bool Parse(const Named<E> (&table)[N], const std::string& s, E* out) {
  for (const auto& x : table) {
    if (s == x.name) {
      *out = x.value;
      return true;
    }
  }
  return false;
}

int64_t RowBytes(const TensorView& t) {
  return t.shape[0] > 0 ? t.numel() / t.shape[0] * static_cast<int64_t>(DTypeSize(t.dtype)) : 0;
}

// `t` converted to `to` into `buf` (threads over the elements), or `t` itself when it has that dtype.
TensorView Cast(const TensorView& t, DType to, int threads, Bytes* buf) {
  if (!t.present() || t.dtype == to || to == DType::kI32) return t;
  const int64_t n = t.numel();
  buf->assign(static_cast<size_t>(std::max<int64_t>(n, 1)) * DTypeSize(to), 0);
  TensorView r = t;
  r.data = buf->data();
  r.dtype = to;
#pragma omp parallel for num_threads(ResolveThreadCount(threads)) schedule(static)
  for (int64_t i = 0; i < n; ++i) StoreFromF32(r.data, to, i, LoadAsF32(t.data, t.dtype, i));
  return r;
}

// The tensor whose first-dimension entries are t's entries `rows[i]` (-1: zeros).
TensorView GatherRows(const TensorView& t, const std::vector<int64_t>& rows, Bytes* buf) {
  const int64_t rb = RowBytes(t);
  buf->assign(static_cast<size_t>(std::max<int64_t>(1, static_cast<int64_t>(rows.size()) * rb)), 0);
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i] >= 0) std::memcpy(buf->data() + i * rb, static_cast<const uint8_t*>(t.data) + rows[i] * rb, rb);
  }
  TensorView r = t;
  r.data = buf->data();
  r.shape[0] = static_cast<int64_t>(rows.size());
  return r;
}

// Copies first-dimension entries of `from` into `to`: to[i] = from[rows[i]].
void CopyRows(const TensorView& from, const std::vector<int64_t>& rows, const TensorView& to) {
  const int64_t rb = RowBytes(to);
  for (size_t i = 0; i < rows.size(); ++i) {
    std::memcpy(static_cast<uint8_t*>(to.data) + i * rb, static_cast<const uint8_t*>(from.data) + rows[i] * rb, rb);
  }
}

// Exchanges value heads 0 and 1 of a [X, Nv, ...] tensor.
void SwapHeads01(const TensorView& t) {
  const int64_t nv = t.shape[1];
  const int64_t head = RowBytes(t) / nv;
  std::vector<uint8_t> tmp(static_cast<size_t>(head));
  for (int64_t x = 0; x < t.shape[0]; ++x) {
    uint8_t* h0 = static_cast<uint8_t*>(t.data) + x * RowBytes(t);
    std::memcpy(tmp.data(), h0, head);
    std::memcpy(h0, h0 + head, head);
    std::memcpy(h0 + head, tmp.data(), head);
  }
}

// The inputs with new seq_lens (a copy the views point to) and the rest as given.
void SetLengths(const std::vector<int64_t>& lens, OwnedInputs* o) {
  o->seq_lens.assign(lens.begin(), lens.end());
  o->views.seq_lens = TensorView(o->seq_lens.data(), DType::kI32, {static_cast<int64_t>(lens.size())});
}

// Fault kDroppedState: the longest sequence split at its middle chunk
// boundary, the second part starting from a zero state; its final state is
// the second part's.
Status DropState(const Inputs& in, const Problem& p, const Options& opt, const Profile& prof, const Outputs& out) {
  const auto longest = std::max_element(p.seq_lens.begin(), p.seq_lens.end());
  const int64_t b = longest - p.seq_lens.begin(), len = *longest;
  const int64_t chunks = (len + kChunk - 1) / kChunk;
  if (chunks < 2) {
    return Status::Invalid(Cat("fault dropped-state: needs a sequence longer than one chunk (", kChunk,
                               " tokens), the longest has ", len));
  }
  const int64_t split = kChunk * (chunks / 2);
  std::vector<int64_t> lens(p.seq_lens.begin(), p.seq_lens.end()), rows;
  lens[b] = split;
  lens.insert(lens.begin() + b + 1, len - split);
  for (int64_t i = 0; i < p.B; ++i) {
    rows.push_back(i);
    if (i == b) rows.push_back(-1);  // the dropped state: zeros
  }
  OwnedInputs o;
  o.views = in;
  SetLengths(lens, &o);
  o.buffers.emplace_back();
  TensorView state = in.initial_state;
  Bytes zeros;
  if (!state.present()) {  // a zero state of the dtype final_state would have
    const bool kv = opt.state_layout == StateLayout::kKV;
    state = TensorView(nullptr, p.state_dtype, {p.B, p.Nv, kv ? p.Dk : p.Dv, kv ? p.Dv : p.Dk});
    zeros.assign(static_cast<size_t>(state.numel()) * DTypeSize(state.dtype), 0);
    state.data = zeros.data();
  }
  o.views.initial_state = GatherRows(state, rows, &o.buffers.back());
  OwnedOutputs split_run;
  Status s = ComputeBenchmark(o.views, opt, prof, &split_run);
  if (!s.ok()) return s;
  std::memcpy(out.out.data, split_run.views.out.data, static_cast<size_t>(out.out.numel()) * DTypeSize(out.out.dtype));
  if (!out.final_state.present()) return Status::Ok();
  std::vector<int64_t> keep;
  for (int64_t i = 0; i < p.B; ++i) keep.push_back(i <= b ? (i == b ? b + 1 : i) : i + 1);
  CopyRows(split_run.views.final_state, keep, out.final_state);
  return Status::Ok();
}

// Fault kTailMask: each sequence whose last chunk is partial and follows a
// full one gets the padding of that chunk filled with the previous chunk's
// rows at the same positions (what an uncleared buffer holds), processed as
// tokens; their outputs are dropped, their effect on the state stays.
Status StaleTail(const Inputs& in, const Problem& p, const Options& opt, const Profile& prof, const Outputs& out) {
  std::vector<int64_t> rows, lens, out_rows;  // token rows of the padded case; original token -> padded row
  int64_t t0 = 0, padded = 0;
  for (int64_t b = 0; b < p.B; ++b) {
    const int64_t len = p.seq_lens[b], tail = len % kChunk;
    for (int64_t t = t0; t < t0 + len; ++t) {
      out_rows.push_back(static_cast<int64_t>(rows.size()));
      rows.push_back(t);
    }
    int64_t pad = 0;
    if (len > kChunk && tail != 0) {
      pad = kChunk - tail;
      for (int64_t t = t0 + len - kChunk; t < t0 + len - tail; ++t) rows.push_back(t);
      ++padded;
    }
    lens.push_back(len + pad);
    t0 += len;
  }
  if (padded == 0) {
    return Status::Invalid(Cat("fault tail-mask: needs a sequence longer than ", kChunk,
                               " tokens whose length is not a multiple of ", kChunk));
  }
  OwnedInputs o;
  o.views = in;
  SetLengths(lens, &o);
  o.buffers.resize(5);
  o.views.query = GatherRows(in.query, rows, &o.buffers[0]);
  o.views.key = GatherRows(in.key, rows, &o.buffers[1]);
  o.views.value = GatherRows(in.value, rows, &o.buffers[2]);
  o.views.beta = GatherRows(in.beta, rows, &o.buffers[3]);
  if (in.g.present()) o.views.g = GatherRows(in.g, rows, &o.buffers[4]);
  OwnedOutputs run;
  Status s = ComputeBenchmark(o.views, opt, prof, &run);
  if (!s.ok()) return s;
  CopyRows(run.views.out, out_rows, out.out);
  if (out.final_state.present()) {
    std::memcpy(out.final_state.data, run.views.final_state.data,
                static_cast<size_t>(out.final_state.numel()) * DTypeSize(out.final_state.dtype));
  }
  return Status::Ok();
}

// Value head `head` of a [X, N, ...] tensor as [X, 1, ...].
TensorView PickHead(const TensorView& t, int64_t head, Bytes* buf) {
  if (!t.present()) return t;
  const int64_t x = t.shape[0], n = t.shape[1], inner = RowBytes(t) / std::max<int64_t>(n, 1);
  buf->assign(static_cast<size_t>(std::max<int64_t>(1, x * inner)), 0);
  for (int64_t i = 0; i < x; ++i) {
    std::memcpy(buf->data() + i * inner, static_cast<const uint8_t*>(t.data) + (i * n + head) * inner, inner);
  }
  TensorView r = t;
  r.data = buf->data();
  r.shape[1] = 1;
  return r;
}

// ||x[:, head] - ref|| / ||ref|| for x [X, N, ...] and ref its head's [X, 1, ...] in FP64.
double HeadError(const TensorView& x, int64_t head, const std::vector<double>& ref) {
  const int64_t n = x.shape[1], inner = x.numel() / std::max<int64_t>(1, x.shape[0] * n);
  double num = 0.0, den = 0.0;
  for (int64_t i = 0; i < x.shape[0]; ++i) {
    for (int64_t j = 0; j < inner; ++j) {
      const double r = ref[static_cast<size_t>(i * inner + j)];
      const double d = LoadAsF32(x.data, x.dtype, (i * n + head) * inner + j) - r;
      num += d * d;
      den += r * r;
    }
  }
  return den > 0.0 ? std::sqrt(num / den) : std::sqrt(num);
}

// The Ascend NPU kernel that the golden path stands for has one decay per
// head: KDA's per-channel gate (docs/SPEC.md 10) has no port to compare with.
Status NoNpuPort(const Problem& p, const Inputs& in) {
  if (!p.per_channel_gate) return Status::Ok();
  return Status::Invalid(Cat(in.g.present() ? "g" : "a", ": a per-channel gate [T, Nv, Dk] (KDA, docs/SPEC.md 10) "
                             "has no Ascend NPU kernel, so golden, benchmark and faults cannot stand for one; check "
                             "KDA results against FP64 with cgdr check"));
}

// The golden path's options: FP32 products, the plan's own formulation.
Options GoldenOptions(Options o) {
  o.precision = Precision::kFp32;
  o.algo = Algo::kAuto;
  return o;
}

}  // namespace

Engine EngineFor(const Profile& p) {
  if (p.engine != Engine::kAuto) return p.engine;
  return p.operands == Operands::kBf16 ? Engine::kKernels : Engine::kEmulation;
}

const char* OperandsName(Operands o) { return NameOf(kOperands, o); }
bool ParseOperands(const std::string& s, Operands* o) { return Parse(kOperands, s == "fp16" ? "f16" : s, o); }
const char* EngineName(Engine e) { return NameOf(kEngines, e); }
bool ParseEngine(const std::string& s, Engine* e) { return Parse(kEngines, s, e); }
const char* FaultName(Fault f) { return NameOf(kFaults, f); }
bool ParseFault(const std::string& s, Fault* f) { return Parse(kFaults, s, f); }
const char* DistributionName(Distribution d) { return NameOf(kDistributions, d); }
bool ParseDistribution(const std::string& s, Distribution* d) { return Parse(kDistributions, s, d); }

Status CastCase(const Inputs& in, const Options& opt, DType io, DType state, OwnedInputs* out) {
  Problem p;
  Status s = ValidateInputs(in, opt, &p);
  if (s.ok()) s = NoNpuPort(p, in);
  if (!s.ok()) return s;
  OwnedInputs o;
  o.views = in;
  o.buffers.resize(6);
  o.views.query = Cast(in.query, io, opt.threads, &o.buffers[0]);
  o.views.key = Cast(in.key, io, opt.threads, &o.buffers[1]);
  o.views.value = Cast(in.value, io, opt.threads, &o.buffers[2]);
  o.views.beta = Cast(in.beta, io, opt.threads, &o.buffers[3]);
  if (in.initial_state.present()) {
    o.views.initial_state = Cast(in.initial_state, state, opt.threads, &o.buffers[4]);
  } else if (state != DType::kI32 && state != o.views.query.dtype) {
    const bool kv = opt.state_layout == StateLayout::kKV;
    o.views.initial_state = TensorView(nullptr, state, {p.B, p.Nv, kv ? p.Dk : p.Dv, kv ? p.Dv : p.Dk});
    o.buffers[5].assign(static_cast<size_t>(o.views.initial_state.numel()) * DTypeSize(state), 0);
    o.views.initial_state.data = o.buffers[5].data();
  }
  *out = std::move(o);
  return Status::Ok();
}

Status ComputeGolden(const Inputs& in, const Options& opt, OwnedOutputs* r) {
  OwnedInputs wide;
  Status s = CastCase(in, opt, DType::kF32, DType::kF32, &wide);
  if (!s.ok()) return s;
  const Options o = GoldenOptions(opt);
  s = PrepareOutputs(wide.views, o, r);
  return s.ok() ? Run(wide.views, r->views, o) : s;
}

Status GoldenInto(const Inputs& in, const Options& opt, const Outputs& out) {
  OwnedInputs wide;
  Status s = CastCase(in, opt, DType::kF32, DType::kF32, &wide);
  return s.ok() ? Run(wide.views, out, GoldenOptions(opt)) : s;
}

Status CheckGoldenHead(const Inputs& in, const Options& opt, const Outputs& golden, int64_t head, HeadCheck* r) {
  Problem p;
  Status s = ValidateInputs(in, opt, &p);
  if (s.ok()) s = NoNpuPort(p, in);
  if (!s.ok()) return s;
  if (head < 0 || head >= p.Nv) return Status::Invalid(Cat("head ", head, " out of range (Nv = ", p.Nv, ")"));
  OwnedInputs o;
  o.views = in;
  o.buffers.resize(7);
  const int64_t hk = head / (p.Nv / p.Nk);
  o.views.query = PickHead(in.query, hk, &o.buffers[0]);
  o.views.key = PickHead(in.key, hk, &o.buffers[1]);
  o.views.value = PickHead(in.value, head, &o.buffers[2]);
  o.views.beta = PickHead(in.beta, head, &o.buffers[3]);
  o.views.g = PickHead(in.g, head, &o.buffers[4]);
  o.views.initial_state = PickHead(in.initial_state, head, &o.buffers[5]);
  Problem sub;
  s = ValidateInputs(o.views, opt, &sub);
  if (!s.ok()) return s;
  ReferenceResult ref;
  ReferenceRun(o.views, sub, &ref);
  r->head = head;
  r->out_err = HeadError(golden.out, head, ref.out);
  r->state_err = golden.final_state.present() ? HeadError(golden.final_state, head, ref.final_state) : 0.0;
  return Status::Ok();
}

Status ComputeBenchmark(const Inputs& in, const Options& opt, const Profile& prof, OwnedOutputs* r) {
  Status s = PrepareOutputs(in, opt, r);
  return s.ok() ? BenchmarkInto(in, opt, prof, r->views) : s;
}

Status BenchmarkInto(const Inputs& in, const Options& opt, const Profile& prof, const Outputs& out) {
  const Engine engine = EngineFor(prof);
  if (engine == Engine::kKernels && prof.operands != Operands::kBf16) {
    return Status::Invalid("engine kernels: the kernels have bf16 operands only; use the emulation for f16");
  }
  Problem p;
  Status s = ValidateInputs(in, opt, &p);
  if (s.ok()) s = NoNpuPort(p, in);
  if (!s.ok()) return s;
  Options o = opt;
  o.precision = Precision::kBf16;
  o.algo = Algo::kChunk64;
  if (engine == Engine::kKernels) return Run(in, out, o);
  s = Validate(in, out, o, &p);
  return s.ok() ? Emulate(in, p, prof.operands, out) : s;
}

Status ComputeFaulty(const Inputs& in, const Options& opt, const Profile& prof, Fault f, OwnedOutputs* r) {
  Status s = PrepareOutputs(in, opt, r);
  return s.ok() ? FaultyInto(in, opt, prof, f, r->views) : s;
}

Status FaultyInto(const Inputs& in, const Options& opt, const Profile& prof, Fault f, const Outputs& out) {
  Problem p;
  Status s = Validate(in, out, opt, &p);
  if (s.ok()) s = NoNpuPort(p, in);
  if (!s.ok()) return s;
  switch (f) {
    case Fault::kNone: return BenchmarkInto(in, opt, prof, out);
    case Fault::kDroppedState: return DropState(in, p, opt, prof, out);
    case Fault::kTailMask: return StaleTail(in, p, opt, prof, out);
    case Fault::kSwappedHeads:
      if (p.Nv < 2) return Status::Invalid(Cat("fault swapped-heads: needs Nv >= 2, got ", p.Nv));
      s = BenchmarkInto(in, opt, prof, out);
      if (!s.ok()) return s;
      SwapHeads01(out.out);
      if (out.final_state.present()) SwapHeads01(out.final_state);
      return Status::Ok();
    case Fault::kGSign: {
      if (!in.g.present()) return Status::Invalid("fault g-sign: needs g");
      OwnedInputs o;
      o.views = in;
      o.buffers.emplace_back(static_cast<size_t>(std::max<int64_t>(1, RowBytes(in.g) * in.g.shape[0])));
      o.views.g.data = o.buffers.back().data();
      for (int64_t i = 0; i < in.g.numel(); ++i)
        StoreFromF32(o.views.g.data, in.g.dtype, i, -LoadAsF32(in.g.data, in.g.dtype, i));
      return BenchmarkInto(o.views, opt, prof, out);
    }
  }
  return Status::Invalid("unknown fault");
}

CaseSpec GenerateSpec(Distribution d, CaseSpec spec, bool lengths_given) {
  spec.g_min = -1.0f;  // the operator's documented domain: g in [-1, 0]
  spec.g_max = 0.0f;
  switch (d) {
    case Distribution::kDomain: break;
    case Distribution::kStrongDecay: spec.g_max = -0.9f; break;
    case Distribution::kLongT:
      if (!lengths_given) spec.lens = {65535};
      break;
    case Distribution::kEmpty: {
      // Empty sequences first, between and last, around the given lengths.
      std::vector<int32_t> lens{0};
      for (int32_t l : spec.lens) {
        lens.push_back(l);
        lens.push_back(0);
      }
      spec.lens = lens;
      break;
    }
  }
  return spec;
}

}  // namespace cgdr::golden
