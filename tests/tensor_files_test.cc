// src/io: .npy files, .bin manifests and the tensor bundles over the three
// file kinds (safetensors, .npy directory, .bin manifest), and cases and
// results read from any of them. Suite named `tensor_files`.
#include "io/tensor_files.h"

#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <map>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/synthetic.h"
#include "io/case_file.h"
#include "io/npy.h"
#include "test_util.h"

namespace cgdr {
namespace {

using testing::TempDir;

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
}

// A .npy file as numpy writes it: the given dict text, then the raw bytes.
std::string NpyBytes(const std::string& dict, const std::string& data) {
  std::string header = dict;
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string out("\x93NUMPY\x01\x00", 8);
  out += static_cast<char>(header.size() & 0xFF);
  out += static_cast<char>(header.size() >> 8);
  return out + header + data;
}

template <typename T>
std::string Raw(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

Status Parse(const std::string& bytes, NpyArray* a) {
  return ParseNpy("x.npy", reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), a);
}

void ExpectError(const Status& s, const std::string& what) {
  ASSERT_FALSE(s.ok()) << "expected an error with: " << what;
  EXPECT_NE(s.message().find(what), std::string::npos) << s.message();
  EXPECT_EQ(s.message().find('\n'), std::string::npos) << "one line: " << s.message();
}

TEST(tensor_files, NpyReadsWhatNumpyWrites) {
  NpyArray a;
  const std::vector<float> f{1.5f, -2.0f, 3.25f, 0.0f, 7.0f, 8.0f};
  ASSERT_TRUE(Parse(NpyBytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", Raw(f)), &a).ok());
  EXPECT_EQ(a.dtype, DType::kF32);
  EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(std::memcmp(a.data.data(), f.data(), 24), 0);

  const std::vector<int64_t> lens{3, 0, 5};  // torch's int64 seq_lens, narrowed
  ASSERT_TRUE(Parse(NpyBytes("{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }", Raw(lens)), &a).ok());
  EXPECT_EQ(a.dtype, DType::kI32);
  EXPECT_EQ(reinterpret_cast<const int32_t*>(a.data.data())[2], 5);

  const std::vector<uint16_t> bf{0x3F80, 0xC000};  // ml_dtypes' bfloat16: a 2-byte void to numpy
  ASSERT_TRUE(Parse(NpyBytes("{'descr': '|V2', 'fortran_order': False, 'shape': (2,), }", Raw(bf)), &a).ok());
  EXPECT_EQ(a.dtype, DType::kBF16);
  EXPECT_EQ(LoadAsF32(a.data.data(), a.dtype, 1), -2.0f);

  const std::vector<uint16_t> h{0x3C00};  // float16 1.0, scalar shape ()
  ASSERT_TRUE(Parse(NpyBytes("{'descr': '<f2', 'fortran_order': False, 'shape': (), }", Raw(h)), &a).ok());
  EXPECT_TRUE(a.shape.empty());
  EXPECT_EQ(LoadAsF32(a.data.data(), a.dtype, 0), 1.0f);
}

TEST(tensor_files, NpyRejectsWhatItCannotRead) {
  NpyArray a;
  const std::string four = Raw(std::vector<float>{1, 2, 3, 4});
  ExpectError(Parse("PK\x03\x04 not numpy at all", &a), "x.npy: not a .npy file");
  ExpectError(Parse(NpyBytes("{'descr': '>f4', 'fortran_order': False, 'shape': (4,), }", four), &a), "big-endian");
  ExpectError(Parse(NpyBytes("{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }", four), &a),
              "unsupported dtype '<f8'");
  ExpectError(Parse(NpyBytes("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", four), &a), "Fortran order");
  ExpectError(Parse(NpyBytes("{'descr': '<f4', 'fortran_order': False, 'shape': (5,), }", four), &a),
              "data holds 16 bytes, expected 20");
  ExpectError(Parse(NpyBytes("{'descr': '<f4', 'fortran_order': False, 'shape': (2, -2), }", four), &a), "'shape'");
  ExpectError(Parse(NpyBytes("{'descr': '<f4', 'shape': (4,), }", four), &a), "lacks 'fortran_order'");
  ExpectError(Parse(NpyBytes("{'descr': '<i8', 'fortran_order': False, 'shape': (1,), }",
                             Raw(std::vector<int64_t>{int64_t{1} << 40})),
                    &a),
              "does not fit int32");
}

TEST(tensor_files, NpyRoundTripWidensBf16) {
  TempDir dir;
  const std::vector<uint16_t> bf{0x3F80, 0x4049, 0xC2F7};
  ASSERT_TRUE(WriteNpy(dir / "b.npy", TensorView(bf.data(), DType::kBF16, {3, 1})).ok());
  NpyArray a;
  const Status s = ReadNpy(dir / "b.npy", &a);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(a.dtype, DType::kF32);  // numpy has no bf16: written as the exact f32 values
  EXPECT_EQ(a.shape, (std::vector<int64_t>{3, 1}));
  for (int i = 0; i < 3; ++i) EXPECT_EQ(LoadAsF32(a.data.data(), a.dtype, i), BF16ToF32(bf[i]));
  EXPECT_EQ(SerializeNpy(TensorView(bf.data(), DType::kBF16, {3, 1})).size() % 64, 12u);  // data after a 64-byte header
}

// A small case with every tensor, in the dtypes of the NPU's domain.
Case SmallCase() {
  CaseSpec spec;
  spec.Nk = 1;
  spec.Nv = 2;
  spec.Dk = 8;
  spec.Dv = 8;
  spec.lens = {5, 0, 3};
  spec.dtype = DType::kBF16;
  spec.state_dtype = DType::kF32;
  spec.scale = 0.25;
  return MakeCase(spec);
}

void ExpectSameInputs(const Inputs& want, const Inputs& got) {
  const std::pair<const TensorView*, const TensorView*> pairs[] = {
      {&want.query, &got.query},      {&want.key, &got.key}, {&want.value, &got.value},
      {&want.beta, &got.beta},        {&want.g, &got.g},     {&want.initial_state, &got.initial_state},
      {&want.seq_lens, &got.seq_lens}};
  for (const auto& [w, g] : pairs) {
    ASSERT_TRUE(g->present());
    EXPECT_EQ(g->dtype, w->dtype);
    EXPECT_EQ(g->ShapeString(), w->ShapeString());
    EXPECT_EQ(std::memcmp(g->data, w->data, static_cast<size_t>(w->numel()) * DTypeSize(w->dtype)), 0);
  }
}

TEST(tensor_files, CaseRoundTripInEveryKind) {
  for (FileKind kind : {FileKind::kSafetensors, FileKind::kNpy, FileKind::kBin}) {
    SCOPED_TRACE(FileKindName(kind));
    TempDir dir;
    Case c = SmallCase();
    const std::string path = BundlePath(kind, dir.path(), "case");
    ASSERT_TRUE(SaveCaseFiles(kind, path, c.inputs(), c.options()).ok());
    CaseFiles got;
    const Status s = LoadCaseFiles(path, &got);
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_EQ(got.files.kind(), kind);
    EXPECT_EQ(got.options.scale, 0.25);
    ExpectSameInputs(c.inputs(), got.inputs);  // bf16 comes back as bf16 from .npy too (metadata "dtypes")
  }
}

TEST(tensor_files, ManifestWithHandWrittenDescription) {
  TempDir dir;
  const std::vector<uint16_t> q{0x3F80, 0x4000, 0x4040, 0x4080};
  WriteText(dir / "q.bin", Raw(q));
  WriteText(dir / "lens.bin", Raw(std::vector<int64_t>{2}));
  WriteText(dir / "m.json", R"({"tensors": {"query": {"file": "q.bin", "dtype": "bfloat16", "shape": [2, 1, 2]},
                                            "seq_lens": {"file": "lens.bin", "dtype": "int64", "shape": [1]}},
                              "metadata": {"scale": 0.5, "use_qk_l2norm": false}})");
  TensorBundle b;
  const Status s = ReadTensorBundle(dir / "m.json", &b);
  ASSERT_TRUE(s.ok()) << s.message();
  ASSERT_NE(b.Find("query"), nullptr);
  EXPECT_EQ(b.Find("query")->dtype, DType::kBF16);
  EXPECT_EQ(LoadAsF32(b.Find("query")->data, DType::kBF16, 3), 4.0f);
  EXPECT_EQ(b.Find("seq_lens")->dtype, DType::kI32);
  EXPECT_EQ(b.metadata().at("scale"), "0.5");
  EXPECT_EQ(b.metadata().at("use_qk_l2norm"), "false");
}

TEST(tensor_files, BadFilesGetOneLineErrors) {
  TempDir dir;
  TensorBundle b;
  WriteText(dir / "q.bin", std::string(6, '\0'));
  WriteText(dir / "short.json", R"({"tensors": {"query": {"file": "q.bin", "dtype": "bf16", "shape": [2, 2]}}})");
  ExpectError(ReadTensorBundle(dir / "short.json", &b),
              "tensor 'query': " + (dir / "q.bin") + " holds 6 bytes, expected 8");
  WriteText(dir / "missing.json", R"({"tensors": {"query": {"file": "nope.bin", "dtype": "bf16", "shape": [1]}}})");
  ExpectError(ReadTensorBundle(dir / "missing.json", &b), "nope.bin: cannot open");
  WriteText(dir / "dtype.json", R"({"tensors": {"query": {"file": "q.bin", "dtype": "float64", "shape": [3]}}})");
  ExpectError(ReadTensorBundle(dir / "dtype.json", &b), "unsupported dtype \"float64\"");
  WriteText(dir / "broken.json", R"({"tensors": {"query": )");
  ExpectError(ReadTensorBundle(dir / "broken.json", &b), "not valid JSON");
  WriteText(dir / "extra.json",
            R"({"tensors": {"query": {"file": "q.bin", "dtype": "bf16", "shape": [3]}}, "shapes": 1})");
  ExpectError(ReadTensorBundle(dir / "extra.json", &b), "unknown key 'shapes'");
  ExpectError(ReadTensorBundle(dir / "q.npy", &b), "give the directory");
  ExpectError(ReadTensorBundle(dir / "case.txt", &b), "No such file or directory");
  WriteText(dir / "x.txt", "");
  ExpectError(ReadTensorBundle(dir / "x.txt", &b), "unknown kind of file");
}

TEST(tensor_files, NpyDirectoryChecks) {
  TempDir dir;
  Case c = SmallCase();
  const std::string path = dir / "case";
  ASSERT_TRUE(SaveCaseFiles(FileKind::kNpy, path, c.inputs(), c.options()).ok());
  // A typo in a file name is an unknown tensor, as in a safetensors case; the
  // dtypes metadata.json declares name the file too.
  std::filesystem::rename(path + "/query.npy", path + "/querry.npy");
  CaseFiles got;
  ExpectError(LoadCaseFiles(path, &got), "dtypes: no tensor 'query.npy' in the directory");
  std::filesystem::copy_file(path + "/metadata.json", path + "/metadata.keep");
  std::filesystem::remove(path + "/metadata.json");
  ExpectError(LoadCaseFiles(path, &got), "unknown tensor 'querry'");
  std::filesystem::rename(path + "/querry.npy", path + "/query.npy");
  std::filesystem::rename(path + "/metadata.keep", path + "/metadata.json");
  // A declared bf16 that is not one.
  const std::vector<float> v{1.0f, 1.0f + 0x1p-20f};
  ASSERT_TRUE(WriteNpy(path + "/beta.npy", TensorView(v.data(), DType::kF32, {2})).ok());
  ExpectError(LoadCaseFiles(path, &got), "dtypes: 'beta' declared bf16, but element 1");
  TempDir empty;
  ExpectError(LoadCaseFiles(empty.path(), &got), "holds no .npy files");
}

TEST(tensor_files, ResultsWithoutFinalState) {
  TempDir dir;
  const std::vector<float> out(12, 0.5f);
  Outputs o;
  o.out = TensorView(out.data(), DType::kF32, {3, 2, 2});
  ASSERT_TRUE(SaveResultFiles(FileKind::kNpy, dir / "r", o, Options{}).ok());
  ResultFiles r;
  ASSERT_TRUE(LoadResultFiles(dir / "r", &r).ok());
  EXPECT_TRUE(r.outputs.out.present());
  EXPECT_FALSE(r.outputs.final_state.present());
  ASSERT_TRUE(WriteNpy(dir / "r/o.npy", o.out).ok());
  ExpectError(LoadResultFiles(dir / "r", &r), "unknown tensor 'o' (expected out, final_state, checkpoint_states)");
}

// Issue 19's rules for the .npy and .bin readers: the JSON descriptions are
// checked for depth before they are parsed (a deep "shape" reached nlohmann's
// recursive dump() in the error message), and nothing is echoed raw.
TEST(tensor_files, DeepJsonDescriptionsAreRefusedAtTheDepthLimit) {
  TempDir dir;
  TensorBundle b;
  WriteText(dir / "q.bin", std::string(8, '\0'));
  const auto manifest = [](const std::string& shape) {
    return R"({"tensors": {"query": {"file": "q.bin", "dtype": "bf16", "shape": )" + shape + "}}}";
  };
  WriteText(dir / "ok.json", manifest("[2, 2]"));  // 4 levels: the limit
  const Status ok = ReadTensorBundle(dir / "ok.json", &b);
  EXPECT_TRUE(ok.ok()) << ok.message();
  WriteText(dir / "five.json", manifest("[[2, 2]]"));
  ExpectError(ReadTensorBundle(dir / "five.json", &b), "JSON nested deeper than 4 levels");
  const int deep = 200000;  // 400 kB, under the 1 MiB limit
  WriteText(dir / "deep.json", manifest(std::string(deep, '[') + std::string(deep, ']')));
  ExpectError(ReadTensorBundle(dir / "deep.json", &b), "JSON nested deeper than 4 levels");

  Case c = SmallCase();
  const std::string npy = dir / "case";
  ASSERT_TRUE(SaveCaseFiles(FileKind::kNpy, npy, c.inputs(), c.options()).ok());
  const std::string nested = std::string(deep, '[') + std::string(deep, ']');
  WriteText(npy + "/metadata.json", R"({"dtypes": {"query": )" + nested + "}}");
  CaseFiles got;
  ExpectError(LoadCaseFiles(npy, &got), "metadata.json: JSON nested deeper than 4 levels");
}

TEST(tensor_files, JsonDescriptionsAreQuotedEscaped) {
  TempDir dir;
  TensorBundle b;
  WriteText(dir / "utf8.json", "{\"tensors\": {\"q\xff\": {}}}");
  ExpectError(ReadTensorBundle(dir / "utf8.json", &b), "not valid JSON (invalid UTF-8");
  WriteText(dir / "q\nx.bin", std::string(6, '\0'));
  WriteText(dir / "nl.json", R"({"tensors": {"que\nry": {"file": "q\nx.bin", "dtype": "bf\u0007", "shape": [2]}}})");
  ExpectError(ReadTensorBundle(dir / "nl.json", &b), "tensor 'que\\x0ary': unsupported dtype \"bf\\x07\"");
  WriteText(dir / "size.json", R"({"tensors": {"query": {"file": "q\nx.bin", "dtype": "bf16", "shape": [2]}}})");
  ExpectError(ReadTensorBundle(dir / "size.json", &b), "q\\x0ax.bin holds 6 bytes, expected 4");
}

// Runs `read` on another thread; fails (after unblocking it) if it blocks on `fifo`.
Status WithoutBlocking(const std::string& fifo, const std::function<Status()>& read) {
  auto r = std::async(std::launch::async, read);
  if (r.wait_for(std::chrono::seconds(30)) != std::future_status::ready) {
    const int w = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);  // lets a blocked open() return
    if (w >= 0) ::close(w);
    ADD_FAILURE() << "blocked on the FIFO " << fifo;
  }
  return r.get();
}

