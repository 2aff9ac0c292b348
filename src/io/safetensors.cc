#include "io/safetensors.h"

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <nlohmann/json.hpp>
#include <numeric>
#include <set>
#include <sstream>
#include <utility>

#include "core/strcat.h"
#include "io/file_util.h"

namespace cgdr {

static_assert(std::endian::native == std::endian::little, "tensor bytes are written as they lie in memory");

namespace {

using Json = nlohmann::json;
constexpr size_t kAlign = 64;  // buffers suit any SIMD load
constexpr uint64_t kMaxI64 = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());

// Names and JSON snippets come from untrusted files: escape control bytes so
// every message stays on one line, and cut long ones.
std::string Printable(std::string_view s, size_t max_len = 80);
std::string Printable(std::string_view s, size_t max_len) {
  std::string r;
  for (size_t i = 0; i < s.size() && r.size() < max_len; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7F) {
      static const char* hex = "0123456789abcdef";
      r += "\\x";
      r += hex[c >> 4];
      r += hex[c & 15];
    } else {
      r += static_cast<char>(c);
    }
  }
  if (r.size() >= max_len) r += "...";
  return r;
}

std::string TensorLabel(const std::string& name) { return Cat("tensor '", Printable(name), "'"); }

Status Fail(std::string_view label, const std::string& msg) { return Status::Invalid(Cat(label, ": ", msg)); }

uint8_t* AllocAligned(size_t n) {
  return static_cast<uint8_t*>(::operator new[](std::max<size_t>(n, 1), std::align_val_t{kAlign}));
}

// Where empty tensors point: never null, so a present-but-empty tensor stays present.
alignas(kAlign) uint8_t g_empty_tensor[kAlign];

// a * b for non-negative values, false on overflow past INT64_MAX.
bool MulChecked(uint64_t a, uint64_t b, uint64_t* r) {
  if (a != 0 && b > kMaxI64 / a) return false;
  *r = a * b;
  return true;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << "]";
  return os.str();
}

// Element count of a shape; a zero dimension wins over any overflow of the others.
bool NumelChecked(const std::vector<int64_t>& shape, uint64_t* n) {
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) {
    *n = 0;
    return true;
  }
  uint64_t p = 1;
  for (int64_t d : shape) {
    if (!MulChecked(p, static_cast<uint64_t>(d), &p)) return false;
  }
  *n = p;
  return true;
}

// ---- reading ---------------------------------------------------------------

// The header length must leave room for itself and stay small enough to parse.
Status CheckHeaderLength(std::string_view label, uint64_t n, uint64_t file_size) {
  if (file_size < 8) return Fail(label, Cat("file is ", file_size, " bytes, too short for the 8-byte header length"));
  if (n > kMaxSafetensorsHeaderBytes) {
    return Fail(label, Cat("header length ", n, " exceeds the limit of ", kMaxSafetensorsHeaderBytes, " bytes"));
  }
  if (n > file_size - 8) {
    return Fail(label, Cat("header length ", n, " runs past the end of the file (", file_size - 8,
                           " bytes after the length field)"));
  }
  if (n < 2) return Fail(label, Cat("header length ", n, " is too short for a JSON object"));
  return Status::Ok();
}

uint64_t ReadLe64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// nlohmann keeps the last of duplicate keys silently; a header that says two
// things about one tensor is rejected instead. Returns the first duplicate.
struct DuplicateKeyFinder {
  std::vector<std::set<std::string>> open_objects;
  std::string duplicate;

  bool operator()(int /*depth*/, Json::parse_event_t event, Json& parsed) {
    switch (event) {
      case Json::parse_event_t::object_start:
        open_objects.emplace_back();
        break;
      case Json::parse_event_t::object_end:
        if (!open_objects.empty()) open_objects.pop_back();
        break;
      case Json::parse_event_t::key:
        if (!open_objects.empty() && !open_objects.back().insert(parsed.get<std::string>()).second &&
            duplicate.empty()) {
          duplicate = parsed.get<std::string>();
        }
        break;
      default:
        break;
    }
    return true;
  }
};

