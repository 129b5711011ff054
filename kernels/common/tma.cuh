// TMA tensor copies (sm_90): cp.async.bulk.tensor from global to shared memory in tile mode, the box
// a tensor map describes (core/cuda/tensor_map.h makes one on the host) at the given coordinates,
// completing its bytes as transactions on an mbarrier (kernels/common/mbarrier.cuh, Note [mbarrier
// phases]). The map is a kernel parameter (`const __grid_constant__ CUtensorMap map`); pass its
// address. The box lands densely, dimension 0 fastest, swizzled as the map says; elements outside
// the tensor arrive as zeros (Note [simulated tensor maps] in sim/tma.cpp spells out the layout the
// simulator implements; tests/test_tma_gpu.cu checks it position by position, on a GPU too).
// Coordinates are element indices, dimension 0 first, and may be negative.
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

#endif

}  // namespace ember::ptx