// Issue 19, defect 3 in the other readers: a FIFO named by a manifest, in a
// .npy directory or as its metadata.json is refused before it is opened.
TEST(tensor_files, NonRegularInputsAreRefusedWithoutBlocking) {
  TempDir dir;
  ASSERT_EQ(::mkfifo((dir / "q.bin").c_str(), 0600), 0);
  WriteText(dir / "m.json", R"({"tensors": {"query": {"file": "q.bin", "dtype": "bf16", "shape": [2]}}})");
  const std::string manifest = dir / "m.json";
  Status s = WithoutBlocking(dir / "q.bin", [&] {
    TensorBundle b;
    return ReadTensorBundle(manifest, &b);
  });
  ExpectError(s, "q.bin: not a regular file (a FIFO)");

  Case c = SmallCase();
  const std::string npy = dir / "case";
  ASSERT_TRUE(SaveCaseFiles(FileKind::kNpy, npy, c.inputs(), c.options()).ok());
  for (const char* name : {"/g.npy", "/metadata.json"}) {
    const std::string fifo = npy + name;
    std::filesystem::remove(fifo);
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    s = WithoutBlocking(fifo, [&] {
      CaseFiles got;
      return LoadCaseFiles(npy, &got);
    });
    ExpectError(s, std::string(name + 1) + ": not a regular file (a FIFO)");
    std::filesystem::remove(fifo);
  }
}

