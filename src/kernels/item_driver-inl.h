// The item driver: runs one group of work items of one sequence (SPEC 5),
// advanced chunk by chunk together, for every formulation (C = 1 token by
// token, C = 16..128 chunked). Defines BucketDriver<kDkPad> of items-inl.h;
// included only by bucket.cc, which instantiates one Dk bucket per
// translation unit.
//
// Per-target code: included once per Highway target.
#if defined(CGDR_KERNELS_ITEM_DRIVER_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef CGDR_KERNELS_ITEM_DRIVER_INL_H_
#undef CGDR_KERNELS_ITEM_DRIVER_INL_H_
#else
#define CGDR_KERNELS_ITEM_DRIVER_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "cgdr/plan.hpp"
#include "core/phase_timers.h"
#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "kernels/amx_chunk-inl.h"
#include "kernels/chunk-inl.h"
#include "kernels/gate-inl.h"
#include "kernels/gemm-inl.h"
#include "kernels/items-inl.h"
#include "kernels/kda-inl.h"
#include "kernels/kside-inl.h"
#include "kernels/load-inl.h"
#include "kernels/prefetch.h"
#include "kernels/recurrent-inl.h"
#include "kernels/transpose-inl.h"
#include "plan/scratch_layout.h"

HWY_BEFORE_NAMESPACE();
namespace cgdr {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Address of element `index` of a tensor (64-bit offsets throughout: SPEC 3).
inline const void* At(const TensorView& t, int64_t index) {
  return static_cast<const uint8_t*>(t.data) + index * static_cast<int64_t>(DTypeSize(t.dtype));
}
inline void* AtMut(const TensorView& t, int64_t index) {
  return static_cast<uint8_t*>(t.data) + index * static_cast<int64_t>(DTypeSize(t.dtype));
}

// Everything one work item reads, resolved once.
struct ItemView {
  const Problem* p;
  const Inputs* in;
  const Outputs* out;
  const WorkItem* it;
  int64_t hk;          // query/key head of value head it->head (grouped heads)
  int64_t init_base;   // element offset of the item's state in initial_state; -1: start from zeros
  int64_t final_base;  // element offset of its state in final_state; -1: not written
  Precision plan_precision;  // plan.precision: arithmetic of the chunked products
  Engine engine;             // plan.engine: where the chunked products run
  bool stream_out;           // out's rows take streaming stores (StreamsOutput)
  HeadGate gate;             // the head's gate constants when g comes from the raw gate a
};

// Element offset of value head `head`'s state of sequence `seq` in a state
// tensor or pool (docs/SPEC.md 6d: slot state_indices[seq], slots
// slot_stride apart), or -1 when the sequence has no slot.
HWY_INLINE int64_t StateOffset(const Problem& p, int64_t seq, int64_t head) {
  const int64_t slot = p.Slot(seq);
  return slot < 0 ? -1 : slot * p.SlotStride() + head * p.Dk * p.Dv;
}

// The gate constants of value head `head` (zeros without the raw gate).
HWY_INLINE HeadGate ItemGate(const Problem& p, const Inputs& in, int64_t head) {
  if (!p.has_gate) return HeadGate{};
  const float dt_bias = in.dt_bias.present() && !p.per_channel_gate ? LoadAsF32(in.dt_bias.data, in.dt_bias.dtype, head) : 0.0f;
  const bool has_a_log = in.A_log.present();
  return MakeHeadGate(has_a_log ? LoadAsF32(in.A_log.data, in.A_log.dtype, head) : 0.0f, dt_bias,
                      static_cast<float>(p.options.gate_lower_bound), has_a_log);
}

HWY_INLINE ItemView MakeItemView(const Plan& plan, const Inputs& in, const Outputs& out, const WorkItem& it,
                                 bool stream_out) {
  const Problem& p = plan.problem;
  const int64_t offset = StateOffset(p, it.seq, it.head);
  return ItemView{&p, &in, &out, &it, it.head / (p.Nv / p.Nk),
                  in.initial_state.present() ? offset : -1, out.final_state.present() ? offset : -1,
                  plan.precision, plan.engine, stream_out, ItemGate(p, in, it.head)};
}

// Whether this call writes out with streaming stores (Plan::stream_out): only
// on rows that start on a line (base, head and V tile offsets, row stride)
// and where the register blocks of 64-column panels fill whole lines as
// out's dtype; else normal stores, and out is prefetched for writing.
HWY_INLINE bool StreamsOutput(const Plan& plan, const TensorView& out) {
  const Problem& p = plan.problem;
  const int64_t esize = static_cast<int64_t>(DTypeSize(out.dtype));
  const bool lines = reinterpret_cast<uintptr_t>(out.data) % kLineBytes == 0 && (p.Dv * esize) % kLineBytes == 0 &&
                     (plan.v_step * esize) % kLineBytes == 0;
  bool fills = false;
  ForDType(out.dtype, [&](auto tag) { fills = TileFillsLines<decltype(tag)::value, kBlockVecs>(); });
  return plan.stream_out && lines && fills;
}

// The vk layout stores the state transposed ([Dv][Dk]: one row per V
// column). It moves through L.line a vector's worth of rows at a time: N rows
// of Dk there, transposed to or from N columns of the panel one N x N tile
// at a time in registers (transpose-inl.h).

// S tile [dk_pad x w_pad] (column panels) from initial_state (zero when
// absent, or when the sequence's slot is negative); zero padding.
HWY_INLINE void LoadStateTile(const ItemView& iv, const ScratchLayout& L, float* HWY_RESTRICT base, float* HWY_RESTRICT S) {
  const Problem& p = *iv.p;
  const WorkItem& it = *iv.it;
  const Panels sp(L.dk_pad, L);
  const TensorView& init = iv.in->initial_state;
  if (iv.init_base < 0) {
    for (int64_t i = 0; i < L.dk_pad * L.w_pad; ++i) S[i] = 0.0f;
    return;
  }
  if (p.options.state_layout == StateLayout::kKV) {
    for (int64_t c0 = 0; c0 < L.w_pad; c0 = sp.Next(c0)) {
      const int64_t pw = sp.Width(c0), cols = std::clamp<int64_t>(it.v_width - c0, 0, pw);
      float* panel = sp.Base(S, c0);
      for (int64_t r = 0; r < p.Dk; ++r) {
        LoadRow(At(init, iv.init_base + r * p.Dv + it.v_begin + c0), init.dtype, cols, panel + r * pw, pw);
      }
      for (int64_t i = p.Dk * pw; i < L.dk_pad * pw; ++i) panel[i] = 0.0f;  // rows Dk .. dk_pad
    }
    return;
  }
  const int64_t N = static_cast<int64_t>(hn::Lanes(hn::ScalableTag<float>()));
  float* line = base + L.line;
  for (int64_t j0 = 0; j0 < L.w_pad; j0 += N) {  // past v_width: zero rows, zero columns of S
    for (int64_t i = 0; i < N; ++i) {
      float* row = line + i * L.dk_pad;
      if (j0 + i < it.v_width) {
        LoadRow(At(init, iv.init_base + (it.v_begin + j0 + i) * p.Dk), init.dtype, p.Dk, row, L.dk_pad);
      } else {
        for (int64_t r = 0; r < L.dk_pad; ++r) row[r] = 0.0f;
      }
    }
    const int64_t c0 = sp.Start(j0), pw = sp.Width(c0);  // panels start at multiples of N
    float* panel = sp.Base(S, c0) + (j0 - c0);
    for (int64_t r0 = 0; r0 < L.dk_pad; r0 += N) TransposeTile(line + r0, L.dk_pad, panel + r0 * pw, pw);
  }
}

// A row of a state out to dst as its dtype; `stream`: with streaming stores
// past the caches where the row is whole lines (a checkpoint is read by a
// later call, not this one: ordinary stores would read each fresh line for
// ownership first and evict the call's working set with it).
HWY_INLINE void StoreStateRow(const float* HWY_RESTRICT src, int64_t n, DType t, void* dst, bool stream) {
  ForDType(t, [&](auto tag) {
    constexpr DType kT = decltype(tag)::value;
    if constexpr (kStreamableAs<kT>) {
      const bool lines = reinterpret_cast<uintptr_t>(dst) % kLineBytes == 0 && (n * kDTypeBytes<kT>) % kLineBytes == 0;
      if (stream && lines) return StreamRowAs<kT>(src, n, dst);
    }
    StoreRowAs<kT>(src, n, dst);
  });
}

// The item's FP32 state tile into a state tensor `dst` at element offset
// `dst_base` (its (seq, head) state): final_state, rounded to its dtype once,
// here (seeds 003 s.2), or a checkpoint.
HWY_INLINE void StoreStateTile(const ItemView& iv, const ScratchLayout& L, float* HWY_RESTRICT base, float* HWY_RESTRICT S,
                               const TensorView& dst, int64_t dst_base, bool stream = false) {
  const Problem& p = *iv.p;
  const WorkItem& it = *iv.it;
  const Panels sp(L.dk_pad, L);
  if (p.options.state_layout == StateLayout::kKV) {
    for (int64_t c0 = 0; c0 < it.v_width; c0 = sp.Next(c0)) {
      const int64_t pw = sp.Width(c0), cols = std::min(pw, it.v_width - c0);
      for (int64_t r = 0; r < p.Dk; ++r) {
        StoreStateRow(sp.Base(S, c0) + r * pw, cols, dst.dtype, AtMut(dst, dst_base + r * p.Dv + it.v_begin + c0), stream);
      }
    }
    return;
  }
  const int64_t N = static_cast<int64_t>(hn::Lanes(hn::ScalableTag<float>()));
  float* line = base + L.line;
  for (int64_t j0 = 0; j0 < it.v_width; j0 += N) {
    const int64_t c0 = sp.Start(j0), pw = sp.Width(c0);
    const float* panel = sp.Base(S, c0) + (j0 - c0);
    for (int64_t r0 = 0; r0 < L.dk_pad; r0 += N) TransposeTile(panel + r0 * pw, pw, line + r0, L.dk_pad);
    for (int64_t i = 0; i < std::min(N, it.v_width - j0); ++i) {
      StoreStateRow(line + i * L.dk_pad, p.Dk, dst.dtype, AtMut(dst, dst_base + (it.v_begin + j0 + i) * p.Dk), stream);
    }
  }
}

// Rows [t, t + n) of q and k of the item's key head (normalised if asked).
HWY_INLINE void LoadKeyRows(const ItemView& iv, const ScratchLayout& L, float* HWY_RESTRICT base, int64_t t, int64_t n) {
  const Problem& p = *iv.p;
  const Inputs& in = *iv.in;
  ForDType(in.query.dtype, [&](auto tag) {  // q and k share the dtype (SPEC 3)
    constexpr DType kT = decltype(tag)::value;
    const int64_t first = (t * p.Nk + iv.hk) * p.Dk * kDTypeBytes<kT>, stride = p.Nk * p.Dk * kDTypeBytes<kT>;
    const uint8_t* qrow = static_cast<const uint8_t*>(in.query.data) + first;
    const uint8_t* krow = static_cast<const uint8_t*>(in.key.data) + first;
    for (int64_t i = 0; i < n; ++i, qrow += stride, krow += stride) {
      float* q = base + L.q + i * L.dk_pad;
      float* k = base + L.k + i * L.dk_pad;
      LoadRowAs<kT>(qrow, p.Dk, q, L.dk_pad);
      LoadRowAs<kT>(krow, p.Dk, k, L.dk_pad);
      if (p.options.use_qk_l2norm) {
        L2NormalizeRow(q, p.Dk, p.options.qk_l2norm_eps);
        L2NormalizeRow(k, p.Dk, p.options.qk_l2norm_eps);
      }
    }
  });
}

// Elements [t, t + n) of column `col` of a [T, cols] tensor as f32 into dst:
// gathered raw, then converted as one row (the vector converters of LoadRowAs).
HWY_INLINE void LoadColumn(const TensorView& x, int64_t cols, int64_t col, int64_t t, int64_t n, float* HWY_RESTRICT dst) {
  ForDType(x.dtype, [&](auto tag) {
    constexpr DType kT = decltype(tag)::value;
    using Raw = std::conditional_t<kT == DType::kF32, float, uint16_t>;
    HWY_ALIGN Raw raw[kMaxRowsPerStep];
    const Raw* src = static_cast<const Raw*>(x.data) + t * cols + col;
    for (int64_t i = 0; i < n; ++i) raw[i] = src[i * cols];
    LoadRowAs<kT>(raw, n, dst, n);
  });
}

// The log-decays g of the item's value head for rows [t, t + n): given, or
// from the raw gate a (docs/SPEC.md 6d), or 0.
HWY_INLINE void LoadDecays(const ItemView& iv, int64_t t, int64_t n, float* HWY_RESTRICT g) {
  const Problem& p = *iv.p;
  const Inputs& in = *iv.in;
  if (p.per_channel_gate) {  // one per channel: LoadChannelDecayFactors
    for (int64_t i = 0; i < n; ++i) g[i] = 0.0f;
  } else if (p.has_g) {
    LoadColumn(in.g, p.Nv, iv.it->head, t, n, g);
  } else if (p.has_gate) {
    LoadColumn(in.a, p.Nv, iv.it->head, t, n, g);
    GateRow(g, n, iv.gate);
  } else {
    for (int64_t i = 0; i < n; ++i) g[i] = 0.0f;
  }
}

// The per-channel decay factors e^g (KDA, docs/SPEC.md 10) of the item's
// value head for rows [t, t + n) into L.kda_g ([n][dk_pad], padding e^0 =
// 1), g given, or from the raw gate a with the head's Dk biases (gate-inl.h's
// GateChannels, the decode step's arithmetic), or 0. A given g goes from the
// tensor through the exponential in registers; the raw gate's rows (and a
// row's last part of under two vectors) through kda_g while in L1. Loading
// the rows and taking e^g in a pass of its own (kda.cc) cost 1-2% of a call;
// taking it row by row after LoadRowAs, 13% more of this load (AMD Zen 5,
// timing build: 0.81k against 0.72k TSC cycles a chunk of a head).
HWY_INLINE void LoadChannelDecayFactors(const ItemView& iv, const ScratchLayout& L, float* HWY_RESTRICT base,
                                        int64_t t, int64_t n) {
  const Problem& p = *iv.p;
  const Inputs& in = *iv.in;
  const int64_t h = iv.it->head, dk = L.dk_pad;
  float* e = base + L.kda_g;
  if (!p.has_g && !p.has_gate) {
    for (int64_t i = 0; i < n * dk; ++i) e[i] = 1.0f;
    return;
  }
  HWY_ALIGN float bias[kMaxHeadDim];
  HeadGate gate = iv.gate;
  if (!p.has_g && in.dt_bias.present()) {
    LoadRow(At(in.dt_bias, h * p.Dk), in.dt_bias.dtype, p.Dk, bias, p.Dk);
    gate.dt_bias_row = bias;
  }
  const TensorView& src = p.has_g ? in.g : in.a;
  ForDType(src.dtype, [&](auto tag) {
    constexpr DType kT = decltype(tag)::value;
    const hn::ScalableTag<float> d;
    const int64_t N = static_cast<int64_t>(hn::Lanes(d));
    const int64_t in_registers = p.has_g ? p.Dk - p.Dk % (2 * N) : 0;  // channels [0, in_registers)
    const uint8_t* row = static_cast<const uint8_t*>(At(src, (t * p.Nv + h) * p.Dk));
    const int64_t stride = p.Nv * p.Dk * kDTypeBytes<kT>;
    for (int64_t i = 0; i < n; ++i, row += stride) {
      float* dst = e + i * dk;
      for (int64_t c = 0; c < in_registers; c += 2 * N) {
        hn::Vec<decltype(d)> v[2] = {LoadVectorAs<kT>(d, row, c), LoadVectorAs<kT>(d, row, c + N)};
        ExpOfLogDecay(d, v);
        hn::Store(v[0], d, dst + c);
        hn::Store(v[1], d, dst + c + N);
      }
      LoadRowAs<kT>(row + in_registers * kDTypeBytes<kT>, p.Dk - in_registers, dst + in_registers, dk - in_registers);
      if (!p.has_g) GateChannels(dst, p.Dk, gate);
      ExpRows(dst + in_registers, dk - in_registers, 1);
    }
  });
}

// beta and g of the item's value head for rows [t, t + n).
HWY_INLINE void LoadHeadVectors(const ItemView& iv, const ScratchLayout& L, float* HWY_RESTRICT base, int64_t t,
                                int64_t n) {
  const Problem& p = *iv.p;
  ChunkVectors cv(base + L.vec, L.c_pad);
  LoadColumn(iv.in->beta, p.Nv, iv.it->head, t, n, cv.beta);
  if (p.options.use_beta_sigmoid) SigmoidRow(cv.beta, n);
  LoadDecays(iv, t, n, cv.g);
}

// The item's rows [t, ...) of V and out for ChunkVSide's direct panels.
HWY_INLINE ChunkTensors ItemTensors(const ItemView& iv, int64_t t) {
  const Problem& p = *iv.p;
  const int64_t first = (t * p.Nv + iv.it->head) * p.Dv + iv.it->v_begin;
  const TensorView& v = iv.in->value;
  const TensorView& out = iv.out->out;
  ChunkTensors io;
  io.v = TensorRows{const_cast<void*>(At(v, first)), p.Nv * p.Dv * static_cast<int64_t>(DTypeSize(v.dtype)), v.dtype};
  io.out = TensorRows{AtMut(out, first), p.Nv * p.Dv * static_cast<int64_t>(DTypeSize(out.dtype)), out.dtype,
                      iv.stream_out};
  io.width = iv.it->v_width;
  return io;
}

// What an item's chunk step can take from the item before it in the group
// (same chunk rows): the key head's stage (same hk) and also the value
// head's stage (same head, another V tile). See PrepareKeyHead.
struct SharedKSide {
  bool key_head = false;
  bool value_head = false;
  static SharedKSide Between(const ItemView* prev, const ItemView& cur) {
    if (prev == nullptr) return SharedKSide{};
    return SharedKSide{prev->hk == cur.hk, prev->it->head == cur.it->head};
  }
};

// The lines of one chunk of a group that PrefetchQueue lists (the rest it
// walks): 16 KiB of the thread's stack. A chunk of KDA's bench row (2 heads
// of Dk = Dv = 128, bf16, g in f32, C = 16) has 656 lines, the flagship's
// 288; C = 64 of the flagship 1,152.
constexpr int64_t kPrefetchListLines = 2048;

// Rows [t, t + n) of q, k, v, out, beta and g for all heads of a group
// (consecutive (seq, head, tile) items in plan order), queued for prefetching
// (into L2, or L1 and L2: Plan::prefetch_into_l1) while this chunk computes
// (prefetch.h). `out` is queued for writing, unless
// its stores stream past the caches.
HWY_INLINE void QueueGroupChunk(const ItemView* views, int64_t count, int64_t t, int64_t n, PrefetchQueue* queue) {
  if (n <= 0) return;
  const Problem& p = *views[0].p;
  const Inputs& in = *views[0].in;
  const WorkItem& a = *views[0].it;
  const WorkItem& z = *views[count - 1].it;
  const int64_t hk0 = views[0].hk, hk1 = views[count - 1].hk;
  const int64_t v_first = a.head * p.Dv + a.v_begin, v_last = z.head * p.Dv + z.v_begin + z.v_width;
  const auto add = [&](const TensorView& x, int64_t first_elem, int64_t stride_elems, int64_t width, bool write) {
    const int64_t esize = static_cast<int64_t>(DTypeSize(x.dtype));
    queue->Add(At(x, first_elem), stride_elems * esize, n, width * esize, write);
  };
  add(in.query, (t * p.Nk + hk0) * p.Dk, p.Nk * p.Dk, (hk1 - hk0 + 1) * p.Dk, false);
  add(in.key, (t * p.Nk + hk0) * p.Dk, p.Nk * p.Dk, (hk1 - hk0 + 1) * p.Dk, false);
  add(in.value, t * p.Nv * p.Dv + v_first, p.Nv * p.Dv, v_last - v_first, false);
  if (!views[0].stream_out) add(views[0].out->out, t * p.Nv * p.Dv + v_first, p.Nv * p.Dv, v_last - v_first, true);
  add(in.beta, t * p.Nv + a.head, p.Nv, z.head - a.head + 1, false);
  const int64_t per_head = p.per_channel_gate ? p.Dk : 1;  // gates per (token, head)
  const int64_t heads = z.head - a.head + 1;
  if (p.has_g) add(in.g, (t * p.Nv + a.head) * per_head, p.Nv * per_head, heads * per_head, false);
  if (p.has_gate) add(in.a, (t * p.Nv + a.head) * per_head, p.Nv * per_head, heads * per_head, false);
}

// C = 1: tokens [t, t + n) of one item (n <= kRecurrentSpan), token by
// token, one state panel at a time so the panel stays in L1 for all n tokens.
template <int kDkPad>
HWY_INLINE void RecurrentSpan(const ItemView& iv, const ScratchLayout& L, float* HWY_RESTRICT base, float* HWY_RESTRICT S,
                              float scale, int64_t t, int64_t n) {
  const int64_t dk = kDkPad ? kDkPad : L.dk_pad;
  ChunkVectors cv(base + L.vec, L.c_pad);
  LoadKeyRows(iv, L, base, t, n);
  LoadHeadVectors(iv, L, base, t, n);
  // As in ChunkStep: panels inside the item's V tile read V and write out in
  // place (ChunkTensors), padded ones go through vb and o.
  const ChunkTensors io = ItemTensors(iv, t);
  LoadValueTile(L, base, io, 0, n, [](int64_t) { return 1.0f; });
  for (int64_t i = 0; i < n; ++i) cv.eG[i] = std::exp(cv.g[i]);
  // Per channel: e^g rows in kda_g, k e^g in kda_k (TokenColumns).
  const float* decay = nullptr;
  const float* ka = nullptr;
  if (L.kda) {
    LoadChannelDecayFactors(iv, L, base, t, n);
    for (int64_t i = 0; i < n; ++i) {
      MulRow(base + L.k + i * L.dk_pad, base + L.kda_g + i * L.dk_pad, L.dk_pad, base + L.kda_k + i * L.dk_pad);
    }
    decay = base + L.kda_g;
    ka = base + L.kda_k;
  }
  const Panels sp(L.dk_pad, L), rp(L.c, L);
  for (int64_t c0 = 0; c0 < L.w_pad; c0 = sp.Next(c0)) {
    const int64_t pw = sp.Width(c0);
    float* s = sp.Base(S, c0);
    const auto tokens = [&](auto tag, const uint8_t* v, int64_t v_stride, uint8_t* o, int64_t o_stride) {
      for (int64_t i = 0; i < n; ++i) {
        RecurrentTokenPanel<decltype(tag)::value>(s, dk, pw, base + L.q + i * L.dk_pad, base + L.k + i * L.dk_pad,
                                                  v + i * v_stride, cv.beta[i], cv.eG[i], scale, o + i * o_stride,
                                                  decay ? decay + i * L.dk_pad : nullptr,
                                                  ka ? ka + i * L.dk_pad : nullptr);
      }
    };
    if (io.Direct(c0, pw)) {
      const TensorRows v = ChunkTensors::Columns(io.v, c0), out = ChunkTensors::Columns(io.out, c0);
      ForDType(v.dtype, [&](auto tag) {  // v and out have q's dtype (SPEC 3)
        tokens(tag, static_cast<const uint8_t*>(v.at), v.stride, static_cast<uint8_t*>(out.at), out.stride);
      });
    } else {
      const int64_t row_bytes = pw * static_cast<int64_t>(sizeof(float));
      tokens(DTypeTag<DType::kF32>{}, reinterpret_cast<const uint8_t*>(rp.Base(base + L.vb, c0)), row_bytes,
             reinterpret_cast<uint8_t*>(rp.Base(base + L.o, c0)), row_bytes);
    }
  }
  StoreOutputRows(L, base + L.o, io, 0, n);
}

// The K-side stages both engines share, each timed as its phase
// (core/phase_timers.h; nothing is timed in the default build).
HWY_INLINE void LoadKeyRowsTimed(const ItemView& iv, const ScratchLayout& L, float* HWY_RESTRICT base, int64_t t,
                                 int64_t n) {
  CGDR_PHASE(kLoadKeyRows);
  LoadKeyRows(iv, L, base, t, n);
}
template <int kDkPad>
HWY_INLINE void PrepareValueHeadTimed(const ItemView& iv, const ScratchLayout& L, float* HWY_RESTRICT base, int64_t t,
                                      int64_t n, float scale) {
  {
    CGDR_PHASE(kHeadVectors);
    LoadHeadVectors(iv, L, base, t, n);
    if (L.kda) LoadChannelDecayFactors(iv, L, base, t, n);
  }
  CGDR_PHASE(kValueHeadPrep);
  if (L.kda) return KdaPrepareValueHead(L, base, n, scale);
  PrepareValueHead(L, base, n, scale);
}

// C = 16 .. 128 on the AMX engine (amx_chunk-inl.h): the stages of
// ChunkStep with the products on tiles. The decay masks and the FP32 blocked
// inverse (PrepareValueHead) are the vector engine's. `prefetch`: the next
// chunk's lines, issued between the state products' tile blocks.
HWY_INLINE void ChunkStepOnTiles(const ItemView& iv, const ScratchLayout& L, float* HWY_RESTRICT base,
                                 float* HWY_RESTRICT S, float scale, int64_t t, int64_t n, SharedKSide shared,
                                 PrefetchQueue* prefetch) {
  const Precision prec = iv.plan_precision;
  const bool hw = iv.engine == Engine::kAmx;
  if (!shared.key_head) {
    LoadKeyRowsTimed(iv, L, base, t, n);
    CGDR_PHASE(kAmxKeyHead);
    if (!L.kda) AmxPrepareKeyHead(L, base, n, prec, hw);  // KDA's operands are per value head
  }
  if (!shared.value_head) {
    PrepareValueHeadTimed<0>(iv, L, base, t, n, scale);
    CGDR_PHASE(kAmxValueHeadPack);
    AmxPrepareValueHead(L, base, n, prec);
  }
  ChunkTensors io = ItemTensors(iv, t);
  io.direct = false;
  AmxChunkVSide(L, base, S, n, prec, hw, io, prefetch);  // V in through vb, out from o, between its tile blocks
}

// C = 16 .. 128: one chunk [t, t + n) of one item, SPEC 4.
// `shared`: K-side stages left in scratch by the previous item of the group
// for the same rows. `prefetch`: the next chunk's lines, issued between the
// state products' tiles.
template <int kDkPad>
HWY_INLINE void ChunkStep(const ItemView& iv, const ScratchLayout& L, float* HWY_RESTRICT base, float* HWY_RESTRICT S,
                          float scale, int64_t t, int64_t n, SharedKSide shared, PrefetchQueue* prefetch) {
  ChunkVectors cv(base + L.vec, L.c_pad);
  const Precision prec = iv.plan_precision;
  if (!shared.key_head) {
    LoadKeyRowsTimed(iv, L, base, t, n);
    CGDR_PHASE(kKeyHeadPrep);
    if (!L.kda) PrepareKeyHead<kDkPad>(L, base, n, prec);  // KDA's products are per value head
  }
  if (!shared.value_head) PrepareValueHeadTimed<kDkPad>(iv, L, base, t, n, scale);
  const ChunkTensors io = ItemTensors(iv, t);
  {
    CGDR_PHASE(kValueTileIn);
    LoadValueTile(L, base, io, 0, n, [&](int64_t i) { return cv.beta[i]; });  // Vb = diag(beta) V
  }
  ChunkVSide(L, base, S, n, prec, prefetch, io);
  CGDR_PHASE(kOutRowsOut);
  StoreOutputRows(L, base + L.o, io, 0, n);
}

// Rows of the next step of a sequence from token t: a chunk (or C = 1's span)
// cut short at the sequence's end and at its next checkpoint (docs/SPEC.md
// 6d), so a checkpoint falls on a step boundary.
HWY_INLINE int64_t StepRows(const WorkItem& it, int64_t step, int64_t every, int64_t t) {
  const int64_t n = std::min(step, it.token_begin + it.tokens - t);
  return every > 0 ? std::min(n, every - (t - it.token_begin) % every) : n;
}

// After the step that ends at token t: the group's states into their
// checkpoint rows when t closes a checkpoint of the sequence.
HWY_INLINE void StoreCheckpoints(const ItemView* views, int64_t count, const ScratchLayout& L, float* HWY_RESTRICT base,
                                 int64_t t) {
  const Problem& p = *views[0].p;
  const WorkItem& it = *views[0].it;
  const int64_t every = p.options.checkpoint_every, done = t - it.token_begin;
  if (every <= 0 || done == 0 || done % every != 0) return;
  const int64_t row = it.checkpoint_begin + done / every - 1;
  for (int64_t g = 0; g < count; ++g) {
    StoreStateTile(views[g], L, base, L.StateTile(base, g), views[g].out->checkpoint_states,
                   (row * p.Nv + views[g].it->head) * p.Dk * p.Dv, /*stream=*/true);
  }
}

// A group of items of one sequence advanced chunk by chunk together: each
// chunk reads the same few rows of q, k, v for all heads of the group, so
// inputs stream through the caches and TLB once instead of once per head.
// Each item's arithmetic is the same as alone (bitwise).
template <int kDkPad>
void BucketDriver<kDkPad>::RunGroup(const Plan& plan, const Inputs& in, const Outputs& out, int64_t g_index,
                                    const ScratchLayout& L, float* HWY_RESTRICT base) {
  const int64_t* items = plan.GroupItems(g_index);
  const int64_t count = plan.GroupSize(g_index);
  const Problem& p = plan.problem;
  const float scale = static_cast<float>(p.scale);
  const bool stream_out = StreamsOutput(plan, out.out);
  ItemView views[kMaxGroupItems];
  for (int64_t g = 0; g < count; ++g) {
    views[g] = MakeItemView(plan, in, out, plan.items[items[g]], stream_out);
    LoadStateTile(views[g], L, base, L.StateTile(base, g));
  }
  const WorkItem& first = plan.items[items[0]];
  const int64_t t_end = first.token_begin + first.tokens;
  const int64_t step = plan.chunk == 1 ? kRecurrentSpan : plan.chunk;
  const int64_t every = p.options.checkpoint_every;
  const bool tiles = RunsOnTiles(plan);
  uintptr_t prefetch_list[kPrefetchListLines];  // each chunk's PrefetchQueue lists its lines here
  for (int64_t t = first.token_begin, n = 0; t < t_end; t += n) {
    n = StepRows(first, step, every, t);
    PrefetchQueue next_chunk(plan.prefetch_into_l1, prefetch_list, kPrefetchListLines);
    QueueGroupChunk(views, count, t + n, t + n < t_end ? StepRows(first, step, every, t + n) : 0, &next_chunk);
    if (plan.chunk == 1) {
      next_chunk.Drain();  // no products to spread the lines over
    } else {  // paced over the chunk's state products (3 dk x width multiply-adds per row and item)
      int64_t state_fmas = 0;
      for (int64_t g = 0; g < count; ++g) state_fmas += 3 * n * L.dk_pad * views[g].it->v_width;
      next_chunk.Pace(state_fmas);
    }
    for (int64_t g = 0; g < count; ++g) {
      const SharedKSide shared = SharedKSide::Between(g > 0 ? &views[g - 1] : nullptr, views[g]);
      if (plan.chunk == 1) {
        RecurrentSpan<kDkPad>(views[g], L, base, L.StateTile(base, g), scale, t, n);
      } else if (tiles) {
        ChunkStepOnTiles(views[g], L, base, L.StateTile(base, g), scale, t, n, shared, &next_chunk);
      } else {
        ChunkStep<kDkPad>(views[g], L, base, L.StateTile(base, g), scale, t, n, shared, &next_chunk);
      }
    }
    next_chunk.Drain();
    StoreCheckpoints(views, count, L, base, t + n);
  }
  for (int64_t g = 0; g < count; ++g) {
    if (views[g].final_base >= 0) StoreStateTile(views[g], L, base, L.StateTile(base, g), out.final_state, views[g].final_base);
  }
  // Streaming stores (out's, the checkpoints') ordered before the thread reports the group done.
  if (stream_out || every > 0) hwy::FlushStream();
}

}  // namespace HWY_NAMESPACE
}  // namespace cgdr
HWY_AFTER_NAMESPACE();

#endif  // include guard
