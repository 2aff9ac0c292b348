// Writes the seed corpora of the fuzz targets (fuzz/corpus/*):
//   fuzz_make_seeds DIR
// safetensors: small valid case and result files of every dtype and option,
// and broken variants (truncated, bad JSON, overlapping or misaligned
// offsets, huge lengths and shapes, unknown dtypes and keys, deep nesting,
// many entries, long numbers and strings, invalid UTF-8);
// tensor_files: a selector byte (even: .npy, odd: .bin manifest) then .npy
// files of every dtype, manifests naming q.bin and e.bin, and the hostile
// shapes (a header shorter than its preamble read, deep nesting, invalid
// UTF-8, names with control bytes);
// api, differential, decode_differential: byte strings from a fixed seed (every byte string is a
// valid input for those targets; these spread over their choices).
//   fuzz_make_seeds --large DIR
// writes DIR/safetensors: the hostile shapes of issue 19 at a size where
// super-linear reading would run past `make fuzz`'s per-input time budget
// (-timeout): 50,000 entries (52 s of CPU for the quadratic reader),
// 250 kB numbers and strings. Too large for the repository; `make fuzz`
// generates them in build-fuzz.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "core/synthetic.h"
#include "io/case_file.h"
#include "io/npy.h"
#include "io/safetensors.h"

