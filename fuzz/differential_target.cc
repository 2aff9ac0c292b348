// Fuzz target (c): differential. The bytes pick a small, valid, well-
// conditioned problem (SPEC 6: q, k unit rows or l2norm, beta in (0,1),
// g <= 0) and the run options (any formulation, threads, V tile, Dk bucket,
// layout, dtypes), then the gate's form (docs/SPEC.md 6d.1, 10.2: g given,
// or the raw gate a with or without A_log, dt_bias and a lower bound; beta
// as given or through the sigmoid); cgdr::Run must accept it and agree with
// the FP64 reference within the SPEC 6 limits, out and final_state alike.
#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "cgdr/cgdr.hpp"
#include "core/dtype.h"
#include "core/synthetic.h"
#include "fuzz_common.h"
#include "fuzz_targets.h"
#include "reference/reference.h"

namespace cgdr::fuzz {
namespace {

constexpr int64_t kMaxWork = 1 << 15;  // T * Nv * Dk * Dv: keeps one input well under a millisecond

// SPEC 6: 2e-5 in f32; for 16-bit outputs twice the rounding error of the
// FP64 answer itself, plus the f32 allowance (see also CheckError). The
// precision modes' own allowances replace the f32 one (docs/SPEC.md 6c):
// bf16x3 / bf16x4 twice it, 2e-4 where Dk <= 2 (keys parallel or nearly: the
// chunked form cancels and 16-bit operands show it); bf16 3e-2 for any input.
double Limit(const std::vector<double>& ref, DType t, Precision precision, int64_t Dk) {
  const bool parallel_keys = Dk <= 2;
  double f32 = 2e-5;
  if (precision == Precision::kBf16) f32 = 3e-2;
  if (precision == Precision::kBf16x3 || precision == Precision::kBf16x4 || precision == Precision::kAuto) {
    f32 = parallel_keys ? 2e-4 : 4e-5;
  }
  return t == DType::kF32 ? f32 : 2.0 * RoundingError(ref, t) + f32;
}

// Which of the raw gate's optional parameters the run passes (docs/SPEC.md
// 6d.1: dt_bias may be absent; A_log only where the gate is bounded).
struct GateParams {
  bool a_log = true, dt_bias = true;
};

std::string Describe(const CaseSpec& s, const GateParams& gate, const Options& o) {
  std::ostringstream os;
  os << "Nk=" << s.Nk << " Nv=" << s.Nv << " Dk=" << s.Dk << " Dv=" << s.Dv << " lens=";
  for (int32_t l : s.lens) os << l << ",";
  os << " dtype=" << DTypeName(s.dtype) << " g=" << (s.has_g ? DTypeName(s.g_dtype) : "none")
     << (s.per_channel_gate ? " per-channel" : "") << " g_min=" << s.g_min;
  if (s.raw_gate) {
    os << " raw_gate=" << DTypeName(s.gate_param_dtype) << (gate.a_log ? "+A_log" : "") << (gate.dt_bias ? "+dt_bias" : "")
       << " lower_bound=" << s.gate_lower_bound;
  }
  os << " beta_sigmoid=" << s.beta_sigmoid
     << " state=" << (s.has_initial_state ? DTypeName(s.state_dtype) : "none") << " final=" << s.want_final_state
     << " layout=" << StateLayoutName(s.layout) << " l2norm=" << s.use_qk_l2norm << " scale=" << s.scale
     << " seed=" << s.seed << " algo=" << AlgoName(o.algo) << " threads=" << o.threads << " v_step=" << o.v_step
     << " dk_bucket=" << o.dk_bucket << " precision=" << PrecisionName(o.precision) << " engine=" << EngineName(o.engine);
  return os.str();
}

CaseSpec ReadSpec(ByteReader& r) {
  CaseSpec s;
  s.Nk = r.Range(1, 3);
  s.Nv = s.Nk * r.Range(1, 3);
  s.Dk = r.U8() < 64 ? r.Pick<int64_t>({1, 63, 64, 65, 80, 96, 97, 128}) : r.Range(1, 48);
  s.Dv = r.U8() < 64 ? r.Pick<int64_t>({1, 15, 16, 17, 63, 64, 65, 100}) : r.Range(1, 48);
  const int64_t B = r.Range(1, 4);
  s.lens.clear();
  for (int64_t b = 0; b < B; ++b) s.lens.push_back(static_cast<int32_t>(r.U8() < 200 ? r.U8() % 70 : r.Range(0, 300)));
  s.dtype = r.Pick<DType>({DType::kF32, DType::kF16, DType::kBF16});
  const uint8_t flags = r.U8();
  s.has_g = !(flags & 1);
  s.has_initial_state = !(flags & 2);
  s.want_final_state = !(flags & 4);
  s.layout = flags & 8 ? StateLayout::kKV : StateLayout::kVK;
  s.use_qk_l2norm = flags & 16;
  s.per_channel_gate = s.has_g && (flags & 32);  // KDA (docs/SPEC.md 10): g [T, Nv, Dk]
  s.g_dtype = r.Pick<DType>({DType::kF32, DType::kF16, DType::kBF16});
  s.state_dtype = r.Pick<DType>({DType::kF32, DType::kF16, DType::kBF16});
  // g uniform in [g_min, 0] (SPEC 6: g <= 0), down to decays that underflow
  // within a chunk (tests/extreme_values_test.cc covers the extremes).
  s.g_min = r.Pick<float>({-0.3f, -0.01f, -1.0f, 0.0f, -5.0f, -30.0f});
  s.scale = r.Pick<double>({0.0, 0.0, 0.5, 0.125});
  s.seed = r.U32();
  return s;
}

Options ReadOptions(ByteReader& r, const CaseSpec& s) {
  Options o;
  o.scale = s.scale;
  o.state_layout = s.layout;
  o.use_qk_l2norm = s.use_qk_l2norm;
  o.algo = r.Pick<Algo>({Algo::kAuto, Algo::kRecurrent, Algo::kChunk16, Algo::kChunk32, Algo::kChunk64, Algo::kChunk128});
  o.threads = static_cast<int>(r.Range(1, 3));
  o.v_step = r.Pick<int>({0, 0, 16, 32, 48});
  const int bucket = r.Pick<int>({0, 0, -1, 64, 80, 96, 128});
  o.dk_bucket = bucket > 0 && bucket < s.Dk ? 0 : bucket;
  o.check_values = r.Bool();
  o.precision = r.Pick<Precision>({Precision::kFp32, Precision::kFp32, Precision::kFp32, Precision::kBf16x3,
                                   Precision::kBf16x4, Precision::kBf16, Precision::kAuto});
  // The AMX engine's numerics on any machine (the emulation), and the
  // hardware where the CPU has it (auto, amx).
  o.engine = r.Pick<Engine>({Engine::kAuto, Engine::kVector, Engine::kAmx, Engine::kAmxEmulated, Engine::kAmxEmulated});
  return o;
}

// The gate's form, read after everything else so that inputs written
// before it existed keep their meaning (an exhausted reader gives 0: g as
// given, beta as given). The raw gate takes the place of g (and its
// per-channel shape); the bounds cover fla's KDA gate (-5) and a tight one.
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

// Shortens the sequences (then, with no tokens left, narrows V) until the
// problem is cheap enough; terminates since Nv * Dk <= 9 * 128 < kMaxWork.
void Cap(CaseSpec* s) {
  for (;;) {
    int64_t T = 0;
    for (int32_t l : s->lens) T += l;
    if (std::max<int64_t>(T, 1) * s->Nv * s->Dk * s->Dv <= kMaxWork) return;
    if (T > 0) {
      for (int32_t& l : s->lens) l /= 2;
    } else {
      s->Dv = std::max<int64_t>(1, s->Dv / 2);
    }
  }
}

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

// MakeCase's buffers (same layout, same well-conditioned ranges: unit q, k
// rows unless l2norm, beta in [0.05, 0.95] or logits in [-3, 3], g in
// [g_min, 0] or the raw gate's, state in [-0.5, 0.5]) filled by the fast
// generator.
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

// SPEC 1 token by token in plain FP32: what FP32 arithmetic itself loses on
// this input. Where q.k or S^T q cancel (tiny problems: one token, one head),
// even this exact-order recurrence is far from FP64, and so may the kernel be
// without any fault; the bound below grants that much on top of SPEC 6.
struct Fp32Result {
  std::vector<float> out, final_state;
};

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

Fp32Result Fp32Recurrence(const Inputs& in, const Problem& p) {
  const int64_t Dk = p.Dk, Dv = p.Dv, group = p.Nv / p.Nk;
  const bool kv = p.options.state_layout == StateLayout::kKV;
  Fp32Result r;
  r.out.assign(static_cast<size_t>(p.T * p.Nv * Dv), 0.0f);
  r.final_state.assign(static_cast<size_t>(p.B * p.Nv * Dk * Dv), 0.0f);
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
      }
      for (int64_t i = 0; i < Dk; ++i) {
        for (int64_t j = 0; j < Dv; ++j) r.final_state[sbase + (kv ? i * Dv + j : j * Dk + i)] = S[i * Dv + j];
      }
    }
    t0 += p.seq_lens[b];
  }
  return r;
}

