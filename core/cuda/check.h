// EMBER_CUDA_CHECK around every CUDA runtime call, EMBER_CUDA_CHECK_LAUNCH() after every kernel
// launch. A failure throws ember::CudaError naming the call, file, line and CUDA's own message.
// Only for CUDA translation units (.cu, and the CUDA runtime .cpp files).
#pragma once

#include <cuda_runtime_api.h>

#include "core/error.h"

namespace ember::cuda::detail {
[[noreturn]] void throw_cuda_error(cudaError_t err, const char* expr, const char* file, int line);
}  // namespace ember::cuda::detail

#define EMBER_CUDA_CHECK(expr)                                                        \
  do {                                                                                \
    cudaError_t ember_err_ = (expr);                                                  \
    if (ember_err_ != cudaSuccess) [[unlikely]]                                       \
      ::ember::cuda::detail::throw_cuda_error(ember_err_, #expr, __FILE__, __LINE__); \
  } while (0)

#define EMBER_CUDA_CHECK_LAUNCH() EMBER_CUDA_CHECK(cudaGetLastError())
