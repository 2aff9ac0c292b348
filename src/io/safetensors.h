// Safetensors read/write (SPEC 7): strict about bounds,
// dtypes and shapes, atomic on write.
//
// Format: 8-byte little-endian u64 header length N, N bytes of JSON header,
// then the data buffer. Header: {"name": {"dtype", "shape", "data_offsets"},
// ..., "__metadata__": {"key": "string"}}. As the format's own reference
// implementation requires, the tensors must index the whole data buffer
// without holes or overlaps (no polyglot files).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "cgdr/cgdr.hpp"

namespace cgdr {

// Limits that keep a hostile header from costing more than it is worth
// (docs/cli.md, "Reading case files"). Reading is one pass over the header, linear in its
// size with constant stack, whatever it holds; past a limit it stops with an
// error naming the limit.
constexpr uint64_t kMaxSafetensorsHeaderBytes = 100ull << 20;  // the JSON header, 100 MiB
constexpr size_t kMaxSafetensorsEntries = size_t{1} << 20;     // tensors in one header (1,048,576)
constexpr int kMaxSafetensorsJsonDepth = 3;  // header object > tensor object > shape / data_offsets array
constexpr int kMaxSafetensorsRank = 8;       // dimensions of one tensor

// `s` with control bytes and invalid UTF-8 escaped (\xNN) and cut to about
// `max_len` bytes: names come from untrusted files and error messages must
// stay one line of valid text.
std::string PrintableName(std::string_view s, size_t max_len = 80);

// Safetensors dtype names ("F16", "BF16", "F32", "I32") for the dtypes cgdr stores.
const char* SafetensorsDTypeName(DType t);
bool ParseSafetensorsDType(const std::string& s, DType* out);

// One tensor of a file that has been read: a view into the file's buffer.
struct SafetensorsTensor {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  int64_t numel = 0;
  int64_t nbytes = 0;
  uint64_t begin = 0, end = 0;    // data_offsets, relative to the data buffer
  const uint8_t* data = nullptr;  // aligned to the dtype size; never null, even when empty

  TensorView view() const { return TensorView(data, dtype, shape); }
};

// A whole file read into memory it owns; tensors are views into it and live
// as long as this object (moving it keeps them valid).
class SafetensorsFile {
 public:
  const std::string& label() const { return label_; }                         // the path, for error messages
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }  // in data order
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const SafetensorsTensor* Find(const std::string& name) const;

  struct AlignedFree {
    void operator()(uint8_t* p) const;
  };
  using AlignedBuffer = std::unique_ptr<uint8_t, AlignedFree>;  // 64-byte aligned

 private:
  friend struct SafetensorsBuilder;  // safetensors.cc: fills a file once every check has passed

  std::string label_;
  std::vector<SafetensorsTensor> tensors_;
  std::vector<uint32_t> by_name_;  // indices into tensors_ sorted by name, for Find
  std::map<std::string, std::string> metadata_;
  AlignedBuffer buffer_;               // the data buffer
  std::vector<AlignedBuffer> copies_;  // tensors whose offset was misaligned for their dtype
};

// Reads and checks a whole file. On error `file` is left unchanged and the
// message (one line) names the file, the tensor and the problem.
Status ReadSafetensors(const std::string& path, SafetensorsFile* file);
// The same checks on bytes already in memory (tests, fuzzers); copies the data.
Status ParseSafetensors(std::string_view label, const uint8_t* bytes, size_t size, SafetensorsFile* file);

// One tensor to write: its bytes are `numel(shape) * DTypeSize(dtype)` at `data`.
struct SafetensorsWriteTensor {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const void* data = nullptr;

  SafetensorsWriteTensor() = default;
  SafetensorsWriteTensor(std::string n, DType t, std::vector<int64_t> s, const void* p)
      : name(std::move(n)), dtype(t), shape(std::move(s)), data(p) {}
  SafetensorsWriteTensor(std::string n, const TensorView& v);
};

// Serialises to memory (tests, fuzz seeds). Data is laid out in the order given.
Status SerializeSafetensors(const std::vector<SafetensorsWriteTensor>& tensors,
                            const std::map<std::string, std::string>& metadata, std::string* bytes);

// Writes atomically under the output-path rules (WriteFileAtomically,
// io/file_util.h).
Status WriteSafetensors(const std::string& path, const std::vector<SafetensorsWriteTensor>& tensors,
                        const std::map<std::string, std::string>& metadata);

}  // namespace cgdr
