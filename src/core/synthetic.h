// Synthetic, well-conditioned problems (SPEC 6: q, k unit rows, beta in (0,1),
// g <= 0) owning their buffers. Used by the demo, the bench, tests and fuzzers.
#pragma once

#include <cstdint>
#include <vector>

#include "cgdr/cgdr.hpp"

namespace cgdr {

struct CaseSpec {
  int64_t Nk = 1, Nv = 1, Dk = 16, Dv = 16;
  std::vector<int32_t> lens{8};
  DType dtype = DType::kF32;
  bool has_g = true;
  DType g_dtype = DType::kF32;
  bool has_initial_state = true;
  DType state_dtype = DType::kF32;  // of initial_state (and final_state)
  bool want_final_state = true;
  StateLayout layout = StateLayout::kVK;
  bool use_qk_l2norm = false;  // if true, q/k rows are random, not unit
  double scale = 0.0;
  float g_min = -0.3f;         // g drawn uniformly in [g_min, 0]
  uint64_t seed = 1;
};

struct Case {
  CaseSpec spec;
  int64_t T = 0;
  std::vector<uint8_t> query, key, value, beta, g, initial_state, out, final_state;
  std::vector<int32_t> seq_lens;

  Inputs inputs();     // views into the buffers above
  Outputs outputs();
  Options options() const;  // scale, layout, l2norm from the spec
};

Case MakeCase(const CaseSpec& spec);

// Rounds each value to dtype and back (f32 unchanged).
double RoundTrip(double x, DType t);
// ||round(ref) - ref|| / ||ref||: the error of the FP64 answer itself stored in dtype (SPEC 6).
double RoundingError(const std::vector<double>& ref, DType t);

}  // namespace cgdr
