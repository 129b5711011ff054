// Internal interface between the indexing ops' CUDA file (kernels/ops/index.cu) and the benchmark
// lab's atomic index_add / scatter_add (bench/lab/index_lab.cu). Host-only header.
#pragma once

#include <cstdint>

#include "kernels/registry.h"

namespace ember {

// Reports an index outside [0, size) through the device error word as op `op` (Note [device
// errors] in core/cuda/runtime.h), on the index's current stream; i32 or i64 indices.
void check_index_bounds_cuda(const Tensor& index, int64_t size, OpId op);

}  // namespace ember
