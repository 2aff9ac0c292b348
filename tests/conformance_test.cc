// Front-end conformance of the C++ API and the C API (issue 24): every option
// at a non-default value, end to end, prefill and decode, every dtype.
//
// The option lists are the single source. OptionFields() names every field of
// cgdr::Options through a structured binding, which stops compiling when a
// field is added; the C setters are read from include/cgdr/cgdr.h. A test
// fails while a field or a setter has no row in Rows().
//
// Each row sets one option (over a context of others it needs to show
// itself) through each front end, and the call must
//  - match the FP64 reference computed with the row's options, or fail with
//    the row's message;
//  - differ from the context alone where the row says the option shows: in
//    the status or the bits of out / final_state, or in the number of scratch
//    buffers the call took (one per worker thread: threads, v_step); rows of
//    options that must not change the bits (v_step, check_values on clean
//    data, the options decode ignores) must equal the context bit for bit;
//  - give what the C++ API gives: status code, bits and workers.
// python/tests/test_conformance.py and tests/cli_conformance_test.py hold
// the other front ends to the same table.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cgdr/cgdr.h"
#include "cgdr/cgdr.hpp"
#include "cgdr/decode.hpp"
#include "cgdr/plan.hpp"
#include "core/alloc.h"
#include "core/cpu_features.h"
#include "core/dtype.h"
#include "core/scan.h"
#include "c_args.h"
#include "core/synthetic.h"
#include "core/threads.h"
#include "reference/reference.h"
#include "test_util.h"

