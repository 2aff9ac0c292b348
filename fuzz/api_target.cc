// Fuzz target (b): the public API with arbitrary shapes, dtypes, ranks,
// layouts, lengths, options, null and aliased pointers. The first byte picks
// the call (prefill, decode, verify, prefill on state pools); the rest build
// a consistent problem, then mutate it. Two kinds of backing:
//  - real: every tensor has exactly the bytes its shape says (separate heap
//    blocks, so ASan sees any over-read), outputs sit in guarded buffers;
//    Validate, MakePlan and, for small problems, Run / DecodeStep are called;
//  - placeholder: shapes too large to allocate point at addresses nobody
//    maps (only seq_lens is real); only Validate and MakePlan are called and
//    check_values is off, so no tensor data may be read.
// Checked: no crash; errors are one clear line and leave every output byte
// untouched; accepted problems are consistent (lengths sum to T, no overlap
// but the exact in-place state alias, head counts and widths in range); plans
// pass CheckPlan; runs never write outside their outputs (nor pool slots
// they may not write), and prefill with check_values on returns finite
// outputs or an error.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "cgdr/cgdr.hpp"
#include "cgdr/decode.hpp"
#include "cgdr/plan.hpp"
#include "core/dtype.h"
#include "fuzz_common.h"
#include "fuzz_targets.h"

