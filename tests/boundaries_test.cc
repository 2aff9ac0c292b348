// Both sides of every limit (issue 24): each limit of validation (prefill,
// decode, options, the C API) and of the readers (safetensors case files,
// .npy, .bin manifests, case metadata) exactly at the limit and one past it.
// At the limit the call passes that check (it succeeds, or fails later for
// another reason, whose message must not be the limit's); one past it fails
// with the limit's message. A limit added to the code gets a row in Limits().
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "cgdr/cgdr.h"
#include "cgdr/cgdr.hpp"
#include "cgdr/decode.hpp"
#include "c_args.h"
#include "core/synthetic.h"
#include "io/case_file.h"
#include "io/npy.h"
#include "io/safetensors.h"
#include "io/tensor_files.h"
#include "test_util.h"
#include "validate/checks.h"

namespace cgdr {
using testing::ToCPrefill;
namespace {

constexpr int64_t kI64Max = std::numeric_limits<int64_t>::max();

struct Limit {
  std::string name;
  std::function<Status(bool past)> call;  // the call at the limit (false) and one past it (true)
  std::string error;                      // what one past says
};

// ---- prefill validation ------------------------------------------------------

CaseSpec Small() {
  CaseSpec s;
  s.Nk = 2;
  s.Nv = 4;
  s.Dk = 8;
  s.Dv = 8;
  s.lens = {3, 0, 5};
  return s;
}

// Validate on a small case, edited by `edit` (views, options) after `spec`.
Status ValidateCase(const std::function<void(CaseSpec*)>& spec,
                    const std::function<void(Case&, Inputs&, Outputs&, Options&)>& edit) {
  CaseSpec s = Small();
  spec(&s);
  Case c = MakeCase(s);
  Inputs in = c.inputs();
  Outputs out = c.outputs();
  Options opt = c.options();
  edit(c, in, out, opt);
  Problem p;
  return Validate(in, out, opt, &p);
}
Status ValidateSpec(const std::function<void(CaseSpec*)>& spec) {
  return ValidateCase(spec, [](Case&, Inputs&, Outputs&, Options&) {});
}
Status ValidateOptions(const std::function<void(Options&)>& edit) {
  return ValidateCase([](CaseSpec*) {}, [&](Case&, Inputs&, Outputs&, Options& o) { edit(o); });
}

template <class E>
E Raw(int v) {  // an enum value from outside the C++ type system (C, bindings)
  E e;
  std::memcpy(&e, &v, sizeof e);
  return e;
}

float* F32(Bytes& b) { return reinterpret_cast<float*>(b.data()); }

// Memory no tensor of a case uses, for placing ranges next to each other.
uint8_t* Arena() {
  static Bytes arena(size_t{1} << 16);
  return arena.data();
}

std::vector<Limit> ValidationLimits() {
  const int64_t kMaxElements = kI64Max / 16;
  return {
      {"Dk <= kMaxHeadDim", [](bool past) { return ValidateSpec([&](CaseSpec* s) { s->Dk = kMaxHeadDim + past; }); },
       "query: expected Dk in [1, 256], got Dk = 257"},
      {"Dk >= 1", [](bool past) { return ValidateSpec([&](CaseSpec* s) { s->Dk = 1 - past; }); },
       "query: expected Dk in [1, 256], got Dk = 0"},
      {"Dv <= kMaxHeadDim", [](bool past) { return ValidateSpec([&](CaseSpec* s) { s->Dv = kMaxHeadDim + past; }); },
       "value: expected Dv in [1, 256], got Dv = 257"},
      {"Dv >= 1", [](bool past) { return ValidateSpec([&](CaseSpec* s) { s->Dv = 1 - past; }); },
       "value: expected Dv in [1, 256], got Dv = 0"},
      {"Nk >= 1", [](bool past) { return ValidateSpec([&](CaseSpec* s) { s->Nk = 1 - past; }); },
       "query: expected Nk >= 1 heads"},
      {"Nv >= 1", [](bool past) { return ValidateSpec([&](CaseSpec* s) { s->Nk = 1; s->Nv = 1 - past; }); },
       "value: expected Nv >= 1 heads"},
      {"Nv a multiple of Nk", [](bool past) { return ValidateSpec([&](CaseSpec* s) { s->Nv = 4 + past; }); },
       "value: expected Nv to be a multiple of Nk = 2 (grouped heads), got Nv = 5"},
      {"T >= 0", [](bool past) {
         return ValidateCase([](CaseSpec* s) { s->lens = {0}; },
                             [&](Case&, Inputs& in, Outputs& out, Options&) {
                               for (TensorView* t : {&in.query, &in.key, &in.value, &in.beta, &in.g, &out.out}) {
                                 t->shape[0] = -int64_t{past};
                               }
                             });
       },
       "query: expected non-negative dimensions"},
      {"sequence length >= 0", [](bool past) {
         return ValidateCase([](CaseSpec*) {}, [&](Case& c, Inputs&, Outputs&, Options&) {
           c.seq_lens[0] = -int32_t{past};
           c.seq_lens[1] = 3 + past;
         });
       },
       "seq_lens: expected lengths >= 0, got -1 at index [0]"},
      {"lengths sum to T", [](bool past) {
         return ValidateCase([](CaseSpec*) {}, [&](Case& c, Inputs&, Outputs&, Options&) { c.seq_lens[2] += past; });
       },
       "seq_lens: expected the lengths to sum to T = 8, got 9"},
      {"lengths sum to T (short)", [](bool past) {
         return ValidateCase([](CaseSpec*) {}, [&](Case& c, Inputs&, Outputs&, Options&) { c.seq_lens[2] -= past; });
       },
       "seq_lens: expected the lengths to sum to T = 8, got 7"},
      {"B >= 1", [](bool past) {
         return ValidateCase([](CaseSpec* s) { s->lens = {8}; s->has_initial_state = false; s->want_final_state = false; },
                             [&](Case&, Inputs& in, Outputs&, Options&) {
                               if (past) {
                                 in.seq_lens.shape[0] = 0;
                                 for (TensorView* t : {&in.query, &in.key, &in.value, &in.beta, &in.g}) t->shape[0] = 8;
                               }
                             });
       },
       "seq_lens: expected at least one sequence"},
      {"elements <= INT64_MAX / 16", [=](bool past) {
         return CheckRank("query", TensorView(nullptr, DType::kF32, {kMaxElements + past}), 1, "[N]");
       },
       "query: shape [576460752303423488] has more elements than 64-bit offsets allow (max 576460752303423487)"},
      {"threads <= 4096", [](bool past) { return ValidateOptions([&](Options& o) { o.threads = 4096 + past; }); },
       "options.threads: expected 0 (all) .. 4096, got 4097"},
      {"threads >= 0", [](bool past) { return ValidateOptions([&](Options& o) { o.threads = 0 - past; }); },
       "options.threads: expected 0 (all) .. 4096, got -1"},
      {"v_step <= 256", [](bool past) { return ValidateOptions([&](Options& o) { o.v_step = 256 + past; }); },
       "options.v_step: expected 0 (auto) .. 256, got 257"},
      {"v_step >= 0", [](bool past) { return ValidateOptions([&](Options& o) { o.v_step = 0 - past; }); },
       "options.v_step: expected 0 (auto) .. 256, got -1"},
      {"dk_bucket >= Dk", [](bool past) {
         return ValidateCase([&](CaseSpec* s) { s->Dk = 64 + past; }, [](Case&, Inputs&, Outputs&, Options& o) {
           o.dk_bucket = 64;
         });
       },
       "options.dk_bucket: expected 0 (auto), -1 (generic) or one of 64, 80, 96, 128 >= Dk = 65, got 64"},
      {"dk_bucket -1", [](bool past) { return ValidateOptions([&](Options& o) { o.dk_bucket = -1 - past; }); },
       "options.dk_bucket: expected 0 (auto), -1 (generic) or one of 64, 80, 96, 128 >= Dk = 8, got -2"},
      {"dk_bucket 128", [](bool past) { return ValidateOptions([&](Options& o) { o.dk_bucket = 128 + past; }); },
       "got 129"},
      {"algo chunk128", [](bool past) { return ValidateOptions([&](Options& o) { o.algo = Raw<Algo>(128 + past); }); },
       "options.algo: expected auto, recurrent, chunk16, chunk32, chunk64 or chunk128, got value 129"},
      {"precision auto (4)", [](bool past) {
         return ValidateOptions([&](Options& o) { o.precision = Raw<Precision>(4 + past); });
       },
       "options.precision: expected fp32, bf16, bf16x3, bf16x4 or auto, got value 5"},
      {"engine amx-emu (3)", [](bool past) {
         return ValidateOptions([&](Options& o) { o.engine = Raw<Engine>(3 + past); });
       },
       "options.engine: expected auto, vector, amx or amx-emu, got value 4"},
      {"state_layout kv (1)", [](bool past) {
         return ValidateCase([](CaseSpec* s) { s->layout = StateLayout::kKV; s->Dv = s->Dk; },
                             [&](Case&, Inputs&, Outputs&, Options& o) { o.state_layout = Raw<StateLayout>(1 + past); });
       },
       "options.state_layout: expected vk or kv, got value 2"},
      {"scale finite", [](bool past) {
         return ValidateOptions([&](Options& o) { o.scale = past ? INFINITY : DBL_MAX; });
       },
       "options.scale: expected a finite number"},
      {"scale finite (negative)", [](bool past) {
         return ValidateOptions([&](Options& o) { o.scale = past ? -INFINITY : -DBL_MAX; });
       },
       "options.scale: expected a finite number"},
      // Byte ranges, placed in an arena of their own: touching is no overlap,
      // one byte more is (validation reads neither range).
      {"out next to value", [](bool past) {
         return ValidateCase([](CaseSpec*) {}, [&](Case&, Inputs& in, Outputs& out, Options&) {
           out.out.data = Arena() + past;
           in.value.data = Arena() + out.out.numel() * 4;
         });
       },
       "out: output memory overlaps input 'value'"},
      {"out next to final_state", [](bool past) {
         return ValidateCase([](CaseSpec*) {}, [&](Case&, Inputs&, Outputs& out, Options&) {
           out.final_state.data = Arena();
           out.out.data = Arena() + out.final_state.numel() * 4 - past;
         });
       },
       "final_state: output memory overlaps output 'out'"},
      {"final_state is initial_state exactly", [](bool past) {
         return ValidateCase([](CaseSpec*) {}, [&](Case&, Inputs& in, Outputs& out, Options&) {
           in.initial_state.data = Arena();
           out.final_state.data = Arena() + 4 * past;
         });
       },
       "final_state: output memory overlaps input 'initial_state'"},
      // check_values: the largest finite value passes, infinity does not; g = 0 passes, the least g > 0 does not.
      {"check_values: finite", [](bool past) {
         return ValidateCase([](CaseSpec*) {}, [&](Case& c, Inputs&, Outputs&, Options& o) {
           o.check_values = true;
           F32(c.value)[5] = past ? INFINITY : FLT_MAX;
         });
       },
       "value: non-finite value inf at index [0, 0, 5]"},
      {"check_values: g <= 0", [](bool past) {
         return ValidateCase([](CaseSpec*) {}, [&](Case& c, Inputs&, Outputs&, Options& o) {
           o.check_values = true;
           F32(c.g)[5] = past ? std::numeric_limits<float>::denorm_min() : 0.0f;
         });
       },
       "g: expected log-decay <= 0, got 1.4013e-45 at index [1, 1]"},
  };
}

// ---- decode ------------------------------------------------------------------

Status DecodeWithIndex(int32_t index, int64_t P) {
  CaseSpec s = Small();
  s.lens = {1, 1};
  Case c = MakeCase(s);
  const Inputs in = c.inputs();
  Bytes pool(static_cast<size_t>(P) * s.Nv * s.Dk * s.Dv * 4);
  std::vector<int32_t> idx{index, -1};
  Bytes out(c.out.size());
  DecodeInputs d{in.query, in.key, in.value, in.beta, in.g,
                 TensorView(pool.data(), DType::kF32, {P, s.Nv, s.Dv, s.Dk}), TensorView(idx.data(), DType::kI32, {2})};
  return DecodeStep(d, {TensorView(out.data(), DType::kF32, {2, s.Nv, s.Dv})}, Options());
}

std::vector<Limit> DecodeLimits() {
  return {
      {"index < P", [](bool past) { return DecodeWithIndex(3 + past, 4); },
       "state_indices: expected indices < P = 4 (pool size) or negative (skip), got 4 at index [0]"},
  };
}

// ---- the C API -----------------------------------------------------------------

Status FromC(cgdr_status s) { return s == CGDR_OK ? Status::Ok() : Status::Invalid(cgdr_last_error()); }

template <class F>
Status WithHandle(F&& set) {
  cgdr_options* h = nullptr;
  cgdr_options_create(&h);
  const Status s = FromC(set(h));
  cgdr_options_destroy(h);
  return s;
}

// A C prefill whose initial_state descriptor has `rank` and `dtype`.
Status CPrefillWith(int32_t rank, int dtype) {
  Case c = MakeCase(Small());
  cgdr_prefill_args a = ToCPrefill(c.inputs(), c.outputs());
  a.initial_state.rank = rank;
  std::memcpy(&a.initial_state.dtype, &dtype, sizeof dtype);  // any int, even one outside the enum
  return FromC(cgdr_prefill(&a, nullptr));
}

std::vector<Limit> CApiLimits() {
  return {
      {"tensor rank <= 4", [](bool past) { return CPrefillWith(4 + past, CGDR_F32); },
       "initial_state: expected rank 0..4, got 5"},
      {"tensor rank >= 0", [](bool past) { return CPrefillWith(past ? -1 : 0, CGDR_F32); },
       "initial_state: expected rank 0..4, got -1"},
      {"dtype enum <= CGDR_I32", [](bool past) { return CPrefillWith(4, CGDR_I32 + past); },
       "initial_state: unknown dtype enum value 4"},  // at the limit: i32 is a dtype, not a state dtype
      {"set_threads 4096", [](bool past) { return WithHandle([&](cgdr_options* h) { return cgdr_options_set_threads(h, 4096 + past); }); },
       "cgdr_options_set_threads: expected 0 (all) .. 4096, got 4097"},
      {"set_threads 0", [](bool past) { return WithHandle([&](cgdr_options* h) { return cgdr_options_set_threads(h, 0 - past); }); },
       "got -1"},
      {"set_v_step 256", [](bool past) { return WithHandle([&](cgdr_options* h) { return cgdr_options_set_v_step(h, 256 + past); }); },
       "cgdr_options_set_v_step: expected 0 (auto) .. 256, got 257"},
      {"set_v_step 0", [](bool past) { return WithHandle([&](cgdr_options* h) { return cgdr_options_set_v_step(h, 0 - past); }); },
       "got -1"},
      {"set_chunk 128", [](bool past) { return WithHandle([&](cgdr_options* h) { return cgdr_options_set_chunk(h, 128 + past); }); },
       "cgdr_options_set_chunk: expected 0 (auto), 1, 16, 32, 64 or 128, got 129"},
      {"set_dk_bucket 128", [](bool past) { return WithHandle([&](cgdr_options* h) { return cgdr_options_set_dk_bucket(h, 128 + past); }); },
       "got 129"},
      {"set_dk_bucket -1", [](bool past) { return WithHandle([&](cgdr_options* h) { return cgdr_options_set_dk_bucket(h, -1 - past); }); },
       "got -2"},
      {"set_precision AUTO", [](bool past) {
         return WithHandle([&](cgdr_options* h) { return cgdr_options_set_precision(h, Raw<cgdr_precision>(4 + past)); });
       },
       "cgdr_options_set_precision: expected CGDR_PRECISION_FP32 (0) .. CGDR_PRECISION_AUTO (4), got 5"},
      {"set_engine AMX_EMULATED", [](bool past) {
         return WithHandle([&](cgdr_options* h) { return cgdr_options_set_engine(h, Raw<cgdr_engine>(3 + past)); });
       },
       "cgdr_options_set_engine: expected CGDR_ENGINE_AUTO (0) .. CGDR_ENGINE_AMX_EMULATED (3), got 4"},
      {"set_state_layout KV", [](bool past) {
         return WithHandle([&](cgdr_options* h) { return cgdr_options_set_state_layout(h, Raw<cgdr_state_layout>(1 + past)); });
       },
       "cgdr_options_set_state_layout: expected CGDR_LAYOUT_VK (0) or CGDR_LAYOUT_KV (1), got 2"},
  };
}

// ---- safetensors ---------------------------------------------------------------

std::string Le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((v >> (8 * i)) & 0xFF);
  return s;
}

// A file of header `json` (its length field `length`, if given) and `data` bytes.
Status ParseBytes(const std::string& bytes) {
  SafetensorsFile f;
  return ParseSafetensors("t.safetensors", reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), &f);
}
Status ParseHeader(const std::string& json, size_t data) { return ParseBytes(Le64(json.size()) + json + std::string(data, '\0')); }

