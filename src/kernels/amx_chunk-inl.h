// The AMX engine's chunk step (docs/SPEC.md 4 and 6c): every product of a
// chunk on 16 x 16 tiles with bf16 operands (hi/lo split in the compensated
// modes) and FP32 accumulation, the state FP32 from the first chunk to the
// last. The item driver calls these stages where it calls the vector ones:
//   AmxPrepareKeyHead   (per key head, after LoadKeyRows): q and k as tile
//                       operands; K K^T and Q K^T on tiles into kkt, qkt.
//   AmxPrepareValueHead (per value head, after PrepareValueHead, whose decay
//                       masks and FP32 blocked inverse are shared with the
//                       vector engine): A, P and K^T diag(e^(G_last - G)).
//   AmxChunkVSide       (per item): X, Vnew, O and the state update on the
//                       item's state tile, with V read from and out written
//                       to the caller's rows (io) between the tile blocks,
//                       and `prefetch`'s lines (may be null) paced over the
//                       blocks of its three state products.
// `hw`: the hardware tiles (the calling thread has configured them,
// ConfigureTilesOnThisThread) or the emulation. Defined once per Highway
// target in amx_chunk.cc.
//
// Per-target code: included once per Highway target.
#if defined(CGDR_KERNELS_AMX_CHUNK_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef CGDR_KERNELS_AMX_CHUNK_INL_H_
#undef CGDR_KERNELS_AMX_CHUNK_INL_H_
#else
#define CGDR_KERNELS_AMX_CHUNK_INL_H_
#endif

#include <cstdint>

#include "cgdr/cgdr.hpp"
#include "hwy/highway.h"
#include "kernels/chunk-inl.h"
#include "kernels/prefetch.h"
#include "plan/scratch_layout.h"

HWY_BEFORE_NAMESPACE();
namespace cgdr {
namespace HWY_NAMESPACE {

void AmxPrepareKeyHead(const ScratchLayout& L, float* HWY_RESTRICT base, int64_t n, Precision prec, bool hw);
void AmxPrepareValueHead(const ScratchLayout& L, float* HWY_RESTRICT base, int64_t n, Precision prec);
void AmxChunkVSide(const ScratchLayout& L, float* HWY_RESTRICT base, float* HWY_RESTRICT state, int64_t n,
                   Precision prec, bool hw, const ChunkTensors& io, PrefetchQueue* prefetch);

}  // namespace HWY_NAMESPACE
}  // namespace cgdr
HWY_AFTER_NAMESPACE();

#endif  // include guard