// A version-1 header whose dict ends inside the first 12 bytes read: the
// reader read the rest of the file into memory past the end of its buffer
// (a heap overflow), then reported an unexpected end of file.
TEST(tensor_files, NpyHeaderShorterThanItsPreambleRead) {
  TempDir dir;
  for (int len : {0, 1}) {
    std::string bytes("\x93NUMPY\x01\x00", 8);
    bytes += static_cast<char>(len);
    bytes += '\0';
    bytes += std::string(54, 'x');
    WriteText(dir / "a.npy", bytes);
    NpyArray a;
    ExpectError(ReadNpy(dir / "a.npy", &a), "bytes is too short for its dict");
  }
}

// The byte limits of a .npy header and of a JSON description, on both sides.
TEST(tensor_files, HeaderByteLimitsOnBothSides) {
  const uint32_t limit = 1u << 20;
  for (uint32_t len : {limit, limit + 1}) {
    std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }";
    dict.resize(len - 1, ' ');
    dict += '\n';
    std::string bytes("\x93NUMPY\x02\x00", 8);
    for (int i = 0; i < 4; ++i) bytes += static_cast<char>((len >> (8 * i)) & 0xFF);
    NpyArray a;
    const Status s = Parse(bytes + dict + Raw(std::vector<float>{2.5f}), &a);
    if (len == limit) {
      ASSERT_TRUE(s.ok()) << s.message();
      EXPECT_EQ(static_cast<const float*>(static_cast<const void*>(a.data.data()))[0], 2.5f);
    } else {
      ExpectError(s, ".npy header of 1048577 bytes exceeds the limit of 1048576 bytes");
    }
  }
  TempDir dir;
  WriteText(dir / "q.bin", std::string(4, '\0'));
  for (uint32_t size : {limit, limit + 1}) {
    std::string text = R"({"tensors": {"query": {"file": "q.bin", "dtype": "f32", "shape": [1]}}})";
    text.resize(size, ' ');
    WriteText(dir / "m.json", text);
    TensorBundle b;
    const Status s = ReadTensorBundle(dir / "m.json", &b);
    if (size == limit) {
      EXPECT_TRUE(s.ok()) << s.message();
    } else {
      ExpectError(s, "file of 1048577 bytes is too large for a JSON description");
    }
  }
}

// Every file a bundle writes goes through the output-path rules.
TEST(tensor_files, BundleOutputsFollowTheOutputPathRules) {
  TempDir dir;
  Case c = SmallCase();
  const std::string npy = dir / "case";
  ASSERT_EQ(std::filesystem::create_directory(npy), true);
  ASSERT_EQ(::mkfifo((npy + "/query.npy").c_str(), 0600), 0);
  ExpectError(SaveCaseFiles(FileKind::kNpy, npy, c.inputs(), c.options()), "query.npy: is a FIFO");
  struct stat st {};
  ASSERT_EQ(::lstat((npy + "/query.npy").c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
  ASSERT_EQ(::symlink("/dev/null", (dir / "m.key.bin").c_str()), 0);
  ExpectError(SaveCaseFiles(FileKind::kBin, dir / "m.json", c.inputs(), c.options()),
              "(where the symbolic link leads: '/dev/null')");
  ASSERT_EQ(::lstat((dir / "m.key.bin").c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));
}

}  // namespace
}  // namespace cgdr
