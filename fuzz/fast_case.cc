// The differential targets' shared pieces (fast_case.h).
#include "fast_case.h"

#include <cmath>

#include "core/cpu_features.h"
#include "core/dtype.h"
#include "hwy/targets.h"

namespace cgdr::fuzz {
namespace {

// A fast generator (splitmix64): MakeCase's normal distribution costs more
// than the run and the reference together at these sizes.
class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed) {}
  double Uniform(double lo, double hi) {  // [lo, hi)
    s_ += 0x9E3779B97F4A7C15ull;
    uint64_t z = s_;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return lo + (hi - lo) * static_cast<double>(z >> 11) * 0x1.0p-53;
  }

 private:
  uint64_t s_;
};

// Rows of n values in [-1, 1), scaled to unit norm when `unit`.
void FillRows(Bytes& buf, DType t, int64_t n, bool unit, Rng& rng) {
  const int64_t total = static_cast<int64_t>(buf.size() / DTypeSize(t));
  std::vector<double> row(static_cast<size_t>(n));
  for (int64_t r = 0; r * n < total; ++r) {
    double ss = 0.0;
    for (double& x : row) {
      x = rng.Uniform(-1.0, 1.0);
      ss += x * x;
    }
    const double inv = unit && ss > 0.0 ? 1.0 / std::sqrt(ss) : 1.0;
    for (int64_t i = 0; i < n; ++i) StoreFromF32(buf.data(), t, r * n + i, static_cast<float>(row[i] * inv));
  }
}

void FillUniform(Bytes& buf, DType t, double lo, double hi, Rng& rng) {
  const int64_t n = static_cast<int64_t>(buf.size() / DTypeSize(t));
  for (int64_t i = 0; i < n; ++i) StoreFromF32(buf.data(), t, i, static_cast<float>(rng.Uniform(lo, hi)));
}

// g of token t, value head h, key channel c (0 for one per head) in FP32:
// given, or the raw gate's formula (docs/SPEC.md 6d.1, 10.2), or 0.
float LogDecay(const Inputs& in, const Problem& p, int64_t t, int64_t h, int64_t c) {
  const int64_t per_head = p.per_channel_gate ? p.Dk : 1;
  const int64_t at = (t * p.Nv + h) * per_head + c;
  if (in.g.present()) return LoadAsF32(in.g.data, in.g.dtype, at);
  if (!in.a.present()) return 0.0f;
  const float bias = in.dt_bias.present() ? LoadAsF32(in.dt_bias.data, in.dt_bias.dtype, h * per_head + c) : 0.0f;
  const float x = LoadAsF32(in.a.data, in.a.dtype, at) + bias;
  const float a_log = in.A_log.present() ? LoadAsF32(in.A_log.data, in.A_log.dtype, h) : 0.0f;
  const float bound = static_cast<float>(p.options.gate_lower_bound);
  if (bound != 0.0f) return bound / (1.0f + std::exp(-(in.A_log.present() ? std::exp(a_log) * x : x)));
  return -std::exp(a_log) * (x > 20.0f ? x : std::log1p(std::exp(x)));
}

}  // namespace

DispatchCap::DispatchCap(ByteReader& r, int lowest_in_256) {
  const std::vector<std::string> targets = UsableTargetNames();  // best first
  if (targets.empty()) return;
  const int b = r.U8();
  const size_t n = targets.size();
  // The lowest for `lowest_in_256` byte values other than 0 and 0xFF, which
  // libFuzzer's mutations write far more often than 1 time in 256.
  const bool lowest = (b ^ 0x5A) < lowest_in_256;
  const size_t pick = n == 1 ? 0 : lowest ? n - 1 : static_cast<size_t>(b) % (n - 1);
  name_ = targets[pick];
  if (pick == 0) return;
  DispatchNoHigherThan(UsableTargetNamed(name_));
  capped_ = true;
}

DispatchCap::~DispatchCap() {
  if (capped_) hwy::SetSupportedTargetsForTest(0);
}

