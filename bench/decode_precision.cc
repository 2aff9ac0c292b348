// How the error of decode steps grows with their number when the state pool
// is 16-bit (issue 19; the note in
// docs/decode-state-precision.md). Each step computes in FP32 and rounds the
// updated state once into the pool, so rounding errors accumulate; this
// measures the pool against the FP64 recurrence (reference/) after 1, 2, 5,
// ..., --steps steps, in units of one rounding (the error of the FP64 state
// itself stored in the pool's dtype), for f32, f16 and bf16 pools, in three
// regimes of inputs:
//   random:     values and keys drawn afresh each step, g uniform in [-0.3, 0]
//   no-decay:   the same without g (a = 1)
//   long-memory: values a fixed linear map of the keys (v = W^T k, a state to
//               learn, so the updates shrink as it is learnt) and a constant
//               g = --g (default -0.001: a = 0.999, closer to 1 than half a
//               bf16 ulp, so a rounded a*S can stay where it was)
// The column "stoch" emulates stochastic rounding of the stored state (a
// scalar FP32 step, then round up with probability = the distance to the
// value below over the ulp; hashed per step, head and element): not offered
// by the library (see the note), measured here for comparison.
//
//   bench_decode_precision [--steps 2000] [--nv 4] [--dk 128] [--dv 128] [--g -0.001]
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cgdr/cgdr.hpp"
#include "cgdr/decode.hpp"
#include "core/dtype.h"
#include "core/synthetic.h"
#include "reference/reference.h"

namespace {

using namespace cgdr;

struct Args {
  int64_t steps = 2000, Nv = 4, Dk = 128, Dv = 128;
  double g = -0.001;
};

Args Parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string f = argv[i];
    const double v = std::atof(argv[i + 1]);
    if (f == "--steps") a.steps = static_cast<int64_t>(v);
    else if (f == "--nv") a.Nv = static_cast<int64_t>(v);
    else if (f == "--dk") a.Dk = static_cast<int64_t>(v);
    else if (f == "--dv") a.Dv = static_cast<int64_t>(v);
    else if (f == "--g") a.g = v;
    else {
      std::fprintf(stderr, "usage: bench_decode_precision [--steps N] [--nv NV] [--dk DK] [--dv DV] [--g G]\n");
      std::exit(2);
    }
  }
  if (a.steps < 1 || a.Nv < 1 || a.Dk < 1 || a.Dv < 1 || a.Dk > kMaxHeadDim || a.Dv > kMaxHeadDim || !(a.g <= 0)) {
    std::fprintf(stderr, "bench_decode_precision: --steps/--nv >= 1, --dk/--dv in [1, 256], --g <= 0\n");
    std::exit(2);
  }
  return a;
}

enum class Regime { kRandom, kNoDecay, kLongMemory };
const char* RegimeName(Regime r) {
  return r == Regime::kRandom ? "random" : r == Regime::kNoDecay ? "no-decay" : "long-memory";
}

// One sequence of `steps` f32 tokens, Nk = 1, layout kv, the initial state
// stored in `pool` (so the pool and the reference start from the same values).
Case MakeRegime(const Args& a, Regime r, DType pool) {
  CaseSpec s;
  s.Nk = 1;
  s.Nv = a.Nv;
  s.Dk = a.Dk;
  s.Dv = a.Dv;
  s.lens = {static_cast<int32_t>(a.steps)};
  s.state_dtype = pool;
  s.layout = StateLayout::kKV;
  s.has_g = r != Regime::kNoDecay;
  s.seed = 19;
  Case c = MakeCase(s);
  if (r == Regime::kLongMemory) {
    auto* g = reinterpret_cast<float*>(c.g.data());
    for (int64_t i = 0; i < a.steps * a.Nv; ++i) g[i] = static_cast<float>(a.g);
    std::mt19937 rng(3);
    std::normal_distribution<float> normal(0.0f, 0.1f);
    std::vector<float> W(static_cast<size_t>(a.Nv * a.Dk * a.Dv));
    for (float& w : W) w = normal(rng);
    const auto* k = reinterpret_cast<const float*>(c.key.data());
    auto* v = reinterpret_cast<float*>(c.value.data());
    for (int64_t t = 0; t < a.steps; ++t) {
      for (int64_t h = 0; h < a.Nv; ++h) {
        for (int64_t j = 0; j < a.Dv; ++j) {
          float x = 0.0f;
          for (int64_t i = 0; i < a.Dk; ++i) x += W[static_cast<size_t>((h * a.Dk + i) * a.Dv + j)] * k[t * a.Dk + i];
          v[(t * a.Nv + h) * a.Dv + j] = x;
        }
      }
    }
  }
  return c;
}

