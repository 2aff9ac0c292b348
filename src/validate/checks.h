// The checks of SPEC 3 that prefill (validate.cc) and decode
// (decode/decode_validate.cc) share: one tensor's presence, dtype, rank and
// shape; the per-token inputs and their heads; byte overlaps; the options
// both read; the value scans of check_values. Each failure names the tensor,
// what was expected and what was found.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "cgdr/cgdr.hpp"

namespace cgdr {

// Returns the Status of `expr` from the enclosing function if it failed.
#define CGDR_TRY(expr)           \
  do {                           \
    const Status s_ = (expr);    \
    if (!s_.ok()) return s_;     \
  } while (0)

Status CheckPresent(const char* name, const TensorView& t);
Status CheckFloatDType(const char* name, const TensorView& t);
Status CheckSameDType(const char* name, const TensorView& t, DType want, const char* why);
// Rank first (so later shape[] reads are meaningful), then sign and size.
Status CheckRank(const char* name, const TensorView& t, int rank, const char* dims);
Status CheckShape(const char* name, const TensorView& t, std::initializer_list<int64_t> want, const char* dims);
Status CheckShape(const char* name, const TensorView& t, const std::vector<int64_t>& want, const char* dims);

// query [X, Nk, Dk], key, value [X, Nv, Dv], beta [X, Nv] and g (optional)
// of one call, X the token axes: T tokens (prefill), N sequences of one
// token (decode) or N sequences of K draft tokens (decode with a token axis:
// X = N, K). The head counts and widths, and that key, value, beta share
// query's dtype.
enum class TokenAxis { kTokens, kSequences, kDraftTokens };
struct TokenDims {
  int64_t tokens = 0, Nk = 0, Nv = 0, Dk = 0, Dv = 0;
  int64_t per_sequence = 1;  // K: tokens per sequence (kDraftTokens), else 1
  DType dtype = DType::kF32;
  TokenAxis axis = TokenAxis::kTokens;
  // Leading dimensions X followed by `tail` (the shape of a per-token tensor).
  std::vector<int64_t> Shape(std::initializer_list<int64_t> tail) const;
  const char* HeadDims() const;  // "[T, Nv]", "[N, Nv]" or "[N, K, Nv]": beta's, g's and a's
  bool per_channel = false;      // g or a is [X, Nv, Dk] (KDA, docs/SPEC.md 10)
  std::string GateDims() const;  // g's and a's two shapes (per_channel: its one), for messages
};
Status CheckTokenInputs(TokenAxis axis, const TensorView& query, const TensorView& key, const TensorView& value,
                        const TensorView& beta, const TensorView& g, TokenDims* dims);

// The gate in the kernel (SPEC 6d): a shaped as beta (dims.HeadDims()) or
// per channel [X, Nv, Dk] (KDA, docs/SPEC.md 10: then dims->per_channel), any
// float dtype, with A_log [Nv] (optional with a lower bound) and optional
// dt_bias [Nv] ([Nv * Dk] per channel); never with g.
struct GateViews {
  const TensorView &a, &A_log, &dt_bias;
};
Status CheckGate(const GateViews& gate, const TensorView& g, double lower_bound, TokenDims* dims);

// Slot indices (int32, any shape) into pools of `slots` slots: each below
// `slots` (negative: none), and the non-negative ones distinct (two writers of
// one slot would race).
// `negative`: what a negative index means, for the message ("skip").
Status CheckSlotIndices(const char* name, const TensorView& idx, int64_t slots, const char* negative);
// Options::state_slot_stride for slots of `slot_elems` elements: 0 (dense) or
// at least slot_elems. Returns the resolved stride in *stride.
Status CheckSlotStride(const Options& opt, int64_t slot_elems, int64_t* stride);
// A state tensor [P, ...] whose slots are `stride` elements apart: its last
// slot ends within the element limit (64-bit offsets never wrap).
Status CheckSlotExtent(const char* name, const TensorView& t, int64_t stride);

// Byte range [begin, end) of a tensor, for overlap checks.
struct ByteRange {
  uintptr_t begin = 0, end = 0;
};
ByteRange BytesOf(const TensorView& t);
// A state tensor whose slots (first index) are `slot_stride` elements apart:
// from its first element to the end of its last slot.
ByteRange BytesOfSlots(const TensorView& t, int64_t slot_stride);
bool Overlap(ByteRange a, ByteRange b);

// Options both entry points read: state_layout, threads, scale.
Status CheckCommonOptions(const Options& opt);
// options.scale, or 1/sqrt(Dk) when it is 0 (or NaN: "not given").
double ResolveScale(double scale, int64_t Dk);

// "[i0, i1, ...]" of flat index `flat` in t's shape.
std::string IndexString(const TensorView& t, int64_t flat);

// check_values (SPEC 3): the first NaN/Inf of each present tensor, in order,
// then the first g > 0 (exp of it, or of its prefix sum, can overflow FP32).
// threads: Options::threads, for the scans of large tensors.
struct CheckedTensor {  // not NamedTensor: io/tensor_files.h has one (one program, one definition)
  const char* name;
  const TensorView* tensor;
};
Status CheckValues(std::initializer_list<CheckedTensor> tensors, const TensorView& g, int threads);

}  // namespace cgdr
