// Issue "hardening" 6: Options::check_values. NaN/Inf in any float input and
// g > 0 give one clear error naming the tensor and the first bad index, before
// any output byte is written; off by default, where the same inputs pass.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "cgdr/cgdr.hpp"
#include "cgdr/decode.hpp"
#include "core/dtype.h"
#include "core/scan.h"
#include "core/synthetic.h"
#include "test_util.h"

namespace cgdr {
namespace {

constexpr uint8_t kSentinel = 0x5A;
const float kNaN = std::numeric_limits<float>::quiet_NaN();
const float kInf = std::numeric_limits<float>::infinity();

// The bit-level scans (core/scan.h) agree with the definitions on the
// converted value (std::isfinite, > 0) for every f16 and bf16 bit pattern and
// for f32 specials, at every position of a block and past the first block,
// on every compiled SIMD target.
void ExpectScansAgreeWithConvertedValues();
TEST(CheckValues, ScansAgreeWithConvertedValues) {
  testing::ForEachTarget([](const std::string& target) {
    SCOPED_TRACE(target);
    ExpectScansAgreeWithConvertedValues();
  });
}

void ExpectScansAgreeWithConvertedValues() {
  const auto expect_scans = [](const TensorView& t, const char* what) {
    int64_t non_finite = -1, positive = -1;
    for (int64_t i = t.numel() - 1; i >= 0; --i) {
      const float v = LoadAsF32(t.data, t.dtype, i);
      if (!std::isfinite(v)) non_finite = i;
      if (v > 0.0f) positive = i;
    }
    EXPECT_EQ(FirstNonFinite(t), non_finite) << what;
    EXPECT_EQ(FirstPositive(t), positive) << what;
  };
  for (DType dt : {DType::kF16, DType::kBF16}) {
    const uint16_t minus_one = dt == DType::kF16 ? 0xBC00u : 0xBF80u;
    std::vector<uint16_t> x(4100, minus_one);  // one buffer, restored after each pattern (ASan's run: 84 s with one each)
    const TensorView t(x.data(), dt, {4100});
    for (uint32_t bits = 0; bits < 65536; ++bits) {
      const int64_t at = bits % 4100;  // positions in the first and later blocks
      x[static_cast<size_t>(at)] = static_cast<uint16_t>(bits);
      const int64_t want_nf = std::isfinite(LoadAsF32(x.data(), dt, at)) ? -1 : at;
      const int64_t want_pos = LoadAsF32(x.data(), dt, at) > 0.0f ? at : -1;
      if (FirstNonFinite(t) != want_nf || FirstPositive(t) != want_pos) {
        ADD_FAILURE() << DTypeName(dt) << " bits 0x" << std::hex << bits << " at " << std::dec << at;
        return;
      }
      x[static_cast<size_t>(at)] = minus_one;
    }
  }
  std::vector<float> f(5000, -0.5f);
  expect_scans(TensorView(f.data(), DType::kF32, {5000}), "f32 all negative");
  for (float special : {kNaN, -kNaN, kInf, -kInf, 0.0f, -0.0f, std::numeric_limits<float>::denorm_min(),
                        -std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::max()}) {
    for (int64_t at : {0, 2047, 2048, 4999}) {
      std::vector<float> y(5000, -0.5f);
      y[static_cast<size_t>(at)] = special;
      y[4999 - static_cast<size_t>(at) / 2] = 1.0f;  // a positive elsewhere too
      expect_scans(TensorView(y.data(), DType::kF32, {5000}), "f32 special");
    }
  }
}

// The tensors' data need not be aligned to their elements: f32 and 16-bit
// values starting 2 and 1 bytes past an aligned address, each target, each
// length around a vector (the vector part, then the element-wise tail).
TEST(CheckValues, ScansOfUnalignedData) {
  testing::ForEachTarget([](const std::string& target) {
    for (int64_t n : {1, 15, 16, 17, 63, 64, 65, 2049}) {
      for (int64_t at = 0; at < n; at += std::max<int64_t>(1, n / 7)) {
        std::vector<uint8_t> raw(static_cast<size_t>(n) * 4 + 64);
        uint8_t* f32_at = raw.data() + (64 - reinterpret_cast<uintptr_t>(raw.data()) % 64) % 64 + 2;
        for (int64_t i = 0; i < n; ++i) {
          const float v = i == at ? kInf : -1.0f;
          std::memcpy(f32_at + i * 4, &v, 4);
        }
        EXPECT_EQ(FirstNonFinite(TensorView(f32_at, DType::kF32, {n})), at) << target << " f32 n=" << n;
        uint8_t* h_at = f32_at - 1;
        for (int64_t i = 0; i < n; ++i) {
          const uint16_t v = i == at ? 0x3C00u : 0xBC00u;  // f16 +1 / -1
          std::memcpy(h_at + i * 2, &v, 2);
        }
        EXPECT_EQ(FirstPositive(TensorView(h_at, DType::kF16, {n})), at) << target << " f16 n=" << n;
        EXPECT_EQ(FirstNonFinite(TensorView(h_at, DType::kF16, {n})), -1) << target << " f16 n=" << n;
      }
    }
  });
}

// Large tensors are scanned in one part per thread: the index found is the
// first one, the same for every thread count, wherever the matches lie
// (first part, a part boundary, the last element, several parts at once).
TEST(CheckValues, ScansOfLargeTensorsFindTheFirstMatchOnAnyThreadCount) {
  const int64_t n = (int64_t{1} << 18) * 7 + 1001;  // 7 parts of 2^18 and a tail
  const int64_t part7 = (n + 6) / 7;
  const std::vector<std::vector<int64_t>> placements = {
      {}, {0}, {n - 1}, {part7 - 1, part7}, {part7 * 3, part7 * 5 + 17}, {part7 * 6 + 3, 5}};
  for (const auto& at : placements) {
    std::vector<uint16_t> x(static_cast<size_t>(n), 0xBC00u);  // f16 -1.0
    for (int64_t i : at) x[static_cast<size_t>(i)] = 0x7E00u;  // f16 NaN
    std::vector<uint16_t> gx(static_cast<size_t>(n), 0xBC00u);
    for (int64_t i : at) gx[static_cast<size_t>(i)] = 0x3C00u;  // f16 +1.0
    int64_t want = -1;
    for (int64_t i : at) want = want < 0 ? i : std::min(want, i);
    const TensorView t(x.data(), DType::kF16, {n}), g(gx.data(), DType::kF16, {n});
    for (int threads : {0, 1, 2, 3, 7, 8}) {
      EXPECT_EQ(FirstNonFinite(t, threads), want) << "threads " << threads;
      EXPECT_EQ(FirstPositive(g, threads), want) << "threads " << threads;
      EXPECT_EQ(FirstPositive(t, threads), -1) << "threads " << threads;  // NaN is not > 0
    }
  }
}

// A small problem with outputs pre-filled with a sentinel.
struct Fixture {
  Case c;
  explicit Fixture(DType dtype, DType g_dtype, DType state_dtype, StateLayout layout) {
    CaseSpec s;
    s.Nk = 2; s.Nv = 4; s.Dk = 5; s.Dv = 7; s.lens = {3, 0, 6};
    s.dtype = dtype; s.g_dtype = g_dtype; s.state_dtype = state_dtype; s.layout = layout;
    c = MakeCase(s);
    testing::FillOutputs(c, kSentinel);
  }
  bool Untouched() const { return testing::OutputsHold(c, kSentinel); }
  Status Run(bool check) {
    Options opt = c.options();
    opt.check_values = check;
    opt.threads = 2;
    return cgdr::Run(c.inputs(), c.outputs(), opt);
  }
};

// "[i0, i1, ...]" of flat index `flat` in a tensor of this shape (as validate.cc prints).
std::string IndexOf(const TensorView& t, int64_t flat) {
  std::vector<int64_t> idx(static_cast<size_t>(t.rank));
  for (int i = t.rank - 1; i >= 0; --i) {
    idx[static_cast<size_t>(i)] = flat % t.shape[i];
    flat /= t.shape[i];
  }
  std::string s = "[";
  for (size_t i = 0; i < idx.size(); ++i) s += (i ? ", " : "") + std::to_string(idx[i]);
  return s + "]";
}

struct Target {
  const char* name;
  Bytes Case::*buf;
  TensorView Inputs::*view;
};
const Target kTensors[] = {{"query", &Case::query, &Inputs::query},       {"key", &Case::key, &Inputs::key},
                           {"value", &Case::value, &Inputs::value},       {"beta", &Case::beta, &Inputs::beta},
                           {"g", &Case::g, &Inputs::g},                   {"initial_state", &Case::initial_state, &Inputs::initial_state}};

// Plants `bad` at two places of one tensor; check_values must name the first,
// write nothing, and the same input must pass with check_values off.
void ExpectFirstBadReported(Fixture& f, const Target& t, float bad, const char* needle) {
  const TensorView v = f.c.inputs().*(t.view);
  const int64_t n = v.numel(), first = n / 3, second = n - 1;
  StoreFromF32((f.c.*(t.buf)).data(), v.dtype, second, bad);
  StoreFromF32((f.c.*(t.buf)).data(), v.dtype, first, bad);
  const float stored = LoadAsF32((f.c.*(t.buf)).data(), v.dtype, first);
  ASSERT_TRUE(stored == bad || (std::isnan(stored) && std::isnan(bad))) << "the dtype cannot hold " << bad;
  const std::string label = std::string(t.name) + " " + DTypeName(v.dtype) + " value " + std::to_string(bad);
  const Status s = f.Run(true);
  ASSERT_FALSE(s.ok()) << label << ": accepted";
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << label;
  const std::string& m = s.message();
  EXPECT_EQ(m.rfind(std::string(t.name) + ":", 0), 0u) << label << ": message does not start with the tensor: " << m;
  EXPECT_NE(m.find(needle), std::string::npos) << label << ": " << m;
  EXPECT_NE(m.find(IndexOf(v, first)), std::string::npos) << label << ": first bad index " << IndexOf(v, first) << " not in: " << m;
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  EXPECT_TRUE(f.Untouched()) << label << ": output written before the error";
  EXPECT_TRUE(f.Run(false).ok()) << label << ": check_values off must not scan the values";
}

TEST(CheckValues, NonFiniteInEveryTensorEveryDType) {
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (StateLayout layout : {StateLayout::kVK, StateLayout::kKV}) {
      for (const Target& t : kTensors) {
        for (float bad : {kNaN, kInf, -kInf}) {
          Fixture f(dt, dt, dt, layout);
          ExpectFirstBadReported(f, t, bad, "non-finite");
        }
      }
    }
  }
}

// g and the state may have their own dtypes: each is checked in its own.
TEST(CheckValues, MixedDTypes) {
  for (const Target& t : kTensors) {
    Fixture f(DType::kBF16, DType::kF16, DType::kF32, StateLayout::kVK);
    ExpectFirstBadReported(f, t, kNaN, "non-finite");
    Fixture h(DType::kF32, DType::kBF16, DType::kF16, StateLayout::kKV);
    ExpectFirstBadReported(h, t, -kInf, "non-finite");
  }
}

TEST(CheckValues, PositiveGEveryDType) {
  const Target& g = kTensors[4];
  for (DType gt : {DType::kF32, DType::kF16, DType::kBF16}) {
    // The smallest positive value the dtype holds counts as well as 1.
    const float tiny = std::ldexp(1.0f, gt == DType::kF16 ? -24 : gt == DType::kBF16 ? -133 : -149);
    for (float pos : {tiny, 1.0f, 88.0f}) {
      Fixture f(DType::kF32, gt, DType::kF32, StateLayout::kVK);
      ExpectFirstBadReported(f, g, pos, "expected log-decay <= 0");
    }
  }
}

// Zero (either sign) and the most negative finite g are legal.
TEST(CheckValues, CleanInputsPass) {
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
    Fixture f(dt, dt, dt, StateLayout::kVK);
    StoreFromF32(f.c.g.data(), dt, 0, 0.0f);
    StoreFromF32(f.c.g.data(), dt, 1, -0.0f);
    StoreFromF32(f.c.g.data(), dt, 2, dt == DType::kF16 ? -65504.0f : -3.0e38f);
    const Status s = f.Run(true);
    EXPECT_TRUE(s.ok()) << DTypeName(dt) << ": " << s.message();
    EXPECT_FALSE(f.Untouched());
  }
}

