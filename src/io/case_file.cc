#include "io/case_file.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <new>
#include <sstream>

#include "core/strcat.h"

namespace cgdr {
namespace {

Status Fail(const std::string& path, const std::string& msg) { return Status::Invalid(Cat(path, ": ", msg)); }

// Tensor names of SPEC 2 and the raw gate of SPEC 6d; `out` and
// `final_state` may ride along in a case (expected results) and are ignored
// there.
const char* const kCaseTensors[] = {"query",    "key", "value",       "beta", "g",     "a", "A_log", "dt_bias",
                                    "initial_state", "seq_lens", "out", "final_state"};
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

// `scale` must be a plain finite decimal: a typo must not silently become 0.
Status ParseScale(const std::string& path, const std::string& v, double* scale) {
  double x = 0.0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (v.empty() || ec != std::errc() || end != v.data() + v.size() || !std::isfinite(x)) {
    return Fail(
        path, Cat("metadata 'scale' is \"", PrintableName(v), "\", expected a finite decimal number (0 = 1/sqrt(Dk))"));
  }
  *scale = x;
  return Status::Ok();
}

Status ParseMetadata(const std::string& path, const std::map<std::string, std::string>& md, Options* opt) {
  for (const auto& [key, v] : md) {
    if (key == "scale") {
      Status s = ParseScale(path, v, &opt->scale);
      if (!s.ok()) return s;
    } else if (key == "state_layout") {
      if (v != "vk" && v != "kv")
        return Fail(path, Cat("metadata 'state_layout' is \"", PrintableName(v), "\", expected \"vk\" or \"kv\""));
      opt->state_layout = v == "kv" ? StateLayout::kKV : StateLayout::kVK;
    } else if (key == "use_qk_l2norm") {
      if (v != "true" && v != "false") {
        return Fail(path,
                    Cat("metadata 'use_qk_l2norm' is \"", PrintableName(v), "\", expected \"true\" or \"false\""));
      }
      opt->use_qk_l2norm = v == "true";
    } else if (key == "use_beta_sigmoid") {
      if (v != "true" && v != "false") {
        return Fail(path,
                    Cat("metadata 'use_beta_sigmoid' is \"", PrintableName(v), "\", expected \"true\" or \"false\""));
      }
      opt->use_beta_sigmoid = v == "true";
    } else if (key != "format") {  // "format" is what safetensors' own Python helpers add
      return Fail(path,
                  Cat("unknown metadata key '", PrintableName(key), "' (expected scale, state_layout, use_qk_l2norm, use_beta_sigmoid)"));
    }
  }
  return Status::Ok();
}

// Addresses no process maps (above the 47/57-bit user space) for a validation
// pass before allocating: Validate compares output address ranges with the
// inputs' but never touches output memory, so these make the pass about shapes
// alone. Ranges: out <= 2^61 bytes from 2^62, final_state from 2^62 + 2^61.
static_assert(sizeof(void*) == 8, "placeholder output addresses need a 64-bit address space");
void* Placeholder(int i) { return reinterpret_cast<void*>((uintptr_t{1} << 62) + uintptr_t(i) * (uintptr_t{1} << 61)); }

// Zero-filled without touching the pages (large calloc maps fresh zero pages).
void* ZeroAlloc(int64_t bytes) { return std::calloc(static_cast<size_t>(bytes > 0 ? bytes : 1), 1); }

// The checks and views every case file kind shares: known and required tensor
// names, the metadata, and views of the tensors by name.
Status AssembleCase(const std::string& path, const std::vector<NamedTensor>& tensors,
                    const std::map<std::string, std::string>& metadata, Inputs* in, Options* opt) {
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
  for (const char* name : kRequired) {
    if (!view(name).present()) return Fail(path, Cat("missing required tensor '", name, "'"));
  }
  Status s = ParseMetadata(path, metadata, opt);
  if (!s.ok()) return s;
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
  return Status::Ok();
}

// out and final_state by name; final_state may be absent when `state_optional`.
Status AssembleResult(const std::string& path, const std::vector<NamedTensor>& tensors, bool state_optional,
                      Outputs* out) {
  for (const auto& t : tensors) {
    if (t.name == "out") {
      out->out = t.view;
    } else if (t.name == "final_state") {
      out->final_state = t.view;
    } else {
      return Fail(path, Cat("unknown tensor '", PrintableName(t.name), "' (expected out, final_state)"));
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
  s = AssembleCase(path, NamedTensors(c.file), c.file.metadata(), &c.inputs, &c.options);
  if (!s.ok()) return s;
  *out = std::move(c);  // views point into heap buffers the move keeps
  return Status::Ok();
}

Status LoadCaseFiles(const std::string& path, CaseFiles* out) {
  CaseFiles c;
  Status s = ReadTensorBundle(path, &c.files);
  if (!s.ok()) return s;
  s = AssembleCase(path, c.files.tensors(), c.files.metadata(), &c.inputs, &c.options);
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
  return t;
}

std::map<std::string, std::string> CaseMetadata(const Options& opt) {
  std::map<std::string, std::string> md{{"state_layout", StateLayoutName(opt.state_layout)},
                                        {"use_qk_l2norm", opt.use_qk_l2norm ? "true" : "false"}};
  if (opt.use_beta_sigmoid) md["use_beta_sigmoid"] = "true";  // absent: false (files of older versions stay the same)
  if (std::isfinite(opt.scale) && opt.scale != 0.0) {
    char buf[64];
    const auto r = std::to_chars(buf, buf + sizeof buf, opt.scale);  // shortest form that reads back exactly
    md["scale"] = std::string(buf, r.ptr);
  }
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

// Outputs of the shapes and dtypes SPEC 2 implies, at addresses no process
// maps; meaningless (and harmless) until Validate has passed.
Outputs ProbeOutputs(const Inputs& in, const Options& opt) {
  const int64_t T = in.query.shape[0], Dk = in.query.shape[2], Nv = in.value.shape[1], Dv = in.value.shape[2];
  const int64_t B = in.seq_lens.shape[0];
  const bool kv = opt.state_layout == StateLayout::kKV;
  const DType out_dt = in.query.dtype;
  const DType state_dt = in.initial_state.present() ? in.initial_state.dtype : out_dt;
  Outputs probe;
  probe.out = TensorView(Placeholder(0), out_dt, {T, Nv, Dv});
  probe.final_state = TensorView(Placeholder(1), state_dt, {B, Nv, kv ? Dk : Dv, kv ? Dv : Dk});
  return probe;
}

}  // namespace

Status ValidateInputs(const Inputs& in, const Options& opt, Problem* problem) {
  return Validate(in, ProbeOutputs(in, opt), opt, problem);
}

Status PrepareOutputs(const Inputs& in, const Options& opt, OutputBuffers* ob) {
  const Outputs probe = ProbeOutputs(in, opt);
  const DType out_dt = probe.out.dtype, state_dt = probe.final_state.dtype;
  Problem problem;
  Status s = Validate(in, probe, opt, &problem);
  if (!s.ok()) return s;

  const int64_t out_bytes = probe.out.numel() * static_cast<int64_t>(DTypeSize(out_dt));
  const int64_t state_bytes = probe.final_state.numel() * static_cast<int64_t>(DTypeSize(state_dt));
  OutputBuffers b;
  b.out.reset(ZeroAlloc(out_bytes));
  b.final_state.reset(ZeroAlloc(state_bytes));
  if (!b.out || !b.final_state) {
    return Status(Code::kResourceExhausted,
                  Cat("cannot allocate the outputs: out ", probe.out.ShapeString(), " (", out_bytes,
                      " bytes) and final_state ", probe.final_state.ShapeString(), " (", state_bytes, " bytes)"));
  }
  b.views.out = probe.out;
  b.views.out.data = b.out.get();
  b.views.final_state = probe.final_state;
  b.views.final_state.data = b.final_state.get();
  b.problem = std::move(problem);
  *ob = std::move(b);
  return Status::Ok();
}

std::vector<SafetensorsWriteTensor> ResultTensors(const Outputs& out) {
  std::vector<SafetensorsWriteTensor> t{{"out", out.out}};
  if (out.final_state.present()) t.emplace_back("final_state", out.final_state);
  return t;
}

Status SaveResult(const std::string& path, const Outputs& out, const Options& opt) {
  return WriteSafetensors(path, ResultTensors(out), {{"state_layout", StateLayoutName(opt.state_layout)}});
}

Status SaveResultFiles(FileKind kind, const std::string& path, const Outputs& out, const Options& opt) {
  return WriteTensorBundle(kind, path, ResultTensors(out), {{"state_layout", StateLayoutName(opt.state_layout)}});
}

Status LoadResult(const std::string& path, LoadedResult* out) {
  LoadedResult r;
  Status s = ReadSafetensors(path, &r.file);
  if (!s.ok()) return s;
  s = AssembleResult(path, NamedTensors(r.file), false, &r.outputs);
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