// One F32 tensor "x" of `shape` at [begin, end) in a buffer of `data` bytes.
Status ParseTensor(const std::string& shape, uint64_t begin, uint64_t end, size_t data, const char* dtype = "F32") {
  return ParseHeader(std::string("{\"x\":{\"dtype\":\"") + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":[" +
                         std::to_string(begin) + "," + std::to_string(end) + "]}}",
                     data);
}

// Two F32 tensors of 2 elements: "a" at [0, 8), "b" at [8 + gap, 16 + gap), in `data` bytes.
Status ParseTwo(int64_t gap, size_t data) {
  const auto entry = [](const char* n, int64_t b) {
    return std::string("\"") + n + "\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[" + std::to_string(b) + "," +
           std::to_string(b + 8) + "]}";
  };
  std::string json = "{";  // appended, not concatenated: GCC 12 warns (-Wrestrict) on the temporaries
  json += entry("a", 0);
  json += ",";
  json += entry("b", 8 + gap);
  json += "}";
  return ParseHeader(json, data);
}

std::vector<Limit> SafetensorsLimits() {
  const uint64_t kMaxHeader = kMaxSafetensorsHeaderBytes;
  return {
      {"file >= 8 bytes", [](bool past) { return ParseBytes(std::string(8 - past, '\0')); },
       "file is 7 bytes, too short for the 8-byte header length"},
      {"header length <= 100 MiB", [=](bool past) { return ParseBytes(Le64(kMaxHeader + past) + "{}"); },
       "header length 104857601 exceeds the limit of 104857600 bytes"},
      {"header within the file", [](bool past) { return ParseBytes(Le64(2 + past) + "{}"); },
       "header length 3 runs past the end of the file (2 bytes after the length field)"},
      {"header length >= 2", [](bool past) { return ParseBytes(Le64(2 - past) + "{}"); },
       "header length 1 is too short for a JSON object"},
      {"rank <= 8", [](bool past) {
         return ParseTensor(past ? "[1,1,1,1,1,1,1,1,1]" : "[1,1,1,1,1,1,1,1]", 0, 4, 4);
       },
       "tensor 'x': shape has more than 8 dimensions (the rank limit)"},
      {"dimension <= INT64_MAX", [](bool past) {
         return ParseTensor(past ? "[9223372036854775808,0]" : "[9223372036854775807,0]", 0, 0, 0);
       },
       "tensor 'x': shape[0] is 9223372036854775808, expected a non-negative integer <= 9223372036854775807"},
      {"bytes <= INT64_MAX", [](bool past) {
         return ParseTensor(past ? "[4611686018427387904]" : "[4611686018427387903]", 0, 4, 4, "F16");
       },
       "tensor 'x': shape [4611686018427387904] of F16 has more bytes than a 64-bit size can hold"},
      {"offsets <= INT64_MAX", [](bool past) { return ParseTensor("[0]", kI64Max + uint64_t{past}, kI64Max + uint64_t{past}, 0); },
       "tensor 'x': data_offsets must be [begin, end] of integers in [0, 9223372036854775807]"},
      {"end <= data size", [](bool past) { return ParseTensor("[2]", past, 8 + past, 8 + 0); },
       "tensor 'x': data_offsets [1, 9] outside the data buffer of 8 bytes"},
      {"begin <= end", [](bool past) { return ParseTensor("[0]", 4 + past, 4, 4); },
       "tensor 'x': data_offsets [5, 4] outside the data buffer of 4 bytes"},
      {"size = shape x dtype", [](bool past) { return ParseTensor("[2]", 0, 8 + past, 9); },
       "tensor 'x': data_offsets [0, 9] hold 9 bytes, expected 8"},
      {"no hole", [](bool past) { return ParseTwo(past, 16 + past); }, "tensor 'b': data_offsets [9, 17] leave a hole of 1 bytes"},
      {"no overlap", [](bool past) { return ParseTwo(-int64_t{past}, 16 - past); },
       "tensor 'b': data_offsets [7, 15] overlap tensor 'a' [0, 8]"},
      {"nothing after the last tensor", [](bool past) { return ParseTwo(0, 16 + past); },
       "data buffer has 1 bytes after the last tensor"},
  };
}

