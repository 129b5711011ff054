// Tensor maps for TMA (kernels/common/tma.cuh): the descriptor a cp.async.bulk.tensor copy reads,
// made on the host by the driver's cuTensorMapEncodeTiled, reached through the runtime's
// cudaGetDriverEntryPointByVersion (ember links no driver library; the simulator answers the same
// call with its emulation, sim/tma.cpp). CUDA builds only: it includes <cuda.h> for CUtensorMap, so
// only CUDA code includes it.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <vector>

#include "core/dtype.h"

namespace ember::cuda {

enum class TensorMapSwizzle { none, b32, b64, b128 };

// A tiled tensor map over `base` (device memory, 16-byte aligned): dims[0] is the innermost
// (contiguous) dimension, strides_bytes[i] the byte stride of dimension i + 1, box the elements a
// copy brings along each dimension (box[0] * element size a multiple of 16, and with a swizzle at
// most its span). Elements a copy's box reaches outside the tensor read as zeros (nan_fill: NaN,
// float types only).
struct TensorMapSpec {
  DType dtype = DType::f32;
  const void* base = nullptr;
  std::vector<uint64_t> dims, strides_bytes;
  std::vector<uint32_t> box;
  TensorMapSwizzle swizzle = TensorMapSwizzle::none;
  bool nan_fill = false;
};

// Throws naming every argument when the driver refuses the map (or has no tensor maps).
CUtensorMap make_tensor_map(const TensorMapSpec& spec);

}  // namespace ember::cuda
