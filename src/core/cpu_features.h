// What this CPU and its OS let the process run: the SIMD targets dispatch may
// pick, AVX512_BF16, AMX, the L2 size. Facts about the machine, asked here
// alone, so that the planner, the kernels, `cgdr bench` and the tests read
// the same answers (and the tests can turn a feature off in one place).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cgdr/cgdr.hpp"  // ActiveTarget(), CpuDescription(): the public ones

namespace cgdr {

// The Highway targets compiled into the library (HWY_TARGETS) that this CPU
// runs, as Highway's bits (the lowest set bit is the one dispatch picks).
// hwy::SetSupportedTargetsForTest narrows it. ActiveTarget() (cgdr.hpp)
// names the one dispatch picks.
int64_t UsableTargets();

// UsableTargets() by Highway's names in lower case ("avx3", "avx2", "sse4",
// ...), best first.
std::vector<std::string> UsableTargetNames();

// The usable target (Highway's bit) of that name, in any case; 0 for a name
// that is not one of UsableTargetNames().
int64_t UsableTargetNamed(const std::string& name);

// Turns off every usable target better than `target` (a bit
// UsableTargetNamed gave), so that dispatch picks it for the rest of the
// process: `cgdr bench --target avx2` times the AVX2 kernels on an AVX-512
// CPU.
void DispatchNoHigherThan(int64_t target);

// bf16 precision modes: whether the products run on vdpbf16ps (the CPU has
// AVX512_BF16 and the AVX3 target runs) rather than its exact emulation.
bool Bf16HardwareEnabled();
// Tests: -1 automatic (default), 0 force the emulation, 1 hardware if present.
void SetBf16HardwareForTest(int mode);

// Whether the AMX tiles are usable, and why (or why not), for the plan's
// `why`: CPUID AMX-TILE and AMX-BF16, the OS enabling tile state in XCR0
// (bits 17, 18), and on Linux the per-process permission for tile data
// (arch_prctl ARCH_REQ_XCOMP_PERM), requested once, on first use.
struct AmxSupport {
  bool usable = false;
  std::string why;
};
const AmxSupport& AmxHardware();

// AmxHardware().usable, unless a test turned the hardware off.
bool AmxHardwareEnabled();
// Tests: -1 automatic (default), 0 hardware off (the plan falls back to the
// vector path or the emulation), 1 automatic too.
void SetAmxHardwareForTest(int mode);

// Whether CPUID names the vendor AMD ("AuthenticAMD"). The planner's
// prefetch hint depends on it (Plan::prefetch_into_l1).
bool CpuIsAmd();

// CPUID leaf 1's EAX as the family and model Linux's /proc/cpuinfo shows
// ("cpu family", "model"): the extended family added where the base is 15,
// the extended model on top where the family is 6 or above 15.
struct CpuSignature {
  int family = 0, model = 0;
};
CpuSignature DecodeCpuSignature(uint32_t eax);

// CpuDescription() (cgdr.hpp) from its parts (the tests' known signatures).
std::string DescribeCpu(const std::string& brand, bool amd, CpuSignature sig);

// The size of CPU 0's level-2 data (or unified) cache in bytes, as Linux's
// sysfs gives it; 0 where it does not say.
int64_t L2CacheBytes();

}  // namespace cgdr