// ---- .npy ------------------------------------------------------------------------

// A .npy of format `major` whose header length field says `len` and holds `dict`, then `data` bytes.
Status ParseNpyBytes(int major, uint64_t len, const std::string& dict, size_t data) {
  std::string b = "\x93NUMPY";
  b += static_cast<char>(major);
  b += '\0';
  for (int i = 0; i < (major == 1 ? 2 : 4); ++i) b += static_cast<char>((len >> (8 * i)) & 0xFF);
  b += dict + std::string(data, '\0');
  NpyArray a;
  return ParseNpy("t.npy", reinterpret_cast<const uint8_t*>(b.data()), b.size(), &a);
}
Status ParseNpyDict(const std::string& dict, size_t data, int major = 1) {
  return ParseNpyBytes(major, dict.size(), dict, data);
}
std::string Dict(const std::string& shape) { return "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape + ", }"; }

std::vector<Limit> NpyLimits() {
  return {
      {"file >= 10 bytes", [](bool past) {
         NpyArray a;
         const std::string b = std::string("\x93NUMPY\x01\x00\x00\x00", 10).substr(0, 10 - past);
         return ParseNpy("t.npy", reinterpret_cast<const uint8_t*>(b.data()), b.size(), &a);
       },
       "not a .npy file"},
      {"version <= 3", [](bool past) { return ParseNpyDict(Dict("(2,)"), 8, 3 + past); },
       ".npy format version 4.0 is not supported (1-3)"},
      {"version >= 1", [](bool past) { return ParseNpyDict(Dict("(2,)"), 8, 1 - past); },
       ".npy format version 0.0 is not supported (1-3)"},
      {"header <= 1 MiB", [](bool past) { return ParseNpyBytes(2, (1u << 20) + past, Dict("(2,)"), 8); },
       ".npy header of 1048577 bytes exceeds the limit"},
      {"header within the file", [](bool past) { return ParseNpyBytes(1, Dict("(2,)").size() + 8 + past, Dict("(2,)"), 8); },
       "bytes runs past the end of the file"},
      {"rank <= 4", [](bool past) { return ParseNpyDict(Dict(past ? "(1, 1, 1, 1, 2)" : "(1, 1, 1, 2)"), 8); },
       "rank 5 exceeds the supported maximum 4"},
      {"18 digits a dimension", [](bool past) {
         return ParseNpyDict(Dict(past ? "(1000000000000000000,)" : "(100000000000000000,)"), 8);
       },
       "expected non-negative integers"},
      {"bytes <= INT64_MAX", [](bool past) {
         return ParseNpyDict(Dict(past ? "(576460752303423488, 2)" : "(576460752303423487, 2)"), 8);
       },
       "has more bytes than a 64-bit size can hold"},
      {"data = shape x dtype", [](bool past) { return ParseNpyDict(Dict("(2,)"), 8 + past); },
       "data holds 9 bytes, expected 8"},
  };
}

