// CPUID, XCR0, Linux's AMX permission, Highway's target detection and sysfs's
// cache sizes (cpu_features.h).
#include "core/cpu_features.h"

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "cgdr/cgdr.hpp"
#include "hwy/targets.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#if defined(__x86_64__) && defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace cgdr {

int64_t UsableTargets() { return HWY_TARGETS & hwy::SupportedTargets(); }

std::string ActiveTarget() {
  const int64_t usable = UsableTargets();
  return usable ? hwy::TargetName(usable & -usable) : "none";
}

namespace {

std::string LowerCase(std::string s) {
  for (char& c : s) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  return s;
}

}  // namespace

std::vector<std::string> UsableTargetNames() {
  std::vector<std::string> names;
  // Highway's bits: the lower the bit, the better the target.
  for (int64_t left = UsableTargets(); left != 0; left &= left - 1) {
    names.push_back(LowerCase(hwy::TargetName(left & -left)));
  }
  return names;
}

int64_t UsableTargetNamed(const std::string& name) {
  for (int64_t left = UsableTargets(); left != 0; left &= left - 1) {
    const int64_t bit = left & -left;
    if (LowerCase(hwy::TargetName(bit)) == LowerCase(name)) return bit;
  }
  return 0;
}

void DispatchNoHigherThan(int64_t target) {
  // Not hwy::DisableTargets: in Highway 1.0.3 the next SupportedTargets()
  // (the planner asks it on every call) hands dispatch the unmasked set
  // again, so the kernels ran AVX3 while the plan named AVX2. The mock
  // holds.
  hwy::SetSupportedTargetsForTest(UsableTargets() & ~(target - 1));
}

bool CpuIsAmd() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool amd = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid(0, &a, &b, &c, &d)) return false;
    return b == 0x68747541u && d == 0x69746e65u && c == 0x444d4163u;  // "Auth" "enti" "cAMD"
  }();
  return amd;
#else
  return false;
#endif
}

namespace {

std::atomic<int> g_bf16_hw_mode{-1};
std::atomic<int> g_amx_mode{-1};

bool CpuHasAvx512Bf16() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool has = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid_count(7, 1, &a, &b, &c, &d)) return false;
    return (a & (1u << 5)) != 0;  // CPUID.(EAX=7,ECX=1):EAX[5] AVX512_BF16
  }();
  return has;
#else
  return false;
#endif
}

#if defined(__x86_64__)
uint64_t ReadXcr0() {
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}

AmxSupport DetectAmx() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return {false, "no AMX (CPUID leaf 7 absent)"};
  const bool tile = (d >> 24) & 1u, bf16 = (d >> 22) & 1u;
  if (!tile || !bf16) return {false, "no AMX-TILE/AMX-BF16 (CPUID)"};
  if (!__get_cpuid(1, &a, &b, &c, &d) || !((c >> 27) & 1u)) return {false, "AMX present but no OSXSAVE"};
  constexpr uint64_t kTileState = (1ull << 17) | (1ull << 18);  // XTILECFG, XTILEDATA
  if ((ReadXcr0() & kTileState) != kTileState) return {false, "AMX present but tile state not enabled by the OS (XCR0)"};
#if defined(__linux__)
  // Since Linux 5.16 tile data is off until the process asks (the first tile
  // instruction would raise SIGILL). The permission holds for every thread.
  constexpr long kArchReqXcompPerm = 0x1023, kArchGetXcompPerm = 0x1022, kXfeatureXtiledata = 18;
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0) {
    return {false, "AMX present but the kernel refused tile data (arch_prctl ARCH_REQ_XCOMP_PERM)"};
  }
  unsigned long perm = 0;
  if (syscall(SYS_arch_prctl, kArchGetXcompPerm, &perm) != 0 || !((perm >> kXfeatureXtiledata) & 1u)) {
    return {false, "AMX present but tile data not permitted (arch_prctl ARCH_GET_XCOMP_PERM)"};
  }
#endif
  return {true, "AMX-TILE and AMX-BF16 (CPUID), tile state enabled (XCR0), tile data permitted"};
}
#else
AmxSupport DetectAmx() { return {false, "no AMX (not x86-64)"}; }
#endif

}  // namespace

