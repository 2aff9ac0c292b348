// Case and result files (SPEC 7): one safetensors file per case, tensors named
// as in SPEC 2 (and the raw gate a, A_log, dt_bias of SPEC 6d), metadata
// `scale`, `state_layout`, `use_qk_l2norm`, `use_beta_sigmoid`. The
// *Files variants take any of the NPU's file kinds (io/tensor_files.h: a
// safetensors file, a directory of .npy files, a manifest of .bin tensors).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cgdr/cgdr.hpp"
#include "io/safetensors.h"
#include "io/tensor_files.h"

namespace cgdr {

// A case read from disk: the file's buffers and views into them.
struct LoadedCase {
  SafetensorsFile file;
  Inputs inputs;    // absent g / initial_state stay null views
  Options options;  // scale, state_layout, use_qk_l2norm, use_beta_sigmoid from the metadata; the rest default
};

// Reads a case. Errors (one line) name the file and the tensor or metadata key;
// shapes and dtypes are left to cgdr::Validate.
Status LoadCase(const std::string& path, LoadedCase* out);

// A case in any file kind, with the same checks and messages as LoadCase.
struct CaseFiles {
  TensorBundle files;
  Inputs inputs;
  Options options;
};
Status LoadCaseFiles(const std::string& path, CaseFiles* out);

// The tensors and metadata a case file holds (make-case uses them to write
// deliberately broken variants); SaveCase writes them atomically.
std::vector<SafetensorsWriteTensor> CaseTensors(const Inputs& in);
std::map<std::string, std::string> CaseMetadata(const Options& opt);
Status SaveCase(const std::string& path, const Inputs& in, const Options& opt);
Status SaveCaseFiles(FileKind kind, const std::string& path, const Inputs& in, const Options& opt);

// Output buffers shaped from the inputs (SPEC 2: out [T, Nv, Dv] as query;
// final_state [B, Nv, ...] as initial_state, else query), allocated only after
// the inputs have passed cgdr::Validate, so a bad case costs no memory.
struct OutputBuffers {
  struct Free {
    void operator()(void* p) const;
  };
  std::unique_ptr<void, Free> out, final_state;
  Outputs views;
  Problem problem;  // as Validate filled it
};
Status PrepareOutputs(const Inputs& in, const Options& opt, OutputBuffers* out);
// The validation PrepareOutputs does, alone: the inputs as cgdr::Run would see them.
Status ValidateInputs(const Inputs& in, const Options& opt, Problem* problem);

// A result file: `out` and `final_state`, metadata `state_layout`.
Status SaveResult(const std::string& path, const Outputs& out, const Options& opt);
Status SaveResultFiles(FileKind kind, const std::string& path, const Outputs& out, const Options& opt);

struct LoadedResult {
  SafetensorsFile file;
  Outputs outputs;
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
