// Drafts for the decode step's tests (draft_util.h).
#include "draft_util.h"

#include <gtest/gtest.h>

#include <cstring>

#include "core/dtype.h"

namespace cgdr::testing {

Buf TokenRows(const TensorView& t, int64_t N, int64_t K, int64_t j) {
  if (!t.present()) return Buf();
  const size_t row = static_cast<size_t>(t.numel() / t.shape[0]) * DTypeSize(t.dtype);
  Buf b(static_cast<size_t>(N) * row);
  for (int64_t n = 0; n < N; ++n) std::memcpy(&b[n * row], static_cast<const uint8_t*>(t.data) + (n * K + j) * row, row);
  return b;
}

TensorView WithTokenAxis(const TensorView& t, int64_t N, int64_t K) {
  if (!t.present()) return t;
  std::vector<int64_t> dims{N, K};
  for (int i = 1; i < t.rank; ++i) dims.push_back(t.shape[i]);
  return TensorView(t.data, t.dtype, dims);
}

TensorView Over(Buf& b, const TensorView& like, int64_t N) {
  if (!like.present()) return like;
  TensorView v = like;
  v.data = b.data();
  v.shape[0] = N;
  return v;
}

Draft::Draft(CaseSpec spec, int64_t n, int64_t k, DType pool_dt, int64_t gap)
    : N(n), K(k), P(n * (k + 1) + 2), pool_dtype(pool_dt) {
  spec.lens.assign(static_cast<size_t>(n), static_cast<int32_t>(k));
  c = MakeCase(spec);
  slot = spec.Nv * spec.Dk * spec.Dv;
  stride = slot + gap;
  pool.assign(static_cast<size_t>((P - 1) * stride + slot) * DTypeSize(pool_dt), 0x3C);
  for (int64_t i = 0; i < N; ++i) {
    src.push_back(static_cast<int32_t>(P - 1 - i));
    for (int64_t e = 0; e < slot; ++e) {
      StoreFromF32(pool.data(), pool_dt, src.back() * stride + e,
                   LoadAsF32(c.initial_state.data(), spec.state_dtype, i * slot + e));
    }
  }
}

Options Draft::options(int threads) const {
  Options o = c.options();
  o.threads = threads;
  o.state_slot_stride = stride == slot ? 0 : stride;
  return o;
}

cgdr::Inputs Draft::PrefillInputs() {
  cgdr::Inputs in = c.inputs();
  if (no_a_log) in.A_log = TensorView();
  if (no_dt_bias) in.dt_bias = TensorView();
  return in;
}

TensorView Draft::PoolView(Buf& b) const {
  const bool kv = c.spec.layout == StateLayout::kKV;
  return TensorView(b.data(), pool_dtype, {P, c.spec.Nv, kv ? c.spec.Dk : c.spec.Dv, kv ? c.spec.Dv : c.spec.Dk});
}

DecodeInputs Draft::Inputs(Buf& pool_buf) {
  const cgdr::Inputs in = PrefillInputs();
  DecodeInputs d;
  const auto axis = [&](const TensorView& t) { return TokenAxis() ? WithTokenAxis(t, N, K) : t; };
  d.query = axis(in.query);
  d.key = axis(in.key);
  d.value = axis(in.value);
  d.beta = axis(in.beta);
  d.g = axis(in.g);
  d.a = axis(in.a);
  d.A_log = in.A_log;
  d.dt_bias = in.dt_bias;
  d.state_pool = PoolView(pool_buf);
  d.state_indices = TensorView(src.data(), DType::kI32, {N});
  return d;
}

TensorView Draft::OutView(Buf& out) const {
  const CaseSpec& s = c.spec;
  if (!TokenAxis()) return TensorView(out.data(), s.dtype, {N, s.Nv, s.Dv});
  return TensorView(out.data(), s.dtype, {N, K, s.Nv, s.Dv});
}

SingleSteps::SingleSteps(Draft& d, const Options& opt) : pool(d.pool) {
  const cgdr::Inputs in = d.PrefillInputs();
  const CaseSpec& s = d.c.spec;
  const size_t out_row = d.OutRowBytes();
  out.assign(static_cast<size_t>(d.N * d.K) * out_row, 0);
  states.assign(static_cast<size_t>(d.N), std::vector<Buf>(static_cast<size_t>(d.K)));
  for (int64_t j = 0; j < d.K; ++j) {
    Buf q = TokenRows(in.query, d.N, d.K, j), k = TokenRows(in.key, d.N, d.K, j);
    Buf v = TokenRows(in.value, d.N, d.K, j), beta = TokenRows(in.beta, d.N, d.K, j);
    Buf g = TokenRows(in.g, d.N, d.K, j), a = TokenRows(in.a, d.N, d.K, j);
    Buf o(static_cast<size_t>(d.N) * out_row);
    DecodeInputs di;
    di.query = Over(q, in.query, d.N);
    di.key = Over(k, in.key, d.N);
    di.value = Over(v, in.value, d.N);
    di.beta = Over(beta, in.beta, d.N);
    di.g = Over(g, in.g, d.N);
    di.a = Over(a, in.a, d.N);
    di.A_log = in.A_log;
    di.dt_bias = in.dt_bias;
    di.state_pool = d.PoolView(pool);
    di.state_indices = TensorView(d.src.data(), DType::kI32, {d.N});
    DecodeOutputs dout;
    dout.out = TensorView(o.data(), s.dtype, {d.N, s.Nv, s.Dv});
    const Status st = DecodeStep(di, dout, opt);
    EXPECT_TRUE(st.ok()) << st.message();
    for (int64_t n = 0; n < d.N; ++n) {
      std::memcpy(&out[(n * d.K + j) * out_row], &o[n * out_row], out_row);
      const uint8_t* sl = d.Slot(pool, d.src[static_cast<size_t>(n)]);
      states[n][j].assign(sl, sl + d.SlotBytes());
    }
  }
}

const char* ModeName(Mode m) { return m == Mode::kSlots ? "slots" : m == Mode::kDense ? "dense" : "in place"; }

void ExpectEqualsSingleSteps(Draft& d, Mode mode, int threads) {
  const Options opt = d.options(threads);
  SingleSteps ref(d, opt);
  Buf pool = d.pool;
  const Buf pool_before = pool;
  DecodeInputs in = d.Inputs(pool);
  Buf out(ref.out.size()), states;
  DecodeOutputs o;
  o.out = d.OutView(out);
  std::vector<int32_t> dst(static_cast<size_t>(d.N * d.K));
  for (int64_t i = 0; i < d.N * d.K; ++i) dst[i] = static_cast<int32_t>(i);
  if (mode == Mode::kSlots) {
    dst[d.K - 1] = d.src[0];
    if (d.N > 1) dst[d.K] = -1;
    in.dst_indices = TensorView(dst.data(), DType::kI32, {d.N, d.K});
  } else if (mode == Mode::kDense) {
    states.assign(static_cast<size_t>(d.N * d.K) * d.SlotBytes(), 0);
    const TensorView pv = d.PoolView(pool);
    o.states = TensorView(states.data(), d.pool_dtype, {d.N * d.K, pv.shape[1], pv.shape[2], pv.shape[3]});
  }
  const Status st = DecodeStep(in, o, opt);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(out, ref.out) << "out";
  Buf expect_pool = pool_before;
  for (int64_t n = 0; n < d.N; ++n) {
    for (int64_t j = 0; j < d.K; ++j) {
      const Buf& want = ref.states[n][j];
      const uint8_t* got = nullptr;
      int64_t slot = -1;
      if (mode == Mode::kSlots) slot = dst[n * d.K + j];
      if (mode == Mode::kInPlace && j == d.K - 1) slot = d.src[static_cast<size_t>(n)];
      if (slot >= 0) {
        got = d.Slot(pool, slot);
        std::memcpy(d.Slot(expect_pool, slot), want.data(), want.size());
      }
      if (mode == Mode::kDense) got = states.data() + (n * d.K + j) * d.SlotBytes();
      if (got) {
        EXPECT_EQ(std::memcmp(got, want.data(), want.size()), 0) << "state of sequence " << n << " after token " << j;
      }
    }
  }
  EXPECT_EQ(pool, expect_pool) << "pool bytes outside the destinations changed";
}

}  // namespace cgdr::testing
