// How the emulated libraries' kernels (the .cu files here) are queued: sim::launch_kernel, with a
// refused launch thrown, so that each library call can turn it into its own status
// (CUBLAS_STATUS_EXECUTION_FAILED, CUDNN_STATUS_EXECUTION_FAILED) with the reason.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

#include "sim/device_api.h"

namespace ember::sim::libs {

template <class Kernel, class... Args>
void enqueue(Kernel kernel, dim3 grid, dim3 block, size_t dynamic_smem, cudaStream_t stream, Args&&... args) {
  const cudaError_t e = launch_kernel(kernel, grid, block, dynamic_smem, stream, std::forward<Args>(args)...);
  if (e != cudaSuccess) throw std::runtime_error(std::string(cudaGetErrorName(e)) + " (" + cudaGetErrorString(e) + ")");
}

}  // namespace ember::sim::libs
