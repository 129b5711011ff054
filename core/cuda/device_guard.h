// Scoped CUDA thread state for the runtime layer (core/cuda/*.cpp), the kernels (kernels/**/*.cu
// launch under a DeviceGuard for their tensors' device) and dist/nccl_backend.cpp: the current
// device, and the relaxed capture mode. Internal: not part of the documented user API.
#pragma once

#include <cuda_runtime_api.h>

#include "core/cuda/check.h"

namespace ember::cuda {

// Makes `device` current in this scope and restores the previous device on exit. Several GPUs in
// one process: events must be created and recorded, and memory freed, on their own device.
// kNoThrow is for frees and destructors: a failure to switch then shows in the CUDA call that
// follows instead of an exception.
class DeviceGuard {
 public:
  enum Mode { kThrow, kNoThrow };
  explicit DeviceGuard(int device, Mode mode = kThrow) {
    if (mode == kNoThrow) {
      if (cudaGetDevice(&prev_) != cudaSuccess || prev_ == device || cudaSetDevice(device) != cudaSuccess) {
        cudaGetLastError();
        prev_ = -1;
      }
      return;
    }
    EMBER_CUDA_CHECK(cudaGetDevice(&prev_));
    if (prev_ != device) EMBER_CUDA_CHECK(cudaSetDevice(device));
    else prev_ = -1;
  }
  ~DeviceGuard() {
    // a failure to switch back is not thrown from a destructor; it is cleared from the last error,
    // or the next launch check would report it as its own (Note [no abort] in core/error.h)
    if (prev_ >= 0 && cudaSetDevice(prev_) != cudaSuccess) cudaGetLastError();
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int prev_ = -1;
};

// Runs what is not stream work (cudaMalloc, event creation) in relaxed capture mode, so it stays
// legal on a thread that is capturing a graph in global mode.
class RelaxedCapture {
 public:
  RelaxedCapture() { cudaThreadExchangeStreamCaptureMode(&mode_); }
  ~RelaxedCapture() { cudaThreadExchangeStreamCaptureMode(&mode_); }
  RelaxedCapture(const RelaxedCapture&) = delete;
  RelaxedCapture& operator=(const RelaxedCapture&) = delete;

 private:
  cudaStreamCaptureMode mode_ = cudaStreamCaptureModeRelaxed;
};

}  // namespace ember::cuda
