// The numbers behind gpu_model.h. Sources, so each can be checked again:
//  [DS-H100] NVIDIA H100 Tensor Core GPU data sheet (SXM5 column): FP32 67 TFLOP/s, TF32 989 and
//            FP16/BF16 1979 TFLOP/s *with sparsity* (the dense rates are half: 494.7 and 989.4),
//            HBM3 3.35 TB/s.
//  [DS-H200] NVIDIA H200 Tensor Core GPU data sheet (SXM column): the same compute peaks as the
//            H100 SXM (same GH100 chip, same SM count and clocks), HBM3e 4.8 TB/s.
//  [WP]      NVIDIA H100 Tensor Core GPU Architecture white paper (GH100): H100 SXM5 has 132 SMs,
//            boost clock 1.98 GHz for the non-tensor peaks (132 SMs x 128 FP32 lanes x 2 x 1.98 GHz
//            = 66.9 TFLOP/s, the data sheet's 67).
//  [PG]      CUDA C++ Programming Guide, "Technical Specifications per Compute Capability", 9.0:
//            2048 threads, 64 warps, 32 blocks and 64K 32-bit registers per SM, 255 registers per
//            thread, 228 KB shared memory per SM, 227 KB per block (opt-in above 48 KB).
//  [OCC]     the toolkit's include/cuda_occupancy.h (the rules the runtime's occupancy API and the
//            Nsight Compute occupancy calculator use): registers are allocated per warp in units of
//            256 and per SM sub-partition (4 on sm_90), shared memory in units of 128 bytes with
//            1 KB per block reserved by the driver on compute capability 8.0 and later.
#include "bench/model/gpu_model.h"

#include <algorithm>
#include <climits>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace ember::model {

namespace {

constexpr double kTera = 1e12;

// The limits of compute capability 9.0 shared by both parts ([PG], [OCC]).
GpuSpec sm90_limits() {
  GpuSpec g;
  g.max_threads_per_sm = 2048;
  g.max_warps_per_sm = 64;
  g.max_blocks_per_sm = 32;
  g.registers_per_sm = 65536;
  g.max_registers_per_thread = 255;
  g.register_alloc_unit = 256;
  g.shared_per_sm = 228 * 1024;
  g.max_shared_per_block = 227 * 1024;
  g.shared_reserved_per_block = 1024;
  g.shared_alloc_unit = 128;
  return g;
}

GpuSpec make_h100() {
  GpuSpec g = sm90_limits();
  g.name = "H100 SXM";
  g.sms = 132;                       // [WP]
  g.clock_ghz = 1.98;                // [WP]
  g.hbm_bytes_per_s = 3.35 * kTera;  // [DS-H100]
  g.fp32_flops = 67 * kTera;         // [DS-H100]
  g.tf32_flops = 494.7 * kTera;      // [DS-H100], dense
  g.f16_flops = 989.4 * kTera;       // [DS-H100], dense, f32 accumulate
  g.bf16_flops = 989.4 * kTera;      // [DS-H100], dense
  return g;
}

GpuSpec make_h200() {
  GpuSpec g = make_h100();  // [DS-H200]: the same chip and compute peaks
  g.name = "H200 SXM";
  g.hbm_bytes_per_s = 4.8 * kTera;  // [DS-H200]
  return g;
}

// Registers are handed out per SM sub-partition (scheduler): a warp lives in one, so the register
// file is effectively 4 files of 16K registers ([OCC]). Not in the header's GpuSpec because every
// part ember models (sm_90) has 4.
constexpr int kSubPartitions = 4;

size_t round_up(size_t x, size_t unit) { return unit == 0 ? x : (x + unit - 1) / unit * unit; }

[[noreturn]] void fail_at(const std::string& path, int line, const std::string& what) {
  throw std::runtime_error(path + ":" + std::to_string(line) + ": " + what);
}

// Parses one unsigned decimal field; the whole token must be digits (no sign, no suffix).
size_t parse_count(const std::string& token, const char* field, const std::string& path, int line) {
  if (token.empty() || token.size() > 12 || token.find_first_not_of("0123456789") != std::string::npos)
    fail_at(path, line, std::string("expected a non-negative integer for ") + field + ", got '" + token + "'");
  return std::stoull(token);
}

}  // namespace

const GpuSpec& h100() {
  static const GpuSpec g = make_h100();
  return g;
}

const GpuSpec& h200() {
  static const GpuSpec g = make_h200();
  return g;
}