Status ParseJsonObject(std::string_view label, std::string_view text, Json* out) {
  DuplicateKeyFinder dups;
  try {
    *out = Json::parse(text.begin(), text.end(), std::ref(dups));
  } catch (const Json::exception& e) {
    return Fail(label, Cat("header is not valid JSON (", Printable(e.what(), 160), ")"));
  }
  if (!dups.duplicate.empty()) return Fail(label, Cat("header repeats the key '", Printable(dups.duplicate), "'"));
  if (!out->is_object()) return Fail(label, Cat("header must be a JSON object, got ", out->type_name()));
  return Status::Ok();
}

// A JSON value that must be a non-negative integer no larger than INT64_MAX.
bool AsIndex(const Json& v, uint64_t* out) {
  if (!v.is_number_unsigned()) return false;
  const uint64_t u = v.get<uint64_t>();
  if (u > kMaxI64) return false;
  *out = u;
  return true;
}

Status ParseShape(std::string_view label, const std::string& where, const Json& j, SafetensorsTensor* t) {
  if (!j.is_array()) return Fail(label, Cat(where, ": shape must be an array, got ", j.type_name()));
  if (j.size() > static_cast<size_t>(kMaxSafetensorsRank)) {
    return Fail(label, Cat(where, ": rank ", j.size(), " exceeds the supported maximum ", kMaxSafetensorsRank));
  }
  t->shape.clear();
  for (size_t i = 0; i < j.size(); ++i) {
    uint64_t d = 0;
    if (!AsIndex(j[i], &d)) {
      return Fail(label, Cat(where, ": shape[", i, "] is ", Printable(j[i].dump(), 40),
                             ", expected a non-negative integer <= ", kMaxI64));
    }
    t->shape.push_back(static_cast<int64_t>(d));
  }
  uint64_t numel = 0, nbytes = 0;
  if (!NumelChecked(t->shape, &numel) || !MulChecked(numel, DTypeSize(t->dtype), &nbytes)) {
    return Fail(label, Cat(where, ": shape ", ShapeString(t->shape), " of ", SafetensorsDTypeName(t->dtype),
                           " has more bytes than a 64-bit size can hold"));
  }
  t->numel = static_cast<int64_t>(numel);
  t->nbytes = static_cast<int64_t>(nbytes);
  return Status::Ok();
}

Status ParseOffsets(std::string_view label, const std::string& where, const Json& j, uint64_t data_size,
                    SafetensorsTensor* t) {
  uint64_t b = 0, e = 0;
  if (!j.is_array() || j.size() != 2 || !AsIndex(j[0], &b) || !AsIndex(j[1], &e)) {
    return Fail(label, Cat(where, ": data_offsets must be [begin, end] of non-negative integers, got ",
                           Printable(j.dump(), 60)));
  }
  if (b > e || e > data_size) {
    return Fail(label,
                Cat(where, ": data_offsets [", b, ", ", e, "] outside the data buffer of ", data_size, " bytes"));
  }
  if (e - b != static_cast<uint64_t>(t->nbytes)) {
    return Fail(label,
                Cat(where, ": data_offsets [", b, ", ", e, "] hold ", e - b, " bytes, expected ", t->nbytes, " (shape ",
                    ShapeString(t->shape), " x ", DTypeSize(t->dtype), "-byte ", SafetensorsDTypeName(t->dtype), ")"));
  }
  t->begin = b;
  t->end = e;
  return Status::Ok();
}

