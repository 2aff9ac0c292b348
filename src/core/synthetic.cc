#include "core/synthetic.h"

#include <cmath>
#include <cstdint>
#include <random>

#include "core/alloc.h"
#include "core/dtype.h"

namespace cgdr {
namespace {

// Zeroed tensor bytes, asked for on transparent huge pages (madvise mode on
// Debian kernels) before the first touch, as a serving process's allocator
// may. The kernel reads rows 4-8 KiB apart (strided by heads): on 4 KiB pages
// every row of a chunk is its own TLB entry. Where THP is off, the advice is
// ignored and nothing else changes.
Bytes Alloc(int64_t n, DType t) {
  const size_t bytes = static_cast<size_t>(n) * DTypeSize(t);
  Bytes v;
  v.reserve(bytes);
  AdviseHugePages(v.data(), bytes);
  v.resize(bytes, 0);
  return v;
}

// Fills rows of length `n` with unit-norm (or raw, if !unit) random rows.
void FillRows(Bytes& buf, DType t, int64_t rows, int64_t n, bool unit, std::mt19937_64& rng) {
  std::normal_distribution<double> nd(0.0, 1.0);
  std::vector<double> row(static_cast<size_t>(n));
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0.0;
    for (auto& x : row) { x = nd(rng); ss += x * x; }
    const double inv = unit ? 1.0 / std::sqrt(ss > 0 ? ss : 1.0) : 1.0;
    for (int64_t i = 0; i < n; ++i) StoreFromF32(buf.data(), t, r * n + i, static_cast<float>(row[i] * inv));
  }
}

void FillUniform(Bytes& buf, DType t, int64_t n, double lo, double hi, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> ud(lo, hi);
  for (int64_t i = 0; i < n; ++i) StoreFromF32(buf.data(), t, i, static_cast<float>(ud(rng)));
}

}  // namespace

Case MakeCase(const CaseSpec& spec) {
  Case c;
  c.spec = spec;
  c.seq_lens = spec.lens;
  for (int32_t l : spec.lens) c.T += l;
  std::mt19937_64 rng(spec.seed);
  const int64_t T = c.T, B = static_cast<int64_t>(spec.lens.size());
  c.query = Alloc(T * spec.Nk * spec.Dk, spec.dtype);
  c.key = Alloc(T * spec.Nk * spec.Dk, spec.dtype);
  c.value = Alloc(T * spec.Nv * spec.Dv, spec.dtype);
  c.beta = Alloc(T * spec.Nv, spec.dtype);
  FillRows(c.query, spec.dtype, T * spec.Nk, spec.Dk, !spec.use_qk_l2norm, rng);
  FillRows(c.key, spec.dtype, T * spec.Nk, spec.Dk, !spec.use_qk_l2norm, rng);
  FillRows(c.value, spec.dtype, T * spec.Nv, spec.Dv, false, rng);
  if (spec.beta_sigmoid) {
    FillUniform(c.beta, spec.dtype, T * spec.Nv, -3.0, 3.0, rng);
  } else {
    FillUniform(c.beta, spec.dtype, T * spec.Nv, 0.05, 0.95, rng);
  }
  const int64_t per_head = spec.per_channel_gate ? spec.Dk : 1;  // gates per (token, head)
  if (spec.has_g && !spec.raw_gate) {
    c.g = Alloc(T * spec.Nv * per_head, spec.g_dtype);
    FillUniform(c.g, spec.g_dtype, T * spec.Nv * per_head, spec.g_min, spec.g_max, rng);
  }
  const int64_t state_n = B * spec.Nv * spec.Dk * spec.Dv;
  if (spec.has_initial_state) {
    c.initial_state = Alloc(state_n, spec.state_dtype);
    FillUniform(c.initial_state, spec.state_dtype, state_n, -0.5, 0.5, rng);
  }
  if (spec.raw_gate) {  // drawn last: the other tensors are those of the same spec without it
    c.a = Alloc(T * spec.Nv * per_head, spec.g_dtype);
    c.A_log = Alloc(spec.Nv, spec.gate_param_dtype);
    c.dt_bias = Alloc(spec.Nv * per_head, spec.gate_param_dtype);
    FillUniform(c.a, spec.g_dtype, T * spec.Nv * per_head, -3.0, 0.5, rng);
    FillUniform(c.A_log, spec.gate_param_dtype, spec.Nv, -1.0, 0.5, rng);
    FillUniform(c.dt_bias, spec.gate_param_dtype, spec.Nv * per_head, -1.0, 0.0, rng);
  }
  c.out = Alloc(T * spec.Nv * spec.Dv, spec.dtype);
  if (spec.want_final_state) c.final_state = Alloc(state_n, spec.has_initial_state ? spec.state_dtype : spec.dtype);
  return c;
}

