// Drafts for the decode step's tests (decode_kda_test, verify_test): N
// sequences of K tokens as a prefill case whose [N * K, ...] tensors are the
// decode inputs, a state pool holding each sequence's initial state, K
// single steps to compare the token axis with (docs/SPEC.md 6d), and that
// comparison in each place the token axis can put its states.
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>
#include <vector>

#include "cgdr/cgdr.hpp"
#include "cgdr/decode.hpp"
#include "core/synthetic.h"

namespace cgdr::testing {

// Line-aligned storage, as a torch tensor's: destinations of whole vectors
// then take the token axis' streaming stores (a slot stride or a tail can
// still leave one unaligned: the copy path).
template <class T>
struct LineAligned {
  using value_type = T;
  LineAligned() = default;
  template <class U>
  LineAligned(const LineAligned<U>&) {}  // NOLINT: allocators convert implicitly
  T* allocate(size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t{64})); }
  void deallocate(T* p, size_t) { ::operator delete(p, std::align_val_t{64}); }
  bool operator==(const LineAligned&) const { return true; }
};
using Buf = std::vector<uint8_t, LineAligned<uint8_t>>;

// Rows {n K + j : n < N} of a [N * K, ...] tensor as a dense [N, ...]
// buffer (empty for an absent tensor).
Buf TokenRows(const TensorView& t, int64_t N, int64_t K, int64_t j);
// `t` [N * K, d...] seen as [N, K, d...] (the token axis).
TensorView WithTokenAxis(const TensorView& t, int64_t N, int64_t K);
// `like` with its data in b and N rows.
TensorView Over(Buf& b, const TensorView& like, int64_t N);

// N sequences of K tokens: a pool of P = N (K + 1) + 2 slots of dtype
// pool_dtype, `gap` elements between slots (Options::state_slot_stride), a
// marker byte in the gaps and the unused slots; sequence n's initial state
// (the case's, converted) in slot src[n] = P - 1 - n, above the N K slots
// 0 .. N K - 1 the tests write.
struct Draft {
  Case c;
  int64_t N = 0, K = 0, P = 0, slot = 0, stride = 0;
  DType pool_dtype = DType::kF32;
  bool no_a_log = false;    // the raw gate with the lower bound and no A_log
  bool no_dt_bias = false;  // the raw gate without dt_bias (0)
  // K = 1 without a token axis ([N, ...] rows, the plain decode step);
  // set: [N, 1, ...] as a verify call of one token.
  bool token_axis_for_one = false;
  Buf pool;
  std::vector<int32_t> src;

  Draft() = default;
  Draft(CaseSpec spec, int64_t n, int64_t k, DType pool_dt, int64_t gap = 0);

  Options options(int threads = 0) const;
  cgdr::Inputs PrefillInputs();
  TensorView PoolView(Buf& b) const;
  size_t SlotBytes() const { return static_cast<size_t>(slot) * DTypeSize(pool_dtype); }
  uint8_t* Slot(Buf& b, int64_t s) const { return b.data() + s * stride * static_cast<int64_t>(DTypeSize(pool_dtype)); }
  const uint8_t* Slot(const Buf& b, int64_t s) const {
    return b.data() + s * stride * static_cast<int64_t>(DTypeSize(pool_dtype));
  }
  size_t OutRowBytes() const { return static_cast<size_t>(c.spec.Nv * c.spec.Dv) * DTypeSize(c.spec.dtype); }
  bool TokenAxis() const { return K > 1 || token_axis_for_one; }
  // The decode call over the case's tensors and pool_buf.
  DecodeInputs Inputs(Buf& pool_buf);
  TensorView OutView(Buf& out) const;
};

// K single steps (no token axis) on a copy of the pool: out [N, K, Nv, Dv]
// and the state of every sequence after every token [n][j] (its slot's bytes).
struct SingleSteps {
  Buf out, pool;
  std::vector<std::vector<Buf>> states;
  SingleSteps(Draft& d, const Options& opt);
};

// Where the token axis puts the state after each token: pool slots named by
// dst_indices, a dense `states` output, or back into the source slot.
enum class Mode { kSlots, kDense, kInPlace };
const char* ModeName(Mode m);

// The decode call and K single steps agree bit for bit: out, and the state
// after every token where the mode puts it; nothing else in the pool moves.
// kSlots: token j of sequence n to slot n K + j, except that sequence 0's
// last token overwrites its own source and (N > 1) the entry after it is -1,
// not written.
void ExpectEqualsSingleSteps(Draft& d, Mode mode, int threads = 0);

}  // namespace cgdr::testing
