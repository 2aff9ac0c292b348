#include "io/tensor_files.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "core/strcat.h"
#include "io/file_util.h"
#include "io/json_scan.h"
#include "io/npy.h"

namespace cgdr {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

constexpr char kNpyMetadataFile[] = "metadata.json";
constexpr char kDTypesKey[] = "dtypes";
// Limits of the JSON descriptions (a manifest, metadata.json), docs/cli.md "Reading case
// files": bytes, and containers nested (a manifest needs 4: the manifest >
// "tensors" > an entry > its "shape"), checked before the JSON is parsed so
// that no deep value reaches nlohmann's recursive dump() or copy.
constexpr uint64_t kMaxManifestBytes = 1 << 20;
constexpr int kMaxManifestDepth = 4;
constexpr uint64_t kMaxDim = uint64_t{1} << 40;  // elements per dimension and per tensor

// Where a tensor's view points: its buffer, or (empty tensors) a sentinel, never null, so an empty tensor
// stays present.
void* DataOf(Bytes& b) {
  alignas(64) static uint8_t empty[64];
  return b.empty() ? empty : b.data();
}

Status Fail(const std::string& label, const std::string& msg) { return Status::Invalid(Cat(label, ": ", msg)); }

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// A small text file (manifest, metadata.json) into memory.
Status ReadText(const std::string& path, std::string* text) {
  FileDescriptor f;
  uint64_t size = 0;
  Status s = OpenForReading(path, &f, &size);
  if (!s.ok()) return s;
  if (size > kMaxManifestBytes) {
    return Fail(path, Cat("file of ", size, " bytes is too large for a JSON description (limit ", kMaxManifestBytes,
                          " bytes)"));
  }
  text->assign(size, '\0');
  return ReadFull(path, f.fd, reinterpret_cast<uint8_t*>(text->data()), size);
}

// One linear pass of the tokenizer: valid JSON tokens (UTF-8 included) nested
// at most kMaxManifestDepth deep.
Status CheckJsonShape(const std::string& path, const std::string& text) {
  JsonScanner scan(text);
  int depth = 0;
  for (JsonScanner::Token t = scan.Next(); t != JsonScanner::Token::kEnd; t = scan.Next()) {
    if (t == JsonScanner::Token::kError) {
      return Fail(path, Cat("not valid JSON (", scan.error(), " at byte ", scan.offset(), ")"));
    }
    if (t == JsonScanner::Token::kBeginObject || t == JsonScanner::Token::kBeginArray) {
      if (++depth > kMaxManifestDepth) {
        return Fail(path, Cat("JSON nested deeper than ", kMaxManifestDepth, " levels (at byte ", scan.offset(), ")"));
      }
    } else if (t == JsonScanner::Token::kEndObject || t == JsonScanner::Token::kEndArray) {
      --depth;
    }
  }
  return Status::Ok();
}

Status ParseJson(const std::string& path, const std::string& text, Json* j) {
  Status s = CheckJsonShape(path, text);
  if (!s.ok()) return s;
  try {
    *j = Json::parse(text);
  } catch (const Json::exception& e) {
    return Fail(path, Cat("not valid JSON (", PrintableName(e.what(), 160), ")"));
  }
  if (!j->is_object()) return Fail(path, Cat("expected a JSON object, got ", j->type_name()));
  return Status::Ok();
}

// Metadata values as the case readers expect them: strings (numbers and booleans spelled out).
Status MetadataFromJson(const std::string& path, const Json& j, std::map<std::string, std::string>* md) {
  if (!j.is_object()) return Fail(path, Cat("'metadata' must be an object, got ", j.type_name()));
  for (const auto& [key, v] : j.items()) {
    if (v.is_string()) {
      (*md)[key] = v.get<std::string>();
    } else if (v.is_boolean()) {
      (*md)[key] = v.get<bool>() ? "true" : "false";
    } else if (v.is_number()) {
      (*md)[key] = v.dump();
    } else {
      return Fail(path,
                  Cat("metadata '", PrintableName(key), "' must be a string, number or boolean, got ", v.type_name()));
    }
  }
  return Status::Ok();
}

// Dtype names a manifest may use (numpy's and torch's spellings included).
bool ParseManifestDType(const std::string& s, DType* t, bool* int64) {
  *int64 = false;
  if (s == "i64" || s == "int64" || s == "I64") {
    *t = DType::kI32;
    *int64 = true;
    return true;
  }
  const std::string name = s == "fp16" || s == "half" ? "f16" : s == "fp32" || s == "float" ? "f32" : s;
  return ParseDType(name, t);
}

const char* ManifestDTypeName(DType t) { return DTypeName(t); }

}  // namespace

