// Issue "hardening" 7: the API is safe to call from many threads at once on
// different problems. 8 std::threads x 200 calls (prefill with every
// formulation, decode, and rejected calls) must each reproduce, bitwise, the
// result of the same call made alone. Run under TSan by `make test-tsan`.
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "cgdr/cgdr.hpp"
#include "cgdr/decode.hpp"
#include "cgdr/plan.hpp"
#include "core/alloc.h"
#include "core/synthetic.h"

namespace cgdr {
namespace {

constexpr int kThreads = 8;
constexpr int kCallsPerThread = 200;

// One call and what it must produce.
struct Job {
  CaseSpec spec;
  Options opt;
  bool decode = false;  // run the first token of each sequence as a decode step
  bool broken = false;  // seq_lens do not sum to T: must be rejected
};

// What a call returned: status and output bytes.
struct Result {
  bool ok = false;
  std::string message;
  Bytes out, state;
  bool operator==(const Result&) const = default;
};

std::vector<Job> Jobs() {
  std::vector<Job> jobs;
  const Algo algos[] = {Algo::kAuto, Algo::kRecurrent, Algo::kChunk16, Algo::kChunk32, Algo::kChunk64};
  for (int i = 0; i < 10; ++i) {
    Job j;
    j.spec.Nk = 1 + i % 2;
    j.spec.Nv = 2 * j.spec.Nk;
    j.spec.Dk = 8 + 5 * i;
    j.spec.Dv = 24 - i;
    j.spec.lens = {static_cast<int32_t>(3 + 7 * i), 0, static_cast<int32_t>(1 + i)};
    j.spec.dtype = i % 3 == 0 ? DType::kBF16 : i % 3 == 1 ? DType::kF16 : DType::kF32;
    j.spec.layout = i % 2 ? StateLayout::kKV : StateLayout::kVK;
    j.spec.seed = 100 + i;
    j.opt = MakeCase(j.spec).options();
    j.opt.algo = algos[i % 5];
    j.opt.threads = 1 + i % 2;  // some calls open an OpenMP team inside the std::thread
    if (i % 5 == 2) {  // chunk16: on the emulated AMX engine (the 16-bit dtypes' default runs the hardware where present)
      j.opt.engine = Engine::kAmxEmulated;
      j.opt.precision = Precision::kBf16x3;
    }
    jobs.push_back(j);
  }
  Job dec = jobs[3];
  dec.decode = true;
  jobs.push_back(dec);
  Job bad = jobs[4];
  bad.broken = true;
  jobs.push_back(bad);
  return jobs;
}

// The first token of every sequence as one decode step, pool = initial states.
Result RunDecode(Case& c, const Options& opt) {
  const CaseSpec& s = c.spec;
  const int64_t N = static_cast<int64_t>(s.lens.size()), esize = static_cast<int64_t>(DTypeSize(s.dtype));
  Bytes q, k, v, beta, g;
  std::vector<int32_t> idx;
  auto take = [](Bytes& dst, const Bytes& src, int64_t row, int64_t row_bytes) {
    dst.insert(dst.end(), src.begin() + row * row_bytes, src.begin() + (row + 1) * row_bytes);
  };
  int64_t first = 0;  // first token of sequence b
  for (int64_t b = 0; b < N; ++b) {
    idx.push_back(s.lens[b] > 0 ? static_cast<int32_t>(b) : -1);
    const int64_t t = s.lens[b] > 0 ? first : 0;  // a skipped row still needs input bytes
    take(q, c.query, t, s.Nk * s.Dk * esize);
    take(k, c.key, t, s.Nk * s.Dk * esize);
    take(v, c.value, t, s.Nv * s.Dv * esize);
    take(beta, c.beta, t, s.Nv * esize);
    take(g, c.g, t, s.Nv * 4);
    first += s.lens[b];
  }
  const bool kv = s.layout == StateLayout::kKV;
  Result r;
  r.state = c.initial_state;
  r.out.assign(static_cast<size_t>(N * s.Nv * s.Dv * esize), 0);
  DecodeInputs in;
  in.query = TensorView(q.data(), s.dtype, {N, s.Nk, s.Dk});
  in.key = TensorView(k.data(), s.dtype, {N, s.Nk, s.Dk});
  in.value = TensorView(v.data(), s.dtype, {N, s.Nv, s.Dv});
  in.beta = TensorView(beta.data(), s.dtype, {N, s.Nv});
  in.g = TensorView(g.data(), DType::kF32, {N, s.Nv});
  in.state_pool = TensorView(r.state.data(), s.state_dtype, {N, s.Nv, kv ? s.Dk : s.Dv, kv ? s.Dv : s.Dk});
  in.state_indices = TensorView(idx.data(), DType::kI32, {N});
  const Status st = DecodeStep(in, {TensorView(r.out.data(), s.dtype, {N, s.Nv, s.Dv})}, opt);
  r.ok = st.ok();
  r.message = st.message();
  return r;
}

Result RunJob(const Job& j) {
  Case c = MakeCase(j.spec);
  if (j.decode) return RunDecode(c, j.opt);
  if (j.broken) c.seq_lens[0] += 1;
  const Status s = cgdr::Run(c.inputs(), c.outputs(), j.opt);
  return {s.ok(), s.message(), c.out, c.final_state};
}

// Each thread walks the job list from its own starting point; returns the
// number of calls whose result differed from `expected`.
int Hammer(const std::vector<Job>& jobs, const std::vector<Result>& expected, int id) {
  int bad = 0;
  for (int i = 0; i < kCallsPerThread; ++i) {
    const size_t j = static_cast<size_t>(id * 5 + i) % jobs.size();
    if (!(RunJob(jobs[j]) == expected[j])) ++bad;
  }
  return bad;
}

std::vector<Result> Expected(const std::vector<Job>& jobs) {
  std::vector<Result> r;
  for (const Job& j : jobs) r.push_back(RunJob(j));
  return r;
}

void RunStress(const std::vector<Job>& jobs, const std::vector<Result>* expected_in) {
  std::vector<Result> expected_local;
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  if (expected_in == nullptr) {
    // No single-threaded results yet: the first calls of the process (the
    // profile's one-time load among them) happen concurrently here; results
    // are recorded, then compared with the sequential ones below.
    std::vector<std::vector<Result>> first(kThreads);
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        for (const Job& j : jobs) first[t].push_back(RunJob(j));
      });
    }
    for (auto& th : threads) th.join();
    expected_local = Expected(jobs);
    for (int t = 0; t < kThreads; ++t) {
      for (size_t j = 0; j < jobs.size(); ++j) {
        EXPECT_TRUE(first[t][j] == expected_local[j]) << "thread " << t << " job " << j;
      }
    }
    return;
  }
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] { mismatches += Hammer(jobs, *expected_in, t); });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0) << "of " << kThreads * kCallsPerThread << " concurrent calls";
}

