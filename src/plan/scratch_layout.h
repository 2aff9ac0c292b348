// The carve-up of one thread's scratch buffer. Planner and kernel both derive
// it from the plan through KernelScratch, so the planner's byte count and the
// kernel's use cannot drift apart (the seeds' UB accounting missed a buffer: 002 s.5).
#pragma once

#include <cstdint>

#include "cgdr/plan.hpp"

namespace cgdr {

constexpr int64_t kScratchAlignFloats = 16;  // 64-byte alignment of every panel
constexpr int64_t kLaneMultiple = 16;        // widths padded for the widest vector (16 f32)

inline int64_t RoundUp(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// C = 1 loads this many tokens' rows at once and runs them panel by panel.
constexpr int64_t kRecurrentSpan = 16;
inline int64_t RowsPerStep(int64_t chunk) { return chunk == 1 ? kRecurrentSpan : chunk; }
constexpr int64_t kMaxRowsPerStep = 128;  // the largest chunk (C = 128)
// The widest V-side panel (Panels in kernels/gemm-inl.h): 4 vectors of 16
// f32, or 5 where a lone vector of columns joins the last panel.
constexpr int64_t kMaxPanelCols = 80;
// Per-chunk vectors of c_pad floats in ScratchLayout::vec (kernels' ChunkVectors).
constexpr int64_t kChunkVectors = 8;
// The AMX tile shape the scratch is sized for: C tiles of 16 x 16 FP32, k in
// steps of 32 bf16 (the kernels' tiles, kernels/amx.h, are held to it in amx_chunk.cc).
constexpr int64_t kAmxN = 16;
constexpr int64_t kAmxK = 32;

// KDA's chunk rows per block (kernels/kda.cc): the decays between two
// blocks are products of row factors (matrix products, 1 multiply-add per
// entry and channel), those inside one are chained pair by pair (a few
// vector operations per entry and channel), so small blocks do the least
// work; at C = 16, Dk = Dv = 128 blocks of 4 and 8 ran alike within the
// noise of the 2-vCPU host (AMD EPYC Zen 5), 16 no faster.
constexpr int64_t kKdaBlockRows = 4;

struct ScratchLayout {
  // Panel widths (floats): K side padded to dk_pad, V side to w_pad, chunk to c_pad.
  int64_t c = 0, c_pad = 0, dk_pad = 0, w_pad = 0;  // c: rows per step (chunk, or kRecurrentSpan for C = 1)
  // Offsets in floats from the (64-byte aligned) base.
  int64_t states = 1;   // state tiles held at once (a group of items, see Plan::group_items)
  int64_t state = 0;    // [states][dk_pad][w_pad]  S tiles, FP32 between chunks
  // Per key head (shared by the items of one key head in a chunk):
  int64_t q = 0;        // [c][dk_pad]       Q rows (normalised)
  int64_t k = 0;        // [c][dk_pad]       K rows (normalised)
  int64_t kt = 0;       // [dk_pad][c_pad]   K^T (bf16 precision modes)
  int64_t kkt = 0;      // [c][c_pad]        K K^T (lower triangle incl. diagonal)
  int64_t qkt = 0;      // [c][c_pad]        Q K^T (lower triangle incl. diagonal)
  // Per value head (shared by its V tiles); its row factors (e^G, beta, ...)
  // are in vec and scale rows in the products' epilogues (RowEpilogue).
  int64_t attn = 0;     // [c][c_pad]        L, then A = (I+L)^-1
  int64_t qk = 0;       // [c][c_pad]        P = masked scaled decayed Q K^T
  int64_t tmp = 0;      // [c][c_pad]        blocked-inverse temporaries
  // V-side buffers below are column-panel major (see Panels in gemm-inl.h).
  int64_t vb = 0;       // [c][w_pad]        beta*V (V for C = 1)
  int64_t x = 0;        // [c][w_pad]        X = Vb - diag(beta e^G) K S
  int64_t vnew = 0;     // [c][w_pad]        Vnew = A X
  int64_t vdec = 0;     // [c][w_pad]        diag(e^(G_last - G)) Vnew
  int64_t o = 0;        // [c][w_pad]        output rows of the tile
  int64_t vec = 0;      // [kChunkVectors][c_pad]  beta, g, G, e^G, e^(G_last-G), ... (ChunkVectors)
  int64_t line = 0;     // [16][dk_pad]      state rows in transit (layout vk), a vector's worth
  // bf16 precision modes only (empty for fp32): operands of one product packed
  // as bf16 pairs along k, hi and lo parts, for up to two segments.
  int64_t pack = 0;        // [2 segments][A hi, A lo, B hi, B lo] of pack_part words each
  int64_t pack_part = 0;   // 32-bit words per part (0 for fp32)
  // The V-side buffers' panel width (0: the vector kernels' own, PanelCols()).
  // The AMX engine (kernels/amx_chunk.cc) keeps them row-major (one panel of
  // w_pad): its C tiles are 16 rows of 64 bytes anywhere, and rows convert
  // from and to the caller's dtype in one pass. Then its bf16 tile operands,
  // each a hi plane and a lo plane of *_plane words.
  int64_t panel_cols = 0;
  int64_t amx_ck = 0, amx_dk = 0;  // the chunk and Dk as contractions: multiples of kAmxK (32)
  // Per key head: K and Q as A operands [c_pad x amx_dk], K^T as B [amx_dk x c_pad].
  int64_t amx_ka = 0, amx_qa = 0, amx_ktb = 0, amx_cd_plane = 0;
  // Per value head: A = (I + L)^-1 and P as A operands [c_pad x amx_ck];
  // K^T diag(e^(G_last - G)) as A [dk_pad x amx_ck].
  int64_t amx_attn = 0, amx_p = 0, amx_cc_plane = 0, amx_kta = 0, amx_kta_plane = 0;
  // Per item: S as B [amx_dk x w_pad]; X and Vnew as B [amx_ck x w_pad].
  int64_t amx_s = 0, amx_s_plane = 0, amx_x = 0, amx_v = 0, amx_cw_plane = 0;
  int64_t amx_flags = 0;  // which operands have a nonzero lo plane (one word each)
  // The per-channel gate only (KDA, docs/SPEC.md 10; empty otherwise), per
  // value head; the chunk's rows in blocks of kKdaBlockRows (kernels/kda.cc):
  int64_t kda_g = 0;    // [c][dk_pad]  decay factors e^g
  int64_t kda_q = 0;    // [c][dk_pad]  Q * e^G
  int64_t kda_k = 0;    // [c][dk_pad]  K * e^G
  int64_t kda_kf = 0;   // [c][dk_pad]  K * e^(G_o' - G) (o': the end of its own block), then K * e^(G_last - G)
  int64_t kda_rel = 0;  // [2][kKdaBlockRows][dk_pad]  Q, K of one block times e^(G - G_o) (o: the end of the block before)
  int64_t kda_vec = 0;  // [dk_pad]  the decay of one block
  int64_t kda_decay = 0;  // [dk_pad]  e^G_o of the block at hand; at the end e^G_last: the carried state's decay per key channel
  bool kda = false;
  int64_t total = 0;    // floats

  ScratchLayout() = default;
  ScratchLayout(int64_t chunk, int64_t dk_padded, int64_t v_width, int64_t state_tiles = 1, bool packed = false,
                bool amx = false, bool per_channel = false) {
    c = RowsPerStep(chunk);
    states = state_tiles;
    c_pad = RoundUp(c, kLaneMultiple);
    dk_pad = dk_padded;
    w_pad = RoundUp(v_width, kLaneMultiple);
    int64_t at = 0;
    auto take = [&at](int64_t n) {
      const int64_t off = at;
      at += RoundUp(n, kScratchAlignFloats);
      return off;
    };
    state = take(states * dk_pad * w_pad);
    q = take(c * dk_pad);
    k = take(c * dk_pad);
    kt = take(dk_pad * c_pad);
    kkt = take(c * c_pad);
    qkt = take(c * c_pad);
    attn = take(c * c_pad);
    qk = take(c * c_pad);
    tmp = take(c * c_pad);
    vb = take(c * w_pad);
    x = take(c * w_pad);
    vnew = take(c * w_pad);
    vdec = take(c * w_pad);
    o = take(c * w_pad);
    vec = take(kChunkVectors * c_pad);
    line = take(kLaneMultiple * dk_pad);
    if (packed) {
      // Any operand of a product: rows, k and columns are each at most
      // max(c_pad, dk_pad, kMaxPanelCols); k in pairs.
      int64_t m = c_pad > dk_pad ? c_pad : dk_pad;
      if (m < kMaxPanelCols) m = kMaxPanelCols;
      pack_part = RoundUp(m * (m / 2 + 1), kScratchAlignFloats);
      pack = take(8 * pack_part);
    }
    if (amx) {
      panel_cols = w_pad;  // one panel: row-major
      amx_ck = RoundUp(c, kAmxK);
      amx_dk = RoundUp(dk_pad, kAmxK);
      amx_cd_plane = c_pad * amx_dk / 2;  // words: bf16 pairs
      amx_ka = take(2 * amx_cd_plane);
      amx_qa = take(2 * amx_cd_plane);
      amx_ktb = take(2 * amx_cd_plane);
      amx_cc_plane = c_pad * amx_ck / 2;
      amx_attn = take(2 * amx_cc_plane);
      amx_p = take(2 * amx_cc_plane);
      amx_kta_plane = dk_pad * amx_ck / 2;
      amx_kta = take(2 * amx_kta_plane);
      amx_s_plane = amx_dk / 2 * w_pad;
      amx_s = take(2 * amx_s_plane);
      amx_cw_plane = amx_ck / 2 * w_pad;
      amx_x = take(2 * amx_cw_plane);
      amx_v = take(2 * amx_cw_plane);
      amx_flags = take(kScratchAlignFloats);
    }
    if (per_channel) {
      kda = true;
      kda_g = take(c * dk_pad);
      kda_q = take(c * dk_pad);
      kda_k = take(c * dk_pad);
      kda_kf = take(c * dk_pad);
      kda_rel = take(2 * kKdaBlockRows * dk_pad);
      kda_vec = take(dk_pad);
      kda_decay = take(dk_pad);
    }
    total = at;
  }
  int64_t bytes() const { return total * 4 + 64; }  // +64: alignment slack of the base
  int64_t tile_floats() const { return dk_pad * w_pad; }
  float* StateTile(float* base, int64_t i) const { return base + state + i * tile_floats(); }
};

// Whether the plan's chunked products run on the AMX engine's tiles
// (hardware or emulated).
inline bool RunsOnTiles(const Plan& plan) {
  return plan.chunk > 1 && (plan.engine == Engine::kAmx || plan.engine == Engine::kAmxEmulated);
}

// The layout the kernel carves for a plan (bf16 pack buffers for the vector
// kernels' chunked products in the bf16 modes, tile operands for the AMX
// engine): the planner sizes scratch_bytes_per_thread by it, CheckPlan checks
// that size against it, and the kernel uses it.
inline ScratchLayout KernelScratch(const Plan& plan) {
  const bool tiles = RunsOnTiles(plan);
  const bool packed = plan.precision != Precision::kFp32 && plan.chunk > 1 && !tiles;
  return ScratchLayout(plan.chunk, plan.dk_padded, plan.v_step, plan.group_items, packed, tiles,
                       plan.problem.per_channel_gate);
}

}  // namespace cgdr
