// Where a call's time goes, stage by stage of the chunk step: ticks summed
// over calls and threads. The development VMs expose no performance counters
// (perf records nothing), so this is how the passes around the products are
// measured (docs/design-notes.md, "Phase timers").
//
// Compiled in only when CMake's CGDR_PHASE_TIMERS is ON: the default build
// has no counters, CGDR_PHASE compiles to no code (a static_assert that
// checks the phase's name) and PhaseTimersCompiled() is false. In a timing
// build, SkipEmulatedProducts() (`cgdr bench --skip-emulated-products`)
// skips the AMX emulation's tile products from then on (results wrong):
// `--engine amx-emu` rows then time the AMX engine's passes alone, on any CPU.
#pragma once

#include <cstdint>
#include <vector>

namespace cgdr {

// The stages timed; the AMX engine's products are timed together with the
// vector work that runs between their tile blocks (amx_chunk.cc SideTask).
enum class Phase : int {
  kLoadKeyRows,      // q, k rows of the chunk in, normalised
  kHeadVectors,      // g, beta of the chunk in
  kValueHeadPrep,    // decay masks and the FP32 blocked inverse
  kKeyHeadPrep,      // vector engine: K K^T, Q K^T
  kValueTileIn,      // vector engine: diag(beta) V in
  kXProduct,         // vector engine: X = Vb - diag(beta e^G) K S
  kVnewProduct,      // vector engine: Vnew = A X
  kOProduct,         // vector engine: O = diag(scale e^G) Q S + P Vnew
  kStateUpdate,      // vector engine: S = e^(G_last) S + K^T diag(..) Vnew
  kOutRowsOut,       // vector engine: out rows written
  kAmxKeyHead,       // AMX: q, k packed; K K^T, Q K^T on tiles
  kAmxValueHeadPack, // AMX: A, P, K^T diag(..) packed
  kAmxStateSplit,    // AMX: S split into hi/lo and scaled by e^(G_last)
  kAmxX,             // AMX: K S on tiles, V in between its blocks
  kAmxQS,            // AMX: Q S on tiles, X finished and packed between
  kAmxVnew,          // AMX: A X on tiles, Q S scaled between
  kAmxVnewPack,      // AMX: Vnew packed
  kAmxPV,            // AMX: O += P Vnew on tiles
  kAmxStateUpdate,   // AMX: the update on tiles, out rows written between
  kCount
};

const char* PhaseName(Phase p);

// Whether this build counts (CGDR_PHASE_TIMERS).
bool PhaseTimersCompiled();

// Timing builds only: the AMX emulation's tile products are skipped from now
// on in this process (every later result is wrong). Returns false, changing
// nothing, in any other build.
bool SkipEmulatedProducts();
// Whether SkipEmulatedProducts() took effect.
bool EmulatedProductsSkipped();

// What a tick is: "TSC cycles" on x86-64, "ns" elsewhere.
const char* PhaseTickUnit();

// Zeroes every thread's counters; call while no kernel runs.
void ResetPhaseTimers();

struct PhaseTotal {
  Phase phase;
  uint64_t calls = 0;
  uint64_t ticks = 0;
};
// The phases with at least one call, summed over threads, in Phase order.
std::vector<PhaseTotal> PhaseTotals();

uint64_t PhaseTicksNow();
// Adds one call of `ticks` to this thread's counter of `p`.
void AddPhaseTicks(Phase p, uint64_t ticks);

class PhaseScope {
 public:
  explicit PhaseScope(Phase p) : phase_(p), start_(PhaseTicksNow()) {}
  ~PhaseScope() { AddPhaseTicks(phase_, PhaseTicksNow() - start_); }
  PhaseScope(const PhaseScope&) = delete;
  PhaseScope& operator=(const PhaseScope&) = delete;

 private:
  Phase phase_;
  uint64_t start_;
};

}  // namespace cgdr

#define CGDR_PHASE_CAT2(a, b) a##b
#define CGDR_PHASE_CAT(a, b) CGDR_PHASE_CAT2(a, b)
#ifdef CGDR_PHASE_TIMERS
// Times the rest of the enclosing block as phase `p` (a Phase enumerator).
#define CGDR_PHASE(p) const ::cgdr::PhaseScope CGDR_PHASE_CAT(cgdr_phase_scope_, __LINE__)(::cgdr::Phase::p)
#else
#define CGDR_PHASE(p) static_assert(static_cast<int>(::cgdr::Phase::p) >= 0)
#endif
