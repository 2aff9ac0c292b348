// The checks of SPEC 3 that prefill (validate.cc) and decode
// (decode/decode_validate.cc) share: one tensor's presence, dtype, rank and
// shape; the per-token inputs and their heads; byte overlaps; the options
// both read; the value scans of check_values. Each failure names the tensor,
// what was expected and what was found.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

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

// query [X, Nk, Dk], key, value [X, Nv, Dv], beta [X, Nv] and g (optional)
// of one call, X the token axis: T tokens (prefill) or N sequences of one
// token (decode). The head counts and widths, and that key, value, beta
// share query's dtype.
enum class TokenAxis { kTokens, kSequences };
struct TokenDims {
  int64_t tokens = 0, Nk = 0, Nv = 0, Dk = 0, Dv = 0;
  DType dtype = DType::kF32;
};
Status CheckTokenInputs(TokenAxis axis, const TensorView& query, const TensorView& key, const TensorView& value,
                        const TensorView& beta, const TensorView& g, TokenDims* dims);

// Byte range [begin, end) of a tensor, for overlap checks.
struct ByteRange {
  uintptr_t begin = 0, end = 0;
};
ByteRange BytesOf(const TensorView& t);
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
