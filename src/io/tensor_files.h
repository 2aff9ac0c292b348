// Named tensors in the three kinds of files NPU operator tests keep them in
// (docs/golden.md): one safetensors file; a directory of .npy files (one per
// tensor, named after it, plus an optional metadata.json); a JSON manifest of
// raw little-endian .bin tensors:
//
//   {"tensors": {"query": {"file": "q.bin", "dtype": "bf16", "shape": [T, Nk, Dk]}, ...},
//    "metadata": {"scale": 0.0883, "state_layout": "vk"}}
//
// File names in a manifest are relative to the manifest's directory. Reading
// checks every size and dtype and names the file in each error; int64 data is
// narrowed to int32 (range-checked).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cgdr/cgdr.hpp"
#include "core/synthetic.h"
#include "io/safetensors.h"

namespace cgdr {

enum class FileKind : uint8_t { kSafetensors, kNpy, kBin };
const char* FileKindName(FileKind k);  // "safetensors", "npy", "bin"
bool ParseFileKind(const std::string& s, FileKind* out);

// The kind of an existing path: *.safetensors, a directory (of .npy files), *.json (a .bin manifest).
Status DetectFileKind(const std::string& path, FileKind* kind);
// Where a bundle named `stem` lives in `dir`: dir/stem.safetensors, dir/stem (a directory), dir/stem.json.
std::string BundlePath(FileKind kind, const std::string& dir, const std::string& stem);

struct NamedTensor {
  std::string name;
  TensorView view;
};

// The tensors of one file, directory or manifest, in memory it owns.
class TensorBundle {
 public:
  FileKind kind() const { return kind_; }
  const std::string& label() const { return label_; }  // the path, for messages
  const std::vector<NamedTensor>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const TensorView* Find(const std::string& name) const;

 private:
  friend struct TensorBundleReader;  // tensor_files.cc
  FileKind kind_ = FileKind::kSafetensors;
  std::string label_;
  std::vector<NamedTensor> tensors_;
  std::map<std::string, std::string> metadata_;
  std::unique_ptr<SafetensorsFile> safetensors_;  // storage of a safetensors bundle
  std::vector<Bytes> buffers_;                    // storage of the others
};

Status ReadTensorBundle(const std::string& path, TensorBundle* out);

// Writes the tensors at `path` as `kind`: a safetensors file; a directory of
// <name>.npy (created if missing) plus metadata.json; a manifest with its
// tensors beside it as <manifest stem>.<name>.bin. Each file is written
// atomically.
Status WriteTensorBundle(FileKind kind, const std::string& path, const std::vector<SafetensorsWriteTensor>& tensors,
                         const std::map<std::string, std::string>& metadata);

}  // namespace cgdr
