// Register-blocked FP32 micro-kernels: the CPU analogue of the seeds' Cube
// Mmad (SPEC 9). Every product of the chunked step is one call of Gemm():
//   C[i, :] = init(i) + sum over segments s of (+/-) sum_k A_s[i, k] * B_s[k, :]
// with each segment's optional row scale (and addend) at its end.
// vectorised along the columns of C. Each element is one FMA chain in a fixed
// order (segments, then k ascending) whatever the blocking, so results do not
// depend on the V tile width or the thread count (SPEC 5: bitwise identical).
//
// Per-target code: included once per Highway target. The definitions are in
// gemm.cc, their own translation unit.
#if defined(CGDR_KERNELS_GEMM_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef CGDR_KERNELS_GEMM_INL_H_
#undef CGDR_KERNELS_GEMM_INL_H_
#else
#define CGDR_KERNELS_GEMM_INL_H_
#endif

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "cgdr/cgdr.hpp"
#include "hwy/highway.h"
#include "kernels/load-inl.h"
#include "kernels/prefetch.h"
#include "plan/scratch_layout.h"

HWY_BEFORE_NAMESPACE();
namespace cgdr {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// Rows of a caller's tensor in its own dtype (f32, f16, bf16): row i of the
// product's C at at + i * stride bytes, C's column 0 at at. Every column of
// C must lie inside the row (a whole panel of the item's V tile).
struct TensorRows {
  void* at = nullptr;  // null: none
  int64_t stride = 0;  // bytes
  DType dtype = DType::kF32;
  // Stores may stream past the caches (Plan::stream_out). Set only on rows
  // whose start and stride are multiples of kLineBytes; a tile streams only
  // where each of its rows covers whole lines (TileFillsLines), so no line
  // is written in parts at different times.
  bool stream = false;
};

constexpr int64_t kLineBytes = 64;

// What a segment's chains become at its end, row i of C: acc = scale[i] * acc,
// plus add[i][:] when add is set, or plus add_scale[i] * (row i of add_rows
// as f32) when add_rows is. A diagonal factor of A (e^G, beta of the chunk's
// rows) then costs one multiply per element of C, not a scaled copy of A
// written per value head (seeds 001 s.3 scale K and Q in UB instead); and V
// is read from the caller's tensor by the tile that needs it (X's epilogue),
// not converted into scratch in a pass of its own.
struct RowEpilogue {
  const float* scale = nullptr;  // null: chains left as they are
  const float* add = nullptr;    // null: nothing added
  int64_t ld_add = 0;
  TensorRows add_rows = {};      // instead of add: converted rows ...
  const float* add_scale = nullptr;  // ... times add_scale[i] (the one Mul of Vb = diag(beta) V)
};

// One A*B term. `lower` marks A lower-triangular including its diagonal
// (A[i][k] == 0 for k > i): row i then reads only k <= i, so nothing from a
// later token can reach an earlier row, not even as 0 * x (SPEC 4 step 3:
// causality by construction).
struct Segment {
  const float* a = nullptr;
  int64_t lda = 0;  // A[i][k] = a[i * lda + k * a_kstride]: a_kstride != 1 reads
  const float* b = nullptr;  // a transposed operand in place (no packing pass)
  int64_t ldb = 0;
  int64_t k = 0;
  bool lower = false;
  bool negate = false;
  int64_t a_kstride = 1;
  RowEpilogue then = {};  // applied after this segment's last multiply-add
};

// A second store of the result with row i times scale[i] (c null: none).
// (GemmJob::out_rows, by contrast, replaces the store into c.)
struct ScaledCopy {
  float* c = nullptr;
  int64_t ldc = 0;
  const float* scale = nullptr;
};

struct GemmJob {
  int64_t rows = 0;
  int64_t cols = 0;            // multiple of kLaneMultiple (16)
  float* c = nullptr;
  int64_t ldc = 0;
  const float* c_init = nullptr;  // null: start from 0; else alpha * c_init (may equal c)
  int64_t ld_init = 0;
  float alpha = 1.0f;
  // Set: row r starts from row_alpha[r] * c_init instead of alpha * c_init
  // (KDA's state update: each key channel's row of S decays by its own
  // e^G_last, docs/SPEC.md 10).
  const float* row_alpha = nullptr;
  Segment seg[2];
  int segments = 1;
  // Only columns <= row are needed (lower-triangular results such as Kb K^T
  // and Q K^T); tiles entirely right of the diagonal are left unwritten.
  bool lower_result = false;
  // Lines of the next chunk to issue between tiles (null: none).
  PrefetchQueue* prefetch = nullptr;
  ScaledCopy also;
  // Set: C is stored into these rows, rounded to their dtype (the output
  // rows of O, straight into `out`), and c is not written.
  TensorRows out_rows;

