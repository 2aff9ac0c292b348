// AdviseHugePages (core/alloc.h): the advice covers only the whole 4 KiB
// pages inside a buffer, so a range that holds none is refused without a
// system call, and a fresh mapping's pages take it (its VmFlags then carry
// "hg", as /proc/self/smaps shows; the Python tests check the same for the
// outputs cgdr allocates).
#include <sys/mman.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>

#include "core/alloc.h"

namespace cgdr {
namespace {

bool TransparentHugePagesOnRequest() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string modes;
  return std::getline(f, modes) && modes.find("[never]") == std::string::npos;
}

// The VmFlags line of the mapping that holds `address`, or "" if none does.
std::string VmFlagsAt(uintptr_t address) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    std::istringstream words(line);
    std::string head;
    words >> head;
    if (!head.empty() && head.back() != ':') {  // "lo-hi perms ...": a mapping starts
      const size_t dash = head.find('-');
      const uintptr_t lo = std::stoull(head.substr(0, dash), nullptr, 16);
      const uintptr_t hi = std::stoull(head.substr(dash + 1), nullptr, 16);
      inside = lo <= address && address < hi;
    } else if (inside && head == "VmFlags:") {
      return line;
    }
  }
  return "";
}

TEST(AdviseHugePages, RefusesARangeWithoutAWholePage) {
  alignas(4096) static char buffer[2 * 4096];
  EXPECT_FALSE(AdviseHugePages(buffer + 1, 4096));  // straddles two pages, holds neither whole
  EXPECT_FALSE(AdviseHugePages(buffer, 4095));
  EXPECT_FALSE(AdviseHugePages(buffer, 0));
}

TEST(AdviseHugePages, AFreshMappingTakesTheAdvice) {
  if (!TransparentHugePagesOnRequest()) GTEST_SKIP() << "the kernel has no transparent huge pages";
  const size_t bytes = size_t{8} << 20;
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  const uintptr_t inner = reinterpret_cast<uintptr_t>(p) + 8192;
  EXPECT_EQ(VmFlagsAt(inner).find(" hg"), std::string::npos) << "advised before the call";
  // From 16 bytes in, as an allocator's header leaves it: the first page is
  // not whole, and the advice starts at the next one.
  EXPECT_TRUE(AdviseHugePages(static_cast<char*>(p) + 16, bytes - 16));
  EXPECT_NE(VmFlagsAt(inner).find(" hg"), std::string::npos) << VmFlagsAt(inner);
  EXPECT_EQ(VmFlagsAt(reinterpret_cast<uintptr_t>(p)).find(" hg"), std::string::npos) << "the partial first page";
  munmap(p, bytes);
}

}  // namespace
}  // namespace cgdr
