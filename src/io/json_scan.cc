#include "io/json_scan.h"

namespace cgdr {
namespace {

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

void AppendUtf8(uint32_t cp, std::string* s) {
  if (cp < 0x80) {
    *s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    *s += static_cast<char>(0xC0 | (cp >> 6));
    *s += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    *s += static_cast<char>(0xE0 | (cp >> 12));
    *s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    *s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    *s += static_cast<char>(0xF0 | (cp >> 18));
    *s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    *s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    *s += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

}  // namespace

const char* JsonTokenKind(JsonScanner::Token t) {
  using T = JsonScanner::Token;
  switch (t) {
    case T::kBeginObject:
      return "an object";
    case T::kBeginArray:
      return "an array";
    case T::kString:
      return "a string";
    case T::kNumber:
      return "a number";
    case T::kTrue:
      return "true";
    case T::kFalse:
      return "false";
    case T::kNull:
      return "null";
    case T::kEnd:
      return "the end of the header";
    case T::kEndObject:
      return "'}'";
    case T::kEndArray:
      return "']'";
    case T::kColon:
      return "':'";
    case T::kComma:
      return "','";
    case T::kError:
      break;
  }
  return "invalid JSON";
}

JsonScanner::Token JsonScanner::Fail(size_t at, const char* what) {
  start_ = at;
  error_ = what;
  return token_ = Token::kError;
}

bool JsonScanner::Error(size_t at, const char* what) {
  Fail(at, what);
  return false;
}

JsonScanner::Token JsonScanner::Next() {
  if (token_ == Token::kError) return token_;
  while (pos_ < text_.size() && IsSpace(text_[pos_])) ++pos_;
  start_ = pos_;
  if (pos_ == text_.size()) return token_ = Token::kEnd;
  const char c = text_[pos_];
  switch (c) {
    case '{':
      ++pos_;
      return token_ = Token::kBeginObject;
    case '}':
      ++pos_;
      return token_ = Token::kEndObject;
    case '[':
      ++pos_;
      return token_ = Token::kBeginArray;
    case ']':
      ++pos_;
      return token_ = Token::kEndArray;
    case ':':
      ++pos_;
      return token_ = Token::kColon;
    case ',':
      ++pos_;
      return token_ = Token::kComma;
    case '"':
      return token_ = ScanString();
    case 't':
      return token_ = ScanLiteral("true", Token::kTrue);
    case 'f':
      return token_ = ScanLiteral("false", Token::kFalse);
    case 'n':
      return token_ = ScanLiteral("null", Token::kNull);
    default:
      if (c == '-' || IsDigit(c)) return token_ = ScanNumber();
      return Fail(pos_, "unexpected character");
  }
}

JsonScanner::Token JsonScanner::ScanLiteral(std::string_view word, Token t) {
  if (text_.substr(pos_, word.size()) != word) return Fail(pos_, "invalid literal");
  pos_ += word.size();
  return t;
}

// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
JsonScanner::Token JsonScanner::ScanNumber() {
  const size_t n = text_.size();
  auto digits = [&] {
    const size_t from = pos_;
    while (pos_ < n && IsDigit(text_[pos_])) ++pos_;
    return pos_ > from;
  };
  if (text_[pos_] == '-') ++pos_;
  if (pos_ < n && text_[pos_] == '0') {
    ++pos_;
  } else if (!digits()) {
    return Fail(pos_, "invalid number");
  }
  if (pos_ < n && text_[pos_] == '.') {
    ++pos_;
    if (!digits()) return Fail(pos_, "invalid number: no digits after '.'");
  }
  if (pos_ < n && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
    ++pos_;
    if (pos_ < n && (text_[pos_] == '+' || text_[pos_] == '-')) ++pos_;
    if (!digits()) return Fail(pos_, "invalid number: no digits in the exponent");
  }
  return Token::kNumber;
}

bool JsonScanner::AsUint64(uint64_t* out) const {
  if (token_ != Token::kNumber) return false;
  uint64_t v = 0;
  for (const char c : raw()) {
    if (!IsDigit(c)) return false;
    const uint64_t d = static_cast<uint64_t>(c - '0');
    if (v > (UINT64_MAX - d) / 10) return false;
    v = v * 10 + d;
  }
  *out = v;
  return true;
}

JsonScanner::Token JsonScanner::ScanString() {
  string_.clear();
  ++pos_;  // opening quote
  while (pos_ < text_.size()) {
    const auto c = static_cast<uint8_t>(text_[pos_]);
    if (c == '"') {
      ++pos_;
      return Token::kString;
    }
    if (c == '\\') {
      if (!ScanEscape()) return Token::kError;
    } else if (c < 0x20) {
      return Fail(pos_, "control character in a string (must be escaped)");
    } else if (c < 0x80) {
      string_ += static_cast<char>(c);
      ++pos_;
    } else if (!ScanUtf8()) {
      return Token::kError;
    }
  }
  return Fail(text_.size(), "unterminated string");
}

bool JsonScanner::Hex4(uint32_t* out) {
  if (text_.size() - pos_ < 4) return false;
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) {
    const char c = text_[pos_ + i];
    const int d = IsDigit(c) ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
    if (d < 0) return false;
    v = v * 16 + static_cast<uint32_t>(d);
  }
  pos_ += 4;
  *out = v;
  return true;
}

bool JsonScanner::ScanEscape() {
  const size_t at = pos_;
  ++pos_;  // backslash
  if (pos_ == text_.size()) return Error(at, "unterminated string");
  const char c = text_[pos_++];
  switch (c) {
    case '"':
    case '\\':
    case '/':
      string_ += c;
      return true;
    case 'b':
      string_ += '\b';
      return true;
    case 'f':
      string_ += '\f';
      return true;
    case 'n':
      string_ += '\n';
      return true;
    case 'r':
      string_ += '\r';
      return true;
    case 't':
      string_ += '\t';
      return true;
    case 'u':
      break;
    default:
      return Error(at, "invalid escape in a string");
  }
  uint32_t cp = 0;
  if (!Hex4(&cp)) return Error(at, "invalid \\u escape in a string");
  if (cp >= 0xDC00 && cp <= 0xDFFF) return Error(at, "unpaired UTF-16 surrogate in a string");
  if (cp >= 0xD800 && cp <= 0xDBFF) {  // a high surrogate must be followed by a low one
    uint32_t lo = 0;
    if (text_.substr(pos_, 2) != "\\u") return Error(at, "unpaired UTF-16 surrogate in a string");
    pos_ += 2;
    if (!Hex4(&lo) || lo < 0xDC00 || lo > 0xDFFF) return Error(at, "unpaired UTF-16 surrogate in a string");
    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
  }
  AppendUtf8(cp, &string_);
  return true;
}

bool JsonScanner::ScanUtf8() {
  const size_t len = Utf8SequenceLength(text_, pos_);
  if (len == 0) return Error(pos_, "invalid UTF-8 in a string");
  string_.append(text_.substr(pos_, len));
  pos_ += len;
  return true;
}

// RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF.
size_t Utf8SequenceLength(std::string_view s, size_t i) {
  const auto lead = static_cast<uint8_t>(s[i]);
  if (lead < 0x80) return 1;
  size_t len = 0;
  uint8_t lo = 0x80, hi = 0xBF;  // range of the second byte
  if (lead >= 0xC2 && lead <= 0xDF) {
    len = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    len = 3;
    if (lead == 0xE0) lo = 0xA0;
    if (lead == 0xED) hi = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    len = 4;
    if (lead == 0xF0) lo = 0x90;
    if (lead == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (s.size() - i < len) return 0;
  for (size_t k = 1; k < len; ++k) {
    const auto b = static_cast<uint8_t>(s[i + k]);
    if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF)) return 0;
  }
  return len;
}

}  // namespace cgdr
