// normalize_u8 on CUDA: u8 images to normalised floats in one kernel, right after the
// host-to-device copy of a batch (data/data_loader.cpp).
//
// Versions:
//   cuda - one thread per element, grid-stride; the channel is (i / plane) % C and its mean/std
//          come from the kernel's parameters (no memory traffic for them).
// Why so simple: an MNIST batch is launch bound, so a cleverer kernel would gain nothing; an
// ImageNet batch is memory bound.
// Napkin math: docs/perf.md ("Napkin math behind the kernels").
#include "core/cuda/device_guard.h"
#include "core/cuda/kernel.cuh"
#include "kernels/common/current_stream.cuh"
#include "kernels/common/grid_size.cuh"
#include "kernels/ops/normalize.h"
#include "kernels/registry.h"

namespace ember {

namespace {

template <class Acc>
struct ChannelParams {
  Acc mean[kMaxNormalizeChannels];
  Acc std[kMaxNormalizeChannels];
};

template <class T, class Acc>
__global__ void normalize_u8_kernel(const uint8_t* __restrict__ x, T* __restrict__ out, int64_t n, int64_t plane,
                                    int channels, ChannelParams<Acc> p) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int c = channels == 1 ? 0 : static_cast<int>((i / plane) % channels);
    out[i] = static_cast<T>(normalize_u8_value<Acc>(x[i], p.mean[c], p.std[c]));
  }
}

template <class T>
void launch(const Tensor& x, const Tensor& out, const NormalizeU8Attrs& a) {
  using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;
  ChannelParams<Acc> p{};
  for (int c = 0; c < a.channels; ++c) {
    p.mean[c] = static_cast<Acc>(a.mean[c]);
    p.std[c] = static_cast<Acc>(a.std[c]);
  }
  int64_t plane = 1;
  if (a.channels > 1)
    for (int d = 2; d < x.dim(); ++d) plane *= x.size(d);
  const int64_t n = x.numel();
  constexpr int kThreads = 256;
  cuda::launch(normalize_u8_kernel<T, Acc>, cuda::grid_for(n, kThreads, x.device().index), kThreads, 0,
               cuda::stream_for(x), static_cast<const uint8_t*>(x.data_ptr()), static_cast<T*>(out.data_ptr()), n,
               std::max<int64_t>(plane, 1), a.channels, p);
}

void normalize_u8_cuda(const KernelCall& c) {
  const Tensor& x = c.in[0];
  const Tensor& out = c.out[0];
  if (x.numel() == 0) return;
  cuda::DeviceGuard guard(x.device().index);
  const NormalizeU8Attrs& a = c.attr<NormalizeU8Attrs>();
  EMBER_DISPATCH_FLOAT(out.dtype(), "normalize_u8", [&] { launch<scalar_t>(x, out, a); });
}

}  // namespace

void register_cuda_normalize_u8(OpInfo& info) {
  info.add_variant({.name = "cuda",
                    .device = DeviceType::cuda,
                    .fn = normalize_u8_cuda,
                    .dtypes = kFloatTypes,
                    .note = "one thread per element, per-channel constants in kernel parameters"});
}

}  // namespace ember
