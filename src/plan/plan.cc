// The host side of the seeds' design (their op_host tiling): Problem +
// machine profile -> Plan. Pure arithmetic on shapes; no tensor data.
#include "cgdr/plan.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <numeric>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "core/cpu_features.h"
#include "core/threads.h"
#include "plan/scratch_layout.h"

namespace cgdr {
namespace {

// `x` as printf's %g would print it, without a stream (a stream's locale set-up
// and formatting of the four costs took 2 us of planning every call).
std::string ShortNumber(double x) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::general, 6);
  return std::string(buf, r.ptr);
}

int DkBucket(int64_t dk) {
  for (int b : {64, 80, 96, 128}) {
    if (dk <= b) return b;
  }
  return 0;  // generic
}

}  // namespace

int ProfileIndex(int chunk) {
  switch (chunk) {
    case 1: return 0;
    case 16: return 1;
    case 32: return 2;
    default: return 3;
  }
}

// SPEC 5 and issue 5's physics: every formulation does 3 Dk Dv state FMAs per
// token; chunking adds ~C/2 (3 Dk + 2 Dv) in-chunk FMAs per token (Q K^T,
// Kb K^T, A Kb on Dk; A Vb, P Vnew on Dv) plus a per-chunk set-up and the
// C^3/6 inverse, and runs the state products as blocked matrix products.
CostTerms ModelTerms(const MachineProfile& prof, int chunk, int64_t len, int64_t dk_pad, int64_t dv, bool tiles) {
  CostTerms t;
  const double n = static_cast<double>(len), dk = static_cast<double>(dk_pad), v = static_cast<double>(dv);
  t.state = n * 3.0 * dk * v;
  if (chunk == 1) return t;
  const double panel = 64;  // the kernel's S panel on AVX-512 (PanelCols in kernels/gemm-inl.h)
  const bool fits_l1 = (chunk * dk + dk * panel) * 4.0 <= static_cast<double>(prof.l1_bytes);
  if (!fits_l1 && !tiles) t.state *= prof.l1_miss_factor;
  t.inchunk = n * 0.5 * chunk * (3.0 * dk + 2.0 * v);
  const double chunks = std::ceil(n / chunk);
  t.fixed = chunks * (prof.chunk_fixed_cost + static_cast<double>(chunk) * chunk * chunk / 6.0);
  t.chunk_passes = chunks * dk * v;
  return t;
}

double ModelCost(const MachineProfile& prof, int chunk, int64_t len, int64_t dk_pad, int64_t dv, Precision prec,
                 bool tiles) {
  const CostTerms t = ModelTerms(prof, chunk, len, dk_pad, dv, tiles && chunk > 1);
  if (tiles && chunk > 1) {
    const int m = static_cast<int>(prec);
    return (t.state + t.inchunk) * prof.amx_fma_cost[m] + t.fixed + t.chunk_passes * prof.amx_state_pass_cost[m];
  }
  const int i = ProfileIndex(chunk);
  const double products = chunk == 1 ? 1.0 : prof.precision_cost[static_cast<int>(prec)];
  return (t.state * prof.state_fma_cost[i] + t.inchunk * prof.inchunk_fma_cost[i]) * products + t.fixed;
}

