// The plan (SPEC 5): everything the kernel relies on, derived from shapes
// alone, printable, and checked by one function (SPEC 5.7: CheckPlan).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cgdr/cgdr.hpp"

namespace cgdr {

// Machine facts and cost-model constants the planner reads (issue 5: a
// calibration profile; these are the built-in defaults).
struct MachineProfile {
  int64_t cache_budget_bytes = 1 << 20;  // per-core working-set budget (seeds' UB budget, 002 s.5)
  int64_t group_state_bytes = 1 << 20;   // FP32 state tiles a thread keeps live while it interleaves items
  // Relative cost of one multiply-add, per formulation, measured by `cgdr tune`
  // (index: recurrent, chunk16, chunk32, chunk64). Lower is faster.
  double state_fma_cost[4] = {2.2, 1.0, 1.0, 1.0};
  // C = 32's in-chunk products cost more per FMA than C = 16's: its inverse
  // has dense 16x16 blocks (U10 = U11 A10 U00) and its C x C tiles fill
  // registers less. `cgdr bench --algo all` (formulations timed in turn) had
  // chunk32 / chunk16 = 1.03-1.14 on every Dk = Dv = 128 row, where 1.0 here
  // models 1.035 at large T; 1.5 models ~1.1.
  double inchunk_fma_cost[4] = {0.0, 1.0, 1.5, 1.0};
  // The state products stream a panel of S (dk x 64 FP32) against the chunk's
  // Kcd/Q rows (C x dk); when both do not fit L1 together every product
  // re-reads them from L2 (measured here: C = 64 at Dk = 128 runs ~1.6x slower
  // per state FMA than C = 16).
  int64_t l1_bytes = 48 << 10;
  double l1_miss_factor = 1.6;
  // Per-chunk cost that does not shrink with the chunk's length (K-side set-up,
  // transposes, decay masks, calls), in FMA units: makes C = 1 win for very
  // short sequences.
  double chunk_fixed_cost = 1e5;
  // Cost of the chunked formulations' products in each precision mode
  // relative to fp32 (index: Precision). The recurrence (C = 1) keeps FP32
  // products in every mode, so a slow mode can make it the cheapest. Measured
  // here (`cgdr bench --precision all`, flagship, C = 16, f16 inputs):
  // vdpbf16ps retires at a quarter of the FMA instruction rate, and the
  // operands are packed per product, so bf16 costs 2.6x, bf16x3 6.1x and
  // bf16x4 7.5x fp32's time (bf16 inputs, whose q and k are not split: 2.4x,
  // 4.2x, 4.3x), while C = 1 runs at ~1/1.5 of C = 16's fp32 speed.
  double precision_cost[4] = {1.0, 2.6, 6.1, 7.5};
  // The AMX engine (docs/SPEC.md 6c), per precision mode (index: Precision;
  // [0] unused: fp32 never runs on tiles): cost per multiply-add of its
  // chunked products, packing included, relative to the vector engine's FP32
  // FMA, and per chunk and state element the passes that come once per chunk
  // whatever its length (the state's split and decay, the K side's set-up).
  // Both per mode: the modes' per-chunk passes differ (one plane or two, lo
  // terms or none), and one constant fitted on bf16x3 for all had the plan
  // pick C = 128 for bf16 where C = 64 ran 20% faster. Measured by `cgdr
  // tune` where the CPU has AMX; these defaults are the medians of three full
  // fits on a 2-vCPU Xeon (Emerald Rapids, model 207), 2 threads (bf16
  // 0.82-0.96 and 20-26, bf16x3 1.31-1.65 and 12-20, bf16x4 1.40-1.52 and
  // 21-49; its tile unit gains little from the second thread, its FMA units
  // double). There bf16x3 on tiles runs at 0.8-1.0x the fp32 vector path's
  // speed on the flagship, so auto keeps f32-accurate calls on the vector
  // engine unless a tune finds the tiles faster (docs/SPEC.md 6c); each mode
  // runs C = 32 or 64 (C = 128 measured 20-25% slower in every mode).
  double amx_fma_cost[4] = {0.0, 0.869, 1.393, 1.487};
  double amx_state_pass_cost[4] = {0.0, 24.5, 16.6, 48.5};
  // Outputs of at least this many bytes are written with streaming stores
  // (Plan::stream_out): an output that large would hardly stay in the caches
  // for its reader anyway, and normal stores first read every line of it
  // (prefetched for writing: 128 of the 416 lines a chunk of the flagship
  // fetches). 1.5-3% faster here from T = 512 to 8192, 1 and 2 threads
  // (in-process A/B); the reader then finds out in memory, not in the caches.
  int64_t stream_out_bytes = int64_t{32} << 20;
  std::string source = "built-in defaults";
};

// The cost model of one sequence of `len` tokens and one value head, in FMA
// units. Vector engine: cost = (state * state_fma_cost[i] + inchunk *
// inchunk_fma_cost[i]) * precision_cost[prec] + fixed, where precision_cost
// applies to C > 1 only. AMX engine (tiles, C > 1): (state + inchunk) *
// amx_fma_cost[prec] + fixed + chunk_passes * amx_state_pass_cost[prec].
// The planner and `cgdr tune` (which fits the constants) share it.
struct CostTerms {
  double state = 0.0, inchunk = 0.0, fixed = 0.0;
  double chunk_passes = 0.0;  // state elements passed over once per chunk: chunks * dk * dv (C > 1)
};
CGDR_EXPORT CostTerms ModelTerms(const MachineProfile& prof, int chunk, int64_t len, int64_t dk_pad, int64_t dv, bool tiles = false);
CGDR_EXPORT double ModelCost(const MachineProfile& prof, int chunk, int64_t len, int64_t dk_pad, int64_t dv,
                 Precision prec = Precision::kFp32, bool tiles = false);
CGDR_EXPORT int ProfileIndex(int chunk);  // 0: recurrent, 1: C = 16, 2: C = 32, 3: C = 64 (and 128)

// One unit of work: value head `head` of sequence `seq`, V columns
// [v_begin, v_begin + v_width). Items never share an output element.
struct WorkItem {
  int64_t seq = 0;
  int64_t head = 0;
  int64_t v_begin = 0;
  int64_t v_width = 0;
  int64_t token_begin = 0;  // first row of the sequence in T
  int64_t tokens = 0;       // sequence length
  int64_t checkpoint_begin = 0;  // first row of the sequence's checkpoints in checkpoint_states (docs/SPEC.md 6d)
};

constexpr int64_t kMaxGroupItems = 64;

struct Plan {
  Problem problem;
  int chunk = 64;            // C; 1 = token-by-token recurrence
  int dk_bucket = 0;         // 64, 80, 96, 128; 0 = generic
  int64_t dk_padded = 0;     // K-side panel width the kernel uses
  int64_t v_step = 0;        // V tile width
  int64_t v_tiles = 0;       // ceil(Dv / v_step)
  int threads = 1;           // the most threads that claim groups (fewer run when groups are fewer)
  Precision precision = Precision::kFp32;  // arithmetic of the chunked products (Options.precision resolved; never kAuto)
  // Where the chunked products run, resolved: kVector, kAmx (hardware tiles)
  // or kAmxEmulated; never kAuto. kVector whenever chunk == 1 or precision is fp32.
  Engine engine = Engine::kVector;
  std::vector<WorkItem> items;  // every (seq, head, V tile) with tokens > 0 or state to copy
  // Groups: items of one sequence that one thread advances chunk by chunk
  // together (they read the same input rows; the value heads of one key head
  // share each chunk's K side). Threads claim groups in this order, costliest
  // first, each taking the next one when it is done, so a core slowed by
  // another tenant takes fewer (results do not depend on which thread runs a
  // group: SPEC 5).
  std::vector<int64_t> group_order;  // indices into items, group after group
  std::vector<int64_t> group_begin;  // group g: group_order[group_begin[g] .. group_begin[g + 1])
  int64_t group_items = 1;           // the most items in one group (the scratch holds as many state tiles)
  // C > 1: the kernel writes out with streaming stores where out's rows are
  // 64-byte aligned (MachineProfile::stream_out_bytes; alignment is checked
  // on the data at run time, since the plan sees shapes only).
  bool stream_out = false;
  // C > 1: the next chunk's rows (prefetch.h) are prefetched into L1 and L2
  // (the T0 hint) rather than into L2 alone (T1). Where CPUID says AMD: on
  // AMD EPYC Zen 5 the T1 lines were often not there when the next chunk
  // loaded them (q, k and g in 0.5-0.9k TSC cycles instead of 0.3-0.5k, 4
  // runs in 5) and KDA's call ran 3-5% slower; on Zen 3 the two ran the same
  // (docs/SPEC.md 5). Elsewhere T1, as before. Results do not depend on it.
  bool prefetch_into_l1 = false;
  int64_t groups() const { return group_begin.empty() ? 0 : static_cast<int64_t>(group_begin.size()) - 1; }
  int64_t GroupSize(int64_t g) const { return group_begin[g + 1] - group_begin[g]; }
  const int64_t* GroupItems(int64_t g) const { return group_order.data() + group_begin[g]; }
  int64_t working_set_bytes = 0;               // one item's cache working set
  int64_t scratch_bytes_per_thread = 0;        // what the kernel may use, and nothing more
  std::string why;                             // the reasons for the choices, for `cgdr plan`
};

// Whether sequence b gets work items: tokens to process, or a final state to
// write (an empty sequence's final state is its initial state, SPEC 1; a
// sequence of a pool whose slot is negative writes none).
CGDR_EXPORT bool SequenceHasWork(const Problem& problem, int64_t b);

// Builds the plan from the problem (shapes and options only; no data).
CGDR_EXPORT Status MakePlan(const Problem& problem, const MachineProfile& profile, Plan* plan);
// Asserts the plan's invariants: budget fits, every (seq, head, V column) of
// a sequence with work is covered exactly once, every item is in exactly one
// group of one sequence and at most group_items, scratch large enough for the
// kernel's layout.
CGDR_EXPORT Status CheckPlan(const Plan& plan);
// Where the plan's chunked products run: "amx", "amx-emu", or the vector
// engine's SIMD target in lower case ("avx3", "avx2", "sse4", "scalar").
CGDR_EXPORT std::string PlanEngineName(const Plan& plan);
// One line, like the seeds' CGDR_DEBUG_LOG, plus the reasons.
CGDR_EXPORT std::string PlanToString(const Plan& plan);

// The built-in profile, overridden by the file named in $CGDR_PROFILE or
// ~/.cache/cgdr/profile.json if present (written by `cgdr tune`). Read once,
// thread-safe.
CGDR_EXPORT const MachineProfile& DefaultProfile();

}  // namespace cgdr
