// The H100/H200 cost model (bench/model/gpu_model.h): theoretical occupancy against cases worked
// out by hand from the occupancy calculator's rules (each case's comment shows the arithmetic),
// the kernel resource table's loader and its errors, and the occupancy that kernels' comments
// promise (bench/model/kernel_claims.txt) against the checked-in sm_90 table.
//
// The rules (sm_90, the toolkit's cuda_occupancy.h): warps per block = ceil(threads / 32);
//   threads:   64 warps per SM / warps per block
//   registers: per warp = registers x 32 rounded up to 256; each of the 4 sub-partitions holds
//              floor(16384 / per warp) warps; blocks = 4 x that / warps per block (0 if the block's
//              warps, rounded up to a multiple of 4, need more than 65536)
//   shared:    per block = static + dynamic + 1024 reserved, rounded up to 128; blocks =
//              floor(228 KiB / per block) (0 above 227 KiB + 1 KiB)
//   blocks:    32
#include <catch2/catch.hpp>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include <unistd.h>

#include "bench/model/gpu_model.h"

using ember::model::KernelResources;
using ember::model::Occupancy;

namespace {

KernelResources kernel(int registers, size_t static_shared = 0) {
  KernelResources k;
  k.kernel = "test_kernel";
  k.registers = registers;
  k.static_shared = static_shared;
  return k;
}

Occupancy occ(int registers, int threads, size_t dynamic_shared = 0, size_t static_shared = 0) {
  return ember::model::theoretical_occupancy(kernel(registers, static_shared), threads, dynamic_shared,
                                             ember::model::h100());
}

// A launch and its occupancy worked out by hand; every field is checked.
struct OccupancyCase {
  int registers, threads;
  size_t dynamic_shared, static_shared;
  int blocks_per_sm, active_warps_per_sm;
  double fraction;
  const char* limiter;
};

void check_occupancy(const OccupancyCase& c) {
  INFO(c.registers << " registers, " << c.threads << " threads, " << c.dynamic_shared << " dynamic + "
                   << c.static_shared << " static shared bytes");
  const Occupancy o = occ(c.registers, c.threads, c.dynamic_shared, c.static_shared);
  CHECK(o.blocks_per_sm == c.blocks_per_sm);
  CHECK(o.active_warps_per_sm == c.active_warps_per_sm);
  CHECK(o.fraction == c.fraction);
  CHECK(o.limiter == c.limiter);
}

// A temporary table file, removed at the end of the scope.
struct TempTable {
  std::string path;
  explicit TempTable(const std::string& text) {
    char name[] = "/tmp/ember_gpu_model_XXXXXX";
    const int fd = mkstemp(name);
    REQUIRE(fd >= 0);
    close(fd);
    path = name;
    std::ofstream(path) << text;
  }
  ~TempTable() { std::remove(path.c_str()); }
};

std::string load_error(const std::string& text) {
  TempTable t(text);
  try {
    ember::model::load_kernel_resources(t.path);
  } catch (const std::exception& e) {
    return std::string(e.what()).replace(0, t.path.size(), "<table>");
  }
  return "no error";
}

}  // namespace

TEST_CASE("gpu model: H100 and H200 specs", "[model]") {
  const auto& h100 = ember::model::h100();
  const auto& h200 = ember::model::h200();
  CHECK(h100.sms == 132);
  CHECK(h100.max_warps_per_sm * 32 == h100.max_threads_per_sm);
  // The dense tensor peaks are half the data sheets' sparse ones (989 TF32 and 1979 f16).
  CHECK(h100.tf32_flops == Approx(989.4e12 / 2));
  CHECK(h100.bf16_flops == Approx(1978.8e12 / 2));
  CHECK(h200.hbm_bytes_per_s > h100.hbm_bytes_per_s);  // HBM3e 4.8 TB/s against HBM3 3.35
  CHECK(h200.bf16_flops == h100.bf16_flops);           // the same chip
}