namespace {

int64_t WorkingSetBytes(int chunk, int64_t dk_pad, int64_t w) { return ScratchLayout(chunk, dk_pad, w).bytes(); }

// Groups for dynamic balance. Threads claim groups as they free up, so the
// work is balanced if groups are several per thread (kGroupsPerThread: a core
// running at 3/4 speed then ends within a few percent of the other), and
// claimed costliest first (the greedy longest-first order of the seeds'
// avgload fix) so no long group starts last. Within that size, a group takes
// the items of one sequence in (head, tile) order, whole key heads when it
// can: the GQA value heads of one key head and the V tiles of one head share
// each chunk's K side (the item driver's SharedKSide). The state tiles of a
// group also fit the profile's group budget (the scratch holds them all).
constexpr int64_t kGroupsPerThread = 8;

void FormGroups(const MachineProfile& prof, Plan* plan) {
  const Problem& p = plan->problem;
  const int64_t n_items = static_cast<int64_t>(plan->items.size());
  const int64_t tile_bytes = plan->dk_padded * RoundUp(plan->v_step, kLaneMultiple) * 4;
  const int64_t budget = std::clamp<int64_t>(prof.group_state_bytes / tile_bytes, 1, kMaxGroupItems);
  int64_t size = std::clamp<int64_t>(n_items / (kGroupsPerThread * plan->threads), 1, budget);
  const int64_t per_key_head = p.Nv / p.Nk * plan->v_tiles;  // items of one key head in one sequence
  if (size >= per_key_head) size -= size % per_key_head;
  plan->group_items = size;

  struct Span {
    int64_t begin, count, cost;
  };
  std::vector<Span> spans;
  for (int64_t i = 0; i < n_items; ++i) {
    const WorkItem& it = plan->items[i];
    const int64_t cost = (it.tokens + 1) * it.v_width;
    Span* last = spans.empty() ? nullptr : &spans.back();
    // Items are in (seq, head, tile) order, so a sequence's groups start at
    // multiples of `size` from its first item: whole key heads stay together.
    if (last && plan->items[last->begin].seq == it.seq && last->count < size) {
      ++last->count;
      last->cost += cost;
    } else {
      spans.push_back(Span{i, 1, cost});
    }
  }
  std::stable_sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.cost > b.cost; });
  plan->group_order.clear();
  plan->group_begin.assign(1, 0);
  for (const Span& s : spans) {
    for (int64_t i = s.begin; i < s.begin + s.count; ++i) plan->group_order.push_back(i);
    plan->group_begin.push_back(static_cast<int64_t>(plan->group_order.size()));
  }
}

}  // namespace

bool SequenceHasWork(const Problem& p, int64_t b) { return p.seq_lens[b] > 0 || (p.want_final_state && p.Slot(b) >= 0); }

