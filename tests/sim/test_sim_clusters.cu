// The simulator's checks of thread-block clusters (Note [simulated clusters] in sim/cluster.cpp),
// each provoked by a deliberately broken kernel next to its fixed twin: a race between blocks on
// distributed shared memory (a write between the barrier's arrive and wait), a block's shared memory used after its
// threads exited, a multicast into a block whose barrier is not initialised yet, a stuck cluster barrier, the barrier
// misused, and launches whose grid is not a whole number of clusters. Simulator build only
// (-DEMBER_CUDA_SIM=ON): on a GPU these kernels would corrupt memory or hang.
#include <catch2/catch.hpp>

#include <cstdint>
#include <string>

#include "core/cuda/kernel.cuh"
#include "core/cuda/runtime.h"
#include "core/cuda/tensor_map.h"
#include "core/tensor.h"
#include "kernels/common/cluster.cuh"
#include "kernels/common/tma.cuh"
#include "kernels/functional.h"
#include "sim/sim.h"
#include "tests/sim/sim_test_util.h"

using namespace ember;
using namespace ember::sim_test;
using Catch::Matchers::Contains;

namespace {

// Block 1 writes into block 0's `slot`, which block 0 reads after a cluster barrier: the write
// comes before block 1's arrival (ordered), or after it (`late`: a race, although the barrier
// completes before block 0 reads).
__global__ void remote_write(uint32_t* out, bool late) {
  EMBER_SHARED(uint32_t[32], slot);
  const unsigned rank = ptx::cluster_ctarank();
  if (rank == 1 && !late) *ptx::map_shared_rank(&slot[threadIdx.x], 0u) = 7 + threadIdx.x;
  ptx::cluster_arrive();
  if (rank == 1 && late) *ptx::map_shared_rank(&slot[threadIdx.x], 0u) = 7 + threadIdx.x;
  ptx::cluster_wait();
  if (rank == 0) out[threadIdx.x] = slot[threadIdx.x];
  ptx::cluster_sync();
}

// Block 1 reads block 0's shared memory after block 0's threads have left (no final cluster barrier).
__global__ void read_after_exit(uint32_t* out, bool wait) {
  EMBER_SHARED(uint32_t[32], slot);
  const unsigned rank = ptx::cluster_ctarank();
  slot[threadIdx.x] = rank;
  ptx::cluster_sync();
  if (rank == 1) out[threadIdx.x] = *ptx::map_shared_rank(&slot[threadIdx.x], 0u);
  if (wait) ptx::cluster_sync();
}

// Every block initialises its barrier, then block 0 multicasts a box to both; `sync`: a cluster
// barrier between the initialisation and the copy, as the ISA requires.
__global__ void early_multicast(const __grid_constant__ CUtensorMap map, bool sync) {
  EMBER_SHARED(uint16_t[4][32], tile);
  EMBER_SHARED(uint64_t, bar);
  const unsigned rank = ptx::cluster_ctarank();
  if (threadIdx.x == 0) {
    ptx::mbarrier_init(&bar, 1);
    ptx::fence_mbarrier_init();
    ptx::mbarrier_arrive_expect_tx(&bar, sizeof tile);
  }
  if (sync) ptx::cluster_sync();
  if (rank == 0 && threadIdx.x == 0) ptx::tma_load_2d_multicast(&tile[0][0], &map, 0, 0, &bar, 0x3);
  ptx::mbarrier_wait_parity(&bar, 0);
  ptx::cluster_sync();
}

enum BarrierMisuse : int { kFine, kNeverArrives, kWaitFirst, kArriveTwice };

// Every thread of every block arrives and waits, except for the misuse asked for by block 1.
__global__ void cluster_barrier(int misuse) {
  EMBER_SHARED(uint64_t, bar);
  const bool odd = ptx::cluster_ctarank() == 1 && threadIdx.x == 0;
  if (odd && misuse == kNeverArrives) {  // waits on a barrier nobody arrives on instead
    ptx::mbarrier_init(&bar, 1);
    ptx::mbarrier_wait_parity(&bar, 0);
  }
  if (odd && misuse == kWaitFirst) ptx::cluster_wait();
  ptx::cluster_arrive();
  if (odd && misuse == kArriveTwice) ptx::cluster_arrive();
  ptx::cluster_wait();
}

__global__ void nothing() {}

uint32_t* up(const Tensor& t) { return static_cast<uint32_t*>(t.data_ptr()); }

}  // namespace

