// Scalar conversions between f32 and the 16-bit storage types. Highway 1.0.3
// has no scalar f16 helpers and its bf16 demotion truncates, so both
// directions are written here, rounding to nearest even (issue 5).
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "cgdr/cgdr.hpp"

namespace cgdr {

inline uint32_t F32Bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline float F32FromBits(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

inline float BF16ToF32(uint16_t h) { return F32FromBits(static_cast<uint32_t>(h) << 16); }

inline uint16_t F32ToBF16(float f) {
  const uint32_t u = F32Bits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  const uint32_t rounding = 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding) >> 16);
}

inline float F16ToF32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  const uint32_t man = h & 0x3FFu;
  if (exp == 0x1F) return F32FromBits(sign | 0x7F800000u | (man << 13));  // Inf/NaN
  if (exp != 0) return F32FromBits(sign | ((exp + 112u) << 23) | (man << 13));
  // Zero or subnormal: man * 2^-24 is exact in f32.
  const float mag = static_cast<float>(man) * 5.9604644775390625e-8f;
  return sign ? -mag : mag;
}

inline uint16_t F32ToF16(float f) {
  const uint32_t u = F32Bits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) return sign | 0x7E00u;           // NaN
  if (abs >= 0x477FF000u) return sign | 0x7C00u;          // rounds to >= 65520: Inf
  if (abs >= 0x38800000u) {                               // normal f16 range (>= 2^-14)
    const uint32_t rounded = abs + 0xFFFu + ((abs >> 13) & 1u);
    return sign | static_cast<uint16_t>((rounded - 0x38000000u) >> 13);
  }
  if (abs < 0x33000000u) return sign;                     // below half the smallest subnormal
  // Subnormal: shift the full significand, round to nearest even.
  const uint32_t exp = abs >> 23;
  const uint32_t man = (abs & 0x7FFFFFu) | 0x800000u;
  const uint32_t shift = 126u - exp;                      // 14..24
  const uint32_t half = 1u << (shift - 1);
  const uint32_t rem = man & ((1u << shift) - 1u);
  uint32_t q = man >> shift;
  if (rem > half || (rem == half && (q & 1u))) ++q;
  return sign | static_cast<uint16_t>(q);
}

// Element i of a tensor of dtype t, widened to float (f16/bf16/f32 only).
inline float LoadAsF32(const void* base, DType t, int64_t i) {
  switch (t) {
    case DType::kF16: return F16ToF32(static_cast<const uint16_t*>(base)[i]);
    case DType::kBF16: return BF16ToF32(static_cast<const uint16_t*>(base)[i]);
    case DType::kF32: return static_cast<const float*>(base)[i];
    default: return 0.0f;
  }
}

// A whole tensor (f16/bf16/f32) widened to double, for comparing it with an
// FP64 reference.
inline std::vector<double> TensorAsDoubles(const TensorView& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = LoadAsF32(t.data, t.dtype, static_cast<int64_t>(i));
  return v;
}

// Elements [offset, offset + n) of a tensor of dtype t (f16/bf16/f32), widened:
// a row without a dtype switch per element.
inline void LoadRowAsF32(const void* base, DType t, int64_t offset, int64_t n, float* dst) {
  const auto* h = static_cast<const uint16_t*>(base) + offset;
  switch (t) {
    case DType::kF16: for (int64_t i = 0; i < n; ++i) dst[i] = F16ToF32(h[i]); break;
    case DType::kBF16: for (int64_t i = 0; i < n; ++i) dst[i] = BF16ToF32(h[i]); break;
    case DType::kF32:
      std::memcpy(dst, static_cast<const float*>(base) + offset, static_cast<size_t>(n) * sizeof(float));
      break;
    default: break;
  }
}

inline void StoreFromF32(void* base, DType t, int64_t i, float v) {
  switch (t) {
    case DType::kF16: static_cast<uint16_t*>(base)[i] = F32ToF16(v); break;
    case DType::kBF16: static_cast<uint16_t*>(base)[i] = F32ToBF16(v); break;
    case DType::kF32: static_cast<float*>(base)[i] = v; break;
    default: break;
  }
}

// src[0, n) into elements [offset, offset + n) of a tensor of dtype t
// (f16/bf16/f32), each rounded as StoreFromF32 rounds it, without a dtype
// switch per element.
inline void StoreRowFromF32(void* base, DType t, int64_t offset, int64_t n, const float* src) {
  auto* h = static_cast<uint16_t*>(base) + offset;
  switch (t) {
    case DType::kF16: for (int64_t i = 0; i < n; ++i) h[i] = F32ToF16(src[i]); break;
    case DType::kBF16: for (int64_t i = 0; i < n; ++i) h[i] = F32ToBF16(src[i]); break;
    case DType::kF32:
      std::memcpy(static_cast<float*>(base) + offset, src, static_cast<size_t>(n) * sizeof(float));
      break;
    default: break;
  }
}

}  // namespace cgdr