uint64_t Mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  return x ^ (x >> 33);
}

// x rounded to `t` stochastically: the bits below t's last significand bit
// plus `random` (as many low bits as are dropped), then truncated. Normal
// range only (elsewhere nearest), which is where states live.
void StoreStochastic(void* base, DType t, int64_t i, float x, uint64_t random) {
  const uint32_t u = F32Bits(x), abs = u & 0x7FFFFFFFu;
  if (t == DType::kBF16 && abs < 0x7F000000u) {
    static_cast<uint16_t*>(base)[i] = static_cast<uint16_t>((u + static_cast<uint32_t>(random & 0xFFFF)) >> 16);
  } else if (t == DType::kF16 && abs >= 0x38800000u && abs < 0x477FE000u) {
    static_cast<uint16_t*>(base)[i] = F32ToF16(F32FromBits((u + static_cast<uint32_t>(random & 0x1FFF)) & ~0x1FFFu));
  } else {
    StoreFromF32(base, t, i, x);
  }
}

// The decode step of one token on a kv pool, in scalar FP32, storing with
// stochastic rounding (the emulation of the "stoch" column).
void StochasticStep(const Case& c, const Args& a, int64_t t, DType pool_t, std::vector<uint8_t>* pool) {
  const auto* k = reinterpret_cast<const float*>(c.key.data()) + t * a.Dk;
  const auto* v = reinterpret_cast<const float*>(c.value.data()) + t * a.Nv * a.Dv;
  const auto* beta = reinterpret_cast<const float*>(c.beta.data()) + t * a.Nv;
  const auto* g = c.spec.has_g ? reinterpret_cast<const float*>(c.g.data()) + t * a.Nv : nullptr;
  std::vector<float> S(static_cast<size_t>(a.Dk * a.Dv)), sk(static_cast<size_t>(a.Dv));
  for (int64_t h = 0; h < a.Nv; ++h) {
    const float decay = g ? std::exp(g[h]) : 1.0f;
    const int64_t base = h * a.Dk * a.Dv;
    for (int64_t e = 0; e < a.Dk * a.Dv; ++e) S[static_cast<size_t>(e)] = LoadAsF32(pool->data(), pool_t, base + e);
    std::fill(sk.begin(), sk.end(), 0.0f);
    for (int64_t i = 0; i < a.Dk; ++i) {
      for (int64_t j = 0; j < a.Dv; ++j) sk[static_cast<size_t>(j)] += (decay * S[static_cast<size_t>(i * a.Dv + j)]) * k[i];
    }
    for (int64_t i = 0; i < a.Dk; ++i) {
      for (int64_t j = 0; j < a.Dv; ++j) {
        const float u = beta[h] * (v[h * a.Dv + j] - sk[static_cast<size_t>(j)]);
        const float x = k[i] * u + decay * S[static_cast<size_t>(i * a.Dv + j)];
        const uint64_t random = Mix((static_cast<uint64_t>(t) << 40) ^ (static_cast<uint64_t>(h) << 32) ^
                                    static_cast<uint64_t>(i * a.Dv + j) ^ 0x9e3779b97f4a7c15ull);
        StoreStochastic(pool->data(), pool_t, base + i * a.Dv + j, x, random);
      }
    }
  }
}

// 1, 2, 5, 10, 20, 50, ...
bool IsCheckpoint(int64_t n) {
  while (n % 10 == 0) n /= 10;
  return n == 1 || n == 2 || n == 5;
}

