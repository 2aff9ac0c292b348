// Cat(a, b, ...): the arguments streamed into one string, for error messages.
#pragma once

#include <sstream>
#include <string>

namespace cgdr {

template <typename... Args>
std::string Cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

}  // namespace cgdr