TEST_CASE("gpu model: occupancy limited by threads, registers and their allocation unit", "[model]") {
  const OccupancyCase cases[] = {
      // 256 threads = 8 warps. 32 registers: 1024 per warp, 16 warps per sub-partition, 64 per SM =
      // 8 blocks; threads: 64 / 8 = 8 blocks; shared: 228 KiB / 1 KiB = 228; blocks: 32. 8 blocks, 100%.
      {32, 256, 0, 0, 8, 64, 1.0, "threads"},
      // 64 registers: 2048 per warp, 8 warps per sub-partition, 32 per SM = 4 blocks: 32 warps, 50%.
      {64, 256, 0, 0, 4, 32, 0.5, "registers"},
      // 33 registers: 1056 per warp, rounded up to 1280; 16384 / 1280 = 12 warps per sub-partition,
      // 48 per SM = 6 blocks, 75% (without the rounding it would be 65536 / (1056 x 8) = 7 blocks).
      {33, 256, 0, 0, 6, 48, 0.75, "registers"},
      // 200 registers, one warp per block: 6400 per warp; 16384 / 6400 = 2 warps per sub-partition,
      // 8 per SM = 8 blocks, 12.5% (the whole file would give 65536 / 6400 = 10).
      {200, 32, 0, 0, 8, 8, 0.125, "registers"},
      // 1024 threads at 64 registers: 2048 x 32 warps = 65536 fits exactly: 1 block, 32 warps, 50%.
      {64, 1024, 0, 0, 1, 32, 0.5, "registers"},
      // 1024 threads at 255 registers: 8160 per warp, rounded to 8192, x 32 warps > 65536: no block fits.
      {255, 1024, 0, 0, 0, 0, 0.0, "registers"},
      // 96 threads = 3 warps (rounded up from 65 threads too): 16 registers, 512 per warp, 32 warps
      // per sub-partition, 128 per SM; threads: 64 / 3 = 21 blocks, 63 warps.
      {16, 65, 0, 0, 21, 63, 63.0 / 64, "threads"},
  };
  for (const OccupancyCase& c : cases) check_occupancy(c);
}

TEST_CASE("gpu model: occupancy limited by shared memory and by blocks", "[model]") {
  const OccupancyCase cases[] = {
      // gemm mma_sync's launch: 128 threads (4 warps), 96 KiB dynamic: 98304 + 1024 = 99328 per block
      // (a multiple of 128); 233472 / 99328 = 2 blocks, 8 warps, 12.5%.
      {32, 128, 98304, 0, 2, 8, 0.125, "shared memory"},
      // The allocation unit: 7000 dynamic + 1024 = 8024, rounded up to 8064; 233472 / 8064 = 28
      // blocks (unrounded 29; without the reserved KiB, 7040 would give 33, capped at 32). One warp each.
      {32, 32, 7000, 0, 28, 28, 28.0 / 64, "shared memory"},
      // Static and dynamic shared memory add: 4096 static + 2904 dynamic = 7000, the same 28 blocks.
      {32, 32, 2904, 4096, 28, 28, 28.0 / 64, "shared memory"},
      // The largest block: 227 KiB + 1 KiB reserved = 228 KiB: 1 block; one byte more cannot launch.
      {32, 128, 227 * 1024, 0, 1, 4, 4.0 / 64, "shared memory"},
      {32, 128, 227 * 1024 + 1, 0, 0, 0, 0.0, "shared memory"},
      // One warp per block, 16 registers, no shared memory: threads allow 64 blocks, registers 128,
      // shared 228; the 32-block limit binds: 32 warps, 50%.
      {16, 32, 0, 0, 32, 32, 0.5, "blocks"},
  };
  for (const OccupancyCase& c : cases) check_occupancy(c);

  CHECK_THROWS_WITH(occ(32, 0), Catch::Contains("threads per block must be 1..1024"));
  CHECK_THROWS_WITH(occ(32, 1025), Catch::Contains("threads per block must be 1..1024"));
}

