// Decode-step benchmark (SPEC 6b, 8): the step is bound by memory, so it is
// judged by bytes of state read + written per second against the bandwidth of
// a plain parallel memcpy measured in the same run, on the same threads and
// on buffers of the same size (each far larger than the last-level cache).
//
//   bench_decode [--n 512] [--nk 16] [--nv 32] [--dk 128] [--dv 128]
//                [--layout vk|kv|both] [--pool f32|bf16|f16] [--threads 0]
//                [--iters 15] [--k K] [--per-channel-gate 0|1] [--json FILE]
#include <omp.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cgdr/cgdr.hpp"
#include "cgdr/decode.hpp"
#include "core/dtype.h"

namespace {

struct Args {
  int64_t N = 512, Nk = 16, Nv = 32, Dk = 128, Dv = 128;
  std::string layout = "both";
  cgdr::DType pool = cgdr::DType::kF32;
  int threads = 0, iters = 15;
  int64_t K = 0;  // > 0: also a verify row (K draft tokens per sequence, docs/SPEC.md 6d) against K steps
  bool per_channel_gate = false;  // g [N, Nv, Dk] (KDA, docs/SPEC.md 10) instead of [N, Nv]
  std::string json;
};

[[noreturn]] void Usage(const char* why) {
  std::fprintf(stderr,
               "bench_decode: %s\nusage: bench_decode [--n N] [--nk NK] [--nv NV] [--dk DK] [--dv DV] "
               "[--layout vk|kv|both] [--pool f32|bf16|f16] [--threads T] [--iters I] [--k K] "
               "[--per-channel-gate 0|1] [--json FILE]\n"
               "  --k K (1..16): also time verify, K tokens per sequence in one call with the state after each\n"
               "  into its own pool slot, against K single steps (e.g. --n 64 --k 4)\n"
               "  --per-channel-gate 1: KDA's gate, g [N, Nv, Dk] (one decay per key channel)\n",
               why);
  std::exit(2);
}

int64_t ParseInt(const char* flag, const char* s, int64_t lo, int64_t hi) {
  char* end = nullptr;
  const long long v = std::strtoll(s, &end, 10);
  if (end == s || *end != '\0' || v < lo || v > hi) {
    std::fprintf(stderr, "bench_decode: %s expects an integer in [%lld, %lld], got '%s'\n", flag,
                 static_cast<long long>(lo), static_cast<long long>(hi), s);
    std::exit(2);
  }
  return v;
}

Args Parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    if (i + 1 >= argc) Usage(("missing value after " + f).c_str());
    const char* v = argv[++i];
    if (f == "--n") a.N = ParseInt("--n", v, 1, 1 << 20);
    else if (f == "--nk") a.Nk = ParseInt("--nk", v, 1, 4096);
    else if (f == "--nv") a.Nv = ParseInt("--nv", v, 1, 4096);
    else if (f == "--dk") a.Dk = ParseInt("--dk", v, 1, cgdr::kMaxHeadDim);
    else if (f == "--dv") a.Dv = ParseInt("--dv", v, 1, cgdr::kMaxHeadDim);
    else if (f == "--threads") a.threads = static_cast<int>(ParseInt("--threads", v, 0, 4096));
    else if (f == "--iters") a.iters = static_cast<int>(ParseInt("--iters", v, 1, 100000));
    else if (f == "--k") a.K = ParseInt("--k", v, 1, cgdr::kMaxDraftTokens);
    else if (f == "--per-channel-gate") a.per_channel_gate = ParseInt("--per-channel-gate", v, 0, 1) != 0;
    else if (f == "--json") a.json = v;
    else if (f == "--layout") {
      a.layout = v;
      if (a.layout != "vk" && a.layout != "kv" && a.layout != "both") Usage("--layout expects vk, kv or both");
    } else if (f == "--pool") {
      if (!cgdr::ParseDType(v, &a.pool) || a.pool == cgdr::DType::kI32) Usage("--pool expects f32, bf16 or f16");
    } else {
      Usage(("unknown flag " + f).c_str());
    }
  }
  if (a.Nv % a.Nk != 0) Usage("--nv must be a multiple of --nk");
  return a;
}

double Seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// A parallel memcpy of `bytes` on `threads` threads, each copying its own
// contiguous slice; the reference for "how fast can this machine move memory".
struct Copier {
  int64_t bytes;
  int threads;
  std::vector<uint8_t> src, dst;
  Copier(int64_t n, int t) : bytes(n), threads(t), src(static_cast<size_t>(n)), dst(static_cast<size_t>(n)) {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int i = 0; i < threads; ++i) {  // first touch by the copying thread
      const int64_t b = bytes * i / threads, e = bytes * (i + 1) / threads;
      std::memset(src.data() + b, 1, static_cast<size_t>(e - b));
      std::memset(dst.data() + b, 0, static_cast<size_t>(e - b));
    }
  }
  double Time() {
    const double t0 = Seconds();
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int i = 0; i < threads; ++i) {
      const int64_t b = bytes * i / threads, e = bytes * (i + 1) / threads;
      std::memcpy(dst.data() + b, src.data() + b, static_cast<size_t>(e - b));
    }
    return Seconds() - t0;
  }
  double moved() const { return 2.0 * static_cast<double>(bytes); }  // read + written
};

// Copies `bytes` with non-temporal stores where the compiler targets SSE2
// (every x86-64) and both ends are 16-byte aligned, a memcpy otherwise.
void StreamCopy(const uint8_t* from, uint8_t* to, int64_t bytes) {
  int64_t i = 0;
#if defined(__SSE2__)
  if ((reinterpret_cast<uintptr_t>(from) | reinterpret_cast<uintptr_t>(to)) % 16 == 0) {
    for (; i + 16 <= bytes; i += 16) {
      _mm_stream_si128(reinterpret_cast<__m128i*>(to + i), _mm_load_si128(reinterpret_cast<const __m128i*>(from + i)));
    }
  }
#endif
  std::memcpy(to + i, from + i, static_cast<size_t>(bytes - i));
}

