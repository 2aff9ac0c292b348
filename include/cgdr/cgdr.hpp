// cgdr: the chunk gated delta rule operator (SPEC sections 1-3, 5-7).
// Public C++ surface: non-owning tensor views, options, status, plan and run.
// Its functions are exported from libcgdr.so (CGDR_EXPORT). The C++ API is
// source-compatible within a major version, but its structs (Options, ...)
// may grow in any minor version: C++ callers of the shared library rebuild
// when it changes minor version, or link libcgdr.a (README, "Use it from C /
// C++"). The C API (cgdr.h) is the stable ABI.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "cgdr/export.h"
#include "cgdr/version.h"

namespace cgdr {

enum class DType : uint8_t { kF16, kBF16, kF32, kI32 };

CGDR_EXPORT const char* DTypeName(DType t);          // "f16", "bf16", "f32", "i32"
// Bytes per element (inline: the kernels ask it per chunk and panel).
constexpr size_t DTypeSize(DType t) { return (t == DType::kF16 || t == DType::kBF16) ? 2 : 4; }
CGDR_EXPORT bool ParseDType(const std::string& s, DType* out);

// Non-owning view of a dense row-major tensor. `data == nullptr` marks an
// absent optional tensor (g, initial_state, final_state).
struct CGDR_EXPORT TensorView {
  static constexpr int kMaxRank = 4;
  void* data = nullptr;
  DType dtype = DType::kF32;
  int rank = 0;
  std::array<int64_t, kMaxRank> shape{};

