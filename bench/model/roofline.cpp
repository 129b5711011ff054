// What each term assumes: Note [kernel roofline model] in roofline.h.
#include "bench/model/roofline.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace ember::model {

double sector_efficiency(const sim::GlobalCounters& g) {
  return g.sectors == 0 ? 1.0 : static_cast<double>(g.ideal_sectors) / static_cast<double>(g.sectors);
}

double conflict_factor(const sim::SharedCounters& s) {
  return s.ideal_wavefronts == 0 ? 1.0 : static_cast<double>(s.wavefronts) / static_cast<double>(s.ideal_wavefronts);
}

sim::GlobalCounters operator+(const sim::GlobalCounters& a, const sim::GlobalCounters& b) {
  return {a.requests + b.requests, a.sectors + b.sectors, a.ideal_sectors + b.ideal_sectors, a.bytes + b.bytes};
}

sim::SharedCounters operator+(const sim::SharedCounters& a, const sim::SharedCounters& b) {
  return {a.requests + b.requests, a.wavefronts + b.wavefronts, a.ideal_wavefronts + b.ideal_wavefronts,
          a.bytes + b.bytes};
}

std::vector<KernelStats> group_by_kernel(const std::vector<sim::LaunchCounters>& launches) {
  std::vector<KernelStats> out;
  for (const sim::LaunchCounters& l : launches) {
    auto it = std::find_if(out.begin(), out.end(), [&](const KernelStats& k) { return k.kernel == l.kernel; });
    if (it == out.end()) {
      out.push_back({});
      it = out.end() - 1;
      it->kernel = l.kernel;
      it->threads_per_block = static_cast<int>(l.block[0] * l.block[1] * l.block[2]);
    }
    ++it->launches;
    it->dynamic_shared = std::max(it->dynamic_shared, l.dynamic_shared_bytes);
    it->blocks += uint64_t{l.grid[0]} * l.grid[1] * l.grid[2];
    it->global_load = it->global_load + l.global_load;
    it->global_store = it->global_store + l.global_store;
    it->shared_load = it->shared_load + l.shared_load;
    it->shared_store = it->shared_store + l.shared_store;
    it->atomics += l.atomics;
    it->barriers += l.barriers;
    it->mbarrier_phases += l.mbarrier_phases;
    it->warp_collectives += l.warp_collectives;
  }
  return out;
}

std::string simulator_kernel_name(const std::string& demangled) {
  std::string n = demangled.rfind("void ", 0) == 0 ? demangled.substr(5) : demangled;
  size_t paren = n.rfind('(');
  return paren == std::string::npos ? n : n.substr(0, paren);
}

const KernelResources* match_resources(const std::vector<KernelResources>& table, const std::string& sim_name) {
  if (const KernelResources* exact = find_kernel(table, sim_name)) return exact;
  const KernelResources* found = nullptr;
  for (const KernelResources& k : table) {
    if (simulator_kernel_name(k.kernel) != sim_name) continue;
    if (found != nullptr && (found->registers != k.registers || found->static_shared != k.static_shared ||
                             found->stack_frame != k.stack_frame || found->spill_stores != k.spill_stores ||
                             found->spill_loads != k.spill_loads))
      return nullptr;  // two instances the shortened name cannot tell apart, and they differ
    found = &k;
  }
  return found;
}

const char* math_unit_name(MathUnit u) {
  switch (u) {
    case MathUnit::fp32_simt: return "fp32";
    case MathUnit::tf32_tensor: return "tf32";
    case MathUnit::f16_tensor: return "f16";
    case MathUnit::bf16_tensor: return "bf16";
  }
  return "?";
}

double peak_flops(const GpuSpec& gpu, MathUnit u) {
  switch (u) {
    case MathUnit::fp32_simt: return gpu.fp32_flops;
    case MathUnit::tf32_tensor: return gpu.tf32_flops;
    case MathUnit::f16_tensor: return gpu.f16_flops;
    case MathUnit::bf16_tensor: return gpu.bf16_flops;
  }
  return gpu.fp32_flops;
}

MathUnit math_unit_for(const std::string& variant, const std::string& dtype) {
  if (variant.find("mma") == std::string::npos) return MathUnit::fp32_simt;
  if (dtype == "f16") return MathUnit::f16_tensor;
  if (dtype == "bf16") return MathUnit::bf16_tensor;
  return MathUnit::tf32_tensor;
}

Prediction predict(const GpuSpec& gpu, const PredictionInput& in) {
  if (!(gpu.hbm_bytes_per_s > 0) || !(gpu.sms > 0) || !(gpu.clock_ghz > 0))
    throw std::invalid_argument("predict: the GPU spec '" + gpu.name + "' has no bandwidth, SM count or clock");
  if (in.occupancy.size() != in.kernels.size())
    throw std::invalid_argument("predict: one occupancy per kernel is needed");
  Prediction p;
  double peak = peak_flops(gpu, in.unit);
  if (!(peak > 0))
    throw std::invalid_argument(std::string("predict: no ") + math_unit_name(in.unit) + " peak for " + gpu.name);

  sim::GlobalCounters g;
  sim::SharedCounters s;
  for (size_t i = 0; i < in.kernels.size(); ++i) {
    const KernelStats& k = in.kernels[i];
    g = g + k.global_load + k.global_store;
    s = s + k.shared_load + k.shared_store;
    p.launches += k.launches;
    if (in.occupancy[i] < 0) p.occupancy_unknown = true;
    else p.occupancy = p.occupancy < 0 ? in.occupancy[i] : std::min(p.occupancy, in.occupancy[i]);
  }
  p.sector_efficiency = sector_efficiency(g);
  if (in.run_bytes > 0) p.traffic_ratio = static_cast<double>(g.bytes) / in.run_bytes;
  p.conflict_factor = conflict_factor(s);
  p.issue_efficiency = p.occupancy < 0 ? 1.0 : std::min(1.0, p.occupancy / kFullLatencyHidingOccupancy);
  // a kernel that could not run at all (occupancy 0) is not "infinitely slow" in a useful way
  double issue = std::max(p.issue_efficiency, 1e-3);

  p.lower_bound_s = std::max(in.bytes / gpu.hbm_bytes_per_s, in.flops / peak);
  p.dram_bytes = in.bytes / std::max(p.sector_efficiency, 1e-6);
  p.memory_s = p.dram_bytes / gpu.hbm_bytes_per_s / issue;
  p.compute_s = in.flops / peak / issue;
  // wavefronts and sectors counted on the shape that ran, scaled to the shape predicted
  double scale = 1;
  if (in.run_flops > 0) scale = in.flops / in.run_flops;
  else if (in.run_bytes > 0) scale = in.bytes / in.run_bytes;
  double wavefronts = static_cast<double>(s.wavefronts) + static_cast<double>(g.sectors) * 32 / kL1WavefrontBytes;
  p.l1_s = wavefronts * scale / (gpu.sms * gpu.clock_ghz * 1e9) / issue;
  p.launch_s = p.launches * kLaunchOverheadSeconds;
  double body = std::max({p.memory_s, p.compute_s, p.l1_s});
  p.predicted_s = body + p.launch_s;
  if (p.launch_s >= body) p.bound = "launch";
  else if (body == p.memory_s) p.bound = "memory";
  else if (body == p.compute_s) p.bound = "compute";
  else p.bound = "L1";
  p.pct_of_roofline = p.predicted_s > 0 ? 100.0 * p.lower_bound_s / p.predicted_s : 0;
  return p;
}

}  // namespace ember::model