void StreamFence() {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

// One decode problem: N sequences whose states sit at shuffled rows of a pool
// 1.25x larger than needed (as a serving engine's would); with --k, K more
// slots per sequence for verify's per-token states.
struct Stepper {
  cgdr::StateLayout layout;
  std::vector<uint8_t> pool_bytes;
  uint8_t* pool = nullptr;  // 64-byte aligned, as torch's CPU allocator aligns a pool tensor
  std::vector<float> q, k, v, beta, g, out;
  std::vector<int32_t> rows, dst;
  cgdr::DecodeInputs in, verify_in;
  cgdr::DecodeOutputs o, verify_o;
  cgdr::Options opt;
  double state_bytes = 0;

  Stepper(const Args& a, cgdr::StateLayout l, int threads) : layout(l) {
    const int64_t N = a.N, K = std::max<int64_t>(a.K, 1), P = N + N / 4 + (a.K > 0 ? N * K : 0), head = a.Dk * a.Dv;
    const size_t es = cgdr::DTypeSize(a.pool);
    pool_bytes.resize(static_cast<size_t>(P * a.Nv * head) * es + 64);
    pool = pool_bytes.data() + (64 - reinterpret_cast<uintptr_t>(pool_bytes.data()) % 64) % 64;
    q.resize(N * K * a.Nk * a.Dk); k.resize(q.size()); v.resize(N * K * a.Nv * a.Dv);
    const int64_t gates = a.per_channel_gate ? a.Dk : 1;  // per (token, head)
    beta.assign(N * K * a.Nv, 0.5f); g.assign(N * K * a.Nv * gates, -0.05f); out.resize(N * K * a.Nv * a.Dv);
    std::mt19937 rng(7);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (auto* buf : {&q, &k, &v}) for (float& x : *buf) x = nd(rng);
    const int64_t total = P * a.Nv * head;
    const cgdr::DType pd = a.pool;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t i = 0; i < total; ++i) cgdr::StoreFromF32(pool, pd, i, 1e-3f * static_cast<float>(i % 97));
    rows.resize(static_cast<size_t>(P));
    std::iota(rows.begin(), rows.end(), 0);
    std::shuffle(rows.begin(), rows.end(), rng);
    dst.assign(rows.begin() + N, rows.begin() + std::min<int64_t>(P, N + N * K));  // verify's destinations
    rows.resize(static_cast<size_t>(N));

    const bool kv = layout == cgdr::StateLayout::kKV;
    in.query = cgdr::TensorView(q.data(), cgdr::DType::kF32, {N, a.Nk, a.Dk});
    in.key = cgdr::TensorView(k.data(), cgdr::DType::kF32, {N, a.Nk, a.Dk});
    in.value = cgdr::TensorView(v.data(), cgdr::DType::kF32, {N, a.Nv, a.Dv});
    in.beta = cgdr::TensorView(beta.data(), cgdr::DType::kF32, {N, a.Nv});
    in.g = a.per_channel_gate ? cgdr::TensorView(g.data(), cgdr::DType::kF32, {N, a.Nv, a.Dk})
                              : cgdr::TensorView(g.data(), cgdr::DType::kF32, {N, a.Nv});
    in.state_pool = cgdr::TensorView(pool, pd, {P, a.Nv, kv ? a.Dk : a.Dv, kv ? a.Dv : a.Dk});
    in.state_indices = cgdr::TensorView(rows.data(), cgdr::DType::kI32, {N});
    o.out = cgdr::TensorView(out.data(), cgdr::DType::kF32, {N, a.Nv, a.Dv});
    opt.state_layout = layout;
    opt.threads = threads;
    opt.use_qk_l2norm = true;  // q/k are raw normals: keep the states bounded
    state_bytes = 2.0 * static_cast<double>(N * a.Nv * head) * static_cast<double>(es);  // read + written
    if (a.K > 0) {  // the same tensors with a token axis: K tokens per sequence, each state into its own slot
      const auto tokens = [K](const cgdr::TensorView& t) {
        std::vector<int64_t> dims{t.shape[0], K};
        for (int i = 1; i < t.rank; ++i) dims.push_back(t.shape[i]);
        return cgdr::TensorView(t.data, t.dtype, dims);
      };
      verify_in = in;
      for (cgdr::TensorView* t : {&verify_in.query, &verify_in.key, &verify_in.value, &verify_in.beta, &verify_in.g}) {
        *t = tokens(*t);
      }
      verify_in.dst_indices = cgdr::TensorView(dst.data(), cgdr::DType::kI32, {N, K});
      verify_o.out = tokens(o.out);
    }
  }

  double Time(bool verify = false) {
    const double t0 = Seconds();
    const cgdr::Status s = verify ? cgdr::DecodeStep(verify_in, verify_o, opt) : cgdr::DecodeStep(in, o, opt);
    const double dt = Seconds() - t0;
    if (!s.ok()) {
      std::fprintf(stderr, "bench_decode: %s\n", s.message().c_str());
      std::exit(1);
    }
    return dt;
  }
  const char* name() const { return layout == cgdr::StateLayout::kKV ? "kv" : "vk"; }

  // Verify's memory floor (docs/SPEC.md 6d.2): the same call's traffic with
  // no arithmetic, each state read once from its slot and written to its K
  // destination slots with streaming stores (no read for ownership), on the
  // same threads, slots and item order.
  double FloorTime(const Args& a, int threads) {
    const int64_t N = a.N, K = a.K, items = N * a.Nv;
    const int64_t head = a.Dk * a.Dv * static_cast<int64_t>(cgdr::DTypeSize(a.pool));
    const int64_t slot = a.Nv * head;
    const double t0 = Seconds();
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t item = 0; item < items; ++item) {
      const int64_t n = item / a.Nv, h = item % a.Nv;
      const uint8_t* from = pool + rows[n] * slot + h * head;
      for (int64_t j = 0; j < K; ++j) StreamCopy(from, pool + dst[n * K + j] * slot + h * head, head);
    }
    StreamFence();
    return Seconds() - t0;
  }
};

}  // namespace

