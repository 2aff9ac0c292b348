// SPEC 5: results are bitwise identical for any thread count, V tile width,
// item grouping and run; bucket padding changes nothing.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "cgdr/cgdr.hpp"
#include "test_util.h"

namespace cgdr::testing {
namespace {

struct Outputs2 {
  Bytes out, state;
};

Outputs2 RunWith(const CaseSpec& spec, const Options& opt) {
  Case c = MakeCase(spec);
  const Status s = cgdr::Run(c.inputs(), c.outputs(), opt);
  EXPECT_TRUE(s.ok()) << s.message();
  return {c.out, c.final_state};
}

CaseSpec OddSpec() {
  CaseSpec s;
  s.Nk = 2; s.Nv = 6; s.Dk = 37; s.Dv = 71; s.lens = {100, 0, 1, 64, 33};
  s.dtype = DType::kBF16; s.state_dtype = DType::kF32;
  return s;
}

TEST(Determinism, BitwiseAcrossThreadsAndVTilesEveryTargetEveryAlgo) {
  const CaseSpec spec = OddSpec();
  ForEachTarget([&](const std::string& target) {
    for (Algo a : AllAlgos()) {
      Options base_opt = MakeCase(spec).options();
      base_opt.algo = a;
      base_opt.threads = 1;
      const Outputs2 base = RunWith(spec, base_opt);
      for (int threads : {2, 3, 7}) {
        for (int v_step : {0, 16, 48}) {
          Options opt = base_opt;
          opt.threads = threads;
          opt.v_step = v_step;
          const Outputs2 r = RunWith(spec, opt);
          EXPECT_EQ(r.out, base.out) << target << " " << AlgoName(a) << " threads=" << threads << " v_step=" << v_step;
          EXPECT_EQ(r.state, base.state) << target << " " << AlgoName(a) << " threads=" << threads << " v_step=" << v_step;
        }
      }
      EXPECT_EQ(RunWith(spec, base_opt).out, base.out) << "second run differs";
    }
  });
}

double MaxAbsDiff(const Bytes& a, const Bytes& b) {
  const auto* x = reinterpret_cast<const float*>(a.data());
  const auto* y = reinterpret_cast<const float*>(b.data());
  double m = 0;
  for (size_t i = 0; i < a.size() / 4; ++i) m = std::max(m, std::abs(double(x[i]) - y[i]));
  return m;
}

TEST(Determinism, BucketPaddingChangesNothing) {
  CaseSpec s;
  s.Nk = 1; s.Nv = 2; s.Dk = 65; s.Dv = 30; s.lens = {70, 5};
  for (Algo a : AllAlgos()) {
    Options opt = MakeCase(s).options();
    opt.algo = a;
    opt.dk_bucket = -1;  // generic path
    const Outputs2 generic = RunWith(s, opt);
    for (int bucket : {80, 96, 128}) {
      opt.dk_bucket = bucket;
      const Outputs2 r = RunWith(s, opt);
      EXPECT_LE(MaxAbsDiff(r.out, generic.out), 1e-6) << AlgoName(a) << " bucket " << bucket;
      EXPECT_LE(MaxAbsDiff(r.state, generic.state), 1e-6) << AlgoName(a) << " bucket " << bucket;
    }
  }
}

}  // namespace
}  // namespace cgdr::testing
