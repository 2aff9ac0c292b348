// src/io: the safetensors reader/writer (strict checks, atomic writes) and
// the case/result files built on it (SPEC 7). Suite named `safetensors` so
// `ctest -R safetensors` selects it.
#include "io/safetensors.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/synthetic.h"
#include "io/case_file.h"
#include "test_util.h"

namespace cgdr {
namespace {

namespace fs = std::filesystem;

using testing::TempDir;

std::string Le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>(v >> (8 * i));
  return s;
}

// A file from a raw header text and data bytes.
std::string FileBytes(const std::string& header, const std::string& data) {
  return Le64(header.size()) + header + data;
}

Status Parse(const std::string& bytes, SafetensorsFile* f) {
  return ParseSafetensors("mem.safetensors", reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), f);
}

// The bytes must be rejected with one line that names the file and says `what`.
void ExpectRejected(const std::string& bytes, const std::string& what) {
  SafetensorsFile f;
  const Status s = Parse(bytes, &f);
  ASSERT_FALSE(s.ok()) << "accepted; expected an error containing: " << what;
  EXPECT_NE(s.message().find(what), std::string::npos) << "message: " << s.message();
  EXPECT_EQ(s.message().rfind("mem.safetensors: ", 0), 0u) << s.message();
  EXPECT_EQ(s.message().find('\n'), std::string::npos) << s.message();
}

std::string ReadAll(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

void WriteRaw(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f << bytes;
}

// ---- round trips -----------------------------------------------------------

struct Sample {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

std::vector<Sample> Samples() {
  std::vector<Sample> s = {{"half", DType::kF16, {2, 3}, {}},         {"brain", DType::kBF16, {5}, {}},
                           {"single", DType::kF32, {1, 2, 2, 3}, {}}, {"ints", DType::kI32, {3, 1}, {}},
                           {"scalar", DType::kF32, {}, {}},           {"empty", DType::kF16, {0, 4}, {}}};
  uint8_t next = 1;
  for (auto& x : s) {
    int64_t n = 1;
    for (int64_t d : x.shape) n *= d;
    x.bytes.resize(static_cast<size_t>(n) * DTypeSize(x.dtype));
    for (auto& b : x.bytes) b = next++;
  }
  return s;
}

std::vector<SafetensorsWriteTensor> ToWrite(const std::vector<Sample>& s) {
  std::vector<SafetensorsWriteTensor> w;
  for (const auto& x : s) w.emplace_back(x.name, x.dtype, x.shape, x.bytes.data());
  return w;
}

void ExpectSame(const std::vector<Sample>& want, const SafetensorsFile& f) {
  ASSERT_EQ(f.tensors().size(), want.size());
  for (const auto& x : want) {
    const SafetensorsTensor* t = f.Find(x.name);
    ASSERT_NE(t, nullptr) << x.name;
    EXPECT_EQ(t->dtype, x.dtype) << x.name;
    EXPECT_EQ(t->shape, x.shape) << x.name;
    ASSERT_EQ(t->nbytes, static_cast<int64_t>(x.bytes.size())) << x.name;
    ASSERT_NE(t->data, nullptr) << x.name;  // present even when empty
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t->data) % DTypeSize(x.dtype), 0u) << x.name;
    if (!x.bytes.empty()) {  // memcmp's pointers must not be null, even for 0 bytes
      EXPECT_EQ(std::memcmp(t->data, x.bytes.data(), x.bytes.size()), 0) << x.name;
    }
    EXPECT_EQ(t->view().rank, static_cast<int>(x.shape.size()));
  }
}

TEST(safetensors, RoundTripEveryDTypeThroughAFile) {
  TempDir dir;
  const auto samples = Samples();
  const std::map<std::string, std::string> md{{"scale", "0.125"}, {"note", "with \"quotes\" and ünïcode"}};
  ASSERT_TRUE(WriteSafetensors(dir / "a.safetensors", ToWrite(samples), md).ok());
  SafetensorsFile f;
  const Status s = ReadSafetensors(dir / "a.safetensors", &f);
  ASSERT_TRUE(s.ok()) << s.message();
  ExpectSame(samples, f);
  EXPECT_EQ(f.metadata(), md);
  EXPECT_EQ(dir.Entries(), std::vector<std::string>{"a.safetensors"});  // no temporary left
}

