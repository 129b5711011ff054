// Force-included (-include) before every .cu file of the simulator build (-DEMBER_CUDA_SIM=ON),
// which the host compiler compiles as C++: the toolkit's host headers for the CUDA types
// (dim3, float4, cudaStream_t, __half, ...), then CUDA C++'s keywords and device built-ins
// (sim/device_api.h) for the host compiler.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "sim/device_api.h"

// The built-in variables of the running simulated thread.
#define threadIdx (::ember::sim::thread_idx())
#define blockIdx (::ember::sim::block_idx())
#define blockDim (::ember::sim::block_dim())
#define gridDim (::ember::sim::grid_dim())
#define warpSize 32

// Execution-space keywords mean nothing on the host: every function runs there.
#undef __global__
#undef __device__
#undef __host__
#define __global__
#define __device__
#define __host__
#undef __launch_bounds__
#define __launch_bounds__(...)
// Shared memory must be declared through core/cuda/kernel.cuh, so that it is placed in the
// block's shared memory and bounds-checked; a plain declaration is a compile error here.
#undef __shared__
#define __shared__ \
  static_assert(false, "declare shared memory with EMBER_SHARED / EMBER_DYNAMIC_SHARED (core/cuda/kernel.cuh)");
#undef __constant__
#define __constant__ static_assert(false, "__constant__ memory is not simulated; pass the values as kernel arguments");