namespace {

bool IsTileEngine(Engine e) { return e == Engine::kAmx || e == Engine::kAmxEmulated; }

// A precision mode on an engine, for the chunked formulations.
struct Mode {
  Precision precision;
  Engine engine;
};
struct Candidate {
  int chunk;
  Mode mode;
  double cost = 0.0;
};

// The tile engine the options allow on this machine, or kVector: the
// hardware where AMX is usable (core/cpu_features.h) and the engine is auto or amx; the
// emulation only when asked for by name.
Engine TileEngine(const Options& o) {
  if (o.engine == Engine::kAmxEmulated) return Engine::kAmxEmulated;
  if ((o.engine == Engine::kAuto || o.engine == Engine::kAmx) && AmxHardwareEnabled()) return Engine::kAmx;
  return Engine::kVector;
}

// The modes the chunked formulations may run in (docs/SPEC.md 6c). fp32 runs
// on the vector units only. A bf16 mode runs on the tile engine where there
// is one. auto: the modes whose error meets SPEC 6 for the call's dtype:
// fp32, and for f16/bf16 inputs bf16x3 on tiles (within 2x the error of
// rounding the answer to 16 bits; not on the vector units, where it costs
// 6x fp32); the cost model then picks the faster. A tile engine named by the
// caller (amx, amx-emu) is honoured: 16-bit inputs then run bf16x3 on it.
std::vector<Mode> ChunkedModes(const Problem& p) {
  const Engine tiles = TileEngine(p.options);
  switch (p.options.precision) {
    case Precision::kFp32: return {Mode{Precision::kFp32, Engine::kVector}};
    case Precision::kAuto: {
      const Mode fp32{Precision::kFp32, Engine::kVector}, tiled{Precision::kBf16x3, tiles};
      if (p.dtype == DType::kF32 || tiles == Engine::kVector) return {fp32};
      if (p.options.engine != Engine::kAuto) return {tiled};
      // KDA on the tiles is tested (on the emulation) but not yet timed on
      // an AMX CPU, and the AMX costs are the scalar gate's fits: auto does
      // not weigh it until a measurement does (docs/SPEC.md 10.4).
      if (p.per_channel_gate) return {fp32};
      return {fp32, tiled};
    }
    default: return {Mode{p.options.precision, tiles}};
  }
}

// Chunk sizes the planner weighs on an engine: the tiles amortise their
// per-chunk passes over the state over longer chunks, and they are never
// weighed at C = 16 (a caller may still force it): a tile's contraction is 32
// bf16 deep, so the products over a chunk's tokens (the state update, A X,
// P Vnew) would multiply half zeros, and the state is split twice as often.
// `cgdr tune` fits the AMX constants at C = 32, 64, 128 only; extrapolated to
// C = 16 they made auto pick it, which ran 1.26-1.35x slower than C = 32 on
// tiles (docs/SPEC.md 6c). With checkpoints
// (docs/SPEC.md 6d), the sizes that divide checkpoint_every where there are
// any: each checkpoint then ends a chunk of full length, and equals the final
// state of a prefill of that prefix bit for bit.
std::vector<int> ChunkSizes(Engine e, int64_t checkpoint_every) {
  std::vector<int> sizes = IsTileEngine(e) ? std::vector<int>{128, 64, 32} : std::vector<int>{64, 32, 16};
  if (checkpoint_every <= 0) return sizes;
  std::vector<int> aligned;
  for (int c : sizes) {
    if (checkpoint_every % c == 0) aligned.push_back(c);
  }
  return aligned.empty() ? sizes : aligned;
}

// Why the chunk size does or does not divide checkpoint_every (`cgdr plan`).
std::string CheckpointWhy(const Problem& p, int chunk) {
  const int64_t every = p.options.checkpoint_every;
  if (every <= 0) return "";
  if (every % chunk == 0) return "C=" + std::to_string(chunk) + " divides checkpoint_every=" + std::to_string(every) + "; ";
  return "checkpoint_every=" + std::to_string(every) + " is no multiple of C=" + std::to_string(chunk) +
         ": chunks are cut at checkpoints; ";
}

// The engine and precision chosen, and why (`cgdr plan`).
std::string EngineWhy(const Problem& p, const Plan& plan) {
  std::string why = "engine " + std::string(IsTileEngine(plan.engine) ? EngineName(plan.engine) : "vector");
  const Options& o = p.options;
  if (plan.engine == Engine::kAmx) {
    why += " (" + AmxHardware().why + ")";
  } else if (plan.engine == Engine::kAmxEmulated) {
    why += " (asked for: TDPBF16PS emulated, slow)";
  } else if (plan.chunk == 1) {
    why += " (C=1: FP32 products)";
  } else if (plan.precision == Precision::kFp32) {
    why += " (fp32 products: FMA; tiles multiply 16-bit operands)";
  } else if (o.engine == Engine::kVector) {
    why += " (asked for)";
  } else {
    why += " (" + (AmxHardwareEnabled() ? std::string("AMX off") : AmxHardware().why) + ")";
  }
  why += ", precision " + std::string(PrecisionName(plan.precision));
  if (o.precision == Precision::kAuto) {
    why += " (auto: ";
    if (p.dtype == DType::kF32) {
      why += "f32 inputs need 2e-5";
    } else if (TileEngine(o) == Engine::kVector) {
      why += "no tile engine for bf16x3";
    } else if (p.per_channel_gate && o.engine == Engine::kAuto) {
      why += "the per-channel gate's tiles run only where named: not yet timed on AMX";
    } else {
      why += plan.precision == Precision::kFp32 ? "fp32 cheaper here"
                                                : "bf16x3 within 2x of rounding to " + std::string(DTypeName(p.dtype)) +
                                                      (o.engine == Engine::kAuto ? "" : " on the engine asked for");
    }
    why += ")";
  } else if (plan.chunk == 1 && plan.precision != Precision::kFp32) {
    why += " (C=1 keeps FP32 products)";
  }
  return why + "; ";
}

}  // namespace