// ---- .bin manifests and case metadata ---------------------------------------------

// A manifest with one f32 tensor "query" of `shape` in a file of `bytes` bytes.
Status ReadManifest(const testing::TempDir& dir, const std::string& shape, size_t bytes, size_t pad = 0) {
  std::ofstream(dir / "q.bin", std::ios::binary) << std::string(bytes, '\0');
  std::ofstream(dir / "m.json") << "{\"tensors\": {\"query\": {\"file\": \"q.bin\", \"dtype\": \"f32\", \"shape\": " + shape +
                                       "}}}" + std::string(pad, ' ');
  TensorBundle b;
  return ReadTensorBundle(dir / "m.json", &b);
}

Status LoadCaseWithScale(const testing::TempDir& dir, const std::string& scale) {
  Case c = MakeCase(Small());
  std::map<std::string, std::string> md = CaseMetadata(c.options());
  md["scale"] = scale;
  const Status s = WriteSafetensors(dir / "case.safetensors", CaseTensors(c.inputs()), md);
  if (!s.ok()) return s;
  LoadedCase loaded;
  return LoadCase(dir / "case.safetensors", &loaded);
}

std::vector<Limit> FileLimits(const testing::TempDir& dir) {
  return {
      {"manifest dimension <= 2^40", [&](bool past) { return ReadManifest(dir, past ? "[1099511627777]" : "[1099511627776]", 4); },
       "shape must hold integers in [0, 2^40], got [1099511627777]"},
      {"manifest elements <= 2^40", [&](bool past) {
         return ReadManifest(dir, past ? "[1099511627776, 2]" : "[1099511627776, 1]", 4);
       },
       "shape [1099511627776,2] is too large"},
      {"manifest rank <= 4", [&](bool past) { return ReadManifest(dir, past ? "[1,1,1,1,1]" : "[1,1,1,1]", 4); },
       "rank 5 exceeds the supported maximum 4"},
      {"manifest <= 1 MiB", [&](bool past) {
         const size_t text = std::string("{\"tensors\": {\"query\": {\"file\": \"q.bin\", \"dtype\": \"f32\", \"shape\": [1]}}}").size();
         return ReadManifest(dir, "[1]", 4, (size_t{1} << 20) - text + past);
       },
       "bytes is too large for a JSON description"},
      {"case scale finite", [&](bool past) { return LoadCaseWithScale(dir, past ? "1e309" : "1.7976931348623157e308"); },
       "metadata 'scale' is \"1e309\", expected a finite decimal number"},
  };
}