// The kernel's error against FP64 must stay within SPEC 6 plus four times
// the plain FP32 recurrence's own error (zero slack when that is negligible).
// The precision modes represent the chunked products' operands to 16
// (bf16x3, bf16x4) or 8 (bf16) significant bits instead of 24, so their slack
// is what the same formulation loses in fp32, scaled by that resolution
// (2^8, 2^16): on an ill-conditioned chunk (Dk = 1, all keys parallel, no
// decay: the inverse's entries grow and cancel) the chunked form loses far
// more than the recurrence. Found by this target: bf16x3 state error 3.6e-5
// where fp32 had 3.4e-7; bf16 4.5e-2 on a Dk = Dv = 1, C = 64 case.
double ResolutionRatio(Precision precision) {
  switch (precision) {
    case Precision::kFp32: return 1.0;
    case Precision::kBf16x3:
    case Precision::kBf16x4:
    case Precision::kAuto: return 256.0;  // auto is fp32 or bf16x3
    case Precision::kBf16: return 65536.0;
  }
  return 1.0;
}

// `fp32_error`: the larger of the FP32 recurrence's and (for a precision
// mode) the fp32 run of the same formulation's errors.
void CheckError(const TensorView& x, const std::vector<double>& ref, double fp32_error, const Problem& p,
                const char* name, const std::string& what) {
  const double e = RelativeError(x, ref, p.Nv);
  const double lim = Limit(ref, x.dtype, p.options.precision, p.Dk) + 4.0 * ResolutionRatio(p.options.precision) * fp32_error;
  FUZZ_CHECK(e <= lim, std::string(name) + " error " + std::to_string(e) + " > " + std::to_string(lim) + " | " + what);
}

