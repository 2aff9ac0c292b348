#include "reference/reference.h"

#include <cmath>

#include "core/dtype.h"

namespace cgdr {
namespace {

// Row `row` of a [rows, n] float tensor in FP64, optionally l2-normalised with eps (SPEC 1).
std::vector<double> Row(const TensorView& t, int64_t row, int64_t n, bool l2norm, double eps = 0.0) {
  std::vector<double> r(static_cast<size_t>(n));
  double ss = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    r[i] = LoadAsF32(t.data, t.dtype, row * n + i);
    ss += r[i] * r[i];
  }
  if (l2norm) {
    const double inv = 1.0 / std::sqrt(ss + eps);
    for (double& x : r) x *= inv;
  }
  return r;
}

bool Wanted(const std::vector<int64_t>& heads, int64_t h) {
  if (heads.empty()) return true;
  for (int64_t x : heads) if (x == h) return true;
  return false;
}

// The log-decays of token t, value head h, one per key channel (SPEC 1;
// docs/SPEC.md 6d; KDA's per-channel gate, docs/SPEC.md 10): Dk copies of
// the head's decay unless g or a is per channel.
std::vector<double> Decays(const Inputs& in, const Problem& p, int64_t t, int64_t h) {
  const int64_t per_head = p.per_channel_gate ? p.Dk : 1;
  std::vector<double> g(static_cast<size_t>(p.Dk), 0.0);
  for (int64_t i = 0; i < p.Dk; ++i) {
    const int64_t c = p.per_channel_gate ? i : 0;
    const int64_t at = (t * p.Nv + h) * per_head + c;
    if (in.g.present()) {
      g[i] = LoadAsF32(in.g.data, in.g.dtype, at);
    } else if (in.a.present()) {
      const double dt_bias = in.dt_bias.present() ? LoadAsF32(in.dt_bias.data, in.dt_bias.dtype, h * per_head + c) : 0.0;
      const bool has_a_log = in.A_log.present();
      g[i] = ReferenceGate(LoadAsF32(in.a.data, in.a.dtype, at),
                           has_a_log ? LoadAsF32(in.A_log.data, in.A_log.dtype, h) : 0.0, dt_bias,
                           p.options.gate_lower_bound, has_a_log);
    }
  }
  return g;
}

}  // namespace

double ReferenceGate(double a, double a_log, double dt_bias, double lower_bound, bool has_a_log) {
  const double x = a + dt_bias;
  if (lower_bound != 0.0) return lower_bound * ReferenceSigmoid(has_a_log ? std::exp(a_log) * x : x);
  return -std::exp(a_log) * (x > 20.0 ? x : std::log1p(std::exp(x)));
}

double ReferenceSigmoid(double b) { return 1.0 / (1.0 + std::exp(-b)); }

void ReferenceRun(const Inputs& in, const Problem& p, ReferenceResult* res, const std::vector<int64_t>& heads) {
  const int64_t Dk = p.Dk, Dv = p.Dv, group = p.Nv / p.Nk;
  const bool kv = p.options.state_layout == StateLayout::kKV;
  res->out.assign(static_cast<size_t>(p.T * p.Nv * Dv), 0.0);
  res->final_state.assign(static_cast<size_t>(p.B * p.Nv * Dk * Dv), 0.0);
  res->checkpoint_states.assign(static_cast<size_t>(p.checkpoints * p.Nv * Dk * Dv), 0.0);
  const int64_t every = p.options.checkpoint_every;
  const auto store = [&](std::vector<double>& dst, int64_t base, const std::vector<double>& S) {
    for (int64_t k = 0; k < Dk; ++k)
      for (int64_t v = 0; v < Dv; ++v) dst[base + (kv ? k * Dv + v : v * Dk + k)] = S[k * Dv + v];
  };
  std::vector<double> S(static_cast<size_t>(Dk * Dv));  // S[k * Dv + v]
  int64_t t0 = 0, c0 = 0;
  for (int64_t b = 0; b < p.B; ++b) {
    const int64_t len = p.seq_lens[b];
    for (int64_t h = 0; h < p.Nv; ++h) {
      if (!Wanted(heads, h)) continue;
      const int64_t hk = h / group;
      const int64_t sbase = (b * p.Nv + h) * Dk * Dv;
      const int64_t slot = p.Slot(b), ibase = slot * p.SlotStride() + h * Dk * Dv;
      const bool from_state = in.initial_state.present() && slot >= 0;
      for (int64_t k = 0; k < Dk; ++k)
        for (int64_t v = 0; v < Dv; ++v)
          S[k * Dv + v] = from_state ? LoadAsF32(in.initial_state.data, in.initial_state.dtype,
                                                 ibase + (kv ? k * Dv + v : v * Dk + k))
                                     : 0.0;
      for (int64_t t = t0; t < t0 + len; ++t) {
        const auto q = Row(in.query, t * p.Nk + hk, Dk, p.options.use_qk_l2norm, p.options.qk_l2norm_eps);
        const auto kk = Row(in.key, t * p.Nk + hk, Dk, p.options.use_qk_l2norm, p.options.qk_l2norm_eps);
        const auto v = Row(in.value, t * p.Nv + h, Dv, false);
        const double b_in = LoadAsF32(in.beta.data, in.beta.dtype, t * p.Nv + h);
        const double beta = p.options.use_beta_sigmoid ? ReferenceSigmoid(b_in) : b_in;
        const auto g = Decays(in, p, t, h);
        for (int64_t i = 0; i < Dk; ++i) {
          const double decay = std::exp(g[i]);
          for (int64_t j = 0; j < Dv; ++j) S[i * Dv + j] *= decay;
        }
        for (int64_t j = 0; j < Dv; ++j) {
          double stk = 0.0;
          for (int64_t i = 0; i < Dk; ++i) stk += S[i * Dv + j] * kk[i];
          const double u = beta * (v[j] - stk);
          for (int64_t i = 0; i < Dk; ++i) S[i * Dv + j] += kk[i] * u;
          double o = 0.0;
          for (int64_t i = 0; i < Dk; ++i) o += S[i * Dv + j] * q[i];
          res->out[(t * p.Nv + h) * Dv + j] = p.scale * o;
        }
        const int64_t done = t + 1 - t0;
        if (every > 0 && done % every == 0) store(res->checkpoint_states, ((c0 + done / every - 1) * p.Nv + h) * Dk * Dv, S);
      }
      store(res->final_state, sbase, S);
    }
    t0 += len;
    if (every > 0) c0 += len / every;
  }
}

double RelativeError(const TensorView& x, const std::vector<double>& ref, int64_t Nv, const std::vector<int64_t>& heads) {
  const int64_t n = static_cast<int64_t>(ref.size());
  const int64_t per_head_block = x.numel() > 0 && x.shape[0] > 0 ? n / (x.shape[0] * Nv) : 0;  // inner size
  double num = 0.0, den = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    if (!heads.empty() && per_head_block > 0 && !Wanted(heads, (i / per_head_block) % Nv)) continue;
    const double d = static_cast<double>(LoadAsF32(x.data, x.dtype, i)) - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
  }
  if (den == 0.0) return std::sqrt(num);
  return std::sqrt(num / den);
}

}  // namespace cgdr
