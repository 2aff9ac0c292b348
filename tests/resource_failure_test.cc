// Issue "hardening" 8: resource failures. An allocation that fails (kernel
// scratch through the injection hook of core/alloc.h, or any operator new
// through the replacement below) gives kResourceExhausted with a clear
// message and writes no output; the CLI reports an unwritable or full output
// path and an allocation failure with one error line and leaves no file.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <new>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cgdr/cgdr.hpp"
#include "cgdr/decode.hpp"
#include "core/alloc.h"
#include "core/synthetic.h"
#include "io/case_file.h"
#include "test_util.h"

// TSan's static runtime defines every operator new/delete itself, and linking
// pulls its definitions in beside any replacement (duplicate symbols): there
// the operator-new injection is left out and the tests using it skip. The
// TSan step runs only InjectionIsThreadSafe of this file (Makefile).
#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define CGDR_TSAN_RUNTIME 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define CGDR_TSAN_RUNTIME 1
#endif

// ---- operator new that can be told to fail: the countdown, when >= 0, is
// decremented by every allocation and the one that finds it at 0 throws.
// Counting only while armed keeps gtest's own allocations out of it.
namespace {
std::atomic<long> g_new_countdown{-1};
std::atomic<long> g_new_calls{0};
std::atomic<bool> g_counting{false};
#ifdef CGDR_TSAN_RUNTIME
constexpr bool kNewInjection = false;
#else
constexpr bool kNewInjection = true;
#endif
}  // namespace

#ifndef CGDR_TSAN_RUNTIME
void* operator new(std::size_t n) {
  if (g_counting.load(std::memory_order_relaxed)) g_new_calls.fetch_add(1, std::memory_order_relaxed);
  if (g_new_countdown.load(std::memory_order_relaxed) >= 0 && g_new_countdown.fetch_sub(1) == 0) throw std::bad_alloc();
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
// Out of line, so the compiler does not pair free() with the operator new it
// sees (-Wmismatched-new-delete): both sides use malloc/free here.
namespace {
__attribute__((noinline)) void ReleaseBlock(void* p) { std::free(p); }
}  // namespace
void operator delete(void* p) noexcept { ReleaseBlock(p); }
void operator delete(void* p, std::size_t) noexcept { ReleaseBlock(p); }
// The nothrow forms too (std::stable_sort's buffer uses them): left to the
// runtime, they would pair its allocator with the free() above (ASan reports
// alloc-dealloc-mismatch). They fail when the countdown says so.
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return ::operator new(n);
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}
void operator delete(void* p, const std::nothrow_t&) noexcept { ReleaseBlock(p); }
#endif  // CGDR_TSAN_RUNTIME

namespace cgdr {
namespace {

namespace fs = std::filesystem;
constexpr uint8_t kSentinel = 0x7E;

struct Fixture {
  Case c;
  explicit Fixture(int64_t Dk = 24) {
    CaseSpec s;
    s.Nk = 2; s.Nv = 4; s.Dk = Dk; s.Dv = 20; s.lens = {40, 0, 9};
    c = MakeCase(s);
    testing::FillOutputs(c, kSentinel);
  }
  bool Untouched() const { return testing::OutputsHold(c, kSentinel); }
  Status Run(int threads, Algo algo = Algo::kChunk64) { return Call(Prepare(threads, algo)); }

