// cuDNN plumbing shared by the vendor variants (conv2d_cudnn.cu, softmax.cu): the status check,
// one handle per (thread, device) bound to the launch stream, dtype mapping, an RAII tensor
// descriptor. Only included from sources compiled with EMBER_WITH_CUDNN.
#pragma once

#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstdint>
#include <string>

#include "core/dtype.h"
#include "core/error.h"

// The failure names the call, the status and cuDNN's own reason (cudnnGetLastErrorString), which
// says which argument it refused.
#define EMBER_CUDNN_CHECK(expr)                                                                                    \
  do {                                                                                                             \
    cudnnStatus_t ember_st_ = (expr);                                                                              \
    if (ember_st_ != CUDNN_STATUS_SUCCESS) [[unlikely]]                                                            \
      EMBER_FAIL("cuDNN call ", #expr, " failed: ", cudnnGetErrorString(ember_st_), ::ember::cudnn::last_error()); \
  } while (0)

namespace ember::cudnn {

// cuDNN's message for the calling thread's last failed call, as " (message)", or "" if it has none.
std::string last_error();

// The calling thread's handle for `device` (the current device), bound to `stream`. Handles are
// created once per (thread, device) and returned to a pool when the thread ends.
cudnnHandle_t handle_for(int device, cudaStream_t stream);

// f32, f64, f16, bf16; anything else is an error naming `what`.
cudnnDataType_t data_type(DType t, const char* what);

struct TensorDesc {
  cudnnTensorDescriptor_t d = nullptr;
  TensorDesc() { EMBER_CUDNN_CHECK(cudnnCreateTensorDescriptor(&d)); }
  ~TensorDesc() { cudnnDestroyTensorDescriptor(d); }
  TensorDesc(const TensorDesc&) = delete;
  TensorDesc& operator=(const TensorDesc&) = delete;
  // A logical [N, C, H, W] tensor with the given element strides.
  void set(DType t, const int64_t (&size)[4], const int64_t (&stride)[4], const char* what = "cuDNN") {
    EMBER_CUDNN_CHECK(cudnnSetTensor4dDescriptorEx(
        d, data_type(t, what), static_cast<int>(size[0]), static_cast<int>(size[1]), static_cast<int>(size[2]),
        static_cast<int>(size[3]), static_cast<int>(stride[0]), static_cast<int>(stride[1]),
        static_cast<int>(stride[2]), static_cast<int>(stride[3])));
  }
};

}  // namespace ember::cudnn