// One tensor entry: exactly dtype, shape and data_offsets, all valid.
Status ParseEntry(std::string_view label, const std::string& name, const Json& j, uint64_t data_size,
                  SafetensorsTensor* t) {
  const std::string where = TensorLabel(name);
  if (name.empty()) return Fail(label, "a tensor has an empty name");
  if (!j.is_object()) {
    return Fail(label, Cat(where, ": expected an object with dtype, shape, data_offsets, got ", j.type_name()));
  }
  for (const auto& [key, value] : j.items()) {
    if (key != "dtype" && key != "shape" && key != "data_offsets") {
      return Fail(label, Cat(where, ": unexpected field '", Printable(key), "'"));
    }
  }
  for (const char* field : {"dtype", "shape", "data_offsets"}) {
    if (!j.contains(field)) return Fail(label, Cat(where, ": missing field '", field, "'"));
  }
  const Json& dt = j["dtype"];
  if (!dt.is_string() || !ParseSafetensorsDType(dt.get<std::string>(), &t->dtype)) {
    return Fail(label,
                Cat(where, ": unsupported dtype ", Printable(dt.dump(), 40), " (supported: F16, BF16, F32, I32)"));
  }
  t->name = name;
  Status s = ParseShape(label, where, j["shape"], t);
  if (!s.ok()) return s;
  return ParseOffsets(label, where, j["data_offsets"], data_size, t);
}

Status ParseMetadata(std::string_view label, const Json& j, std::map<std::string, std::string>* md) {
  if (!j.is_object()) return Fail(label, Cat("__metadata__ must be an object, got ", j.type_name()));
  for (const auto& [key, value] : j.items()) {
    if (!value.is_string()) {
      return Fail(label, Cat("__metadata__ '", Printable(key), "' must be a string, got ", value.type_name()));
    }
    (*md)[key] = value.get<std::string>();
  }
  return Status::Ok();
}

// The tensors must index the whole data buffer, in order, without holes or
// overlaps (the format's rule against polyglot files).
Status CheckCoverage(std::string_view label, std::vector<SafetensorsTensor>* tensors, uint64_t data_size) {
  std::sort(tensors->begin(), tensors->end(), [](const auto& a, const auto& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  uint64_t pos = 0;
  const SafetensorsTensor* prev = nullptr;
  for (const auto& t : *tensors) {
    if (t.begin < pos) {
      return Fail(label, Cat(TensorLabel(t.name), ": data_offsets [", t.begin, ", ", t.end, "] overlap ",
                             TensorLabel(prev->name), " [", prev->begin, ", ", prev->end, "]"));
    }
    if (t.begin > pos) {
      return Fail(label, Cat(TensorLabel(t.name), ": data_offsets [", t.begin, ", ", t.end, "] leave a hole of ",
                             t.begin - pos, " bytes before them"));
    }
    pos = t.end;
    if (t.nbytes > 0) prev = &t;
  }
  if (pos != data_size) {
    return Fail(label, Cat("data buffer has ", data_size - pos, " bytes after the last tensor (", data_size,
                           " bytes, tensors cover ", pos, ")"));
  }
  return Status::Ok();
}

struct ParsedHeader {
  std::vector<SafetensorsTensor> tensors;
  std::map<std::string, std::string> metadata;
};

Status ParseHeader(std::string_view label, std::string_view text, uint64_t data_size, ParsedHeader* out) {
  Json header;
  Status s = ParseJsonObject(label, text, &header);
  if (!s.ok()) return s;
  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      s = ParseMetadata(label, value, &out->metadata);
    } else {
      out->tensors.emplace_back();
      s = ParseEntry(label, key, value, data_size, &out->tensors.back());
    }
    if (!s.ok()) return s;
  }
  return CheckCoverage(label, &out->tensors, data_size);
}

}  // namespace

// Fills a file from a checked header and its data buffer; copies tensors whose
// offsets are misaligned for their dtype so every view is naturally aligned.
struct SafetensorsBuilder {
  static void Build(std::string_view label, ParsedHeader&& h, SafetensorsFile::AlignedBuffer buf,
                    SafetensorsFile* file) {
    SafetensorsFile f;
    f.label_ = std::string(label);
    f.metadata_ = std::move(h.metadata);
    f.tensors_ = std::move(h.tensors);
    for (auto& t : f.tensors_) {
      if (t.nbytes == 0) {
        t.data = g_empty_tensor;
      } else if (t.begin % DTypeSize(t.dtype) == 0) {
        t.data = buf.get() + t.begin;
      } else {
        SafetensorsFile::AlignedBuffer copy(AllocAligned(static_cast<size_t>(t.nbytes)));
        std::memcpy(copy.get(), buf.get() + t.begin, static_cast<size_t>(t.nbytes));
        t.data = copy.get();
        f.copies_.push_back(std::move(copy));
      }
    }
    f.buffer_ = std::move(buf);
    *file = std::move(f);
  }
};