TEST(safetensors, RoundTripInMemoryAndLayout) {
  const auto samples = Samples();
  std::string bytes;
  ASSERT_TRUE(SerializeSafetensors(ToWrite(samples), {}, &bytes).ok());
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ((8 + n) % 8, 0u) << "data buffer should start 8-byte aligned";
  EXPECT_EQ(bytes[8], '{');
  SafetensorsFile f;
  ASSERT_TRUE(Parse(bytes, &f).ok());
  ExpectSame(samples, f);
  EXPECT_TRUE(f.metadata().empty());
  // Moving the file keeps the views valid (they point into heap buffers).
  SafetensorsFile moved = std::move(f);
  ExpectSame(samples, moved);
}

TEST(safetensors, EmptyFileIsValid) {
  SafetensorsFile f;
  ASSERT_TRUE(Parse(FileBytes("{}", ""), &f).ok());
  EXPECT_TRUE(f.tensors().empty());
}

TEST(safetensors, MisalignedOffsetsAreCopiedToAlignedMemory) {
  // One F16 (2 bytes) then an I32 at offset 2: legal, but not 4-byte aligned in the buffer.
  const std::string header =
      R"({"h":{"dtype":"F16","shape":[1],"data_offsets":[0,2]},"i":{"dtype":"I32","shape":[2],"data_offsets":[2,10]}})";
  std::string data(10, '\0');
  const int32_t ints[2] = {-7, 123456};
  std::memcpy(data.data() + 2, ints, 8);
  SafetensorsFile f;
  ASSERT_TRUE(Parse(FileBytes(header, data), &f).ok());
  const SafetensorsTensor* t = f.Find("i");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t->data) % 4, 0u);
  EXPECT_EQ(std::memcmp(t->data, ints, 8), 0);
}

TEST(safetensors, ZeroDimensionWinsOverHugeOnes) {
  SafetensorsFile f;
  const std::string header =
      R"({"z":{"dtype":"F32","shape":[0,4611686018427387904,4611686018427387904],"data_offsets":[0,0]}})";
  const Status s = Parse(FileBytes(header, ""), &f);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(f.Find("z")->numel, 0);
}

// ---- corrupt headers -------------------------------------------------------

const std::string kGoodEntry = R"("x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
const std::string kData8(8, '\0');

TEST(safetensors, RejectsBadHeaderLength) {
  ExpectRejected("abc", "too short for the 8-byte header length");
  ExpectRejected(Le64(1000) + "{}", "runs past the end of the file");
  ExpectRejected(Le64(uint64_t{1} << 63) + "{}", "exceeds the limit");
  ExpectRejected(Le64(0), "too short for a JSON object");
}

TEST(safetensors, RejectsBadJson) {
  ExpectRejected(FileBytes("{\"x\":", ""), "not valid JSON");
  ExpectRejected(FileBytes("{\"x\n\":1}", ""), "not valid JSON");
  ExpectRejected(FileBytes("[1,2]", ""), "must be a JSON object");
  ExpectRejected(FileBytes("{" + kGoodEntry + "," + kGoodEntry + "}", kData8), "repeats the key 'x'");
  ExpectRejected(FileBytes(R"({"x":{"dtype":"F32","dtype":"F32","shape":[2],"data_offsets":[0,8]}})", kData8),
                 "repeats the key 'dtype'");
}

TEST(safetensors, RejectsMissingOrExtraFields) {
  ExpectRejected(FileBytes(R"({"x":{"shape":[2],"data_offsets":[0,8]}})", kData8), "tensor 'x': missing field 'dtype'");
  ExpectRejected(FileBytes(R"({"x":{"dtype":"F32","data_offsets":[0,8]}})", kData8),
                 "tensor 'x': missing field 'shape'");
  ExpectRejected(FileBytes(R"({"x":{"dtype":"F32","shape":[2]}})", kData8), "tensor 'x': missing field 'data_offsets'");
  ExpectRejected(FileBytes(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"strides":[1]}})", kData8),
                 "tensor 'x': unexpected field 'strides'");
  ExpectRejected(FileBytes(R"({"x":[1]})", kData8), "tensor 'x': expected an object");
  ExpectRejected(FileBytes(R"({"":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", kData8), "empty name");
}

