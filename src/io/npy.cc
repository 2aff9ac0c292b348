#include "io/npy.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <limits>

#include "core/dtype.h"
#include "core/strcat.h"
#include "io/file_util.h"
#include "io/safetensors.h"

namespace cgdr {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;
constexpr uint64_t kMaxHeaderBytes = 1 << 20;

Status Fail(std::string_view label, const std::string& msg) { return Status::Invalid(Cat(label, ": ", msg)); }

// What the header says about the data.
struct NpyHeader {
  DType dtype = DType::kF32;
  bool int64 = false;  // '<i8' on disk, narrowed to i32 after reading
  std::vector<int64_t> shape;
  uint64_t data_offset = 0;
  uint64_t numel = 0;
  uint64_t disk_bytes = 0;  // numel * the size on disk
};

// The fixed prefix: magic, version, header length. Returns where the dict starts.
Status ParsePreamble(std::string_view label, const uint8_t* p, uint64_t size, uint64_t* dict_begin,
                     uint64_t* dict_len) {
  if (size < 10 || std::memcmp(p, kMagic, kMagicLen) != 0) {
    return Fail(label, "not a .npy file (it does not start with \\x93NUMPY)");
  }
  const int major = p[6];
  if (major < 1 || major > 3)
    return Fail(label, Cat(".npy format version ", major, ".", int(p[7]), " is not supported (1-3)"));
  if (major == 1) {
    *dict_len = p[8] | (uint64_t{p[9]} << 8);
    *dict_begin = 10;
  } else {
    if (size < 12) return Fail(label, "file too short for its .npy header length");
    *dict_len = p[8] | (uint64_t{p[9]} << 8) | (uint64_t{p[10]} << 16) | (uint64_t{p[11]} << 24);
    *dict_begin = 12;
  }
  if (*dict_len > kMaxHeaderBytes) {
    return Fail(label, Cat(".npy header of ", *dict_len, " bytes exceeds the limit of ", kMaxHeaderBytes, " bytes"));
  }
  return Status::Ok();
}

// The value text of `key` in the dict literal ('descr': '<f4', ...), up to the next top-level comma.
bool DictValue(const std::string& dict, const char* key, std::string* value) {
  const std::string k1 = Cat("'", key, "'"), k2 = Cat("\"", key, "\"");
  size_t pos = dict.find(k1);
  if (pos == std::string::npos) pos = dict.find(k2);
  if (pos == std::string::npos) return false;
  pos = dict.find(':', pos);
  if (pos == std::string::npos) return false;
  ++pos;
  int depth = 0;
  size_t end = pos;
  for (; end < dict.size(); ++end) {
    const char c = dict[end];
    if (c == '(' || c == '[') ++depth;
    if (c == ')' || c == ']') --depth;
    if ((c == ',' && depth == 0) || (c == '}' && depth == 0)) break;
  }
  value->assign(dict, pos, end - pos);
  const auto notspace = [](char c) { return !std::isspace(static_cast<unsigned char>(c)); };
  value->erase(value->begin(), std::find_if(value->begin(), value->end(), notspace));
  value->erase(std::find_if(value->rbegin(), value->rend(), notspace).base(), value->end());
  return true;
}

Status ParseDescr(std::string_view label, const std::string& v, NpyHeader* h) {
  std::string d = v;
  if (d.size() >= 2 && (d.front() == '\'' || d.front() == '"') && d.back() == d.front()) d = d.substr(1, d.size() - 2);
  if (d.size() == 3 && d[0] == '>' && d != ">V2") {
    return Fail(label, Cat("dtype '", PrintableName(d), "' is big-endian; save the array as little-endian ('<",
                           PrintableName(d.substr(1)), "')"));
  }
  if (d == "<f2" || d == "=f2") {
    h->dtype = DType::kF16;
  } else if (d == "<f4" || d == "=f4") {
    h->dtype = DType::kF32;
  } else if (d == "<i4" || d == "=i4") {
    h->dtype = DType::kI32;
  } else if (d == "<i8" || d == "=i8") {
    h->dtype = DType::kI32;
    h->int64 = true;
  } else if (d == "|V2" || d == "<V2" || d == ">V2") {  // ml_dtypes.bfloat16 (a 2-byte void to numpy)
    h->dtype = DType::kBF16;
  } else {
    return Fail(label, Cat("unsupported dtype ", PrintableName(v, 40),
                           " (supported: '<f2' float16, '<f4' float32, '|V2' bfloat16, '<i4'/'<i8' integers;",
                           " float64 is not an NPU dtype: save as float32)"));
  }
  return Status::Ok();
}

Status ParseShapeTuple(std::string_view label, const std::string& v, NpyHeader* h) {
  if (v.size() < 2 || v.front() != '(' || v.back() != ')') {
    return Fail(label, Cat("header 'shape' is ", PrintableName(v, 40), ", expected a tuple of integers"));
  }
  h->shape.clear();
  size_t pos = 1;
  while (pos < v.size() - 1) {
    while (pos < v.size() - 1 && (std::isspace(static_cast<unsigned char>(v[pos])) || v[pos] == ',')) ++pos;
    if (pos >= v.size() - 1) break;
    size_t end = pos;
    while (end < v.size() - 1 && std::isdigit(static_cast<unsigned char>(v[end]))) ++end;
    if (end == pos || end - pos > 18) {
      return Fail(label, Cat("header 'shape' is ", PrintableName(v, 40), ", expected non-negative integers"));
    }
    h->shape.push_back(std::stoll(v.substr(pos, end - pos)));
    pos = end;
  }
  if (h->shape.size() > static_cast<size_t>(TensorView::kMaxRank)) {
    return Fail(label, Cat("rank ", h->shape.size(), " exceeds the supported maximum ", TensorView::kMaxRank));
  }
  uint64_t n = 1;
  for (int64_t d : h->shape) {
    if (d != 0 && n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / 8 / static_cast<uint64_t>(d)) {
      return Fail(label, Cat("shape ", PrintableName(v, 40), " has more bytes than a 64-bit size can hold"));
    }
    n *= static_cast<uint64_t>(d);
  }
  h->numel = n;
  h->disk_bytes = n * (h->int64 ? 8 : DTypeSize(h->dtype));
  return Status::Ok();
}

Status ParseDict(std::string_view label, const std::string& dict, NpyHeader* h) {
  std::string descr, order, shape;
  if (!DictValue(dict, "descr", &descr)) return Fail(label, "header lacks 'descr'");
  if (!DictValue(dict, "fortran_order", &order)) return Fail(label, "header lacks 'fortran_order'");
  if (!DictValue(dict, "shape", &shape)) return Fail(label, "header lacks 'shape'");
  Status s = ParseDescr(label, descr, h);
  if (!s.ok()) return s;
  if (order == "True") return Fail(label, "array is in Fortran order; save it with np.ascontiguousarray(x)");
  if (order != "False") return Fail(label, Cat("header 'fortran_order' is ", PrintableName(order, 20)));
  return ParseShapeTuple(label, shape, h);
}

// Header from the first bytes of a file of `size` bytes; checks the data size.
Status ParseHeaderBytes(std::string_view label, const uint8_t* p, uint64_t avail, uint64_t size, NpyHeader* h) {
  uint64_t begin = 0, len = 0;
  Status s = ParsePreamble(label, p, avail, &begin, &len);
  if (!s.ok()) return s;
  if (begin + len > size) return Fail(label, Cat(".npy header of ", len, " bytes runs past the end of the file"));
  if (begin + len > avail) return Fail(label, "internal: header not fully read");
  s = ParseDict(label, std::string(reinterpret_cast<const char*>(p) + begin, len), h);
  if (!s.ok()) return s;
  h->data_offset = begin + len;
  const uint64_t have = size - h->data_offset;
  if (have != h->disk_bytes) {
    return Fail(label,
                Cat("data holds ", have, " bytes, expected ", h->disk_bytes, " for the header's shape and dtype"));
  }
  return Status::Ok();
}

// The i64 values read into `raw` narrowed into out->data as i32.
Status NarrowInt64(std::string_view label, const uint8_t* raw, uint64_t n, NpyArray* out) {
  auto* dst = reinterpret_cast<int32_t*>(out->data.data());
  for (uint64_t i = 0; i < n; ++i) {
    int64_t v;
    std::memcpy(&v, raw + 8 * i, 8);
    if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max()) {
      return Fail(label, Cat("int64 value ", v, " at index ", i, " does not fit int32"));
    }
    dst[i] = static_cast<int32_t>(v);
  }
  return Status::Ok();
}

