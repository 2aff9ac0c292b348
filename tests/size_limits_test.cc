// Issue "hardening" 5: element counts past 2^31 are planned with 64-bit
// arithmetic, counts past what 64-bit byte offsets hold are rejected with a
// clear error; nothing wraps.
//
// The prefill views point at placeholder addresses no process maps: Validate
// and MakePlan look at shapes and pointers only (check_values stays off), and
// the one tensor they read, seq_lens, is real. If a change made Validate read
// another tensor, ASan would flag these tests; that is intended.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "cgdr/cgdr.hpp"
#include "cgdr/decode.hpp"
#include "cgdr/plan.hpp"
#include "core/dtype.h"

namespace cgdr {
namespace {

constexpr int64_t k2to31 = int64_t{1} << 31;

// Address i of a set spaced 2^52 bytes apart from 2^56 up: above the user
// address space (never mapped), and apart enough that no accepted shape in
// these tests (all below 2^45 bytes) makes two of them overlap.
void* Placeholder(int i) { return reinterpret_cast<void*>((uintptr_t{1} << 56) + uintptr_t(i) * (uintptr_t{1} << 52)); }

struct HugeProblem {
  int64_t T, Nk, Nv, Dk, Dv;
  std::vector<int32_t> lens;
  DType dtype = DType::kF16;
  bool with_state = true;

  Inputs In() {
    const int64_t B = static_cast<int64_t>(lens.size());
    Inputs in;
    in.query = TensorView(Placeholder(0), dtype, {T, Nk, Dk});
    in.key = TensorView(Placeholder(1), dtype, {T, Nk, Dk});
    in.value = TensorView(Placeholder(2), dtype, {T, Nv, Dv});
    in.beta = TensorView(Placeholder(3), dtype, {T, Nv});
    in.g = TensorView(Placeholder(4), DType::kF32, {T, Nv});
    if (with_state) in.initial_state = TensorView(Placeholder(5), DType::kF32, {B, Nv, Dv, Dk});
    in.seq_lens = TensorView(lens.data(), DType::kI32, {B});
    return in;
  }
  Outputs Out() {
    const int64_t B = static_cast<int64_t>(lens.size());
    Outputs o;
    o.out = TensorView(Placeholder(6), dtype, {T, Nv, Dv});
    if (with_state) o.final_state = TensorView(Placeholder(7), DType::kF32, {B, Nv, Dv, Dk});
    return o;
  }
};

Options Opts() {
  Options o;
  o.threads = 4;  // fixed, so the plan does not depend on the machine
  return o;
}

// T * Nv * Dv = 2^25 * 32 * 128 = 2^37 output elements (the flagship heads).
TEST(SizeLimits, OutputPast2To31ElementsIsPlanned) {
  HugeProblem h{int64_t{1} << 25, 16, 32, 128, 128, {1 << 25}};
  Problem p;
  const Status s = Validate(h.In(), h.Out(), Opts(), &p);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(p.T, int64_t{1} << 25);
  EXPECT_EQ(p.T * p.Nv * p.Dv, int64_t{1} << 37);
  Plan plan;
  ASSERT_TRUE(MakePlan(p, DefaultProfile(), &plan).ok());
  ASSERT_TRUE(CheckPlan(plan).ok());
  int64_t token_columns = 0;
  for (const WorkItem& it : plan.items) token_columns += it.tokens * it.v_width;
  EXPECT_EQ(token_columns, int64_t{1} << 37) << "every output element planned exactly once";
  EXPECT_NE(PlanToString(plan).find("T=33554432"), std::string::npos);
}

// Three sequences of 2^31 - 1 tokens: T and the third one's first row exceed
// 32 bits.
TEST(SizeLimits, SequenceStartsPast2To32) {
  const int32_t max32 = std::numeric_limits<int32_t>::max();
  HugeProblem h{3 * int64_t{max32} + 5, 1, 2, 16, 16, {max32, max32, 0, max32, 5}};
  Problem p;
  const Status s = Validate(h.In(), h.Out(), Opts(), &p);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(p.T, 3 * int64_t{max32} + 5);
  Plan plan;
  ASSERT_TRUE(MakePlan(p, DefaultProfile(), &plan).ok());
  int64_t last_begin = -1;
  for (const WorkItem& it : plan.items) {
    if (it.seq == 4) last_begin = it.token_begin;
  }
  EXPECT_EQ(last_begin, 3 * int64_t{max32});
}

// The final state past 2^31 elements: 1024 sequences x 64 heads x 256 x 256.
TEST(SizeLimits, StatePast2To31ElementsIsPlanned) {
  HugeProblem h{1024, 64, 64, 256, 256, std::vector<int32_t>(1024, 1)};
  Problem p;
  const Status s = Validate(h.In(), h.Out(), Opts(), &p);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(p.B * p.Nv * p.Dv * p.Dk, int64_t{1} << 32);
  Plan plan;
  ASSERT_TRUE(MakePlan(p, DefaultProfile(), &plan).ok());
  EXPECT_EQ(plan.items.back().seq, 1023);
  EXPECT_EQ(plan.items.back().token_begin, 1023);
}

void ExpectRejected(HugeProblem h, const std::function<void(Inputs&, Outputs&)>& edit, const char* tensor) {
  Inputs in = h.In();
  Outputs out = h.Out();
  edit(in, out);
  Problem p;
  const Status s = Validate(in, out, Opts(), &p);
  ASSERT_FALSE(s.ok()) << tensor << ": accepted";
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_EQ(s.message().rfind(std::string(tensor) + ":", 0), 0u) << s.message();
  EXPECT_NE(s.message().find("64-bit"), std::string::npos) << s.message();
}

// Shapes whose element or byte counts do not fit 64-bit offsets: each tensor
// is named, including products that overflow int64 itself (numel saturates).
TEST(SizeLimits, CountsPast64BitOffsetsAreRejected) {
  const HugeProblem h{8, 1, 1, 16, 16, {8}};
  const int64_t big = int64_t{1} << 61, huge = std::numeric_limits<int64_t>::max();
  ExpectRejected(h, [&](Inputs& in, Outputs&) { in.query.shape[0] = big; }, "query");
  ExpectRejected(h, [&](Inputs& in, Outputs&) { in.query.shape[0] = huge; in.query.shape[1] = huge; }, "query");
  ExpectRejected(h, [&](Inputs& in, Outputs&) { in.value.shape[0] = int64_t{1} << 40; in.value.shape[1] = int64_t{1} << 40; }, "value");
  ExpectRejected(h, [&](Inputs& in, Outputs&) { in.beta.shape[0] = huge; in.beta.shape[1] = 2; }, "beta");
  ExpectRejected(h, [&](Inputs& in, Outputs&) { in.g.shape[0] = big; }, "g");
  ExpectRejected(h, [&](Inputs& in, Outputs&) { in.initial_state.shape[0] = int64_t{1} << 56; }, "initial_state");
  ExpectRejected(h, [&](Inputs&, Outputs& out) { out.out.shape[1] = big; }, "out");
  ExpectRejected(h, [&](Inputs&, Outputs& out) { out.final_state.shape[2] = huge; out.final_state.shape[3] = 3; }, "final_state");
}

// seq_lens of 2^50 sequences (never read: initial_state's element count,
// 2^50 * 256 * 256, is rejected first) and T = 2^60 tokens are rejected as
// too large, not wrapped.
TEST(SizeLimits, HugeBAndTAreRejected) {
  HugeProblem h{8, 1, 1, 256, 256, {8}};
  Inputs in = h.In();
  Outputs out = h.Out();
  in.seq_lens.shape[0] = int64_t{1} << 50;
  for (TensorView* t : {&in.initial_state, &out.final_state}) t->shape[0] = int64_t{1} << 50;
  Problem p;
  Status s = Validate(in, out, Opts(), &p);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("64-bit"), std::string::npos) << s.message();

