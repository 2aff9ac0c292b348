// The gate in the kernel (docs/SPEC.md 6d): Qwen3-Next's decay and write
// strength from the raw projections, as fla's use_gate_in_kernel and
// use_beta_sigmoid_in_kernel compute them:
//   g    = -exp(A_log) * softplus(a + dt_bias),  softplus(x) = x > 20 ? x : log1p(exp(x))
//   g    = lower_bound * sigmoid(exp(A_log) * (a + dt_bias))  (with a lower bound:
//          fla's KDA gate, docs/SPEC.md 10; A_log absent: exp(A_log) = 1)
//   beta = sigmoid(b) = 1 / (1 + exp(-b))
// KDA's per-channel gate (docs/SPEC.md 10) has one dt_bias per key channel.
// in FP32 on the target's vectors. Each value depends on its inputs alone
// (a tail goes through a padded vector, not a scalar path), so prefill,
// decode and every chunking of a sequence compute the same bits for it.
//
// Per-target code: included once per Highway target.
#if defined(CGDR_KERNELS_GATE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef CGDR_KERNELS_GATE_INL_H_
#undef CGDR_KERNELS_GATE_INL_H_
#else
#define CGDR_KERNELS_GATE_INL_H_
#endif

#include <cstdint>

#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace cgdr {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// One value head's gate constants: exp(A_log[h]) (1 without A_log), dt_bias[h]
// (0 when absent; per channel: dt_bias_row), and the lower bound (0: none).
struct HeadGate {
  float exp_a_log = 0.0f;
  float dt_bias = 0.0f;
  float lower_bound = 0.0f;
  const float* dt_bias_row = nullptr;  // KDA: Dk biases of the head (a copy the caller keeps), else null
};

HWY_INLINE HeadGate MakeHeadGate(float a_log, float dt_bias, float lower_bound = 0.0f, bool has_a_log = true) {
  const hn::ScalableTag<float> d;
  return HeadGate{has_a_log ? hn::GetLane(hn::Exp(d, hn::Set(d, a_log))) : 1.0f, dt_bias, lower_bound};
}

// softplus with torch's threshold: x itself above 20, where log1p(exp(x))
// equals x to FP32 precision.
template <class D>
HWY_INLINE hn::Vec<D> Softplus(D d, hn::Vec<D> x) {
  const auto above = hn::Gt(x, hn::Set(d, 20.0f));
  return hn::IfThenElse(above, x, hn::Log1p(d, hn::Exp(d, hn::IfThenElse(above, hn::Zero(d), x))));
}

template <class D>
HWY_INLINE hn::Vec<D> Sigmoid(D d, hn::Vec<D> x) {
  const auto one = hn::Set(d, 1.0f);
  return hn::Div(one, hn::Add(one, hn::Exp(d, hn::Neg(x))));
}

// x[0, n) = f(x[0, n), y[0, n)) lane by lane (y null: zeros); the tail
// through zero-padded vectors.
template <class Fn>
HWY_INLINE void MapRows(float* HWY_RESTRICT x, const float* HWY_RESTRICT y, int64_t n, const Fn& f) {
  const hn::ScalableTag<float> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(f(d, hn::LoadU(d, x + i), y ? hn::LoadU(d, y + i) : hn::Zero(d)), d, x + i);
  if (i == n) return;
  HWY_ALIGN float tail[hn::MaxLanes(d)] = {};
  HWY_ALIGN float tail_y[hn::MaxLanes(d)] = {};
  for (int64_t j = i; j < n; ++j) {
    tail[j - i] = x[j];
    tail_y[j - i] = y ? y[j] : 0.0f;
  }
  hn::Store(f(d, hn::Load(d, tail), hn::Load(d, tail_y)), d, tail);
  for (int64_t j = i; j < n; ++j) x[j] = tail[j - i];
}

// x[0, n) = f(x[0, n)) lane by lane.
template <class Fn>
HWY_INLINE void MapRow(float* HWY_RESTRICT x, int64_t n, const Fn& f) {
  MapRows(x, nullptr, n, [&f](auto d, auto a, auto) { return f(d, a); });
}

// The log-decay of one lane from the raw gate a and its bias.
template <class D>
HWY_INLINE hn::Vec<D> GateLanes(D d, hn::Vec<D> a, hn::Vec<D> bias, const HeadGate& gate) {
  const auto x = hn::Add(a, bias);
  if (gate.lower_bound != 0.0f) {
    return hn::Mul(hn::Set(d, gate.lower_bound), Sigmoid(d, hn::Mul(hn::Set(d, gate.exp_a_log), x)));
  }
  return hn::Mul(hn::Set(d, -gate.exp_a_log), Softplus(d, x));
}

// x[0, n): the raw gate a in, the log-decay g out (one head's scalar gates).
HWY_INLINE void GateRow(float* HWY_RESTRICT x, int64_t n, HeadGate gate) {
  MapRow(x, n, [gate](auto d, auto a) { return GateLanes(d, a, hn::Set(d, gate.dt_bias), gate); });
}

// x[0, n): one token's raw per-channel gate a in (n = Dk), the log-decays out,
// with gate.dt_bias_row[i] for channel i (KDA, docs/SPEC.md 10). Lane for
// lane the same arithmetic as GateRow.
HWY_INLINE void GateChannels(float* HWY_RESTRICT x, int64_t n, const HeadGate& gate) {
  MapRows(x, gate.dt_bias_row, n, [&gate](auto d, auto a, auto bias) { return GateLanes(d, a, bias, gate); });
}

// x[0, n): the raw b in, beta = sigmoid(b) out.
HWY_INLINE void SigmoidRow(float* HWY_RESTRICT x, int64_t n) {
  MapRow(x, n, [](auto d, auto b) { return Sigmoid(d, b); });
}

}  // namespace HWY_NAMESPACE
}  // namespace cgdr
HWY_AFTER_NAMESPACE();

#endif  // include guard
