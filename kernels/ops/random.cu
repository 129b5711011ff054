// Random fills on CUDA: one thread per element, the same EMBER_HD Philox code as the CPU loop.
// (Each thread recomputes its counter's 4 outputs and keeps one: ALU is free here, the kernel is
// bound by the stores.)
#include "core/cuda/device_guard.h"
#include "core/cuda/kernel.cuh"
#include "kernels/common/current_stream.cuh"
#include "kernels/common/grid_size.cuh"
#include "kernels/ops/copy.h"
#include "kernels/ops/random.h"
#include "kernels/registry.h"

namespace ember {

namespace {

enum class Dist { uniform, normal, bernoulli };

template <Dist D, class T>
__global__ void random_kernel(T* out, int64_t n, RandomAttrs a) {
  const PhiloxState ps = philox_resolve(a.seed, a.base, a.graph_state);  // Note [Philox in CUDA graphs]
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    double v;
    if constexpr (D == Dist::uniform) v = a.a + (a.b - a.a) * static_cast<double>(philox_uniform(ps.seed, ps.base, i));
    else if constexpr (D == Dist::normal) v = a.a + a.b * philox_normal(ps.seed, ps.base, i);
    else v = static_cast<double>(philox_uniform(ps.seed, ps.base, i)) < a.a ? 1.0 : 0.0;
    out[i] = convert<T, double>(v);
  }
}

template <Dist D>
void random_cuda(const KernelCall& c) {
  const Tensor& t = c.out[0];
  if (t.numel() == 0) return;
  cuda::DeviceGuard guard(t.device().index);
  EMBER_DISPATCH_NUMERIC(t.dtype(), "random", [&] {
    cuda::launch(random_kernel<D, scalar_t>, cuda::grid_for(t.numel(), 256, t.device().index), 256, 0,
                 cuda::stream_for(t), static_cast<scalar_t*>(t.data_ptr()), t.numel(), c.attr<RandomAttrs>());
  });
}

}  // namespace

void register_cuda_uniform(OpInfo& info) {
  info.add_variant({.name = "cuda",
                    .device = DeviceType::cuda,
                    .fn = random_cuda<Dist::uniform>,
                    .dtypes = kNumericTypes,
                    .note = "Philox4x32-10 per element"});
}
void register_cuda_normal(OpInfo& info) {
  info.add_variant({.name = "cuda",
                    .device = DeviceType::cuda,
                    .fn = random_cuda<Dist::normal>,
                    .dtypes = kNumericTypes,
                    .note = "Philox4x32-10, Box-Muller in double"});
}
void register_cuda_bernoulli(OpInfo& info) {
  info.add_variant({.name = "cuda",
                    .device = DeviceType::cuda,
                    .fn = random_cuda<Dist::bernoulli>,
                    .dtypes = kNumericTypes,
                    .note = "Philox4x32-10 per element"});
}

}  // namespace ember
