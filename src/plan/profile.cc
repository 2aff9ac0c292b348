// The calibration profile the planner's cost model reads (issue 5): built-in
// defaults, overridden by a JSON file written by `cgdr tune`. Loaded once
// (function-local static: thread-safe initialisation), never mutated after.
#include <cmath>
#include <cstdlib>
#include <fstream>

#include <nlohmann/json.hpp>

#include "cgdr/plan.hpp"
#include "core/cpu_features.h"

namespace cgdr {
namespace {

std::string ProfilePath() {
  if (const char* p = std::getenv("CGDR_PROFILE")) return p;
  if (const char* home = std::getenv("HOME")) return std::string(home) + "/.cache/cgdr/profile.json";
  return {};
}

MachineProfile LoadProfile() {
  MachineProfile prof;
  const std::string path = ProfilePath();
  if (path.empty()) return prof;
  std::ifstream f(path);
  if (!f) return prof;
  try {
    const auto j = nlohmann::json::parse(f);
    // Measured on another CPU (a home directory shared by machines, a VM
    // moved to another host): its costs are that CPU's, not this one's.
    // Profiles from before `cgdr tune` wrote the CPU are read as before.
    if (j.contains("cpu")) {
      const std::string measured_on = j.at("cpu").get<std::string>(), here = CpuDescription();
      if (measured_on != here) {
        prof.source = "built-in defaults (" + path + " was measured on " + measured_on + ", not on this " + here +
                      ": run cgdr tune here)";
        return prof;
      }
    }
    MachineProfile read = prof;
    read.cache_budget_bytes = j.value("cache_budget_bytes", prof.cache_budget_bytes);
    read.group_state_bytes = j.value("group_state_bytes", prof.group_state_bytes);
    read.l1_bytes = j.value("l1_bytes", prof.l1_bytes);
    read.l1_miss_factor = j.value("l1_miss_factor", prof.l1_miss_factor);
    read.chunk_fixed_cost = j.value("chunk_fixed_cost", prof.chunk_fixed_cost);
    read.stream_out_bytes = j.value("stream_out_bytes", prof.stream_out_bytes);  // optional
    if (read.stream_out_bytes < 0) return prof;
    if (read.l1_bytes < 1024 || !(read.l1_miss_factor >= 1.0) || !(read.chunk_fixed_cost >= 0.0)) return prof;
    const auto& sc = j.at("state_fma_cost");
    const auto& ic = j.at("inchunk_fma_cost");
    for (int i = 0; i < 4; ++i) {
      read.state_fma_cost[i] = sc.at(i).get<double>();
      read.inchunk_fma_cost[i] = ic.at(i).get<double>();
      if (!(read.state_fma_cost[i] > 0.0) || !(read.inchunk_fma_cost[i] >= 0.0)) return prof;
    }
    if (j.contains("precision_cost")) {  // optional: profiles from before the precision modes lack it
      const auto& pc = j.at("precision_cost");
      for (int i = 0; i < 4; ++i) {
        read.precision_cost[i] = pc.at(i).get<double>();
        if (!(read.precision_cost[i] > 0.0) || !std::isfinite(read.precision_cost[i])) return prof;
      }
    }
    if (j.contains("amx_fma_cost")) {  // optional: written by `cgdr tune` since the AMX engine
      const auto& ac = j.at("amx_fma_cost");
      for (int i = 1; i < 4; ++i) {
        read.amx_fma_cost[i] = ac.at(i).get<double>();
        if (!(read.amx_fma_cost[i] > 0.0) || !std::isfinite(read.amx_fma_cost[i])) return prof;
      }
      // Per mode since the constants were fitted mode by mode; one number
      // (profiles written before) stands for every mode.
      if (j.contains("amx_state_pass_cost")) {
        const auto& sp = j.at("amx_state_pass_cost");
        for (int i = 1; i < 4; ++i) {
          read.amx_state_pass_cost[i] = sp.is_array() ? sp.at(i).get<double>() : sp.get<double>();
          if (!(read.amx_state_pass_cost[i] >= 0.0) || !std::isfinite(read.amx_state_pass_cost[i])) return prof;
        }
      }
    }
    if (read.cache_budget_bytes < (64 << 10)) return prof;
    read.source = path;
    return read;
  } catch (const std::exception&) {
    return prof;  // a broken profile falls back to the defaults; `cgdr plan` shows which was used
  }
}

}  // namespace

const MachineProfile& DefaultProfile() {
  static const MachineProfile profile = LoadProfile();
  return profile;
}

}  // namespace cgdr
