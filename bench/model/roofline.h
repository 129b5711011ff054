// The roofline prediction of one op call (bench/model/kernel_model.cpp prints it, docs/perf.md
// keeps the table, labelled "predicted"): the op's minimum traffic and FLOPs (its cost model,
// kernels/registry.h Cost) against an H100's or H200's peaks, and a predicted time that charges
// the inefficiencies the simulator counted (sim/counters.h) while the op's kernels ran.
//
// Note [kernel roofline model]: what the prediction assumes (docs/perf.md repeats it under the
// table). Every number it prints is a model output, never a measurement.
//   lower bound   = max(min bytes / HBM bandwidth, FLOPs / peak of the math unit): the classic
//                   roofline, no launch overhead.
//   memory time   = DRAM bytes / HBM bandwidth, DRAM bytes = min bytes / global sector efficiency.
//                   Every byte the op must move is assumed to come from DRAM once, in whole 32-byte
//                   sectors, so the sectors a kernel fetches but does not use cost bandwidth; a
//                   kernel's re-reads of its own data (a GEMM reads each A tile N/BN times) are
//                   assumed to hit the 50 MB L2. Counting every sector as DRAM traffic instead
//                   would make every tiled GEMM look memory bound, which it is not on these GPUs.
//   compute time  = FLOPs / (peak x issue efficiency). The peak is the fp32 SIMT peak unless the
//                   variant uses tensor cores (its name says "mma"): then the f16 or bf16 tensor
//                   peak for those dtypes and the tf32 one for f32. f16/bf16 SIMT code is charged the
//                   fp32 SIMT rate (ember's SIMT kernels compute in f32).
//   issue efficiency = min(1, occupancy / 25 %): latency hiding is assumed adequate from 16 of 64
//                   warps per SM up and to fall linearly below. It scales the memory time too (a
//                   memory-bound kernel needs warps in flight as much as a compute-bound one).
//                   Occupancy is the lowest theoretical occupancy among the call's kernels
//                   (bench/model/gpu_model.h, from the ptxas resource table); a kernel missing from
//                   the table is taken at full efficiency and the row says so.
//   L1 time       = (shared wavefronts + global sectors / 4) / (SMs x clock): shared memory and
//                   the L1 cache share one data path that moves one 128-byte wavefront (4 sectors)
//                   per clock per SM (33 TB/s on an H100), so bank conflicts (extra wavefronts) and
//                   uncoalesced global requests (extra sectors, L1 hits included) both cost time
//                   there. This is the term that keeps a naive GEMM, whose every FMA loads from
//                   global memory, from looking compute bound.
//   predicted     = max(memory, compute, L1 time) + launches x 2.5 us (a launch on a busy
//                   stream; an assumption, not measured here).
//   % of roofline = lower bound / predicted.
//   traffic ratio = global bytes the kernels asked for / the op's minimum bytes, both at the shape
//                   that ran: reported beside the prediction, not part of it.
// Counters measured on a smaller shape than the predicted one (kernel_model --quick) are scaled:
// efficiencies and occupancy are ratios and carry over as they are; wavefronts and sectors scale
// with the FLOPs (bytes when the op has none); the launch count carries over. A shape-dependent kernel
// choice (split-K, a second reduction pass) is therefore only as right as the smaller shape.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench/model/gpu_model.h"
#include "sim/counters.h"