// A row names the fields it sets; the rest keep their defaults.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace cgdr {
using testing::ToCDecode;
using testing::ToCPrefill;
namespace {

using testing::PlanFor;

// ---- the option lists --------------------------------------------------------

template <class T>
std::string Text(const T& v) {
  std::ostringstream os;
  os << +v;
  return os.str();
}
template <class E>
std::string EnumText(E e) { return std::to_string(static_cast<int>(e)); }

// Every field of cgdr::Options with its value as text. When Options grows,
// this binding stops compiling: name the new field here, then give it a row.
std::vector<std::pair<std::string, std::string>> OptionFields(const Options& o) {
  const auto& [scale, use_qk_l2norm, state_layout, algo, threads, check_values, v_step, dk_bucket, precision, engine,
                checkpoint_every, state_slot_stride, use_beta_sigmoid, qk_l2norm_eps, gate_lower_bound] = o;
  return {{"scale", Text(scale)},         {"use_qk_l2norm", Text(use_qk_l2norm)}, {"state_layout", EnumText(state_layout)},
          {"algo", EnumText(algo)},       {"threads", Text(threads)},             {"check_values", Text(check_values)},
          {"v_step", Text(v_step)},       {"dk_bucket", Text(dk_bucket)},         {"precision", EnumText(precision)},
          {"engine", EnumText(engine)},   {"checkpoint_every", Text(checkpoint_every)},
          {"state_slot_stride", Text(state_slot_stride)}, {"use_beta_sigmoid", Text(use_beta_sigmoid)},
          {"qk_l2norm_eps", Text(qk_l2norm_eps)},         {"gate_lower_bound", Text(gate_lower_bound)}};
}

// The option setters of the C API, as include/cgdr/cgdr.h declares them.
std::set<std::string> CSetters() {
  std::ifstream f(std::string(CGDR_SOURCE_DIR) + "/include/cgdr/cgdr.h");
  std::stringstream text;
  text << f.rdbuf();
  const std::string s = text.str();
  std::set<std::string> names;
  const std::regex setter(R"(cgdr_options_set_([a-z0-9_]+)\s*\()");
  for (auto it = std::sregex_iterator(s.begin(), s.end(), setter); it != std::sregex_iterator(); ++it) {
    names.insert((*it)[1]);
  }
  return names;
}

// One option in both languages: the C++ field and the C setter that sets it.
struct Setter {
  std::string c_name;  // cgdr_options_set_<c_name>; empty for the no-op
  std::function<void(Options*)> cpp;
  std::function<cgdr_status(cgdr_options*)> c;
};

Setter Scale(double v) {
  return {"scale", [v](Options* o) { o->scale = v; }, [v](cgdr_options* h) { return cgdr_options_set_scale(h, v); }};
}
Setter L2norm() {
  return {"qk_l2norm", [](Options* o) { o->use_qk_l2norm = true; },
          [](cgdr_options* h) { return cgdr_options_set_qk_l2norm(h, 1); }};
}
Setter Layout(StateLayout l) {
  return {"state_layout", [l](Options* o) { o->state_layout = l; },
          [l](cgdr_options* h) { return cgdr_options_set_state_layout(h, static_cast<cgdr_state_layout>(l)); }};
}
Setter Threads(int n) {
  return {"threads", [n](Options* o) { o->threads = n; }, [n](cgdr_options* h) { return cgdr_options_set_threads(h, n); }};
}
Setter CheckValues() {
  return {"check_values", [](Options* o) { o->check_values = true; },
          [](cgdr_options* h) { return cgdr_options_set_check_values(h, 1); }};
}
Setter Chunk(Algo a) {  // the C chunk size is the enum's value (0 = auto)
  return {"chunk", [a](Options* o) { o->algo = a; },
          [a](cgdr_options* h) { return cgdr_options_set_chunk(h, static_cast<int>(a)); }};
}
Setter Prec(Precision p) {
  return {"precision", [p](Options* o) { o->precision = p; },
          [p](cgdr_options* h) { return cgdr_options_set_precision(h, static_cast<cgdr_precision>(p)); }};
}
Setter Eng(Engine e) {
  return {"engine", [e](Options* o) { o->engine = e; },
          [e](cgdr_options* h) { return cgdr_options_set_engine(h, static_cast<cgdr_engine>(e)); }};
}
Setter VStep(int v) {
  return {"v_step", [v](Options* o) { o->v_step = v; }, [v](cgdr_options* h) { return cgdr_options_set_v_step(h, v); }};
}
Setter DkBucket(int b) {
  return {"dk_bucket", [b](Options* o) { o->dk_bucket = b; },
          [b](cgdr_options* h) { return cgdr_options_set_dk_bucket(h, b); }};
}
// The serving options (docs/SPEC.md 6d).
Setter CheckpointEvery(int64_t e) {
  return {"checkpoint_every", [e](Options* o) { o->checkpoint_every = e; },
          [e](cgdr_options* h) { return cgdr_options_set_checkpoint_every(h, e); }};
}
Setter SlotStride(int64_t v) {
  return {"state_slot_stride", [v](Options* o) { o->state_slot_stride = v; },
          [v](cgdr_options* h) { return cgdr_options_set_state_slot_stride(h, v); }};
}
Setter BetaSigmoid() {
  return {"beta_sigmoid", [](Options* o) { o->use_beta_sigmoid = true; },
          [](cgdr_options* h) { return cgdr_options_set_beta_sigmoid(h, 1); }};
}
Setter L2normEps(double eps) {
  return {"qk_l2norm_eps", [eps](Options* o) { o->qk_l2norm_eps = eps; },
          [eps](cgdr_options* h) { return cgdr_options_set_qk_l2norm_eps(h, eps); }};
}
Setter GateLowerBound(double bound) {
  return {"gate_lower_bound", [bound](Options* o) { o->gate_lower_bound = bound; },
          [bound](cgdr_options* h) { return cgdr_options_set_gate_lower_bound(h, bound); }};
}
Setter NoOption() {  // tensor rows: the inputs change, not the options
  return {"", [](Options*) {}, [](cgdr_options*) { return CGDR_OK; }};
}

// ---- the rows ----------------------------------------------------------------

// What must differ from the context alone (the call without the row's option).
enum class Shows {
  kOutcome,  // the status or the bits of out / final_state
  kWorkers,  // the number of worker threads (scratch buffers taken)
  kSame,     // nothing: status and bits equal the context's
  kAny,      // not specified (bit-neutral options, tensor rows)
};

struct Row {
  std::string name;
  std::vector<Setter> context;
  Setter option;
  Shows prefill = Shows::kOutcome;
  Shows decode = Shows::kSame;  // decode reads scale, l2norm, layout, threads, check_values (SPEC 6b)
  std::string error;            // prefill must fail with this in the message (empty: succeed)
  std::string decode_error;     // decode must fail with this
  bool c_setter_rejects = false;  // the C setter itself refuses the value (with `error`)
  bool no_decode = false;         // output checks: decode scans no outputs
  std::function<void(CaseSpec*)> spec = [](CaseSpec*) {};
  std::function<void(Case*)> plant = [](Case*) {};
};

CaseSpec BaseSpec() {
  CaseSpec s;
  s.Nk = 2;
  s.Nv = 4;
  s.Dk = 40;
  s.Dv = 24;
  s.lens = {37, 0, 20};  // an empty sequence among them; 3 x 4 items, so 12 groups
  s.seed = 23;
  return s;
}

float* F32(Bytes& b) { return reinterpret_cast<float*>(b.data()); }

// Finite inputs whose results exceed a range, one output at a time (the
// output checks of check_values, SPEC 3): queries of 3e38 at token 3 overflow
// out alone (the state never reads q); a value of 1e8 at the last token of
// sequence 0 overflows an f16 final_state alone (out stays f32).
void PlantHugeQuery(Case* c) {
  for (int64_t i = 0; i < c->spec.Dk; ++i) F32(c->query)[3 * c->spec.Nk * c->spec.Dk + i] = 3e38f;
}
void F16State(CaseSpec* s) { s->state_dtype = DType::kF16; }
void PlantHugeLastValue(Case* c) {
  const int64_t last = c->spec.lens[0] - 1;
  for (int64_t i = 0; i < c->spec.Dv; ++i) F32(c->value)[(last * c->spec.Nv + 1) * c->spec.Dv + i] = 1e8f;
}

// Threads different from what 0 resolves to here, so the row shows.
int OtherThreadCount() { return ResolveThreadCount(0) == 1 ? 2 : 1; }

std::vector<Row> Rows() {
  const bool amx = AmxHardwareEnabled();
  const std::vector<Setter> bf16x3_vector{Prec(Precision::kBf16x3), Chunk(Algo::kChunk16), Eng(Engine::kVector)};
  const auto dk = [](int64_t d) { return [d](CaseSpec* s) { s->Dk = d; }; };
  std::vector<Row> rows{
      {"scale=0.37", {}, Scale(0.37), Shows::kOutcome, Shows::kOutcome},
      {"scale=-0.5", {}, Scale(-0.5), Shows::kOutcome, Shows::kOutcome},
      {"scale=NaN (the default)", {Scale(0.37)}, Scale(std::nan("")), Shows::kOutcome, Shows::kOutcome},
      {"scale=inf", {}, Scale(INFINITY), Shows::kOutcome, Shows::kOutcome, "options.scale: expected a finite number",
       "options.scale: expected a finite number"},
      {"use_qk_l2norm", {}, L2norm(), Shows::kOutcome, Shows::kOutcome, "", "", false, false,
       [](CaseSpec* s) { s->use_qk_l2norm = true; }},  // raw q, k rows: the norm matters
      // The eps of the norm: read only with use_qk_l2norm; 0 would make a zero row 0/0.
      {"qk_l2norm_eps=1e-2 with use_qk_l2norm", {L2norm()}, L2normEps(1e-2), Shows::kOutcome, Shows::kOutcome, "", "",
       false, false, [](CaseSpec* s) { s->use_qk_l2norm = true; }},
      {"qk_l2norm_eps=1e-2 without use_qk_l2norm", {}, L2normEps(1e-2), Shows::kSame, Shows::kSame},
      {"qk_l2norm_eps=0", {}, L2normEps(0.0), Shows::kOutcome, Shows::kOutcome,
       "options.qk_l2norm_eps: expected a finite number > 0, got 0",
       "options.qk_l2norm_eps: expected a finite number > 0, got 0"},
      {"state_layout=kv", {}, Layout(StateLayout::kKV), Shows::kOutcome, Shows::kOutcome, "", "", false, false,
       [](CaseSpec* s) { s->layout = StateLayout::kKV; }},
      {"threads=other", {}, Threads(OtherThreadCount()), Shows::kWorkers},
      {"threads=3", {}, Threads(3), Shows::kAny},
      {"threads=4096 (the limit)", {}, Threads(4096), Shows::kAny},
      {"threads=4097", {}, Threads(4097), Shows::kOutcome, Shows::kOutcome, "threads: expected 0 (all) .. 4096, got 4097",
       "threads: expected 0 (all) .. 4096, got 4097", true},
      {"threads=-1", {}, Threads(-1), Shows::kOutcome, Shows::kOutcome, "threads: expected 0 (all) .. 4096, got -1",
       "threads: expected 0 (all) .. 4096, got -1", true},
      {"check_values on clean inputs", {}, CheckValues(), Shows::kSame},
      {"check_values: NaN value", {}, CheckValues(), Shows::kOutcome, Shows::kOutcome,
       "value: non-finite value nan at index [1, 1, 3]", "value: non-finite value nan at index [1, 1, 3]", false, false,
       [](CaseSpec*) {}, [](Case* c) { F32(c->value)[(1 * 4 + 1) * 24 + 3] = NAN; }},
      {"check_values: g > 0", {}, CheckValues(), Shows::kOutcome, Shows::kOutcome, "g: expected log-decay <= 0, got 0.25",
       "g: expected log-decay <= 0, got 0.25", false, false, [](CaseSpec*) {}, [](Case* c) { F32(c->g)[2] = 0.25f; }},
      {"check_values: out overflows", {}, CheckValues(), Shows::kOutcome, Shows::kSame, "out: non-finite value", "",
       false, true, [](CaseSpec*) {}, PlantHugeQuery},
      {"check_values: final_state overflows", {}, CheckValues(), Shows::kOutcome, Shows::kSame,
       "final_state: non-finite value inf at index [0, 1, ", "", false, true, F16State, PlantHugeLastValue},
      {"algo=recurrent", {Chunk(Algo::kChunk64)}, Chunk(Algo::kRecurrent)},
      {"algo=chunk16", {Chunk(Algo::kChunk64)}, Chunk(Algo::kChunk16)},
      {"algo=chunk32", {Chunk(Algo::kChunk64)}, Chunk(Algo::kChunk32)},
      {"algo=chunk64", {Chunk(Algo::kChunk16)}, Chunk(Algo::kChunk64)},
      {"algo=chunk128", {Chunk(Algo::kChunk16)}, Chunk(Algo::kChunk128), Shows::kOutcome, Shows::kSame, "", "", false,
       false, [](CaseSpec* s) { s->lens = {137, 0, 20}; }},  // past one chunk of 128
      {"algo=auto", {Chunk(Algo::kChunk64)}, Chunk(Algo::kAuto), Shows::kAny},
      {"precision=fp32 (f16, amx-emu)", {Chunk(Algo::kChunk16), Eng(Engine::kAmxEmulated)}, Prec(Precision::kFp32),
       Shows::kOutcome, Shows::kSame, "", "", false, false, [](CaseSpec* s) { s->dtype = DType::kF16; }},
      {"precision=bf16", {Chunk(Algo::kChunk16), Eng(Engine::kVector)}, Prec(Precision::kBf16)},
      {"precision=bf16x3", {Chunk(Algo::kChunk16), Eng(Engine::kVector)}, Prec(Precision::kBf16x3)},
      {"precision=bf16x4", {Chunk(Algo::kChunk16), Eng(Engine::kVector)}, Prec(Precision::kBf16x4)},
      // The lo*lo term of bf16x4 shows in the bits, on both engines.
      {"precision=bf16x4 over bf16x3 (vector)", bf16x3_vector, Prec(Precision::kBf16x4)},
      {"precision=bf16x4 over bf16x3 (amx-emu)",
       {Prec(Precision::kBf16x3), Chunk(Algo::kChunk16), Eng(Engine::kAmxEmulated)}, Prec(Precision::kBf16x4)},
      {"precision=auto (f32: fp32)", {Chunk(Algo::kChunk16), Prec(Precision::kFp32)}, Prec(Precision::kAuto), Shows::kSame},
      // A tile engine named with precision auto runs bf16x3 on f16 inputs (SPEC 6c), not fp32.
      {"precision=auto (f16, amx-emu: bf16x3)", {Chunk(Algo::kChunk16), Eng(Engine::kAmxEmulated), Prec(Precision::kFp32)},
       Prec(Precision::kAuto), Shows::kOutcome, Shows::kSame, "", "", false, false,
       [](CaseSpec* s) { s->dtype = DType::kF16; }},
      {"engine=vector", {Prec(Precision::kBf16x3), Chunk(Algo::kChunk16), Eng(Engine::kAmxEmulated)}, Eng(Engine::kVector)},
      {"engine=amx-emu", bf16x3_vector, Eng(Engine::kAmxEmulated)},
      {"engine=amx", bf16x3_vector, Eng(Engine::kAmx), amx ? Shows::kOutcome : Shows::kSame},
      {"engine=auto", bf16x3_vector, Eng(Engine::kAuto), amx ? Shows::kOutcome : Shows::kSame},
      // One sequence, one head, 4 threads: the plan splits V into 4 tiles for
      // them, unless v_step forces one.
      {"v_step=64 (one tile)", {Threads(4)}, VStep(64), Shows::kWorkers, Shows::kSame, "", "", false, false,
       [](CaseSpec* s) { s->Nk = 1; s->Nv = 1; s->Dv = 64; s->lens = {40}; }},
      {"v_step=16", {}, VStep(16), Shows::kSame},
      {"v_step=256 (the limit)", {}, VStep(256), Shows::kSame},
      {"v_step=257", {}, VStep(257), Shows::kOutcome, Shows::kSame, "v_step: expected 0 (auto) .. 256, got 257", "", true},
      // Serving (docs/SPEC.md 6d): beta's sigmoid changes both calls; checkpoints
      // need their tensor (decode ignores the option); a stride below a slot is
      // refused by both, a negative one by the C setter too.
      {"use_beta_sigmoid", {}, BetaSigmoid(), Shows::kOutcome, Shows::kOutcome},
      // KDA's bounded gate (SPEC 10): read only with the raw gate a.
      {"gate_lower_bound=-5 without a", {}, GateLowerBound(-5.0), Shows::kOutcome, Shows::kOutcome,
       "options.gate_lower_bound: given without the raw gate 'a' it applies to",
       "options.gate_lower_bound: given without the raw gate 'a' it applies to"},
      {"gate_lower_bound=0.5", {}, GateLowerBound(0.5), Shows::kOutcome, Shows::kOutcome,
       "options.gate_lower_bound: expected 0 (none) or a finite bound < 0, got 0.5",
       "options.gate_lower_bound: expected 0 (none) or a finite bound < 0, got 0.5"},
      {"checkpoint_every=8 without checkpoint_states", {}, CheckpointEvery(8), Shows::kOutcome, Shows::kSame,
       "checkpoint_states: required tensor is missing (options.checkpoint_every = 8)"},
      {"checkpoint_every=-1", {}, CheckpointEvery(-1), Shows::kOutcome, Shows::kSame,
       "checkpoint_every: expected 0 (none) or a positive token count, got -1", "", true},
      {"state_slot_stride=1 (below a slot)", {}, SlotStride(1), Shows::kOutcome, Shows::kOutcome,
       "options.state_slot_stride: expected 0 (dense) or 3840 (Nv * Dk * Dv)",
       "options.state_slot_stride: expected 0 (dense) or 3840 (Nv * Dk * Dv)"},
      {"state_slot_stride=-1", {}, SlotStride(-1), Shows::kOutcome, Shows::kOutcome,
       "state_slot_stride: expected 0 (dense) or", "state_slot_stride: expected 0 (dense) or", true},
      {"dk_bucket=-1 (generic)", {}, DkBucket(-1), Shows::kAny},
      {"dk_bucket=64", {}, DkBucket(64), Shows::kAny},
      {"dk_bucket=80", {}, DkBucket(80), Shows::kAny},
      {"dk_bucket=96", {}, DkBucket(96), Shows::kAny},
      {"dk_bucket=128", {}, DkBucket(128), Shows::kAny},
      {"dk_bucket=64 below Dk=65", {}, DkBucket(64), Shows::kOutcome, Shows::kSame,
       "dk_bucket: expected 0 (auto), -1 (generic) or one of 64, 80, 96, 128 >= Dk = 65, got 64", "", false, false, dk(65)},
      {"dk_bucket=128 at Dk=128", {}, DkBucket(128), Shows::kAny, Shows::kSame, "", "", false, false, dk(128)},
      {"dk_bucket=72", {}, DkBucket(72), Shows::kOutcome, Shows::kSame, "dk_bucket: expected 0 (auto), -1 (generic)", "",
       true},
      {"no g", {}, NoOption(), Shows::kAny, Shows::kAny, "", "", false, false, [](CaseSpec* s) { s->has_g = false; }},
      {"no initial_state", {}, NoOption(), Shows::kAny, Shows::kAny, "", "", false, false,
       [](CaseSpec* s) { s->has_initial_state = false; }},
      {"no final_state", {}, NoOption(), Shows::kAny, Shows::kAny, "", "", false, false,
       [](CaseSpec* s) { s->want_final_state = false; }},
  };
  return rows;
}

// ---- the front ends ----------------------------------------------------------

// What a call did: status, outputs, and how many scratch buffers it took.
struct Observation {
  int code = 0;
  std::string message;
  Bytes out, state;
  int workers = 0;
};


// A decode step over a 1-token-per-sequence case: N = 4 rows on a pool of 5
// states, indices {3, -1, 0, 4} (row 1 skipped; pool rows 1 and 2 untouched).
// The case's initial states are the states the live rows start from, so its
// FP64 reference (4 sequences of one token) is the step's.
struct DecodeCase {
  static constexpr int32_t kIndex[4] = {3, -1, 0, 4};
  static constexpr int64_t kPool = 5;
  Case c;
  Bytes pool, out;
  std::vector<int32_t> idx{std::begin(kIndex), std::end(kIndex)};
  int64_t state_bytes = 0;