  HugeProblem t{int64_t{1} << 60, 1, 1, 16, 16, {8}};
  s = Validate(t.In(), t.Out(), Opts(), &p);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message().rfind("query:", 0), 0u) << s.message();
}

TEST(SizeLimits, NumelSaturatesInsteadOfWrapping) {
  const int64_t big = int64_t{1} << 40;
  EXPECT_EQ(TensorView(nullptr, DType::kF32, {big, big, big}).numel(), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(TensorView(nullptr, DType::kF32, {big, big}).numel(), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(TensorView(nullptr, DType::kF32, {k2to31, k2to31}).numel(), int64_t{1} << 62);
  EXPECT_EQ(TensorView(nullptr, DType::kF32, {big, 0}).numel(), 0);
}

// The decode kernel really addresses a pool row past 2^31 elements: the pool
// is a sparse reservation (only the pages of the named rows are touched).
TEST(SizeLimits, DecodeAddressesPoolRowsPast2To31Elements) {
  const int64_t P = int64_t{1} << 20, Nv = 4, Dk = 32, Dv = 32, N = 2;
  const int64_t pool_elems = P * Nv * Dk * Dv;  // 2^32
  const size_t bytes = static_cast<size_t>(pool_elems) * 4;
  void* pool = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (pool == MAP_FAILED) GTEST_SKIP() << "cannot reserve " << bytes << " bytes of address space";
  std::vector<float> q(N * Dk, 0.125f), k(N * Dk, 0.125f), v(N * Nv * Dv, 1.0f), beta(N * Nv, 0.5f),
      out(N * Nv * Dv, -1.0f);
  std::vector<int32_t> idx{static_cast<int32_t>(P - 1), 0};
  DecodeInputs in;
  in.query = TensorView(q.data(), DType::kF32, {N, 1, Dk});
  in.key = TensorView(k.data(), DType::kF32, {N, 1, Dk});
  in.value = TensorView(v.data(), DType::kF32, {N, Nv, Dv});
  in.beta = TensorView(beta.data(), DType::kF32, {N, Nv});
  in.state_pool = TensorView(pool, DType::kF32, {P, Nv, Dv, Dk});
  in.state_indices = TensorView(idx.data(), DType::kI32, {N});
  Options opt;
  opt.threads = 1;
  const Status s = DecodeStep(in, {TensorView(out.data(), DType::kF32, {N, Nv, Dv})}, opt);
  ASSERT_TRUE(s.ok()) << s.message();
  // From a zero state: S = beta k v^T, out = scale S^T q = scale beta (k.q) v.
  const float want = static_cast<float>(1.0 / std::sqrt(32.0)) * 0.5f * (32 * 0.125f * 0.125f) * 1.0f;
  for (float o : out) EXPECT_NEAR(o, want, 1e-6f);
  // Row P - 1 (element offset 2^32 - 4096) holds beta v k^T = 0.0625 in every entry; row 1 is untouched.
  const float* p = static_cast<const float*>(pool);
  EXPECT_FLOAT_EQ(p[pool_elems - 1], 0.0625f);
  EXPECT_FLOAT_EQ(p[(P - 1) * Nv * Dk * Dv], 0.0625f);
  EXPECT_EQ(p[Nv * Dk * Dv], 0.0f);
  munmap(pool, bytes);
}

}  // namespace
}  // namespace cgdr