// Read after everything else in the prefill target, so that inputs written
// before the gate's form was drawn keep their meaning. The raw gate takes
// the place of g (and its per-channel shape); the bounds cover fla's KDA
// gate (-5) and a tight one.
GateParams ReadGate(ByteReader& r, CaseSpec* s, Options* o) {
  const uint8_t flags = r.U8();
  GateParams gate;
  s->beta_sigmoid = flags & 1;
  s->raw_gate = s->has_g && (flags & 2);
  if (s->raw_gate) {
    s->gate_lower_bound = r.Pick<double>({0.0, 0.0, -5.0, -0.5});
    s->gate_param_dtype = r.Pick<DType>({DType::kF32, DType::kF32, DType::kF16, DType::kBF16});
    gate.dt_bias = !(flags & 4);
    gate.a_log = s->gate_lower_bound == 0.0 || !(flags & 8);
  }
  o->use_beta_sigmoid = s->beta_sigmoid;
  o->gate_lower_bound = s->gate_lower_bound;
  return gate;
}


Case FastCase(const CaseSpec& spec) {
  Case c;
  c.spec = spec;
  c.seq_lens = spec.lens;
  c.T = 0;
  for (int32_t l : spec.lens) c.T += l;
  const int64_t B = static_cast<int64_t>(spec.lens.size()), T = c.T;
  auto alloc = [](int64_t n, DType t) { return Bytes(static_cast<size_t>(n) * DTypeSize(t), 0); };
  Rng rng(spec.seed);
  c.query = alloc(T * spec.Nk * spec.Dk, spec.dtype);
  c.key = alloc(T * spec.Nk * spec.Dk, spec.dtype);
  c.value = alloc(T * spec.Nv * spec.Dv, spec.dtype);
  c.beta = alloc(T * spec.Nv, spec.dtype);
  FillRows(c.query, spec.dtype, spec.Dk, !spec.use_qk_l2norm, rng);
  FillRows(c.key, spec.dtype, spec.Dk, !spec.use_qk_l2norm, rng);
  FillRows(c.value, spec.dtype, spec.Dv, false, rng);
  FillUniform(c.beta, spec.dtype, spec.beta_sigmoid ? -3.0 : 0.05, spec.beta_sigmoid ? 3.0 : 0.95, rng);
  const int64_t per_head = spec.per_channel_gate ? spec.Dk : 1;  // gates per (token, head)
  if (spec.has_g && !spec.raw_gate) {
    c.g = alloc(T * spec.Nv * per_head, spec.g_dtype);
    FillUniform(c.g, spec.g_dtype, spec.g_min, 0.0, rng);
  }
  if (spec.raw_gate) {  // a + dt_bias in [-4, 0.5], A_log in [-1, 0.5]: decays of 0.2-0.993 a token (bound -5: to e^-5)
    c.a = alloc(T * spec.Nv * per_head, spec.g_dtype);
    c.A_log = alloc(spec.Nv, spec.gate_param_dtype);
    c.dt_bias = alloc(spec.Nv * per_head, spec.gate_param_dtype);
    FillUniform(c.a, spec.g_dtype, -3.0, 0.5, rng);
    FillUniform(c.A_log, spec.gate_param_dtype, -1.0, 0.5, rng);
    FillUniform(c.dt_bias, spec.gate_param_dtype, -1.0, 0.0, rng);
  }
  const int64_t state_n = B * spec.Nv * spec.Dk * spec.Dv;
  if (spec.has_initial_state) {
    c.initial_state = alloc(state_n, spec.state_dtype);
    FillUniform(c.initial_state, spec.state_dtype, -0.5, 0.5, rng);
  }
  c.out = alloc(T * spec.Nv * spec.Dv, spec.dtype);
  if (spec.want_final_state) c.final_state = alloc(state_n, spec.has_initial_state ? spec.state_dtype : spec.dtype);
  return c;
}

