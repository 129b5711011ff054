// What every CUDA source writes kernels and launches them with. The same source builds two ways:
// nvcc for a GPU, or the host compiler for the SIMT simulator (-DEMBER_CUDA_SIM=ON, sim/),
// which runs the very same kernel code on the CPU with racecheck, bounds and launch-limit checks.
//
//   ember::cuda::launch(kernel, grid, block, smem_bytes, stream, args...)
//       The one way to launch a kernel: `<<<grid, block, smem_bytes, stream>>>` plus the launch-error
//       check under nvcc; in the simulator the grid is queued on the stream. No `<<<` anywhere else.
//       (A grid of thread-block clusters: cuda::launch_cluster, kernels/common/cluster.cuh.)
//   EMBER_SHARED(type, name);          a static __shared__ variable or array, e.g.
//                                      EMBER_SHARED(float[32][33], tile);  EMBER_SHARED(Stats, s);
//                                      (16-byte aligned; the simulator bounds-checks each one)
//   EMBER_DYNAMIC_SHARED(type, name);  the launch's dynamic shared memory as `type name[]`
//                                      (128-byte aligned), sized by launch()'s smem_bytes
//   EMBER_DEVICE_ARCH                  __CUDA_ARCH__ in device code, 900 (sm_90) in the simulator,
//                                      0 in host code: `#if EMBER_DEVICE_ARCH >= 800`
//   EMBER_UNROLL, EMBER_UNROLL_N(n)    `#pragma unroll` [n] under nvcc; GCC's unroll pragma in the
//                                      simulator, which the host compiler would otherwise ignore: a
//                                      loop left rolled keeps its register arrays (accumulator
//                                      tiles) in memory, where every access is checked (~3x slower)
//
// Inline PTX lives in one place, kernels/common/ptx.cuh (tensor cores, ldmatrix, cp.async), so the
// simulator can give each instruction its documented semantics.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <tuple>
#include <type_traits>
#include <utility>

#include "core/cuda/check.h"

#if EMBER_CUDA_SIM
#include "sim/device_api.h"
#endif

namespace ember::cuda {

// Launches kernel<<<grid, block, smem_bytes, stream>>>(args...) and checks the launch. Arguments
// are converted to the kernel's parameter types here, as a `<<<>>>` launch would.
template <class... Params, class... Args>
inline void launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem_bytes, cudaStream_t stream,
                   Args&&... args) {
  static_assert(sizeof...(Params) == sizeof...(Args), "ember::cuda::launch: wrong number of kernel arguments");
#if EMBER_CUDA_SIM
  // the simulator's launch_kernel is the `<<<>>>` below, and returns cudaGetLastError()
  EMBER_CUDA_CHECK(::ember::sim::launch_kernel(kernel, grid, block, smem_bytes, stream, std::forward<Args>(args)...));
#else
  // clang-format 14 would split this launch's `>>>`
  // clang-format off
  kernel<<<grid, block, smem_bytes, stream>>>(std::forward<Args>(args)...);
  // clang-format on
  EMBER_CUDA_CHECK_LAUNCH();
#endif
}

}  // namespace ember::cuda

#define EMBER_PRAGMA(x) _Pragma(#x)
#if EMBER_CUDA_SIM
#define EMBER_UNROLL EMBER_PRAGMA(GCC unroll 32)
#define EMBER_UNROLL_N(n) EMBER_PRAGMA(GCC unroll n)
#else
#define EMBER_UNROLL EMBER_PRAGMA(unroll)
#define EMBER_UNROLL_N(n) EMBER_PRAGMA(unroll n)
#endif

#if EMBER_CUDA_SIM
#define EMBER_DEVICE_ARCH 900
#define EMBER_SHARED(type, name) EMBER_SIM_SHARED(type, name)
#define EMBER_DYNAMIC_SHARED(type, name) EMBER_SIM_DYNAMIC_SHARED(type, name)
#else
#if defined(__CUDA_ARCH__)
#define EMBER_DEVICE_ARCH __CUDA_ARCH__
#else
#define EMBER_DEVICE_ARCH 0
#endif
#define EMBER_SHARED(type, name) __shared__ __align__(16) std::type_identity_t<type> name
#define EMBER_DYNAMIC_SHARED(type, name) extern __shared__ __align__(128) type name[]
#endif
