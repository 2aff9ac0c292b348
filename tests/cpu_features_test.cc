// core/cpu_features: the CPU named beside every figure (`cgdr bench`,
// `cgdr demo`, the bench scripts). CPUID's signature decoded as Linux
// decodes it, AMD's families and models named by core generation, and this
// machine's description agreeing with /proc/cpuinfo.
#include "core/cpu_features.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>

namespace cgdr {
namespace {

TEST(CpuFeatures, DecodesKnownSignatures) {
  struct Known {
    uint32_t eax;
    int family, model;
  };
  const Known known[] = {
      {0x00B00F21u, 26, 2},     // AMD EPYC 9005 (Zen 5)
      {0x00A10F11u, 25, 0x11},  // AMD EPYC 9004 (Zen 4)
      {0x00A00F11u, 25, 1},     // AMD EPYC 7003 (Zen 3)
      {0x00800F12u, 23, 1},     // AMD EPYC 7001 (Zen 1)
      {0x000806F8u, 6, 0x8F},   // Intel Xeon 4th generation (Sapphire Rapids)
      {0x000A0671u, 6, 0xA7},   // family 6 model 167, as a KVM guest reported an AMX Xeon
  };
  for (const Known& k : known) {
    SCOPED_TRACE(k.eax);
    const CpuSignature s = DecodeCpuSignature(k.eax);
    EXPECT_EQ(s.family, k.family);
    EXPECT_EQ(s.model, k.model);
  }
}

TEST(CpuFeatures, NamesAmdGenerationsAndKeepsBothNumbers) {
  EXPECT_EQ(DescribeCpu("AMD EPYC", true, {26, 2}), "AMD EPYC, Zen 5 (family 26 model 2)");
  EXPECT_EQ(DescribeCpu("AMD EPYC", true, {25, 0x11}), "AMD EPYC, Zen 4 (family 25 model 17)");
  EXPECT_EQ(DescribeCpu("AMD EPYC", true, {25, 0x61}), "AMD EPYC, Zen 4 (family 25 model 97)");
  EXPECT_EQ(DescribeCpu("AMD EPYC", true, {25, 1}), "AMD EPYC, Zen 3 (family 25 model 1)");
  EXPECT_EQ(DescribeCpu("AMD EPYC", true, {25, 0x21}), "AMD EPYC, Zen 3 (family 25 model 33)");
  EXPECT_EQ(DescribeCpu("AMD EPYC 7551 32-Core Processor  ", true, {23, 1}),
            "AMD EPYC 7551 32-Core Processor, Zen (family 23 model 1)");
  EXPECT_EQ(DescribeCpu("AMD EPYC 7B12", true, {23, 0x31}), "AMD EPYC 7B12, Zen 2 (family 23 model 49)");
  // No generation for other vendors or families: the numbers say it.
  EXPECT_EQ(DescribeCpu("    Intel(R) Xeon(R) Processor", false, {6, 0xA7}),
            "Intel(R) Xeon(R) Processor (family 6 model 167)");
  EXPECT_EQ(DescribeCpu("Some CPU", false, {25, 1}), "Some CPU (family 25 model 1)");
  EXPECT_EQ(DescribeCpu("AMD Athlon", true, {16, 2}), "AMD Athlon (family 16 model 2)");
  EXPECT_EQ(DescribeCpu("", false, {0, 0}), "unknown CPU (family 0 model 0)");
}

// The first value of `key` in /proc/cpuinfo, trimmed (a brand string may be
// padded with spaces), or "" where there is none.
std::string CpuInfo(const std::string& key) {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string name = line.substr(0, colon);
    name.erase(name.find_last_not_of(" \t") + 1);
    if (name != key) continue;
    const size_t first = line.find_first_not_of(" \t", colon + 1), last = line.find_last_not_of(" \t");
    return first == std::string::npos ? std::string() : line.substr(first, last - first + 1);
  }
  return "";
}

TEST(CpuFeatures, DescriptionAgreesWithProcCpuinfo) {
#if defined(__x86_64__) || defined(__i386__)
  const std::string family = CpuInfo("cpu family"), model = CpuInfo("model"), name = CpuInfo("model name");
  if (family.empty() || model.empty() || name.empty()) GTEST_SKIP() << "no /proc/cpuinfo";
  const std::string d = CpuDescription();
  EXPECT_NE(d.find("(family " + family + " model " + model + ")"), std::string::npos) << d;
  EXPECT_EQ(d.rfind(name, 0), 0u) << d << " does not start with " << name;
  EXPECT_EQ(CpuIsAmd(), CpuInfo("vendor_id") == "AuthenticAMD");
#else
  GTEST_SKIP() << "CPUID is x86's";
#endif
}

}  // namespace
}  // namespace cgdr
