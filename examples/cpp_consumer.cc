// A C++ program using cgdr through its C++ API (cgdr/cgdr.hpp, cgdr/decode.hpp):
// a prefill of one 40-token sequence (grouped heads, explicit scale), then a
// decode step on a pool of states, checked against the FP64 recurrence
// (reference.h). CMakeLists.txt beside it builds it with
// find_package(cgdr CONFIG REQUIRED) and cgdr::cgdr (docs/library.md, "Install and link").
#include <cgdr/cgdr.h>  // cgdr_version(): the version of the library that runs
#include <cgdr/cgdr.hpp>
#include <cgdr/decode.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "reference.h"

namespace {

constexpr int kT = 40, kNk = 2, kNv = 4, kDk = 8, kDv = 5;
constexpr double kScale = 0.3;

std::vector<float> Filled(int n, int seed, float scale) {
  std::vector<float> x(n);
  example_fill(x.data(), n, seed, scale);
  return x;
}

bool Report(const cgdr::Status& st, const char* what) {
  if (!st.ok()) std::fprintf(stderr, "%s: %s\n", what, st.message().c_str());
  return st.ok();
}

}  // namespace

int main() {
  // The C++ API's structs may change from one minor version to the next (the
  // C API's do not): run with the library this program was built against.
  if (std::strcmp(cgdr_version(), CGDR_VERSION_STRING) != 0) {
    std::fprintf(stderr, "built against cgdr %s, running with %s\n", CGDR_VERSION_STRING, cgdr_version());
    return 1;
  }
  std::printf("cgdr %s, SIMD target %s\n", cgdr_version(), cgdr::ActiveTarget().c_str());
  using cgdr::DType;
  using cgdr::TensorView;

  // Prefill: one sequence of kT tokens, each key head shared by two value heads.
  const std::vector<float> q = Filled(kT * kNk * kDk, 1, 0.5f), k = Filled(kT * kNk * kDk, 2, 0.5f);
  const std::vector<float> v = Filled(kT * kNv * kDv, 3, 1.0f), h0 = Filled(kNv * kDv * kDk, 4, 0.2f);
  std::vector<float> beta(kT * kNv), g(kT * kNv), out(kT * kNv * kDv), state(kNv * kDv * kDk);
  example_fill_gates(beta.data(), g.data(), kT * kNv);
  const std::vector<int32_t> lens = {kT};

  cgdr::Inputs in;
  in.query = TensorView(q.data(), DType::kF32, {kT, kNk, kDk});
  in.key = TensorView(k.data(), DType::kF32, {kT, kNk, kDk});
  in.value = TensorView(v.data(), DType::kF32, {kT, kNv, kDv});
  in.beta = TensorView(beta.data(), DType::kF32, {kT, kNv});
  in.g = TensorView(g.data(), DType::kF32, {kT, kNv});
  in.initial_state = TensorView(h0.data(), DType::kF32, {1, kNv, kDv, kDk});
  in.seq_lens = TensorView(lens.data(), DType::kI32, {1});
  const cgdr::Outputs outs{TensorView(out.data(), DType::kF32, {kT, kNv, kDv}),
                           TensorView(state.data(), DType::kF32, {1, kNv, kDv, kDk})};
  cgdr::Options opt;
  opt.scale = kScale;
  opt.threads = 2;
  if (!Report(cgdr::Run(in, outs, opt), "cgdr::Run")) return 1;

  std::vector<double> want_out(out.size()), want_state(state.size());
  const example_case prefill = {1, kT, kNk, kNv, kDk, kDv, lens.data(), q.data(), k.data(), v.data(),
                                beta.data(), g.data(), h0.data(), kScale};
  reference_run(&prefill, want_out.data(), want_state.data());
  if (!example_close("prefill out", out.data(), want_out.data(), kT * kNv * kDv) ||
      !example_close("prefill final_state", state.data(), want_state.data(), kNv * kDv * kDk)) {
    return 1;
  }

  // Decode: two rows; row 0 continues the sequence from pool row 1, row 1 is
  // idle (index -1: its state is left alone, its out row set to 0).
  const int kRows = 2, kPool = 2;
  std::vector<float> pool(kPool * kNv * kDv * kDk, 0.0f);
  std::copy(state.begin(), state.end(), pool.begin() + kNv * kDv * kDk);
  const std::vector<int32_t> rows = {1, -1};
  const std::vector<float> q1 = Filled(kRows * kNk * kDk, 11, 0.5f), k1 = Filled(kRows * kNk * kDk, 12, 0.5f);
  const std::vector<float> v1 = Filled(kRows * kNv * kDv, 13, 1.0f);
  std::vector<float> beta1(kRows * kNv), g1(kRows * kNv), out1(kRows * kNv * kDv, 1.0f);
  example_fill_gates(beta1.data(), g1.data(), kRows * kNv);

  cgdr::DecodeInputs din;
  din.query = TensorView(q1.data(), DType::kF32, {kRows, kNk, kDk});
  din.key = TensorView(k1.data(), DType::kF32, {kRows, kNk, kDk});
  din.value = TensorView(v1.data(), DType::kF32, {kRows, kNv, kDv});
  din.beta = TensorView(beta1.data(), DType::kF32, {kRows, kNv});
  din.g = TensorView(g1.data(), DType::kF32, {kRows, kNv});
  din.state_pool = TensorView(pool.data(), DType::kF32, {kPool, kNv, kDv, kDk});
  din.state_indices = TensorView(rows.data(), DType::kI32, {kRows});
  const cgdr::DecodeOutputs dout{TensorView(out1.data(), DType::kF32, {kRows, kNv, kDv})};
  if (!Report(cgdr::DecodeStep(din, dout, opt), "cgdr::DecodeStep")) return 1;

  const int32_t one = 1;
  const example_case step = {1, 1, kNk, kNv, kDk, kDv, &one, q1.data(), k1.data(), v1.data(),
                             beta1.data(), g1.data(), state.data(), kScale};
  std::vector<double> want_out1(kNv * kDv), want_state1(state.size());
  reference_run(&step, want_out1.data(), want_state1.data());
  const std::vector<double> zeros(kNv * kDv, 0.0);
  if (!example_close("decode out", out1.data(), want_out1.data(), kNv * kDv) ||
      !example_close("decode state", pool.data() + kNv * kDv * kDk, want_state1.data(), kNv * kDv * kDk) ||
      !example_close("idle row's out", out1.data() + kNv * kDv, zeros.data(), kNv * kDv)) {
    return 1;
  }
  for (int i = 0; i < kNv * kDv * kDk; ++i) {
    if (pool[i] != 0.0f) {
      std::fprintf(stderr, "pool row 0 was written\n");
      return 1;
    }
  }
  std::printf("cpp_consumer: prefill and decode match the FP64 recurrence\n");
  return 0;
}
