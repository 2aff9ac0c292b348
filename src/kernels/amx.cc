// Per-thread tile configuration and the peak loop (amx.h).
#include "kernels/amx.h"

namespace cgdr {

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