void Allocate(const NpyHeader& h, NpyArray* out) {
  out->dtype = h.dtype;
  out->shape = h.shape;
  out->data.assign(h.numel * DTypeSize(h.dtype), 0);
}

std::string Descr(DType t) {
  switch (t) {
    case DType::kF16: return "<f2";
    case DType::kI32: return "<i4";
    default: return "<f4";  // f32, and bf16 widened
  }
}

}  // namespace

Status ParseNpy(std::string_view label, const uint8_t* bytes, size_t size, NpyArray* out) {
  NpyHeader h;
  Status s = ParseHeaderBytes(label, bytes, size, size, &h);
  if (!s.ok()) return s;
  NpyArray a;
  Allocate(h, &a);
  if (h.int64) {
    s = NarrowInt64(label, bytes + h.data_offset, h.numel, &a);
    if (!s.ok()) return s;
  } else if (h.disk_bytes > 0) {
    std::memcpy(a.data.data(), bytes + h.data_offset, h.disk_bytes);
  }
  *out = std::move(a);
  return Status::Ok();
}

Status ReadNpy(const std::string& path, NpyArray* out) {
  try {
    FileDescriptor f;
    uint64_t size = 0;
    Status s = OpenForReading(path, &f, &size);
    if (!s.ok()) return s;
    // The preamble, then the whole header, then the data straight into place.
    std::vector<uint8_t> head(std::min<uint64_t>(size, 12));
    s = ReadFull(path, f.fd, head.data(), head.size());
    if (!s.ok()) return s;
    uint64_t begin = 0, len = 0;
    s = ParsePreamble(path, head.data(), head.size(), &begin, &len);
    if (!s.ok()) return s;
    if (begin + len > size) return Fail(path, Cat(".npy header of ", len, " bytes runs past the end of the file"));
    // The dict ends where the data starts; one that ends inside the bytes read
    // so far is too short to be a dict (and would leave them unaccounted).
    if (begin + len < head.size()) return Fail(path, Cat(".npy header of ", len, " bytes is too short for its dict"));
    const size_t have = head.size();
    head.resize(begin + len);
    s = ReadFull(path, f.fd, head.data() + have, head.size() - have);
    if (!s.ok()) return s;
    NpyHeader h;
    s = ParseHeaderBytes(path, head.data(), head.size(), size, &h);
    if (!s.ok()) return s;
    NpyArray a;
    Allocate(h, &a);
    if (h.int64) {
      std::vector<uint8_t> raw(h.disk_bytes);
      s = ReadFull(path, f.fd, raw.data(), raw.size());
      if (s.ok()) s = NarrowInt64(path, raw.data(), h.numel, &a);
    } else {
      s = ReadFull(path, f.fd, a.data.data(), h.disk_bytes);
    }
    if (!s.ok()) return s;
    *out = std::move(a);
    return Status::Ok();
  } catch (const std::bad_alloc&) {
    return Status(Code::kResourceExhausted, Cat(path, ": out of memory while reading"));
  }
}