// ---- the checks ----------------------------------------------------------------

void ExpectLimit(const Limit& l) {
  SCOPED_TRACE(l.name);
  const Status at = l.call(false);
  EXPECT_EQ(at.message().find(l.error), std::string::npos) << "at the limit: " << at.message();
  const Status past = l.call(true);
  EXPECT_FALSE(past.ok()) << "one past the limit was accepted";
  EXPECT_EQ(past.code(), Code::kInvalidArgument) << past.message();
  EXPECT_NE(past.message().find(l.error), std::string::npos) << "one past: " << past.message() << "\nwanted: " << l.error;
}

TEST(Boundaries, Validation) {
  for (const Limit& l : ValidationLimits()) ExpectLimit(l);
}

// Within the limits of validation, a small call succeeds outright.
TEST(Boundaries, ValidationAtTheLimitsSucceeds) {
  for (const Limit& l : ValidationLimits()) {
    if (l.name.rfind("elements", 0) == 0) continue;  // a bare CheckRank
    SCOPED_TRACE(l.name);
    const Status at = l.call(false);
    EXPECT_TRUE(at.ok()) << at.message();
  }
}

// Element counts: exact up to INT64_MAX, saturated (not wrapped) past it.
TEST(Boundaries, NumelSaturatesJustPastInt64Max) {
  const int64_t half = int64_t{1} << 62;
  EXPECT_EQ(TensorView(nullptr, DType::kF32, {2, half - 1}).numel(), kI64Max - 1);
  EXPECT_EQ(TensorView(nullptr, DType::kF32, {2, half}).numel(), kI64Max);
  EXPECT_EQ(TensorView(nullptr, DType::kF32, {3, kI64Max / 3}).numel(), kI64Max / 3 * 3);
  EXPECT_EQ(TensorView(nullptr, DType::kF32, {3, kI64Max / 3 + 1}).numel(), kI64Max);
}

