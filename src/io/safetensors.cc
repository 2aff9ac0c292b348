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
#include "io/json_scan.h"
#include "validate/checks.h"

namespace cgdr {

static_assert(std::endian::native == std::endian::little, "tensor bytes are written as they lie in memory");

namespace {

using Json = nlohmann::json;
constexpr size_t kAlign = 64;  // buffers suit any SIMD load
constexpr uint64_t kMaxI64 = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());

// Names, values and paths in messages come from untrusted files: control
// bytes and bytes that are not valid UTF-8 are escaped (\xNN), so every
// message is one line of valid text; long ones are cut at a character.
std::string Printable(std::string_view s, size_t max_len = 80);
std::string Printable(std::string_view s, size_t max_len) {
  static const char* hex = "0123456789abcdef";
  std::string r;
  size_t i = 0;
  while (i < s.size() && r.size() < max_len) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t len = Utf8SequenceLength(s, i);
    if (len > 1 || (len == 1 && c >= 0x20 && c != 0x7F)) {
      r.append(s.substr(i, len));
      i += len;
    } else {
      r += "\\x";
      r += hex[c >> 4];
      r += hex[c & 15];
      ++i;
    }
  }
  if (i < s.size()) r += "...";
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

using Token = JsonScanner::Token;

// Excerpt of the scanner's current token for messages: a string quoted, a
// number as written (both cut short and escaped), "[...]" or "{...}" for a
// container (never its contents), else the token's kind.
std::string Excerpt(const JsonScanner& scan) {
  switch (scan.token()) {
    case Token::kString:
      return Cat("\"", Printable(scan.string_value(), 40), "\"");
    case Token::kNumber:
      return Printable(scan.raw(), 40);
    case Token::kBeginArray:
      return "[...]";
    case Token::kBeginObject:
      return "{...}";
    default:
      return JsonTokenKind(scan.token());
  }
}

struct ParsedHeader {
  std::vector<SafetensorsTensor> tensors;  // in header order until ParseHeader puts them in data order
  std::vector<uint32_t> by_name;           // indices into tensors, sorted by name
  std::map<std::string, std::string> metadata;
};

// Reads the header against the format's schema, token by token:
//   {"NAME": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}, ...,
//    "__metadata__": {"KEY": "VALUE", ...}}
// One pass, no recursion and no JSON tree: time linear in the header and
// constant stack, whatever it holds. The first thing out of place is the
// error; messages quote only short escaped excerpts.
class HeaderReader {
 public:
  HeaderReader(std::string_view label, std::string_view text, uint64_t data_size)
      : label_(label), scan_(text), data_size_(data_size) {}

  Status Read(ParsedHeader* out) {
    Token t;
    CGDR_TRY(NextValue(&t));
    if (t != Token::kBeginObject) return Fail(label_, Cat("header must be a JSON object, got ", JsonTokenKind(t)));
    bool have_metadata = false;
    CGDR_TRY(ReadMembers([&](std::string key) {
      if (key == "__metadata__") {
        if (have_metadata) return Fail(label_, "header repeats the key '__metadata__'");
        have_metadata = true;
        return ReadMetadata(&out->metadata);
      }
      if (out->tensors.size() >= kMaxSafetensorsEntries) {
        return Fail(label_, Cat("header holds more than ", kMaxSafetensorsEntries, " tensors (the limit)"));
      }
      out->tensors.emplace_back();
      return ReadEntry(std::move(key), &out->tensors.back());
    }));
    CGDR_TRY(Next(&t));
    if (t != Token::kEnd) return Syntax("the end of the header", t);  // trailing spaces are padding
    return Status::Ok();
  }

 private:
  // The next token; JSON errors and the nesting limit end the read here.
  Status Next(Token* t) {
    *t = scan_.Next();
    if (*t == Token::kError) {
      return Fail(label_, Cat("header is not valid JSON: ", scan_.error(), " at byte ", scan_.offset()));
    }
    if (*t == Token::kBeginObject || *t == Token::kBeginArray) {
      if (++depth_ > kMaxSafetensorsJsonDepth) {
        return Fail(label_, Cat(Where(), "JSON nested deeper than ", kMaxSafetensorsJsonDepth,
                                " levels at byte ", scan_.offset(),
                                " (the header is an object of tensor objects whose shape and data_offsets are flat "
                                "arrays)"));
      }
    } else if (*t == Token::kEndObject || *t == Token::kEndArray) {
      --depth_;
    }
    return Status::Ok();
  }

