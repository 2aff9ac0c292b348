// Machine limits measured in the same run as the benchmark (SPEC 8), so that
// "% of peak" is against this machine at this moment, not a datasheet.
#pragma once

#include <cstddef>
#include <string>

namespace cgdr {

struct FmaPeak {
  double gflops = 0.0;   // FP32, 2 flops per lane per FMA, all threads together
  int threads = 0;
  size_t lanes = 0;      // f32 lanes of the dispatched vector
  std::string target;    // Highway target the loop ran on ("AVX3", ...)
  int chains = 0;        // independent FMA chains per thread (all in registers on that target)
};

// Register-only FMA loop (12 or 16 independent accumulators: as many as the
// target's vector registers hold with the loop's constants) on `threads` threads
// at once; best of short trials taking about 2 * `seconds` in all.
FmaPeak MeasureFmaPeak(int threads, double seconds = 0.2);

// AMX TDPBF16PS peak: a tile-resident loop (4 accumulators, operands held in
// tiles) on `threads` threads at once, best of short trials, in bf16 GFLOP/s
// (2 flops per multiply-add). 0 where AMX is not usable (core/cpu_features.h).
struct AmxPeak {
  double gflops = 0.0;
  int threads = 0;
};
AmxPeak MeasureAmxPeak(int threads, double seconds = 0.2);

struct CopyBandwidth {
  double gbytes_per_s = 0.0;  // (bytes read + bytes written) / s, 1e9 bytes
  int threads = 0;
  size_t bytes = 0;           // size of each of the two buffers
};

// Copies a `bytes`-sized buffer to another, split over `threads` threads;
// best of a few passes. Buffers far larger than the caches, so this is DRAM.
CopyBandwidth MeasureCopyBandwidth(int threads, size_t bytes = size_t{256} << 20);

}  // namespace cgdr