TEST(safetensors, RejectsBadDType) {
  ExpectRejected(FileBytes(R"({"x":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})", kData8),
                 "tensor 'x': unsupported dtype \"F64\"");
  ExpectRejected(FileBytes(R"({"x":{"dtype":4,"shape":[2],"data_offsets":[0,8]}})", kData8), "unsupported dtype 4");
  ExpectRejected(FileBytes(R"({"x":{"dtype":"f32","shape":[2],"data_offsets":[0,8]}})", kData8), "unsupported dtype");
}

TEST(safetensors, RejectsBadShapes) {
  ExpectRejected(FileBytes(R"({"x":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", kData8),
                 "tensor 'x': shape[0] is -2, expected a non-negative integer");
  ExpectRejected(FileBytes(R"({"x":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})", kData8), "shape[0] is 2.0");
  ExpectRejected(FileBytes(R"({"x":{"dtype":"F32","shape":2,"data_offsets":[0,8]}})", kData8),
                 "shape must be an array");
  ExpectRejected(FileBytes(R"({"x":{"dtype":"F32","shape":[1,1,1,1,1,1,1,1,2],"data_offsets":[0,8]}})", kData8),
                 "rank 9 exceeds");
  ExpectRejected(FileBytes(R"({"x":{"dtype":"F32","shape":[18446744073709551615],"data_offsets":[0,8]}})", kData8),
                 "expected a non-negative integer <= 9223372036854775807");
}

TEST(safetensors, RejectsShapeProductOverflow) {
  // 2^32 * 2^32 elements overflows; 2^62 F32 elements fit but their bytes do not.
  ExpectRejected(FileBytes(R"({"x":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", kData8),
                 "more bytes than a 64-bit size can hold");
  ExpectRejected(FileBytes(R"({"x":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,8]}})", kData8),
                 "more bytes than a 64-bit size can hold");
}

TEST(safetensors, RejectsBadOffsets) {
  ExpectRejected(FileBytes(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,16]}})", kData8),
                 "tensor 'x': data_offsets [0, 16] outside the data buffer of 8 bytes");
  ExpectRejected(FileBytes(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", kData8),
                 "outside the data buffer");
  ExpectRejected(FileBytes(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[-1,8]}})", kData8),
                 "data_offsets must be [begin, end]");
  ExpectRejected(FileBytes(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", kData8),
                 "data_offsets must be [begin, end]");
  ExpectRejected(FileBytes(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,18446744073709551615]}})", kData8),
                 "data_offsets must be [begin, end]");
}

TEST(safetensors, RejectsSizeMismatch) {
  ExpectRejected(FileBytes(R"({"x":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", kData8),
                 "tensor 'x': data_offsets [0, 8] hold 8 bytes, expected 12");
  ExpectRejected(FileBytes(R"({"x":{"dtype":"F16","shape":[2],"data_offsets":[0,8]}})", kData8), "expected 4");
}

TEST(safetensors, RejectsOverlapsHolesAndTrailingBytes) {
  ExpectRejected(FileBytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                           R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                           kData8),
                 "overlap tensor 'a'");
  ExpectRejected(FileBytes(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", kData8), "hole of 4 bytes");
  ExpectRejected(FileBytes(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", kData8),
                 "4 bytes after the last tensor");
}

TEST(safetensors, RejectsBadMetadata) {
  ExpectRejected(FileBytes(R"({"__metadata__":[1]})", ""), "__metadata__ must be an object");
  ExpectRejected(FileBytes(R"({"__metadata__":{"scale":0.5}})", ""), "__metadata__ 'scale' must be a string");
}

TEST(safetensors, ErrorsStayOnOneLine) {
  // A tensor name with a newline and a control byte is escaped in the message.
  ExpectRejected(FileBytes("{\"a\\nb\\u0001\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[0,8]}}", kData8),
                 "tensor 'a\\x0ab\\x01'");
}

TEST(safetensors, ReadRejectsMissingTruncatedAndNonRegularFiles) {
  TempDir dir;
  SafetensorsFile f;
  Status s = ReadSafetensors(dir / "nope.safetensors", &f);
  EXPECT_NE(s.message().find("nope.safetensors: cannot open"), std::string::npos) << s.message();
  s = ReadSafetensors(dir.path(), &f);
  EXPECT_NE(s.message().find("not a regular file"), std::string::npos) << s.message();

  std::string bytes;
  const auto samples = Samples();
  ASSERT_TRUE(SerializeSafetensors(ToWrite(samples), {}, &bytes).ok());
  WriteRaw(dir / "t.safetensors", bytes.substr(0, bytes.size() - 5));
  s = ReadSafetensors(dir / "t.safetensors", &f);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("t.safetensors: tensor '"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("outside the data buffer"), std::string::npos) << s.message();
}

// ---- atomic writes ---------------------------------------------------------

TEST(safetensors, WriteIntoMissingDirectoryCreatesNothing) {
  TempDir dir;
  const auto samples = Samples();
  const Status s = WriteSafetensors(dir / "missing/out.safetensors", ToWrite(samples), {});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("out.safetensors: cannot create a temporary file"), std::string::npos) << s.message();
  EXPECT_TRUE(dir.Entries().empty());
}

TEST(safetensors, FailedRenameLeavesNoTemporary) {
  TempDir dir;
  fs::create_directory(dir / "target");  // a directory where the file should go: rename fails
  const auto samples = Samples();
  const Status s = WriteSafetensors(dir / "target", ToWrite(samples), {});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("cannot rename into place"), std::string::npos) << s.message();
  EXPECT_EQ(dir.Entries(), std::vector<std::string>{"target"});
  EXPECT_TRUE(fs::is_empty(dir / "target"));
}