namespace {

std::string NpyHeaderBytes(const TensorView& t) {
  std::string dict = Cat("{'descr': '", Descr(t.dtype), "', 'fortran_order': False, 'shape': (");
  for (int i = 0; i < t.rank; ++i)
    dict += Cat(t.shape[i], (t.rank == 1 || i + 1 < t.rank) ? "," : "", i + 1 < t.rank ? " " : "");
  dict += "), }";
  // Pad with spaces and a newline so the data starts on a 64-byte boundary (as numpy writes).
  const size_t total = kMagicLen + 4 + dict.size() + 1;
  dict.append((64 - total % 64) % 64, ' ');
  dict += '\n';
  std::string out(kMagic, kMagicLen);
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(dict.size() & 0xFF);
  out += static_cast<char>(dict.size() >> 8);
  return out + dict;
}

// The data as written: bf16 widened to f32 into `wide`, else the tensor's own bytes.
FilePiece NpyData(const TensorView& t, std::vector<float>* wide) {
  const int64_t n = t.numel();
  if (t.dtype != DType::kBF16) return {t.data, static_cast<uint64_t>(n) * DTypeSize(t.dtype)};
  wide->resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) (*wide)[i] = LoadAsF32(t.data, t.dtype, i);
  return {wide->data(), wide->size() * sizeof(float)};
}

}  // namespace

std::string SerializeNpy(const TensorView& t) {
  std::vector<float> wide;
  const FilePiece data = NpyData(t, &wide);
  return NpyHeaderBytes(t) + std::string(static_cast<const char*>(data.first), data.second);
}

Status WriteNpy(const std::string& path, const TensorView& t) {
  try {
    std::vector<float> wide;
    const std::string header = NpyHeaderBytes(t);
    return WriteFileAtomically(path, {{header.data(), header.size()}, NpyData(t, &wide)});
  } catch (const std::bad_alloc&) {
    return Status(Code::kResourceExhausted, Cat(path, ": out of memory while writing"));
  }
}

}  // namespace cgdr
