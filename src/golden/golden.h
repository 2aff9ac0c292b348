// `cgdr golden`: the two CPU results an NPU operator test checks against
// (docs/golden.md):
// - golden: the exact path (cgdr::Run, FP32 products and state) on the inputs
//   widened to f32, written in f32;
// - benchmark: the NPU's precision profile (products on bf16 or fp16 operands
//   with FP32 accumulation, C = 64, FP32 state between chunks rounded to the
//   state dtype once, out rounded to its dtype per chunk), in the NPU's dtypes.
// Plus the case generator (the operator's documented domain and stress
// distributions) and planted faults: the benchmark with one classic NPU kernel
// bug, a stand-in for a broken NPU's output.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cgdr/cgdr.hpp"
#include "core/synthetic.h"
#include "io/case_file.h"

namespace cgdr::golden {

// The Cube's operand format in the benchmark profile.
enum class Operands : uint8_t { kBf16, kF16 };
const char* OperandsName(Operands o);  // "bf16", "f16"
bool ParseOperands(const std::string& s, Operands* o);

// Which code computes the benchmark. kAuto: the library's kernels for bf16
// operands (Precision::kBf16, Algo::kChunk64), the emulation (emulate.h) for
// fp16 operands, which the kernels do not have.
enum class Engine : uint8_t { kAuto, kKernels, kEmulation };
const char* EngineName(Engine e);  // "auto", "kernels", "emulation"
bool ParseEngine(const std::string& s, Engine* e);

struct Profile {
  Operands operands = Operands::kBf16;
  Engine engine = Engine::kAuto;
};
Engine EngineFor(const Profile& p);  // the engine kAuto stands for

// Inputs in buffers this object owns.
struct OwnedInputs {
  std::vector<Bytes> buffers;
  std::vector<int32_t> seq_lens;
  Inputs views;
};

// out and final_state in buffers this object owns (io/case_file.h).
using OwnedOutputs = OutputBuffers;

// The case as the NPU consumed it: query/key/value/beta in `io` and the state
// in `state` (kI32 for either: keep the case's own). A case without
// initial_state whose state dtype would differ from query's gets a zero one of
// that dtype, so that final_state comes out in it. g and seq_lens are kept
// (the views point into `in`). The inputs are validated first.
Status CastCase(const Inputs& in, const Options& opt, DType io, DType state, OwnedInputs* out);

// golden: cgdr::Run with FP32 products on the inputs widened to f32; out and
// final_state in f32. opt: scale, layout, l2norm, threads. The *Into forms
// write into the caller's outputs (f32 here; below, the shapes and dtypes
// PrepareOutputs gives), the others allocate them.
Status ComputeGolden(const Inputs& in, const Options& opt, OwnedOutputs* r);
Status GoldenInto(const Inputs& in, const Options& opt, const Outputs& out);
// golden's normwise relative error ||x - ref|| / ||ref|| against the FP64
// reference (reference/reference.h) on value head `head`: the "FP64-checked"
// of the golden path, cheap enough for long T (one head's sub-case).
struct HeadCheck {
  int64_t head = 0;
  double out_err = 0.0, state_err = 0.0;
};
Status CheckGoldenHead(const Inputs& in, const Options& opt, const Outputs& golden, int64_t head, HeadCheck* r);

// benchmark: the profile; out in query's dtype, final_state in the state's.
Status ComputeBenchmark(const Inputs& in, const Options& opt, const Profile& p, OwnedOutputs* r);
Status BenchmarkInto(const Inputs& in, const Options& opt, const Profile& p, const Outputs& out);

// Classic NPU kernel bugs (docs/golden.md), planted into the benchmark.
enum class Fault : uint8_t {
  kNone,
  kDroppedState,  // at one chunk boundary of the longest sequence the state is lost (zero)
  kTailMask,      // tail chunks not masked: the previous chunk's rows fill the padding and reach the state
  kSwappedHeads,  // value heads 0 and 1 written to each other's place
  kGSign,         // the decay applied as exp(-g)
};
const char* FaultName(Fault f);  // "none", "dropped-state", "tail-mask", "swapped-heads", "g-sign"
bool ParseFault(const std::string& s, Fault* f);
Status ComputeFaulty(const Inputs& in, const Options& opt, const Profile& p, Fault f, OwnedOutputs* r);
Status FaultyInto(const Inputs& in, const Options& opt, const Profile& p, Fault f, const Outputs& out);

// Generated cases: the operator's documented domain (q, k unit rows, v
// normal, beta in (0.05, 0.95), g in [-1, 0], a state in [-0.5, 0.5]) or a
// stress distribution.
enum class Distribution : uint8_t {
  kDomain,
  kStrongDecay,  // g in [-1, -0.9]: exp(G) down to e^-60 inside a chunk
  kLongT,        // one sequence of T = 65535 (the operator's maximum) unless T is given
  kEmpty,        // empty sequences between the others
};
const char* DistributionName(Distribution d);  // "domain", "strong-decay", "long-t", "empty"
bool ParseDistribution(const std::string& s, Distribution* d);
// The case spec of `d` over `base` (shapes, dtypes, seed, lengths).
CaseSpec GenerateSpec(Distribution d, CaseSpec base, bool lengths_given);

}  // namespace cgdr::golden