bool Bf16HardwareEnabled() {
  const int mode = g_bf16_hw_mode.load(std::memory_order_relaxed);
  return mode != 0 && CpuHasAvx512Bf16();
}

void SetBf16HardwareForTest(int mode) { g_bf16_hw_mode.store(mode, std::memory_order_relaxed); }

const AmxSupport& AmxHardware() {
  static const AmxSupport support = DetectAmx();
  return support;
}

bool AmxHardwareEnabled() { return g_amx_mode.load(std::memory_order_relaxed) != 0 && AmxHardware().usable; }

void SetAmxHardwareForTest(int mode) { g_amx_mode.store(mode, std::memory_order_relaxed); }

CpuSignature DecodeCpuSignature(uint32_t eax) {
  const int base_family = static_cast<int>((eax >> 8) & 0xF), base_model = static_cast<int>((eax >> 4) & 0xF);
  CpuSignature s;
  s.family = base_family == 0xF ? base_family + static_cast<int>((eax >> 20) & 0xFF) : base_family;
  s.model = base_family == 6 || base_family == 0xF ? base_model | static_cast<int>((eax >> 16) & 0xF) << 4 : base_model;
  return s;
}

namespace {

// AMD's family and model ranges per core generation (AMD's revision guides;
// the ones cgdr has been measured on: Zen 1, 3, 4, 5).
const char* ZenGeneration(CpuSignature s) {
  if (s.family == 0x17) return s.model >= 0x30 ? "Zen 2" : "Zen";
  if (s.family == 0x19) {
    const bool zen4 = (s.model >= 0x10 && s.model < 0x20) || (s.model >= 0x60 && s.model < 0x80) ||
                      (s.model >= 0xA0 && s.model < 0xB0);
    return zen4 ? "Zen 4" : "Zen 3";
  }
  if (s.family == 0x1A) return "Zen 5";
  return nullptr;
}

}  // namespace

std::string DescribeCpu(const std::string& brand, bool amd, CpuSignature sig) {
  // The brand string is space-padded (on either side, by vendor).
  const size_t first = brand.find_first_not_of(' '), last = brand.find_last_not_of(' ');
  std::string out = first == std::string::npos ? "unknown CPU" : brand.substr(first, last - first + 1);
  const char* zen = amd ? ZenGeneration(sig) : nullptr;
  if (zen) out += std::string(", ") + zen;
  return out + " (family " + std::to_string(sig.family) + " model " + std::to_string(sig.model) + ")";
}

std::string CpuDescription() {
#if defined(__x86_64__) || defined(__i386__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  std::string brand;
  if (__get_cpuid(0x80000000u, &a, &b, &c, &d) && a >= 0x80000004u) {
    for (unsigned leaf = 0x80000002u; leaf <= 0x80000004u; ++leaf) {
      __get_cpuid(leaf, &a, &b, &c, &d);
      for (unsigned reg : {a, b, c, d}) {
        for (int byte = 0; byte < 4; ++byte) {
          const char ch = static_cast<char>((reg >> (8 * byte)) & 0xFF);
          if (ch != '\0') brand += ch;
        }
      }
    }
  }
  if (!__get_cpuid(1, &a, &b, &c, &d)) a = 0;
  return DescribeCpu(brand, CpuIsAmd(), DecodeCpuSignature(a));
#else
  return "unknown CPU (not x86)";
#endif
}

int64_t L2CacheBytes() {
  namespace fs = std::filesystem;
  for (int i = 0; i < 8; ++i) {
    const fs::path dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i);
    std::ifstream level(dir / "level"), type(dir / "type"), size(dir / "size");
    int lv = 0;
    std::string ty, sz;
    if (!(level >> lv) || !(type >> ty) || !(size >> sz)) continue;
    if (lv != 2 || ty == "Instruction") continue;
    int64_t bytes = std::atoll(sz.c_str());
    if (!sz.empty() && (sz.back() == 'K' || sz.back() == 'k')) bytes <<= 10;
    if (!sz.empty() && sz.back() == 'M') bytes <<= 20;
    if (bytes > 0) return bytes;
  }
  return 0;
}

}  // namespace cgdr
