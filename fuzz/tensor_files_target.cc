// Fuzz target (d): the readers of the other case kinds (src/io/npy.cc,
// src/io/tensor_files.cc), under issue 19's rules. The first byte picks what
// the rest is:
//  - even: a .npy file. Parsed in memory (ParseNpy) and read from a file
//    (ReadNpy, which reads the header in two steps): both accept or both
//    refuse, and accepted arrays agree in dtype, shape and bytes;
//  - odd: a .bin manifest (JSON), read by ReadTensorBundle from a folder that
//    also holds q.bin (64 bytes) and e.bin (empty) for it to name.
// Checked for every input: no crash, errors are one non-empty line, accepted
// tensors are sized numel * dtype and readable end to end (ASan checks).
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/dtype.h"
#include "fuzz_common.h"
#include "fuzz_targets.h"
#include "io/npy.h"
#include "io/tensor_files.h"

namespace cgdr::fuzz {
namespace {

namespace fs = std::filesystem;

void CheckOneLine(const Status& s, const char* what) {
  FUZZ_CHECK(!s.message().empty(), std::string(what) + ": error without a message");
  FUZZ_CHECK(s.message().find('\n') == std::string::npos, std::string(what) + ": multi-line error: " + s.message());
}

// Reads every byte of an accepted tensor (ASan reports a view past its buffer).
void CheckView(const std::string& name, const TensorView& v) {
  FUZZ_CHECK(v.data != nullptr, name + ": null data");
  const int64_t bytes = v.numel() * static_cast<int64_t>(DTypeSize(v.dtype));
  uint64_t sum = 0;
  for (int64_t i = 0; i < bytes; ++i) sum += static_cast<const uint8_t*>(v.data)[i];
  FUZZ_CHECK(sum != ~uint64_t{0}, "unreachable");  // keeps the reads
}

void FuzzNpy(const uint8_t* data, size_t size) {
  NpyArray mem, file;
  const Status a = ParseNpy("input.npy", data, size, &mem);
  const Status b = ReadNpy(WriteToMemFile(data, size), &file);
  if (!a.ok()) CheckOneLine(a, "ParseNpy");
  if (!b.ok()) CheckOneLine(b, "ReadNpy");
  FUZZ_CHECK(a.ok() == b.ok(), "ParseNpy and ReadNpy disagree: '" + a.message() + "' vs '" + b.message() + "'");
  if (!a.ok()) return;
  FUZZ_CHECK(mem.dtype == file.dtype && mem.shape == file.shape && mem.data == file.data, "arrays differ");
  FUZZ_CHECK(mem.data.size() == static_cast<size_t>(TensorView(nullptr, mem.dtype, mem.shape).numel()) *
                                    DTypeSize(mem.dtype),
             "array size");
}

// A folder of this process's own for the manifest and the files it may name,
// removed at exit (its name is kept apart from statics destroyed before then).
const std::string* manifest_dir = nullptr;

void RemoveManifestDir() {
  std::error_code ec;
  fs::remove_all(*manifest_dir, ec);
}

const std::string& ManifestDir() {
  if (manifest_dir == nullptr) {
    std::string tmpl = (fs::temp_directory_path() / "cgdr_fuzz_bin_XXXXXX").string();
    FUZZ_CHECK(mkdtemp(tmpl.data()) != nullptr, "mkdtemp failed");
    std::ofstream(fs::path(tmpl) / "q.bin", std::ios::binary) << std::string(64, '\x3f');
    std::ofstream(fs::path(tmpl) / "e.bin", std::ios::binary);
    manifest_dir = new std::string(tmpl);
    std::atexit(RemoveManifestDir);
  }
  return *manifest_dir;
}

void FuzzManifest(const uint8_t* data, size_t size) {
  const fs::path path = fs::path(ManifestDir()) / "m.json";
  {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  TensorBundle b;
  const Status s = ReadTensorBundle(path.string(), &b);
  if (!s.ok()) {
    CheckOneLine(s, "ReadTensorBundle");
    return;
  }
  for (const NamedTensor& t : b.tensors()) CheckView(t.name, t.view);
}

}  // namespace

int FuzzTensorFiles(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  if (data[0] % 2 == 0) {
    FuzzNpy(data + 1, size - 1);
  } else {
    FuzzManifest(data + 1, size - 1);
  }
  return 0;
}

}  // namespace cgdr::fuzz
