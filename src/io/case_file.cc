#include "io/case_file.h"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <cmath>
#include <cstdlib>
#include <new>
#include <sstream>

#include "core/strcat.h"
#include "validate/checks.h"

namespace cgdr {
namespace {

Status Fail(const std::string& path, const std::string& msg) { return Status::Invalid(Cat(path, ": ", msg)); }

// Tensor names of SPEC 2 and the serving tensors of SPEC 6d; `out` and
// `final_state` may ride along in a case (expected results) and are ignored
// there.
const char* const kCaseTensors[] = {"query",    "key",           "value",       "beta",     "g",
                                    "a",        "A_log",         "dt_bias",     "initial_state",
                                    "seq_lens", "state_indices", "dst_indices", "out",      "final_state"};
const char* const kRequired[] = {"query", "key", "value", "beta", "seq_lens"};

bool IsCaseTensor(const std::string& name) {
  for (const char* n : kCaseTensors) {
    if (name == n) return true;
  }
  return false;
}

// "query, key, ..., final_state": the names a case may carry, for messages.
std::string CaseTensorList() {
  std::string list;
  for (const char* n : kCaseTensors) list += Cat(list.empty() ? "" : ", ", n);
  return list;
}

// `scale`, `qk_l2norm_eps` and `gate_lower_bound` must be plain finite decimals: a typo must not
// silently become 0. Their ranges are the options' checks (SPEC 3).
Status ParseDecimal(const std::string& path, const std::string& key, const std::string& v, const char* meaning,
                    double* out) {
  double x = 0.0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (v.empty() || ec != std::errc() || end != v.data() + v.size() || !std::isfinite(x)) {
    return Fail(path, Cat("metadata '", key, "' is \"", PrintableName(v), "\", expected a finite decimal number (",
                          meaning, ")"));
  }
  *out = x;
  return Status::Ok();
}

// `checkpoint_every`: a plain decimal integer >= 0 (0: no checkpoints).
Status ParseCheckpointEvery(const std::string& path, const std::string& v, int64_t* every) {
  int64_t x = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (v.empty() || ec != std::errc() || end != v.data() + v.size() || x < 0) {
    return Fail(path, Cat("metadata 'checkpoint_every' is \"", PrintableName(v),
                          "\", expected an integer >= 0 (tokens between checkpoints; 0: none)"));
  }
  *every = x;
  return Status::Ok();
}

Status ParseBool(const std::string& path, const std::string& key, const std::string& v, bool* out) {
  if (v != "true" && v != "false") {
    return Fail(path, Cat("metadata '", key, "' is \"", PrintableName(v), "\", expected \"true\" or \"false\""));
  }
  *out = v == "true";
  return Status::Ok();
}

Status ParseMetadata(const std::string& path, const std::map<std::string, std::string>& md, Options* opt,
                     bool* output_states) {
  for (const auto& [key, v] : md) {
    if (key == "scale") {
      CGDR_TRY(ParseDecimal(path, key, v, "0 = 1/sqrt(Dk)", &opt->scale));
    } else if (key == "qk_l2norm_eps") {
      CGDR_TRY(ParseDecimal(path, key, v, "> 0, the eps of the q/k l2norm", &opt->qk_l2norm_eps));
    } else if (key == "gate_lower_bound") {
      CGDR_TRY(ParseDecimal(path, key, v, "0 = none, else < 0: the lower bound of KDA's gate", &opt->gate_lower_bound));
    } else if (key == "state_layout") {
      if (v != "vk" && v != "kv")
        return Fail(path, Cat("metadata 'state_layout' is \"", PrintableName(v), "\", expected \"vk\" or \"kv\""));
      opt->state_layout = v == "kv" ? StateLayout::kKV : StateLayout::kVK;
    } else if (key == "use_qk_l2norm") {
      CGDR_TRY(ParseBool(path, key, v, &opt->use_qk_l2norm));
    } else if (key == "use_beta_sigmoid") {
      CGDR_TRY(ParseBool(path, key, v, &opt->use_beta_sigmoid));
    } else if (key == "checkpoint_every") {
      CGDR_TRY(ParseCheckpointEvery(path, v, &opt->checkpoint_every));
    } else if (key == "output_states") {
      CGDR_TRY(ParseBool(path, key, v, output_states));
    } else if (key != "format") {  // "format" is what safetensors' own Python helpers add
      return Fail(path, Cat("unknown metadata key '", PrintableName(key),
                            "' (expected scale, state_layout, use_qk_l2norm, qk_l2norm_eps, use_beta_sigmoid, "
                            "gate_lower_bound, checkpoint_every, output_states)"));
    }
  }
  return Status::Ok();
}

// Addresses no process maps (above the 47/57-bit user space) for a validation
// pass before allocating: Validate compares output address ranges with the
// inputs' but never touches output memory, so these make the pass about shapes
// alone. Ranges of 2^61 bytes each: out from 2^62, final_state (decode:
// states) from 2^62 + 2^61, checkpoint_states from 2^63.
static_assert(sizeof(void*) == 8, "placeholder output addresses need a 64-bit address space");
void* Placeholder(int i) { return reinterpret_cast<void*>((uintptr_t{1} << 62) + uintptr_t(i) * (uintptr_t{1} << 61)); }

// Zero-filled without touching the pages (large calloc maps fresh zero pages).
void* ZeroAlloc(int64_t bytes) { return std::calloc(static_cast<size_t>(bytes > 0 ? bytes : 1), 1); }

// Whether the serving tensors and keys fit the kind of case: a prefill case
// (seq_lens) may hold a pool (state_indices with initial_state) and
// checkpoint_every; a decode case (state_indices, no seq_lens) holds its pool
// in initial_state and may hold dst_indices and output_states.
Status CheckCaseKind(const std::string& path, bool decode, const TensorView& initial_state,
                     const TensorView& state_indices, const TensorView& dst_indices, const Options& opt,
                     bool output_states) {
  if (!decode) {
    if (state_indices.present() && !initial_state.present()) {
      return Fail(path, "initial_state: required with state_indices (the pool [P, Nv, ...] read and written)");
    }
    if (dst_indices.present()) return Fail(path, "dst_indices: only in a decode case (one without seq_lens)");
    if (output_states) return Fail(path, "metadata 'output_states': only in a decode case (one without seq_lens)");
    return Status::Ok();
  }
  if (!initial_state.present()) {
    return Fail(path, "missing required tensor 'initial_state' (a decode case, one without seq_lens, holds its "
                      "pool there)");
  }
  if (opt.checkpoint_every != 0) {
    return Fail(path, "metadata 'checkpoint_every': only in a prefill case (one with seq_lens), not in a decode case");
  }
  return Status::Ok();
}

// The checks and views every case file kind shares: known and required tensor
// names, the metadata, and views of the tensors by name.
Status AssembleCase(const std::string& path, const std::vector<NamedTensor>& tensors,
                    const std::map<std::string, std::string>& metadata, Inputs* in, Options* opt, DecodeCase* dc) {
  for (const auto& t : tensors) {
    if (!IsCaseTensor(t.name)) {
      return Fail(path, Cat("unknown tensor '", PrintableName(t.name), "' (expected ", CaseTensorList(), ")"));
    }
  }
  auto view = [&](const char* name) {
    for (const auto& t : tensors) {
      if (t.name == name) return t.view;
    }
    return TensorView();
  };
  const bool decode = !view("seq_lens").present() && view("state_indices").present();
  for (const char* name : kRequired) {
    if (decode && std::string(name) == "seq_lens") continue;
    if (!view(name).present()) return Fail(path, Cat("missing required tensor '", name, "'"));
  }
  bool output_states = false;
  CGDR_TRY(ParseMetadata(path, metadata, opt, &output_states));
  CGDR_TRY(CheckCaseKind(path, decode, view("initial_state"), view("state_indices"), view("dst_indices"), *opt,
                         output_states));
  if (decode) {
    *dc = DecodeCase{true,
                     DecodeInputs{view("query"), view("key"), view("value"), view("beta"), view("g"),
                                  view("initial_state"), view("state_indices"), view("a"), view("A_log"),
                                  view("dt_bias"), view("dst_indices")},
                     output_states};
    return Status::Ok();
  }
  in->query = view("query");
  in->key = view("key");
  in->value = view("value");
  in->beta = view("beta");
  in->g = view("g");
  in->a = view("a");
  in->A_log = view("A_log");
  in->dt_bias = view("dt_bias");
  in->initial_state = view("initial_state");
  in->seq_lens = view("seq_lens");
  in->state_indices = view("state_indices");
  return Status::Ok();
}

// out and final_state by name (and checkpoint_states, a decode result's
// states when `states` is given); final_state may be absent when `state_optional`.
Status AssembleResult(const std::string& path, const std::vector<NamedTensor>& tensors, bool state_optional,
                      Outputs* out, TensorView* states = nullptr) {
  for (const auto& t : tensors) {
    if (t.name == "out") {
      out->out = t.view;
    } else if (t.name == "final_state") {
      out->final_state = t.view;
    } else if (t.name == "checkpoint_states") {
      out->checkpoint_states = t.view;
    } else if (t.name == "states" && states != nullptr) {
      *states = t.view;
    } else {
      return Fail(path, Cat("unknown tensor '", PrintableName(t.name),
                            "' (expected out, final_state, checkpoint_states", states != nullptr ? ", states)" : ")"));
    }
  }
  if (!out->out.present()) return Fail(path, "missing required tensor 'out'");
  if (!state_optional && !out->final_state.present()) return Fail(path, "missing required tensor 'final_state'");
  return Status::Ok();
}

std::vector<NamedTensor> NamedTensors(const SafetensorsFile& f) {
  std::vector<NamedTensor> v;
  for (const auto& t : f.tensors()) v.push_back({t.name, t.view()});
  return v;
}

}  // namespace

Status LoadCase(const std::string& path, LoadedCase* out) {
  LoadedCase c;
  Status s = ReadSafetensors(path, &c.file);
  if (!s.ok()) return s;
  s = AssembleCase(path, NamedTensors(c.file), c.file.metadata(), &c.inputs, &c.options, &c.decode);
  if (!s.ok()) return s;
  *out = std::move(c);  // views point into heap buffers the move keeps
  return Status::Ok();
}

Status LoadCaseFiles(const std::string& path, CaseFiles* out) {
  CaseFiles c;
  Status s = ReadTensorBundle(path, &c.files);
  if (!s.ok()) return s;
  s = AssembleCase(path, c.files.tensors(), c.files.metadata(), &c.inputs, &c.options, &c.decode);
  if (!s.ok()) return s;
  *out = std::move(c);
  return Status::Ok();
}

std::vector<SafetensorsWriteTensor> CaseTensors(const Inputs& in) {
  std::vector<SafetensorsWriteTensor> t{{"query", in.query}, {"key", in.key}, {"value", in.value}, {"beta", in.beta}};
  if (in.g.present()) t.emplace_back("g", in.g);
  if (in.a.present()) t.emplace_back("a", in.a);
  if (in.A_log.present()) t.emplace_back("A_log", in.A_log);
  if (in.dt_bias.present()) t.emplace_back("dt_bias", in.dt_bias);
  if (in.initial_state.present()) t.emplace_back("initial_state", in.initial_state);
  t.emplace_back("seq_lens", in.seq_lens);
  if (in.state_indices.present()) t.emplace_back("state_indices", in.state_indices);
  return t;
}

std::map<std::string, std::string> CaseMetadata(const Options& opt) {
  std::map<std::string, std::string> md{{"state_layout", StateLayoutName(opt.state_layout)},
                                        {"use_qk_l2norm", opt.use_qk_l2norm ? "true" : "false"}};
  if (opt.use_beta_sigmoid) md["use_beta_sigmoid"] = "true";  // absent: false (files of older versions stay the same)
  if (opt.checkpoint_every > 0) md["checkpoint_every"] = std::to_string(opt.checkpoint_every);
  const auto exact = [](double x) {  // the shortest form that reads back exactly
    char buf[64];
    const auto r = std::to_chars(buf, buf + sizeof buf, x);
    return std::string(buf, r.ptr);
  };
  if (std::isfinite(opt.scale) && opt.scale != 0.0) md["scale"] = exact(opt.scale);
  if (opt.qk_l2norm_eps != Options{}.qk_l2norm_eps) md["qk_l2norm_eps"] = exact(opt.qk_l2norm_eps);  // absent: 1e-6
  // Absent: 0, no bound (files without KDA's bounded gate stay the same). A
  // NaN is written as "nan", which reading refuses, as the option's check would.
  if (opt.gate_lower_bound != 0.0) md["gate_lower_bound"] = exact(opt.gate_lower_bound);
  return md;
}

Status SaveCase(const std::string& path, const Inputs& in, const Options& opt) {
  return WriteSafetensors(path, CaseTensors(in), CaseMetadata(opt));
}

Status SaveCaseFiles(FileKind kind, const std::string& path, const Inputs& in, const Options& opt) {
  return WriteTensorBundle(kind, path, CaseTensors(in), CaseMetadata(opt));
}

void OutputBuffers::Free::operator()(void* p) const { std::free(p); }

namespace {

// Rows of checkpoint_states: the sum over sequences of floor(len / every);
// 0 where seq_lens is not yet known to be int32 [B] (Validate then refuses it).
int64_t CheckpointRows(const Inputs& in, int64_t every) {
  if (every <= 0 || in.seq_lens.dtype != DType::kI32 || in.seq_lens.rank != 1) return 0;
  const auto* lens = static_cast<const int32_t*>(in.seq_lens.data);
  int64_t rows = 0;
  for (int64_t b = 0; b < in.seq_lens.shape[0]; ++b) rows += std::max<int32_t>(lens[b], 0) / every;
  return rows;
}

// Outputs of the shapes and dtypes SPEC 2 (and 6d) implies, at addresses no
// process maps; meaningless (and harmless) until Validate has passed.
Outputs ProbeOutputs(const Inputs& in, const Options& opt) {
  const int64_t T = in.query.shape[0], Dk = in.query.shape[2], Nv = in.value.shape[1], Dv = in.value.shape[2];
  const int64_t slots = in.state_indices.present() ? in.initial_state.shape[0] : in.seq_lens.shape[0];
  const bool kv = opt.state_layout == StateLayout::kKV;
  const DType out_dt = in.query.dtype;
  const DType state_dt = in.initial_state.present() ? in.initial_state.dtype : out_dt;
  Outputs probe;
  probe.out = TensorView(Placeholder(0), out_dt, {T, Nv, Dv});
  probe.final_state = TensorView(Placeholder(1), state_dt, {slots, Nv, kv ? Dk : Dv, kv ? Dv : Dk});
  if (opt.checkpoint_every > 0) {
    const int64_t rows = CheckpointRows(in, opt.checkpoint_every);
    probe.checkpoint_states = TensorView(Placeholder(2), DType::kF32, {rows, Nv, kv ? Dk : Dv, kv ? Dv : Dk});
  }
  return probe;
}

int64_t ByteCount(const TensorView& t) { return t.numel() * static_cast<int64_t>(DTypeSize(t.dtype)); }

// A zero-filled buffer for `probe`, and the view of it; false if out of memory.
bool Allocate(const TensorView& probe, std::unique_ptr<void, OutputBuffers::Free>* buf, TensorView* view) {
  if (!probe.present()) return true;
  buf->reset(ZeroAlloc(ByteCount(probe)));
  *view = probe;
  view->data = buf->get();
  return *buf != nullptr;
}

Status OutOfMemory(const std::vector<std::pair<const char*, TensorView>>& tensors) {
  std::string list;
  for (const auto& [name, t] : tensors) {
    if (t.present()) list += Cat(list.empty() ? "" : ", ", name, " ", t.ShapeString(), " (", ByteCount(t), " bytes)");
  }
  return Status(Code::kResourceExhausted, Cat("cannot allocate the outputs: ", list));
}

// A copy of a pool: the run overwrites the slots it names, the rest stays as read.
void CopyPool(const TensorView& pool, const TensorView& copy) {
  if (pool.present() && copy.present()) std::memcpy(copy.data, pool.data, static_cast<size_t>(ByteCount(pool)));
}

}  // namespace

Status ValidateInputs(const Inputs& in, const Options& opt, Problem* problem) {
  return Validate(in, ProbeOutputs(in, opt), opt, problem);
}

Status PrepareOutputs(const Inputs& in, const Options& opt, OutputBuffers* ob) {
  const Outputs probe = ProbeOutputs(in, opt);
  Problem problem;
  Status s = Validate(in, probe, opt, &problem);
  if (!s.ok()) return s;

  OutputBuffers b;
  if (!Allocate(probe.out, &b.out, &b.views.out) ||
      !Allocate(probe.final_state, &b.final_state, &b.views.final_state) ||
      !Allocate(probe.checkpoint_states, &b.checkpoint_states, &b.views.checkpoint_states)) {
    return OutOfMemory({{"out", probe.out}, {"final_state", probe.final_state},
                        {"checkpoint_states", probe.checkpoint_states}});
  }
  if (in.state_indices.present()) CopyPool(in.initial_state, b.views.final_state);
  b.problem = std::move(problem);
  *ob = std::move(b);
  return Status::Ok();
}

Status PrepareDecodeOutputs(const DecodeCase& c, const Options& opt, DecodeBuffers* db) {
  const DecodeInputs& in = c.inputs;
  const TensorView& pool = in.state_pool;
  DecodeOutputs probe;
  std::vector<int64_t> out_shape(in.value.shape.begin(), in.value.shape.begin() + std::max(in.value.rank, 0));
  probe.out = TensorView(Placeholder(0), in.query.dtype, out_shape);
  if (c.output_states && pool.rank == 4) {
    const int64_t rows = in.value.shape[0] * (in.value.rank == 4 ? in.value.shape[1] : 1);
    probe.states = TensorView(Placeholder(1), pool.dtype, {rows, pool.shape[1], pool.shape[2], pool.shape[3]});
  }
  DecodeProblem problem;
  CGDR_TRY(ValidateDecode(in, probe, opt, &problem));

  DecodeBuffers b;
  b.inputs = in;
  const TensorView pool_probe(Placeholder(2), pool.dtype, std::vector<int64_t>(pool.shape.begin(), pool.shape.end()));
  if (!Allocate(probe.out, &b.out, &b.views.out) || !Allocate(probe.states, &b.states, &b.views.states) ||
      !Allocate(pool_probe, &b.pool, &b.final_pool)) {
    return OutOfMemory({{"out", probe.out}, {"states", probe.states}, {"final_state", pool_probe}});
  }
  CopyPool(pool, b.final_pool);
  b.inputs.state_pool = b.final_pool;
  b.problem = std::move(problem);
  *db = std::move(b);
  return Status::Ok();
}

std::vector<SafetensorsWriteTensor> ResultTensors(const Outputs& out) {
  std::vector<SafetensorsWriteTensor> t{{"out", out.out}};
  if (out.final_state.present()) t.emplace_back("final_state", out.final_state);
  if (out.checkpoint_states.present()) t.emplace_back("checkpoint_states", out.checkpoint_states);
  return t;
}

// state_layout, and checkpoint_every when the result holds checkpoints (cgdr check reads it).
std::map<std::string, std::string> ResultMetadata(const Options& opt) {
  std::map<std::string, std::string> md{{"state_layout", StateLayoutName(opt.state_layout)}};
  if (opt.checkpoint_every > 0) md["checkpoint_every"] = std::to_string(opt.checkpoint_every);
  return md;
}

Status SaveResult(const std::string& path, const Outputs& out, const Options& opt) {
  return WriteSafetensors(path, ResultTensors(out), ResultMetadata(opt));
}

Status SaveResultFiles(FileKind kind, const std::string& path, const Outputs& out, const Options& opt) {
  return WriteTensorBundle(kind, path, ResultTensors(out), ResultMetadata(opt));
}

Status SaveDecodeResult(const std::string& path, const DecodeBuffers& d, const Options& opt) {
  std::vector<SafetensorsWriteTensor> t{{"out", d.views.out}, {"final_state", d.final_pool}};
  if (d.views.states.present()) t.emplace_back("states", d.views.states);
  return WriteSafetensors(path, t, ResultMetadata(opt));
}

Status LoadResult(const std::string& path, LoadedResult* out) {
  LoadedResult r;
  Status s = ReadSafetensors(path, &r.file);
  if (!s.ok()) return s;
  s = AssembleResult(path, NamedTensors(r.file), false, &r.outputs, &r.states);
  if (!s.ok()) return s;
  *out = std::move(r);
  return Status::Ok();
}

Status LoadResultFiles(const std::string& path, ResultFiles* out) {
  ResultFiles r;
  Status s = ReadTensorBundle(path, &r.files);
  if (!s.ok()) return s;
  for (const auto& [key, v] : r.files.metadata()) {
    if (key == "state_layout" && v != "vk" && v != "kv") {
      return Fail(path, Cat("metadata 'state_layout' is \"", PrintableName(v), "\", expected \"vk\" or \"kv\""));
    }
  }
  s = AssembleResult(path, r.files.tensors(), true, &r.outputs);
  if (!s.ok()) return s;
  *out = std::move(r);
  return Status::Ok();
}

}  // namespace cgdr
