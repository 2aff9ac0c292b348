// The C API's argument structs filled from the C++ views of a call, for the
// tests that run one call through both APIs (c_api_parity_test,
// conformance_test). Fields a call does not use stay zero (absent).
#pragma once

#include <cstring>

#include "cgdr/cgdr.h"
#include "cgdr/cgdr.hpp"
#include "cgdr/decode.hpp"

namespace cgdr::testing {

// The dtype values of cgdr_dtype and cgdr::DType agree by construction
// (c_api_parity_test checks every dtype both ways).
inline cgdr_tensor ToC(const TensorView& v) {
  cgdr_tensor t;
  std::memset(&t, 0, sizeof t);
  t.data = v.data;
  t.dtype = static_cast<cgdr_dtype>(v.dtype);
  t.rank = v.rank;
  for (int i = 0; i < v.rank; ++i) t.shape[i] = v.shape[i];
  return t;
}

// The per-token tensors both calls take, and the raw gate both extras take.
template <class CArgs, class CppInputs>
void SetTokenTensors(const CppInputs& in, CArgs* a) {
  a->query = ToC(in.query);
  a->key = ToC(in.key);
  a->value = ToC(in.value);
  a->beta = ToC(in.beta);
  a->g = ToC(in.g);
}
template <class CExtra, class CppInputs>
void SetRawGate(const CppInputs& in, CExtra* e) {
  e->a = ToC(in.a);
  e->A_log = ToC(in.A_log);
  e->dt_bias = ToC(in.dt_bias);
}

inline cgdr_prefill_args ToCPrefill(const Inputs& in, const Outputs& out) {
  cgdr_prefill_args a;
  std::memset(&a, 0, sizeof a);
  SetTokenTensors(in, &a);
  a.initial_state = ToC(in.initial_state);
  a.seq_lens = ToC(in.seq_lens);
  a.out = ToC(out.out);
  a.final_state = ToC(out.final_state);
  return a;
}

// The serving arguments of prefill (docs/SPEC.md 6d).
inline cgdr_prefill_extra ToCPrefillExtra(const Inputs& in, const Outputs& out) {
  cgdr_prefill_extra e;
  std::memset(&e, 0, sizeof e);
  SetRawGate(in, &e);
  e.state_indices = ToC(in.state_indices);
  e.checkpoint_states = ToC(out.checkpoint_states);
  return e;
}

inline cgdr_decode_args ToCDecode(const DecodeInputs& in, const DecodeOutputs& out) {
  cgdr_decode_args a;
  std::memset(&a, 0, sizeof a);
  SetTokenTensors(in, &a);
  a.state_pool = ToC(in.state_pool);
  a.state_indices = ToC(in.state_indices);
  a.out = ToC(out.out);
  return a;
}

// The serving arguments of decode: the raw gate and verify's destinations.
inline cgdr_decode_extra ToCDecodeExtra(const DecodeInputs& in, const DecodeOutputs& out) {
  cgdr_decode_extra e;
  std::memset(&e, 0, sizeof e);
  SetRawGate(in, &e);
  e.dst_indices = ToC(in.dst_indices);
  e.states = ToC(out.states);
  return e;
}

}  // namespace cgdr::testing