  // The views (whose constructors allocate) made ahead of the call, so an
  // injected failure hits the library and nothing else.
  struct Call_ {
    Inputs in;
    Outputs out;
    Options opt;
  };
  Call_ Prepare(int threads, Algo algo) {
    Call_ k{c.inputs(), c.outputs(), c.options()};
    k.opt.threads = threads;
    k.opt.algo = algo;
    return k;
  }
  static Status Call(const Call_& k) { return cgdr::Run(k.in, k.out, k.opt); }
};

// Disarms the hook however a test ends.
struct HookReset {
  ~HookReset() { testing_hooks::ResetAllocationFailures(); }
};

TEST(ResourceFailure, ScratchAllocationFailsBeforeAnyWrite) {
  HookReset reset;
  for (int threads : {1, 3}) {
    for (int ok_before : {0, 1, 2}) {  // fail the first, second or third thread's scratch
      if (ok_before >= threads) continue;
      Fixture f;
      testing_hooks::FailAllocationsAfter(ok_before);
      const Status s = f.Run(threads);
      EXPECT_EQ(s.code(), Code::kResourceExhausted) << threads << " threads, fail after " << ok_before << ": " << s.message();
      EXPECT_NE(s.message().find("cannot allocate kernel scratch"), std::string::npos) << s.message();
      EXPECT_GE(testing_hooks::InjectedAllocationFailures(), 1);
      EXPECT_TRUE(f.Untouched()) << "output written although scratch allocation failed";
      testing_hooks::ResetAllocationFailures();
      EXPECT_TRUE(f.Run(threads).ok()) << "the failure must not stick";
      EXPECT_FALSE(f.Untouched());
    }
  }
}

// The hook's budget is shared atomically: 4 threads x 5 single-threaded runs
// against a budget of 10 allocations give exactly 10 successes.
TEST(ResourceFailure, InjectionIsThreadSafe) {
  HookReset reset;
  std::vector<Fixture> fixtures(20);
  testing_hooks::FailAllocationsAfter(10);
  std::atomic<int> ok{0}, exhausted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 5; ++i) {
        Fixture& f = fixtures[static_cast<size_t>(t * 5 + i)];
        const Status s = f.Run(1);
        if (s.ok()) ++ok;
        if (s.code() == Code::kResourceExhausted && f.Untouched()) ++exhausted;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(ok.load(), 10);
  EXPECT_EQ(exhausted.load(), 10);
  EXPECT_EQ(testing_hooks::InjectedAllocationFailures(), 10);
}

// Counts operator new calls of fn() with nothing failing.
template <typename Fn>
long CountAllocations(Fn fn) {
  g_new_calls = 0;
  g_counting = true;
  fn();
  g_counting = false;
  return g_new_calls.load();
}

// Makes allocation number n (0-based) of fn() throw std::bad_alloc; returns
// what fn returned, or records that the exception escaped.
template <typename Fn>
Status FailAllocation(long n, Fn fn, bool* escaped) {
  *escaped = false;
  g_new_countdown = n;
  Status s;
  try {
    s = fn();
  } catch (const std::bad_alloc&) {
    *escaped = true;
  }
  g_new_countdown = -1;
  return s;
}

// Every operator new of a Run, failed in turn: never an exception out of the
// API. Either a clean kResourceExhausted with no output written, or (where
// the library can do without that memory: the plan's explanation text, whose
// ostream swallows the failure) a success with the exact normal result.
TEST(ResourceFailure, EveryAllocationOfRunMayFail) {
  if (!kNewInjection) GTEST_SKIP() << "operator new injection is not available under TSan";
  for (Algo algo : {Algo::kAuto, Algo::kRecurrent, Algo::kChunk16}) {
    Fixture warm, probe;
    ASSERT_TRUE(warm.Run(2, algo).ok());  // one-time work (the profile) out of the count
    const long calls = CountAllocations([&] { ASSERT_TRUE(probe.Run(2, algo).ok()); });
    ASSERT_GT(calls, 0);
    long exhausted = 0;
    for (long n = 0; n < calls; ++n) {
      Fixture f;
      const Fixture::Call_ call = f.Prepare(2, algo);
      bool escaped = false;
      const Status s = FailAllocation(n, [&] { return Fixture::Call(call); }, &escaped);
      const std::string label = std::string(AlgoName(algo)) + " allocation " + std::to_string(n) + " of " + std::to_string(calls);
      ASSERT_FALSE(escaped) << "std::bad_alloc escaped Run at " << label;
      if (s.ok()) {
        EXPECT_EQ(f.c.out, probe.c.out) << label << ": succeeded with a different result";
        continue;
      }
      ++exhausted;
      EXPECT_EQ(s.code(), Code::kResourceExhausted) << label << ": " << s.message();
      EXPECT_FALSE(s.message().empty()) << label;
      EXPECT_TRUE(f.Untouched()) << label << ": output written";
    }
    EXPECT_GT(exhausted, calls / 2) << AlgoName(algo) << ": most allocations are needed";
  }
}

// The same for the decode step (16-bit pool: it allocates staging memory; its
// validation allocates a sorted copy of the indices).
TEST(ResourceFailure, EveryAllocationOfDecodeMayFail) {
  if (!kNewInjection) GTEST_SKIP() << "operator new injection is not available under TSan";
  const int64_t N = 2, Nv = 2, Dk = 8, Dv = 8;
  std::vector<float> q(N * Dk, 0.25f), k(N * Dk, 0.25f), v(N * Nv * Dv, 1.0f), beta(N * Nv, 0.5f);
  std::vector<uint16_t> pool(3 * Nv * Dv * Dk, 0);
  std::vector<int32_t> idx{2, 0};
  std::vector<float> out(N * Nv * Dv, 0.0f);
  DecodeInputs in;
  in.query = TensorView(q.data(), DType::kF32, {N, 1, Dk});
  in.key = TensorView(k.data(), DType::kF32, {N, 1, Dk});
  in.value = TensorView(v.data(), DType::kF32, {N, Nv, Dv});
  in.beta = TensorView(beta.data(), DType::kF32, {N, Nv});
  in.state_pool = TensorView(pool.data(), DType::kBF16, {3, Nv, Dv, Dk});
  in.state_indices = TensorView(idx.data(), DType::kI32, {N});
  const DecodeOutputs o{TensorView(out.data(), DType::kF32, {N, Nv, Dv})};
  Options opt;
  opt.threads = 2;
  const auto pool0 = pool;
  const long calls = CountAllocations([&] { ASSERT_TRUE(DecodeStep(in, o, opt).ok()); });
  for (long n = 0; n < calls; ++n) {
    pool = pool0;
    std::fill(out.begin(), out.end(), -3.0f);
    bool escaped = false;
    const Status s = FailAllocation(n, [&] { return DecodeStep(in, o, opt); }, &escaped);
    ASSERT_FALSE(escaped) << "std::bad_alloc escaped DecodeStep at allocation " << n << " of " << calls;
    if (s.ok()) continue;  // memory the step could do without
    EXPECT_EQ(s.code(), Code::kResourceExhausted) << "allocation " << n << ": " << s.message();
    EXPECT_EQ(pool, pool0) << "allocation " << n << ": pool written";
    EXPECT_EQ(out, std::vector<float>(out.size(), -3.0f)) << "allocation " << n << ": out written";
  }
}

// ---- the CLI binary

struct Cli {
  int status = -1;  // exit code, or 128 + signal
  std::string err;
};

// Runs `cgdr ARGS...` with stderr captured; `limit` (if set) runs in the
// child before exec, e.g. to cap file size or address space.
Cli RunCli(const std::vector<std::string>& args, void (*limit)() = nullptr) {
  const std::string err_path = fs::temp_directory_path() / ("cgdr_rf_err_" + std::to_string(::getpid()));
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (limit) limit();
    std::freopen(err_path.c_str(), "w", stderr);
    std::freopen("/dev/null", "w", stdout);
    std::vector<char*> argv;
    const std::string bin = CGDR_BINARY_DIR "/cgdr";
    argv.push_back(const_cast<char*>(bin.c_str()));
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(bin.c_str(), argv.data());
    ::_exit(127);
  }
  Cli r;
  int st = 0;
  ::waitpid(pid, &st, 0);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  std::ifstream f(err_path);
  std::stringstream ss;
  ss << f.rdbuf();
  r.err = ss.str();
  fs::remove(err_path);
  return r;
}

class CliFailures : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("cgdr_rf_" + std::to_string(::getpid()));
    fs::create_directories(dir_);
    CaseSpec s;
    s.Nk = 1; s.Nv = 2; s.Dk = 16; s.Dv = 16; s.lens = {64};
    Case c = MakeCase(s);
    ASSERT_TRUE(SaveCase(Path("case.safetensors"), c.inputs(), c.options()).ok());
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }
  // Exit 2, exactly one line "cgdr: error: ..." containing `want`.
  static void ExpectOneLineError(const Cli& r, const std::string& want) {
    EXPECT_EQ(r.status, 2) << r.err;
    EXPECT_EQ(r.err.rfind("cgdr: error: ", 0), 0u) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find(want), std::string::npos) << "stderr lacks '" << want << "': " << r.err;
  }
  // Nothing but the case file in the work directory: no output, no temporary.
  void ExpectOnlyTheCase() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename().string());
    EXPECT_EQ(names, std::vector<std::string>{"case.safetensors"});
  }
  fs::path dir_;
};

