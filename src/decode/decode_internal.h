// Decode internals shared with the tests (not part of the public API).
#pragma once

#include <cstdint>
#include <vector>

namespace cgdr {

// The Highway targets the decode kernels were compiled for that this CPU
// supports, one bit each. Tests force each one
// with hwy::SetSupportedTargetsForTest.
std::vector<int64_t> DecodeTargets();

// load-inl.h's bf16 row conversions (the decode kernels use them per vector
// on bf16 pools, prefill on bf16 rows), dispatched so tests can hold every
// target to core/dtype.h bit for bit.
void DecodeBF16ToF32(const uint16_t* src, int64_t n, float* dst);
void DecodeF32ToBF16(const float* src, int64_t n, uint16_t* dst);

// Tests only: false makes the decode kernels take every row length at run
// time, so a test can hold the unrolled kernels for Dk = 128 (decode.cc
// WithRowLength) to the generic ones bit for bit. Process-wide; true by
// default. Not for use while another thread runs a decode call.
void SetDecodeFixedRowLengthsForTest(bool enabled);

}  // namespace cgdr