TEST_CASE("sim: distributed shared memory accessed by two blocks needs a cluster barrier between",
          "[gpu][sim][cluster]") {
  Tensor out = zeros({32}, TensorOptions(DType::i32).device(cuda0()));
  CHECK(
      fault_of([&] { cuda::launch_cluster(remote_write, 2, 32, dim3(2, 1, 1), 0, stream(), up(out), false); }).empty());
  CHECK(out.to(kCPU).to_vector<int32_t>()[5] == 12);
  const std::string m =
      fault_of([&] { cuda::launch_cluster(remote_write, 2, 32, dim3(2, 1, 1), 0, stream(), up(out), true); });
  // (block 1's last thread completes the barrier, so its write is the one after the barrier: a write
  // between a thread's arrival and the barrier's completion counts as before it, Note [simulated clusters])
  CHECK_THAT(m, Contains("block (0,0,0) thread (31,0,0): racecheck: shared-memory read of `slot` [byte 124] written "
                         "by thread (31,0,0) of the cluster's block of rank 1 since the last barrier.cluster (no "
                         "barrier.cluster between the write and this read"));
}

TEST_CASE("sim: a block's shared memory used after its threads exited is reported", "[gpu][sim][cluster]") {
  Tensor out = zeros({32}, TensorOptions(DType::i32).device(cuda0()));
  CHECK(fault_of([&] {
          cuda::launch_cluster(read_after_exit, 4, 32, dim3(2, 1, 1), 0, stream(), up(out), true);
        }).empty());
  const std::string m =
      fault_of([&] { cuda::launch_cluster(read_after_exit, 4, 32, dim3(2, 1, 1), 0, stream(), up(out), false); });
  CHECK_THAT(m, Contains("read of 4 bytes of the shared memory of the cluster's block of rank 0, whose threads have "
                         "all exited"));
}

TEST_CASE("sim: a multicast copy into a block whose barrier is not initialised is reported",
          "[gpu][sim][cluster][tma]") {
  Tensor m = zeros({4 * 32}, TensorOptions(DType::f16).device(cuda0()));
  cuda::TensorMapSpec spec;
  spec.dtype = DType::f16;
  spec.base = m.data_ptr();
  spec.dims = {32, 4};
  spec.strides_bytes = {64};
  spec.box = {32, 4};
  const CUtensorMap map = cuda::make_tensor_map(spec);
  CHECK(fault_of([&] { cuda::launch_cluster(early_multicast, 2, 32, dim3(2, 1, 1), 0, stream(), map, true); }).empty());
  const std::string msg =
      fault_of([&] { cuda::launch_cluster(early_multicast, 2, 32, dim3(2, 1, 1), 0, stream(), map, false); });
  // (block 1 has not run yet: its barrier is not even declared)
  CHECK_THAT(msg, Contains("shared-memory write of 8 bytes at offset 320 of the cluster's block of rank 1"));
  CHECK_THAT(msg, Contains("may not have started: a barrier.cluster orders"));
}

TEST_CASE("sim: a cluster barrier that cannot complete, or misused, is reported", "[gpu][sim][cluster]") {
  const auto run = [](BarrierMisuse misuse) {
    return fault_of([&] { cuda::launch_cluster(cluster_barrier, 2, 64, dim3(2, 1, 1), 0, stream(), int{misuse}); });
  };
  CHECK(run(kFine).empty());
  std::string m = run(kNeverArrives);
  CHECK_THAT(m, Contains("cluster (0,0,0) is stuck"));
  CHECK_THAT(m, Contains("block (0,0,0), rank 0: 64 thread(s) [linear ids 0..63] wait at barrier.cluster.wait"));
  CHECK_THAT(m, Contains("127 thread(s) of the cluster have arrived"));
  CHECK_THAT(m, Contains("block (1,0,0), rank 1: 63 thread(s) [linear ids 1..63] wait at barrier.cluster.wait"));
  CHECK_THAT(m, Contains("1 thread(s) [linear ids 0] wait on the mbarrier"));
  m = run(kWaitFirst);
  CHECK_THAT(m, Contains("barrier.cluster.wait by a thread that has not arrived"));
  m = run(kArriveTwice);
  CHECK_THAT(m, Contains("barrier.cluster.arrive by a thread that arrived before and has not waited since"));
}

TEST_CASE("sim: a cluster launch's grid is a whole number of clusters of at most 8 blocks", "[gpu][sim][cluster]") {
  CHECK_THROWS_WITH(cuda::launch_cluster(nothing, 3, 32, dim3(2, 1, 1), 0, stream()),
                    Contains("grid (3,1,1) is not a whole number of clusters (2,1,1)"));
  CHECK_THROWS_WITH(cuda::launch_cluster(nothing, 16, 32, dim3(16, 1, 1), 0, stream()),
                    Contains("at most 8 blocks in all"));
  CHECK(fault_of([] { cuda::launch_cluster(nothing, dim3(4, 2, 2), 32, dim3(2, 2, 2), 0, stream()); }).empty());
}