// Format (written by scripts/kernel_resources.py --write): '#' starts a comment line, blank lines
// are skipped, and every other line is
//   <registers> <static shared> <stack frame> <spill stores> <spill loads> <kernel name>
// with the name last because demangled names contain spaces.
std::vector<KernelResources> load_kernel_resources(const std::string& path) {
  std::ifstream in(path);
  if (!in)
    throw std::runtime_error(path +
                             ": cannot open the kernel resource table (scripts/kernel_resources.py --write makes it)");
  std::vector<KernelResources> table;
  std::string text;
  int line = 0;
  while (std::getline(in, text)) {
    ++line;
    const size_t first = text.find_first_not_of(" \t\r");
    if (first == std::string::npos || text[first] == '#') continue;
    std::istringstream fields(text);
    static const char* const kNames[] = {"registers", "static shared", "stack frame", "spill stores", "spill loads"};
    size_t v[5];
    for (int i = 0; i < 5; ++i) {
      std::string token;
      if (!(fields >> token))
        fail_at(path, line, std::string("missing ") + kNames[i] + " (expected 5 numbers, then the kernel name)");
      v[i] = parse_count(token, kNames[i], path, line);
    }
    std::string name;
    std::getline(fields, name);
    const size_t b = name.find_first_not_of(" \t");
    const size_t e = name.find_last_not_of(" \t\r");
    if (b == std::string::npos) fail_at(path, line, "missing the kernel name after the 5 numbers");
    name = name.substr(b, e - b + 1);
    if (v[0] > 255)
      fail_at(path, line, "registers per thread must be 0..255 (the sm_90 limit), got " + std::to_string(v[0]));
    if (find_kernel(table, name) != nullptr) fail_at(path, line, "kernel listed twice: " + name);
    KernelResources k;
    k.kernel = name;
    k.registers = static_cast<int>(v[0]);
    k.static_shared = v[1];
    k.stack_frame = v[2];
    k.spill_stores = v[3];
    k.spill_loads = v[4];
    table.push_back(std::move(k));
  }
  if (table.empty()) throw std::runtime_error(path + ": no kernels in the table");
  return table;
}

const KernelResources* find_kernel(const std::vector<KernelResources>& table, const std::string& kernel) {
  for (const auto& k : table)
    if (k.kernel == kernel) return &k;
  return nullptr;
}

// The rules of [OCC] for a kernel without an L1/shared carve-out preference (the driver then picks
// the largest carve-out a block needs, up to shared_per_sm): resident blocks per SM are the minimum
// of four limits, and the first limiter in the order threads, registers, shared memory, blocks is
// named when several bind equally.
Occupancy theoretical_occupancy(const KernelResources& k, int threads_per_block, size_t dynamic_shared,
                                const GpuSpec& gpu) {
  constexpr int kWarp = 32;
  if (threads_per_block <= 0 || threads_per_block > 1024)
    throw std::invalid_argument("theoretical_occupancy: " + k.kernel + ": threads per block must be 1..1024, got " +
                                std::to_string(threads_per_block));
  const int warps_per_block = (threads_per_block + kWarp - 1) / kWarp;

  // Warps: whole blocks of warps up to the per-SM warp limit.
  const int by_threads = gpu.max_warps_per_sm / warps_per_block;

  // Registers: each warp gets registers x 32 rounded up to the allocation unit, inside one
  // sub-partition's quarter of the register file. A block must also fit the per-block limit with
  // its warps rounded up to a multiple of the sub-partitions (the hardware's launch check).
  int by_registers = INT_MAX;
  if (k.registers > 0) {
    const int per_warp = static_cast<int>(round_up(static_cast<size_t>(k.registers) * kWarp, gpu.register_alloc_unit));
    const int per_block_checked = per_warp * static_cast<int>(round_up(warps_per_block, kSubPartitions));
    if (k.registers > gpu.max_registers_per_thread || per_block_checked > gpu.registers_per_sm) {
      by_registers = 0;
    } else {
      const int warps_per_partition = gpu.registers_per_sm / kSubPartitions / per_warp;
      by_registers = warps_per_partition * kSubPartitions / warps_per_block;
    }
  }

  // Shared memory: static + dynamic + the driver's reserved 1 KB, rounded up to the allocation unit;
  // a block above the per-block maximum (opt-in included) cannot launch at all.
  int by_shared = INT_MAX;
  const size_t per_block =
      round_up(k.static_shared + dynamic_shared + gpu.shared_reserved_per_block, gpu.shared_alloc_unit);
  if (per_block > gpu.max_shared_per_block + gpu.shared_reserved_per_block) {
    by_shared = 0;
  } else if (per_block > 0) {
    by_shared = static_cast<int>(gpu.shared_per_sm / per_block);
  }

  const int by_blocks = gpu.max_blocks_per_sm;

  Occupancy o;
  o.blocks_per_sm = by_threads;
  o.limiter = "threads";
  const std::pair<int, const char*> others[] = {
      {by_registers, "registers"}, {by_shared, "shared memory"}, {by_blocks, "blocks"}};
  for (const auto& [limit, name] : others)
    if (limit < o.blocks_per_sm) {
      o.blocks_per_sm = limit;
      o.limiter = name;
    }
  o.active_warps_per_sm = o.blocks_per_sm * warps_per_block;
  o.fraction = static_cast<double>(o.active_warps_per_sm) / gpu.max_warps_per_sm;
  return o;
}

}  // namespace ember::model