namespace {

namespace fs = std::filesystem;

void Write(const fs::path& p, const std::string& bytes) {
  std::ofstream f(p, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string Le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}

// A file from a literal header and data bytes.
std::string Raw(const std::string& header, const std::string& data) { return Le64(header.size()) + header + data; }

std::string CaseBytes(const cgdr::CaseSpec& spec) {
  cgdr::Case c = cgdr::MakeCase(spec);
  std::string bytes;
  if (!cgdr::SerializeSafetensors(cgdr::CaseTensors(c.inputs()), cgdr::CaseMetadata(c.options()), &bytes).ok()) {
    std::fprintf(stderr, "cannot serialise a seed case\n");
    std::exit(1);
  }
  return bytes;
}

// `open` n times, `inner`, `close` n times.
std::string Nested(const std::string& open, const std::string& inner, const std::string& close, size_t n) {
  std::string s;
  for (size_t i = 0; i < n; ++i) s += open;
  s += inner;
  for (size_t i = 0; i < n; ++i) s += close;
  return s;
}

// Issue 19's hostile headers: 100,000 nested arrays (the ~200 kB file that
// crashed the reader) and 1,000 nested objects; `scale` times 2,000 entries
// and 10 kB numbers and strings.
template <typename Put>
void HostileSeeds(size_t scale, Put put) {
  const std::string tail = R"(,"data_offsets":[0,4]}})";
  put("regression_deep_nesting", Raw(R"({"x":{"dtype":"F32","shape":)" + Nested("[", "1", "]", 100000) + tail,
                                     std::string(4, '\0')));
  put("deep_objects", Raw(R"({"x":{"dtype":"F32","shape":[)" + Nested("{\"a\":", "1", "}", 1000) + "]" + tail,
                          std::string(4, '\0')));
  std::string many = "{";
  for (size_t i = 0; i < 2000 * scale; ++i) {
    many += (i ? ",\"t" : "\"t") + std::to_string(i) + R"(":{"dtype":"F32","shape":[0],"data_offsets":[0,0]})";
  }
  put("many_entries", Raw(many + "}", ""));
  const std::string digits(10000 * scale, '9');
  put("long_number", Raw(R"({"x":{"dtype":"F32","shape":[)" + digits + "]" + tail, std::string(4, '\0')));
  put("long_exponent", Raw(R"({"x":{"dtype":"F32","shape":[1e-)" + digits + "]" + tail, std::string(4, '\0')));
  put("long_string", Raw(R"({"x":{"dtype":")" + std::string(10000 * scale, 'F') + R"(","shape":[1])" + tail,
                         std::string(4, '\0')));
  std::string bad_utf8;
  for (size_t i = 0; i < 2500 * scale; ++i) bad_utf8 += "\xc3\xa9\xc0\xaf";  // a valid character, then an overlong one
  put("invalid_utf8", Raw("{\"" + bad_utf8 + R"(":{"dtype":"F32","shape":[1])" + tail, std::string(4, '\0')));
}

void SafetensorsSeeds(const fs::path& dir) {
  using cgdr::DType;
  int n = 0;
  auto put = [&](const std::string& name, const std::string& bytes) { Write(dir / (std::to_string(n++) + "_" + name), bytes); };
  cgdr::CaseSpec s;
  s.Nk = 1; s.Nv = 2; s.Dk = 4; s.Dv = 3; s.lens = {3, 0, 2};
  put("f32_case", CaseBytes(s));
  s.dtype = DType::kF16; s.g_dtype = DType::kBF16; s.state_dtype = DType::kF32; s.layout = cgdr::StateLayout::kKV;
  put("f16_kv_case", CaseBytes(s));
  s.dtype = DType::kBF16; s.has_g = false; s.has_initial_state = false; s.use_qk_l2norm = true; s.scale = 0.25;
  put("bf16_nostate_case", CaseBytes(s));
  cgdr::CaseSpec e;
  e.lens = {0};
  e.Dk = 2; e.Dv = 2;
  put("empty_case", CaseBytes(e));
  const std::string good = CaseBytes(s);
  put("truncated", good.substr(0, good.size() - 7));
  put("header_only", good.substr(0, 8 + static_cast<size_t>(static_cast<uint8_t>(good[0]))));
  std::string json = good;
  json[8] = 'X';
  put("bad_json", json);
  put("empty_header", Raw("{}", ""));
  put("too_short", "abc");
  put("huge_header_len", Le64(~0ull) + "{}");
  put("metadata_only", Raw(R"({"__metadata__":{"scale":"0.5","state_layout":"kv","use_qk_l2norm":"true"}})", ""));
  put("bad_metadata", Raw(R"({"__metadata__":{"scale":"nan","state_layout":"xy","k":1}})", ""));
  put("one_tensor", Raw(R"({"seq_lens":{"dtype":"I32","shape":[2],"data_offsets":[0,8]}})", std::string(8, '\1')));
  put("misaligned", Raw(R"({"a":{"dtype":"U8x","shape":[],"data_offsets":[0,0]},"query":{"dtype":"F32","shape":[1,1,1],"data_offsets":[1,5]},"b":{"dtype":"F16","shape":[1],"data_offsets":[0,1]}})",
                        std::string(5, '\0')));
  put("overlap", Raw(R"({"query":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"key":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                     std::string(8, '\0')));
  put("hole", Raw(R"({"query":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", std::string(8, '\0')));
  put("huge_shape", Raw(R"({"query":{"dtype":"F32","shape":[4294967296,4294967296,0],"data_offsets":[0,0]}})", ""));
  put("overflow_shape", Raw(R"({"query":{"dtype":"F32","shape":[9223372036854775807,2],"data_offsets":[0,8]}})", std::string(8, '\0')));
  put("negative_dim", Raw(R"({"query":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", std::string(4, '\0')));
  put("f64", Raw(R"({"query":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})", std::string(8, '\0')));
  put("huge_offsets", Raw(R"({"query":{"dtype":"F32","shape":[1],"data_offsets":[18446744073709551612,18446744073709551616]}})", ""));
  put("zero_len_huge_T", Raw(R"({"query":{"dtype":"F32","shape":[0,1,4],"data_offsets":[0,0]},"key":{"dtype":"F32","shape":[0,1,4],"data_offsets":[0,0]},"value":{"dtype":"F32","shape":[0,100000,256],"data_offsets":[0,0]},"beta":{"dtype":"F32","shape":[0,100000],"data_offsets":[0,0]},"seq_lens":{"dtype":"I32","shape":[1],"data_offsets":[0,4]}})",
                             std::string(4, '\0')));
  put("rank5", Raw(R"({"query":{"dtype":"F32","shape":[1,1,1,1,1],"data_offsets":[0,4]}})", std::string(4, '\0')));
  put("duplicate_key", Raw(R"({"query":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"query":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
                           std::string(4, '\0')));
  put("control_chars", Raw("{\"q\\u0000\\n\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", std::string(4, '\0')));
  HostileSeeds(1, [&](const std::string& name, const std::string& bytes) { put(name, bytes); });
}

// Byte strings of varied lengths from a fixed generator.
void RandomSeeds(const fs::path& dir, int count, uint32_t seed) {
  std::mt19937 rng(seed);
  Write(dir / "zeros", std::string(48, '\0'));
  for (int i = 0; i < count; ++i) {
    std::string s(8 + rng() % 56, '\0');
    for (char& c : s) c = static_cast<char>(rng());
    Write(dir / ("random_" + std::to_string(i)), s);
  }
}

void TensorFilesSeeds(const fs::path& dir) {
  int n = 0;
  auto put = [&](const char* name, char selector, const std::string& bytes) {
    Write(dir / (std::to_string(n++) + "_" + name), std::string(1, selector) + bytes);
  };
  const std::vector<float> f{1.5f, -2.0f, 3.25f, 0.0f, 7.0f, 8.0f};
  const std::vector<int32_t> i{3, 0, 5};
  const std::vector<uint16_t> h{0x3C00, 0xC000, 0x7BFF, 0x0001};
  put("npy_f32", 0, cgdr::SerializeNpy(cgdr::TensorView(f.data(), cgdr::DType::kF32, {2, 3})));
  put("npy_i32", 0, cgdr::SerializeNpy(cgdr::TensorView(i.data(), cgdr::DType::kI32, {3})));
  put("npy_f16", 0, cgdr::SerializeNpy(cgdr::TensorView(h.data(), cgdr::DType::kF16, {2, 1, 2})));
  put("npy_bf16_widened", 0, cgdr::SerializeNpy(cgdr::TensorView(h.data(), cgdr::DType::kBF16, {4})));
  // A version-1 or -2 preamble (magic, version, header length) before `dict`.
  auto npy = [](int version, const std::string& dict) {
    std::string p("\x93NUMPY", 6);
    p += static_cast<char>(version);
    p += '\0';
    for (int b = 0; b < (version == 1 ? 2 : 4); ++b) p += static_cast<char>((dict.size() >> (8 * b)) & 0xff);
    return p + dict;
  };
  put("npy_bfloat16_v2", 0,
      npy(2, "{'descr': '|V2', 'fortran_order': False, 'shape': (2,), }\n") + std::string("\x80\x3f\x00\x40", 4));
  put("npy_short_header", 0, npy(1, "") + std::string(54, 'x'));
  put("npy_fortran", 0, npy(1, "{'descr': '<f4', 'fortran_order': True, 'shape': (1,), }\n") + "1234");
  const std::string q = R"({"tensors": {"query": {"file": "q.bin", "dtype": "bf16", "shape": [2, 4, 4]},)"
                        R"( "seq_lens": {"file": "e.bin", "dtype": "int64", "shape": [0]}},)"
                        R"( "metadata": {"scale": 0.5, "use_qk_l2norm": false, "state_layout": "vk"}})";
  put("manifest", 1, q);
  put("manifest_i64", 1, R"({"tensors": {"seq_lens": {"file": "q.bin", "dtype": "i64", "shape": [8]}}})");
  put("manifest_f32", 1, R"({"tensors": {"g": {"file": "q.bin", "dtype": "float", "shape": [16]}}})");
  put("manifest_size", 1, R"({"tensors": {"query": {"file": "q.bin", "dtype": "f16", "shape": [3]}}})");
  put("manifest_missing", 1, R"({"tensors": {"query": {"file": "none.bin", "dtype": "f16", "shape": [3]}}})");
  put("manifest_deep", 1, R"({"tensors": {"query": {"file": "q.bin", "dtype": "f16", "shape": )" +
                              std::string(2000, '[') + std::string(2000, ']') + "}}}");
  put("manifest_utf8", 1, "{\"tensors\": {\"q\xc3\x28\": {\"file\": \"q.bin\"}}}");
  put("manifest_control", 1, R"({"tensors": {"q\n\u0007": {"file": "q\nbin", "dtype": "bf\u0000", "shape": [1]}}})");
  put("manifest_huge_number", 1, R"({"tensors": {"q": {"file": "q.bin", "dtype": "f32", "shape": [1e999, )" +
                                     std::string(300, '9') + "]}}}");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "--large") {
    const fs::path dir = fs::path(argv[2]) / "safetensors";
    fs::create_directories(dir);
    HostileSeeds(25, [&](const std::string& name, const std::string& bytes) { Write(dir / ("large_" + name), bytes); });
    return 0;
  }
  if (argc != 2) {
    std::fprintf(stderr, "usage: fuzz_make_seeds DIR | fuzz_make_seeds --large DIR\n");
    return 2;
  }
  const fs::path root = argv[1];
  for (const char* d : {"safetensors", "api", "differential", "decode_differential", "tensor_files"}) fs::create_directories(root / d);
  SafetensorsSeeds(root / "safetensors");
  TensorFilesSeeds(root / "tensor_files");
  RandomSeeds(root / "api", 40, 11);
  RandomSeeds(root / "differential", 30, 12);
  RandomSeeds(root / "decode_differential", 30, 13);
  return 0;
}
