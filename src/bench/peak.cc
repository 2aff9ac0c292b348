// FP32 FMA peak and memory copy bandwidth (SPEC 8), compiled for every
// dispatch target like the kernels, so the peak is that of the same vector
// width the kernels run on.
#include "bench/peak.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <latch>
#include <thread>
#include <vector>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "bench/peak.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/aligned_allocator.h"
#include "hwy/highway.h"
#include "core/cpu_features.h"
#include "kernels/amx.h"

HWY_BEFORE_NAMESPACE();
namespace cgdr {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Independent chains of a = a*m + c: enough in flight to cover FMA latency
// (4 cycles) times the FMA ports (2), and few enough that the chains, m and c
// all stay in registers. x86 targets below AVX-512 have 16 vector registers:
// 16 chains spilled three of them to the stack, and their load-FMA-store
// round trips held AVX2 to ~55% of the FMA units (AMD EPYC Zen 3: 54 against
// 94 GFLOP/s per core with 12 chains), inflating every "% of peak" there.
// AVX-512 has 32 registers and keeps 16. m and c come from the caller at run
// time and the sum is returned, so the compiler can neither fold nor drop the
// loop; a converges to c/(1-m), so no overflow and no denormals.
#if HWY_TARGET <= HWY_AVX3 || HWY_ARCH_ARM || HWY_ARCH_RVV
constexpr int kFmaChains = 16;
#else
constexpr int kFmaChains = 12;
#endif

HWY_NOINLINE float FmaLoop(int64_t iters, float x) {
  const hn::ScalableTag<float> d;
  using V = hn::Vec<decltype(d)>;
  const V m = hn::Set(d, 1.0f - 1e-4f * x);
  const V c = hn::Set(d, 1e-6f * x);
  V a[kFmaChains];
  for (int j = 0; j < kFmaChains; ++j) a[j] = hn::Set(d, x + static_cast<float>(j));
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 16
    for (int j = 0; j < kFmaChains; ++j) a[j] = hn::MulAdd(a[j], m, c);
  }
  for (int step = 1; step < kFmaChains; step *= 2) {  // pairwise: independent adds
    for (int j = 0; j + step < kFmaChains; j += 2 * step) a[j] = hn::Add(a[j], a[j + step]);
  }
  return hn::GetLane(hn::SumOfLanes(d, a[0]));
}

size_t FloatLanes() { return hn::Lanes(hn::ScalableTag<float>()); }

int FmaChains() { return kFmaChains; }

const char* TargetHere() { return hwy::TargetName(HWY_TARGET); }

// Plain vector loads and stores (no streaming stores): the traffic a state
// update in memory would see. n is a multiple of the lane count.
HWY_NOINLINE void CopyFloats(const float* HWY_RESTRICT src, float* HWY_RESTRICT dst, size_t n) {
  const hn::ScalableTag<float> d;
  const size_t N = hn::Lanes(d);
  for (size_t i = 0; i < n; i += 4 * N) {
    const auto v0 = hn::Load(d, src + i), v1 = hn::Load(d, src + i + N);
    const auto v2 = hn::Load(d, src + i + 2 * N), v3 = hn::Load(d, src + i + 3 * N);
    hn::Store(v0, d, dst + i); hn::Store(v1, d, dst + i + N);
    hn::Store(v2, d, dst + i + 2 * N); hn::Store(v3, d, dst + i + 3 * N);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace cgdr
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace cgdr {

HWY_EXPORT(FmaLoop);
HWY_EXPORT(FloatLanes);
HWY_EXPORT(FmaChains);
HWY_EXPORT(TargetHere);
HWY_EXPORT(CopyFloats);

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// Runs body(t) on `threads` threads released together; returns the wall time
// from the release to the last thread's end (what "all cores busy" means).
template <class Body>
double RunTogether(int threads, const Body& body) {
  std::latch ready(threads + 1), go(1);
  std::vector<std::thread> pool;
  pool.reserve(static_cast<size_t>(threads));
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      ready.count_down();
      go.wait();
      body(t);
    });
  }
  ready.arrive_and_wait();
  const auto t0 = Clock::now();
  go.count_down();
  for (auto& th : pool) th.join();
  return Seconds(t0, Clock::now());
}

// Keeps the loops' results observable without printing them.
volatile float g_sink = 0.0f;

}  // namespace

