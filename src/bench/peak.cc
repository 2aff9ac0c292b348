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

// 16 independent chains of a = a*m + c: enough in flight to cover FMA latency
// (4 cycles) times the FMA ports (2). m and c come from the caller at run time
// and the sum is returned, so the compiler can neither fold nor drop the loop;
// a converges to c/(1-m), so no overflow and no denormals.
HWY_NOINLINE float FmaLoop(int64_t iters, float x) {
  const hn::ScalableTag<float> d;
  const auto m = hn::Set(d, 1.0f - 1e-4f * x);
  const auto c = hn::Set(d, 1e-6f * x);
  auto a0 = hn::Set(d, x), a1 = hn::Set(d, x + 1), a2 = hn::Set(d, x + 2), a3 = hn::Set(d, x + 3);
  auto a4 = hn::Set(d, x + 4), a5 = hn::Set(d, x + 5), a6 = hn::Set(d, x + 6), a7 = hn::Set(d, x + 7);
  auto a8 = hn::Set(d, x + 8), a9 = hn::Set(d, x + 9), a10 = hn::Set(d, x + 10), a11 = hn::Set(d, x + 11);
  auto a12 = hn::Set(d, x + 12), a13 = hn::Set(d, x + 13), a14 = hn::Set(d, x + 14), a15 = hn::Set(d, x + 15);
  for (int64_t i = 0; i < iters; ++i) {
    a0 = hn::MulAdd(a0, m, c); a1 = hn::MulAdd(a1, m, c); a2 = hn::MulAdd(a2, m, c); a3 = hn::MulAdd(a3, m, c);
    a4 = hn::MulAdd(a4, m, c); a5 = hn::MulAdd(a5, m, c); a6 = hn::MulAdd(a6, m, c); a7 = hn::MulAdd(a7, m, c);
    a8 = hn::MulAdd(a8, m, c); a9 = hn::MulAdd(a9, m, c); a10 = hn::MulAdd(a10, m, c); a11 = hn::MulAdd(a11, m, c);
    a12 = hn::MulAdd(a12, m, c); a13 = hn::MulAdd(a13, m, c); a14 = hn::MulAdd(a14, m, c); a15 = hn::MulAdd(a15, m, c);
  }
  const auto s = hn::Add(hn::Add(hn::Add(hn::Add(a0, a1), hn::Add(a2, a3)), hn::Add(hn::Add(a4, a5), hn::Add(a6, a7))),
                         hn::Add(hn::Add(hn::Add(a8, a9), hn::Add(a10, a11)), hn::Add(hn::Add(a12, a13), hn::Add(a14, a15))));
  return hn::GetLane(hn::SumOfLanes(d, s));
}

size_t FloatLanes() { return hn::Lanes(hn::ScalableTag<float>()); }

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
  const double flops = 2.0 * 16.0 * static_cast<double>(r.lanes) * static_cast<double>(iters) * threads;
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