TEST(Boundaries, Decode) {
  for (const Limit& l : DecodeLimits()) ExpectLimit(l);
  EXPECT_TRUE(DecodeWithIndex(3, 4).ok());
  EXPECT_TRUE(DecodeWithIndex(INT32_MIN, 4).ok());  // any negative index skips its row
}

// check_values scans every element, the first and the last of each tensor
// (a scan that stops one short passed every other test).
TEST(Boundaries, CheckValuesScansFromTheFirstToTheLastElement) {
  struct Planted {
    const char* name;
    Bytes Case::*bytes;
    std::string first, last;
  };
  // Small(): T = 8, Nk = 2, Nv = 4, Dk = Dv = 8.
  const Planted kTensors[] = {{"query", &Case::query, "[0, 0, 0]", "[7, 1, 7]"},
                              {"key", &Case::key, "[0, 0, 0]", "[7, 1, 7]"},
                              {"value", &Case::value, "[0, 0, 0]", "[7, 3, 7]"},
                              {"beta", &Case::beta, "[0, 0]", "[7, 3]"},
                              {"g", &Case::g, "[0, 0]", "[7, 3]"},
                              {"initial_state", &Case::initial_state, "[0, 0, 0, 0]", "[2, 3, 7, 7]"}};
  for (const Planted& t : kTensors) {
    for (const bool last : {false, true}) {
      const Status s = ValidateCase([](CaseSpec*) {}, [&](Case& c, Inputs&, Outputs&, Options& o) {
        o.check_values = true;
        Bytes& b = c.*t.bytes;
        F32(b)[last ? b.size() / 4 - 1 : 0] = NAN;
      });
      EXPECT_EQ(s.message().rfind(std::string(t.name) + ": non-finite value nan at index " + (last ? t.last : t.first), 0),
                0u)
          << s.message();
    }
  }
}

