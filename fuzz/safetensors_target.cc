// Fuzz target (a): the safetensors case-file reader. The bytes are a file.
// Checked for every input:
//  - ParseSafetensors never crashes; errors are one non-empty line;
//  - accepted files: every tensor is aligned, non-null, sized numel * dtype,
//    inside the data buffer, and readable end to end (ASan checks the reads);
//  - the same bytes read from a file by LoadCase agree with the in-memory
//    parse; a loaded case either fails validation with a clear error or gets
//    output buffers (when small) and, for tiny problems, runs;
//  - writing the accepted tensors back (SerializeSafetensors) and parsing the
//    result gives the same names, dtypes, shapes, bytes and metadata.
#include <cstring>
#include <string>
#include <string_view>

#include "cgdr/cgdr.hpp"
#include "fuzz_common.h"
#include "fuzz_targets.h"
#include "io/case_file.h"
#include "io/safetensors.h"

namespace cgdr::fuzz {
namespace {

void CheckOneLine(const Status& s, const char* what) {
  FUZZ_CHECK(!s.message().empty(), std::string(what) + ": error without a message");
  FUZZ_CHECK(s.message().find('\n') == std::string::npos, std::string(what) + ": multi-line error: " + s.message());
}

// Every accepted tensor is a sound view; reading all its bytes must be safe.
void CheckTensors(const SafetensorsFile& f) {
  uint64_t checksum = 0;
  for (const SafetensorsTensor& t : f.tensors()) {
    FUZZ_CHECK(t.data != nullptr, t.name + ": null data");
    FUZZ_CHECK(reinterpret_cast<uintptr_t>(t.data) % DTypeSize(t.dtype) == 0, t.name + ": misaligned");
    FUZZ_CHECK(t.numel >= 0 && t.nbytes == t.numel * static_cast<int64_t>(DTypeSize(t.dtype)), t.name + ": size");
    FUZZ_CHECK(t.end >= t.begin && t.end - t.begin == static_cast<uint64_t>(t.nbytes), t.name + ": offsets");
    bool empty = false;
    for (int64_t d : t.shape) {
      FUZZ_CHECK(d >= 0, t.name + ": negative dimension");
      empty = empty || d == 0;
    }
    int64_t numel = empty ? 0 : 1;
    for (int64_t d : t.shape) numel = empty ? 0 : numel * d;  // no overflow: the bytes exist
    FUZZ_CHECK(numel == t.numel, t.name + ": numel does not match the shape");
    for (int64_t i = 0; i < t.nbytes; ++i) checksum += t.data[i];
    FUZZ_CHECK(f.Find(t.name) != nullptr, t.name + ": Find fails");
  }
  volatile uint64_t sink = checksum;
  (void)sink;
}

// Serialises the accepted tensors and parses the bytes again: same content.
void CheckRoundTrip(const SafetensorsFile& f) {
  std::vector<SafetensorsWriteTensor> out;
  for (const SafetensorsTensor& t : f.tensors()) out.emplace_back(t.name, t.dtype, t.shape, t.data);
  std::string bytes;
  const Status s = SerializeSafetensors(out, f.metadata(), &bytes);
  if (!s.ok()) {  // e.g. a name the writer refuses; it must say so clearly
    CheckOneLine(s, "serialize");
    return;
  }
  SafetensorsFile g;
  const Status r = ParseSafetensors("roundtrip", reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), &g);
  FUZZ_CHECK(r.ok(), "re-parse of a serialised file failed: " + r.message());
  FUZZ_CHECK(g.metadata() == f.metadata(), "metadata changed in the round trip");
  FUZZ_CHECK(g.tensors().size() == f.tensors().size(), "tensor count changed in the round trip");
  for (const SafetensorsTensor& t : f.tensors()) {
    const SafetensorsTensor* u = g.Find(t.name);
    FUZZ_CHECK(u != nullptr, t.name + ": lost in the round trip");
    FUZZ_CHECK(u->dtype == t.dtype && u->shape == t.shape && u->nbytes == t.nbytes, t.name + ": changed");
    FUZZ_CHECK(std::memcmp(u->data, t.data, static_cast<size_t>(t.nbytes)) == 0, t.name + ": bytes changed");
  }
}

constexpr int64_t kMaxOutputBytes = 8 << 20;  // PrepareOutputs allocates; keep the fuzzer's memory small
constexpr int64_t kMaxRunWork = 1 << 16;      // T * Nv * Dk * Dv for an actual run

// The case path of `cgdr run`: load, validate, prepare outputs, run.
void CheckCase(const uint8_t* data, size_t size, const SafetensorsFile* parsed) {
  LoadedCase c;
  const Status s = LoadCase(WriteToMemFile(data, size), &c);
  if (!s.ok()) {
    CheckOneLine(s, "LoadCase");
    return;
  }
  FUZZ_CHECK(parsed != nullptr, "LoadCase accepted a file ParseSafetensors rejects");
  FUZZ_CHECK(c.file.tensors().size() == parsed->tensors().size(), "LoadCase and ParseSafetensors disagree");

  // Output sizes the case implies, from shapes alone (as PrepareOutputs does).
  const Inputs& in = c.inputs;
  const int64_t T = in.query.shape[0], Dk = in.query.shape[2], Nv = in.value.shape[1], Dv = in.value.shape[2];
  const int64_t B = in.seq_lens.shape[0];
  const TensorView probe_out(nullptr, in.query.dtype, {T, Nv, Dv});
  const TensorView probe_state(nullptr, in.query.dtype, {B, Nv, Dk, Dv});
  const int64_t max_elems = kMaxOutputBytes / 4;  // numel saturates, never wraps
  if (probe_out.numel() > max_elems || probe_state.numel() > max_elems) return;

  OutputBuffers ob;
  const Status p = PrepareOutputs(in, c.options, &ob);
  if (!p.ok()) {
    CheckOneLine(p, "PrepareOutputs");
    return;
  }
  const Problem& pr = ob.problem;
  if (pr.T * pr.Nv * pr.Dk * pr.Dv > kMaxRunWork || pr.B * pr.Nv * pr.Dk * pr.Dv > kMaxRunWork) return;
  Options opt = c.options;
  opt.threads = 1;
  opt.check_values = true;  // file data is arbitrary: NaN, Inf, g > 0 must be refused, not run
  const Status r = Run(in, ob.views, opt);
  if (!r.ok()) CheckOneLine(r, "Run");
}

}  // namespace

int FuzzSafetensors(const uint8_t* data, size_t size) {
  SafetensorsFile f;
  const Status s = ParseSafetensors("fuzz", data, size, &f);
  if (s.ok()) {
    CheckTensors(f);
    CheckRoundTrip(f);
  } else {
    CheckOneLine(s, "ParseSafetensors");
  }
  CheckCase(data, size, s.ok() ? &f : nullptr);
  return 0;
}

}  // namespace cgdr::fuzz
