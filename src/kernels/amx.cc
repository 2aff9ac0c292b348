// AMX detection, permission and per-thread tile configuration (amx.h).
#include "kernels/amx.h"

#include <atomic>

#if defined(__x86_64__)
#include <cpuid.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif
#endif

namespace cgdr {
namespace {

std::atomic<int> g_amx_mode{-1};

#if defined(__x86_64__)
uint64_t ReadXcr0() {
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}

AmxSupport Detect() {
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
AmxSupport Detect() { return {false, "no AMX (not x86-64)"}; }
#endif

}  // namespace

const AmxSupport& AmxHardware() {
  static const AmxSupport support = Detect();
  return support;
}

bool AmxHardwareEnabled() { return g_amx_mode.load(std::memory_order_relaxed) != 0 && AmxHardware().usable; }

void SetAmxHardwareForTest(int mode) { g_amx_mode.store(mode, std::memory_order_relaxed); }

void ConfigureTilesOnThisThread() {
#if defined(__x86_64__)
  static const TileConfig config;
  __asm__ volatile("ldtilecfg %0" ::"m"(config));
#endif
}

void ReleaseTilesOnThisThread() {
#if defined(__x86_64__)
  __asm__ volatile("tilerelease" ::: "memory");
#endif
}

float AmxDotLoop(int64_t iters) {
#if defined(__x86_64__)
  alignas(64) static const uint16_t kOperand[kTileWords * 2] = {};  // zeros: no overflow, no denormal
  alignas(64) float c[kTileWords];
  ConfigureTilesOnThisThread();
  __asm__ volatile(
      "tilezero %%tmm0\n\ttilezero %%tmm1\n\ttilezero %%tmm2\n\ttilezero %%tmm3\n\t"
      "tileloadd (%0,%1,1), %%tmm4\n\ttileloadd (%0,%1,1), %%tmm5\n\t"
      "tileloadd (%0,%1,1), %%tmm6\n\ttileloadd (%0,%1,1), %%tmm7" ::"r"(kOperand), "r"(kTileBytes)
      : "memory");
  for (int64_t i = 0; i < iters; ++i) {
    __asm__ volatile(
        "tdpbf16ps %%tmm6, %%tmm4, %%tmm0\n\ttdpbf16ps %%tmm7, %%tmm4, %%tmm1\n\t"
        "tdpbf16ps %%tmm6, %%tmm5, %%tmm2\n\ttdpbf16ps %%tmm7, %%tmm5, %%tmm3" ::);
  }
  __asm__ volatile("tilestored %%tmm0, (%0,%1,1)" ::"r"(c), "r"(kTileBytes) : "memory");
  ReleaseTilesOnThisThread();
  return c[0] + static_cast<float>(iters & 1);
#else
  return static_cast<float>(iters);
#endif
}

}  // namespace cgdr
