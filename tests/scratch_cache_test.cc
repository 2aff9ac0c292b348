// The kernel scratch cache (core/alloc.h ScratchLease): buffers given back
// are reused by later calls, within its bounds, and their stale contents
// never reach a result: a reused buffer filled with NaN first (the poison
// hook) gives bitwise the result of a fresh one, on every target and
// formulation, including the bf16 precision modes' pack buffers.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "cgdr/cgdr.hpp"
#include "core/alloc.h"
#include "core/synthetic.h"
#include "test_util.h"

namespace cgdr {
namespace {

using testing::AllAlgos;
using testing::ForEachTarget;

// Turns poisoning off and empties the cache however a test ends.
struct CacheReset {
  ~CacheReset() {
    testing_hooks::PoisonReusedScratch(false);
    testing_hooks::DropCachedScratch();
  }
};

TEST(ScratchCache, ReusesAGivenBackBuffer) {
  CacheReset reset;
  testing_hooks::DropCachedScratch();
  float* first = nullptr;
  {
    ScratchLease a(1000);
    ASSERT_TRUE(a);
    first = a.get();
  }
  ScratchLease smaller(900);  // fits the given-back buffer: no new allocation
  EXPECT_EQ(smaller.get(), first);
  ScratchLease larger(2000);  // does not fit, and the cached one is taken
  ASSERT_TRUE(larger);
  EXPECT_NE(larger.get(), first);
}

TEST(ScratchCache, KeepsNoMoreThanItsBounds) {
  CacheReset reset;
  testing_hooks::DropCachedScratch();
  { ScratchLease huge(kMaxCachedScratchBytes / sizeof(float) + 16); }  // above the byte budget: freed
  EXPECT_EQ(testing_hooks::DropCachedScratch(), 0);
  {
    std::vector<ScratchLease> many;
    for (int i = 0; i < kMaxCachedScratch + 5; ++i) many.emplace_back(64);
  }
  EXPECT_EQ(testing_hooks::DropCachedScratch(), kMaxCachedScratch);
}

// The failure hook sees every call's scratch: leases bypass the cache while
// it is armed, so a cached buffer cannot hide an injected failure.
TEST(ScratchCache, ArmedFailureHookBypassesTheCache) {
  CacheReset reset;
  { ScratchLease warm(256); }
  testing_hooks::FailAllocationsAfter(0);
  ScratchLease lease(128);
  EXPECT_FALSE(lease);
  EXPECT_EQ(testing_hooks::InjectedAllocationFailures(), 1);
  testing_hooks::ResetAllocationFailures();
}

// Odd widths, GQA, a 1-token tail, an empty sequence; with g and an initial
// state (layout vk), and without either (layout kv: the state starts as
// zeros the kernel writes itself).
std::vector<CaseSpec> OddCases() {
  CaseSpec s;
  s.Nk = 2; s.Nv = 4; s.Dk = 37; s.Dv = 23; s.lens = {33, 0, 1, 18};
  s.seed = 11;
  CaseSpec bare = s;
  bare.has_g = false;
  bare.has_initial_state = false;
  bare.layout = StateLayout::kKV;
  return {s, bare};
}

// The two runs of a case are bitwise equal; the second takes the first's
// buffers back from the cache, NaN-filled.
void ExpectPoisonedReuseChangesNothing(const CaseSpec& spec, Options opt, const std::string& label) {
  Case c = MakeCase(spec);
  opt.threads = 2;
  testing_hooks::PoisonReusedScratch(false);
  testing_hooks::DropCachedScratch();
  ASSERT_TRUE(cgdr::Run(c.inputs(), c.outputs(), opt).ok()) << label;  // fresh buffers
  const Bytes out = c.out, state = c.final_state;
  testing_hooks::PoisonReusedScratch(true);
  std::memset(c.out.data(), 0, c.out.size());
  ASSERT_TRUE(cgdr::Run(c.inputs(), c.outputs(), opt).ok()) << label;  // the same buffers, NaN-filled
  EXPECT_EQ(c.out, out) << label;
  EXPECT_EQ(c.final_state, state) << label;
}

TEST(ScratchCache, StaleScratchNeverReachesResults) {
  CacheReset reset;
  for (Precision prec : {Precision::kFp32, Precision::kBf16x3}) {
    ForEachTarget([&](const std::string& target) {
      for (Algo algo : AllAlgos()) {
        for (const CaseSpec& spec : OddCases()) {
          Options opt = MakeCase(spec).options();
          opt.algo = algo;
          opt.precision = prec;
          ExpectPoisonedReuseChangesNothing(spec, opt,
                                            target + " " + AlgoName(algo) + " " + PrecisionName(prec) +
                                                (spec.has_initial_state ? " initial state" : " no initial state"));
        }
      }
    });
  }
}

}  // namespace
}  // namespace cgdr
