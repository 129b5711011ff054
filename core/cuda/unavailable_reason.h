// Why a CUDA build finds no usable GPU, in words a user can act on: the CPU fallback note.
//
// A pure function of what the runtime said, so the CPU suite can test every case
// (tests/test_data_messages.cpp). The CUDA runtime answers cudaGetDeviceCount with
// cudaErrorInsufficientDriver ("CUDA driver version is insufficient for CUDA runtime version")
// both when the driver is too old and when there is no driver at all; only the presence of
// libcuda.so.1 (dlopen) tells the two apart.
#pragma once

#include <string>

namespace ember::cuda {

// cudaError_t values used below (the same numbers as in driver_types.h; kept here so a build
// without CUDA can test the mapping).
inline constexpr int kCudaSuccess = 0;
inline constexpr int kCudaErrorInitializationError = 3;
inline constexpr int kCudaErrorStubLibrary = 34;
inline constexpr int kCudaErrorInsufficientDriver = 35;
inline constexpr int kCudaErrorNoDevice = 100;

// err: what cudaGetDeviceCount returned; count: the devices it reported; driver_present: whether
// libcuda.so.1 could be loaded; message: the runtime's text for err (shown for unexpected errors).
// Returns "" when there is a device.
inline std::string describe_no_cuda(int err, int count, bool driver_present, const std::string& message) {
  if (err == kCudaSuccess) return count > 0 ? std::string() : "no CUDA device";
  if (err == kCudaErrorNoDevice) return "no CUDA device";
  if (err == kCudaErrorInsufficientDriver || err == kCudaErrorStubLibrary) {
    if (!driver_present) return "no NVIDIA driver found (libcuda.so.1 is not installed)";
    if (err == kCudaErrorStubLibrary)
      return "no NVIDIA driver found (only the CUDA stub library libcuda.so is installed)";
    return "the NVIDIA driver is too old for this build's CUDA runtime (" + message + "); update the driver";
  }
  if (!driver_present) return "no NVIDIA driver found (libcuda.so.1 is not installed)";
  return "no usable CUDA device (" + message + ")";
}

}  // namespace ember::cuda
