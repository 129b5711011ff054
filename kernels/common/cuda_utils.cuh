// Small helpers every .cu file uses: the stream to launch on, a device guard, grid sizing; and, through
// core/cuda/kernel.cuh, cuda::launch and the EMBER_SHARED macros every kernel is written with.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "core/cuda/check.h"
#include "core/cuda/kernel.cuh"
#include "core/cuda/runtime.h"
#include "core/tensor.h"

namespace ember::cuda {

// The current stream of the tensor's device, as a cudaStream_t.
inline cudaStream_t stream_for(const Tensor& t) {
  return static_cast<cudaStream_t>(current_stream(t.device().index).handle());
}
inline cudaStream_t stream_for(Device d) { return static_cast<cudaStream_t>(current_stream(d.index).handle()); }

// Makes `d` the current CUDA device in this scope (kernels launch on the current device).
class DeviceScope {
 public:
  explicit DeviceScope(Device d) {
    cudaGetDevice(&prev_);
    if (prev_ != d.index) {
      EMBER_CUDA_CHECK(cudaSetDevice(d.index));
      restore_ = true;
    }
  }
  ~DeviceScope() {
    if (restore_) cudaSetDevice(prev_);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int prev_ = 0;
  bool restore_ = false;
};

// Number of SMs of device d (cached).
int sm_count(int device);

// Blocks for a grid-stride loop over `work_items` with `threads` per block: enough blocks to fill
// the device several times over, never more than there is work for.
inline unsigned grid_for(int64_t work_items, int threads, int device) {
  int64_t need = (work_items + threads - 1) / threads;
  int64_t cap = static_cast<int64_t>(sm_count(device)) * 16;
  return static_cast<unsigned>(std::max<int64_t>(1, std::min(need, cap)));
}

}  // namespace ember::cuda