  TensorView() = default;
  TensorView(const void* p, DType t, std::initializer_list<int64_t> dims);
  TensorView(const void* p, DType t, const std::vector<int64_t>& dims);
  bool present() const { return data != nullptr; }
  // Element count; saturates at INT64_MAX instead of wrapping (SPEC 3).
  int64_t numel() const;
  std::string ShapeString() const;  // "[2, 3, 4]"
};

enum class StateLayout : uint8_t { kVK, kKV };  // [B,Nv,Dv,Dk] (seeds) or [B,Nv,Dk,Dv] (fla)
CGDR_EXPORT const char* StateLayoutName(StateLayout l);

// Formulation (SPEC 5): chunk size C. kAuto lets the plan pick.
enum class Algo : uint8_t { kAuto = 0, kRecurrent = 1, kChunk16 = 16, kChunk32 = 32, kChunk64 = 64, kChunk128 = 128 };
CGDR_EXPORT const char* AlgoName(Algo a);  // "auto", "recurrent", "chunk16", ...
CGDR_EXPORT bool ParseAlgo(const std::string& s, Algo* out);

// Arithmetic of the chunked products (docs/SPEC.md 6c; the seeds' compensated
// FP16 hi/lo Cube products, SPEC 9). kFp32: FP32 FMA on the vector units.
// kBf16: operands rounded to bf16 (nearest even), FP32 accumulation. kBf16x3 /
// kBf16x4: every operand split x = hi + lo (both bf16), hi*hi + hi*lo + lo*hi
// (+ lo*lo) accumulated in FP32. The state stays FP32 between chunks in every
// mode. The recurrence (C = 1) keeps FP32 products in every mode.
// kAuto (default): the fastest engine and mode whose error meets SPEC 6 for
// the call's dtype: f16/bf16 inputs bf16x3 where the AMX engine runs (its
// error is within 2x that of rounding the FP64 answer to the output dtype),
// f32 inputs fp32 (2e-5 whatever the conditioning, which 16 significant bits
// of hi + lo cannot promise); the plan then picks C by its cost model.
enum class Precision : uint8_t { kFp32 = 0, kBf16 = 1, kBf16x3 = 2, kBf16x4 = 3, kAuto = 4 };
CGDR_EXPORT const char* PrecisionName(Precision p);  // "fp32", "bf16", "bf16x3", "bf16x4", "auto"
CGDR_EXPORT bool ParsePrecision(const std::string& s, Precision* out);

// Where the chunked products of the bf16 modes run (docs/SPEC.md 6c).
// kAuto (default): AMX tiles where the CPU and OS allow them, else the vector
// units. kVector: the vector units (vdpbf16ps where the CPU has AVX512_BF16,
// its exact emulation elsewhere). kAmx: AMX tiles where usable, else the
// vector units (the plan says why). kAmxEmulated: the AMX engine with
// TDPBF16PS emulated in portable code as Intel documents it: the tile
// engine's numerics on any CPU (tests; slow). fp32 products always run on
// the vector units (AMX multiplies 16-bit operands only).
enum class Engine : uint8_t { kAuto = 0, kVector = 1, kAmx = 2, kAmxEmulated = 3 };
CGDR_EXPORT const char* EngineName(Engine e);  // "auto", "vector", "amx", "amx-emu"
CGDR_EXPORT bool ParseEngine(const std::string& s, Engine* out);

struct Options {
  double scale = 0.0;            // 0 or NaN means 1/sqrt(Dk)
  bool use_qk_l2norm = false;    // divide q, k rows by sqrt(sum x^2 + qk_l2norm_eps)
  StateLayout state_layout = StateLayout::kVK;
  Algo algo = Algo::kAuto;       // force a formulation (tests, benchmarks)
  int threads = 0;               // 0: all CPUs this process may use (affinity mask, or OMP_NUM_THREADS)
  bool check_values = false;     // NaN/Inf in inputs, g > 0 (SPEC 3)
  int v_step = 0;                // 0: planner decides; else force V tile width
  int dk_bucket = 0;             // 0: planner decides; 64/80/96/128 force that bucket (>= Dk); -1 the generic path
  Precision precision = Precision::kAuto;  // products of the chunked formulations (C >= 16)
  Engine engine = Engine::kAuto;           // where the bf16 modes' products run
  // Serving (docs/SPEC.md 6d).
  int64_t checkpoint_every = 0;   // > 0: the state after every this many tokens of each sequence (Outputs::checkpoint_states)
  int64_t state_slot_stride = 0;  // elements from one slot (first index) of a state tensor or pool to the next; 0: dense
  bool use_beta_sigmoid = false;  // beta = sigmoid(the beta tensor): it holds the raw projection b
  double qk_l2norm_eps = 1e-6;    // eps of use_qk_l2norm (SPEC 1): fla's and transformers' 1e-6; vLLM-CPU's ops use 1e-5
  // The gate in the kernel with a lower bound (docs/SPEC.md 10, fla's KDA
  // gate): 0 (default) none, g = -exp(A_log) * softplus(a + dt_bias); else a
  // finite bound < 0 and g = bound * sigmoid(exp(A_log) * (a + dt_bias))
  // (A_log absent: sigmoid(a + dt_bias)), so bound < g < 0.
  double gate_lower_bound = 0.0;
};

// The inputs of SPEC 2. Shapes: query/key [T,Nk,Dk], value [T,Nv,Dv],
// beta [T,Nv], g [T,Nv] (optional), initial_state [B,Nv,Dv,Dk] or kv
// (optional), seq_lens [B] int32.
// KDA (docs/SPEC.md 10): g [T,Nv,Dk] is a log-decay per key channel (the
// per-channel gate); a [T,Nv,Dk] with dt_bias [Nv*Dk] its raw gate.
// Serving (docs/SPEC.md 6d), all optional:
//   a [T,Nv], A_log [Nv], dt_bias [Nv]: the gate in the kernel,
//     g = -exp(A_log) * softplus(a + dt_bias) (dt_bias absent: 0); not with g.
//   state_indices [B] int32: initial_state and final_state are pools
//     [P,Nv,...] and sequence b reads and writes slot state_indices[b]
//     (negative: start from zeros and write no final state).
struct Inputs {
  TensorView query, key, value, beta, g, initial_state, seq_lens;
  TensorView a{}, A_log{}, dt_bias{};  // (default initialisers: aggregates of the fields above stay warning-free)
  TensorView state_indices{};
};
// out [T,Nv,Dv] (dtype of query); final_state [B,Nv,...] (optional: absent
// means the caller does not want it; a pool with state_indices);
// checkpoint_states [sum over b of floor(len_b / checkpoint_every), Nv, ...]
// (f32 or the state's dtype): the state after every checkpoint_every tokens
// of each sequence, sequence after sequence (docs/SPEC.md 6d).
struct Outputs {
  TensorView out, final_state;
  TensorView checkpoint_states{};
};

enum class Code : uint8_t { kOk = 0, kInvalidArgument = 1, kResourceExhausted = 2, kInternal = 3 };

class Status {
 public:
  Status() = default;
  Status(Code c, std::string msg) : code_(c), message_(std::move(msg)) {}
  static Status Ok() { return {}; }
  static Status Invalid(std::string msg) { return {Code::kInvalidArgument, std::move(msg)}; }
  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

// Shapes and options of one call, derived from the views and checked (SPEC 3).
struct Problem {
  int64_t T = 0, B = 0, Nk = 0, Nv = 0, Dk = 0, Dv = 0;
  DType dtype = DType::kF32;        // query/key/value/beta/out
  bool has_g = false;
  DType g_dtype = DType::kF32;
  bool has_initial_state = false;
  DType state_dtype = DType::kF32;  // initial_state's, else query's
  bool want_final_state = false;
  double scale = 0.0;               // resolved (never 0)
  Options options;
  std::vector<int64_t> seq_lens;    // copied from the int32 tensor
  // Serving (docs/SPEC.md 6d).
  bool has_gate = false;            // g from a, A_log, dt_bias in the kernel
  // KDA (docs/SPEC.md 10): g (or a) is [T, Nv, Dk], one log-decay per key
  // channel, instead of [T, Nv].
  bool per_channel_gate = false;
  std::vector<int32_t> state_slots; // state_indices copied (empty: state b is slot b)
  int64_t slot_stride = 0;          // elements between state slots (Validate resolves 0 to Nv * Dk * Dv)
  int64_t checkpoints = 0;          // rows of checkpoint_states
  // The slot of sequence b's states: state_indices[b], or b without them.
  int64_t Slot(int64_t b) const { return state_slots.empty() ? b : state_slots[static_cast<size_t>(b)]; }
  int64_t SlotStride() const { return slot_stride > 0 ? slot_stride : Nv * Dk * Dv; }
};

constexpr int64_t kMaxHeadDim = 256;  // Dk and Dv (SPEC 5: generic path up to 256)
constexpr int64_t kMaxDraftTokens = 16;  // tokens per sequence of a decode call's token axis (docs/SPEC.md 6d)

// Checks every shape, dtype, pointer and (if asked) value of SPEC 3 and fills
// `problem`. Writes nothing anywhere else.
CGDR_EXPORT Status Validate(const Inputs& in, const Outputs& out, const Options& opt, Problem* problem);

struct Plan;  // cgdr/plan.hpp

// Runs the operator: Validate, MakePlan, execute. Nothing is written to any
// output before validation has passed.
CGDR_EXPORT Status Run(const Inputs& in, const Outputs& out, const Options& opt);

// Name of the SIMD target dispatch will use ("AVX3", "AVX2", "SSE4", "SCALAR").
CGDR_EXPORT std::string ActiveTarget();

// The CPU, for a figure's caption: CPUID's brand string (a VM's may be as
// vague as "AMD EPYC"), AMD's core generation where its family and model
// say it, and both numbers, e.g. "AMD EPYC, Zen 5 (family 26 model 2)".
// Zen 3, 4 and 5 hosts can share one brand string, and their figures differ.
CGDR_EXPORT std::string CpuDescription();

}  // namespace cgdr