// ctest runs every test in its own process, so here the very first calls
// into the library (and DefaultProfile's initialisation) race each other.
TEST(Concurrency, FirstCallsFromManyThreads) { RunStress(Jobs(), nullptr); }

TEST(Concurrency, EightThreadsTwoHundredCallsBitwise) {
  const std::vector<Job> jobs = Jobs();
  const std::vector<Result> expected = Expected(jobs);
  for (size_t i = 0; i + 1 < expected.size(); ++i) ASSERT_TRUE(expected[i].ok) << i << ": " << expected[i].message;
  EXPECT_FALSE(expected.back().ok);  // the broken job is rejected
  EXPECT_NE(expected.back().message.find("seq_lens"), std::string::npos);
  RunStress(jobs, &expected);
}

// The scratch cache is the other process-wide state (core/alloc.h): a lease
// is its holder's alone while it lasts, whatever other threads take and give
// back meanwhile. Each thread fills its buffers with its own id and checks
// them after the others had time to run.
TEST(Concurrency, ScratchLeasesAreExclusive) {
  std::atomic<int> clashes{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kCallsPerThread; ++i) {
        const size_t n = 256 + 64 * static_cast<size_t>((i + t) % 5);
        ScratchLease a(n), b(n / 2);
        if (!a || !b) {
          ++clashes;
          continue;
        }
        for (size_t j = 0; j < n; ++j) a.get()[j] = static_cast<float>(t);
        for (size_t j = 0; j < n / 2; ++j) b.get()[j] = static_cast<float>(-t - 1);
        std::this_thread::yield();
        for (size_t j = 0; j < n; ++j) clashes += a.get()[j] != static_cast<float>(t);
        for (size_t j = 0; j < n / 2; ++j) clashes += b.get()[j] != static_cast<float>(-t - 1);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(clashes.load(), 0);
}

// The calibration profile is the only other process-wide state: one object,
// the same for every thread.
TEST(Concurrency, ProfileIsOneSharedImmutableObject) {
  std::vector<const MachineProfile*> seen(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back([&, t] { seen[t] = &DefaultProfile(); });
  for (auto& th : threads) th.join();
  for (const MachineProfile* p : seen) EXPECT_EQ(p, &DefaultProfile());
}

}  // namespace
}  // namespace cgdr