Status MakePlan(const Problem& p, const MachineProfile& prof, Plan* plan) {
  Plan out;
  out.problem = p;
  std::ostringstream why;

  const int forced = p.options.dk_bucket;
  out.dk_bucket = forced == 0 ? DkBucket(p.Dk) : (forced < 0 ? 0 : forced);
  out.dk_padded = out.dk_bucket ? out.dk_bucket : RoundUp(p.Dk, kLaneMultiple);
  why << "bucket " << (out.dk_bucket ? std::to_string(out.dk_bucket) : std::string("generic")) << " for Dk=" << p.Dk
      << (forced ? " (forced)" : "") << "; ";

  // Threads: the option, else all this process may use (core/threads.h).
  out.threads = ResolveThreadCount(p.options.threads);

  // Formulation, precision and engine together: the cheapest candidate under
  // the cost model summed over sequences (ChunkedModes), or the forced C.
  const std::vector<Mode> modes = ChunkedModes(p);
  std::vector<Candidate> candidates;
  const bool forced_c = p.options.algo != Algo::kAuto;
  for (const Mode& m : modes) {
    if (forced_c) {
      if (p.options.algo != Algo::kRecurrent) candidates.push_back(Candidate{static_cast<int>(p.options.algo), m});
      continue;
    }
    for (int c : ChunkSizes(m.engine, p.options.checkpoint_every)) candidates.push_back(Candidate{c, m});
  }
  // A tile engine the caller named and that runs here excludes C = 1 under
  // algo auto: the call asked for tiles.
  const bool tiles_named = p.options.engine != Engine::kAuto && IsTileEngine(modes.front().engine);
  if ((!forced_c && !tiles_named) || p.options.algo == Algo::kRecurrent) {
    // C = 1 keeps FP32 products in every mode, on the vector units.
    const Precision shown =
        p.options.precision == Precision::kAuto ? Precision::kFp32 : p.options.precision;
    candidates.push_back(Candidate{1, Mode{shown, Engine::kVector}});
  }
  const Candidate* best = nullptr;
  std::string costs;
  for (Candidate& cand : candidates) {
    cand.cost = 0.0;
    const bool tiles = IsTileEngine(cand.mode.engine);
    for (int64_t len : p.seq_lens) cand.cost += ModelCost(prof, cand.chunk, len, out.dk_padded, p.Dv, cand.mode.precision, tiles);
    costs += std::string(costs.empty() ? "" : " ") + "C" + std::to_string(cand.chunk) +
             (modes.size() > 1 && cand.chunk > 1 ? "/" + std::string(PrecisionName(cand.mode.precision)) : "") + "=" +
             ShortNumber(cand.cost);
    if (best == nullptr || cand.cost < best->cost) best = &cand;
  }
  out.chunk = best->chunk;
  out.precision = best->mode.precision;
  out.engine = best->mode.engine;
  if (forced_c && candidates.size() == 1) {
    why << "C=" << out.chunk << " forced; ";
  } else {
    why << "C=" << out.chunk << (forced_c ? " forced, " : " ") << "cheapest by model (cost in FMA times: " << costs
        << "; profile: " << prof.source << "); ";
  }
  why << EngineWhy(p, out) << CheckpointWhy(p, out.chunk);

  // V tile width: all of Dv if it fits the cache budget; narrower tiles only
  // to fit, or when (sequence, head) items are fewer than threads (seeds 001 s.4).
  int64_t w = RoundUp(p.Dv, kLaneMultiple);
  if (p.options.v_step > 0) {
    w = p.options.v_step;
    why << "vStep=" << w << " forced; ";
  } else {
    while (w > kLaneMultiple && WorkingSetBytes(out.chunk, out.dk_padded, w) > prof.cache_budget_bytes) {
      w = RoundUp(w / 2, kLaneMultiple);
    }
    int64_t busy_items = 0;
    for (int64_t len : p.seq_lens) busy_items += len > 0 ? p.Nv : 0;
    if (busy_items > 0 && busy_items < out.threads) {
      const int64_t tiles_wanted = (out.threads + busy_items - 1) / busy_items;
      const int64_t split_w = RoundUp((p.Dv + tiles_wanted - 1) / tiles_wanted, kLaneMultiple);
      if (split_w < w) {
        w = std::max<int64_t>(split_w, kLaneMultiple);
        why << "V split for " << out.threads << " threads over " << busy_items << " items; ";
      }
    }
    w = std::min(w, p.Dv);
  }
  out.v_step = w;
  out.v_tiles = (p.Dv + w - 1) / w;
  out.working_set_bytes = WorkingSetBytes(out.chunk, out.dk_padded, w);
  why << "vStep=" << w << " (" << out.v_tiles << " tiles, working set " << out.working_set_bytes << " B of "
      << prof.cache_budget_bytes << " B budget)";

  // Work items in (sequence, head, tile) order. An empty sequence has work
  // only when the final state is wanted (it is the initial state, SPEC 1):
  // without one, B empty sequences cost no items and no plan memory.
  int64_t t0 = 0, c0 = 0;  // the sequence's first token and first checkpoint row
  for (int64_t b = 0; b < p.B; ++b) {
    const int64_t len = p.seq_lens[b];
    if (SequenceHasWork(p, b)) {
      for (int64_t h = 0; h < p.Nv; ++h) {
        for (int64_t v0 = 0; v0 < p.Dv; v0 += w) {
          out.items.push_back(WorkItem{b, h, v0, std::min(w, p.Dv - v0), t0, len, c0});
        }
      }
    }
    t0 += len;
    if (p.options.checkpoint_every > 0) c0 += len / p.options.checkpoint_every;
  }

  FormGroups(prof, &out);
  const int64_t out_bytes = p.T * p.Nv * p.Dv * static_cast<int64_t>(DTypeSize(p.dtype));
  out.stream_out = out.chunk > 1 && out_bytes >= prof.stream_out_bytes;
  if (out.stream_out) {
    why << "; out (" << out_bytes << " B >= " << prof.stream_out_bytes << " B) written past the caches";
  }
  out.prefetch_into_l1 = out.chunk > 1 && CpuIsAmd();
  if (out.prefetch_into_l1) why << "; next chunk prefetched into L1 (AMD)";
  out.scratch_bytes_per_thread = KernelScratch(out).bytes();

  out.why = why.str();
  *plan = std::move(out);
  return CheckPlan(*plan);
}