// The FP64 state after the first n tokens.
std::vector<double> ReferenceState(Case& c, int64_t n) {
  Inputs in = c.inputs();
  for (TensorView* x : {&in.query, &in.key, &in.value, &in.beta, &in.g}) x->shape[0] = n;
  std::vector<int32_t> lens{static_cast<int32_t>(n)};
  in.seq_lens = TensorView(lens.data(), DType::kI32, {1});
  Outputs out = c.outputs();
  out.out.shape[0] = n;
  Problem p;
  if (!Validate(in, out, c.options(), &p).ok()) std::abort();
  ReferenceResult ref;
  ReferenceRun(in, p, &ref);
  return ref.final_state;
}

// Runs `steps` decode steps with the kernel (nearest rounding) and, for a
// 16-bit pool, the stochastic emulation; prints both errors at each checkpoint.
void Measure(const Args& a, Regime r, DType pool_t) {
  Case c = MakeRegime(a, r, pool_t);
  const int64_t state_bytes = a.Nv * a.Dk * a.Dv * static_cast<int64_t>(DTypeSize(pool_t));
  std::vector<uint8_t> pool(c.initial_state.begin(), c.initial_state.begin() + state_bytes), stoch = pool;
  std::vector<float> out(static_cast<size_t>(a.Nv * a.Dv));
  const int32_t index = 0;
  Options opt = c.options();
  opt.threads = 1;
  const bool sixteen = pool_t != DType::kF32;
  for (int64_t t = 0; t < a.steps; ++t) {
    DecodeInputs in;
    in.query = TensorView(c.query.data() + t * a.Dk * 4, DType::kF32, {1, 1, a.Dk});
    in.key = TensorView(c.key.data() + t * a.Dk * 4, DType::kF32, {1, 1, a.Dk});
    in.value = TensorView(c.value.data() + t * a.Nv * a.Dv * 4, DType::kF32, {1, a.Nv, a.Dv});
    in.beta = TensorView(c.beta.data() + t * a.Nv * 4, DType::kF32, {1, a.Nv});
    if (c.spec.has_g) in.g = TensorView(c.g.data() + t * a.Nv * 4, DType::kF32, {1, a.Nv});
    in.state_pool = TensorView(pool.data(), pool_t, {1, a.Nv, a.Dk, a.Dv});
    in.state_indices = TensorView(&index, DType::kI32, {1});
    const Status s = DecodeStep(in, DecodeOutputs{TensorView(out.data(), DType::kF32, {1, a.Nv, a.Dv})}, opt);
    if (!s.ok()) {
      std::fprintf(stderr, "decode step: %s\n", s.message().c_str());
      std::exit(1);
    }
    if (sixteen) StochasticStep(c, a, t, pool_t, &stoch);
    if (!IsCheckpoint(t + 1) && t + 1 != a.steps) continue;
    const std::vector<double> ref = ReferenceState(c, t + 1);
    const double floor = RoundingError(ref, pool_t);
    const double err = RelativeError(TensorView(pool.data(), pool_t, {1, a.Nv, a.Dk, a.Dv}), ref, a.Nv);
    std::printf("%-12s %-5s %6lld  %9.2e", RegimeName(r), DTypeName(pool_t), static_cast<long long>(t + 1), err);
    if (sixteen) {
      const double serr = RelativeError(TensorView(stoch.data(), pool_t, {1, a.Nv, a.Dk, a.Dv}), ref, a.Nv);
      std::printf("  %9.2e  %7.1f  %7.1f\n", floor, err / floor, serr / floor);
    } else {
      std::printf("\n");
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = Parse(argc, argv);
  std::printf("decode on a state pool: normwise error of the state vs the FP64 recurrence; Nv=%lld Dk=%lld Dv=%lld, "
              "layout kv, f32 inputs;\nfloor = the error of the FP64 state rounded once to the pool's dtype; "
              "nearest = the kernel; stoch = stochastic rounding, emulated\n",
              static_cast<long long>(a.Nv), static_cast<long long>(a.Dk), static_cast<long long>(a.Dv));
  std::printf("%-12s %-5s %6s  %9s  %9s  %7s  %7s\n", "regime", "pool", "steps", "error", "floor", "nearest", "stoch");
  for (Regime r : {Regime::kRandom, Regime::kNoDecay, Regime::kLongMemory}) {
    for (DType pool : {DType::kF32, DType::kF16, DType::kBF16}) Measure(a, r, pool);
  }
  return 0;
}