// Builds bundles; the only code that touches their storage.
struct TensorBundleReader {
  static void Label(FileKind kind, const std::string& path, TensorBundle* b) {
    b->kind_ = kind;
    b->label_ = path;
  }

  static Status Safetensors(const std::string& path, TensorBundle* b) {
    auto file = std::make_unique<SafetensorsFile>();
    Status s = ReadSafetensors(path, file.get());
    if (!s.ok()) return s;
    for (const auto& t : file->tensors()) b->tensors_.push_back({t.name, t.view()});
    b->metadata_ = file->metadata();
    b->safetensors_ = std::move(file);
    return Status::Ok();
  }

  static Status Npy(const std::string& dir, TensorBundle* b) {
    std::vector<fs::path> files;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      if (e.path().extension() == ".npy") files.push_back(e.path());
    }
    if (ec) return Fail(dir, Cat("cannot list the directory: ", ec.message()));
    if (files.empty()) return Fail(dir, "directory holds no .npy files");
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
      NpyArray a;
      Status s = ReadNpy(f.string(), &a);
      if (!s.ok()) return s;
      b->tensors_.push_back({f.stem().string(), TensorView(DataOf(a.data), a.dtype, a.shape)});
      b->buffers_.push_back(std::move(a.data));  // the view's pointer moves with the buffer
    }
    const fs::path md = fs::path(dir) / kNpyMetadataFile;
    if (!fs::exists(md)) return Status::Ok();
    std::string text;
    Json j;
    Status s = ReadText(md.string(), &text);
    if (s.ok()) s = ParseJson(md.string(), text, &j);
    if (!s.ok()) return s;
    if (j.contains(kDTypesKey)) {
      s = DeclaredDTypes(md.string(), j[kDTypesKey], b);
      if (!s.ok()) return s;
      j.erase(kDTypesKey);
    }
    return MetadataFromJson(md.string(), j, &b->metadata_);
  }

  // metadata.json's "dtypes": {"query": "bf16", ...}: f32 arrays that hold
  // values of a 16-bit dtype (as WriteTensorBundle writes bf16, and as NPU
  // tests save outputs with .float().numpy()) are narrowed back to it; a value
  // the dtype cannot hold exactly is an error.
  static Status DeclaredDTypes(const std::string& path, const Json& j, TensorBundle* b) {
    if (!j.is_object()) return Fail(path, Cat("'", kDTypesKey, "' must be an object {tensor: dtype}"));
    for (const auto& [name, v] : j.items()) {
      DType want;
      if (!v.is_string() || !ParseDType(v.get<std::string>(), &want) || want == DType::kI32) {
        return Fail(path, Cat("dtypes: '", PrintableName(name), "' must be \"bf16\", \"f16\" or \"f32\", got ",
                              PrintableName(v.dump(), 40)));
      }
      const std::string& wanted = name;  // a lambda may not capture a structured binding before C++20 in clang 15
      auto it =
          std::find_if(b->tensors_.begin(), b->tensors_.end(), [&](const NamedTensor& t) { return t.name == wanted; });
      if (it == b->tensors_.end())
        return Fail(path, Cat("dtypes: no tensor '", PrintableName(name), ".npy' in the directory"));
      if (it->view.dtype == want) continue;
      if (it->view.dtype != DType::kF32) {
        return Fail(path, Cat("dtypes: '", PrintableName(name), "' is stored as ", DTypeName(it->view.dtype),
                              ", only f32 can hold ",
                              DTypeName(want), " values"));
      }
      Status s = Narrow(path, name, want, &it->view, b);
      if (!s.ok()) return s;
    }
    return Status::Ok();
  }

  static Status Narrow(const std::string& path, const std::string& name, DType want, TensorView* v, TensorBundle* b) {
    const int64_t n = v->numel();
    Bytes out(static_cast<size_t>(n) * DTypeSize(want));
    for (int64_t i = 0; i < n; ++i) {
      const float x = static_cast<const float*>(v->data)[i];
      StoreFromF32(out.data(), want, i, x);
      const float back = LoadAsF32(out.data(), want, i);
      if (!(back == x) && !(std::isnan(x) && std::isnan(back))) {
        return Fail(path, Cat("dtypes: '", PrintableName(name), "' declared ", DTypeName(want), ", but element ", i,
                              " (", x, ") is not a ", DTypeName(want), " value"));
      }
    }
    v->data = DataOf(out);
    v->dtype = want;
    b->buffers_.push_back(std::move(out));
    return Status::Ok();
  }

  static Status Manifest(const std::string& path, TensorBundle* b) {
    std::string text;
    Json j;
    Status s = ReadText(path, &text);
    if (s.ok()) s = ParseJson(path, text, &j);
    if (!s.ok()) return s;
    for (const auto& [key, v] : j.items()) {
      if (key != "tensors" && key != "metadata") {
        return Fail(path, Cat("unknown key '", PrintableName(key), "' (expected \"tensors\" and \"metadata\")"));
      }
    }
    if (!j.contains("tensors") || !j["tensors"].is_object() || j["tensors"].empty()) {
      return Fail(path, "expected \"tensors\": {name: {\"file\", \"dtype\", \"shape\"}, ...}");
    }
    const fs::path base = fs::path(path).parent_path();
    for (const auto& [name, entry] : j["tensors"].items()) {
      s = ManifestTensor(path, base, name, entry, b);
      if (!s.ok()) return s;
    }
    return j.contains("metadata") ? MetadataFromJson(path, j["metadata"], &b->metadata_) : Status::Ok();
  }

  // One manifest entry: its description checked, then its file read and sized.
  static Status ManifestTensor(const std::string& path, const fs::path& base, const std::string& name, const Json& e,
                               TensorBundle* b) {
    const std::string where = Cat(path, ": tensor '", PrintableName(name), "'");
    if (!e.is_object() || !e.contains("file") || !e["file"].is_string() || !e.contains("dtype") ||
        !e["dtype"].is_string() || !e.contains("shape") || !e["shape"].is_array()) {
      return Status::Invalid(Cat(where, ": expected {\"file\": \"NAME.bin\", \"dtype\": \"bf16\", \"shape\": [...]}"));
    }
    DType dt;
    bool int64 = false;
    if (!ParseManifestDType(e["dtype"].get<std::string>(), &dt, &int64)) {
      return Status::Invalid(Cat(where, ": unsupported dtype \"", PrintableName(e["dtype"].get<std::string>()),
                                 "\" (supported: bf16, f16, f32, i32, i64)"));
    }
    std::vector<int64_t> shape;
    for (const auto& d : e["shape"]) {
      if (!d.is_number_unsigned() || d.get<uint64_t>() > kMaxDim) {
        return Status::Invalid(
            Cat(where, ": shape must hold integers in [0, 2^40], got ", PrintableName(e["shape"].dump(), 60)));
      }
      shape.push_back(d.get<int64_t>());
    }
    if (shape.size() > static_cast<size_t>(TensorView::kMaxRank)) {
      return Status::Invalid(
          Cat(where, ": rank ", shape.size(), " exceeds the supported maximum ", TensorView::kMaxRank));
    }
    const uint64_t numel = static_cast<uint64_t>(TensorView(nullptr, dt, shape).numel());
    if (numel > kMaxDim)
      return Status::Invalid(Cat(where, ": shape ", PrintableName(e["shape"].dump(), 60), " is too large"));
    const fs::path file = base / e["file"].get<std::string>();
    const uint64_t want = numel * (int64 ? 8 : DTypeSize(dt));
    FileDescriptor f;
    uint64_t size = 0;
    Status s = OpenForReading(file.string(), &f, &size);
    if (!s.ok()) return Status::Invalid(Cat(where, ": ", s.message()));
    if (size != want) {
      return Status::Invalid(Cat(where, ": ", PrintableName(file.string(), 200), " holds ", size, " bytes, expected ",
                                 want, " (shape ", PrintableName(e["shape"].dump(), 60), " of ",
                                 PrintableName(e["dtype"].get<std::string>(), 20), ")"));
    }
    Bytes data(numel * DTypeSize(dt));
    if (int64) {
      std::vector<int64_t> raw(numel);
      s = ReadFull(file.string(), f.fd, reinterpret_cast<uint8_t*>(raw.data()), want);
      for (uint64_t i = 0; s.ok() && i < numel; ++i) {
        if (raw[i] < std::numeric_limits<int32_t>::min() || raw[i] > std::numeric_limits<int32_t>::max()) {
          s = Status::Invalid(Cat(where, ": int64 value ", raw[i], " at index ", i, " does not fit int32"));
        } else {
          reinterpret_cast<int32_t*>(data.data())[i] = static_cast<int32_t>(raw[i]);
        }
      }
    } else {
      s = ReadFull(file.string(), f.fd, data.data(), want);
    }
    if (!s.ok()) return s;
    b->tensors_.push_back({name, TensorView(DataOf(data), dt, shape)});
    b->buffers_.push_back(std::move(data));
    return Status::Ok();
  }
};