Status CheckPlan(const Plan& plan) {
  const Problem& p = plan.problem;
  auto fail = [](const std::string& m) { return Status(Code::kInternal, "plan invariant violated: " + m); };
  if (!(plan.chunk == 1 || plan.chunk == 16 || plan.chunk == 32 || plan.chunk == 64 || plan.chunk == 128)) {
    return fail("chunk size " + std::to_string(plan.chunk));
  }
  if (plan.dk_padded < p.Dk || plan.dk_padded % kLaneMultiple != 0) return fail("dk_padded " + std::to_string(plan.dk_padded));
  if (plan.dk_bucket != 0 && plan.dk_bucket != plan.dk_padded) return fail("bucket/dk_padded mismatch");
  if (plan.v_step < 1 || plan.v_step > kMaxHeadDim) return fail("v_step " + std::to_string(plan.v_step));
  if (plan.threads < 1) return fail("threads " + std::to_string(plan.threads));
  if (plan.group_items < 1 || plan.group_items > kMaxGroupItems) return fail("group_items " + std::to_string(plan.group_items));
  if (plan.stream_out && plan.chunk == 1) return fail("stream_out with chunk 1 (C = 1 writes out token by token)");
  if (plan.prefetch_into_l1 && plan.chunk == 1) return fail("prefetch_into_l1 with chunk 1 (the hint was measured for C > 1 only)");
  if (plan.precision == Precision::kAuto || plan.engine == Engine::kAuto) return fail("precision or engine unresolved (auto)");
  if (IsTileEngine(plan.engine) && (plan.chunk == 1 || plan.precision == Precision::kFp32)) {
    return fail("tile engine with chunk " + std::to_string(plan.chunk) + " and precision " + PrecisionName(plan.precision));
  }
  if (plan.engine == Engine::kAmx && !AmxHardwareEnabled()) return fail("engine amx where AMX is not usable");
  if (plan.scratch_bytes_per_thread < KernelScratch(plan).bytes()) {
    return fail("scratch smaller than the kernel's layout");
  }
  // Coverage: for every (seq, head) with work, its items tile [0, Dv) once,
  // and no other item exists. Checked on the items sorted by (seq, head,
  // v_begin), in memory proportional to the items, not to B * Nv * Dv.
  if (plan.group_begin.empty() || plan.group_begin.front() != 0 ||
      plan.group_begin.back() != static_cast<int64_t>(plan.group_order.size())) {
    return fail("group bounds do not span group_order");
  }
  std::vector<int64_t> scheduled(plan.items.size(), 0);
  for (int64_t g = 0; g < plan.groups(); ++g) {
    const int64_t size = plan.GroupSize(g);
    if (size < 1 || size > plan.group_items || plan.group_begin[g + 1] > static_cast<int64_t>(plan.group_order.size())) {
      return fail("group " + std::to_string(g) + " of " + std::to_string(size) + " items from " +
                  std::to_string(plan.group_begin[g]));
    }
    for (int64_t j = 0; j < size; ++j) {
      const int64_t i = plan.GroupItems(g)[j];
      if (i < 0 || i >= static_cast<int64_t>(plan.items.size())) return fail("item index out of range");
      if (plan.items[i].seq != plan.items[plan.GroupItems(g)[0]].seq) return fail("group " + std::to_string(g) + " spans sequences");
      ++scheduled[static_cast<size_t>(i)];
    }
  }
  int64_t t0 = 0, c0 = 0;
  std::vector<int64_t> starts(static_cast<size_t>(p.B)), checkpoint_starts(static_cast<size_t>(p.B));
  for (int64_t b = 0; b < p.B; ++b) {
    starts[b] = t0;
    checkpoint_starts[b] = c0;
    t0 += p.seq_lens[b];
    if (p.options.checkpoint_every > 0) c0 += p.seq_lens[b] / p.options.checkpoint_every;
  }
  for (size_t i = 0; i < plan.items.size(); ++i) {
    const WorkItem& it = plan.items[i];
    if (scheduled[i] != 1) return fail("item " + std::to_string(i) + " scheduled " + std::to_string(scheduled[i]) + " times");
    if (it.seq < 0 || it.seq >= p.B || it.head < 0 || it.head >= p.Nv) return fail("item outside the problem");
    if (it.v_begin < 0 || it.v_width < 1 || it.v_width > plan.v_step || it.v_begin + it.v_width > p.Dv) {
      return fail("item V range");
    }
    if (it.tokens != p.seq_lens[it.seq] || it.token_begin != starts[it.seq]) return fail("item tokens");
    if (it.checkpoint_begin != checkpoint_starts[it.seq]) return fail("item checkpoint rows");
  }
  std::vector<int64_t> order(plan.items.size());
  std::iota(order.begin(), order.end(), 0);
  const auto key = [&](int64_t i) {
    const WorkItem& it = plan.items[static_cast<size_t>(i)];
    return std::make_tuple(it.seq, it.head, it.v_begin);
  };
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return key(a) < key(b); });
  auto next_seq_with_work = [&](int64_t b) {
    while (b < p.B && !SequenceHasWork(p, b)) ++b;
    return b;
  };
  int64_t seq = next_seq_with_work(0), head = 0, v = 0;  // the next column expected
  for (int64_t i : order) {
    const WorkItem& it = plan.items[static_cast<size_t>(i)];
    if (seq >= p.B || it.seq != seq || it.head != head || it.v_begin != v) {
      return fail("item (seq " + std::to_string(it.seq) + ", head " + std::to_string(it.head) + ", v " +
                  std::to_string(it.v_begin) + ") where (seq " + std::to_string(seq) + ", head " + std::to_string(head) +
                  ", v " + std::to_string(v) + ") was expected: a column covered twice or not at all");
    }
    v += it.v_width;
    if (v == p.Dv) {
      v = 0;
      if (++head == p.Nv) {
        head = 0;
        seq = next_seq_with_work(seq + 1);
      }
    }
  }
  if (seq < p.B) return fail("sequence " + std::to_string(seq) + " head " + std::to_string(head) + " not covered");
  return Status::Ok();
}