// The decode step checks its per-token inputs the same way; the pool and the
// output stay as they were.
TEST(CheckValues, DecodeStep) {
  const int64_t N = 3, Nk = 1, Nv = 2, Dk = 4, Dv = 3, P = 4;
  for (const char* name : {"query", "key", "value", "beta", "g"}) {
    std::vector<float> q(N * Nk * Dk, 0.5f), k(N * Nk * Dk, 0.5f), v(N * Nv * Dv, 1.0f), beta(N * Nv, 0.5f),
        g(N * Nv, -0.1f), pool(P * Nv * Dv * Dk, 0.25f), out(N * Nv * Dv, 7.0f);
    std::vector<int32_t> idx{2, -1, 0};
    std::vector<float>* bad = std::string(name) == "query" ? &q : std::string(name) == "key" ? &k
                            : std::string(name) == "value" ? &v : std::string(name) == "beta" ? &beta : &g;
    (*bad)[bad->size() - 1] = kNaN;
    DecodeInputs in;
    in.query = TensorView(q.data(), DType::kF32, {N, Nk, Dk});
    in.key = TensorView(k.data(), DType::kF32, {N, Nk, Dk});
    in.value = TensorView(v.data(), DType::kF32, {N, Nv, Dv});
    in.beta = TensorView(beta.data(), DType::kF32, {N, Nv});
    in.g = TensorView(g.data(), DType::kF32, {N, Nv});
    in.state_pool = TensorView(pool.data(), DType::kF32, {P, Nv, Dv, Dk});
    in.state_indices = TensorView(idx.data(), DType::kI32, {N});
    DecodeOutputs o{TensorView(out.data(), DType::kF32, {N, Nv, Dv})};
    Options opt;
    opt.check_values = true;
    const Status s = DecodeStep(in, o, opt);
    ASSERT_FALSE(s.ok()) << name;
    EXPECT_EQ(s.message().rfind(std::string(name) + ":", 0), 0u) << s.message();
    EXPECT_NE(s.message().find("non-finite"), std::string::npos) << s.message();
    EXPECT_EQ(pool, std::vector<float>(P * Nv * Dv * Dk, 0.25f)) << name << ": pool written";
    EXPECT_EQ(out, std::vector<float>(N * Nv * Dv, 7.0f)) << name << ": out written";
  }
}

}  // namespace
}  // namespace cgdr