const char* FileKindName(FileKind k) {
  switch (k) {
    case FileKind::kSafetensors: return "safetensors";
    case FileKind::kNpy: return "npy";
    case FileKind::kBin: return "bin";
  }
  return "?";
}

bool ParseFileKind(const std::string& s, FileKind* out) {
  for (FileKind k : {FileKind::kSafetensors, FileKind::kNpy, FileKind::kBin}) {
    if (s == FileKindName(k)) {
      *out = k;
      return true;
    }
  }
  return false;
}

Status DetectFileKind(const std::string& path, FileKind* kind) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    *kind = FileKind::kNpy;
  } else if (EndsWith(path, ".safetensors")) {
    *kind = FileKind::kSafetensors;
  } else if (EndsWith(path, ".json")) {
    *kind = FileKind::kBin;
  } else if (EndsWith(path, ".npy")) {
    return Fail(path, "a single .npy file: give the directory that holds one .npy file per tensor");
  } else if (!fs::exists(path, ec)) {
    return Fail(path, "cannot open: No such file or directory");
  } else {
    return Fail(path,
                "unknown kind of file: expected a .safetensors file, a directory of .npy files or a .json "
                "manifest of .bin tensors");
  }
  return Status::Ok();
}

std::string BundlePath(FileKind kind, const std::string& dir, const std::string& stem) {
  const fs::path p = fs::path(dir) / stem;
  switch (kind) {
    case FileKind::kSafetensors: return p.string() + ".safetensors";
    case FileKind::kNpy: return p.string();
    case FileKind::kBin: return p.string() + ".json";
  }
  return p.string();
}

