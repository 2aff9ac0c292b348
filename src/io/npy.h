// NumPy .npy files (format versions 1-3): the magic "\x93NUMPY", a version,
// a header length, a Python dict literal {'descr': '<f4', 'fortran_order':
// False, 'shape': (T, N, D), }, then the C-order data.
//
// Read: '<f2' (f16), '<f4' (f32), '<i4' (i32), '<i8' (narrowed to i32, e.g.
// torch's int64 seq_lens), '|V2' or '<V2' (bf16 as ml_dtypes saves it).
// Written: f16, f32 and i32 as themselves; bf16 widened to '<f4' (exact), so
// np.load and torch.from_numpy read it without ml_dtypes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "cgdr/cgdr.hpp"
#include "core/synthetic.h"

namespace cgdr {

struct NpyArray {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  Bytes data;  // 64-byte aligned, numel * DTypeSize(dtype) bytes
  TensorView view() const { return TensorView(data.data(), dtype, shape); }
};

// Reads and checks a whole file; the error (one line) names the file.
Status ReadNpy(const std::string& path, NpyArray* out);
// The same checks on bytes in memory (tests); `label` names them in errors.
Status ParseNpy(std::string_view label, const uint8_t* bytes, size_t size, NpyArray* out);

// Writes atomically (temporary file + rename).
Status WriteNpy(const std::string& path, const TensorView& t);
// The bytes WriteNpy writes (tests).
std::string SerializeNpy(const TensorView& t);

}  // namespace cgdr
