// The judge: SPEC section 1 token by token in FP64, deliberately simple.
// Used by tests, the demo and the bench's error column; never by Run().
#pragma once

#include <cstdint>
#include <vector>

#include "cgdr/cgdr.hpp"

namespace cgdr {

struct ReferenceResult {
  std::vector<double> out;          // [T, Nv, Dv]
  std::vector<double> final_state;  // [B, Nv, ...] in the problem's state layout, one per sequence (pools too)
  std::vector<double> checkpoint_states;  // [p.checkpoints, Nv, ...] (docs/SPEC.md 6d)
};

// The FP64 formulas of the serving inputs (docs/SPEC.md 6d): the log-decay
// from the raw gate, g = -exp(A_log) * softplus(a + dt_bias) (softplus with
// torch's threshold 20), or with a lower bound (docs/SPEC.md 10)
// g = lower_bound * sigmoid(exp(A_log) * (a + dt_bias)) (without A_log:
// sigmoid(a + dt_bias)); and beta = sigmoid(b).
double ReferenceGate(double a, double a_log, double dt_bias, double lower_bound = 0.0, bool has_a_log = true);
double ReferenceSigmoid(double b);

// Runs the recurrence (with a per-channel decay when p.per_channel_gate:
// KDA, docs/SPEC.md 10) for the value heads listed in `heads` (all when empty);
// entries of other heads stay 0. `in` must have passed Validate into `p`.
// Serving inputs are honoured: the raw gate, beta sigmoid, state pools (a
// sequence starts from its slot of initial_state, or zeros) and checkpoints.
void ReferenceRun(const Inputs& in, const Problem& p, ReferenceResult* result, const std::vector<int64_t>& heads = {});

// ||x - ref||_F / ||ref||_F over the entries of the listed heads (all if empty),
// x read from a tensor of any float dtype with the same layout as ref.
// `head_stride_outer`/`inner` describe where the head index sits: the tensor is
// viewed as [outer, Nv, inner].
double RelativeError(const TensorView& x, const std::vector<double>& ref, int64_t Nv, const std::vector<int64_t>& heads = {});

}  // namespace cgdr