  // k over all segments: the multiply-adds per element of C.
  int64_t KSum() const {
    int64_t k = 0;
    for (int s = 0; s < segments; ++s) k += seg[s].k;
    return k;
  }
};

// Register block: rows x column vectors. 32 vector registers on AVX-512 hold
// 6 x 4 accumulators plus operands; 16 registers elsewhere hold 6 x 2 (AVX2)
// or 4 x 2 (RowsPerBlock).
#if HWY_TARGET <= HWY_AVX3
constexpr int kBlockVecs = 4;
#elif HWY_TARGET == HWY_SCALAR
constexpr int kBlockVecs = 4;
#else
constexpr int kBlockVecs = 2;
#endif

// V-side buffers (S, Vb, Vnew, O) are stored in column panels of
// PanelCols() columns: panel c0 holds columns [c0, c0 + width) of every row,
// contiguous, row stride = width. In a plain [rows][128] layout a 64-column
// panel has a 512-byte row stride and lands on half of L1's sets, so the
// 32 KiB panel of S the products reuse would not stay in L1.
// The panel is the widest register block whatever dk_pad: for Dk above 128
// a panel of S outgrows 32 KiB and is read from L2 by each product, and still
// the 4-vector blocks run 6-12% faster than 2-vector blocks on an L1-sized
// panel (Dk = 144, 160, 200, 256; in-process A/B, formulations alternating
// per rep), which load 0.625 operands per FMA instead of 0.5.
HWY_INLINE int64_t PanelCols() { return kBlockVecs * static_cast<int64_t>(hn::Lanes(DF())); }

// A lone vector of columns after the last full panel joins it (a panel of
// kBlockVecs + 1 vectors, one register block of 4 x 5): alone it would run
// 1-vector blocks, 9 loads per 8 FMAs, at half the speed (Dv = 200: a 16-column
// panel took 11% of the time for 8% of the work).
// AVX-512 only: its 32 registers hold the 20 accumulators; elsewhere panels
// are whole vectors of kLaneMultiple columns and never leave a lone one.
constexpr bool kMergeTail = HWY_TARGET <= HWY_AVX3;
constexpr int kTailBlockVecs = kBlockVecs + 1;
// The bf16 pack buffers of ScratchLayout are sized for the widest panel.
constexpr int64_t kWidestPanel = (kMergeTail ? kTailBlockVecs : kBlockVecs) * static_cast<int64_t>(hn::MaxLanes(DF()));
static_assert(kWidestPanel <= kMaxPanelCols, "ScratchLayout's kMaxPanelCols is below the widest panel");

struct Panels {
  int64_t rows = 0, w_pad = 0, P = 0;
  int64_t merged = -1;  // start of the panel of PanelCols() + one vector, or -1
  // Every V-side buffer uses the same P: the layout's (the AMX engine's 16
  // columns), else PanelCols().
  Panels(int64_t rows_, const ScratchLayout& L)
      : rows(rows_), w_pad(L.w_pad), P(L.panel_cols ? L.panel_cols : PanelCols()) {
    const int64_t N = static_cast<int64_t>(hn::Lanes(DF()));
    if (kMergeTail && L.panel_cols == 0 && w_pad > P && w_pad % P == N) merged = w_pad - N - P;
  }
  int64_t Width(int64_t c0) const { return c0 == merged ? w_pad - c0 : std::min(P, w_pad - c0); }
  int64_t Next(int64_t c0) const { return c0 + Width(c0); }
  // Start of the panel holding column c.
  int64_t Start(int64_t c) const { return merged >= 0 && c >= merged ? merged : c / P * P; }
  float* Base(float* buf, int64_t c0) const { return buf + c0 * rows; }
  const float* Base(const float* buf, int64_t c0) const { return buf + c0 * rows; }
  float* At(float* buf, int64_t r, int64_t c) const {
    const int64_t c0 = Start(c);
    return buf + c0 * rows + r * Width(c0) + (c - c0);
  }
};

// Rows per register block for NV column vectors: enough independent FMA
// chains (>= 8: 4-cycle latency, 2 pipes) within the register file. A
// narrow product (one vector of columns, e.g. K K^T for C = 16) needs many
// rows per block or it runs at half speed on the FMA latency; but not 16:
// gcc 12 turned the 16 x 1 block into a loop that kept C in memory (2 FMAs
// per load and store), and K K^T, Q K^T took 1.5x longer than with 8 x 1.
// Blocks of 5 rows (for 3 vectors) left rows that ran as 1 x 3 blocks, 3
// chains on the FMA latency (Dv = 112, 1 thread: 2-6% slower); the rows
// left after the full blocks now run as blocks of 4, then 2, then 1.
// AVX-512's 4-vector panels (S and the chunk rows, 64 columns) take 6 rows:
// 24 accumulators + 4 operands + 1 broadcast of the 32 registers, 10 loads
// per 24 FMAs instead of 8 per 16, a third fewer tiles and passes over the
// panel of S (X and O: 6 + 6 + 4 rows; in-process A/B on the flagship,
// 6 x 4 / 4 x 4 time: 0.973-0.978 with 1 thread, 0.975 with 2); 3-vector
// panels (Dv = 112: 64 + 48 columns) take 8 rows, 24 + 3 + 1 registers
// (8 x 3 / 4 x 3: 0.90-0.91 for the whole call). More accumulators did not
// pay: 12 x 2 ran 1.16x slower than 8 x 2 (Dv = 96), 5 x 5 leaves 1-row
// blocks of 16 rows. AVX2's 2-vector panels take 6 rows: 12 + 2 + 1 of its
// 16 registers (0.938); SSE4, without FMA, needs registers for the products
// (6 x 2: 1.02).
template <int NV>
constexpr int RowsPerBlock() {
#if HWY_TARGET <= HWY_AVX3
  return NV <= 3 ? 8 : (NV == 4 ? 6 : 4);  // 8 x 1 .. 8 x 3, 6 x 4, 4 x 5 (kTailBlockVecs)
#elif HWY_TARGET == HWY_AVX2
  return NV == 1 ? 8 : (NV == 2 ? 6 : 4);
#else
  return NV == 1 ? 8 : 4;
#endif
}

// The register block's accumulators for rows [r0, r0 + R), columns
// [c0, c0 + NV vectors): alpha * C_init there, or 0 without C_init (the start
// of every product's chains, FP32 and bf16 alike).
template <int R, int NV>
HWY_INLINE void InitTile(DF d, const float* c_init, int64_t ld_init, float alpha, const float* row_alpha, int64_t r0,
                         int64_t c0, VF (&acc)[R][NV]) {
  const size_t N = hn::Lanes(d);
  if (c_init) {
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const VF va = hn::Set(d, row_alpha ? row_alpha[r0 + r] : alpha);
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) acc[r][v] = hn::Mul(va, hn::Load(d, c_init + (r0 + r) * ld_init + c0 + v * N));
    }
  } else {
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) acc[r][v] = hn::Zero(d);
  }
}

