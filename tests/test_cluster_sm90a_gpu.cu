// Thread-block clusters (kernels/common/cluster.cuh) against the PTX ISA and the CUDA programming
// guide: blocks ranked x fastest within their cluster (%cluster_ctarank, %cluster_ctaid,
// %clusterid), distributed shared memory (loads and atomics through mapa between cluster barriers),
// an arrival on another block's mbarrier completing its phase, and a TMA load multicast to every
// block of the cluster (each block's box landing at the same offset, completing on each block's
// barrier). The expected values are computed here, so the same test checks the simulator
// (sim/cluster.cpp) and, on a GPU, the hardware. Misuse (races across blocks, a block gone while
// others use its shared memory) is in tests/sim/test_sim_clusters.cu.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <vector>

#include "core/cuda/kernel.cuh"
#include "core/cuda/tensor_map.h"
#include "core/tensor.h"
#include "kernels/common/cluster.cuh"
#include "kernels/common/current_stream.cuh"
#include "kernels/common/tma.cuh"
#include "kernels/functional.h"

using namespace ember;

namespace {

constexpr int kIds = 11;  // words recorded per block by cluster_ids_kernel

// Thread 0 of every block records what the cluster's special registers say.
__global__ void cluster_ids_kernel(uint32_t* out) {
  if (threadIdx.x != 0) return;
  const uint32_t b = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  uint32_t* o = out + static_cast<size_t>(b) * kIds;
  const uint3 c = ptx::cluster_ctaid(), id = ptx::cluster_id();
  const dim3 n = ptx::cluster_nctaid();
  const uint32_t w[kIds] = {
      ptx::cluster_ctarank(), ptx::cluster_nctarank(), c.x, c.y, c.z, id.x, id.y, id.z, n.x, n.y, n.z};
  for (int i = 0; i < kIds; ++i) o[i] = w[i];
}

constexpr int kThreads = 64;

// Each block fills `mine` with rank * 1000 + i; after the cluster barrier every thread reads its
// neighbour's (rank + 1) entry i + 1 through distributed shared memory and adds 1 to the counter of
// rank 0; after the second barrier thread 0 of rank 0 reads the counter.
__global__ void exchange_kernel(uint32_t* out, uint32_t* count) {
  EMBER_SHARED(uint32_t[kThreads], mine);
  EMBER_SHARED(uint32_t, counter);
  const unsigned rank = ptx::cluster_ctarank(), n = ptx::cluster_nctarank();
  const unsigned i = threadIdx.x;
  mine[i] = rank * 1000 + i;
  if (i == 0) counter = 0;
  ptx::cluster_sync();
  const uint32_t* theirs = ptx::map_shared_rank(&mine[0], (rank + 1) % n);
  const uint32_t got = theirs[(i + 1) % kThreads];
  atomicAdd(ptx::map_shared_rank(&counter, 0u), 1u);
  ptx::cluster_sync();  // (also: no block exits while another still reads its shared memory)
  const uint32_t b = blockIdx.x;
  out[b * kThreads + i] = got;
  if (rank == 0 && i == 0) count[b / n] = counter;
}

// Block 0 waits on its barrier (count: the other blocks' threads); every thread of the other blocks
// arrives on it from afar. Block 0 records that the phase completed.
__global__ void remote_arrive_kernel(uint32_t* out) {
  EMBER_SHARED(uint64_t, bar);
  const unsigned rank = ptx::cluster_ctarank(), n = ptx::cluster_nctarank();
  if (rank == 0 && threadIdx.x == 0) {
    ptx::mbarrier_init(&bar, (n - 1) * blockDim.x);
    ptx::fence_mbarrier_init();
  }
  ptx::cluster_sync();  // the barrier is initialised before anyone arrives
  if (rank != 0) {
    ptx::mbarrier_arrive_cluster(&bar, 0);
  } else {
    ptx::mbarrier_wait_parity(&bar, 0);
    if (threadIdx.x == 0) out[0] = ptx::mbarrier_try_wait_parity(&bar, 0) ? 1u : 0u;  // phase 0 is over
  }
  ptx::cluster_sync();  // block 0 outlives the arrivals on its barrier
}

constexpr int kBoxRows = 4, kCols = 32;  // 16-bit elements: 64-byte rows
struct alignas(128) Tile {
  uint16_t v[8 * kBoxRows][kCols];
};

// Block r of a cluster of n brings rows [r * kBoxRows, (r + 1) * kBoxRows) of its cluster's slab
// into slice r of `tile` in every block (one multicast), so each block ends up with the whole slab
// and copies it out.
__global__ void multicast_kernel(const __grid_constant__ CUtensorMap map, uint16_t* out) {
  EMBER_SHARED(Tile, tile);
  EMBER_SHARED(uint64_t, bar);
  const unsigned rank = ptx::cluster_ctarank(), n = ptx::cluster_nctarank();
  const uint32_t slab_row = ptx::cluster_id().x * n * kBoxRows;
  if (threadIdx.x == 0) {
    ptx::mbarrier_init(&bar, 1);
    ptx::fence_mbarrier_init();
  }
  ptx::cluster_sync();  // every block's barrier is initialised before any copy completes on it
  if (threadIdx.x == 0) {
    ptx::mbarrier_arrive_expect_tx(&bar, n * kBoxRows * kCols * 2);
    ptx::tma_load_2d_multicast(&tile.v[rank * kBoxRows][0], &map, 0, static_cast<int32_t>(slab_row + rank * kBoxRows),
                               &bar, static_cast<uint16_t>((1u << n) - 1));
  }
  ptx::mbarrier_wait_parity(&bar, 0);
  const uint32_t b = blockIdx.x;
  for (uint32_t i = threadIdx.x; i < n * kBoxRows * kCols; i += blockDim.x)
    out[static_cast<size_t>(b) * n * kBoxRows * kCols + i] = tile.v[i / kCols][i % kCols];
  ptx::cluster_sync();
}

template <class T>
std::vector<T> host_of(const Tensor& t) {
  Tensor c = t.to(kCPU);
  std::vector<T> v(static_cast<size_t>(c.numel()));
  std::memcpy(v.data(), c.data_ptr(), v.size() * sizeof(T));
  return v;
}

Device cuda0() { return Device(DeviceType::cuda, 0); }

}  // namespace