TEST_F(CliFailures, OutputUnderARegularFile) {
  const std::string out = Path("case.safetensors") + "/result.safetensors";  // parent is a file
  ExpectOneLineError(RunCli({"run", "--input", Path("case.safetensors"), "--output", out}), "result.safetensors");
  ExpectOnlyTheCase();
}

// /proc refuses new files even to root: an unwritable directory for everyone.
TEST_F(CliFailures, OutputInAnUnwritableDirectory) {
  ExpectOneLineError(RunCli({"run", "--input", Path("case.safetensors"), "--output", "/proc/cgdr_result.safetensors"}),
                     "/proc/cgdr_result.safetensors");
  EXPECT_FALSE(fs::exists("/proc/cgdr_result.safetensors"));
}

// A full disk, simulated by a 4 KiB file size limit: the write fails half
// way; the partial temporary is removed and no output appears.
void LimitFileSize() {
  ::signal(SIGXFSZ, SIG_IGN);  // write() then fails with EFBIG instead of killing
  const rlimit lim{4096, 4096};
  ::setrlimit(RLIMIT_FSIZE, &lim);
}

TEST_F(CliFailures, DiskFullDuringWrite) {
  const Cli r = RunCli({"run", "--input", Path("case.safetensors"), "--output", Path("result.safetensors")}, LimitFileSize);
  ExpectOneLineError(r, "result.safetensors");
  ExpectOnlyTheCase();
  // An existing result is left as it was.
  { std::ofstream(Path("old.safetensors")) << "previous result"; }
  const Cli again = RunCli({"run", "--input", Path("case.safetensors"), "--output", Path("old.safetensors")}, LimitFileSize);
  EXPECT_EQ(again.status, 2) << again.err;
  std::ifstream old(Path("old.safetensors"));
  std::string text;
  std::getline(old, text);
  EXPECT_EQ(text, "previous result");
  fs::remove(Path("old.safetensors"));
  ExpectOnlyTheCase();
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define CGDR_UNDER_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define CGDR_UNDER_SANITIZER 1
#endif
#endif

// Out of memory in the CLI: a 4 KiB case whose final state needs 512 MiB
// (1000 empty sequences x 16 heads x 128 x 128 f16) under a 384 MiB address
// space limit. Sanitizer runtimes reserve terabytes of shadow memory, so this
// one runs in the plain build only.
void LimitAddressSpace() {
  const rlimit lim{384ull << 20, 384ull << 20};
  ::setrlimit(RLIMIT_AS, &lim);
}

TEST_F(CliFailures, OutOfMemoryIsReported) {
#ifdef CGDR_UNDER_SANITIZER
  GTEST_SKIP() << "RLIMIT_AS and sanitizer shadow memory do not mix";
#endif
  CaseSpec s;
  s.Nk = 1; s.Nv = 16; s.Dk = 128; s.Dv = 128;
  s.lens.assign(1000, 0);
  s.dtype = s.state_dtype = DType::kF16;
  s.has_initial_state = false;
  Case c = MakeCase(s);
  ASSERT_TRUE(SaveCase(Path("big.safetensors"), c.inputs(), c.options()).ok());
  const Cli r = RunCli({"run", "--input", Path("big.safetensors"), "--output", Path("result.safetensors")}, LimitAddressSpace);
  ExpectOneLineError(r, "cannot allocate");
  fs::remove(Path("big.safetensors"));
  ExpectOnlyTheCase();
}

}  // namespace
}  // namespace cgdr
