#include "core/dtype.h"


namespace cgdr {

const char* DTypeName(DType t) {
  switch (t) {
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
    case DType::kF32: return "f32";
    case DType::kI32: return "i32";
  }
  return "?";
}

bool ParseDType(const std::string& s, DType* out) {
  if (s == "f16" || s == "F16" || s == "float16") { *out = DType::kF16; return true; }
  if (s == "bf16" || s == "BF16" || s == "bfloat16") { *out = DType::kBF16; return true; }
  if (s == "f32" || s == "F32" || s == "float32") { *out = DType::kF32; return true; }
  if (s == "i32" || s == "I32" || s == "int32") { *out = DType::kI32; return true; }
  return false;
}

const char* StateLayoutName(StateLayout l) { return l == StateLayout::kVK ? "vk" : "kv"; }

const char* AlgoName(Algo a) {
  switch (a) {
    case Algo::kAuto: return "auto";
    case Algo::kRecurrent: return "recurrent";
    case Algo::kChunk16: return "chunk16";
    case Algo::kChunk32: return "chunk32";
    case Algo::kChunk64: return "chunk64";
    case Algo::kChunk128: return "chunk128";
  }
  return "?";
}

bool ParseAlgo(const std::string& s, Algo* out) {
  for (Algo a : {Algo::kAuto, Algo::kRecurrent, Algo::kChunk16, Algo::kChunk32, Algo::kChunk64, Algo::kChunk128}) {
    if (s == AlgoName(a)) { *out = a; return true; }
  }
  if (s == "1") { *out = Algo::kRecurrent; return true; }
  if (s == "16") { *out = Algo::kChunk16; return true; }
  if (s == "32") { *out = Algo::kChunk32; return true; }
  if (s == "64") { *out = Algo::kChunk64; return true; }
  if (s == "128") { *out = Algo::kChunk128; return true; }
  return false;
}

const char* PrecisionName(Precision p) {
  switch (p) {
    case Precision::kFp32: return "fp32";
    case Precision::kBf16: return "bf16";
    case Precision::kBf16x3: return "bf16x3";
    case Precision::kBf16x4: return "bf16x4";
    case Precision::kAuto: return "auto";
  }
  return "?";
}

bool ParsePrecision(const std::string& s, Precision* out) {
  for (Precision p : {Precision::kFp32, Precision::kBf16, Precision::kBf16x3, Precision::kBf16x4, Precision::kAuto}) {
    if (s == PrecisionName(p)) { *out = p; return true; }
  }
  return false;
}

const char* EngineName(Engine e) {
  switch (e) {
    case Engine::kAuto: return "auto";
    case Engine::kVector: return "vector";
    case Engine::kAmx: return "amx";
    case Engine::kAmxEmulated: return "amx-emu";
  }
  return "?";
}

bool ParseEngine(const std::string& s, Engine* out) {
  for (Engine e : {Engine::kAuto, Engine::kVector, Engine::kAmx, Engine::kAmxEmulated}) {
    if (s == EngineName(e)) { *out = e; return true; }
  }
  return false;
}

}  // namespace cgdr
