// The decode step's token axis (docs/SPEC.md 6d: speculative decoding's
// verify): K tokens per sequence from one read of the state give, bit for
// bit, the outputs and states of K single steps, written to the pool slots
// the caller names, to a dense output or back in place; per layout, pool and
// input dtype, gate in the kernel, slot stride and thread count; skipped
// rows and unwritten tokens; every bad input rejected before anything is
// written.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <new>
#include <string>
#include <tuple>
#include <vector>

#include "cgdr/cgdr.hpp"
#include "cgdr/decode.hpp"
#include "core/dtype.h"
#include "core/synthetic.h"
#include "reference/reference.h"
#include "draft_util.h"
#include "test_util.h"

namespace cgdr {
namespace {

using testing::Buf;
using testing::Draft;
using testing::ExpectEqualsSingleSteps;
using testing::Mode;
using testing::ModeName;

CaseSpec VerifySpec(StateLayout layout, DType dt, bool gate, bool sigmoid) {
  CaseSpec s;
  s.Nk = 2;
  s.Nv = 4;
  s.Dk = 37;  // odd widths: the kernels' scalar tails too
  s.Dv = 21;
  s.layout = layout;
  s.dtype = dt;
  s.use_qk_l2norm = true;
  s.raw_gate = gate;
  s.beta_sigmoid = sigmoid;
  s.seed = 31;
  return s;
}

// A verify call has its token axis even for one token ([N, 1, ...]).
Draft VerifyDraft(const CaseSpec& spec, int64_t n, int64_t k, DType pool_dt, int64_t gap = 0) {
  Draft d(spec, n, k, pool_dt, gap);
  d.token_axis_for_one = true;
  return d;
}

TEST(Verify, EqualsSingleStepsBitwise) {
  for (StateLayout layout : {StateLayout::kVK, StateLayout::kKV}) {
    for (const auto& [dt, pool_dt] : {std::tuple{DType::kF32, DType::kF32}, std::tuple{DType::kBF16, DType::kBF16},
                                      std::tuple{DType::kF16, DType::kF16}, std::tuple{DType::kBF16, DType::kF32}}) {
      for (Mode mode : {Mode::kSlots, Mode::kDense, Mode::kInPlace}) {
        for (int64_t K : {1, 4, 16}) {
          SCOPED_TRACE(std::string(StateLayoutName(layout)) + " " + DTypeName(dt) + " pool " + DTypeName(pool_dt) + " " +
                       ModeName(mode) + " K " + std::to_string(K));
          Draft d = VerifyDraft(VerifySpec(layout, dt, K == 4, K != 1), 3, K, pool_dt);
          ExpectEqualsSingleSteps(d, mode, 0);
        }
      }
    }
  }
}

// Rows of whole vectors in aligned slots: each token's state streams to its
// destination in the pass that computes it (decode.cc VerifyRowsVK).
TEST(Verify, StreamedDestinationsBitwise) {
  for (StateLayout layout : {StateLayout::kVK, StateLayout::kKV}) {
    for (DType pool_dt : {DType::kF32, DType::kBF16, DType::kF16}) {
      SCOPED_TRACE(std::string(StateLayoutName(layout)) + " pool " + DTypeName(pool_dt));
      CaseSpec spec = VerifySpec(layout, DType::kF32, true, true);
      spec.Dk = 32;
      spec.Dv = 12;
      Draft d = VerifyDraft(spec, 3, 4, pool_dt);
      ExpectEqualsSingleSteps(d, Mode::kSlots, 0);
      ExpectEqualsSingleSteps(d, Mode::kDense, 0);
    }
  }
}

TEST(Verify, BitwiseAcrossThreadsAndWithASlotStride) {
  for (StateLayout layout : {StateLayout::kVK, StateLayout::kKV}) {
    for (int threads : {1, 2, 3}) {
      SCOPED_TRACE(std::string(StateLayoutName(layout)) + " threads " + std::to_string(threads));
      CaseSpec spec = VerifySpec(layout, DType::kBF16, true, true);
      spec.Dk = 64;
      spec.Dv = 48;  // big enough to run on several threads
      Draft d = VerifyDraft(spec, 5, 4, DType::kBF16, /*gap=*/40);
      ExpectEqualsSingleSteps(d, Mode::kSlots, threads);
      ExpectEqualsSingleSteps(d, Mode::kDense, threads);
    }
  }
}

// A skipped row (negative source): out and its dense states are zeros, no slot is written.
TEST(Verify, SkippedRows) {
  Draft d = VerifyDraft(VerifySpec(StateLayout::kKV, DType::kF32, false, false), 3, 4, DType::kF32);
  Buf pool = d.pool;
  DecodeInputs in = d.Inputs(pool);
  d.src[1] = -1;
  std::vector<int32_t> dst{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  in.dst_indices = TensorView(dst.data(), DType::kI32, {3, 4});
  Buf out(static_cast<size_t>(3 * 4 * 4 * 21) * 4, 0xFF);
  DecodeOutputs o;
  o.out = TensorView(out.data(), DType::kF32, {3, 4, 4, 21});
  ASSERT_TRUE(DecodeStep(in, o, d.options()).ok());
  for (int64_t j = 0; j < 4; ++j)
    for (int64_t i = 0; i < 4 * 21; ++i) EXPECT_EQ(LoadAsF32(out.data(), DType::kF32, (4 + j) * 4 * 21 + i), 0.0f);
  for (int64_t s = 4; s < 8; ++s) EXPECT_EQ(std::memcmp(d.Slot(pool, s), d.Slot(d.pool, s), d.SlotBytes()), 0) << "slot " << s;
}

// The gate in the kernel and beta's sigmoid in decode meet SPEC 6 against the
// FP64 recurrence (K tokens of N sequences as a prefill of N sequences).
TEST(Verify, GateMeetsSpec6) {
  for (StateLayout layout : {StateLayout::kVK, StateLayout::kKV}) {
    Draft d = VerifyDraft(VerifySpec(layout, DType::kF32, true, true), 3, 5, DType::kF32);
    Buf pool = d.pool;
    DecodeInputs in = d.Inputs(pool);
    Buf out(static_cast<size_t>(3 * 5 * 4 * 21) * 4), states(static_cast<size_t>(15) * d.SlotBytes());
    DecodeOutputs o;
    o.out = TensorView(out.data(), DType::kF32, {3, 5, 4, 21});
    const TensorView pv = d.PoolView(pool);
    o.states = TensorView(states.data(), DType::kF32, {15, 4, pv.shape[2], pv.shape[3]});
    ASSERT_TRUE(DecodeStep(in, o, d.options()).ok());
    Problem p;
    ASSERT_TRUE(Validate(d.c.inputs(), d.c.outputs(), d.options(), &p).ok());
    ReferenceResult ref;
    ReferenceRun(d.c.inputs(), p, &ref);
    EXPECT_LE(RelativeError(o.out, ref.out, 4), 2e-5);
    // The last token's states are the sequences' final states.
    Buf last;
    for (int64_t n = 0; n < 3; ++n) last.insert(last.end(), states.begin() + (n * 5 + 4) * d.SlotBytes(), states.begin() + (n * 5 + 5) * d.SlotBytes());
    EXPECT_LE(RelativeError(TensorView(last.data(), DType::kF32, {3, 4, pv.shape[2], pv.shape[3]}), ref.final_state, 4), 2e-5);
  }
}

// ---------------------------------------------------------------- bad input

struct Fixture {
  Draft d;
  Buf pool, out, states;
  std::vector<int32_t> dst;
  DecodeInputs in;
  DecodeOutputs o;
  Fixture() : d(VerifySpec(StateLayout::kVK, DType::kF32, true, false), 3, 2, DType::kF32), pool(d.pool) {
    in = d.Inputs(pool);
    dst = {0, 1, 2, 3, 4, 5};  // P = 11; sources 10, 9, 8
    in.dst_indices = TensorView(dst.data(), DType::kI32, {3, 2});
    out.assign(static_cast<size_t>(3 * 2 * 4 * 21) * 4, 0xA5);
    o.out = TensorView(out.data(), DType::kF32, {3, 2, 4, 21});
    states.assign(static_cast<size_t>(6) * d.SlotBytes(), 0xA5);
  }
  void UseStates() {
    in.dst_indices = TensorView();
    o.states = TensorView(states.data(), DType::kF32, {6, 4, 21, 37});
  }
  std::vector<Buf> Written() const { return {pool, out, states}; }
};

void ExpectRejected(const std::function<void(Fixture&)>& mutate, std::initializer_list<const char*> needles) {
  Fixture f;
  mutate(f);
  const std::vector<Buf> before = f.Written();
  const Status s = DecodeStep(f.in, f.o, f.d.options());
  ASSERT_FALSE(s.ok()) << "accepted bad input; expected an error with '" << *needles.begin() << "'";
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  for (const char* n : needles) EXPECT_NE(s.message().find(n), std::string::npos) << "message: " << s.message() << " lacks '" << n << "'";
  EXPECT_EQ(s.message().find('\n'), std::string::npos) << "one line: " << s.message();
  EXPECT_TRUE(f.Written() == before) << "written before the error: " << s.message();
}

TEST(VerifyValidate, GoodInputPasses) {
  Fixture f;
  EXPECT_TRUE(DecodeStep(f.in, f.o, f.d.options()).ok());
  f.UseStates();
  EXPECT_TRUE(DecodeStep(f.in, f.o, f.d.options()).ok());
}

TEST(VerifyValidate, TokenAxis) {
  ExpectRejected([](Fixture& f) { f.in.key.shape[1] = 3; }, {"key: expected shape [N, K, Nk, Dk] as query = [3, 2, 2, 37], got [3, 3, 2, 37]"});
  ExpectRejected([](Fixture& f) { f.in.value.rank = 3; }, {"value: expected rank 4 [N, K, Nv, Dv]"});
  ExpectRejected([](Fixture& f) { f.in.beta.shape[1] = 1; }, {"beta: expected shape [N, K, Nv] = [3, 2, 4], got [3, 1, 4]"});
  ExpectRejected([](Fixture& f) { f.in.a.shape[2] = 2; }, {"a: expected shape [N, K, Nv] = [3, 2, 4], got [3, 2, 2]"});
  ExpectRejected([](Fixture& f) { f.o.out.rank = 3; }, {"out: expected rank 4 [N, K, Nv, Dv]"});
  ExpectRejected([](Fixture& f) {
    for (TensorView* t : {&f.in.query, &f.in.key, &f.in.value}) t->shape[1] = 17;
  }, {"query: expected K in [1, 16] tokens per sequence"});
}

TEST(VerifyValidate, Destinations) {
  ExpectRejected([](Fixture& f) { f.dst[3] = 11; }, {"dst_indices: expected indices < P = 11", "got 11 at index [1, 1]"});
  ExpectRejected([](Fixture& f) { f.dst[5] = 1; }, {"dst_indices: expected distinct non-negative indices (a slot written once), got 1 at indices [0, 1] and [2, 1]"});
  ExpectRejected([](Fixture& f) { f.dst[0] = 9; }, {"dst_indices: slot 9 at index [0, 0] is the source of row 1 (state_indices[1]); a row may overwrite only its own source"});
  ExpectRejected([](Fixture& f) { f.dst[5] = -2; f.d.src[0] = 11; }, {"state_indices: expected indices < P = 11 (pool size) or negative (skip), got 11"});
  ExpectRejected([](Fixture& f) { f.in.dst_indices.shape[1] = 3; }, {"dst_indices: expected shape [N, K] with N, K of query = [3, 2], got [3, 3]"});
  ExpectRejected([](Fixture& f) { f.in.dst_indices.dtype = DType::kF32; }, {"dst_indices: expected dtype i32"});
  ExpectRejected([](Fixture& f) { f.UseStates(); f.in.dst_indices = TensorView(f.dst.data(), DType::kI32, {3, 2}); },
                 {"states: expected either dst_indices (states into pool slots) or states (dense), got both"});
  ExpectRejected([](Fixture& f) { f.UseStates(); f.o.states.shape[0] = 3; }, {"states: expected shape [N * K, Nv, Dv, Dk] (layout vk) = [6, 4, 21, 37], got [3, 4, 21, 37]"});
  ExpectRejected([](Fixture& f) { f.UseStates(); f.o.states.dtype = DType::kBF16; }, {"states: expected dtype f32 (same as state_pool), got bf16"});
  ExpectRejected([](Fixture& f) { f.UseStates(); f.o.states.data = f.pool.data(); }, {"state_pool: memory overlaps 'states'"});
  ExpectRejected([](Fixture& f) { f.d.stride = f.d.slot - 1; }, {"options.state_slot_stride: expected 0 (dense) or 3108 (Nv * Dk * Dv)", "got 3107"});
  // A slot stride makes the pool reach into out, which follows it.
  ExpectRejected([](Fixture& f) {
    const size_t dense = f.pool.size();
    f.pool.resize(dense + f.out.size(), 0x3C);
    f.in.state_pool.data = f.pool.data();
    f.o.out.data = f.pool.data() + dense;
    f.d.stride = f.d.slot + 1;
  }, {"out: memory overlaps 'state_pool'"});
}

TEST(VerifyValidate, Gate) {
  ExpectRejected([](Fixture& f) { f.in.g = f.in.a; }, {"a: expected either g or the raw gate a", "got both"});
  ExpectRejected([](Fixture& f) { f.in.A_log = TensorView(); }, {"A_log: required tensor is missing"});
  ExpectRejected([](Fixture& f) { f.in.a = TensorView(); }, {"A_log: given without the raw gate 'a'"});
}

}  // namespace
}  // namespace cgdr
