// The simulator's cuDNN objects (handle and descriptors) as cudnn.cpp (handles, descriptors,
// convolutions) and cudnn_ops.cpp (pooling, softmax, batch norm) share them. Simulator build
// only; Note [simulated vendor libraries] in common.h.
#pragma once

#include <cudnn.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "sim/libs/common.h"

// The opaque types of cudnn.h, defined here (the header only declares them).
struct cudnnContext {
  uint64_t magic = 0;  // kHandleMagic while alive: a destroyed or garbage handle is refused
  int device = 0;      // the device current at cudnnCreate: calls must run with it current
  cudaStream_t stream = nullptr;
  void* scratch = nullptr;  // the device memory cudnnCreate allocates (as cuDNN does)
};
struct cudnnTensorStruct {
  uint64_t magic = 0;
  bool set = false;  // cudnnSetTensor*Descriptor* succeeded
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  int nb_dims = 4;
  int dims[8] = {};
  int strides[8] = {};
};
struct cudnnFilterStruct {
  uint64_t magic = 0;
  bool set = false;
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  cudnnTensorFormat_t format = CUDNN_TENSOR_NCHW;
  int k = 0, c = 0, r = 0, s = 0;  // output channels, input channels per group, height, width
};
struct cudnnConvolutionStruct {
  uint64_t magic = 0;
  bool set = false;
  int pad_h = 0, pad_w = 0, stride_h = 1, stride_w = 1, dil_h = 1, dil_w = 1;
  cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  int groups = 1;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
};
struct cudnnPoolingStruct {
  uint64_t magic = 0;
  bool set = false;
  cudnnPoolingMode_t mode = CUDNN_POOLING_MAX;
  cudnnNanPropagation_t nan = CUDNN_NOT_PROPAGATE_NAN;
  int win_h = 0, win_w = 0, pad_h = 0, pad_w = 0, stride_h = 0, stride_w = 0;
};

namespace ember::sim::libs::cudnn {

inline constexpr uint64_t kHandleMagic = 0x434e4e4448ull, kTensorMagic = 0x434e4e4454ull,
                          kFilterMagic = 0x434e4e4446ull, kConvMagic = 0x434e4e4443ull, kPoolMagic = 0x434e4e4450ull;

// Destroyed objects are kept for the next create instead of being freed, so that a call with a
// destroyed handle or descriptor is refused (its magic is gone) instead of reading freed memory.
template <class T>
struct Graveyard {
  std::mutex mu;
  std::vector<T*> dead;
};
template <class T>
Graveyard<T>& graveyard() {
  static auto* g = new Graveyard<T>();  // outlives every user
  return *g;
}
// A fresh object (magic still 0) from the graveyard, or a new one.
template <class T>
T* revive() {
  Graveyard<T>& g = graveyard<T>();
  {
    std::lock_guard<std::mutex> lock(g.mu);
    if (!g.dead.empty()) {
      T* p = g.dead.back();
      g.dead.pop_back();
      *p = T();
      return p;
    }
  }
  return new T();
}
template <class T>
void bury(T* p) {
  p->magic = 0;
  Graveyard<T>& g = graveyard<T>();
  std::lock_guard<std::mutex> lock(g.mu);
  g.dead.push_back(p);
}

// Records why a call failed (cudnnGetLastErrorString returns it) and returns `st`.
cudnnStatus_t fail(cudnnStatus_t st, const std::string& why);

// The handle, checked: alive, and its device current. On failure returns the status to give back
// (and has recorded why); `what` names the calling function.
cudnnStatus_t check_handle(cudnnHandle_t h, const char* what);
// A descriptor that was created and set (BAD_PARAM otherwise).
cudnnStatus_t check_tensor(cudnnTensorDescriptor_t d, const char* what, const char* which);

// A 4-d data descriptor whose strides cuDNN would not read as the layout they almost describe
// (Note [cuDNN layouts from strides]): NOT_SUPPORTED_LAYOUT; any other descriptor passes.
cudnnStatus_t check_layout(const cudnnTensorStruct& d, const char* what, const char* which);

// The element type of a data type cuDNN's legacy API computes with (false: not one of them).
bool elem_of(cudnnDataType_t t, Elem& out);

// Bytes spanned by a 4-d tensor (the largest offset + 1 element).
size_t span_bytes(const cudnnTensorStruct& d);

}  // namespace ember::sim::libs::cudnn
