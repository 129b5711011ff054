#include "kernels/common/grid_size.cuh"

#include <cuda_runtime.h>

#include <array>
#include <mutex>

#include "core/cuda/check.h"
#include "core/cuda/runtime.h"
#include "core/error.h"

namespace ember::cuda {

int sm_count(int device) {
  static std::array<int, 16> counts{};
  static std::array<std::once_flag, 16> once;
  EMBER_CHECK(device >= 0 && device < 16, "sm_count: bad device ", device);
  std::call_once(once[device], [&] {
    int n = 0;
    EMBER_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device));
    counts[device] = n;
  });
  return counts[device];
}

int compute_capability(int device) {
  static std::array<int, 16> cc{};
  static std::array<std::once_flag, 16> once;
  EMBER_CHECK(device >= 0 && device < 16, "compute_capability: bad device ", device);
  std::call_once(once[device], [&] {
    const DeviceProperties p = properties(device);
    cc[device] = p.major * 10 + p.minor;
  });
  return cc[device];
}

}  // namespace ember::cuda
