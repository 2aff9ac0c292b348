// Google Benchmark micro-benchmarks of the kernel phases (issue 5 item 9):
// the blocked inverse, the K-side preparation, the V-side state products and
// the recurrent tile step, on hot scratch, for the dispatched SIMD target;
// and the state products once more with the state streaming from L2 as in a
// call (state_products_l2: 8 items' tiles in turn, as a group of 8 heads);
// and KDA's (the per-channel gate, docs/SPEC.md 10) K side and state products;
// and two references read against those: the three state products alone
// (state_products_bare) and the FMA peak of one thread, both in the same run.
// Counters: "alg_GFLOPs" counts SPEC 8's algorithmic flops of the tokens a
// call covers (6 Dk Dv per token), "GFLOPs" the phase's own multiply-adds.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "bench/bench_kernels.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "bench/peak.h"
#include "hwy/aligned_allocator.h"
#include "hwy/highway.h"
#include "kernels/chunk-inl.h"
#include "kernels/kda-inl.h"
#include "kernels/kside-inl.h"
#include "kernels/recurrent-inl.h"
#include "plan/scratch_layout.h"

HWY_BEFORE_NAMESPACE();
namespace cgdr {
namespace HWY_NAMESPACE {

// Fills scratch with small well-scaled values so nothing decays into denormals.
void FillScratch(float* p, int64_t n) {
  for (int64_t i = 0; i < n; ++i) p[i] = 0.01f * static_cast<float>((i * 7) % 13) - 0.06f;
}

// X = K S, O = Q S and S = 0.999 S + K^T Vnew panel by panel, as ChunkVSide
// orders them, but plain Gemm calls: no epilogues, no Vnew = A X, no P Vnew,
// no prefetching. What the register-blocked micro-kernel reaches on this
// CPU; state_products minus this is what the rest of the chunk step costs.
void StateProductsBare(const ScratchLayout& L, float* base) {
  const int64_t dk = L.dk_pad, n = L.c;
  const Panels sp(dk, L), rp(L.c, L);
  for (int64_t c0 = 0; c0 < L.w_pad; c0 = sp.Next(c0)) {
    const int64_t pw = sp.Width(c0);
    float* s = sp.Base(base + L.state, c0);
    GemmJob xj;
    xj.rows = n; xj.cols = pw; xj.c = rp.Base(base + L.x, c0); xj.ldc = pw;
    xj.seg[0] = Segment{base + L.k, dk, s, pw, dk, false, false};
    Gemm(xj);
    GemmJob oj = xj;
    oj.c = rp.Base(base + L.o, c0);
    oj.seg[0].a = base + L.q;
    Gemm(oj);
    GemmJob sj;
    sj.rows = dk; sj.cols = pw; sj.c = s; sj.ldc = pw;
    sj.c_init = s; sj.ld_init = pw; sj.alpha = 0.999f;
    sj.seg[0] = Segment{base + L.k, 1, rp.Base(base + L.vnew, c0), pw, n, false, false, dk};
    Gemm(sj);
  }
}

// Runs `iters` repetitions of one phase; returns a checksum so nothing is elided.
constexpr int64_t kStreamedTiles = 8;  // state_products_l2: 8 x 64 KiB tiles at 128 x 128

float RunPhase(int phase, int64_t chunk, int64_t dk, int64_t dv, int64_t iters) {
  const bool per_channel = phase == 5 || phase == 6 || phase == 7;
  const ScratchLayout L(chunk, dk, dv, phase == 4 ? kStreamedTiles : 1, false, false, per_channel);
  auto buf = hwy::AllocateAligned<float>(static_cast<size_t>(L.total));
  std::vector<float> init(static_cast<size_t>(L.total));
  FillScratch(init.data(), L.total);
  float* base = buf.get();
  if (per_channel) {  // the state's per-channel decay: near 1, so S neither vanishes nor grows
    for (int64_t i = 0; i < dk; ++i) init[static_cast<size_t>(L.kda_decay + i)] = 0.999f;
  }
  std::memcpy(base, init.data(), static_cast<size_t>(L.total) * 4);
  ChunkVectors cv(base + L.vec, L.c_pad);
  const int64_t n = L.c;
  float sum = 0.0f;
  // KDA's K side on g = -0.05 in every channel, e^g included (the item
  // driver takes it as it loads g).
  const auto kda_kside = [&] {
    for (int64_t i = 0; i < n * dk; ++i) base[L.kda_g + i] = -0.05f;
    ExpRows(base + L.kda_g, dk, n);
    KdaPrepareValueHead(L, base, n, 1.0f);
  };
  // The first `tiles` state tiles restored after every 16 calls on each.
  const auto restore_tiles = [&](int64_t it, int64_t tiles) {
    if (it % (16 * tiles) == 16 * tiles - 1) {
      std::memcpy(base + L.state, init.data() + L.state, static_cast<size_t>(L.tile_floats() * tiles) * 4);
    }
  };
  // The V side on state tile it % tiles.
  const auto vside = [&](int64_t it, int64_t tiles) {
    ChunkVSide(L, base, L.StateTile(base, it % tiles), n);
    sum += base[L.o];
    restore_tiles(it, tiles);
  };
  for (int64_t it = 0; it < iters; ++it) {
    // g = 0 and scale 1 keep the in-place scaled panels (q, k) from decaying
    // into denormals over repetitions; the exp calls cost the same.
    for (int64_t i = 0; i < n; ++i) { cv.beta[i] = 0.5f; cv.g[i] = 0.0f; }
    switch (phase) {
      case 0: {  // blocked inverse of a unit lower-triangular C x C
        float* m = base + L.attn;
        for (int64_t i = 0; i < n; ++i)
          for (int64_t j = 0; j < L.c_pad; ++j) m[i * L.c_pad + j] = j < i ? 0.01f : 0.0f;
        InvertUnitLower(m, L.c_pad, RoundUp(n, 16), base + L.tmp);
        sum += m[(n - 1) * L.c_pad];
        break;
      }
      case 1:  // K side: K K^T, Q K^T, cumsum, decay masks, row factors, inverse
        PrepareKSide<0>(L, base, n, 1.0f);
        sum += base[L.attn];
        break;
      case 2:  // V side: X, Vnew = A X, O, state update
        vside(it, 1);
        break;
      case 4:  // V side on the next of kStreamedTiles state tiles: each comes from L2
        vside(it, kStreamedTiles);
        break;
      case 5:  // KDA's K side: e^g, block factors, the decayed products, inverse, the V side's operands
        kda_kside();
        sum += base[L.attn];
        break;
      case 6:  // KDA's V side: operands K e^G, Q e^G, K e^(G_last - G), per-channel state decay
        vside(it, 1);
        break;
      case 7:  // KDA's whole chunk step on scratch: K side, then V side
        kda_kside();
        vside(it, 1);
        break;
      case 8:  // the three state products alone (state_products_bare)
        StateProductsBare(L, base);
        sum += base[L.o];
        restore_tiles(it, 1);
        break;
      default: {  // recurrent: n tokens over one state tile
        const Panels sp(L.dk_pad, L), rp(L.c, L);
        for (int64_t c0 = 0; c0 < L.w_pad; c0 = sp.Next(c0)) {
          for (int64_t i = 0; i < n; ++i) {
            RecurrentTokenPanel<DType::kF32>(sp.Base(base + L.state, c0), L.dk_pad, sp.Width(c0), base + L.q + i * L.dk_pad,
                                base + L.k + i * L.dk_pad, rp.Base(base + L.vb, c0) + i * sp.Width(c0), 0.5f, 0.999f,
                                0.1f, rp.Base(base + L.o, c0) + i * sp.Width(c0));
          }
        }
        sum += base[L.o];
        restore_tiles(it, 1);
        break;
      }
    }
  }
  return sum;
}

}  // namespace HWY_NAMESPACE
}  // namespace cgdr
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace cgdr {
HWY_EXPORT(RunPhase);

// Multiply-adds of one call, for the GFLOPs counter.
double PhaseFlops(int phase, int64_t chunk, int64_t dk, int64_t dv) {
  const double c = static_cast<double>(RowsPerStep(chunk));
  switch (phase) {
    case 0: return 2.0 * c * c * c / 6.0;
    case 1: return 2.0 * c * c * dk;  // K K^T and Q K^T, lower triangles
    case 5: return 2.0 * 2.0 * c * c / 2.0 * dk;  // the decayed K K^T and Q K^T, lower triangles
    case 2:
    case 4:
    case 6: return 2.0 * (3.0 * c * dk * dv + c * c * dv);
    case 7: return PhaseFlops(5, chunk, dk, dv) + PhaseFlops(6, chunk, dk, dv);
    default: return 2.0 * 3.0 * c * dk * dv;  // the recurrence; the state products alone (8)
  }
}

void BM_Phase(benchmark::State& state, int phase) {
  const int64_t c = state.range(0), dk = state.range(1), dv = state.range(2);
  float sink = 0.0f;
  constexpr int64_t kCallsPerIteration = 1024;  // amortises the scratch set-up of RunPhase (64 left the small phases set-up bound)
  for (auto _ : state) sink += HWY_DYNAMIC_DISPATCH(RunPhase)(phase, c, dk, dv, kCallsPerIteration);
  benchmark::DoNotOptimize(sink);
  const double calls = static_cast<double>(state.iterations()) * kCallsPerIteration;
  state.counters["GFLOPs"] = benchmark::Counter(PhaseFlops(phase, c, dk, dv) * calls / 1e9, benchmark::Counter::kIsRate);
  if (phase >= 2 && phase != 5) {  // the V side and the recurrence cover tokens
    state.counters["alg_GFLOPs"] =
        benchmark::Counter(6.0 * RowsPerStep(c) * dk * dv * calls / 1e9, benchmark::Counter::kIsRate);
  }
}

BENCHMARK_CAPTURE(BM_Phase, inverse, 0)->Args({16, 128, 128})->Args({32, 128, 128})->Args({64, 128, 128});
BENCHMARK_CAPTURE(BM_Phase, kside, 1)->Args({16, 128, 128})->Args({32, 128, 128})->Args({64, 128, 128})->Args({64, 208, 208});
BENCHMARK_CAPTURE(BM_Phase, state_products, 2)->Args({16, 128, 128})->Args({32, 128, 128})->Args({64, 128, 128})->Args({16, 208, 208});
BENCHMARK_CAPTURE(BM_Phase, state_products_l2, 4)->Args({16, 128, 128})->Args({64, 128, 128})->Args({16, 208, 208});
BENCHMARK_CAPTURE(BM_Phase, kda_kside, 5)->Args({16, 128, 128})->Args({32, 128, 128})->Args({64, 128, 128});
BENCHMARK_CAPTURE(BM_Phase, kda_chunk, 7)->Args({16, 128, 128})->Args({32, 128, 128});
BENCHMARK_CAPTURE(BM_Phase, kda_state_products, 6)->Args({16, 128, 128})->Args({32, 128, 128})->Args({64, 128, 128});
BENCHMARK_CAPTURE(BM_Phase, state_products_bare, 8)->Args({16, 128, 128})->Args({32, 128, 128})->Args({16, 208, 208});
BENCHMARK_CAPTURE(BM_Phase, recurrent_tile, 3)->Args({1, 128, 128})->Args({1, 128, 64})->Args({1, 64, 64});

// The FP32 FMA peak of one thread (bench/peak.h, as `cgdr bench` measures
// it), in the same run: every row above ran on one thread, so its GFLOPs
// over this is its share of the peak.
void BM_FmaPeak(benchmark::State& state) {
  double gflops = 0.0;
  for (auto _ : state) gflops = std::max(gflops, MeasureFmaPeak(1, 0.05).gflops);
  state.counters["GFLOPs"] = gflops;
}
BENCHMARK(BM_FmaPeak)->Iterations(5);

}  // namespace cgdr
BENCHMARK_MAIN();
#endif  // HWY_ONCE