// Stores the block (InitTile's rows and columns) into C.
template <int R, int NV>
HWY_INLINE void StoreTile(DF d, const VF (&acc)[R][NV], float* c, int64_t ldc, int64_t r0, int64_t c0) {
  const size_t N = hn::Lanes(d);
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) hn::Store(acc[r][v], d, c + (r0 + r) * ldc + c0 + v * N);
}

// acc = scale[i] * acc + add_scale[i] * (row i of rows as f32), the row read
// in its dtype kT.
template <DType kT, int R, int NV>
HWY_INLINE void AddScaledRows(DF d, const RowEpilogue& e, int64_t r0, int64_t c0, VF (&acc)[R][NV]) {
  const size_t N = hn::Lanes(d);
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    const VF s = hn::Set(d, e.scale[r0 + r]);
    const VF f = hn::Set(d, e.add_scale[r0 + r]);
    const void* row = static_cast<const uint8_t*>(e.add_rows.at) + (r0 + r) * e.add_rows.stride;
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) {
      acc[r][v] = hn::MulAdd(s, acc[r][v], hn::Mul(f, LoadVectorAs<kT>(d, row, c0 + static_cast<int64_t>(v * N))));
    }
  }
}

// A segment's RowEpilogue on the block's accumulators.
template <int R, int NV>
HWY_INLINE void ApplyRowEpilogue(DF d, const RowEpilogue& e, int64_t r0, int64_t c0, VF (&acc)[R][NV]) {
  if (e.scale == nullptr) return;
  if (e.add_rows.at) {
    ForDType(e.add_rows.dtype, [&](auto tag) { AddScaledRows<decltype(tag)::value>(d, e, r0, c0, acc); });
    return;
  }
  const size_t N = hn::Lanes(d);
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    const VF s = hn::Set(d, e.scale[r0 + r]);
    const float* add = e.add ? e.add + (r0 + r) * e.ld_add + c0 : nullptr;
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) acc[r][v] = add ? hn::MulAdd(s, acc[r][v], hn::Load(d, add + v * N)) : hn::Mul(s, acc[r][v]);
  }
}