FmaPeak MeasureFmaPeak(int threads, double seconds) {
  threads = std::max(threads, 1);
  FmaPeak r;
  r.threads = threads;
  r.lanes = HWY_DYNAMIC_DISPATCH(FloatLanes)();  // first call picks the target, before any thread races on it
  r.target = HWY_DYNAMIC_DISPATCH(TargetHere)();
  // Many short trials, best kept: on a shared machine a short trial has a fair
  // chance to run undisturbed, a long one hardly ever. Calibrated on one thread.
  constexpr int kTrials = 10;
  const double trial_s = seconds / 5;
  int64_t iters = 1 << 16;
  for (;;) {
    const auto t0 = Clock::now();
    g_sink = g_sink + HWY_DYNAMIC_DISPATCH(FmaLoop)(iters, 1.0f);
    const double dt = Seconds(t0, Clock::now());
    if (dt > trial_s / 8 || iters > (int64_t{1} << 40)) {
      iters = std::max<int64_t>(1, static_cast<int64_t>(static_cast<double>(iters) * trial_s / std::max(dt, 1e-9)));
      break;
    }
    iters *= 4;
  }
  std::vector<float> results(static_cast<size_t>(threads));
  r.chains = HWY_DYNAMIC_DISPATCH(FmaChains)();
  const double flops = 2.0 * r.chains * static_cast<double>(r.lanes) * static_cast<double>(iters) * threads;
  for (int trial = 0; trial < kTrials; ++trial) {  // other processes only ever slow it down
    const double dt = RunTogether(threads, [&](int t) { results[t] = HWY_DYNAMIC_DISPATCH(FmaLoop)(iters, 1.0f + 1e-3f * t); });
    for (float v : results) g_sink = g_sink + v;
    r.gflops = std::max(r.gflops, flops / dt / 1e9);
  }
  return r;
}

// How many iterations of `loop` take about `trial_s` on one thread.
template <class Loop>
int64_t CalibrateIterations(double trial_s, const Loop& loop) {
  int64_t iters = 1 << 10;
  for (;;) {
    const auto t0 = Clock::now();
    g_sink = g_sink + loop(iters);
    const double dt = Seconds(t0, Clock::now());
    if (dt > trial_s / 8 || iters > (int64_t{1} << 40)) {
      return std::max<int64_t>(1, static_cast<int64_t>(static_cast<double>(iters) * trial_s / std::max(dt, 1e-9)));
    }
    iters *= 4;
  }
}

AmxPeak MeasureAmxPeak(int threads, double seconds) {
  AmxPeak r;
  r.threads = std::max(threads, 1);
  if (!AmxHardwareEnabled()) return r;
  constexpr int kTrials = 10;
  const int64_t iters = CalibrateIterations(seconds / 5, AmxDotLoop);
  const double flops = 4.0 * 2.0 * kTileRows * 16 * kTileK * static_cast<double>(iters) * r.threads;
  std::vector<float> results(static_cast<size_t>(r.threads));
  for (int trial = 0; trial < kTrials; ++trial) {
    const double dt = RunTogether(r.threads, [&](int t) { results[t] = AmxDotLoop(iters); });
    for (float v : results) g_sink = g_sink + v;
    r.gflops = std::max(r.gflops, flops / dt / 1e9);
  }
  return r;
}

CopyBandwidth MeasureCopyBandwidth(int threads, size_t bytes) {
  threads = std::max(threads, 1);
  CopyBandwidth r;
  r.threads = threads;
  const size_t lanes = HWY_DYNAMIC_DISPATCH(FloatLanes)();
  const size_t block = 4 * lanes * static_cast<size_t>(threads);  // every slice a whole number of unrolled steps
  const size_t n = std::max(block, bytes / sizeof(float) / block * block);
  r.bytes = n * sizeof(float);
  auto src = hwy::AllocateAligned<float>(n);
  auto dst = hwy::AllocateAligned<float>(n);
  if (!src || !dst) return r;
  const size_t per = n / static_cast<size_t>(threads);
  // First touch from the threads that will copy, so pages are mapped before timing.
  RunTogether(threads, [&](int t) {
    for (size_t i = per * t; i < per * (t + 1); ++i) src[i] = static_cast<float>(i & 1023);
    std::memset(dst.get() + per * t, 0, per * sizeof(float));
  });
  for (int pass = 0; pass < 5; ++pass) {
    const double dt = RunTogether(threads, [&](int t) { HWY_DYNAMIC_DISPATCH(CopyFloats)(src.get() + per * t, dst.get() + per * t, per); });
    r.gbytes_per_s = std::max(r.gbytes_per_s, 2.0 * static_cast<double>(r.bytes) / dt / 1e9);
  }
  g_sink = g_sink + dst[n / 2];
  return r;
}

}  // namespace cgdr
#endif  // HWY_ONCE
