// The SIMT simulator's public controls, for tests and tools of the simulator build
// (-DEMBER_CUDA_SIM=ON; see docs/simulator.md). Everything else reaches the simulator through
// the CUDA runtime API it implements (sim/runtime_api.cpp) and the device built-ins of
// sim/device_api.h.
//
// Environment (read once, at the first CUDA call):
//   EMBER_SIM_DEVICES=N        simulated GPUs (default 1), each an H100 (sm_90, 132 SMs)
//   EMBER_SIM_MEMORY=BYTES     device memory each GPU may hand out (default 8 GiB; the properties
//                              still say 80 GB), e.g. 512M, 2G
//   EMBER_SIM_RACECHECK=0      turn the shared-memory race check off (on by default)
//   EMBER_SIM_ABORT=1          abort the process at the first kernel fault (for a debugger)
//   EMBER_SIM_THREADS=N        host threads running a grid's blocks (default: EMBER_NUM_THREADS,
//                              else one per core)
//   EMBER_SIM_FAIL_CAPTURES=N  the process's first N stream captures fail at cudaStreamEndCapture
//                              (cudaErrorStreamCaptureInvalidated), for tests of the fallback
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ember::sim {

// True in the simulator build.
bool active();

// The message of the first kernel fault since the last reset ("" if none). A fault makes the device
// return a sticky error from every later synchronising call, as an illegal address does on a GPU.
std::string last_fault();
// Clears a sticky kernel fault so a test can go on after provoking one on purpose (a GPU would
// need a new process). Waits for every stream to drain first.
void clear_fault();

// A caching allocator tells the simulator which part of a cudaMalloc block a tensor uses now
// (`bytes`; 0 when the block goes back to the allocator's free list). The bound takes effect in
// `stream` order, after the work already queued there, so a kernel that reads past the end of a
// tensor, or a block after it was freed, is caught even though the block itself is larger and
// still allocated. (compute-sanitizer needs the same from custom allocators, through NVTX.)
void annotate_block(void* block, size_t bytes, void* stream);

// Per-kernel statistics since start: how often each kernel (by its demangled name) was launched,
// with how many blocks and threads in all.
struct KernelStats {
  std::string name;
  uint64_t launches = 0;
  uint64_t blocks = 0;
  uint64_t threads = 0;
};
std::vector<KernelStats> kernel_stats();

}  // namespace ember::sim