  // "tensor 'x': " or "__metadata__: " for the part being read ("" between them).
  std::string Where() const {
    return entry_ ? Cat(TensorLabel(*entry_), ": ") : in_metadata_ ? "__metadata__: " : "";
  }
  // An error in the tensor entry being read.
  Status EntryFail(const std::string& msg) const { return Fail(label_, Cat(TensorLabel(*entry_), ": ", msg)); }

  static bool StartsValue(Token t) {
    return t != Token::kEnd && t != Token::kEndObject && t != Token::kEndArray && t != Token::kColon &&
           t != Token::kComma;
  }

  // The next token, which must start a value (anything else is a JSON error).
  Status NextValue(Token* t) {
    CGDR_TRY(Next(t));
    return StartsValue(*t) ? Status::Ok() : Syntax("a value", *t);
  }

  Status Syntax(const char* expected, Token got) {
    return Fail(label_, Cat("header is not valid JSON: expected ", expected, " at byte ", scan_.offset(), ", got ",
                            JsonTokenKind(got)));
  }

  // The members of the object whose '{' was just read; on_member(key) reads
  // the value after the ':'.
  template <typename OnMember>
  Status ReadMembers(OnMember&& on_member) {
    Token t;
    CGDR_TRY(Next(&t));
    if (t == Token::kEndObject) return Status::Ok();
    while (true) {
      if (t != Token::kString) return Syntax("a string key", t);
      std::string key = scan_.string_value();
      CGDR_TRY(Next(&t));
      if (t != Token::kColon) return Syntax("':'", t);
      CGDR_TRY(on_member(std::move(key)));
      CGDR_TRY(Next(&t));
      if (t == Token::kEndObject) return Status::Ok();
      if (t != Token::kComma) return Syntax("',' or '}'", t);
      CGDR_TRY(Next(&t));
    }
  }

  Status ReadMetadata(std::map<std::string, std::string>* md) {
    in_metadata_ = true;
    Token t;
    CGDR_TRY(NextValue(&t));
    if (t != Token::kBeginObject) return Fail(label_, Cat("__metadata__ must be an object, got ", JsonTokenKind(t)));
    CGDR_TRY(ReadMembers([&](std::string key) {
      Token v;
      CGDR_TRY(NextValue(&v));
      if (v != Token::kString) {
        return Fail(label_, Cat("__metadata__ '", Printable(key), "' must be a string, got ", JsonTokenKind(v)));
      }
      const auto [it, fresh] = md->emplace(std::move(key), scan_.string_value());
      if (!fresh) return Fail(label_, Cat("__metadata__ repeats the key '", Printable(it->first), "'"));
      return Status::Ok();
    }));
    in_metadata_ = false;
    return Status::Ok();
  }

  // One tensor entry: exactly dtype, shape and data_offsets, all valid.
  Status ReadEntry(std::string name, SafetensorsTensor* t) {
    if (name.empty()) return Fail(label_, "a tensor has an empty name");
    t->name = std::move(name);
    entry_ = &t->name;
    Token tok;
    CGDR_TRY(NextValue(&tok));
    if (tok != Token::kBeginObject) {
      return EntryFail(Cat("expected an object with dtype, shape, data_offsets, got ", JsonTokenKind(tok)));
    }
    static constexpr const char* kFields[] = {"dtype", "shape", "data_offsets"};
    bool seen[3] = {false, false, false};
    std::vector<uint64_t> shape, offsets;
    CGDR_TRY(ReadMembers([&](std::string key) {
      const auto* f = std::find_if(std::begin(kFields), std::end(kFields), [&](const char* k) { return key == k; });
      if (f == std::end(kFields)) return EntryFail(Cat("unexpected field '", Printable(key), "'"));
      const size_t i = static_cast<size_t>(f - std::begin(kFields));
      if (seen[i]) return EntryFail(Cat("repeats the key '", key, "'"));
      seen[i] = true;
      if (i == 0) return ReadDType(&t->dtype);
      return i == 1 ? ReadIndexArray(Field::kShape, &shape) : ReadIndexArray(Field::kOffsets, &offsets);
    }));
    for (size_t i = 0; i < 3; ++i) {
      if (!seen[i]) return EntryFail(Cat("missing field '", kFields[i], "'"));
    }
    CGDR_TRY(CheckShape(shape, t));
    CGDR_TRY(CheckOffsets(offsets, t));
    entry_ = nullptr;
    return Status::Ok();
  }

