// The NPU's precision profile computed the way the NPU kernel computes it
// (docs/golden.md): SPEC 4's chunked formulation with C = 64, the seeds'
// association (Kcd = A diag(e^G) Kb, U = A Vb, Vnew = U - Kcd S), every Cube
// product on operands rounded to the profile's 16-bit format with FP32
// accumulation, the vector-unit steps (decays, masks, the inverse, the
// combinations) in FP32, the state FP32 between chunks and rounded to its
// dtype once. Blocked per chunk, threaded over (sequence, value head): the
// result does not depend on the thread count.
//
// The library's kernels have bf16 operands (Precision::kBf16) but not fp16,
// and associate Vnew differently; this is the benchmark engine for fp16
// operands and a cross-check of the kernels' bf16 profile.
#pragma once

#include "cgdr/cgdr.hpp"

namespace cgdr::golden {

enum class Operands : uint8_t;  // golden.h

// `in` must have passed Validate into `p`; `out` has out [T, Nv, Dv] in
// query's dtype and (optionally) final_state in the state dtype.
Status Emulate(const Inputs& in, const Problem& p, Operands operands, const Outputs& out);

}  // namespace cgdr::golden