// The FP32 recurrence's error for tensor x (its fp32 copy), and, when the run
// used a precision mode, that of the same problem run in fp32.
double Fp32Error(const TensorView& x, const std::vector<double>& ref, std::vector<float>& recurrence,
                 const TensorView* fp32_run, const Problem& p) {
  const TensorView f(recurrence.data(), DType::kF32,
                     {x.shape[0], x.shape[1], x.numel() / std::max<int64_t>(1, x.shape[0] * x.shape[1])});
  double e = RelativeError(f, ref, p.Nv);
  if (fp32_run) e = std::max(e, RelativeError(*fp32_run, ref, p.Nv));
  return e;
}

}  // namespace

int FuzzDifferential(const uint8_t* data, size_t size) {
  ByteReader r(data, size);
  CaseSpec spec = ReadSpec(r);
  Options opt = ReadOptions(r, spec);
  const GateParams gate = ReadGate(r, &spec, &opt);
  Cap(&spec);
  Case c = FastCase(spec);
  Inputs in = c.inputs();
  if (!gate.a_log) in.A_log = TensorView();
  if (!gate.dt_bias) in.dt_bias = TensorView();
  const Outputs out = c.outputs();
  const std::string what = Describe(spec, gate, opt);
  const Status s = Run(in, out, opt);
  FUZZ_CHECK(s.ok(), "Run rejected a valid problem: " + s.message() + " | " + what);

  Problem p;
  FUZZ_CHECK(Validate(in, out, opt, &p).ok(), "Validate | " + what);
  ReferenceResult ref;
  ReferenceRun(in, p, &ref);
  Fp32Result fp32 = Fp32Recurrence(in, p);
  // A precision mode: the same inputs and formulation in fp32 (into outputs
  // of its own), for the slack.
  const bool mode = opt.precision != Precision::kFp32;
  Bytes out32_buf, state32_buf;
  Outputs out32 = out;
  if (mode) {
    out32_buf.resize(c.out.size());
    state32_buf.resize(c.final_state.size());
    if (!out32_buf.empty()) out32.out.data = out32_buf.data();  // an empty out keeps Case's placeholder
    if (!state32_buf.empty()) out32.final_state.data = state32_buf.data();
    Options opt32 = opt;
    opt32.precision = Precision::kFp32;
    FUZZ_CHECK(Run(in, out32, opt32).ok(), "fp32 run | " + what);
  }
  CheckError(out.out, ref.out, Fp32Error(out.out, ref.out, fp32.out, mode ? &out32.out : nullptr, p), p, "out", what);
  if (out.final_state.present()) {
    CheckError(out.final_state, ref.final_state,
               Fp32Error(out.final_state, ref.final_state, fp32.final_state, mode ? &out32.final_state : nullptr, p), p,
               "final_state", what);
  }
  return 0;
}

}  // namespace cgdr::fuzz
