// The device side of the seeds' design (their op_kernel): plan + data ->
// results. Inputs have passed Validate and the plan CheckPlan.
#pragma once

#include <cstdint>

#include "cgdr/plan.hpp"

namespace cgdr {

// Walks the plan's work items on plan.threads threads. Writes `out` and, if
// present, `final_state`; nothing else.
Status Execute(const Plan& plan, const Inputs& in, const Outputs& out);

// SIMD targets compiled into this build (Highway bits) and their names, for
// tests that force each one (hwy::SetSupportedTargetsForTest).
int64_t CompiledTargets();

// Tests: acc[i] = vdpbf16ps lane step(acc[i], a[i], b[i]) for n lanes (n a
// multiple of 16) on the dispatched target; `hw` picks the instruction where
// available, else the emulation.
void Bf16DotPairs(const uint32_t* a, const uint32_t* b, float* acc, int64_t n, bool hw);
// Tests: the hi/lo split (hi = bf16(x), lo = bf16(x - hi)) on the dispatched target.
void Bf16Split(const float* x, int64_t n, uint16_t* hi, uint16_t* lo);
// Tests: c (16 x 16 FP32) += a (16 x 32 bf16, pairs along k) times b (16
// pairs x 16 columns, VNNI), one TDPBF16PS: on the hardware tiles when `hw`
// and usable (AmxHardwareEnabled), else the engine's emulation.
void TileDotForTest(const uint32_t* a, const uint32_t* b, float* c, bool hw);
// Tests: the AMX engine's bf16 packing of 32 floats x: one A row (16 words,
// pairs along k) and one B row (16 words, word n = (x[n], x[16 + n])), hi
// and lo, by VCVTNE2PS2BF16 when `hw` and the CPU has AVX512_BF16 on the
// dispatched target, else by integer arithmetic.
void AmxPackForTest(const float* x, uint32_t* along_hi, uint32_t* along_lo, uint32_t* across_hi, uint32_t* across_lo,
                    bool hw);
// Tests: n floats converted to dtype t as output rows are stored (f16 and
// bf16 round to nearest even) on the dispatched target.
void StoreRowForTest(const float* src, int64_t n, DType t, void* dst);

}  // namespace cgdr
