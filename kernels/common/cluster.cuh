// Thread-block clusters (sm_90): a launch that groups blocks into clusters, the cluster's special
// registers, the cluster barrier, distributed shared memory (another block's shared memory through
// mapa), arrivals on another block's mbarriers, and TMA loads multicast to several blocks. As
// wrappers with no inline `asm` elsewhere, so the simulator runs them with the semantics the PTX
// ISA documents (sim/cluster.cpp, Note [simulated clusters]; tests/test_cluster_sm90a_gpu.cu checks them
// on both).
//
//   cuda::launch_cluster(kernel, grid, block, cluster, smem_bytes, stream, args...)
//       launch() with cudaLaunchAttributeClusterDimension: the grid is a whole number of clusters
//       in every dimension, at most 8 blocks per cluster. Blocks are ranked x fastest within their
//       cluster (cluster_ctarank()).
//   cluster_arrive(); cluster_wait();  (cluster_sync(): both) every thread of every block of the
//       cluster arrives before any waiting thread goes on; it orders shared-memory accesses across
//       the blocks (release / acquire). A block must not exit while another may still use its shared
//       memory: kernels that use distributed shared memory end with cluster_sync().
//   map_shared_rank(p, r)  the address of the shared variable `p` points to in the block of rank r;
//       ordinary loads, stores and atomics through it reach that block's shared memory.
//   mbarrier_arrive_cluster(bar, r)  one arrival on the mbarrier at `bar`'s offset in block r.
//   tma_load_2d_multicast(dst, map, c0, c1, bar, mask)  tma_load_2d's box, landing at `dst`'s
//       offset in every block named in the 16-bit mask, each completing the box's bytes on the
//       mbarrier at `bar`'s offset in that block. Every destination barrier must be initialised
//       before the copy is issued: initialise, fence_mbarrier_init(), cluster_sync(), then copy.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <utility>

#include "core/cuda/kernel.cuh"
#include "kernels/common/mbarrier.cuh"

#if EMBER_CUDA_SIM
#include "sim/cluster_api.h"
#endif

namespace ember::cuda {

template <class... Params, class... Args>
inline void launch_cluster(void (*kernel)(Params...), dim3 grid, dim3 block, dim3 cluster, size_t smem_bytes,
                           cudaStream_t stream, Args&&... args) {
  static_assert(sizeof...(Params) == sizeof...(Args), "ember::cuda::launch_cluster: wrong number of kernel arguments");
#if EMBER_CUDA_SIM
  EMBER_CUDA_CHECK(::ember::sim::launch_kernel_cluster(kernel, grid, block, cluster, smem_bytes, stream,
                                                       std::forward<Args>(args)...));
#else
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = cluster.x;
  attr[0].val.clusterDim.y = cluster.y;
  attr[0].val.clusterDim.z = cluster.z;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem_bytes;
  config.stream = stream;
  config.attrs = attr;
  config.numAttrs = 1;
  EMBER_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
#endif
}

}  // namespace ember::cuda

