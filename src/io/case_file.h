// Case and result files (SPEC 7): one safetensors file per case, tensors named
// as in SPEC 2 (and the serving tensors of SPEC 6d: the raw gate a, A_log,
// dt_bias; state_indices, dst_indices), metadata `scale`, `state_layout`,
// `use_qk_l2norm`, `qk_l2norm_eps`, `use_beta_sigmoid`, `gate_lower_bound`,
// `checkpoint_every`, `output_states`. KDA's per-channel gate (docs/SPEC.md
// 10) is g or a of rank 3 [T, Nv, Dk] (decode [N, (K,) Nv, Dk]), dt_bias
// [Nv * Dk]: the shapes say it, Validate reads them.
// A case without seq_lens but with state_indices is a decode case (SPEC 6b,
// 6d.2): its initial_state is the state pool. The *Files variants take any of
// the NPU's file kinds (io/tensor_files.h: a safetensors file, a directory of
// .npy files, a manifest of .bin tensors).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cgdr/cgdr.hpp"
#include "io/safetensors.h"
#include "io/tensor_files.h"

#include "cgdr/decode.hpp"

namespace cgdr {

// A decode case (docs/SPEC.md 6b, 6d.2): query [N, (K,) Nk, Dk] ...,
// state_indices [N], the pool in initial_state [P, Nv, ...], optional
// dst_indices [N, K]; metadata output_states asks for the dense per-token states.
struct DecodeCase {
  bool present = false;
  DecodeInputs inputs;
  bool output_states = false;
};

// A case read from disk: the file's buffers and views into them.
struct LoadedCase {
  SafetensorsFile file;
  Inputs inputs;    // absent g / initial_state stay null views
  Options options;  // scale, state_layout, use_qk_l2norm(_eps), use_beta_sigmoid, gate_lower_bound, checkpoint_every
  DecodeCase decode;  // present: a decode case (inputs.seq_lens absent)
};

// Reads a case. Errors (one line) name the file and the tensor or metadata key;
// shapes and dtypes are left to cgdr::Validate.
Status LoadCase(const std::string& path, LoadedCase* out);

// A case in any file kind, with the same checks and messages as LoadCase.
struct CaseFiles {
  TensorBundle files;
  Inputs inputs;
  Options options;
  DecodeCase decode;
};
Status LoadCaseFiles(const std::string& path, CaseFiles* out);

// The tensors and metadata a case file holds (make-case uses them to write
// deliberately broken variants); SaveCase writes them atomically.
std::vector<SafetensorsWriteTensor> CaseTensors(const Inputs& in);
std::map<std::string, std::string> CaseMetadata(const Options& opt);
Status SaveCase(const std::string& path, const Inputs& in, const Options& opt);
Status SaveCaseFiles(FileKind kind, const std::string& path, const Inputs& in, const Options& opt);

// Output buffers shaped from the inputs (SPEC 2: out [T, Nv, Dv] as query;
// final_state [B, Nv, ...] as initial_state, else query; with state_indices a
// copy of the pool initial_state, whose named slots the run overwrites;
// checkpoint_states f32 with Options::checkpoint_every), allocated only after
// the inputs have passed cgdr::Validate, so a bad case costs no memory.
struct OutputBuffers {
  struct Free {
    void operator()(void* p) const;
  };
  std::unique_ptr<void, Free> out, final_state, checkpoint_states;
  Outputs views;
  Problem problem;  // as Validate filled it
};
Status PrepareOutputs(const Inputs& in, const Options& opt, OutputBuffers* out);
// The validation PrepareOutputs does, alone: the inputs as cgdr::Run would see them.
Status ValidateInputs(const Inputs& in, const Options& opt, Problem* problem);

// A decode case's outputs: out (value's shape, query's dtype), the pool after
// the call (a copy of the case's pool, which DecodeStep updates: `inputs`
// points at it) and, with output_states, states [N * K, Nv, ...] in the
// pool's dtype. Validated (ValidateDecode) before anything is allocated.
struct DecodeBuffers {
  std::unique_ptr<void, OutputBuffers::Free> out, pool, states;
  DecodeInputs inputs;    // the case's, with state_pool the copy
  DecodeOutputs views;
  TensorView final_pool;  // the pool after the call, for the result's final_state
  DecodeProblem problem;
};
Status PrepareDecodeOutputs(const DecodeCase& c, const Options& opt, DecodeBuffers* out);

// A result file: `out` and `final_state` (and `checkpoint_states` with
// checkpoints), metadata `state_layout` (and `checkpoint_every`).
Status SaveResult(const std::string& path, const Outputs& out, const Options& opt);
// A decode case's result: `out`, `final_state` (the pool after the call) and `states` (output_states).
Status SaveDecodeResult(const std::string& path, const DecodeBuffers& d, const Options& opt);
Status SaveResultFiles(FileKind kind, const std::string& path, const Outputs& out, const Options& opt);

struct LoadedResult {
  SafetensorsFile file;
  Outputs outputs;
  TensorView states;  // a decode result's per-token states (output_states)
};
Status LoadResult(const std::string& path, LoadedResult* out);

// A result in any file kind; final_state may be absent (an operator run
// without output_final_state).
struct ResultFiles {
  TensorBundle files;
  Outputs outputs;
};
Status LoadResultFiles(const std::string& path, ResultFiles* out);

}  // namespace cgdr
