// Intel AMX (the matrix engine of Sapphire Rapids and later Xeons): the one
// tile shape every engine kernel uses, and the tiles of each worker thread.
// Whether this process may run tile instructions at all is a fact about the
// machine: AmxHardwareEnabled() in core/cpu_features.h.
#pragma once

#include <cstdint>

namespace cgdr {

// Every tile the engine uses is 16 rows of 64 bytes (palette 1): C tiles of
// 16 x 16 FP32, A tiles of 16 rows x 32 bf16, B tiles of 16 pairs x 16
// columns ("VNNI": row p, column n holds B[2p][n] and B[2p + 1][n]).
constexpr int64_t kTileRows = 16;
constexpr int64_t kTileBytes = 64;
constexpr int64_t kTileWords = kTileRows * kTileBytes / 4;  // 256 32-bit words (bf16 pairs or FP32)
constexpr int64_t kTileK = 32;                              // bf16 elements of k per A row / B tile

// The 64-byte operand of LDTILECFG: palette 1, all 8 tiles 16 x 64 bytes.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
  TileConfig() {
    for (int t = 0; t < 8; ++t) {
      colsb[t] = kTileBytes;
      rows[t] = kTileRows;
    }
  }
};
static_assert(sizeof(TileConfig) == 64, "LDTILECFG reads 64 bytes");

// Loads TileConfig on the calling thread (the tile configuration belongs to
// each thread) / releases the tiles (TILERELEASE: the thread's tile state
// returns to its initial, zeroed state). Only where AmxHardwareEnabled().
void ConfigureTilesOnThisThread();
void ReleaseTilesOnThisThread();

// The peak loop of `cgdr bench` (SPEC 8): `iters` times 4 TDPBF16PS on 4
// accumulators with operands held in tiles (16 x 16 x 32 multiply-adds
// each), on the calling thread, which it configures and releases; returns a
// value of the accumulators so nothing is elided. Only where
// AmxHardwareEnabled().
float AmxDotLoop(int64_t iters);

}  // namespace cgdr
