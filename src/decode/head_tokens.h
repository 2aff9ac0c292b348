// One (sequence, value head) item of a decode call as its kernel sees it
// (decode.cc): the K tokens' rows in FP32, and where the item's state comes
// from and where it goes after each token (docs/SPEC.md 6b, 6d).
#pragma once

#include <cstdint>

namespace cgdr {

struct HeadTokens {
  int64_t K = 1, Dk = 0, Dv = 0;
  int64_t row = 0;  // floats from one token's q, k, v or o row to the next (padded for the vectors)
  const float* q = nullptr;
  const float* k = nullptr;
  const float* v = nullptr;
  float* o = nullptr;
  const float* beta = nullptr;   // [K]
  const float* decay = nullptr;  // [K]: exp(g)
  // The per-channel gate (KDA, docs/SPEC.md 10): [K] rows of `row` floats,
  // exp(g) of each key channel of each token (layout kv: row i of S decays by
  // decay_ch[i]; vk: column i); null: every channel decays by decay[t].
  const float* decay_ch = nullptr;
  // Scratch of [K] rows of `row` floats that the kernels fill with each
  // token's key times its decays, a k_i (decay_ch[i] k_i per channel): the
  // first pass's (a S)^T k is S^T (a k), one multiply-add per element of S
  // instead of a multiply and a multiply-add.
  float* decayed_k = nullptr;
  float scale = 1.0f;
  const void* src = nullptr;      // the state in the pool, read once
  void* const* dst = nullptr;     // [K]: where the state after token j goes (null: nowhere)
  void* carry = nullptr;          // Dk * Dv elements of the pool's dtype between tokens
  float* acc = nullptr;           // layout kv: Dv floats padded
  float* u = nullptr;             // Dv floats padded: each value row's beta (v - S^T (a k))
  // Whether the kernels may take a row length of 128 as a compile-time
  // constant (decode.cc WithRowLength); false only in the tests that hold
  // those kernels to the run-time ones bit for bit.
  bool fixed_row_length = true;
  // One token whose state goes back where it came from: the plain decode step.
  bool InPlace() const { return K == 1 && dst[0] == src; }
};

}  // namespace cgdr
