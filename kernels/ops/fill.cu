// fill and arange on CUDA. fill is the generic elementwise kernel with no inputs (one 16-byte
// store per thread per iteration when contiguous); arange writes start + i*step.
#include "core/cuda/device_guard.h"
#include "core/cuda/kernel.cuh"
#include "kernels/common/cuda_loops.cuh"
#include "kernels/common/current_stream.cuh"
#include "kernels/common/grid_size.cuh"
#include "kernels/ops/fill.h"
#include "kernels/registry.h"

namespace ember {

namespace {

void fill_cuda(const KernelCall& c) {
  const Tensor& t = c.out[0];
  double v = c.attr<ScalarAttrs>().value;
  ElementwiseLayout L = make_layout({&t});
  EMBER_DISPATCH_ALL(t.dtype(), "fill",
                     [&] { gpu_map<scalar_t>(L, {&t}, FillFn<scalar_t>{convert<scalar_t, double>(v)}); });
}

template <class T>
__global__ void arange_kernel(T* out, int64_t n, double start, double step) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = convert<T, double>(start + static_cast<double>(i) * step);
}

void arange_cuda(const KernelCall& c) {
  const Tensor& t = c.out[0];
  if (t.numel() == 0) return;
  const ArangeAttrs& a = c.attr<ArangeAttrs>();
  cuda::DeviceGuard guard(t.device().index);
  EMBER_DISPATCH_NUMERIC(t.dtype(), "arange", [&] {
    cuda::launch(arange_kernel<scalar_t>, cuda::grid_for(t.numel(), 256, t.device().index), 256, 0, cuda::stream_for(t),
                 static_cast<scalar_t*>(t.data_ptr()), t.numel(), a.start, a.step);
  });
}

}  // namespace

void register_cuda_fill(OpInfo& info) {
  info.add_variant(
      {.name = "cuda", .device = DeviceType::cuda, .fn = fill_cuda, .note = "generic vectorized elementwise kernel"});
}

void register_cuda_arange(OpInfo& info) {
  info.add_variant({.name = "cuda",
                    .device = DeviceType::cuda,
                    .fn = arange_cuda,
                    .dtypes = kNumericTypes,
                    .note = "grid-stride loop"});
}

}  // namespace ember
