// RAII owners of what the simulator's cuDNN tests create (tests/sim/test_sim_cudnn_conv.cu,
// tests/sim/test_sim_cudnn_ops.cu): the handle, the descriptors and device buffers. None is
// copyable (each owns one object). Simulator build with cuDNN's header only.
#pragma once

#include <catch2/catch.hpp>

#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <algorithm>
#include <cstddef>

namespace ember::testing::cudnn {

struct Handle {
  cudnnHandle_t h = nullptr;
  Handle() { REQUIRE(cudnnCreate(&h) == CUDNN_STATUS_SUCCESS); }
  ~Handle() { cudnnDestroy(h); }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
};

// A descriptor made by Create and released by Destroy.
template <class D, cudnnStatus_t (*Create)(D*), cudnnStatus_t (*Destroy)(D)>
struct Desc {
  D d = nullptr;
  Desc() { REQUIRE(Create(&d) == CUDNN_STATUS_SUCCESS); }
  ~Desc() { Destroy(d); }
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;
};
using TensorDesc = Desc<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor>;
using FDesc = Desc<cudnnFilterDescriptor_t, cudnnCreateFilterDescriptor, cudnnDestroyFilterDescriptor>;
using CDesc = Desc<cudnnConvolutionDescriptor_t, cudnnCreateConvolutionDescriptor, cudnnDestroyConvolutionDescriptor>;
using PDesc = Desc<cudnnPoolingDescriptor_t, cudnnCreatePoolingDescriptor, cudnnDestroyPoolingDescriptor>;

// `bytes` of device memory (at least one byte is allocated, so an empty buffer has an address).
struct DevBuf {
  void* p = nullptr;
  size_t bytes = 0;
  explicit DevBuf(size_t b) : bytes(b) { REQUIRE(cudaMalloc(&p, std::max<size_t>(b, 1)) == cudaSuccess); }
  ~DevBuf() { cudaFree(p); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
};

}  // namespace ember::testing::cudnn