  Status ReadDType(DType* dtype) {
    Token t;
    CGDR_TRY(NextValue(&t));
    if (t != Token::kString || !ParseSafetensorsDType(scan_.string_value(), dtype)) {
      return EntryFail(Cat("unsupported dtype ", Excerpt(scan_), " (supported: F16, BF16, F32, I32)"));
    }
    return Status::Ok();
  }

  enum class Field { kShape, kOffsets };
  enum class Issue { kNotArray, kBadValue, kTooMany };

  // A flat array of indices (integers 0 .. INT64_MAX): up to kMaxSafetensorsRank
  // for a shape, 2 for data_offsets; the first thing that is not one is the error.
  Status ReadIndexArray(Field field, std::vector<uint64_t>* values) {
    const size_t max_count = field == Field::kShape ? static_cast<size_t>(kMaxSafetensorsRank) : 2;
    Token t;
    CGDR_TRY(NextValue(&t));
    if (t != Token::kBeginArray) return BadIndexArray(field, Issue::kNotArray, 0);
    CGDR_TRY(Next(&t));
    if (t == Token::kEndArray) return Status::Ok();
    while (true) {
      if (!StartsValue(t)) return Syntax("a value", t);
      uint64_t v = 0;
      if (values->size() == max_count) return BadIndexArray(field, Issue::kTooMany, values->size());
      if (!scan_.AsUint64(&v) || v > kMaxI64) return BadIndexArray(field, Issue::kBadValue, values->size());
      values->push_back(v);
      CGDR_TRY(Next(&t));
      if (t == Token::kEndArray) return Status::Ok();
      if (t != Token::kComma) return Syntax("',' or ']'", t);
      CGDR_TRY(Next(&t));
    }
  }

  // The message for the array's first problem; the scanner is on the offending token.
  Status BadIndexArray(Field field, Issue issue, size_t index) {
    if (field == Field::kOffsets) {
      const std::string got = issue == Issue::kNotArray  ? Excerpt(scan_)
                              : issue == Issue::kBadValue ? Cat(Excerpt(scan_), " at [", index, "]")
                                                          : "more than 2 values";
      return BadOffsets(got);
    }
    switch (issue) {
      case Issue::kNotArray:
        return EntryFail(Cat("shape must be an array, got ", Excerpt(scan_)));
      case Issue::kBadValue:
        return EntryFail(Cat("shape[", index, "] is ", Excerpt(scan_),
                                ", expected a non-negative integer <= ", kMaxI64));
      case Issue::kTooMany:
        break;
    }
    return EntryFail(Cat("shape has more than ", kMaxSafetensorsRank, " dimensions (the rank limit)"));
  }

  Status BadOffsets(const std::string& got) {
    return EntryFail(Cat("data_offsets must be [begin, end] of integers in [0, ", kMaxI64, "], got ", got));
  }

  Status CheckShape(const std::vector<uint64_t>& shape, SafetensorsTensor* t) {
    t->shape.assign(shape.begin(), shape.end());
    uint64_t numel = 0, nbytes = 0;
    if (!NumelChecked(t->shape, &numel) || !MulChecked(numel, DTypeSize(t->dtype), &nbytes)) {
      return EntryFail(Cat("shape ", ShapeString(t->shape), " of ", SafetensorsDTypeName(t->dtype),
                              " has more bytes than a 64-bit size can hold"));
    }
    t->numel = static_cast<int64_t>(numel);
    t->nbytes = static_cast<int64_t>(nbytes);
    return Status::Ok();
  }

