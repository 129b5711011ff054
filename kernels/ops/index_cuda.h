// Internal interface between the indexing ops' CUDA file (kernels/ops/index.cu) and the benchmark
// lab's atomic index_add / scatter_add (bench/lab/index_lab.cu): the bounds check, the geometry
// the kernels take and their grid-stride loop. Compiles without nvcc (the loop is a macro).
#pragma once

#include <cstdint>

#include "kernels/registry.h"

namespace ember {

namespace {

// An index tensor's shape with the strides of the tensor it addresses, passed to the kernels by
// value. In an unnamed namespace, as when each file had its own copy, so that the kernels keep
// their names (bench/model/kernel_resources_sm90.txt lists them by name).
struct Dims {
  int n;
  int64_t index_shape[kMaxDims];
  int64_t x_strides[kMaxDims];
};
inline Dims dims_of(const Tensor& index, const Tensor& x) {
  Dims d{};
  d.n = index.dim();
  for (int k = 0; k < d.n; ++k) {
    d.index_shape[k] = index.shape()[k];
    d.x_strides[k] = x.strides()[k];
  }
  return d;
}

}  // namespace

#define EMBER_GRID_LOOP(i, n)                                                            \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

// Reports an index outside [0, size) through the device error word as op `op` (Note [device
// errors] in core/cuda/runtime.h), on the index's current stream; i32 or i64 indices.
void check_index_bounds_cuda(const Tensor& index, int64_t size, OpId op);

}  // namespace ember
