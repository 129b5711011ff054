// What a kernel costs on an H100 or H200 without running it there: the hardware's numbers, the
// resources each kernel of the real sm_90 build uses (registers, static shared memory, local
// memory and spills, read from ptxas; scripts/kernel_resources.py), and the theoretical occupancy
// of a launch. bench_ops --model combines them with the simulator's efficiency counters
// (sim/counters.h) into a roofline prediction; docs/perf.md keeps the table, labelled
// "predicted".
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace ember::model {

// A GPU's limits and peaks (dense, no sparsity), from the vendor's data sheets; see the .cpp for
// the sources of each number.
struct GpuSpec {
  std::string name;  // "H100 SXM", "H200 SXM"
  int sms = 0;
  double clock_ghz = 0;        // boost clock the peaks assume
  double hbm_bytes_per_s = 0;  // DRAM bandwidth
  double fp32_flops = 0;       // FMA = 2 FLOPs
  double tf32_flops = 0;       // tensor cores
  double f16_flops = 0;        // tensor cores, f32 accumulate
  double bf16_flops = 0;
  int max_threads_per_sm = 0;            // 2048
  int max_warps_per_sm = 0;              // 64
  int max_blocks_per_sm = 0;             // 32
  int registers_per_sm = 0;              // 65536
  int max_registers_per_thread = 0;      // 255
  int register_alloc_unit = 0;           // registers are allocated per warp in units of this many (256)
  size_t shared_per_sm = 0;              // 228 KiB
  size_t max_shared_per_block = 0;       // 227 KiB with the opt-in
  size_t shared_reserved_per_block = 0;  // 1 KiB the hardware keeps per block
  size_t shared_alloc_unit = 0;          // 128 bytes
};
const GpuSpec& h100();
const GpuSpec& h200();

// One kernel of the sm_90 build, as ptxas reported it.
struct KernelResources {
  std::string kernel;  // demangled name, the form the simulator's reports use
  int registers = 0;
  size_t static_shared = 0;                  // bytes
  size_t stack_frame = 0;                    // local memory per thread, bytes
  size_t spill_stores = 0, spill_loads = 0;  // bytes
};
// Reads the checked-in table (bench/model/kernel_resources_sm90.txt). Throws a clear error naming
// the file and line on a malformed entry.
std::vector<KernelResources> load_kernel_resources(const std::string& path);
// The entry for a kernel name as the simulator reports it (nullptr if none).
const KernelResources* find_kernel(const std::vector<KernelResources>& table, const std::string& kernel);

struct Occupancy {
  int blocks_per_sm = 0;
  int active_warps_per_sm = 0;
  double fraction = 0;  // active warps / max warps per SM
  std::string limiter;  // "threads", "registers", "shared memory", "blocks"
};
// Theoretical occupancy of a launch with this many threads per block and dynamic shared memory.
Occupancy theoretical_occupancy(const KernelResources& k, int threads_per_block, size_t dynamic_shared,
                                const GpuSpec& gpu);

}  // namespace ember::model