TEST_CASE("gpu model: the kernel resource table loader", "[model]") {
  TempTable t(
      "# a comment\n"
      "\n"
      "   32   0   0   0   0  void k<float>(float*, long)\n"
      "  128 16384 48 56 84  ember::(anonymous namespace)::spilling(int)\n");
  const auto table = ember::model::load_kernel_resources(t.path);
  REQUIRE(table.size() == 2);
  const auto* k = ember::model::find_kernel(table, "ember::(anonymous namespace)::spilling(int)");
  REQUIRE(k != nullptr);
  CHECK(k->registers == 128);
  CHECK(k->static_shared == 16384);
  CHECK(k->stack_frame == 48);
  CHECK(k->spill_stores == 56);
  CHECK(k->spill_loads == 84);
  REQUIRE(ember::model::find_kernel(table, "void k<float>(float*, long)") != nullptr);
  CHECK(ember::model::find_kernel(table, "void k<float>(float*, long) ") == nullptr);
  CHECK(ember::model::find_kernel(table, "void k<double>(double*, long)") == nullptr);

  CHECK(load_error("32 0 0 0 0 k()\n32 0 x 0 0 j()\n") ==
        "<table>:2: expected a non-negative integer for stack frame, got 'x'");
  CHECK(load_error("# header\n32 0 0 0 0\n") == "<table>:2: missing the kernel name after the 5 numbers");
  CHECK(load_error("32 0 0\n") == "<table>:1: missing spill stores (expected 5 numbers, then the kernel name)");
  CHECK(load_error("32 -1 0 0 0 k()\n") == "<table>:1: expected a non-negative integer for static shared, got '-1'");
  CHECK(load_error("256 0 0 0 0 k()\n") == "<table>:1: registers per thread must be 0..255 (the sm_90 limit), got 256");
  CHECK(load_error("32 0 0 0 0 k()\n\n40 0 0 0 0 k()\n") == "<table>:3: kernel listed twice: k()");
  CHECK(load_error("# only comments\n") == "<table>: no kernels in the table");
  CHECK_THROWS_WITH(ember::model::load_kernel_resources("/nonexistent/table.txt"),
                    Catch::Contains("/nonexistent/table.txt: cannot open"));
}

// The checked-in table is the nvcc build's (the ctest entry "model: kernel resources of the sm_90
// build match ..." keeps it current there); this holds every build to the kernels' promises.
TEST_CASE("gpu model: kernels keep the occupancy their comments promise (sm_90 table, H100)", "[model]") {
  const std::string dir = std::string(EMBER_SOURCE_DIR) + "/bench/model/";
  const auto table = ember::model::load_kernel_resources(dir + "kernel_resources_sm90.txt");
  std::ifstream claims(dir + "kernel_claims.txt");
  REQUIRE(claims);
  std::string line;
  int n = 0, checked = 0;
  while (std::getline(claims, line)) {
    ++n;
    if (line.empty() || line[0] == '#') continue;
    const size_t bar1 = line.find(" | "), bar2 = line.find(" | ", bar1 + 3);
    INFO("kernel_claims.txt:" << n << ": " << line);
    REQUIRE(bar1 != std::string::npos);
    REQUIRE(bar2 != std::string::npos);
    std::istringstream numbers(line.substr(0, bar1));
    int blocks = 0, threads = 0;
    size_t dynamic_shared = 0;
    REQUIRE(static_cast<bool>(numbers >> blocks >> threads >> dynamic_shared));
    const std::string prefix = line.substr(bar1 + 3, bar2 - bar1 - 3);
    int matched = 0;
    for (const auto& k : table) {
      if (k.kernel.compare(0, prefix.size(), prefix) != 0) continue;
      ++matched;
      const Occupancy o = ember::model::theoretical_occupancy(k, threads, dynamic_shared, ember::model::h100());
      INFO(k.kernel << ": " << k.registers << " registers, " << k.static_shared << " bytes static shared: "
                    << o.blocks_per_sm << " blocks per SM (limiter: " << o.limiter << "), promised " << blocks);
      CHECK(o.blocks_per_sm >= blocks);
    }
    CHECK(matched > 0);  // a promise about no kernel is stale
    checked += matched;
  }
  CHECK(checked > 0);
}