TEST_CASE("cluster: blocks are ranked x fastest within their cluster", "[gpu][ptx][cluster]") {
  struct Case {
    dim3 grid, cluster;
  };
  for (const Case& k : {Case{dim3(4, 2, 2), dim3(2, 2, 1)}, Case{dim3(6, 1, 2), dim3(3, 1, 2)},
                        Case{dim3(8, 1, 1), dim3(8, 1, 1)}, Case{dim3(3, 2, 1), dim3(1, 1, 1)}}) {
    INFO("grid (" << k.grid.x << "," << k.grid.y << "," << k.grid.z << "), cluster (" << k.cluster.x << ","
                  << k.cluster.y << "," << k.cluster.z << ")");
    const int64_t blocks = int64_t{k.grid.x} * k.grid.y * k.grid.z;
    Tensor out = zeros({blocks * kIds}, TensorOptions(DType::i32).device(cuda0()));
    cuda::launch_cluster(cluster_ids_kernel, k.grid, 32, k.cluster, 0, cuda::stream_for(out),
                         static_cast<uint32_t*>(out.data_ptr()));
    const std::vector<uint32_t> got = host_of<uint32_t>(out);
    int wrong = 0;
    for (unsigned z = 0; z < k.grid.z; ++z)
      for (unsigned y = 0; y < k.grid.y; ++y)
        for (unsigned x = 0; x < k.grid.x; ++x) {
          const dim3 c = k.cluster;
          const uint32_t cx = x % c.x, cy = y % c.y, cz = z % c.z;
          const uint32_t want[kIds] = {
              cx + c.x * (cy + c.y * cz), c.x * c.y * c.z, cx, cy, cz, x / c.x, y / c.y, z / c.z, c.x, c.y, c.z};
          const size_t b = x + k.grid.x * (y + k.grid.y * static_cast<size_t>(z));
          for (int i = 0; i < kIds; ++i)
            if (got[b * kIds + i] != want[i] && ++wrong <= 5)
              FAIL_CHECK("block (" << x << "," << y << "," << z << ") word " << i << ": got " << got[b * kIds + i]
                                   << ", want " << want[i]);
        }
    CHECK(wrong == 0);
  }
}

TEST_CASE("cluster: a launch without clusters runs clusters of one block", "[gpu][ptx][cluster]") {
  Tensor out = zeros({3 * kIds}, TensorOptions(DType::i32).device(cuda0()));
  cuda::launch(cluster_ids_kernel, 3, 32, 0, cuda::stream_for(out), static_cast<uint32_t*>(out.data_ptr()));
  const std::vector<uint32_t> got = host_of<uint32_t>(out);
  for (uint32_t b = 0; b < 3; ++b) {
    INFO("block " << b);
    const uint32_t want[kIds] = {0, 1, 0, 0, 0, b, 0, 0, 1, 1, 1};
    for (int i = 0; i < kIds; ++i) CHECK(got[b * kIds + static_cast<uint32_t>(i)] == want[i]);
  }
}

