// Efficiency counters of the SIMT simulator (docs/simulator.md, "Efficiency counters"): what
// Nsight Compute's memory sections report, counted on the CPU. Off by default (no cost beyond a
// branch per access); a tool or test turns them on, runs kernels, and takes one record per launch.
//
// How accesses are grouped: a GPU issues one request per warp per memory instruction, and the
// simulator runs the lanes of a warp one after another, so the k-th execution of an instruction
// (by its code address) by each lane of a warp is taken to be the same warp-wide request. Lanes
// that did not execute it (divergence, exited threads) simply do not take part, as on a GPU.
//
//   global memory: a request touches a set of 32-byte sectors; its ideal is the fewest sectors
//   that could hold the bytes the active lanes asked for (ceil(bytes / 32), counting each
//   distinct byte once). sector efficiency = ideal_sectors / sectors.
//   shared memory: 32 banks of 4 bytes; a request takes as many wavefronts as the largest number
//   of distinct 4-byte words it touches in any one bank (lanes reading the same word share it: a
//   broadcast), and never fewer than ceil(distinct bytes / 128). ideal_wavefronts is that lower
//   bound; the bank-conflict factor = wavefronts / ideal_wavefronts. ldmatrix is served matrix by
//   matrix: its wavefronts are summed over its 8x8 matrices, each taking the most distinct words
//   one bank holds among that matrix's 8 row addresses (Note [ldmatrix wavefronts] in counters.cpp).
//   atomics: counted only in `atomics`, not as load or store requests.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ember::sim {

struct GlobalCounters {
  uint64_t requests = 0;       // warp-wide memory instructions
  uint64_t sectors = 0;        // 32-byte sectors they touched (summed per request)
  uint64_t ideal_sectors = 0;  // sum over requests of ceil(distinct bytes / 32)
  uint64_t bytes = 0;          // bytes asked for by the lanes (summed per lane access)
};

struct SharedCounters {
  uint64_t requests = 0;
  uint64_t wavefronts = 0;        // bank-conflict-aware passes (summed per request)
  uint64_t ideal_wavefronts = 0;  // sum over requests of max(1, ceil(distinct bytes / 128))
  uint64_t bytes = 0;
};

// One kernel launch.
struct LaunchCounters {
  std::string kernel;  // demangled name, as in the simulator's reports
  unsigned grid[3] = {1, 1, 1};
  unsigned block[3] = {1, 1, 1};
  size_t dynamic_shared_bytes = 0;
  size_t static_shared_bytes = 0;
  GlobalCounters global_load, global_store;  // device and pinned memory
  SharedCounters shared_load, shared_store;
  uint64_t atomics = 0;           // warp-wide atomic instructions (global or shared)
  uint64_t barriers = 0;          // __syncthreads() (and _count/_and/_or) executed, per block
  uint64_t mbarrier_phases = 0;   // phases completed by the block's mbarriers, summed over blocks
  uint64_t warp_collectives = 0;  // shuffles, votes, __syncwarp, ldmatrix/mma, per warp
  // Load and store requests (global or shared, not ldmatrix) with fewer lanes than the warp has
  // threads: divergent branches and bounds guards (the 16 threads of the last warp of a 48-thread
  // block are a warp of 16, and their requests are not partial).
  uint64_t partial_requests = 0;
};

// Starts (true) or stops (false) recording launches. Launches made while it is on are recorded,
// whatever stream they run on and however late it runs them (a graph's kernels: replays that run
// while it is on).
void set_counters_enabled(bool on);
bool counters_enabled();

// Waits for every stream to drain, then returns the launches recorded since the last call (in
// the order they ran) and forgets them.
std::vector<LaunchCounters> take_counters();

}  // namespace ember::sim