// Whether a block of NV vectors of columns, stored as kT, covers whole
// 64-byte lines in each row (given a line-aligned start).
template <DType kT, int NV>
constexpr bool TileFillsLines() {
  return kStreamableAs<kT> && (NV * static_cast<int64_t>(hn::MaxLanes(DF())) * kDTypeBytes<kT>) % kLineBytes == 0;
}

// The block stored into rows of kT (round to nearest even); with streaming
// stores where the rows ask for them and the block fills whole lines.
template <DType kT, int R, int NV>
HWY_INLINE void StoreTileAs(DF d, const VF (&acc)[R][NV], const TensorRows& rows, int64_t r0, int64_t c0) {
  const size_t N = hn::Lanes(d);
  const auto store_rows = [&](auto stream) {
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      void* row = static_cast<uint8_t*>(rows.at) + (r0 + r) * rows.stride;
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) {
        StoreVectorAs<kT, decltype(stream)::value>(d, acc[r][v], row, c0 + static_cast<int64_t>(v * N));
      }
    }
  };
  if constexpr (TileFillsLines<kT, NV>()) {
    if (rows.stream) return store_rows(std::true_type{});
  }
  store_rows(std::false_type{});
}

// Stores the block into C (or the job's out_rows) and, when the job asks for
// it, its scaled copy.
// (GemmJob, or the bf16 kernels' PackedJob: the same fields.)
template <int R, int NV, class Job>
HWY_INLINE void StoreTiles(DF d, const VF (&acc)[R][NV], const Job& job, int64_t r0, int64_t c0) {
  if (job.out_rows.at) {
    ForDType(job.out_rows.dtype, [&](auto tag) { StoreTileAs<decltype(tag)::value>(d, acc, job.out_rows, r0, c0); });
  } else {
    StoreTile(d, acc, job.c, job.ldc, r0, c0);
  }
  const ScaledCopy& also = job.also;
  if (also.c == nullptr) return;
  const size_t N = hn::Lanes(d);
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r) {
    const VF s = hn::Set(d, also.scale[r0 + r]);
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) hn::Store(hn::Mul(s, acc[r][v]), d, also.c + (r0 + r) * also.ldc + c0 + v * N);
  }
}

// C = the job's product (above). Defined once per target in gemm.cc.
void Gemm(const GemmJob& job);

}  // namespace HWY_NAMESPACE
}  // namespace cgdr
HWY_AFTER_NAMESPACE();

#endif  // include guard