TEST(safetensors, InvalidTensorsLeaveTheTargetUntouched) {
  TempDir dir;
  WriteRaw(dir / "keep.safetensors", "previous contents");
  const float x = 1.0f;
  const std::vector<SafetensorsWriteTensor> dup{{"a", DType::kF32, {1}, &x}, {"a", DType::kF32, {1}, &x}};
  Status s = WriteSafetensors(dir / "keep.safetensors", dup, {});
  EXPECT_NE(s.message().find("tensor 'a': name appears twice"), std::string::npos) << s.message();
  const std::vector<SafetensorsWriteTensor> neg{{"n", DType::kF32, {-1}, &x}};
  s = WriteSafetensors(dir / "keep.safetensors", neg, {});
  EXPECT_NE(s.message().find("negative dimension"), std::string::npos) << s.message();
  const std::vector<SafetensorsWriteTensor> null{{"z", DType::kF32, {2}, nullptr}};
  s = WriteSafetensors(dir / "keep.safetensors", null, {});
  EXPECT_NE(s.message().find("null data"), std::string::npos) << s.message();
  EXPECT_EQ(ReadAll(dir / "keep.safetensors"), "previous contents");
  EXPECT_EQ(dir.Entries(), std::vector<std::string>{"keep.safetensors"});
}

TEST(safetensors, WriteIntoUnwritableDirectoryCreatesNothing) {
  if (::geteuid() == 0) GTEST_SKIP() << "root ignores directory permissions";
  TempDir dir;
  fs::create_directory(dir / "ro");
  ::chmod((dir / "ro").c_str(), 0555);
  const auto samples = Samples();
  const Status s = WriteSafetensors(dir / "ro/out.safetensors", ToWrite(samples), {});
  ::chmod((dir / "ro").c_str(), 0755);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(fs::is_empty(dir / "ro"));
}

TEST(safetensors, OverwriteReplacesAtomically) {
  TempDir dir;
  WriteRaw(dir / "r.safetensors", "old");
  const auto samples = Samples();
  ASSERT_TRUE(WriteSafetensors(dir / "r.safetensors", ToWrite(samples), {}).ok());
  SafetensorsFile f;
  ASSERT_TRUE(ReadSafetensors(dir / "r.safetensors", &f).ok());
  ExpectSame(samples, f);
  EXPECT_EQ(dir.Entries(), std::vector<std::string>{"r.safetensors"});
}

// ---- case and result files -------------------------------------------------

CaseSpec SmallSpec() {
  CaseSpec s;
  s.Nk = 2;
  s.Nv = 4;
  s.Dk = 8;
  s.Dv = 16;
  s.lens = {3, 0, 5};
  s.dtype = DType::kBF16;
  s.state_dtype = DType::kF32;
  s.layout = StateLayout::kKV;
  s.use_qk_l2norm = true;
  s.scale = 0.3;
  return s;
}

