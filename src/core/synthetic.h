// Synthetic, well-conditioned problems (SPEC 6: q, k unit rows, beta in (0,1),
// g <= 0) owning their buffers. Used by the demo, the bench, tests and fuzzers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>
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
  float g_min = -0.3f;         // g drawn uniformly in [g_min, g_max]
  float g_max = 0.0f;
  uint64_t seed = 1;
  // Serving (docs/SPEC.md 6d): the raw gate instead of g (a [T, Nv] of
  // g_dtype, A_log and dt_bias [Nv] of gate_param_dtype, g = -exp(A_log)
  // softplus(a + dt_bias) in [-1.6, 0]), and beta as raw logits b in [-3, 3].
  bool raw_gate = false;
  bool beta_sigmoid = false;
  // KDA (docs/SPEC.md 10): g (or a) per key channel, [T, Nv, Dk], and with
  // raw_gate dt_bias [Nv * Dk]; gate_lower_bound != 0 (with raw_gate) draws
  // the bounded gate lower_bound * sigmoid(exp(A_log) (a + dt_bias)).
  bool per_channel_gate = false;
  double gate_lower_bound = 0.0;
  DType gate_param_dtype = DType::kF32;  // of A_log and dt_bias
};

// Storage on 64-byte lines, as torch and most allocators of large tensors
// give (malloc's large blocks start 16 bytes into a page): the kernel's
// streaming stores of out need line-aligned rows (Plan::stream_out).
template <class T>
struct LineAlignedAllocator {
  using value_type = T;
  static constexpr std::align_val_t kAlign{64};
  LineAlignedAllocator() = default;
  template <class U>
  LineAlignedAllocator(const LineAlignedAllocator<U>&) {}
  T* allocate(size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), kAlign)); }
  void deallocate(T* p, size_t) { ::operator delete(p, kAlign); }
  template <class U>
  bool operator==(const LineAlignedAllocator<U>&) const { return true; }
};
using Bytes = std::vector<uint8_t, LineAlignedAllocator<uint8_t>>;

struct Case {
  CaseSpec spec;
  int64_t T = 0;
  Bytes query, key, value, beta, g, initial_state, out, final_state;
  Bytes a, A_log, dt_bias;  // spec.raw_gate
  std::vector<int32_t> seq_lens;

  Inputs inputs();     // views into the buffers above
  Outputs outputs();
  Options options() const;  // scale, layout, l2norm, beta sigmoid from the spec
};

Case MakeCase(const CaseSpec& spec);

// Rounds each value to dtype and back (f32 unchanged).
double RoundTrip(double x, DType t);
// ||round(ref) - ref|| / ||ref||: the error of the FP64 answer itself stored in dtype (SPEC 6).
double RoundingError(const std::vector<double>& ref, DType t);

}  // namespace cgdr