Inputs Case::inputs() {
  const auto& s = spec;
  const int64_t B = static_cast<int64_t>(seq_lens.size());
  Inputs in;
  in.query = TensorView(query.data(), s.dtype, {T, s.Nk, s.Dk});
  in.key = TensorView(key.data(), s.dtype, {T, s.Nk, s.Dk});
  in.value = TensorView(value.data(), s.dtype, {T, s.Nv, s.Dv});
  in.beta = TensorView(beta.data(), s.dtype, {T, s.Nv});
  const std::vector<int64_t> gate_shape =
      s.per_channel_gate ? std::vector<int64_t>{T, s.Nv, s.Dk} : std::vector<int64_t>{T, s.Nv};
  if (s.has_g && !s.raw_gate) in.g = TensorView(g.data(), s.g_dtype, gate_shape);
  if (s.raw_gate) {
    in.a = TensorView(a.data(), s.g_dtype, gate_shape);
    in.A_log = TensorView(A_log.data(), s.gate_param_dtype, {s.Nv});
    in.dt_bias = TensorView(dt_bias.data(), s.gate_param_dtype, {s.per_channel_gate ? s.Nv * s.Dk : s.Nv});
  }
  const bool kv = s.layout == StateLayout::kKV;
  const std::vector<int64_t> sshape{B, s.Nv, kv ? s.Dk : s.Dv, kv ? s.Dv : s.Dk};
  if (s.has_initial_state) in.initial_state = TensorView(initial_state.data(), s.state_dtype, sshape);
  in.seq_lens = TensorView(seq_lens.data(), DType::kI32, {B});
  // Empty vectors have null data(): give zero-size tensors a non-null pointer.
  static uint8_t empty_sentinel[16];
  for (TensorView* t : {&in.query, &in.key, &in.value, &in.beta}) if (!t->data) t->data = empty_sentinel;
  if (s.has_g && !s.raw_gate && !in.g.data) in.g.data = empty_sentinel;
  if (s.raw_gate && !in.a.data) in.a.data = empty_sentinel;
  return in;
}

Outputs Case::outputs() {
  const auto& s = spec;
  const int64_t B = static_cast<int64_t>(seq_lens.size());
  Outputs o;
  static uint8_t empty_out_sentinel[16];
  o.out = TensorView(out.empty() ? empty_out_sentinel : out.data(), s.dtype, {T, s.Nv, s.Dv});
  const bool kv = s.layout == StateLayout::kKV;
  if (s.want_final_state) {
    o.final_state = TensorView(final_state.data(), s.has_initial_state ? s.state_dtype : s.dtype,
                               {B, s.Nv, kv ? s.Dk : s.Dv, kv ? s.Dv : s.Dk});
  }
  return o;
}

Options Case::options() const {
  Options o;
  o.scale = spec.scale;
  o.state_layout = spec.layout;
  o.use_qk_l2norm = spec.use_qk_l2norm;
  o.use_beta_sigmoid = spec.beta_sigmoid;
  o.gate_lower_bound = spec.gate_lower_bound;
  return o;
}

double RoundTrip(double x, DType t) {
  switch (t) {
    case DType::kF16: return F16ToF32(F32ToF16(static_cast<float>(x)));
    case DType::kBF16: return BF16ToF32(F32ToBF16(static_cast<float>(x)));
    default: return static_cast<float>(x);
  }
}

double RoundingError(const std::vector<double>& ref, DType t) {
  double num = 0.0, den = 0.0;
  for (double x : ref) {
    const double d = RoundTrip(x, t) - x;
    num += d * d;
    den += x * x;
  }
  return den > 0 ? std::sqrt(num / den) : 0.0;
}

}  // namespace cgdr