Fp32Result Fp32Recurrence(const Inputs& in, const Problem& p, bool token_states, DType state_dtype) {
  const int64_t Dk = p.Dk, Dv = p.Dv, group = p.Nv / p.Nk;
  const bool kv = p.options.state_layout == StateLayout::kKV;
  Fp32Result r;
  r.out.assign(static_cast<size_t>(p.T * p.Nv * Dv), 0.0f);
  r.final_state.assign(static_cast<size_t>(p.B * p.Nv * Dk * Dv), 0.0f);
  if (token_states) r.token_states.assign(static_cast<size_t>(p.T * p.Nv * Dk * Dv), 0.0f);
  std::vector<float> S(static_cast<size_t>(Dk * Dv)), q(static_cast<size_t>(Dk)), k(static_cast<size_t>(Dk));
  auto row = [&](const TensorView& t, int64_t index, std::vector<float>& dst) {
    float ss = 0.0f;
    for (int64_t i = 0; i < Dk; ++i) {
      dst[i] = LoadAsF32(t.data, t.dtype, index * Dk + i);
      ss += dst[i] * dst[i];
    }
    const float inv = p.options.use_qk_l2norm ? 1.0f / std::sqrt(ss + 1e-6f) : 1.0f;
    for (float& x : dst) x *= inv;
  };
  auto store = [&](std::vector<float>& dst, int64_t base) {  // S into a state of the problem's layout
    for (int64_t i = 0; i < Dk; ++i) {
      for (int64_t j = 0; j < Dv; ++j) dst[base + (kv ? i * Dv + j : j * Dk + i)] = S[i * Dv + j];
    }
  };
  int64_t t0 = 0;
  for (int64_t b = 0; b < p.B; ++b) {
    for (int64_t h = 0; h < p.Nv; ++h) {
      const int64_t sbase = (b * p.Nv + h) * Dk * Dv;
      for (int64_t i = 0; i < Dk; ++i) {
        for (int64_t j = 0; j < Dv; ++j) {
          const int64_t at = sbase + (kv ? i * Dv + j : j * Dk + i);
          S[i * Dv + j] = in.initial_state.present() ? LoadAsF32(in.initial_state.data, in.initial_state.dtype, at) : 0.0f;
        }
      }
      for (int64_t t = t0; t < t0 + p.seq_lens[b]; ++t) {
        row(in.query, t * p.Nk + h / group, q);
        row(in.key, t * p.Nk + h / group, k);
        const float b_in = LoadAsF32(in.beta.data, in.beta.dtype, t * p.Nv + h);
        const float beta = p.options.use_beta_sigmoid ? 1.0f / (1.0f + std::exp(-b_in)) : b_in;
        for (int64_t i = 0; i < Dk; ++i) {  // S = Diag(exp(g)) S: one decay per head, or per key channel (KDA)
          const int64_t c = p.per_channel_gate ? i : 0;
          const float decay = std::exp(LogDecay(in, p, t, h, c));
          for (int64_t j = 0; j < Dv; ++j) S[i * Dv + j] *= decay;
        }
        for (int64_t j = 0; j < Dv; ++j) {
          float stk = 0.0f, o = 0.0f;
          for (int64_t i = 0; i < Dk; ++i) stk += S[i * Dv + j] * k[i];
          const float u = beta * (LoadAsF32(in.value.data, in.value.dtype, (t * p.Nv + h) * Dv + j) - stk);
          for (int64_t i = 0; i < Dk; ++i) S[i * Dv + j] += k[i] * u;
          for (int64_t i = 0; i < Dk; ++i) o += S[i * Dv + j] * q[i];
          r.out[(t * p.Nv + h) * Dv + j] = static_cast<float>(p.scale) * o;
        }
        if (state_dtype != DType::kF32) {
          for (float& x : S) x = static_cast<float>(RoundTrip(x, state_dtype));
        }
        if (token_states) store(r.token_states, (t * p.Nv + h) * Dk * Dv);
      }
      store(r.final_state, sbase);
    }
    t0 += p.seq_lens[b];
  }
  return r;
}

}  // namespace cgdr::fuzz
