// cgdr decode step (SPEC 6b): one new token for each of N sequences, the
// recurrence of SPEC 1 applied once per (sequence, value head), states updated
// in place inside a pool addressed through an index per sequence (the way
// serving engines keep them).
#pragma once

#include <cstdint>

#include "cgdr/cgdr.hpp"

namespace cgdr {

// Shapes (row-major):
//   query, key     [N, Nk, Dk]      f16, bf16 or f32
//   value          [N, Nv, Dv]      same dtype as query
//   beta           [N, Nv]          same dtype as query
//   g              [N, Nv]          f16, bf16 or f32; optional (absent: g = 0)
//   state_pool     [P, Nv, Dv, Dk]  (layout vk) or [P, Nv, Dk, Dv] (layout kv);
//                                   f16, bf16 or f32 (math is FP32 either way)
//   state_indices  [N]              int32; row n uses state_pool[state_indices[n]];
//                                   a negative index skips row n
// The pool is read and written in place; nothing else in it is touched.
struct DecodeInputs {
  TensorView query, key, value, beta, g, state_pool, state_indices;
};

// The output: out [N, Nv, Dv] in query's dtype. Rows whose index is negative
// are set to 0 (their state is left alone).
struct DecodeOutputs {
  TensorView out;
};

// Shapes and options of one decode call, derived from the views and checked.
struct DecodeProblem {
  int64_t N = 0, P = 0, Nk = 0, Nv = 0, Dk = 0, Dv = 0;
  DType dtype = DType::kF32;        // query/key/value/beta/out
  bool has_g = false;
  DType g_dtype = DType::kF32;
  DType state_dtype = DType::kF32;  // of the pool
  double scale = 0.0;               // resolved (never 0)
  Options options;                  // scale, use_qk_l2norm, state_layout, threads, check_values
};

// Checks shapes, dtypes, pointers, overlaps (the pool and out may not overlap
// any input or each other), options and the indices (each < P, no duplicate
// among the non-negative ones) and fills `problem`. Writes nothing else.
// Options::algo and Options::v_step are ignored by decode.
CGDR_EXPORT Status ValidateDecode(const DecodeInputs& in, const DecodeOutputs& out, const Options& opt, DecodeProblem* problem);

// ValidateDecode, then one recurrent step for every row with a non-negative
// index, threaded over (sequence, value head). Nothing is written unless
// validation passes. Results are bitwise identical for any thread count.
CGDR_EXPORT Status DecodeStep(const DecodeInputs& in, const DecodeOutputs& out, const Options& opt);

}  // namespace cgdr