std::string PlanEngineName(const Plan& plan) {
  if (plan.engine != Engine::kVector) return EngineName(plan.engine);
  const std::vector<std::string> targets = UsableTargetNames();  // best first: the one dispatch picks
  return targets.empty() ? "none" : targets.front();
}

std::string PlanToString(const Plan& plan) {
  const Problem& p = plan.problem;
  std::ostringstream os;
  os << "CGDR_PLAN T=" << p.T << " B=" << p.B << " Nk=" << p.Nk << " Nv=" << p.Nv << " Dk=" << p.Dk << " Dv=" << p.Dv
     << " dtype=" << DTypeName(p.dtype) << " gate=" << (p.per_channel_gate ? "per-channel" : "per-head")
     << " chunk=" << plan.chunk << " algo="
     << (plan.chunk == 1 ? "recurrent" : "chunk" + std::to_string(plan.chunk))
     << " bucket=" << (plan.dk_bucket ? std::to_string(plan.dk_bucket) : std::string("generic"))
     << " dk_padded=" << plan.dk_padded << " vStep=" << plan.v_step << " vTiles=" << plan.v_tiles
     << " items=" << plan.items.size() << " group=" << plan.group_items << " stream_out=" << plan.stream_out
     << " prefetch=" << (plan.prefetch_into_l1 ? "l1" : "l2") << " threads=" << plan.threads
     << " precision=" << PrecisionName(plan.precision) << " engine=" << PlanEngineName(plan) << " scratch_per_thread=" << plan.scratch_bytes_per_thread << "B target=" << ActiveTarget() << "\n";
  os << "why: " << plan.why << "\n";
  int64_t smallest = plan.groups() ? plan.group_items : 0, largest = 0;
  for (int64_t g = 0; g < plan.groups(); ++g) {
    smallest = std::min(smallest, plan.GroupSize(g));
    largest = std::max(largest, plan.GroupSize(g));
  }
  os << "groups: " << plan.groups() << " of " << smallest << ".." << largest << " items, claimed costliest first by "
     << std::min<int64_t>(plan.threads, plan.groups()) << " threads as they free up\n";
  constexpr int64_t kShown = 8;
  for (int64_t g = 0; g < std::min(plan.groups(), kShown); ++g) {
    const WorkItem& a = plan.items[plan.GroupItems(g)[0]];
    const WorkItem& z = plan.items[plan.GroupItems(g)[plan.GroupSize(g) - 1]];
    os << "group " << g << ": seq " << a.seq << ", heads " << a.head << ".." << z.head << ", " << plan.GroupSize(g)
       << " items of " << a.tokens << " tokens\n";
  }
  if (plan.groups() > kShown) os << "... " << plan.groups() - kShown << " more groups\n";
  return os.str();
}

}  // namespace cgdr