TEST(safetensors, CaseRoundTrip) {
  TempDir dir;
  Case c = MakeCase(SmallSpec());
  ASSERT_TRUE(SaveCase(dir / "c.safetensors", c.inputs(), c.options()).ok());
  LoadedCase lc;
  const Status s = LoadCase(dir / "c.safetensors", &lc);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(lc.options.scale, 0.3);
  EXPECT_EQ(lc.options.state_layout, StateLayout::kKV);
  EXPECT_TRUE(lc.options.use_qk_l2norm);
  const Inputs want = c.inputs();
  const std::pair<const TensorView*, const TensorView*> pairs[] = {{&want.query, &lc.inputs.query},
                                                                   {&want.key, &lc.inputs.key},
                                                                   {&want.value, &lc.inputs.value},
                                                                   {&want.beta, &lc.inputs.beta},
                                                                   {&want.g, &lc.inputs.g},
                                                                   {&want.initial_state, &lc.inputs.initial_state},
                                                                   {&want.seq_lens, &lc.inputs.seq_lens}};
  for (const auto& [w, got] : pairs) {
    ASSERT_TRUE(got->present());
    EXPECT_EQ(got->dtype, w->dtype);
    EXPECT_EQ(got->ShapeString(), w->ShapeString());
    EXPECT_EQ(std::memcmp(got->data, w->data, static_cast<size_t>(w->numel()) * DTypeSize(w->dtype)), 0);
  }
}

TEST(safetensors, CaseOptionalTensorsAndDefaults) {
  TempDir dir;
  CaseSpec spec;
  spec.has_g = false;
  spec.has_initial_state = false;
  Case c = MakeCase(spec);
  ASSERT_TRUE(WriteSafetensors(dir / "c.safetensors", CaseTensors(c.inputs()), {}).ok());  // no metadata at all
  LoadedCase lc;
  ASSERT_TRUE(LoadCase(dir / "c.safetensors", &lc).ok());
  EXPECT_FALSE(lc.inputs.g.present());
  EXPECT_FALSE(lc.inputs.initial_state.present());
  EXPECT_EQ(lc.options.scale, 0.0);
  EXPECT_EQ(lc.options.state_layout, StateLayout::kVK);
  EXPECT_FALSE(lc.options.use_qk_l2norm);
}

// A case with one metadata entry replaced must be refused with `what`.
void ExpectCaseRejected(const std::map<std::string, std::string>& md, const std::string& what) {
  TempDir dir;
  Case c = MakeCase(CaseSpec{});
  ASSERT_TRUE(WriteSafetensors(dir / "c.safetensors", CaseTensors(c.inputs()), md).ok());
  LoadedCase lc;
  const Status s = LoadCase(dir / "c.safetensors", &lc);
  ASSERT_FALSE(s.ok()) << what;
  EXPECT_NE(s.message().find(what), std::string::npos) << s.message();
}

TEST(safetensors, CaseRejectsBadMetadata) {
  ExpectCaseRejected({{"scale", "abc"}}, "metadata 'scale' is \"abc\"");
  ExpectCaseRejected({{"scale", "1e999"}}, "metadata 'scale'");
  ExpectCaseRejected({{"scale", "0.5x"}}, "metadata 'scale'");
  ExpectCaseRejected({{"scale", ""}}, "metadata 'scale'");
  ExpectCaseRejected({{"state_layout", "xy"}}, "metadata 'state_layout' is \"xy\", expected \"vk\" or \"kv\"");
  ExpectCaseRejected({{"use_qk_l2norm", "yes"}}, "metadata 'use_qk_l2norm' is \"yes\"");
  ExpectCaseRejected({{"use_qk_l2_norm", "true"}}, "unknown metadata key 'use_qk_l2_norm'");
  ExpectCaseRejected({{"use_beta_sigmoid", "1"}}, "metadata 'use_beta_sigmoid' is \"1\", expected \"true\" or \"false\"");
}

// The gate in the kernel (docs/SPEC.md 6d) travels in a case: a, A_log,
// dt_bias and the metadata use_beta_sigmoid read back as written.
TEST(safetensors, CaseKeepsTheRawGate) {
  TempDir dir;
  CaseSpec spec;
  spec.Nv = 2;
  spec.raw_gate = true;
  spec.beta_sigmoid = true;
  Case c = MakeCase(spec);
  ASSERT_TRUE(SaveCase(dir / "c.safetensors", c.inputs(), c.options()).ok());
  LoadedCase lc;
  const Status s = LoadCase(dir / "c.safetensors", &lc);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_FALSE(lc.inputs.g.present());
  EXPECT_TRUE(lc.options.use_beta_sigmoid);
  const Inputs want = c.inputs();
  const std::vector<std::pair<TensorView, TensorView>> pairs{
      {lc.inputs.a, want.a}, {lc.inputs.A_log, want.A_log}, {lc.inputs.dt_bias, want.dt_bias}};
  for (const auto& [got, ref] : pairs) {
    ASSERT_TRUE(got.present());
    ASSERT_EQ(got.ShapeString(), ref.ShapeString());
    EXPECT_EQ(std::memcmp(got.data, ref.data, static_cast<size_t>(ref.numel()) * DTypeSize(ref.dtype)), 0);
  }
  Case plain = MakeCase(CaseSpec{});  // without the gate: no use_beta_sigmoid key (older files stay the same)
  EXPECT_EQ(CaseMetadata(plain.options()).count("use_beta_sigmoid"), 0u);
}

