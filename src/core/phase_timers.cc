#include "core/phase_timers.h"

#include <array>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace cgdr {

namespace {

// One thread's counters, on their own cache lines: threads never write each
// other's (a shared atomic would bounce between cores on every scope).
struct alignas(64) ThreadCounters {
  std::array<uint64_t, static_cast<size_t>(Phase::kCount)> calls{}, ticks{};
};

struct Registry {
  std::mutex mu;
  std::vector<std::unique_ptr<ThreadCounters>> threads;  // never shrinks: a block outlives its thread
};
Registry& TheRegistry() {
  static Registry* r = new Registry;  // never destroyed: threads may add after static destruction began
  return *r;
}

ThreadCounters& ThisThread() {
  thread_local ThreadCounters* mine = [] {
    Registry& r = TheRegistry();
    std::lock_guard<std::mutex> lock(r.mu);
    r.threads.push_back(std::make_unique<ThreadCounters>());
    return r.threads.back().get();
  }();
  return *mine;
}

}  // namespace

const char* PhaseName(Phase p) {
  switch (p) {
    case Phase::kLoadKeyRows: return "q, k rows in";
    case Phase::kHeadVectors: return "g, beta in";
    case Phase::kValueHeadPrep: return "decay masks, inverse";
    case Phase::kKeyHeadPrep: return "K K^T, Q K^T";
    case Phase::kValueTileIn: return "V in";
    case Phase::kXProduct: return "X = Vb - K S";
    case Phase::kVnewProduct: return "Vnew = A X";
    case Phase::kOProduct: return "O = Q S + P Vnew";
    case Phase::kStateUpdate: return "S update";
    case Phase::kOutRowsOut: return "out rows written";
    case Phase::kAmxKeyHead: return "amx: q, k packed, K K^T, Q K^T";
    case Phase::kAmxValueHeadPack: return "amx: A, P, K^T packed";
    case Phase::kAmxStateSplit: return "amx: S split, scaled";
    case Phase::kAmxX: return "amx: K S | V in";
    case Phase::kAmxQS: return "amx: Q S | X finished, packed";
    case Phase::kAmxVnew: return "amx: A X | Q S scaled";
    case Phase::kAmxVnewPack: return "amx: Vnew packed";
    case Phase::kAmxPV: return "amx: O += P Vnew";
    case Phase::kAmxStateUpdate: return "amx: S update | out written";
    case Phase::kCount: break;
  }
  return "?";
}

bool PhaseTimersCompiled() {
#ifdef CGDR_PHASE_TIMERS
  return true;
#else
  return false;
#endif
}

namespace {
std::atomic<bool> g_skip_emulated_products{false};
}  // namespace

bool SkipEmulatedProducts() {
  if (!PhaseTimersCompiled()) return false;
  g_skip_emulated_products.store(true, std::memory_order_relaxed);
  return true;
}

bool EmulatedProductsSkipped() { return g_skip_emulated_products.load(std::memory_order_relaxed); }

const char* PhaseTickUnit() {
#if defined(__x86_64__)
  return "TSC cycles";
#else
  return "ns";
#endif
}

uint64_t PhaseTicksNow() {
#if defined(__x86_64__)
  return __rdtsc();
#else
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count());
#endif
}

void AddPhaseTicks(Phase p, uint64_t ticks) {
  ThreadCounters& c = ThisThread();
  const auto i = static_cast<size_t>(p);
  ++c.calls[i];
  c.ticks[i] += ticks;
}

void ResetPhaseTimers() {
  Registry& r = TheRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  for (auto& t : r.threads) *t = ThreadCounters{};
}

std::vector<PhaseTotal> PhaseTotals() {
  Registry& r = TheRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<PhaseTotal> out;
  for (int i = 0; i < static_cast<int>(Phase::kCount); ++i) {
    PhaseTotal t;
    t.phase = static_cast<Phase>(i);
    for (const auto& c : r.threads) {
      t.calls += c->calls[static_cast<size_t>(i)];
      t.ticks += c->ticks[static_cast<size_t>(i)];
    }
    if (t.calls > 0) out.push_back(t);
  }
  return out;
}

}  // namespace cgdr
