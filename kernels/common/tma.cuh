// TMA tensor copies (sm_90): cp.async.bulk.tensor from global to shared memory in tile mode, the box
// a tensor map describes (core/cuda/tensor_map.h makes one on the host) at the given coordinates,
// completing its bytes as transactions on an mbarrier (kernels/common/mbarrier.cuh, Note [mbarrier
// phases]). The map is a kernel parameter (`const __grid_constant__ CUtensorMap map`); pass its
// address. The box lands densely, dimension 0 fastest, swizzled as the map says; elements outside
// the tensor arrive as zeros (Note [simulated tensor maps] in sim/tma.cpp spells out the layout the
// simulator implements; tests/test_tma_gpu.cu checks it position by position, on a GPU too).
// Coordinates are element indices, dimension 0 first, and may be negative.
//
// Stores go the other way: tma_store_2d writes the box at `smem_src` (laid out as a load would
// leave it) to the tensor, skipping elements outside it. The async proxy reads the box: every
// thread that wrote part of it runs fence_proxy_async_shared() after its writes, then the block
// synchronises, then one thread stores, bulk_commit_group(), and bulk_wait_group_read<0>() before
// the box may be overwritten (bulk_wait_group<0>() before the global result is needed).
#pragma once

#include <cuda.h>

#include <cstdint>

#include "kernels/common/mbarrier.cuh"

namespace ember::ptx {

#if EMBER_CUDA_SIM

__device__ inline void tma_load_2d(void* smem_dst, const CUtensorMap* map, int32_t c0, int32_t c1, uint64_t* bar,
                                   MbarLocation loc = MbarLocation::current()) {
  const int32_t c[2] = {c0, c1};
  ::ember::sim::tma_load(smem_dst, map, c, 2, bar, loc);
}
__device__ inline void tma_load_3d(void* smem_dst, const CUtensorMap* map, int32_t c0, int32_t c1, int32_t c2,
                                   uint64_t* bar, MbarLocation loc = MbarLocation::current()) {
  const int32_t c[3] = {c0, c1, c2};
  ::ember::sim::tma_load(smem_dst, map, c, 3, bar, loc);
}
__device__ inline void tma_store_2d(const CUtensorMap* map, int32_t c0, int32_t c1, const void* smem_src,
                                    MbarLocation loc = MbarLocation::current()) {
  const int32_t c[2] = {c0, c1};
  ::ember::sim::tma_store(map, c, 2, smem_src, loc);
}
__device__ inline void bulk_commit_group() { ::ember::sim::bulk_commit_group(); }
// The simulator performs a store entirely when its group is waited for: both waits are the same.
template <int N>
__device__ inline void bulk_wait_group() {
  ::ember::sim::bulk_wait_group(N);
}
template <int N>
__device__ inline void bulk_wait_group_read() {
  ::ember::sim::bulk_wait_group(N);
}

#else

__device__ __forceinline__ void tma_load_2d(void* smem_dst, const CUtensorMap* map, int32_t c0, int32_t c1,
                                            uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], "
      "[%2];\n" ::"r"(mbar_address(smem_dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(mbar_address(bar)), "r"(c0), "r"(c1)
      : "memory");
}
__device__ __forceinline__ void tma_load_3d(void* smem_dst, const CUtensorMap* map, int32_t c0, int32_t c1, int32_t c2,
                                            uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], "
      "[%2];\n" ::"r"(mbar_address(smem_dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(mbar_address(bar)), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}
__device__ __forceinline__ void tma_store_2d(const CUtensorMap* map, int32_t c0, int32_t c1, const void* smem_src) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];\n" ::"l"(
                   reinterpret_cast<uint64_t>(map)),
               "r"(mbar_address(smem_src)), "r"(c0), "r"(c1)
               : "memory");
}
// Closes the group of bulk stores this thread issued since the last commit.
__device__ __forceinline__ void bulk_commit_group() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// Waits until at most N of this thread's committed groups are still in flight (their writes done).
template <int N>
__device__ __forceinline__ void bulk_wait_group() {
  asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
}
// ... until at most N still read their shared-memory source (it may then be overwritten).
template <int N>
__device__ __forceinline__ void bulk_wait_group_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}

#endif

}  // namespace ember::ptx