  explicit DecodeCase(CaseSpec s) {
    s.lens = {1, 1, 1, 1};
    s.has_initial_state = true;
    s.want_final_state = true;
    c = MakeCase(s);
    state_bytes = static_cast<int64_t>(c.initial_state.size()) / 4;
    CaseSpec fill = s;
    fill.lens = {1, 1, 1, 1, 1};
    fill.seed = s.seed + 1;
    pool = MakeCase(fill).initial_state;  // rows no index names keep these values
    for (int n = 0; n < 4; ++n) {
      if (kIndex[n] >= 0) std::memcpy(Row(kIndex[n]), c.initial_state.data() + n * state_bytes, state_bytes);
    }
    out.assign(c.out.size(), 0xA5);
  }
  uint8_t* Row(int64_t p) { return pool.data() + p * state_bytes; }
  DecodeInputs Inputs() {
    const cgdr::Inputs in = c.inputs();
    DecodeInputs d;
    d.query = in.query;
    d.key = in.key;
    d.value = in.value;
    d.beta = in.beta;
    d.g = in.g;
    d.state_pool = in.initial_state;
    d.state_pool.data = pool.data();
    d.state_pool.shape[0] = kPool;
    d.state_indices = TensorView(idx.data(), DType::kI32, {4});
    return d;
  }
  DecodeOutputs Outputs() { return {TensorView(out.data(), c.spec.dtype, {4, c.spec.Nv, c.spec.Dv})}; }
};

struct FrontEnd {
  std::string name;
  std::function<Observation(const std::vector<Setter>&, Case&)> prefill;
  std::function<Observation(const std::vector<Setter>&, DecodeCase&)> decode;
};

Options OptionsOf(const std::vector<Setter>& setters) {
  Options o;
  for (const Setter& s : setters) s.cpp(&o);
  return o;
}

// Runs `call`, counting the scratch buffers it took: the cache is emptied
// first, and every lease goes back to it at the end of the call.
template <class F>
Observation Observe(F&& call) {
  testing_hooks::DropCachedScratch();
  Observation ob;
  std::tie(ob.code, ob.message) = call();
  ob.workers = testing_hooks::DropCachedScratch();
  return ob;
}

std::pair<int, std::string> Of(const Status& s) { return {static_cast<int>(s.code()), s.message()}; }
std::pair<int, std::string> Of(cgdr_status s) { return {static_cast<int>(s), s == CGDR_OK ? "" : cgdr_last_error()}; }

FrontEnd Cpp() {
  return {"C++",
          [](const std::vector<Setter>& s, Case& c) {
            Observation ob = Observe([&] { return Of(cgdr::Run(c.inputs(), c.outputs(), OptionsOf(s))); });
            ob.out = c.out;
            ob.state = c.final_state;
            return ob;
          },
          [](const std::vector<Setter>& s, DecodeCase& d) {
            Observation ob = Observe([&] { return Of(cgdr::DecodeStep(d.Inputs(), d.Outputs(), OptionsOf(s))); });
            ob.out = d.out;
            ob.state = d.pool;
            return ob;
          }};
}

// A C options handle with the setters applied; the first failing setter's
// status and message, if any.
struct CHandle {
  cgdr_options* h = nullptr;
  std::pair<int, std::string> setter_failure{0, ""};
  explicit CHandle(const std::vector<Setter>& setters) {
    EXPECT_EQ(cgdr_options_create(&h), CGDR_OK);
    for (const Setter& s : setters) {
      const cgdr_status st = s.c(h);
      if (st != CGDR_OK && setter_failure.first == 0) setter_failure = Of(st);
    }
  }
  ~CHandle() { cgdr_options_destroy(h); }
};

FrontEnd C() {
  return {"C",
          [](const std::vector<Setter>& s, Case& c) {
            CHandle h(s);
            Observation ob = Observe([&] {
              if (h.setter_failure.first != 0) return h.setter_failure;
              const cgdr_prefill_args a = ToCPrefill(c.inputs(), c.outputs());
              return Of(cgdr_prefill(&a, h.h));
            });
            ob.out = c.out;
            ob.state = c.final_state;
            return ob;
          },
          [](const std::vector<Setter>& s, DecodeCase& d) {
            CHandle h(s);
            Observation ob = Observe([&] {
              if (h.setter_failure.first != 0) return h.setter_failure;
              const cgdr_decode_args a = ToCDecode(d.Inputs(), d.Outputs());
              return Of(cgdr_decode_step(&a, h.h));
            });
            ob.out = d.out;
            ob.state = d.pool;
            return ob;
          }};
}

// ---- the checks --------------------------------------------------------------

// out and final_state of a prefill that ran with `opt` against FP64.
void ExpectPrefillMatchesReference(Case& c, const Options& opt) {
  Problem p;
  const Status s = Validate(c.inputs(), c.outputs(), opt, &p);
  ASSERT_TRUE(s.ok()) << s.message();
  ReferenceResult ref;
  ReferenceRun(c.inputs(), p, &ref);
  const Outputs o = c.outputs();
  EXPECT_LE(RelativeError(o.out, ref.out, p.Nv), testing::ModeTolerance(opt.precision, testing::Spec6Limit(ref.out, o.out.dtype)))
      << "out";
  if (o.final_state.present()) {
    EXPECT_LE(RelativeError(o.final_state, ref.final_state, p.Nv),
              testing::ModeTolerance(opt.precision, testing::Spec6Limit(ref.final_state, o.final_state.dtype)))
        << "final_state";
  }
}

// A decode step against the FP64 reference of its 1-token sequences: live
// rows' out and pool states, skipped rows' out zero, other pool rows as they were.
void ExpectDecodeMatchesReference(DecodeCase& d, const Options& opt, const Bytes& pool_before) {
  // Decode reads scale, l2norm (and its eps), layout, threads and check_values (SPEC 6b)
  // and use_beta_sigmoid (SPEC 6d); the plan's options, which it ignores,
  // must not fail the reference's Validate.
  Options decode_opt;
  decode_opt.use_beta_sigmoid = opt.use_beta_sigmoid;
  decode_opt.scale = opt.scale;
  decode_opt.use_qk_l2norm = opt.use_qk_l2norm;
  decode_opt.qk_l2norm_eps = opt.qk_l2norm_eps;
  decode_opt.gate_lower_bound = opt.gate_lower_bound;
  decode_opt.state_layout = opt.state_layout;
  decode_opt.threads = opt.threads;
  Problem p;
  const Status s = Validate(d.c.inputs(), d.c.outputs(), decode_opt, &p);
  ASSERT_TRUE(s.ok()) << s.message();
  ReferenceResult ref;
  ReferenceRun(d.c.inputs(), p, &ref);
  const int64_t out_row = p.Nv * p.Dv, state_row = p.Nv * p.Dk * p.Dv;
  const DType dt = d.c.spec.dtype, st = d.c.spec.state_dtype;
  for (int n = 0; n < 4; ++n) {
    const int32_t i = DecodeCase::kIndex[n];
    if (i < 0) {
      for (int64_t j = 0; j < out_row; ++j) EXPECT_EQ(LoadAsF32(d.out.data(), dt, n * out_row + j), 0.0f) << "row " << n;
      continue;
    }
    const std::vector<double> ro(ref.out.begin() + n * out_row, ref.out.begin() + (n + 1) * out_row);
    const std::vector<double> rs(ref.final_state.begin() + n * state_row, ref.final_state.begin() + (n + 1) * state_row);
    const TensorView got_out(d.out.data() + n * out_row * DTypeSize(dt), dt, {1, p.Nv, p.Dv});
    const TensorView got_state(d.Row(i), st, {1, p.Nv, p.Dk, p.Dv});
    EXPECT_LE(RelativeError(got_out, ro, p.Nv), testing::Spec6Limit(ro, dt)) << "out row " << n;
    EXPECT_LE(RelativeError(got_state, rs, p.Nv), testing::Spec6Limit(rs, st)) << "pool row " << i;
  }
  for (int64_t untouched : {1, 2}) {
    EXPECT_EQ(0, std::memcmp(d.Row(untouched), pool_before.data() + untouched * d.state_bytes, d.state_bytes))
        << "pool row " << untouched << " changed";
  }
}

bool SameOutcome(const Observation& a, const Observation& b) {
  return a.code == b.code && a.out == b.out && a.state == b.state;
}

void ExpectShows(Shows shows, const Observation& got, const Observation& ctx) {
  switch (shows) {
    case Shows::kOutcome: EXPECT_FALSE(SameOutcome(got, ctx)) << "the option did not change the status or the bits"; break;
    case Shows::kWorkers: EXPECT_NE(got.workers, ctx.workers) << "the option did not change the worker threads"; break;
    case Shows::kSame: EXPECT_TRUE(SameOutcome(got, ctx)) << "the option changed the status or the bits"; break;
    case Shows::kAny: break;
  }
}

void ExpectFailure(const Observation& got, const std::string& want) {
  EXPECT_EQ(got.code, CGDR_INVALID_ARGUMENT) << got.message;
  EXPECT_NE(got.message.find(want), std::string::npos) << "message: " << got.message << "\nwanted: " << want;
  EXPECT_EQ(got.message.find('\n'), std::string::npos) << "one line";
}

std::vector<Setter> With(std::vector<Setter> context, const Setter& option) {
  context.push_back(option);
  return context;
}

void CheckPrefillRow(const FrontEnd& fe, const Row& row) {
  CaseSpec spec = BaseSpec();
  row.spec(&spec);
  const std::vector<Setter> all = With(row.context, row.option);
  Case ctx_case = MakeCase(spec), row_case = MakeCase(spec), cpp_case = MakeCase(spec);
  for (Case* c : {&ctx_case, &row_case, &cpp_case}) row.plant(c);
  const Observation ctx = fe.prefill(row.context, ctx_case);
  const Observation got = fe.prefill(all, row_case);
  if (!row.error.empty()) {
    ExpectFailure(got, row.error);
  } else {
    ASSERT_EQ(got.code, 0) << got.message;
    ExpectPrefillMatchesReference(row_case, OptionsOf(all));
  }
  ExpectShows(row.prefill, got, ctx);
  const Observation cpp = Cpp().prefill(all, cpp_case);
  EXPECT_TRUE(SameOutcome(got, cpp)) << "differs from the C++ API: " << got.message << " / " << cpp.message;
  EXPECT_EQ(got.workers, cpp.workers) << "worker threads differ from the C++ API";
}

void CheckDecodeRow(const FrontEnd& fe, const Row& row) {
  if (row.no_decode) return;
  CaseSpec spec = BaseSpec();
  row.spec(&spec);
  const std::vector<Setter> all = With(row.context, row.option);
  DecodeCase ctx_case(spec), row_case(spec), cpp_case(spec);
  for (DecodeCase* d : {&ctx_case, &row_case, &cpp_case}) row.plant(&d->c);
  const Bytes pool_before = row_case.pool;
  const Observation ctx = fe.decode(row.context, ctx_case);
  const Observation got = fe.decode(all, row_case);
  const bool setter_refused = row.c_setter_rejects && fe.name == "C";
  if (!row.decode_error.empty() || setter_refused) {
    ExpectFailure(got, setter_refused ? row.error : row.decode_error);
    EXPECT_EQ(row_case.pool, pool_before) << "a refused step wrote the pool";
  } else {
    ASSERT_EQ(got.code, 0) << got.message;
    ExpectDecodeMatchesReference(row_case, OptionsOf(all), pool_before);
  }
  if (!setter_refused) ExpectShows(row.decode, got, ctx);
  const Observation cpp = Cpp().decode(all, cpp_case);
  if (!setter_refused) {
    EXPECT_TRUE(SameOutcome(got, cpp)) << "differs from the C++ API: " << got.message;
  }
}

class Conformance : public ::testing::TestWithParam<int> {  // 0: C++, 1: C
 protected:
  FrontEnd fe_ = GetParam() == 0 ? Cpp() : C();
};

TEST_P(Conformance, EveryRowPrefill) {
  for (const Row& row : Rows()) {
    SCOPED_TRACE(fe_.name + " prefill: " + row.name);
    CheckPrefillRow(fe_, row);
  }
}

TEST_P(Conformance, EveryRowDecode) {
  for (const Row& row : Rows()) {
    SCOPED_TRACE(fe_.name + " decode: " + row.name);
    CheckDecodeRow(fe_, row);
  }
}

// Every dtype of query (and key, value, beta, out), of the state and of g,
// for prefill and for decode (whose pool takes the state's dtype).
TEST_P(Conformance, EveryDtype) {
  const DType kAll[] = {DType::kF16, DType::kBF16, DType::kF32};
  for (DType q : kAll) {
    for (DType s : kAll) {
      for (DType g : kAll) {
        SCOPED_TRACE(fe_.name + " query " + DTypeName(q) + ", state " + DTypeName(s) + ", g " + DTypeName(g));
        const Row row{"dtypes", {}, NoOption(), Shows::kAny, Shows::kAny, "", "", false, false,
                      [&](CaseSpec* c) { c->dtype = q; c->state_dtype = s; c->g_dtype = g; }};
        CheckPrefillRow(fe_, row);
        CheckDecodeRow(fe_, row);
      }
    }
  }
}

// The cases of the two output rows overflow the one output they name and
// leave the other finite: check_values catches each output on its own.
TEST(ConformanceOutputs, EachOverflowCaseOverflowsOneOutput) {
  struct Plant {
    std::function<void(CaseSpec*)> spec;
    std::function<void(Case*)> plant;
    bool out_finite;
  };
  for (const Plant& p : {Plant{[](CaseSpec*) {}, PlantHugeQuery, false}, Plant{F16State, PlantHugeLastValue, true}}) {
    CaseSpec spec = BaseSpec();
    p.spec(&spec);
    Case c = MakeCase(spec);
    p.plant(&c);
    ASSERT_TRUE(cgdr::Run(c.inputs(), c.outputs(), Options()).ok());
    EXPECT_EQ(FirstNonFinite(c.outputs().out) < 0, p.out_finite);
    EXPECT_EQ(FirstNonFinite(c.outputs().final_state) < 0, !p.out_finite);
  }
}

INSTANTIATE_TEST_SUITE_P(FrontEnds, Conformance, ::testing::Values(0, 1),
                         [](const ::testing::TestParamInfo<int>& i) { return i.param == 0 ? "Cpp" : "C"; });

// The plan of each row's call shows the option it forces (what `cgdr plan`
// prints; the bits cannot show v_step or dk_bucket, which change none).
TEST(ConformanceTable, ThePlanHonoursEachForcedOption) {
  for (const Row& row : Rows()) {
    const Options opt = OptionsOf(With(row.context, row.option));
    if (!row.error.empty()) continue;
    SCOPED_TRACE(row.name);
    CaseSpec spec = BaseSpec();
    row.spec(&spec);
    Case c = MakeCase(spec);
    Plan plan;
    ASSERT_TRUE(PlanFor(c, opt, &plan));
    if (opt.algo != Algo::kAuto) {
      EXPECT_EQ(plan.chunk, static_cast<int>(opt.algo));
    }
    if (opt.dk_bucket != 0) {
      EXPECT_EQ(plan.dk_bucket, std::max(opt.dk_bucket, 0));
    }
    if (opt.v_step != 0) {
      EXPECT_EQ(plan.v_step, opt.v_step);
    }
    if (opt.threads != 0) {
      EXPECT_EQ(plan.threads, opt.threads);
    }
    if (opt.precision != Precision::kAuto && plan.chunk > 1) {
      EXPECT_EQ(plan.precision, opt.precision);
    }
    if (opt.engine == Engine::kAmxEmulated && plan.chunk > 1 && plan.precision != Precision::kFp32) {
      EXPECT_EQ(plan.engine, Engine::kAmxEmulated);
    }
    if (opt.engine == Engine::kVector) {
      EXPECT_EQ(plan.engine, Engine::kVector);
    }
  }
}

// Every field of cgdr::Options is set to a non-default value by some row.
TEST(ConformanceTable, EveryOptionFieldHasARow) {
  std::set<std::string> covered;
  const auto defaults = OptionFields(Options());
  for (const Row& row : Rows()) {
    Options o;
    row.option.cpp(&o);
    const auto fields = OptionFields(o);
    for (size_t i = 0; i < fields.size(); ++i) {
      if (fields[i].second != defaults[i].second) covered.insert(fields[i].first);
    }
  }
  for (const auto& [name, value] : defaults) EXPECT_TRUE(covered.count(name)) << "Options::" << name << " has no row";
}

// Every C setter of cgdr.h is used by some row (and only setters it declares).
TEST(ConformanceTable, EveryCSetterHasARow) {
  const std::set<std::string> declared = CSetters();
  ASSERT_GE(declared.size(), 10u) << "cannot read the setters of include/cgdr/cgdr.h";
  std::set<std::string> used;
  for (const Row& row : Rows()) {
    if (!row.option.c_name.empty()) used.insert(row.option.c_name);
  }
  for (const std::string& name : declared) EXPECT_TRUE(used.count(name)) << "cgdr_options_set_" << name << " has no row";
  for (const std::string& name : used) EXPECT_TRUE(declared.count(name)) << "a row names cgdr_options_set_" << name;
}

}  // namespace
}  // namespace cgdr
