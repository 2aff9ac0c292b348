// Flag parsing shared by the CLI subcommands: "--name value", "--name=value"
// or a bare "--switch". Unknown flags, repeats and stray words are errors,
// never silently ignored.
#pragma once

#include <charconv>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "cgdr/cgdr.hpp"

namespace cgdr::cli {

// The first error of a chain of steps.
#define CGDR_CLI_TRY(expr)     \
  do {                         \
    const Status st_ = (expr); \
    if (!st_.ok()) return st_; \
  } while (0)

// The flags a command accepts: `valued` ones take a value, `switches` do not.
using FlagList = std::vector<const char*>;

class Args {
 public:
  // --help / -h is always a switch.
  Status Parse(const char* cmd, int argc, char** argv, const FlagList& valued, const FlagList& switches) {
    cmd_ = cmd;
    for (int i = 0; i < argc; ++i) {
      std::string arg = argv[i], value;
      bool inline_value = false;
      if (arg == "-h") arg = "--help";
      if (const auto eq = arg.find('='); arg.rfind("--", 0) == 0 && eq != std::string::npos) {
        value = arg.substr(eq + 1);
        arg.resize(eq);
        inline_value = true;
      }
      const bool takes_value = Contains(valued, arg);
      if (!takes_value && !Contains(switches, arg) && arg != "--help") {
        return Status::Invalid(Cat(arg.rfind("-", 0) == 0 ? "unknown flag '" : "unexpected argument '", argv[i],
                                   "' for 'cgdr ", cmd, "' (try 'cgdr ", cmd, " --help')"));
      }
      if (values_.count(arg)) return Status::Invalid(Cat("flag ", arg, " given twice"));
      if (!takes_value && inline_value) return Status::Invalid(Cat("flag ", arg, " takes no value"));
      if (takes_value && !inline_value) {
        if (i + 1 >= argc) return Status::Invalid(Cat("flag ", arg, " needs a value"));
        value = argv[++i];
      }
      values_[arg] = value;
    }
    return Status::Ok();
  }

  bool Has(const std::string& flag) const { return values_.count(flag) != 0; }
  std::string Get(const std::string& flag, const std::string& def = "") const {
    const auto it = values_.find(flag);
    return it == values_.end() ? def : it->second;
  }
  Status Require(const std::string& flag, std::string* out) const {
    if (!Has(flag) || Get(flag).empty())
      return Status::Invalid(Cat("'cgdr ", cmd_, "' needs ", flag, " (try 'cgdr ", cmd_, " --help')"));
    *out = Get(flag);
    return Status::Ok();
  }
  // An integer in [lo, hi]; `def` when the flag is absent.
  Status Int(const std::string& flag, int64_t lo, int64_t hi, int64_t def, int64_t* out) const {
    if (!Has(flag)) {
      *out = def;
      return Status::Ok();
    }
    return ParseInt(flag, Get(flag), lo, hi, out);
  }
  // A comma-separated list of integers in [lo, hi], e.g. --lens 3,0,5.
  Status IntList(const std::string& flag, int64_t lo, int64_t hi, std::vector<int64_t>* out) const {
    out->clear();
    const std::string s = Get(flag);
    size_t pos = 0;
    while (true) {
      const size_t comma = s.find(',', pos);
      int64_t v = 0;
      Status st =
          ParseInt(flag, s.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos), lo, hi, &v);
      if (!st.ok()) return st;
      out->push_back(v);
      if (comma == std::string::npos) return Status::Ok();
      pos = comma + 1;
    }
  }

  static Status ParseInt(const std::string& flag, const std::string& s, int64_t lo, int64_t hi, int64_t* out) {
    int64_t v = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (s.empty() || ec != std::errc() || end != s.data() + s.size() || v < lo || v > hi) {
      return Status::Invalid(Cat(flag, ": expected an integer in [", lo, ", ", hi, "], got '", s, "'"));
    }
    *out = v;
    return Status::Ok();
  }

  template <typename... T>
  static std::string Cat(const T&... parts) {
    std::string s;
    (Append(&s, parts), ...);
    return s;
  }

 private:
  static void Append(std::string* s, const std::string& x) { *s += x; }
  static void Append(std::string* s, const char* x) { *s += x; }
  static void Append(std::string* s, int64_t x) { *s += std::to_string(x); }
  static bool Contains(const FlagList& list, const std::string& s) {
    for (const char* x : list) {
      if (s == x) return true;
    }
    return false;
  }

  std::string cmd_;
  std::map<std::string, std::string> values_;
};

}  // namespace cgdr::cli
