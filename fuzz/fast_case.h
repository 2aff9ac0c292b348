// What the two differential targets (differential_target.cc: prefill;
// decode_differential_target.cc: the decode step and its token axis) share:
// the gate's form read from the bytes, a problem's tensors filled fast, and
// the plain FP32 recurrence that says how much FP32 itself loses on them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cgdr/cgdr.hpp"
#include "core/synthetic.h"
#include "fuzz_common.h"

namespace cgdr::fuzz {

// Which of the raw gate's optional parameters the run passes (docs/SPEC.md
// 6d.1: dt_bias may be absent; A_log only where the gate is bounded).
struct GateParams {
  bool a_log = true, dt_bias = true;
};

// The gate's form (g as given, or the raw gate a with or without A_log,
// dt_bias and a lower bound, its parameters in any float dtype) and beta's
// (as given or through the sigmoid) into `s` and `o`. An exhausted reader
// gives g and beta as given.
GateParams ReadGate(ByteReader& r, CaseSpec* s, Options* o);

// The SIMD target the calls dispatch to while this object lives, read from
// one byte, so every compiled kernel meets the fuzzer on one machine: 0 (and
// an exhausted reader) leaves the best this CPU runs; `lowest_in_256` of the
// values (never 0 or 0xFF) pick the lowest usable target (on x86 the scalar
// one: under ASan its chunked prefill runs ~40x slower than AVX3, its decode
// step ~2x), the others the usable targets above it in turn.
class DispatchCap {
 public:
  DispatchCap(ByteReader& r, int lowest_in_256);
  ~DispatchCap();
  DispatchCap(const DispatchCap&) = delete;
  DispatchCap& operator=(const DispatchCap&) = delete;
  const std::string& name() const { return name_; }

 private:
  bool capped_ = false;
  std::string name_;
};

// MakeCase's buffers (same layout, same well-conditioned ranges: unit q, k
// rows unless l2norm, beta in [0.05, 0.95] or logits in [-3, 3], g in
// [g_min, 0] or the raw gate's, state in [-0.5, 0.5]) filled by a fast
// generator: MakeCase's normal distribution costs more than the run and the
// reference together at the fuzzers' sizes.
Case FastCase(const CaseSpec& spec);

// SPEC 1 token by token in plain FP32: what FP32 arithmetic itself loses on
// this input. Where q.k or S^T q cancel (tiny problems: one token, one head),
// even this exact-order recurrence is far from FP64, and so may the kernel be
// without any fault; the targets' bounds grant that much on top of SPEC 6.
// `state_dtype` other than f32: the state is rounded to it after every token,
// as the decode step's token axis does on a 16-bit pool (K single steps, each
// storing its state); that rounding, amplified where S^T q cancels, is then
// part of what this recurrence loses.
struct Fp32Result {
  std::vector<float> out, final_state;
  std::vector<float> token_states;  // [T, Nv, ...]: the state after every token, when asked for
};
Fp32Result Fp32Recurrence(const Inputs& in, const Problem& p, bool token_states = false,
                          DType state_dtype = DType::kF32);

}  // namespace cgdr::fuzz