TEST_CASE("cluster: blocks read and update each other's shared memory between cluster barriers",
          "[gpu][ptx][cluster]") {
  for (unsigned n : {2u, 4u}) {
    INFO("clusters of " << n);
    const unsigned grid = 2 * n;
    Tensor out = zeros({static_cast<int64_t>(grid) * kThreads}, TensorOptions(DType::i32).device(cuda0()));
    Tensor count = zeros({2}, TensorOptions(DType::i32).device(cuda0()));
    cuda::launch_cluster(exchange_kernel, grid, kThreads, dim3(n, 1, 1), 0, cuda::stream_for(out),
                         static_cast<uint32_t*>(out.data_ptr()), static_cast<uint32_t*>(count.data_ptr()));
    const std::vector<uint32_t> got = host_of<uint32_t>(out);
    int wrong = 0;
    for (unsigned b = 0; b < grid; ++b)
      for (unsigned i = 0; i < kThreads; ++i) {
        const uint32_t want = ((b % n + 1) % n) * 1000 + (i + 1) % kThreads;
        if (got[b * kThreads + i] != want && ++wrong <= 5)
          FAIL_CHECK("block " << b << " thread " << i << ": got " << got[b * kThreads + i] << ", want " << want);
      }
    CHECK(wrong == 0);
    const std::vector<uint32_t> c = host_of<uint32_t>(count);
    CHECK(c[0] == n * kThreads);
    CHECK(c[1] == n * kThreads);
  }
}

TEST_CASE("cluster: arrivals from other blocks complete an mbarrier's phase", "[gpu][ptx][cluster][mbarrier]") {
  for (unsigned n : {2u, 4u}) {
    INFO("clusters of " << n);
    Tensor out = zeros({1}, TensorOptions(DType::i32).device(cuda0()));
    cuda::launch_cluster(remote_arrive_kernel, n, 64, dim3(n, 1, 1), 0, cuda::stream_for(out),
                         static_cast<uint32_t*>(out.data_ptr()));
    const std::vector<uint32_t> got = host_of<uint32_t>(out);
    CHECK(got[0] == 1);
  }
}

TEST_CASE("cluster: a multicast tensor copy lands in every block it names", "[gpu][ptx][cluster][tma]") {
  for (unsigned n : {2u, 4u}) {
    INFO("clusters of " << n);
    const unsigned clusters = 2, rows = clusters * n * kBoxRows;
    std::vector<uint16_t> host(static_cast<size_t>(rows) * kCols);
    for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<uint16_t>(i * 7 + 3);
    Tensor m = from_blob(host.data(), {static_cast<int64_t>(host.size())}, DType::f16).to(cuda0());
    cuda::TensorMapSpec spec;
    spec.dtype = DType::f16;  // 16-bit elements; only their bits matter
    spec.base = m.data_ptr();
    spec.dims = {kCols, rows};
    spec.strides_bytes = {kCols * 2};
    spec.box = {kCols, kBoxRows};
    const CUtensorMap map = cuda::make_tensor_map(spec);
    const int64_t per_block = static_cast<int64_t>(n) * kBoxRows * kCols;
    Tensor out = zeros({clusters * n * per_block}, TensorOptions(DType::f16).device(cuda0()));
    cuda::launch_cluster(multicast_kernel, clusters * n, 64, dim3(n, 1, 1), 0, cuda::stream_for(out), map,
                         static_cast<uint16_t*>(out.data_ptr()));
    const std::vector<uint16_t> got = host_of<uint16_t>(out);
    int wrong = 0;
    for (unsigned b = 0; b < clusters * n; ++b)
      for (int64_t i = 0; i < per_block; ++i) {
        const uint16_t want = host[static_cast<size_t>((b / n) * per_block + i)];  // the block's cluster's slab
        if (got[static_cast<size_t>(b * per_block + i)] != want && ++wrong <= 5)
          FAIL_CHECK("block " << b << " element " << i << ": got " << got[static_cast<size_t>(b * per_block + i)]
                              << ", want " << want);
      }
    CHECK(wrong == 0);
  }
}