namespace ember::model {

inline constexpr double kLaunchOverheadSeconds = 2.5e-6;
inline constexpr double kFullLatencyHidingOccupancy = 0.25;
inline constexpr double kL1WavefrontBytes = 128;  // per clock per SM, shared memory and L1 alike

// sectors the ideal layout needs / sectors touched; 1 when there was no request (nothing wasted).
double sector_efficiency(const sim::GlobalCounters& g);
// wavefronts / ideal wavefronts; 1 when there was no request.
double conflict_factor(const sim::SharedCounters& s);
sim::GlobalCounters operator+(const sim::GlobalCounters& a, const sim::GlobalCounters& b);
sim::SharedCounters operator+(const sim::SharedCounters& a, const sim::SharedCounters& b);

// The launches of one kernel (by name) within one op call, summed.
struct KernelStats {
  std::string kernel;
  int launches = 0;
  int threads_per_block = 0;  // of the first launch (ember's kernels use one block size per kernel)
  size_t dynamic_shared = 0;  // the largest of its launches
  uint64_t blocks = 0;        // summed over launches
  sim::GlobalCounters global_load, global_store;
  sim::SharedCounters shared_load, shared_store;
  uint64_t atomics = 0, barriers = 0, mbarrier_phases = 0, warp_collectives = 0;

  double global_load_efficiency() const { return sector_efficiency(global_load); }
  double global_store_efficiency() const { return sector_efficiency(global_store); }
  double global_efficiency() const { return sector_efficiency(global_load + global_store); }
  double shared_conflict_factor() const { return conflict_factor(shared_load + shared_store); }
};
// Groups launches by kernel name, in the order each kernel first ran.
std::vector<KernelStats> group_by_kernel(const std::vector<sim::LaunchCounters>& launches);

// The resource-table entry (ptxas's full demangled name, "void ns::k<...>(params)") of a kernel as
// the simulator names it: the simulator drops a leading "void " and everything from the last '('
// on (sim/exec.cpp, Launch::name), so the table's names are shortened the same way
// before comparing. nullptr when no entry or several entries with different resources match.
const KernelResources* match_resources(const std::vector<KernelResources>& table, const std::string& sim_name);
// That shortening.
std::string simulator_kernel_name(const std::string& demangled);

enum class MathUnit { fp32_simt, tf32_tensor, f16_tensor, bf16_tensor };
const char* math_unit_name(MathUnit u);
double peak_flops(const GpuSpec& gpu, MathUnit u);
// The unit a variant's FLOPs run on: tensor cores when its name contains "mma" (in the dtype of
// the call: "f32" -> tf32, "f16", "bf16"), else the fp32 SIMT pipes.
MathUnit math_unit_for(const std::string& variant, const std::string& dtype);

// What a prediction needs: the cost of the shape to predict, the cost of the shape that ran in the
// simulator (the same shape unless counters were taken on a smaller one), and the kernels that ran.
struct PredictionInput {
  double bytes = 0, flops = 0;          // the shape predicted (OpInfo::cost)
  double run_bytes = 0, run_flops = 0;  // the shape that ran
  std::vector<KernelStats> kernels;
  // Occupancy (fraction of the SM's warps) per kernel, same order as kernels; < 0: not in the
  // resource table.
  std::vector<double> occupancy;
  MathUnit unit = MathUnit::fp32_simt;
};

struct Prediction {
  double lower_bound_s = 0;
  double memory_s = 0, compute_s = 0, l1_s = 0, launch_s = 0;
  double predicted_s = 0;
  double pct_of_roofline = 0;  // lower bound / predicted, in %
  double dram_bytes = 0;
  double sector_efficiency = 1;  // all global requests of the call
  // Global bytes the call's kernels asked for (loads and stores, counted) over the op's minimum
  // traffic (its cost model) at the shape that ran: 1 = every byte moved once; a two-pass kernel
  // reads its input twice (2), a tiled GEMM re-reads tiles (served by the L2 in the model's
  // memory time, but counted here). 0 when the op has no cost model bytes.
  double traffic_ratio = 0;
  double conflict_factor = 1;  // all shared requests of the call
  double occupancy = -1;       // lowest known; < 0: no kernel of the call is in the table
  double issue_efficiency = 1;
  bool occupancy_unknown = false;  // some kernel had no resource entry
  int launches = 0;
  const char* bound = "";  // "memory", "compute", "L1", "launch"
};
Prediction predict(const GpuSpec& gpu, const PredictionInput& in);

}  // namespace ember::model
