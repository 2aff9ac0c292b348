// A pull tokenizer for JSON text (RFC 8259), for headers read from untrusted
// files: one pass, constant stack, time linear in the text. It only splits
// and checks tokens (strings decoded and held to valid UTF-8, numbers to the
// JSON grammar); the caller's parser gives them meaning, so nothing here
// recurses, builds a tree or converts a number to floating point.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace cgdr {

class JsonScanner {
 public:
  enum class Token {
    kEnd,  // end of the text (after trailing whitespace)
    kBeginObject,
    kEndObject,
    kBeginArray,
    kEndArray,
    kColon,
    kComma,
    kString,
    kNumber,
    kTrue,
    kFalse,
    kNull,
    kError,  // error() says what; the scanner stays on kError
  };

  explicit JsonScanner(std::string_view text) : text_(text) {}

  Token Next();
  Token token() const { return token_; }
  // Byte offset of the current token's first byte (of the bad byte on kError).
  size_t offset() const { return start_; }
  // The current token's bytes as they are in the text (a string with its quotes).
  std::string_view raw() const { return text_.substr(start_, pos_ - start_); }
  // kString: the decoded value (escapes resolved; always valid UTF-8).
  const std::string& string_value() const { return string_; }
  // kNumber: the value if the token is a plain integer 0 <= x <= UINT64_MAX
  // (no sign, fraction or exponent); false otherwise.
  bool AsUint64(uint64_t* out) const;
  // kError: what is wrong, e.g. "invalid UTF-8 in a string".
  const std::string& error() const { return error_; }

 private:
  Token Fail(size_t at, const char* what);
  bool Error(size_t at, const char* what);  // Fail, for the bool-returning helpers
  Token ScanString();
  Token ScanNumber();
  Token ScanLiteral(std::string_view word, Token t);
  bool ScanEscape();       // after a backslash; appends to string_
  bool ScanUtf8();         // a multi-byte sequence; appends it
  bool Hex4(uint32_t* out);

  std::string_view text_;
  size_t pos_ = 0, start_ = 0;
  Token token_ = Token::kEnd;
  std::string string_;
  std::string error_;
};

// Length of the valid UTF-8 sequence starting at s[i] (1 for ASCII), or 0 if
// the bytes there are not one (RFC 3629: no overlong forms, no surrogates,
// nothing above U+10FFFF).
size_t Utf8SequenceLength(std::string_view s, size_t i);

// "a string", "a number", "an object", "an array", "true", "false", "null"
// (for "expected X, got Y" messages).
const char* JsonTokenKind(JsonScanner::Token t);

}  // namespace cgdr