namespace ember::ptx {

#if EMBER_CUDA_SIM

__device__ inline unsigned cluster_ctarank() { return ::ember::sim::cluster_ctarank(); }
__device__ inline unsigned cluster_nctarank() { return ::ember::sim::cluster_nctarank(); }
__device__ inline uint3 cluster_ctaid() { return ::ember::sim::cluster_ctaid(); }
__device__ inline dim3 cluster_nctaid() { return ::ember::sim::cluster_nctaid(); }
__device__ inline uint3 cluster_id() { return ::ember::sim::cluster_id(); }
__device__ inline void cluster_arrive(MbarLocation loc = MbarLocation::current()) {
  ::ember::sim::cluster_arrive(false, loc);
}
__device__ inline void cluster_arrive_relaxed(MbarLocation loc = MbarLocation::current()) {
  ::ember::sim::cluster_arrive(true, loc);
}
__device__ inline void cluster_wait(MbarLocation loc = MbarLocation::current()) { ::ember::sim::cluster_wait(loc); }
__device__ inline void cluster_sync(MbarLocation loc = MbarLocation::current()) {
  ::ember::sim::cluster_arrive(false, loc);
  ::ember::sim::cluster_wait(loc);
}
template <class T>
__device__ inline T* map_shared_rank(T* p, unsigned rank, MbarLocation loc = MbarLocation::current()) {
  return static_cast<T*>(::ember::sim::map_shared_rank(p, rank, loc));
}
__device__ inline void mbarrier_arrive_cluster(uint64_t* bar, unsigned rank,
                                               MbarLocation loc = MbarLocation::current()) {
  ::ember::sim::mbarrier_arrive_cluster(bar, rank, loc);
}
__device__ inline void tma_load_2d_multicast(void* smem_dst, const CUtensorMap* map, int32_t c0, int32_t c1,
                                             uint64_t* bar, uint16_t cta_mask,
                                             MbarLocation loc = MbarLocation::current()) {
  const int32_t c[2] = {c0, c1};
  ::ember::sim::tma_load_multicast(smem_dst, map, c, 2, bar, cta_mask, loc);
}

#else

__device__ __forceinline__ unsigned cluster_ctarank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}
__device__ __forceinline__ unsigned cluster_nctarank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_nctarank;\n" : "=r"(r));
  return r;
}
__device__ __forceinline__ uint3 cluster_ctaid() {
  uint3 r;
  asm volatile("mov.u32 %0, %%cluster_ctaid.x;\n" : "=r"(r.x));
  asm volatile("mov.u32 %0, %%cluster_ctaid.y;\n" : "=r"(r.y));
  asm volatile("mov.u32 %0, %%cluster_ctaid.z;\n" : "=r"(r.z));
  return r;
}
__device__ __forceinline__ dim3 cluster_nctaid() {
  unsigned x, y, z;
  asm volatile("mov.u32 %0, %%cluster_nctaid.x;\n" : "=r"(x));
  asm volatile("mov.u32 %0, %%cluster_nctaid.y;\n" : "=r"(y));
  asm volatile("mov.u32 %0, %%cluster_nctaid.z;\n" : "=r"(z));
  return dim3(x, y, z);
}
__device__ __forceinline__ uint3 cluster_id() {
  uint3 r;
  asm volatile("mov.u32 %0, %%clusterid.x;\n" : "=r"(r.x));
  asm volatile("mov.u32 %0, %%clusterid.y;\n" : "=r"(r.y));
  asm volatile("mov.u32 %0, %%clusterid.z;\n" : "=r"(r.z));
  return r;
}
// (not .aligned: a warp may reach the barrier diverged, as a warp-specialised kernel's producer
// warp does, one lane still issuing copies while the others wait)
__device__ __forceinline__ void cluster_arrive() { asm volatile("barrier.cluster.arrive.release;\n" ::: "memory"); }
__device__ __forceinline__ void cluster_arrive_relaxed() {
  asm volatile("barrier.cluster.arrive.relaxed;\n" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire;\n" ::: "memory"); }
__device__ __forceinline__ void cluster_sync() {
  cluster_arrive();
  cluster_wait();
}
template <class T>
__device__ __forceinline__ T* map_shared_rank(T* p, unsigned rank) {
  uint64_t out;
  asm volatile("mapa.u64 %0, %1, %2;\n" : "=l"(out) : "l"(reinterpret_cast<uint64_t>(p)), "r"(rank));
  return reinterpret_cast<T*>(out);
}
__device__ __forceinline__ void mbarrier_arrive_cluster(uint64_t* bar, unsigned rank) {
  asm volatile(
      "{\n"
      "  .reg .b32 remote;\n"
      "  mapa.shared::cluster.u32 remote, %0, %1;\n"
      "  mbarrier.arrive.release.cluster.shared::cluster.b64 _, [remote];\n"
      "}\n" ::"r"(mbar_address(bar)),
      "r"(rank)
      : "memory");
}
__device__ __forceinline__ void tma_load_2d_multicast(void* smem_dst, const CUtensorMap* map, int32_t c0, int32_t c1,
                                                      uint64_t* bar, uint16_t cta_mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster [%0], "
      "[%1, {%3, %4}], [%2], %5;\n" ::"r"(mbar_address(smem_dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(mbar_address(bar)), "r"(c0), "r"(c1), "h"(cta_mask)
      : "memory");
}

#endif

}  // namespace ember::ptx