const TensorView* TensorBundle::Find(const std::string& name) const {
  for (const auto& t : tensors_) {
    if (t.name == name) return &t.view;
  }
  return nullptr;
}

Status ReadTensorBundle(const std::string& path, TensorBundle* out) {
  try {
    FileKind kind;
    Status s = DetectFileKind(path, &kind);
    if (!s.ok()) return s;
    TensorBundle b;
    TensorBundleReader::Label(kind, path, &b);
    switch (kind) {
      case FileKind::kSafetensors: s = TensorBundleReader::Safetensors(path, &b); break;
      case FileKind::kNpy: s = TensorBundleReader::Npy(path, &b); break;
      case FileKind::kBin: s = TensorBundleReader::Manifest(path, &b); break;
    }
    if (!s.ok()) return s;
    *out = std::move(b);
    return Status::Ok();
  } catch (const std::bad_alloc&) {
    return Status(Code::kResourceExhausted, Cat(path, ": out of memory while reading"));
  } catch (const std::exception& e) {  // filesystem errors (permissions, races)
    return Fail(path, PrintableName(e.what(), 160));
  }
}

namespace {

Json MetadataJson(const std::map<std::string, std::string>& md) {
  Json j = Json::object();
  for (const auto& [k, v] : md) j[k] = v;
  return j;
}

Status WriteNpyDir(const std::string& dir, const std::vector<SafetensorsWriteTensor>& tensors,
                   const std::map<std::string, std::string>& metadata) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Fail(dir, Cat("cannot create the directory: ", ec.message()));
  Json dtypes = Json::object();  // bf16 is written widened to f32: say so, to read it back as bf16
  for (const auto& t : tensors) {
    Status s = WriteNpy((fs::path(dir) / (t.name + ".npy")).string(), TensorView(t.data, t.dtype, t.shape));
    if (!s.ok()) return s;
    if (t.dtype == DType::kBF16) dtypes[t.name] = DTypeName(t.dtype);
  }
  if (metadata.empty() && dtypes.empty()) return Status::Ok();
  Json j = MetadataJson(metadata);
  if (!dtypes.empty()) j[kDTypesKey] = dtypes;
  const std::string text = j.dump(1) + "\n";
  return WriteFileAtomically((fs::path(dir) / kNpyMetadataFile).string(), text);
}