TEST(safetensors, CaseRejectsMissingAndUnknownTensors) {
  TempDir dir;
  Case c = MakeCase(CaseSpec{});
  auto tensors = CaseTensors(c.inputs());
  tensors.erase(tensors.begin() + 3);  // beta
  ASSERT_TRUE(WriteSafetensors(dir / "c.safetensors", tensors, {}).ok());
  LoadedCase lc;
  Status s = LoadCase(dir / "c.safetensors", &lc);
  EXPECT_NE(s.message().find("c.safetensors: missing required tensor 'beta'"), std::string::npos) << s.message();

  tensors = CaseTensors(c.inputs());
  tensors.emplace_back("intial_state", c.inputs().initial_state);
  ASSERT_TRUE(WriteSafetensors(dir / "c.safetensors", tensors, {}).ok());
  s = LoadCase(dir / "c.safetensors", &lc);
  EXPECT_NE(s.message().find("unknown tensor 'intial_state'"), std::string::npos) << s.message();
}

TEST(safetensors, PrepareOutputsShapesAndDTypes) {
  Case c = MakeCase(SmallSpec());
  OutputBuffers ob;
  const Status s = PrepareOutputs(c.inputs(), c.options(), &ob);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(ob.views.out.ShapeString(), "[8, 4, 16]");
  EXPECT_EQ(ob.views.out.dtype, DType::kBF16);
  EXPECT_EQ(ob.views.final_state.ShapeString(), "[3, 4, 8, 16]");  // kv layout
  EXPECT_EQ(ob.views.final_state.dtype, DType::kF32);              // initial_state's
  EXPECT_EQ(ob.problem.T, 8);

  CaseSpec no_state = SmallSpec();
  no_state.has_initial_state = false;
  Case c2 = MakeCase(no_state);
  ASSERT_TRUE(PrepareOutputs(c2.inputs(), c2.options(), &ob).ok());
  EXPECT_EQ(ob.views.final_state.dtype, DType::kBF16);  // query's
}

TEST(safetensors, PrepareOutputsValidatesBeforeAllocating) {
  // Nk = 0 with an absurd T: the shape error, not an allocation of T * Nv * Dv.
  Case c = MakeCase(CaseSpec{});
  Inputs in = c.inputs();
  in.query = TensorView(in.query.data, in.query.dtype, {int64_t{1} << 40, 0, 16});
  OutputBuffers ob;
  const Status s = PrepareOutputs(in, c.options(), &ob);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("query: expected Nk >= 1"), std::string::npos) << s.message();

  in = c.inputs();
  in.beta.dtype = DType::kI32;
  EXPECT_NE(PrepareOutputs(in, c.options(), &ob).message().find("beta: expected dtype f32"), std::string::npos);
}

TEST(safetensors, ResultRoundTrip) {
  TempDir dir;
  Case c = MakeCase(SmallSpec());
  OutputBuffers ob;
  ASSERT_TRUE(PrepareOutputs(c.inputs(), c.options(), &ob).ok());
  ASSERT_TRUE(cgdr::Run(c.inputs(), ob.views, c.options()).ok());
  ASSERT_TRUE(SaveResult(dir / "r.safetensors", ob.views, c.options()).ok());
  LoadedResult r;
  const Status s = LoadResult(dir / "r.safetensors", &r);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(r.outputs.out.ShapeString(), ob.views.out.ShapeString());
  EXPECT_EQ(r.outputs.final_state.ShapeString(), ob.views.final_state.ShapeString());
  EXPECT_EQ(std::memcmp(r.outputs.out.data, ob.views.out.data, 8 * 4 * 16 * 2), 0);
  EXPECT_EQ(r.file.metadata().at("state_layout"), "kv");
}

}  // namespace
}  // namespace cgdr
