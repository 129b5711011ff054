// The stream a kernel launches on: the current stream of the tensor's device (core/cuda/runtime.h),
// as the cudaStream_t that cuda::launch takes.
#pragma once

#include <cuda_runtime.h>

#include "core/cuda/runtime.h"
#include "core/tensor.h"

namespace ember::cuda {

inline cudaStream_t stream_for(const Tensor& t) {
  return static_cast<cudaStream_t>(current_stream(t.device().index).handle());
}
inline cudaStream_t stream_for(Device d) { return static_cast<cudaStream_t>(current_stream(d.index).handle()); }

}  // namespace ember::cuda