  Status CheckOffsets(const std::vector<uint64_t>& offsets, SafetensorsTensor* t) {
    if (offsets.size() != 2) return BadOffsets(Cat(offsets.size(), offsets.size() == 1 ? " value" : " values"));
    const uint64_t b = offsets[0], e = offsets[1];
    if (b > e || e > data_size_) {
      return EntryFail(Cat("data_offsets [", b, ", ", e, "] outside the data buffer of ", data_size_,
                              " bytes"));
    }
    if (e - b != static_cast<uint64_t>(t->nbytes)) {
      return EntryFail(Cat("data_offsets [", b, ", ", e, "] hold ", e - b, " bytes, expected ", t->nbytes,
                              " (shape ", ShapeString(t->shape), " x ", DTypeSize(t->dtype), "-byte ",
                              SafetensorsDTypeName(t->dtype), ")"));
    }
    t->begin = b;
    t->end = e;
    return Status::Ok();
  }

  std::string_view label_;
  JsonScanner scan_;
  uint64_t data_size_;
  int depth_ = 0;
  const std::string* entry_ = nullptr;  // the tensor being read, for messages
  bool in_metadata_ = false;
};

// The first 8 bytes of `name` as a big-endian number (zero-padded): ordering
// by it agrees with ordering by name wherever the prefixes differ.
uint64_t NamePrefix(const std::string& name) {
  uint64_t p = 0;
  for (size_t i = 0; i < 8; ++i) p = (p << 8) | (i < name.size() ? static_cast<uint8_t>(name[i]) : 0u);
  return p;
}

// Indices of `tensors` sorted by name (ties in index order). The sort moves
// compact keys (name prefix, index) and reads whole names only on equal
// prefixes, so a million names sort without a cache miss per comparison.
std::vector<uint32_t> NameOrder(const std::vector<SafetensorsTensor>& tensors) {
  struct Key {
    uint64_t prefix;
    uint32_t index;
  };
  std::vector<Key> keys(tensors.size());
  for (uint32_t i = 0; i < keys.size(); ++i) keys[i] = {NamePrefix(tensors[i].name), i};
  std::sort(keys.begin(), keys.end(), [&](const Key& a, const Key& b) {
    if (a.prefix != b.prefix) return a.prefix < b.prefix;
    const int c = tensors[a.index].name.compare(tensors[b.index].name);
    return c != 0 ? c < 0 : a.index < b.index;
  });
  std::vector<uint32_t> order(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) order[i] = keys[i].index;
  return order;
}

// Indices of `tensors` in data order: by (begin, end), ties in index order.
std::vector<uint32_t> DataOrder(const std::vector<SafetensorsTensor>& tensors) {
  struct Key {
    uint64_t begin, end;
    uint32_t index;
  };
  std::vector<Key> keys(tensors.size());
  for (uint32_t i = 0; i < keys.size(); ++i) keys[i] = {tensors[i].begin, tensors[i].end, i};
  std::sort(keys.begin(), keys.end(), [](const Key& a, const Key& b) {
    return std::tie(a.begin, a.end, a.index) < std::tie(b.begin, b.end, b.index);
  });
  std::vector<uint32_t> order(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) order[i] = keys[i].index;
  return order;
}

// A header that says two things about one tensor is refused; the message
// names the name repeated first in the header.
Status CheckDistinctNames(std::string_view label, const std::vector<SafetensorsTensor>& tensors,
                          const std::vector<uint32_t>& by_name) {
  uint32_t first_repeat = UINT32_MAX;
  for (size_t i = 1; i < by_name.size(); ++i) {
    if (tensors[by_name[i]].name == tensors[by_name[i - 1]].name) first_repeat = std::min(first_repeat, by_name[i]);
  }
  if (first_repeat == UINT32_MAX) return Status::Ok();
  return Fail(label, Cat("header repeats the key '", Printable(tensors[first_repeat].name), "'"));
}

// The tensors, taken in data order, must index the whole data buffer without
// holes or overlaps (the format's rule against polyglot files).
Status CheckCoverage(std::string_view label, const std::vector<SafetensorsTensor>& tensors,
                     const std::vector<uint32_t>& by_data, uint64_t data_size) {
  uint64_t pos = 0;
  const SafetensorsTensor* prev = nullptr;
  for (const uint32_t i : by_data) {
    const SafetensorsTensor& t = tensors[i];
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

// Reads and checks the header; on success the tensors are in data order
// (by offsets; header order among empty tensors at one offset). Sorting
// indices keeps every step n log n in the number of tensors.
Status ParseHeader(std::string_view label, std::string_view text, uint64_t data_size, ParsedHeader* out) {
  CGDR_TRY(HeaderReader(label, text, data_size).Read(out));
  std::vector<SafetensorsTensor>& tensors = out->tensors;
  out->by_name = NameOrder(tensors);
  CGDR_TRY(CheckDistinctNames(label, tensors, out->by_name));
  const std::vector<uint32_t> by_data = DataOrder(tensors);
  CGDR_TRY(CheckCoverage(label, tensors, by_data, data_size));
  std::vector<uint32_t> rank(by_data.size());
  std::vector<SafetensorsTensor> in_data_order(tensors.size());
  for (uint32_t r = 0; r < by_data.size(); ++r) {
    rank[by_data[r]] = r;
    in_data_order[r] = std::move(tensors[by_data[r]]);
  }
  tensors = std::move(in_data_order);
  for (uint32_t& i : out->by_name) i = rank[i];
  return Status::Ok();
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
    f.by_name_ = std::move(h.by_name);
    f.buffer_ = std::move(buf);
    *file = std::move(f);
  }
};

void SafetensorsFile::AlignedFree::operator()(uint8_t* p) const { ::operator delete[](p, std::align_val_t{kAlign}); }

std::string PrintableName(std::string_view s, size_t max_len) { return Printable(s, max_len); }

const SafetensorsTensor* SafetensorsFile::Find(const std::string& name) const {
  const auto it = std::lower_bound(by_name_.begin(), by_name_.end(), name,
                                   [&](uint32_t i, const std::string& n) { return tensors_[i].name < n; });
  return it != by_name_.end() && tensors_[*it].name == name ? &tensors_[*it] : nullptr;
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

// `s` as a JSON string (quoted, escaped); names and metadata must be UTF-8.
Status AppendJsonString(const std::string& s, std::string* out) {
  try {
    *out += Json(s).dump();
  } catch (const Json::exception& e) {  // invalid UTF-8
    return Status::Invalid(Cat("cannot encode \"", Printable(s, 40), "\" in the header: ", Printable(e.what(), 160)));
  }
  return Status::Ok();
}

// The JSON header, space-padded so the data buffer starts 8-byte aligned.
// Written out directly (not through a JSON object, whose ordered insertion
// is linear per key): time linear in the number of tensors.
Status BuildHeader(const std::vector<SafetensorsWriteTensor>& tensors, const std::vector<uint64_t>& nbytes,
                   const std::map<std::string, std::string>& metadata, std::string* text) {
  std::string& h = *text;
  h = "{";
  if (!metadata.empty()) {
    h += "\"__metadata__\":{";
    for (const auto& [key, value] : metadata) {
      if (h.back() != '{') h += ',';
      CGDR_TRY(AppendJsonString(key, &h));
      h += ':';
      CGDR_TRY(AppendJsonString(value, &h));
    }
    h += '}';
  }
  uint64_t pos = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (h.size() > 1) h += ',';
    CGDR_TRY(AppendJsonString(tensors[i].name, &h));
    h += Cat(":{\"dtype\":\"", SafetensorsDTypeName(tensors[i].dtype), "\",\"shape\":[");
    for (size_t d = 0; d < tensors[i].shape.size(); ++d) h += Cat(d ? "," : "", tensors[i].shape[d]);
    h += Cat("],\"data_offsets\":[", pos, ",", pos + nbytes[i], "]}");
    pos += nbytes[i];
  }
  h += '}';
  h.append((8 - h.size() % 8) % 8, ' ');
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