namespace cgdr::fuzz {
namespace {

constexpr int64_t kI64Max = std::numeric_limits<int64_t>::max();
constexpr int64_t kMaxRealBytes = 1 << 16;      // total bytes of a real-backed problem
constexpr int64_t kMaxRunWork = 1 << 14;        // T * Nv * Dk * Dv for an actual run
constexpr int64_t kMaxSeqLens = 4096;           // seq_lens is always real
// MakePlan keeps an item per (sequence with work, head, V tile): memory in
// proportion to the caller's out rows or final state, which here are virtual
// (no backing), so the fuzzer bounds the count itself.
constexpr int64_t kMaxPlanItems = 1 << 16;

int64_t Dim(ByteReader& r) {
  const uint8_t b = r.U8();
  if (b < 160) return b % 40;
  static const int64_t kDims[] = {0,  1,   2,   15,  16,  17,        63,          64,          65,
                                  80, 96,  127, 128, 129, 255,       256,         257,         1000,
                                  65536, int64_t{1} << 31, (int64_t{1} << 31) - 1, int64_t{1} << 32,
                                  int64_t{1} << 40, int64_t{1} << 62, kI64Max, -1, -2,
                                  std::numeric_limits<int64_t>::min()};
  return kDims[b % (sizeof(kDims) / sizeof(kDims[0]))];
}

DType AnyDType(ByteReader& r) {
  return r.Pick<DType>({DType::kF16, DType::kBF16, DType::kF32, DType::kI32, static_cast<DType>(4),
                        static_cast<DType>(255), DType::kF32, DType::kF16});
}

int32_t Length(ByteReader& r) {
  const uint8_t b = r.U8();
  if (b < 200) return b % 50;
  return r.Pick<int32_t>({-1, 0, 64, 65, 1000, std::numeric_limits<int32_t>::max(), std::numeric_limits<int32_t>::min()});
}

// ---- one problem: the views plus what backs them

enum Slot { kQuery, kKey, kValue, kBeta, kG, kInitialState, kSeqLens, kOut, kFinalState, kA, kALog, kDtBias, kSlots };
const char* const kSlotNames[kSlots] = {"query", "key",         "value", "beta", "g",     "initial_state",
                                        "seq_lens", "out",      "final_state", "a", "A_log", "dt_bias"};

struct Views {
  TensorView t[kSlots];
  int alias_of[kSlots];  // -1, or the slot whose memory this one shares
  bool present[kSlots];
};

// Placeholder address i: above the user address space, 2^52 bytes apart.
void* Placeholder(int i) { return reinterpret_cast<void*>((uintptr_t{1} << 57) + uintptr_t(i) * (uintptr_t{1} << 52)); }

int64_t BytesOf(const TensorView& t) {
  const int64_t n = t.numel();
  if (n < 0) return -1;
  if (n > kI64Max / 4) return kI64Max;
  return n * static_cast<int64_t>(DTypeSize(t.dtype));
}

// The consistent problem the bytes describe, before mutations.
Views BuildPrefill(ByteReader& r, std::vector<int32_t>* lens, Options* opt) {
  const int64_t Nk = r.Range(1, 3), Nv = Nk * r.Range(1, 3);
  const int64_t Dk = r.Pick<int64_t>({1, 3, 16, 17, 33, 64, 65, 80, 96, 128, 129, 256});
  const int64_t Dv = r.Pick<int64_t>({1, 2, 7, 16, 31, 48, 64, 129, 256});
  const int64_t B = r.Range(1, 5);
  int64_t T = 0;
  for (int64_t b = 0; b < B; ++b) {
    lens->push_back(Length(r));
    T += lens->back();
  }
  const DType dt = r.Pick<DType>({DType::kF32, DType::kF16, DType::kBF16});
  const DType gdt = r.Pick<DType>({DType::kF32, DType::kF16, DType::kBF16});
  const DType sdt = r.Pick<DType>({DType::kF32, DType::kF16, DType::kBF16});
  opt->state_layout = r.Pick<StateLayout>({StateLayout::kVK, StateLayout::kKV});
  const bool kv = opt->state_layout == StateLayout::kKV;
  Views v{};
  v.t[kQuery] = TensorView(nullptr, dt, {T, Nk, Dk});
  v.t[kKey] = TensorView(nullptr, dt, {T, Nk, Dk});
  v.t[kValue] = TensorView(nullptr, dt, {T, Nv, Dv});
  v.t[kBeta] = TensorView(nullptr, dt, {T, Nv});
  v.t[kInitialState] = TensorView(nullptr, sdt, {B, Nv, kv ? Dk : Dv, kv ? Dv : Dk});
  v.t[kSeqLens] = TensorView(nullptr, DType::kI32, {B});
  v.t[kOut] = TensorView(nullptr, dt, {T, Nv, Dv});
  v.t[kFinalState] = TensorView(nullptr, sdt, {B, Nv, kv ? Dk : Dv, kv ? Dv : Dk});
  const uint8_t optional = r.U8();
  for (int s = 0; s < kSlots; ++s) {
    v.alias_of[s] = -1;
    v.present[s] = true;
  }
  v.present[kInitialState] = optional & 2;
  v.present[kFinalState] = optional & 4;
  if (!v.present[kInitialState]) v.t[kFinalState].dtype = dt;
  // The decay (docs/SPEC.md 6d.1, 10), in the same byte: g or the raw gate a
  // (with A_log, dt_bias, each of which may be left out), one per head or
  // one per key channel (KDA); beta as given or through the sigmoid.
  const bool per_channel = optional & 8, raw_gate = optional & 16;
  const std::vector<int64_t> gate_shape = per_channel ? std::vector<int64_t>{T, Nv, Dk} : std::vector<int64_t>{T, Nv};
  v.t[kG] = TensorView(nullptr, gdt, gate_shape);
  v.t[kA] = TensorView(nullptr, gdt, gate_shape);
  v.t[kALog] = TensorView(nullptr, gdt, {Nv});
  v.t[kDtBias] = TensorView(nullptr, gdt, {per_channel ? Nv * Dk : Nv});
  v.present[kG] = !raw_gate && (optional & 1);
  v.present[kA] = raw_gate && (optional & 1);
  v.present[kALog] = v.present[kA] && !(optional & 32);
  v.present[kDtBias] = v.present[kA] && !(optional & 64);
  opt->use_beta_sigmoid = optional & 128;
  return v;
}

Options MutateOptions(ByteReader& r, Options opt) {
  const uint8_t which = r.U8();
  opt.check_values = which & 1;
  opt.use_qk_l2norm = which & 2;
  if (which & 4) opt.algo = r.Pick<Algo>({Algo::kAuto, Algo::kRecurrent, Algo::kChunk16, Algo::kChunk32, Algo::kChunk64,
                                          Algo::kChunk128, static_cast<Algo>(2), static_cast<Algo>(255)});
  if (which & 8) opt.threads = r.Pick<int>({-1, 0, 1, 2, 3, 7, 4096, 4097, std::numeric_limits<int>::max(),
                                            std::numeric_limits<int>::min()});
  if (which & 16) opt.v_step = r.Pick<int>({-1, 0, 1, 15, 16, 17, 48, 256, 257});
  if (which & 32) opt.dk_bucket = r.Pick<int>({0, -1, -2, 32, 64, 80, 96, 128, 129});
  if (which & 64) {
    opt.scale = r.Pick<double>({0.0, 0.5, -1.0, 1e-300, 4.9e-324, 1e300, std::numeric_limits<double>::quiet_NaN(),
                                std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity()});
  }
  if (which & 128) opt.state_layout = r.Pick<StateLayout>({StateLayout::kVK, StateLayout::kKV, static_cast<StateLayout>(2)});
  if (r.U8() & 1) opt.precision = r.Pick<Precision>({Precision::kFp32, Precision::kBf16, Precision::kBf16x3,
                                                    Precision::kBf16x4, Precision::kAuto, static_cast<Precision>(5),
                                                    static_cast<Precision>(255)});
  const uint8_t more = r.U8();
  if (more & 1) opt.engine = r.Pick<Engine>({Engine::kAuto, Engine::kVector, Engine::kAmx, Engine::kAmxEmulated,
                                            static_cast<Engine>(4), static_cast<Engine>(255)});
  if ((more & 6) == 6) {  // the raw gate's lower bound (docs/SPEC.md 10.2): 0 or finite < 0 only
    opt.gate_lower_bound = r.Pick<double>({-5.0, -0.5, 0.0, 1.0, -1e-300, -std::numeric_limits<double>::max(),
                                           std::numeric_limits<double>::quiet_NaN(),
                                           -std::numeric_limits<double>::infinity()});
  }
  return opt;
}

// 0 .. 3 edits of one field each: dtype, rank, a dimension, presence, alias.
void Mutate(ByteReader& r, Views* v) {
  const int edits = r.U8() % 4;
  for (int e = 0; e < edits; ++e) {
    const int s = r.U8() % kSlots;
    TensorView& t = v->t[s];
    switch (r.U8() % 6) {
      case 0: t.dtype = AnyDType(r); break;
      case 1: t.rank = r.Pick<int>({-1, 0, 1, 2, 3, 4, 5}); break;
      case 2: t.shape[r.U8() % TensorView::kMaxRank] = Dim(r); break;
      case 3: v->present[s] = !v->present[s]; break;
      case 4: v->alias_of[s] = r.U8() % kSlots; break;
      default: t.shape[0] = Dim(r); break;
    }
  }
}

// Owns real-backed memory: exact-size heap blocks and guarded outputs.
struct Backing {
  std::vector<std::unique_ptr<uint8_t[]>> blocks;
  std::unique_ptr<Guarded> guarded[kSlots];
};

// Input values: well-conditioned most of the time, raw bytes (NaN, Inf, huge)
// otherwise.
void FillInput(ByteReader& r, int slot, const TensorView& t, uint8_t* p, int64_t bytes, bool raw) {
  if (raw || (t.dtype != DType::kF16 && t.dtype != DType::kBF16 && t.dtype != DType::kF32)) {
    for (int64_t i = 0; i < bytes; ++i) p[i] = r.Peek(static_cast<size_t>(i));
    return;
  }
  const int64_t n = bytes / static_cast<int64_t>(DTypeSize(t.dtype));
  for (int64_t i = 0; i < n; ++i) {
    float x = static_cast<float>((i * 37) % 17 - 8) / 32.0f;
    if (slot == kBeta) x = 0.5f + x;
    if (slot == kG) x = -std::abs(x);
    StoreFromF32(p, t.dtype, i, x);
  }
}

// Gives every present slot its memory; returns false for placeholder backing.
bool Back(ByteReader& r, Views* v, const std::vector<int32_t>& lens, Backing* b) {
  int64_t total = 0;
  for (int s = 0; s < kSlots; ++s) {
    if (!v->present[s] || s == kSeqLens) continue;
    const int64_t n = BytesOf(v->t[s]);
    total = (n < 0 || n > kMaxRealBytes || total + n > kMaxRealBytes) ? kMaxRealBytes + 1 : total + n;
  }
  const bool real = total <= kMaxRealBytes;
  const bool raw = r.U8() < 32;
  // seq_lens is real either way: its shape's element count, capped (a rank-1
  // shape longer than the cap is cut to it: Validate reads exactly that many).
  {
    TensorView& t = v->t[kSeqLens];
    if (t.rank == 1 && (t.shape[0] > kMaxSeqLens)) t.shape[0] = kMaxSeqLens;
    const int64_t n = std::clamp<int64_t>(t.numel(), 0, kMaxSeqLens);
    b->blocks.emplace_back(new uint8_t[static_cast<size_t>(std::max<int64_t>(n * 4, 1))]);
    auto* p = reinterpret_cast<int32_t*>(b->blocks.back().get());
    for (int64_t i = 0; i < n; ++i) p[i] = lens.empty() ? 0 : lens[static_cast<size_t>(i) % lens.size()];
    t.data = p;
  }
  for (int s = 0; s < kSlots; ++s) {
    if (s == kSeqLens) continue;
    TensorView& t = v->t[s];
    if (!v->present[s]) {
      t.data = nullptr;
      continue;
    }
    if (!real) {
      t.data = Placeholder(s);
      continue;
    }
    const int64_t bytes = BytesOf(t);
    if (s == kOut || s == kFinalState) {
      b->guarded[s] = std::make_unique<Guarded>(static_cast<size_t>(bytes), 4 * (s % 3));
      t.data = b->guarded[s]->data();
    } else {
      b->blocks.emplace_back(new uint8_t[static_cast<size_t>(std::max<int64_t>(bytes, 1))]);
      FillInput(r, s, t, b->blocks.back().get(), bytes, raw);
      t.data = b->blocks.back().get();
    }
  }
  // Aliases share the other slot's memory (if that one is present) when it
  // fits: a buffer shorter than its view's shape is the caller's bug, which
  // the library cannot see. Overlaps involving an output must be refused by
  // validation (CheckAccepted), inputs may share memory.
  for (int s = 0; s < kSlots; ++s) {
    const int a = v->alias_of[s];
    if (a < 0 || a == s || !v->present[s] || !v->present[a] || a == kSeqLens || s == kSeqLens) continue;
    if (real && BytesOf(v->t[s]) > BytesOf(v->t[a])) continue;
    v->t[s].data = v->t[a].data;
  }
  return real;
}

bool IsFloat(DType t) { return t == DType::kF16 || t == DType::kBF16 || t == DType::kF32; }

// [begin, end) of a view's bytes.
std::pair<uintptr_t, uintptr_t> Span(const TensorView& t) {
  const auto b = reinterpret_cast<uintptr_t>(t.data);
  return {b, b + static_cast<uintptr_t>(BytesOf(t))};
}
bool Overlap(const TensorView& a, const TensorView& b) {
  if (!a.present() || !b.present()) return false;
  const auto [a0, a1] = Span(a);
  const auto [b0, b1] = Span(b);
  return a0 < b1 && b0 < a1 && a0 != a1 && b0 != b1;
}

// What an accepted prefill problem must satisfy, checked from the views.
void CheckAccepted(const Inputs& in, const Outputs& out, const Problem& p) {
  FUZZ_CHECK(p.Nk >= 1 && p.Nv >= 1 && p.Nv % p.Nk == 0, "head counts");
  FUZZ_CHECK(p.Dk >= 1 && p.Dk <= kMaxHeadDim && p.Dv >= 1 && p.Dv <= kMaxHeadDim, "head widths");
  FUZZ_CHECK(p.T == in.query.shape[0] && p.B == in.seq_lens.shape[0], "T, B");
  FUZZ_CHECK(IsFloat(p.dtype) && in.key.dtype == p.dtype && in.value.dtype == p.dtype && out.out.dtype == p.dtype, "dtypes");
  FUZZ_CHECK(std::isfinite(p.scale) && p.scale != 0.0, "scale resolved");
  int64_t sum = 0;
  for (int64_t l : p.seq_lens) {
    FUZZ_CHECK(l >= 0, "negative length accepted");
    sum += l;
  }
  FUZZ_CHECK(sum == p.T, "lengths do not sum to T");
  // The decay: g or the raw gate, never both; A_log unless bounded; one per
  // head, or one per key channel in every decay tensor (KDA).
  FUZZ_CHECK(!(in.g.present() && in.a.present()), "g and a both accepted");
  FUZZ_CHECK(p.has_gate == in.a.present() && p.has_g == in.g.present(), "has_g, has_gate");
  FUZZ_CHECK(in.a.present() || (!in.A_log.present() && !in.dt_bias.present()), "A_log or dt_bias without a accepted");
  FUZZ_CHECK(!in.a.present() || in.A_log.present() || p.options.gate_lower_bound < 0.0, "a without A_log accepted");
  FUZZ_CHECK(p.options.gate_lower_bound == 0.0 || (in.a.present() && std::isfinite(p.options.gate_lower_bound) &&
                                                   p.options.gate_lower_bound < 0.0),
             "a lower bound accepted that is not finite < 0, or without a");
  const TensorView& decay = in.a.present() ? in.a : in.g;
  if (decay.present()) {
    const int64_t per_head = p.per_channel_gate ? p.Dk : 1;
    FUZZ_CHECK(decay.numel() == p.T * p.Nv * per_head, "the decay's shape");
    FUZZ_CHECK(!in.dt_bias.present() || in.dt_bias.numel() == p.Nv * per_head, "dt_bias's shape");
    FUZZ_CHECK(!in.A_log.present() || in.A_log.numel() == p.Nv, "A_log's shape");
  }
  const TensorView* inputs[] = {&in.query, &in.key,      &in.value, &in.beta,  &in.g,
                                &in.initial_state, &in.seq_lens, &in.a, &in.A_log, &in.dt_bias};
  for (const TensorView* o : {&out.out, &out.final_state}) {
    for (const TensorView* i : inputs) {
      const bool exact_alias = o == &out.final_state && i == &in.initial_state && o->data == i->data &&
                               o->dtype == i->dtype && o->numel() == i->numel();
      FUZZ_CHECK(exact_alias || !Overlap(*o, *i), "an output overlapping an input was accepted");
    }
  }
  FUZZ_CHECK(!Overlap(out.out, out.final_state), "out overlapping final_state was accepted");
}

bool AllFinite(const TensorView& t) {
  if (!t.present()) return true;
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (!std::isfinite(LoadAsF32(t.data, t.dtype, i))) return false;
  }
  return true;
}

void CheckError(const Status& s, const char* what) {
  FUZZ_CHECK(!s.ok(), what);
  FUZZ_CHECK(!s.message().empty() && s.message().find('\n') == std::string::npos, std::string(what) + ": " + s.message());
}

void CheckOutputsUntouched(const Backing& b, const char* what) {
  for (int s : {kOut, kFinalState}) {
    if (b.guarded[s]) FUZZ_CHECK(b.guarded[s]->GuardsIntact() && b.guarded[s]->PayloadUntouched(), what);
  }
}

void FuzzPrefill(ByteReader& r) {
  std::vector<int32_t> lens;
  Options opt;
  Views v = BuildPrefill(r, &lens, &opt);
  opt = MutateOptions(r, opt);
  Mutate(r, &v);
  Backing backing;
  const bool real = Back(r, &v, lens, &backing);
  if (!real) opt.check_values = false;  // placeholders must never be read
  Inputs in{v.t[kQuery], v.t[kKey], v.t[kValue], v.t[kBeta], v.t[kG], v.t[kInitialState], v.t[kSeqLens]};
  in.a = v.t[kA];
  in.A_log = v.t[kALog];
  in.dt_bias = v.t[kDtBias];
  Outputs out{v.t[kOut], v.t[kFinalState]};

  Problem p;
  const Status s = Validate(in, out, opt, &p);
  if (!s.ok()) {
    CheckError(s, "Validate");
    CheckOutputsUntouched(backing, "Validate wrote an output");
    if (real) {
      const Status rs = Run(in, out, opt);
      FUZZ_CHECK(!rs.ok() && rs.message() == s.message(), "Run disagrees with Validate: " + rs.message());
      CheckOutputsUntouched(backing, "a rejected Run wrote an output");
    }
    return;
  }
  CheckAccepted(in, out, p);
  int64_t sequences_with_work = 0;
  for (int64_t b = 0; b < p.B; ++b) sequences_with_work += SequenceHasWork(p, b);
  if (sequences_with_work * p.Nv * p.Dv <= kMaxPlanItems && p.options.threads <= 64) {
    Plan plan;
    const Status ps = MakePlan(p, DefaultProfile(), &plan);
    FUZZ_CHECK(ps.ok(), "MakePlan failed on a validated problem: " + ps.message());
    FUZZ_CHECK(CheckPlan(plan).ok(), "CheckPlan");
    FUZZ_CHECK(!PlanToString(plan).empty(), "PlanToString");
  }
  const int64_t work = std::max(p.T, p.B) * p.Nv * p.Dk * p.Dv;
  if (!real || work > kMaxRunWork || p.B * p.Nv > 4096) return;
  opt.threads = std::clamp(opt.threads, 1, 2);
  const Status rs = Run(in, out, opt);
  for (int sl : {kOut, kFinalState}) {
    if (backing.guarded[sl]) FUZZ_CHECK(backing.guarded[sl]->GuardsIntact(), std::string(kSlotNames[sl]) + ": guard band written");
  }
  if (!rs.ok()) {
    CheckError(rs, "Run");
    FUZZ_CHECK(opt.check_values, "Run failed on a validated problem without check_values: " + rs.message());
    return;
  }
  if (opt.check_values) FUZZ_CHECK(AllFinite(out.out) && AllFinite(out.final_state), "check_values run returned non-finite outputs");
}

// Memory for the edited views of one call: inputs filled as FillInput fills
// `slot` (indices in [-2, P + 1]), outputs guarded.
struct RealTensors {
  void Input(ByteReader& r, TensorView* t, int slot, int64_t P) {
    const int64_t bytes = BytesOf(*t);
    if (!Fits(t, bytes)) return;
    blocks.emplace_back(new uint8_t[static_cast<size_t>(std::max<int64_t>(bytes, 1))]);
    uint8_t* p = blocks.back().get();
    if (t->dtype == DType::kI32) {
      for (int64_t k = 0; k < bytes / 4; ++k) reinterpret_cast<int32_t*>(p)[k] = static_cast<int32_t>(r.Range(-2, P + 1));
    } else {
      FillInput(r, slot, *t, p, bytes, r.U8() < 32);
    }
    t->data = p;
  }
  void Output(TensorView* t) {
    const int64_t bytes = BytesOf(*t);
    if (!Fits(t, bytes)) return;
    outputs.push_back(std::make_unique<Guarded>(static_cast<size_t>(bytes), 4));
    t->data = outputs.back()->data();
  }
  bool GuardsIntact() const {
    for (const auto& g : outputs) if (!g->GuardsIntact()) return false;
    return true;
  }
  bool Untouched() const {
    for (const auto& g : outputs) if (!g->PayloadUntouched()) return false;
    return true;
  }
  // Too large: a placeholder, or no tensor for indices (validation reads
  // their values once the shapes agree).
  bool Fits(TensorView* t, int64_t bytes) {
    if (bytes >= 0 && bytes <= kMaxRealBytes) return true;
    t->data = t->dtype == DType::kI32 ? nullptr : Placeholder(static_cast<int>(blocks.size() + outputs.size()));
    real = false;
    return false;
  }
  std::vector<std::unique_ptr<uint8_t[]>> blocks;
  std::vector<std::unique_ptr<Guarded>> outputs;
  bool real = true;
};

// 0 .. 2 edits of one of the views: dtype, rank or a dimension.
void EditViews(ByteReader& r, TensorView* t, int count) {
  const int edits = r.U8() % 3;
  for (int e = 0; e < edits; ++e) {
    TensorView& m = t[r.U8() % count];
    switch (r.U8() % 3) {
      case 0: m.dtype = AnyDType(r); break;
      case 1: m.rank = r.Pick<int>({0, 1, 2, 3, 4, 5}); break;
      default: m.shape[r.U8() % TensorView::kMaxRank] = Dim(r); break;
    }
  }
}

// ---- decode: the same idea for DecodeStep's in-place pool

void FuzzDecode(ByteReader& r) {
  const int64_t N = r.Range(0, 4), Nk = r.Range(1, 2), Nv = Nk * r.Range(1, 2);
  const int64_t Dk = r.Pick<int64_t>({1, 5, 16, 33, 64}), Dv = r.Pick<int64_t>({1, 7, 16, 40});
  const int64_t P = r.Range(0, 5);
  const DType dt = r.Pick<DType>({DType::kF32, DType::kF16, DType::kBF16});
  const DType pdt = r.Pick<DType>({DType::kF32, DType::kF16, DType::kBF16});
  Options opt = MutateOptions(r, Options{});
  const bool kv = opt.state_layout == StateLayout::kKV;
  TensorView t[8] = {TensorView(nullptr, dt, {N, Nk, Dk}), TensorView(nullptr, dt, {N, Nk, Dk}),
                     TensorView(nullptr, dt, {N, Nv, Dv}), TensorView(nullptr, dt, {N, Nv}),
                     TensorView(nullptr, DType::kF32, {N, Nv}),
                     TensorView(nullptr, pdt, {P, Nv, kv ? Dk : Dv, kv ? Dv : Dk}),
                     TensorView(nullptr, DType::kI32, {N}), TensorView(nullptr, dt, {N, Nv, Dv})};
  EditViews(r, t, 8);
  std::vector<std::unique_ptr<uint8_t[]>> blocks;
  std::unique_ptr<Guarded> pool = std::make_unique<Guarded>(0, 0), out = std::make_unique<Guarded>(0, 0);
  bool real = true;
  for (int i = 0; i < 8; ++i) {
    const int64_t bytes = BytesOf(t[i]);
    if (bytes < 0 || bytes > kMaxRealBytes) {  // too large to back: validation only
      t[i].data = i == 6 ? nullptr : Placeholder(i);
      real = i == 6 ? real : false;
      continue;
    }
    if (i == 5 || i == 7) {
      auto& g = i == 5 ? pool : out;
      g = std::make_unique<Guarded>(static_cast<size_t>(bytes), 4);
      t[i].data = g->data();
      continue;
    }
    blocks.emplace_back(new uint8_t[static_cast<size_t>(std::max<int64_t>(bytes, 1))]);
    uint8_t* p = blocks.back().get();
    if (i == 6) {
      for (int64_t k = 0; k < bytes / 4; ++k) reinterpret_cast<int32_t*>(p)[k] = static_cast<int32_t>(r.Range(-2, 6));
    } else {
      FillInput(r, i == 3 ? kBeta : i == 4 ? kG : kQuery, t[i], p, bytes, r.U8() < 32);
    }
    t[i].data = p;
  }
  // The decay (docs/SPEC.md 6d.1, 10), chosen after the rest so that older
  // inputs keep their meaning: none, g [N, Nv] (bit 0 alone), or with bit 1
  // one per key channel [N, Nv, Dk] (KDA), with bit 2 the raw gate a in
  // g's place (A_log, dt_bias each left out by bits 3, 4). Unmutated, real.
  const uint8_t gate = r.U8();
  const bool has_decay = gate & 1, per_channel = gate & 2, raw_gate = gate & 4;
  RealTensors small;  // at most 4 * 4 * 64 values each
  const auto real_input = [&](int slot, DType dtype, std::vector<int64_t> shape) {
    TensorView x(nullptr, dtype, shape);
    small.Input(r, &x, slot, 0);
    return x;
  };
  const int64_t per_head = per_channel ? Dk : 1;
  const std::vector<int64_t> gate_shape = per_channel ? std::vector<int64_t>{N, Nv, Dk} : std::vector<int64_t>{N, Nv};
  const TensorView decay = !has_decay                ? TensorView()
                           : per_channel || raw_gate ? real_input(raw_gate ? kA : kG, dt, gate_shape)
                                                     : t[4];
  DecodeInputs in{t[0], t[1], t[2], t[3], raw_gate ? TensorView() : decay, t[5], t[6]};
  if (raw_gate && has_decay) {
    in.a = decay;
    if (!(gate & 8)) in.A_log = real_input(kALog, dt, {Nv});
    if (!(gate & 16)) in.dt_bias = real_input(kDtBias, dt, {Nv * per_head});
  }
  const DecodeOutputs o{t[7]};
  if (!real) opt.check_values = false;
  if (opt.threads > 2 && opt.threads <= 4096) opt.threads = 2;  // valid either way; keeps runs cheap
  DecodeProblem dp;
  const Status vs = ValidateDecode(in, o, opt, &dp);
  if (!vs.ok()) CheckError(vs, "ValidateDecode");
  if (!real || !in.state_indices.present()) return;
  const Status s = DecodeStep(in, o, opt);
  FUZZ_CHECK(vs.ok() == s.ok(), "DecodeStep disagrees with ValidateDecode: " + s.message());
  FUZZ_CHECK(pool->GuardsIntact() && out->GuardsIntact(), "decode wrote outside the pool or out");
  if (!vs.ok()) {
    FUZZ_CHECK(pool->PayloadUntouched() && out->PayloadUntouched(), "a rejected decode step wrote");
    return;
  }
  // Accepted: indices below P and distinct among the non-negative ones.
  const auto* idx = static_cast<const int32_t*>(in.state_indices.data);
  std::vector<bool> used(static_cast<size_t>(dp.P), false);
  for (int64_t n = 0; n < dp.N; ++n) {
    if (idx[n] < 0) continue;
    FUZZ_CHECK(idx[n] < dp.P && !used[static_cast<size_t>(idx[n])], "bad state index accepted");
    used[static_cast<size_t>(idx[n])] = true;
  }
}

// ---- the serving paths: verify (decode with a token axis, docs/SPEC.md
// 6d.2) and prefill on state pools with checkpoints (6d.3, 6d.4). Every
// tensor is real (a shape too large after the edits: validation only), the
// pools' slots possibly apart (options.state_slot_stride). Checked beyond
// FuzzDecode's: an accepted call writes only the pool slots it may write,
// never the memory between slots; a rejected one writes nothing.

// A pool of P slots of `slot` elements, `stride` apart (a stride validation
// refuses gets dense memory), values in [-0.25, 0.25], and its bytes as they
// were before the call.
struct PoolMemory {
  PoolMemory(int64_t P, int64_t slot, int64_t stride, DType dtype)
      : slot(slot), stride(std::max(stride, slot)), esize(static_cast<int64_t>(DTypeSize(dtype))) {
    const int64_t elems = P > 0 ? (P - 1) * this->stride + slot : 0;
    bytes = elems * esize;
    if (bytes > kMaxRealBytes) return;
    mem = std::make_unique<Guarded>(static_cast<size_t>(bytes), 4);
    for (int64_t i = 0; i < elems; ++i) StoreFromF32(mem->data(), dtype, i, static_cast<float>((i * 29) % 17 - 8) / 32.0f);
    const auto* p = static_cast<const uint8_t*>(mem->data());
    before.assign(p, p + bytes);
  }
  bool Untouched() const { return std::equal(before.begin(), before.end(), static_cast<const uint8_t*>(mem->data())); }
  // Every byte that changed lies inside a slot marked in `writable`.
  void CheckWrites(const std::vector<bool>& writable, const char* what) const {
    FUZZ_CHECK(mem->GuardsIntact(), std::string(what) + " wrote outside the pool");
    const auto* now = static_cast<const uint8_t*>(mem->data());
    for (int64_t b = 0; b < bytes; ++b) {
      if (now[b] == before[static_cast<size_t>(b)]) continue;
      const int64_t e = b / esize, s = e / stride;
      FUZZ_CHECK(e % stride < slot, std::string(what) + " wrote the memory between two pool slots");
      FUZZ_CHECK(writable[static_cast<size_t>(s)], std::string(what) + " wrote pool slot " + std::to_string(s) + ", which it may not write");
    }
  }
  int64_t slot, stride, esize, bytes = 0;
  std::unique_ptr<Guarded> mem;  // null: too large to back
  std::vector<uint8_t> before;
};

// The decay's views: g or a [lead..., Nv] (or [lead..., Nv, Dk] per key
// channel, KDA), A_log [Nv], dt_bias [Nv] (or [Nv * Dk]).
struct DecayViews {
  TensorView decay, a_log, dt_bias;
};
DecayViews MakeDecayViews(std::vector<int64_t> lead, int64_t Nv, int64_t Dk, bool per_channel, DType dt) {
  lead.push_back(Nv);
  if (per_channel) lead.push_back(Dk);
  return {TensorView(nullptr, dt, lead), TensorView(nullptr, dt, {Nv}), TensorView(nullptr, dt, {per_channel ? Nv * Dk : Nv})};
}

// Bits of `form` from `bit`: no decay; the raw gate (else g); no A_log; no
// dt_bias. Sets the call's g or a, A_log, dt_bias.
bool RawGate(uint8_t form, int bit) { return form & (2 << bit); }
template <class In>
void SetDecay(uint8_t form, int bit, const DecayViews& d, In* in) {
  if (form & (1 << bit)) return;
  if (!RawGate(form, bit)) {
    in->g = d.decay;
    return;
  }
  in->a = d.decay;
  if (!(form & (4 << bit))) in->A_log = d.a_log;
  if (!(form & (8 << bit))) in->dt_bias = d.dt_bias;
}

// The pool's slots a verify call may write: dst_indices' (of rows that run),
// none with `states`, else each running row's own.
std::vector<bool> VerifyWritableSlots(const DecodeInputs& in, int64_t N, int64_t K, int64_t P) {
  std::vector<bool> ok(static_cast<size_t>(std::max<int64_t>(P, 0)), false);
  const auto* src = static_cast<const int32_t*>(in.state_indices.data);
  const auto* dst = static_cast<const int32_t*>(in.dst_indices.data);
  for (int64_t n = 0; n < N; ++n) {
    if (src[n] < 0) continue;
    for (int64_t j = 0; j < (dst ? K : 1); ++j) {
      const int64_t slot = dst ? dst[n * K + j] : src[n];
      if (slot >= 0 && slot < P) ok[static_cast<size_t>(slot)] = true;
    }
  }
  return ok;
}

void FuzzVerify(ByteReader& r) {
  const int64_t N = r.Range(0, 3), K = r.Pick<int64_t>({1, 2, 3, 4, 16, 2, 3, 0, 17});
  const int64_t Nk = r.Range(1, 2), Nv = Nk * r.Range(1, 2);
  const int64_t Dk = r.Pick<int64_t>({1, 5, 16, 33}), Dv = r.Pick<int64_t>({1, 7, 16});
  const int64_t P = r.Range(0, 6);
  const DType dt = r.Pick<DType>({DType::kF32, DType::kF16, DType::kBF16});
  const DType pdt = r.Pick<DType>({DType::kF32, DType::kF16, DType::kBF16});
  Options opt = MutateOptions(r, Options{});
  const bool kv = opt.state_layout == StateLayout::kKV;
  // Bits 0-1: where the states go (0 in place, 1 dst_indices, 2 states, 3
  // both: an error); 2: a decay per key channel (KDA); 3-6: SetDecay's.
  const uint8_t form = r.U8();
  const bool to_slots = form & 1, to_states = form & 2, per_channel = form & 4;
  const int64_t slot = Nv * Dk * Dv;
  opt.state_slot_stride = r.Pick<int64_t>({0, 0, slot, slot + 5, slot + 64, slot - 1, -1});
  if (opt.threads > 2 && opt.threads <= 4096) opt.threads = 2;

  enum { kQ, kK, kV, kB, kDecay, kALogT, kDtBiasT, kSrc, kDst, kOutT, kStates, kCount };
  const DecayViews d = MakeDecayViews({N, K}, Nv, Dk, per_channel, dt);
  TensorView t[kCount] = {TensorView(nullptr, dt, {N, K, Nk, Dk}),
                          TensorView(nullptr, dt, {N, K, Nk, Dk}),
                          TensorView(nullptr, dt, {N, K, Nv, Dv}),
                          TensorView(nullptr, dt, {N, K, Nv}),
                          d.decay,
                          d.a_log,
                          d.dt_bias,
                          TensorView(nullptr, DType::kI32, {N}),
                          TensorView(nullptr, DType::kI32, {N, K}),
                          TensorView(nullptr, dt, {N, K, Nv, Dv}),
                          TensorView(nullptr, pdt, {N * K, Nv, kv ? Dk : Dv, kv ? Dv : Dk})};
  EditViews(r, t, kCount);
  RealTensors mem;
  for (int i = 0; i < kCount; ++i) {
    if (i == kOutT || i == kStates) {
      mem.Output(&t[i]);
    } else {
      mem.Input(r, &t[i], i == kB ? kBeta : i == kDecay && !RawGate(form, 3) ? kG : kQuery, P);
    }
  }
  const PoolMemory pool(P, slot, opt.state_slot_stride, pdt);
  if (!pool.mem) return;

  DecodeInputs in;
  in.query = t[kQ];
  in.key = t[kK];
  in.value = t[kV];
  in.beta = t[kB];
  SetDecay(form, 3, DecayViews{t[kDecay], t[kALogT], t[kDtBiasT]}, &in);
  in.state_pool = TensorView(pool.mem->data(), pdt, {P, Nv, kv ? Dk : Dv, kv ? Dv : Dk});
  in.state_indices = t[kSrc];
  if (to_slots) in.dst_indices = t[kDst];
  DecodeOutputs out{t[kOutT]};
  if (to_states) out.states = t[kStates];
  if (!mem.real) opt.check_values = false;

  DecodeProblem dp;
  const Status vs = ValidateDecode(in, out, opt, &dp);
  if (!vs.ok()) CheckError(vs, "ValidateDecode (verify)");
  if (!mem.real) return;
  const Status s = DecodeStep(in, out, opt);
  FUZZ_CHECK(vs.ok() == s.ok(), "DecodeStep disagrees with ValidateDecode (verify): " + s.message());
  FUZZ_CHECK(mem.GuardsIntact(), "verify wrote outside out or states");
  if (!s.ok()) {
    FUZZ_CHECK(pool.Untouched() && mem.Untouched(), "a rejected verify call wrote");
    return;
  }
  pool.CheckWrites(VerifyWritableSlots(in, dp.N, dp.K, P), "verify");
  // (Decode does not scan its outputs, docs/SPEC.md 6b: finite inputs of
  // huge magnitude may give non-finite ones.)
}

// Prefill on a pool: sequence b reads slot state_indices[b] of initial_state
// and writes its final state there (final_state the same pool, or another
// one), or starts from zeros and writes nothing (a negative index); with
// checkpoint_every = E, the states after every E tokens into
// checkpoint_states.
void FuzzPrefillPools(ByteReader& r) {
  const int64_t Nk = r.Range(1, 2), Nv = Nk * r.Range(1, 2);
  const int64_t Dk = r.Pick<int64_t>({1, 5, 16, 33, 64}), Dv = r.Pick<int64_t>({1, 7, 16});
  const int64_t B = r.Pick<int64_t>({1, 2, 3, 1, 2, 3, 0}), P = r.Range(0, 5);
  std::vector<int32_t> lens;
  int64_t T = 0;
  for (int64_t b = 0; b < B; ++b) {
    lens.push_back(static_cast<int32_t>(r.Range(0, 9)));
    T += lens.back();
  }
  const DType dt = r.Pick<DType>({DType::kF32, DType::kF16, DType::kBF16});
  const DType initial_dt = r.Pick<DType>({DType::kF32, DType::kF16, DType::kBF16});
  Options opt = MutateOptions(r, Options{});
  const bool kv = opt.state_layout == StateLayout::kKV;
  // Bits 0-1: final_state none, the same pool (in place), another pool, or
  // the pool's memory seen with another dtype of its size (i32 for f32, f16
  // as bf16: an error either way, of dtype or of overlap); 2: a decay per key
  // channel; 3-6: SetDecay's; 7: no initial_state.
  const uint8_t form = r.U8();
  const int final_form = form & 3;
  const bool per_channel = form & 4, has_initial = !(form & 128);
  const DType sdt = has_initial ? initial_dt : dt;  // a final state alone takes query's dtype (docs/SPEC.md 2)
  const int64_t slot = Nv * Dk * Dv;
  opt.state_slot_stride = r.Pick<int64_t>({0, 0, slot, slot + 3, slot - 1});
  opt.checkpoint_every = r.Pick<int64_t>({0, 0, 1, 2, 3, 16, -1});
  const bool give_checkpoints = (opt.checkpoint_every > 0) != (r.U8() < 16);  // sometimes the wrong way round
  if (opt.threads > 2 && opt.threads <= 4096) opt.threads = 2;
  int64_t rows = 0;
  for (int32_t l : lens) rows += opt.checkpoint_every > 0 ? l / opt.checkpoint_every : 0;

  enum { kQ, kK, kV, kB, kDecay, kALogT, kDtBiasT, kIdx, kOutT, kCkpt, kLens, kCount };  // seq_lens unedited, last
  const DecayViews d = MakeDecayViews({T}, Nv, Dk, per_channel, dt);
  const std::vector<int64_t> state_row{Nv, kv ? Dk : Dv, kv ? Dv : Dk};
  TensorView t[kCount] = {TensorView(nullptr, dt, {T, Nk, Dk}),
                          TensorView(nullptr, dt, {T, Nk, Dk}),
                          TensorView(nullptr, dt, {T, Nv, Dv}),
                          TensorView(nullptr, dt, {T, Nv}),
                          d.decay,
                          d.a_log,
                          d.dt_bias,
                          TensorView(nullptr, DType::kI32, {B}),
                          TensorView(nullptr, dt, {T, Nv, Dv}),
                          TensorView(nullptr, r.Bool() ? DType::kF32 : sdt, {rows, Nv, state_row[1], state_row[2]}),
                          TensorView(nullptr, DType::kI32, {B})};
  EditViews(r, t, kCount - 1);
  RealTensors mem;
  for (int i = 0; i < kCount; ++i) {
    if (i == kOutT || i == kCkpt) {
      mem.Output(&t[i]);
    } else if (i == kLens) {
      t[i].data = lens.empty() ? static_cast<void*>(&T) : lens.data();  // (B = 0: any non-null pointer)
    } else {
      mem.Input(r, &t[i], i == kB ? kBeta : i == kDecay && !RawGate(form, 3) ? kG : kQuery, P);
    }
  }
  const PoolMemory pool(P, slot, opt.state_slot_stride, sdt);
  const PoolMemory other(final_form == 2 ? P : 0, slot, opt.state_slot_stride, sdt);
  if (!pool.mem || !other.mem) return;

  Inputs in{t[kQ], t[kK], t[kV], t[kB], TensorView(), TensorView(), t[kLens]};
  SetDecay(form, 3, DecayViews{t[kDecay], t[kALogT], t[kDtBiasT]}, &in);
  const TensorView pool_view(pool.mem->data(), sdt, {P, Nv, state_row[1], state_row[2]});
  if (has_initial) in.initial_state = pool_view;
  in.state_indices = t[kIdx];
  Outputs out;
  out.out = t[kOutT];
  if (final_form == 1) out.final_state = pool_view;
  if (final_form == 2) out.final_state = TensorView(other.mem->data(), sdt, {P, Nv, state_row[1], state_row[2]});
  if (final_form == 3) {
    out.final_state = pool_view;
    out.final_state.dtype = sdt == DType::kF32 ? DType::kI32 : sdt == DType::kF16 ? DType::kBF16 : DType::kF16;
  }
  if (give_checkpoints) out.checkpoint_states = t[kCkpt];
  if (!mem.real) opt.check_values = false;

  Problem p;
  const Status vs = Validate(in, out, opt, &p);
  if (!vs.ok()) CheckError(vs, "Validate (pools)");
  if (!mem.real) return;
  const Status s = Run(in, out, opt);
  FUZZ_CHECK(vs.ok() == s.ok() || (vs.ok() && opt.check_values), "Run disagrees with Validate (pools): " + s.message());
  FUZZ_CHECK(mem.GuardsIntact(), "a prefill on pools wrote outside out or checkpoint_states");
  if (!vs.ok()) {
    FUZZ_CHECK(s.message() == vs.message(), "Run's error differs from Validate's: " + s.message());
    FUZZ_CHECK(pool.Untouched() && other.Untouched() && mem.Untouched(), "a rejected prefill on pools wrote");
    return;
  }
  if (!s.ok()) return;  // check_values found a non-finite output (docs/SPEC.md 3): outputs written, invalid
  // Accepted: only the slots of sequences with a non-negative index change,
  // in the pool final_state names.
  std::vector<bool> writable(static_cast<size_t>(P), false);
  const auto* idx = static_cast<const int32_t*>(in.state_indices.data);
  for (int64_t b = 0; b < p.B; ++b) {
    if (idx[b] >= 0 && idx[b] < P) writable[static_cast<size_t>(idx[b])] = true;  // (no pool: no bound)
  }
  const std::vector<bool> none(static_cast<size_t>(P), false);
  pool.CheckWrites(final_form == 1 ? writable : none, "a prefill on pools");
  other.CheckWrites(final_form == 2 ? writable : none, "a prefill on pools");
  if (opt.check_values) FUZZ_CHECK(AllFinite(out.out), "check_values prefill returned a non-finite out");
}

}  // namespace

int FuzzApi(const uint8_t* data, size_t size) {
  ByteReader r(data, size);
  // An eighth of the inputs verify, an eighth decode, a sixteenth prefill on
  // pools, the rest prefill.
  const uint8_t entry = r.U8();
  if (entry % 8 == 7) {
    FuzzVerify(r);
  } else if (entry % 16 == 2) {
    FuzzPrefillPools(r);
  } else if (entry % 4 == 3) {
    FuzzDecode(r);
  } else {
    FuzzPrefill(r);
  }
  return 0;
}

}  // namespace cgdr::fuzz