int main(int argc, char** argv) {
  const Args a = Parse(argc, argv);
  const int threads = a.threads > 0 ? a.threads : omp_get_max_threads();
  const int64_t state_bytes = a.N * a.Nv * a.Dk * a.Dv * static_cast<int64_t>(cgdr::DTypeSize(a.pool));
  Copier copier(state_bytes, threads);
  std::vector<std::unique_ptr<Stepper>> steppers;
  for (const char* l : {"vk", "kv"}) {
    if (a.layout != "both" && a.layout != l) continue;
    steppers.push_back(std::make_unique<Stepper>(a, std::string(l) == "kv" ? cgdr::StateLayout::kKV : cgdr::StateLayout::kVK, threads));
  }
  // Interleave the copy and the steps so drift in the machine's bandwidth
  // (shared hosts) hits both alike; the first round only warms up.
  std::vector<double> copy_t;
  std::vector<std::vector<double>> step_t(steppers.size()), verify_t(steppers.size()), floor_t(steppers.size());
  for (int it = 0; it <= a.iters; ++it) {
    const double c = copier.Time();
    if (it > 0) copy_t.push_back(c);
    for (size_t i = 0; i < steppers.size(); ++i) {
      const double t = steppers[i]->Time();
      if (it > 0) step_t[i].push_back(t);
      if (a.K == 0) continue;
      const double vt = steppers[i]->Time(true);
      if (it > 0) verify_t[i].push_back(vt);
      const double ft = steppers[i]->FloorTime(a, threads);
      if (it > 0) floor_t[i].push_back(ft);
    }
  }
  const double copy_gbps = copier.moved() / Median(copy_t) / 1e9;
  std::printf("decode step: N=%lld Nk=%lld Nv=%lld Dk=%lld Dv=%lld pool=%s gate=%s threads=%d target=%s iters=%d\n",
              static_cast<long long>(a.N), static_cast<long long>(a.Nk), static_cast<long long>(a.Nv),
              static_cast<long long>(a.Dk), static_cast<long long>(a.Dv), cgdr::DTypeName(a.pool),
              a.per_channel_gate ? "per-channel" : "per-head", threads, cgdr::ActiveTarget().c_str(), a.iters);
  std::printf("memcpy of %.0f MiB: %.2f GB/s (read + written, median)\n", static_cast<double>(state_bytes) / (1 << 20),
              copy_gbps);
  std::printf("%-6s %12s %14s %10s %10s\n", "layout", "ms/step", "state MB/step", "GB/s", "% copy");
  std::string json = "[\n";
  for (size_t i = 0; i < steppers.size(); ++i) {
    const Stepper& st = *steppers[i];
    const double sec = Median(step_t[i]), gbps = st.state_bytes / sec / 1e9, pct = 100.0 * gbps / copy_gbps;
    std::printf("%-6s %12.3f %14.1f %10.2f %9.1f%%\n", st.name(), sec * 1e3, st.state_bytes / 1e6, gbps, pct);
    char buf[512];
    std::snprintf(buf, sizeof buf,
                  "  {\"name\": \"decode_%s\", \"N\": %lld, \"Nk\": %lld, \"Nv\": %lld, \"Dk\": %lld, \"Dv\": %lld, "
                  "\"state_dtype\": \"%s\", \"per_channel_gate\": %s, \"threads\": %d, \"seconds\": %.9g, "
                  "\"state_bytes\": %.0f, \"gbps\": %.4f, \"copy_gbps\": %.4f, \"pct_copy\": %.2f}%s\n",
                  st.name(), static_cast<long long>(a.N), static_cast<long long>(a.Nk), static_cast<long long>(a.Nv),
                  static_cast<long long>(a.Dk), static_cast<long long>(a.Dv), cgdr::DTypeName(a.pool),
                  a.per_channel_gate ? "true" : "false", threads, sec,
                  st.state_bytes, gbps, copy_gbps, pct, i + 1 < steppers.size() || a.K > 0 ? "," : "");
    json += buf;
    if (a.K > 0) {  // verify: one call of K tokens against K single steps (the row above), same run
      // The floor bounds the speedup any verify could reach here: K steps' time over the floor's.
      const double vsec = Median(verify_t[i]), speedup = static_cast<double>(a.K) * sec / vsec;
      const double fsec = Median(floor_t[i]), bound = static_cast<double>(a.K) * sec / fsec;
      std::printf("verify %s K=%lld: %.3f ms/call, %lld steps %.3f ms: %.2fx (memory floor %.3f ms: at most %.2fx)\n",
                  st.name(), static_cast<long long>(a.K), vsec * 1e3, static_cast<long long>(a.K), a.K * sec * 1e3,
                  speedup, fsec * 1e3, bound);
      std::snprintf(buf, sizeof buf,
                    "  {\"name\": \"verify_%s\", \"N\": %lld, \"K\": %lld, \"seconds\": %.9g, "
                    "\"steps_seconds\": %.9g, \"speedup_vs_steps\": %.4f, \"floor_seconds\": %.9g, "
                    "\"floor_speedup_bound\": %.4f}%s\n",
                    st.name(), static_cast<long long>(a.N), static_cast<long long>(a.K), vsec, a.K * sec, speedup,
                    fsec, bound, i + 1 < steppers.size() ? "," : "");
      json += buf;
    }
  }
  json += "]\n";
  if (!a.json.empty()) {
    FILE* f = std::fopen(a.json.c_str(), "w");
    if (!f || std::fputs(json.c_str(), f) < 0 || std::fclose(f) != 0) {
      std::fprintf(stderr, "bench_decode: cannot write %s\n", a.json.c_str());
      return 1;
    }
  }
  return 0;
}
