// _cgdr: the thin native layer under the `cgdr` Python package. It turns
// tensor arguments into cgdr::TensorView (no copies), calls the C++ API with
// the GIL released, and turns a failed cgdr::Status into a Python exception
// carrying the C++ message. Shapes, layouts and allocation are the Python
// layer's job (cgdr/__init__.py).
//
// A tensor argument is one of:
//   None                         an absent optional tensor
//   a numpy array                read through the buffer protocol; must be
//                                C-contiguous, float16/float32/int32
//   (data_ptr, dtype, shape)     a raw pointer from the Python layer (torch
//                                tensors, bfloat16 included); dtype is
//                                "f16", "bf16", "f32" or "i32"
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <string>
#include <vector>

#include "cgdr/cgdr.hpp"
#include "bench/peak.h"
#include "core/alloc.h"
#include "core/cpu_features.h"
#include "cgdr/decode.hpp"
#include "golden/compare.h"
#include "golden/golden.h"

namespace py = pybind11;

namespace {

// Non-null stand-in for zero-size tensors (torch reports data_ptr() == 0 for
// them, which validation would read as "missing").
alignas(64) uint8_t g_empty[64];

[[noreturn]] void TypeError(const std::string& msg) { throw py::type_error(msg); }
[[noreturn]] void ValueError(const std::string& msg) { throw py::value_error(msg); }

cgdr::DType NumpyDType(const char* name, const py::array& a) {
  // kind and itemsize through Python attributes: pybind11 before 2.12 reads
  // them from numpy 1's descriptor struct, whose layout numpy 2 changed (a
  // module built on Debian's pybind11 then saw int32 as something else).
  const py::dtype dt = a.dtype();
  const auto kind = dt.attr("kind").cast<std::string>().at(0);
  const auto size = dt.attr("itemsize").cast<int64_t>();
  if (kind == 'f' && size == 2) return cgdr::DType::kF16;
  if (kind == 'f' && size == 4) return cgdr::DType::kF32;
  if (kind == 'i' && size == 4) return cgdr::DType::kI32;
  TypeError(std::string(name) + ": expected a numpy array of float16, float32 (or int32 for indices), got dtype " +
            dt.attr("name").cast<std::string>());
}

// Numpy path: the buffer itself, checked for layout and writability.
cgdr::TensorView FromNumpy(const char* name, const py::array& a, bool writable) {
  if (!(a.flags() & py::array::c_style)) {
    ValueError(std::string(name) + ": expected a C-contiguous array (the Python layer copies inputs; outputs and "
                                   "in-place states must be contiguous)");
  }
  if (writable && !a.writeable()) ValueError(std::string(name) + ": expected a writable array, got a read-only one");
  std::vector<int64_t> shape(a.shape(), a.shape() + a.ndim());
  const void* data = a.size() == 0 ? g_empty : a.data();
  return cgdr::TensorView(data, NumpyDType(name, a), shape);
}

// Raw path: (data_ptr, dtype, shape) built by the Python layer from a tensor
// it holds a reference to for the duration of the call.
cgdr::TensorView FromTuple(const char* name, const py::tuple& t) {
  if (t.size() != 3) TypeError(std::string(name) + ": expected (data_ptr, dtype, shape), got a tuple of " + std::to_string(t.size()));
  const auto ptr = t[0].cast<uintptr_t>();
  const auto dtype_name = t[1].cast<std::string>();
  const auto shape = t[2].cast<std::vector<int64_t>>();
  cgdr::DType dt;
  if (!cgdr::ParseDType(dtype_name, &dt)) TypeError(std::string(name) + ": unknown dtype '" + dtype_name + "'");
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  const void* data = ptr == 0 && n == 0 ? g_empty : reinterpret_cast<const void*>(ptr);
  return cgdr::TensorView(data, dt, shape);
}

cgdr::TensorView ToView(const char* name, const py::object& obj, bool writable = false) {
  if (obj.is_none()) return cgdr::TensorView();
  if (py::isinstance<py::array>(obj)) return FromNumpy(name, obj.cast<py::array>(), writable);
  if (py::isinstance<py::tuple>(obj)) return FromTuple(name, obj.cast<py::tuple>());
  TypeError(std::string(name) + ": expected None, a numpy array or (data_ptr, dtype, shape), got " +
            std::string(py::str(py::type::handle_of(obj))));
}

cgdr::Options MakeOptions(double scale, bool l2norm, const std::string& layout, int threads, const std::string& algo,
                          bool check_values, const std::string& precision = "auto", const std::string& engine = "auto",
                          int v_step = 0, int dk_bucket = 0) {
  cgdr::Options o;
  o.scale = scale;
  o.use_qk_l2norm = l2norm;
  if (layout == "vk") o.state_layout = cgdr::StateLayout::kVK;
  else if (layout == "kv") o.state_layout = cgdr::StateLayout::kKV;
  else ValueError("state_layout: expected 'vk' or 'kv', got '" + layout + "'");
  if (threads < 0) ValueError("threads: expected None/0 (all) or a positive count, got " + std::to_string(threads));
  o.threads = threads;
  if (!cgdr::ParseAlgo(algo, &o.algo)) {
    ValueError("algo: expected auto, recurrent, chunk16, chunk32, chunk64 or chunk128, got '" + algo + "'");
  }
  if (!cgdr::ParsePrecision(precision, &o.precision)) {
    ValueError("precision: expected auto, fp32, bf16, bf16x3 or bf16x4, got '" + precision + "'");
  }
  if (!cgdr::ParseEngine(engine, &o.engine)) {
    ValueError("engine: expected auto, vector, amx or amx-emu, got '" + engine + "'");
  }
  o.check_values = check_values;
  o.v_step = v_step;        // ranges: cgdr::Validate, with the call's Dk
  o.dk_bucket = dk_bucket;
  return o;
}

void Raise(const cgdr::Status& s) {
  switch (s.code()) {
    case cgdr::Code::kOk: return;
    case cgdr::Code::kInvalidArgument: throw py::value_error(s.message());
    case cgdr::Code::kResourceExhausted:
      PyErr_SetString(PyExc_MemoryError, s.message().c_str());
      throw py::error_already_set();
    default: throw std::runtime_error("cgdr internal error: " + s.message());
  }
}

// The tensors of SPEC 2.1 that prefill and golden both take.
cgdr::Inputs PrefillInputs(const py::object& query, const py::object& key, const py::object& value,
                           const py::object& beta, const py::object& g, const py::object& initial_state,
                           const py::object& seq_lens) {
  cgdr::Inputs in;
  in.query = ToView("query", query);
  in.key = ToView("key", key);
  in.value = ToView("value", value);
  in.beta = ToView("beta", beta);
  in.g = ToView("g", g);
  in.initial_state = ToView("initial_state", initial_state);
  in.seq_lens = ToView("seq_lens", seq_lens);
  return in;
}

void Prefill(const py::object& query, const py::object& key, const py::object& value, const py::object& beta,
             const py::object& g, const py::object& initial_state, const py::object& seq_lens, const py::object& out,
             const py::object& final_state, double scale, bool use_qk_l2norm, const std::string& state_layout,
             int threads, const std::string& algo, bool check_values, const std::string& precision,
             const std::string& engine, int v_step, int dk_bucket, const py::object& a, const py::object& A_log,
             const py::object& dt_bias, bool use_beta_sigmoid, const py::object& state_indices, int64_t state_slot_stride,
             const py::object& checkpoint_states, int64_t checkpoint_every, double qk_l2norm_eps,
             double gate_lower_bound) {
  cgdr::Inputs in = PrefillInputs(query, key, value, beta, g, initial_state, seq_lens);
  cgdr::Outputs o;
  in.a = ToView("a", a);
  in.A_log = ToView("A_log", A_log);
  in.dt_bias = ToView("dt_bias", dt_bias);
  in.state_indices = ToView("state_indices", state_indices);
  o.checkpoint_states = ToView("checkpoint_states", checkpoint_states, true);
  o.out = ToView("out", out, true);
  o.final_state = ToView("final_state", final_state, true);
  cgdr::Options opt =
      MakeOptions(scale, use_qk_l2norm, state_layout, threads, algo, check_values, precision, engine, v_step, dk_bucket);
  opt.use_beta_sigmoid = use_beta_sigmoid;
  opt.state_slot_stride = state_slot_stride;
  opt.checkpoint_every = checkpoint_every;
  opt.qk_l2norm_eps = qk_l2norm_eps;
  opt.gate_lower_bound = gate_lower_bound;  // 0: none; range checked by cgdr::Validate
  cgdr::Status s;
  {
    py::gil_scoped_release release;  // the arguments above keep every buffer alive
    s = cgdr::Run(in, o, opt);
  }
  Raise(s);
}

void Decode(const py::object& query, const py::object& key, const py::object& value, const py::object& beta,
            const py::object& g, const py::object& state_pool, const py::object& state_indices, const py::object& out,
            double scale, bool use_qk_l2norm, const std::string& state_layout, int threads, bool check_values,
            const py::object& a, const py::object& A_log, const py::object& dt_bias, bool use_beta_sigmoid,
            const py::object& dst_indices, const py::object& states, int64_t state_slot_stride,
            double qk_l2norm_eps, double gate_lower_bound) {
  cgdr::DecodeInputs in;
  cgdr::DecodeOutputs o;
  in.a = ToView("a", a);
  in.A_log = ToView("A_log", A_log);
  in.dt_bias = ToView("dt_bias", dt_bias);
  in.dst_indices = ToView("dst_indices", dst_indices);
  o.states = ToView("states", states, true);
  in.query = ToView("query", query);
  in.key = ToView("key", key);
  in.value = ToView("value", value);
  in.beta = ToView("beta", beta);
  in.g = ToView("g", g);
  in.state_pool = ToView("state_pool", state_pool, true);
  in.state_indices = ToView("state_indices", state_indices);
  o.out = ToView("out", out, true);
  cgdr::Options opt = MakeOptions(scale, use_qk_l2norm, state_layout, threads, "auto", check_values);
  opt.use_beta_sigmoid = use_beta_sigmoid;
  opt.state_slot_stride = state_slot_stride;
  opt.qk_l2norm_eps = qk_l2norm_eps;
  opt.gate_lower_bound = gate_lower_bound;
  cgdr::Status s;
  {
    py::gil_scoped_release release;
    s = cgdr::DecodeStep(in, o, opt);
  }
  Raise(s);
}

// cgdr.golden (python/cgdr/golden.py): golden, benchmark and (fault != "none")
// a faulty benchmark into the outputs the Python layer allocated.
void Golden(const py::object& query, const py::object& key, const py::object& value, const py::object& beta,
            const py::object& g, const py::object& initial_state, const py::object& seq_lens, const py::tuple& golden,
            const py::tuple& bench, const py::tuple& actual, double scale, bool use_qk_l2norm,
            const std::string& state_layout, int threads, const std::string& operands, const std::string& engine,
            const std::string& fault) {
  const cgdr::Inputs in = PrefillInputs(query, key, value, beta, g, initial_state, seq_lens);
  const auto outputs = [](const char* name, const py::tuple& t) {
    cgdr::Outputs o;
    o.out = ToView((std::string(name) + "['out']").c_str(), t[0], true);
    o.final_state = ToView((std::string(name) + "['final_state']").c_str(), t[1], true);
    return o;
  };
  const cgdr::Outputs go = outputs("golden", golden), bo = outputs("benchmark", bench), ao = outputs("actual", actual);
  const cgdr::Options opt = MakeOptions(scale, use_qk_l2norm, state_layout, threads, "auto", false);
  cgdr::golden::Profile prof;
  cgdr::golden::Fault f;
  if (!cgdr::golden::ParseOperands(operands, &prof.operands)) {
    ValueError("operands: expected 'bf16' or 'f16', got '" + operands + "'");
  }
  if (!cgdr::golden::ParseEngine(engine, &prof.engine)) {
    ValueError("engine: expected 'auto', 'kernels' or 'emulation', got '" + engine + "'");
  }
  if (!cgdr::golden::ParseFault(fault, &f)) {
    ValueError("fault: expected None, 'dropped-state', 'tail-mask', 'swapped-heads' or 'g-sign', got '" + fault + "'");
  }
  cgdr::Status s;
  {
    py::gil_scoped_release release;
    s = cgdr::golden::GoldenInto(in, opt, go);
    if (s.ok()) s = cgdr::golden::BenchmarkInto(in, opt, prof, bo);
    if (s.ok() && f != cgdr::golden::Fault::kNone) s = cgdr::golden::FaultyInto(in, opt, prof, f, ao);
  }
  Raise(s);
}

// cgdr.compare: the report of `cgdr compare --json`, as a JSON string.
std::string Compare(const py::tuple& golden, const py::tuple& bench, const py::tuple& actual,
                    const std::vector<int64_t>& seq_lens, const std::string& level, const std::string& dtype,
                    double eps, const std::string& state_layout, int threads) {
  const auto outputs = [](const char* name, const py::tuple& t) {
    cgdr::Outputs o;
    o.out = ToView((std::string(name) + "['out']").c_str(), t[0]);
    o.final_state = ToView((std::string(name) + "['final_state']").c_str(), t[1]);
    return o;
  };
  const cgdr::Outputs go = outputs("golden", golden), bo = outputs("benchmark", bench), ao = outputs("actual", actual);
  cgdr::golden::CompareOptions opt;
  if (!cgdr::golden::ParseLevel(level, &opt.level)) {
    ValueError("level: expected 'L0', 'L1' or 'L2', got '" + level + "'");
  }
  if (!dtype.empty()) {
    opt.dtype_given = true;
    if (!cgdr::ParseDType(dtype, &opt.dtype) || opt.dtype == cgdr::DType::kI32) {
      ValueError("dtype: expected None, 'bf16', 'f16' or 'f32', got '" + dtype + "'");
    }
  }
  opt.eps = eps;
  opt.seq_lens = seq_lens;
  opt.layout = MakeOptions(0.0, false, state_layout, threads, "auto", false).state_layout;
  opt.threads = threads;
  cgdr::golden::CompareReport report;
  cgdr::Status s;
  {
    py::gil_scoped_release release;
    s = cgdr::golden::Compare(go, bo, ao, opt, &report);
  }
  Raise(s);
  return cgdr::golden::ReportJson(report).dump();
}

}  // namespace