Status WriteManifest(const std::string& path, const std::vector<SafetensorsWriteTensor>& tensors,
                     const std::map<std::string, std::string>& metadata) {
  if (!EndsWith(path, ".json")) return Fail(path, "a .bin manifest must be named *.json");
  const fs::path p(path);
  const std::string stem = p.stem().string();
  nlohmann::ordered_json j;
  j["tensors"] = nlohmann::ordered_json::object();
  for (const auto& t : tensors) {
    const std::string file = stem + "." + t.name + ".bin";
    const TensorView v(t.data, t.dtype, t.shape);
    Status s = WriteFileAtomically((p.parent_path() / file).string(),
                                   {{t.data, static_cast<uint64_t>(v.numel()) * DTypeSize(t.dtype)}});
    if (!s.ok()) return s;
    j["tensors"][t.name] = {{"file", file}, {"dtype", ManifestDTypeName(t.dtype)}, {"shape", t.shape}};
  }
  if (!metadata.empty()) j["metadata"] = metadata;
  const std::string text = j.dump(1) + "\n";
  return WriteFileAtomically(path, text);
}

}  // namespace

Status WriteTensorBundle(FileKind kind, const std::string& path, const std::vector<SafetensorsWriteTensor>& tensors,
                         const std::map<std::string, std::string>& metadata) {
  try {
    switch (kind) {
      case FileKind::kSafetensors: return WriteSafetensors(path, tensors, metadata);
      case FileKind::kNpy: return WriteNpyDir(path, tensors, metadata);
      case FileKind::kBin: return WriteManifest(path, tensors, metadata);
    }
    return Fail(path, "unknown file kind");
  } catch (const std::bad_alloc&) {
    return Status(Code::kResourceExhausted, Cat(path, ": out of memory while writing"));
  } catch (const std::exception& e) {
    return Fail(path, PrintableName(e.what(), 160));
  }
}

}  // namespace cgdr
