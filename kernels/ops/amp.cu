// Loss-scaling kernels on CUDA (see amp.h).
//
// amp_unscale: one launch per kAmpTensorsPerLaunch gradients. The tensor table (pointers, sizes,
// dtypes) travels in the kernel's parameter block, never through a host-to-device copy, so the
// launch is capture-safe. grid.y picks the tensor, grid.x strides over its elements with 16-byte
// loads where aligned. Bandwidth-bound: reads and writes every gradient byte once.
// amp_update_scale: a single thread.
// Napkin math: docs/perf.md ("Napkin math behind the kernels").
#include "core/cuda/device_guard.h"
#include "core/cuda/kernel.cuh"
#include "kernels/common/cuda_loops.cuh"
#include "kernels/common/current_stream.cuh"
#include "kernels/common/grid_size.cuh"
#include "kernels/ops/amp.h"
#include "kernels/registry.h"

namespace ember {

namespace {

struct TensorTable {
  void* ptr[kAmpTensorsPerLaunch];
  int64_t n[kAmpTensorsPerLaunch];
  int32_t dtype[kAmpTensorsPerLaunch];  // DType
};

template <class T>
__device__ __forceinline__ bool unscale_range(T* p, int64_t n, float inv, int64_t start, int64_t step) {
  bool bad = false;
  for (int64_t i = start; i < n; i += step) {
    float v = static_cast<float>(static_cast<acc_t<T>>(p[i])) * inv;
    if constexpr (std::is_same_v<T, double>) {
      double d = static_cast<double>(p[i]) * static_cast<double>(inv);
      bad |= !isfinite(d);
      p[i] = d;
    } else {
      bad |= !isfinite(v);
      p[i] = static_cast<T>(v);
    }
  }
  return bad;
}

__global__ void unscale_kernel(TensorTable table, float* __restrict__ found_inf, const float* __restrict__ inv_scale) {
  const int t = blockIdx.y;
  const int64_t n = table.n[t];
  const int64_t start = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const float inv = *inv_scale;
  bool bad = false;
  switch (static_cast<DType>(table.dtype[t])) {
    case DType::f32: bad = unscale_range(static_cast<float*>(table.ptr[t]), n, inv, start, step); break;
    case DType::f64: bad = unscale_range(static_cast<double*>(table.ptr[t]), n, inv, start, step); break;
    case DType::f16: bad = unscale_range(static_cast<Half*>(table.ptr[t]), n, inv, start, step); break;
    case DType::bf16: bad = unscale_range(static_cast<BFloat16*>(table.ptr[t]), n, inv, start, step); break;
    default: break;
  }
  // one write per warp that saw a non-finite value (a benign race: every writer stores 1)
  if (__any_sync(0xffffffffu, bad) && (threadIdx.x % 32) == 0) *found_inf = 1.0f;
}

void unscale_cuda(const KernelCall& c) {
  const Tensor& found = c.in[0];
  const Tensor& inv = c.in[1];
  cuda::DeviceGuard guard(found.device().index);
  cudaStream_t stream = cuda::stream_for(found);
  const int device = found.device().index;
  for (size_t start = 2; start < c.in.size(); start += kAmpTensorsPerLaunch) {
    TensorTable table{};
    int count = 0;
    int64_t largest = 0;
    for (size_t i = start; i < std::min(c.in.size(), start + kAmpTensorsPerLaunch); ++i, ++count) {
      table.ptr[count] = c.in[i].data_ptr();
      table.n[count] = c.in[i].numel();
      table.dtype[count] = static_cast<int32_t>(c.in[i].dtype());
      largest = std::max(largest, c.in[i].numel());
    }
    if (largest == 0) continue;
    dim3 grid(cuda::grid_for(largest, 256, device), static_cast<unsigned>(count));
    cuda::launch(unscale_kernel, grid, 256, 0, stream, table, found.data<float>(), inv.data<float>());
  }
}

__global__ void update_scale_kernel(float* scale, int32_t* tracker, const float* found, int64_t* skipped,
                                    AmpScaleAttrs a) {
  if (*found != 0.0f) {
    *scale = static_cast<float>(*scale * a.backoff_factor);
    *tracker = 0;
    *skipped += 1;
  } else {
    int32_t next = *tracker + 1;
    if (next >= a.growth_interval) {
      float grown = static_cast<float>(*scale * a.growth_factor);
      if (isfinite(grown)) *scale = grown;
      next = 0;
    }
    *tracker = next;
  }
}

void update_cuda(const KernelCall& c) {
  cuda::DeviceGuard guard(c.in[0].device().index);
  cuda::launch(update_scale_kernel, 1, 1, 0, cuda::stream_for(c.in[0]), c.in[0].data<float>(), c.in[1].data<int32_t>(),
               c.in[2].data<float>(), c.in[3].data<int64_t>(), c.attr<AmpScaleAttrs>());
}

}  // namespace

void register_cuda_amp_unscale(OpInfo& info) {
  info.add_variant({.name = "cuda",
                    .device = DeviceType::cuda,
                    .fn = unscale_cuda,
                    .note = "multi-tensor: one launch per 48 gradients, table in kernel arguments"});
}

void register_cuda_amp_update_scale(OpInfo& info) {
  info.add_variant({.name = "cuda", .device = DeviceType::cuda, .fn = update_cuda, .note = "one thread"});
}

}  // namespace ember