PYBIND11_MODULE(_cgdr, m) {
  m.doc() = "Native layer of the cgdr package (chunk gated delta rule on CPU). Use the `cgdr` package instead.";
  m.def("prefill", &Prefill, py::arg("query"), py::arg("key"), py::arg("value"), py::arg("beta"), py::arg("g"),
        py::arg("initial_state"), py::arg("seq_lens"), py::arg("out"), py::arg("final_state"), py::arg("scale"),
        py::arg("use_qk_l2norm"), py::arg("state_layout"), py::arg("threads"), py::arg("algo"),
        py::arg("check_values"), py::arg("precision") = "auto", py::arg("engine") = "auto", py::arg("v_step") = 0,
        py::arg("dk_bucket") = 0, py::arg("a") = py::none(), py::arg("A_log") = py::none(),
        py::arg("dt_bias") = py::none(), py::arg("use_beta_sigmoid") = false, py::arg("state_indices") = py::none(),
        py::arg("state_slot_stride") = 0, py::arg("checkpoint_states") = py::none(), py::arg("checkpoint_every") = 0,
        py::arg("qk_l2norm_eps") = 1e-6, py::arg("gate_lower_bound") = 0.0,
        "Runs cgdr::Run on packed TND tensors (see SPEC 2, 6d; g or a [T, Nv, Dk]: KDA's per-channel gate); writes "
        "out, final_state and checkpoint_states in place.");
  m.def("decode_step", &Decode, py::arg("query"), py::arg("key"), py::arg("value"), py::arg("beta"), py::arg("g"),
        py::arg("state_pool"), py::arg("state_indices"), py::arg("out"), py::arg("scale"), py::arg("use_qk_l2norm"),
        py::arg("state_layout"), py::arg("threads"), py::arg("check_values"), py::arg("a") = py::none(),
        py::arg("A_log") = py::none(), py::arg("dt_bias") = py::none(), py::arg("use_beta_sigmoid") = false,
        py::arg("dst_indices") = py::none(), py::arg("states") = py::none(), py::arg("state_slot_stride") = 0,
        py::arg("qk_l2norm_eps") = 1e-6, py::arg("gate_lower_bound") = 0.0, "Runs cgdr::DecodeStep (a token axis: SPEC 6d); updates state_pool in place and writes out and states.");
  m.def("active_target", &cgdr::ActiveTarget, "The SIMD target dispatch uses (AVX3, AVX2, SSE4, ...).");
  m.def("cpu_description", &cgdr::CpuDescription,
        "The CPU for a figure's caption: its brand string, AMD's core generation, family and model.");
  m.def(
      "fma_peak",
      [](int threads, double seconds) {
        py::gil_scoped_release release;
        return cgdr::MeasureFmaPeak(threads, seconds).gflops;
      },
      py::arg("threads"), py::arg("seconds") = 0.2,
      "The FP32 FMA peak (GFLOP/s) of `threads` threads at once, measured now (the bench's: SPEC 8's % of peak).");
  m.def(
      "advise_huge_pages",
      [](uintptr_t address, size_t nbytes) { return cgdr::AdviseHugePages(reinterpret_cast<void*>(address), nbytes); },
      py::arg("address"), py::arg("nbytes"),
      "madvise(MADV_HUGEPAGE) on the whole pages of a new output buffer before its first touch; whether the kernel "
      "took it (docs/python.md).");
  m.def("golden", &Golden, py::arg("query"), py::arg("key"), py::arg("value"), py::arg("beta"), py::arg("g"),
        py::arg("initial_state"), py::arg("seq_lens"), py::arg("golden"), py::arg("benchmark"), py::arg("actual"),
        py::arg("scale"), py::arg("use_qk_l2norm"), py::arg("state_layout"), py::arg("threads"), py::arg("operands"),
        py::arg("engine"), py::arg("fault"),
        "Golden, benchmark and (fault) faulty results into (out, final_state) tuples (docs/golden.md).");
  m.def("compare", &Compare, py::arg("golden"), py::arg("benchmark"), py::arg("actual"), py::arg("seq_lens"),
        py::arg("level"), py::arg("dtype"), py::arg("eps"), py::arg("state_layout"), py::arg("threads"),
        "The precision standard's report (docs/golden.md) as JSON text.");
}