void SafetensorsFile::AlignedFree::operator()(uint8_t* p) const { ::operator delete[](p, std::align_val_t{kAlign}); }

std::string PrintableName(std::string_view s, size_t max_len) { return Printable(s, max_len); }

const SafetensorsTensor* SafetensorsFile::Find(const std::string& name) const {
  for (const auto& t : tensors_) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

const char* SafetensorsDTypeName(DType t) {
  switch (t) {
    case DType::kF16:
      return "F16";
    case DType::kBF16:
      return "BF16";
    case DType::kF32:
      return "F32";
    case DType::kI32:
      return "I32";
  }
  return "?";
}

bool ParseSafetensorsDType(const std::string& s, DType* out) {
  for (DType t : {DType::kF16, DType::kBF16, DType::kF32, DType::kI32}) {
    if (s == SafetensorsDTypeName(t)) {
      *out = t;
      return true;
    }
  }
  return false;
}

Status ParseSafetensors(std::string_view label, const uint8_t* bytes, size_t size, SafetensorsFile* file) {
  try {
    const uint64_t n = size >= 8 ? ReadLe64(bytes) : 0;
    Status s = CheckHeaderLength(label, n, size);
    if (!s.ok()) return s;
    const uint64_t data_size = size - 8 - n;
    ParsedHeader h;
    s = ParseHeader(label, std::string_view(reinterpret_cast<const char*>(bytes) + 8, n), data_size, &h);
    if (!s.ok()) return s;
    SafetensorsFile::AlignedBuffer buf(AllocAligned(data_size));
    if (data_size > 0) std::memcpy(buf.get(), bytes + 8 + n, data_size);
    SafetensorsBuilder::Build(label, std::move(h), std::move(buf), file);
    return Status::Ok();
  } catch (const std::bad_alloc&) {
    return Status(Code::kResourceExhausted, Cat(label, ": out of memory while reading"));
  }
}

Status ReadSafetensors(const std::string& path, SafetensorsFile* file) {
  try {
    FileDescriptor f;
    uint64_t size = 0;
    Status s = OpenForReading(path, &f, &size);
    if (!s.ok()) return s;
    uint8_t len[8] = {};
    s = size >= 8 ? ReadFull(path, f.fd, len, 8) : Status::Ok();
    if (!s.ok()) return s;
    const uint64_t n = ReadLe64(len);
    s = CheckHeaderLength(path, n, size);
    if (!s.ok()) return s;
    std::string text(n, '\0');
    s = ReadFull(path, f.fd, reinterpret_cast<uint8_t*>(text.data()), n);
    if (!s.ok()) return s;
    const uint64_t data_size = size - 8 - n;
    ParsedHeader h;
    s = ParseHeader(path, text, data_size, &h);
    if (!s.ok()) return s;
    // The header is checked before the (possibly large) data is allocated.
    SafetensorsFile::AlignedBuffer buf(AllocAligned(data_size));
    s = ReadFull(path, f.fd, buf.get(), data_size);
    if (!s.ok()) return s;
    SafetensorsBuilder::Build(path, std::move(h), std::move(buf), file);
    return Status::Ok();
  } catch (const std::bad_alloc&) {
    return Status(Code::kResourceExhausted, Cat(path, ": out of memory while reading"));
  }
}

// ---- writing ---------------------------------------------------------------

SafetensorsWriteTensor::SafetensorsWriteTensor(std::string n, const TensorView& v)
    : name(std::move(n)),
      dtype(v.dtype),
      shape(v.shape.begin(), v.shape.begin() + std::min(v.rank, TensorView::kMaxRank)),
      data(v.data) {}

namespace {

// Everything about the tensors is checked before a byte goes anywhere.
Status CheckWriteTensors(const std::vector<SafetensorsWriteTensor>& tensors, std::vector<uint64_t>* nbytes) {
  std::set<std::string> names;
  for (const auto& t : tensors) {
    const std::string where = TensorLabel(t.name);
    if (t.name.empty() || t.name == "__metadata__") return Status::Invalid(Cat(where, ": name is reserved or empty"));
    if (!names.insert(t.name).second) return Status::Invalid(Cat(where, ": name appears twice"));
    if (t.shape.size() > static_cast<size_t>(kMaxSafetensorsRank)) {
      return Status::Invalid(Cat(where, ": rank ", t.shape.size(), " exceeds ", kMaxSafetensorsRank));
    }
    for (int64_t d : t.shape) {
      if (d < 0) return Status::Invalid(Cat(where, ": negative dimension in shape ", ShapeString(t.shape)));
    }
    uint64_t numel = 0, n = 0;
    if (!NumelChecked(t.shape, &numel) || !MulChecked(numel, DTypeSize(t.dtype), &n)) {
      return Status::Invalid(Cat(where, ": shape ", ShapeString(t.shape), " overflows 64-bit sizes"));
    }
    if (n > 0 && t.data == nullptr) return Status::Invalid(Cat(where, ": null data for ", n, " bytes"));
    nbytes->push_back(n);
  }
  return Status::Ok();
}

// The JSON header, space-padded so the data buffer starts 8-byte aligned.
Status BuildHeader(const std::vector<SafetensorsWriteTensor>& tensors, const std::vector<uint64_t>& nbytes,
                   const std::map<std::string, std::string>& metadata, std::string* text) {
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  if (!metadata.empty()) h["__metadata__"] = metadata;
  uint64_t pos = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    h[tensors[i].name] = {{"dtype", SafetensorsDTypeName(tensors[i].dtype)},
                          {"shape", tensors[i].shape},
                          {"data_offsets", {pos, pos + nbytes[i]}}};
    pos += nbytes[i];
  }
  try {
    *text = h.dump();
  } catch (const nlohmann::ordered_json::exception& e) {  // invalid UTF-8 in a name or value
    return Status::Invalid(Cat("cannot encode the header: ", Printable(e.what(), 160)));
  }
  text->append((8 - text->size() % 8) % 8, ' ');
  return Status::Ok();
}

std::string Le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((v >> (8 * i)) & 0xFF);
  return s;
}

}  // namespace