TEST(Boundaries, CApi) {
  for (const Limit& l : CApiLimits()) ExpectLimit(l);
}

TEST(Boundaries, Safetensors) {
  for (const Limit& l : SafetensorsLimits()) ExpectLimit(l);
  // Those whose limit value makes a valid file succeed outright.
  EXPECT_TRUE(ParseBytes(Le64(2) + "{}").ok());
  EXPECT_TRUE(ParseTensor("[1,1,1,1,1,1,1,1]", 0, 4, 4).ok());
  EXPECT_TRUE(ParseTensor("[9223372036854775807,0]", 0, 0, 0).ok());
  EXPECT_TRUE(ParseTensor("[2]", 0, 8, 8).ok());
  EXPECT_TRUE(ParseTwo(0, 16).ok());
}

TEST(Boundaries, Npy) {
  for (const Limit& l : NpyLimits()) ExpectLimit(l);
  EXPECT_TRUE(ParseNpyDict(Dict("(1, 1, 1, 2)"), 8).ok());
  EXPECT_TRUE(ParseNpyDict(Dict("(2,)"), 8, 3).ok());
}

TEST(Boundaries, ManifestsAndCaseMetadata) {
  testing::TempDir dir;
  for (const Limit& l : FileLimits(dir)) ExpectLimit(l);
  EXPECT_TRUE(ReadManifest(dir, "[1,1,1,1]", 4).ok());
  EXPECT_TRUE(LoadCaseWithScale(dir, "1.7976931348623157e308").ok());
}

}  // namespace
}  // namespace cgdr
