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
//                                   f16, bf16 or f32 (math is FP32 either way);
//                                   slots Options::state_slot_stride apart (0: dense)
//   state_indices  [N]              int32; row n uses state_pool[state_indices[n]];
//                                   a negative index skips row n
// The pool is read and written in place; nothing else in it is touched.
//
// A token axis (docs/SPEC.md 6d, speculative decoding's verify): query and
// key [N, K, Nk, Dk], value [N, K, Nv, Dv], beta, g and a [N, K, Nv], out
// [N, K, Nv, Dv], K in 1..16: K tokens per sequence from the state in slot
// state_indices[n], read once. The state after token j is written to the
// pool slot dst_indices[n, j] (negative: not written), or to row n * K + j of
// the dense `states` [N * K, Nv, ...] (the pool's dtype); with neither, the
// state after the last token goes back to slot state_indices[n]. Bitwise
// equal to K single steps.
// The gate in the kernel (docs/SPEC.md 6d): a [N, (K,) Nv] with A_log [Nv]
// and dt_bias [Nv] (optional) instead of g; Options::use_beta_sigmoid: beta
// holds the raw b.
struct DecodeInputs {
  TensorView query, key, value, beta, g, state_pool, state_indices;
  TensorView a{}, A_log{}, dt_bias{};  // (default initialisers: aggregates of the fields above stay warning-free)
  TensorView dst_indices{};  // [N, K] int32 (K = 1 without a token axis)
};

// The output: out [N, Nv, Dv] (or [N, K, Nv, Dv]) in query's dtype. Rows
// whose index is negative are set to 0 (their state is left alone). states:
// optional per-token states [N * K, Nv, ...] (zeros for skipped rows).
struct DecodeOutputs {
  TensorView out;
  TensorView states{};
};

// Shapes and options of one decode call, derived from the views and checked.
struct DecodeProblem {
  int64_t N = 0, P = 0, Nk = 0, Nv = 0, Dk = 0, Dv = 0;
  int64_t K = 1;                    // tokens per sequence (the token axis), 1 without one
  DType dtype = DType::kF32;        // query/key/value/beta/out
  bool has_g = false;
  DType g_dtype = DType::kF32;
  bool has_gate = false;            // g from a, A_log, dt_bias
  bool per_channel_gate = false;    // g (or a) is [N, Nv, Dk] / [N, K, Nv, Dk]: KDA (docs/SPEC.md 10)
  DType state_dtype = DType::kF32;  // of the pool
  int64_t slot_stride = 0;          // elements between pool slots (resolved: Nv * Dk * Dv when dense)
  double scale = 0.0;               // resolved (never 0)
  Options options;                  // scale, use_qk_l2norm, state_layout, threads, check_values,
                                    // state_slot_stride, use_beta_sigmoid
};

// Checks shapes, dtypes, pointers, overlaps (the pool, out and states may not
// overlap any input or each other), options and the indices (each < P, no
// slot written twice or written by one row and read by another) and fills
// `problem`. Writes nothing else. Options::algo, v_step, dk_bucket,
// precision, engine and checkpoint_every are ignored by decode.
CGDR_EXPORT Status ValidateDecode(const DecodeInputs& in, const DecodeOutputs& out, const Options& opt, DecodeProblem* problem);

// ValidateDecode, then K recurrent steps for every row with a non-negative
// index, threaded over (sequence, value head). Nothing is written unless
// validation passes. Results are bitwise identical for any thread count, and
// for any K to K calls of one token.
CGDR_EXPORT Status DecodeStep(const DecodeInputs& in, const DecodeOutputs& out, const Options& opt);

}  // namespace cgdr