Status SerializeSafetensors(const std::vector<SafetensorsWriteTensor>& tensors,
                            const std::map<std::string, std::string>& metadata, std::string* bytes) {
  std::vector<uint64_t> nbytes;
  Status s = CheckWriteTensors(tensors, &nbytes);
  if (!s.ok()) return s;
  std::string header;
  s = BuildHeader(tensors, nbytes, metadata, &header);
  if (!s.ok()) return s;
  *bytes = Le64(header.size()) + header;
  for (size_t i = 0; i < tensors.size(); ++i) bytes->append(static_cast<const char*>(tensors[i].data), nbytes[i]);
  return Status::Ok();
}

Status WriteSafetensors(const std::string& path, const std::vector<SafetensorsWriteTensor>& tensors,
                        const std::map<std::string, std::string>& metadata) {
  std::vector<uint64_t> nbytes;
  Status s = CheckWriteTensors(tensors, &nbytes);
  if (!s.ok()) return Fail(path, s.message());
  std::string header;
  s = BuildHeader(tensors, nbytes, metadata, &header);
  if (!s.ok()) return Fail(path, s.message());
  const std::string len = Le64(header.size());
  std::vector<FilePiece> pieces{{len.data(), len.size()}, {header.data(), header.size()}};
  for (size_t i = 0; i < tensors.size(); ++i) pieces.emplace_back(tensors[i].data, nbytes[i]);
  return WriteFileAtomically(path, pieces);
}

}  // namespace cgdr
