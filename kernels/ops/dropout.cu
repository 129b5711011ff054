// dropout on CUDA (formulas and the recompute-the-mask decision in dropout.h).
//
// One thread per 4 elements: one Philox4x32-10 call gives the 4 uniforms of counter base + k for
// elements 4k .. 4k+3 (philox_uniform's layout, so the mask equals the CPU's bit for bit), and the
// 4 elements move as one vector (16 bytes for f32, 8 for f16/bf16) when the pointers are aligned;
// otherwise element by element. Memory bound: the Philox calls cost well under the time of moving
// the bytes, so recomputing the mask is cheap.
// Napkin math: docs/perf.md ("Napkin math behind the kernels").
#include "core/cuda/device_guard.h"
#include "core/cuda/kernel.cuh"
#include "kernels/common/cuda_loops.cuh"
#include "kernels/common/current_stream.cuh"
#include "kernels/common/grid_size.cuh"
#include "kernels/ops/dropout.h"
#include "kernels/registry.h"

#include "core/rng.h"

namespace ember {

namespace {

template <class T, bool kVec>
__global__ void dropout_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t n, double p, acc_t<T> scale,
                               uint64_t seed_arg, uint64_t base_arg, const uint64_t* graph_state) {
  using Acc = acc_t<T>;
  // from the device state when captured, so replays draw anew (Note [Philox in CUDA graphs])
  const PhiloxState ps = philox_resolve(seed_arg, base_arg, graph_state);
  const uint64_t seed = ps.seed, base = ps.base;
  using V = detail::AlignedVec<T, 4>;
  const int64_t groups = (n + 3) / 4;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < groups;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const Philox4x32 r = philox(seed, base + static_cast<uint64_t>(k));
    const int64_t i0 = 4 * k;
    if (kVec && i0 + 4 <= n) {
      const V in = reinterpret_cast<const V*>(x)[k];
      V out;
      EMBER_UNROLL
      for (int j = 0; j < 4; ++j) {
        const bool keep = static_cast<double>(uint_to_unit(r.v[j])) >= p;
        out.v[j] = static_cast<T>(static_cast<Acc>(in.v[j]) * (keep ? scale : Acc(0)));
      }
      reinterpret_cast<V*>(y)[k] = out;
    } else {
      for (int j = 0; j < 4 && i0 + j < n; ++j) {
        const bool keep = static_cast<double>(uint_to_unit(r.v[j])) >= p;
        y[i0 + j] = static_cast<T>(static_cast<Acc>(x[i0 + j]) * (keep ? scale : Acc(0)));
      }
    }
  }
}

void dropout_cuda(const KernelCall& c) {
  const Tensor& x = c.in[0];
  const Tensor& y = c.out[0];
  const int64_t n = x.numel();
  if (n == 0) return;
  const DropoutAttrs a = c.attr<DropoutAttrs>();
  cuda::DeviceGuard guard(x.device().index);
  const unsigned grid = cuda::grid_for((n + 3) / 4, 256, x.device().index);
  cudaStream_t stream = cuda::stream_for(x);
  EMBER_DISPATCH_FLOAT(x.dtype(), "dropout", [&] {
    using Acc = acc_t<scalar_t>;
    const uintptr_t align = 4 * sizeof(scalar_t);
    const bool vec = reinterpret_cast<uintptr_t>(x.data_ptr()) % align == 0 &&
                     reinterpret_cast<uintptr_t>(y.data_ptr()) % align == 0;
    const scalar_t* xp = static_cast<const scalar_t*>(x.data_ptr());
    scalar_t* yp = static_cast<scalar_t*>(y.data_ptr());
    const Acc scale = static_cast<Acc>(dropout_scale(a.p));
    if (vec)
      cuda::launch(dropout_kernel<scalar_t, true>, grid, 256, 0, stream, xp, yp, n, a.p, scale, a.seed, a.base,
                   a.graph_state);
    else
      cuda::launch(dropout_kernel<scalar_t, false>, grid, 256, 0, stream, xp, yp, n, a.p, scale, a.seed, a.base,
                   a.graph_state);
  });
}

}  // namespace

void register_cuda_dropout(OpInfo& info) {
  info.add_variant({.name = "cuda",
                    .device = DeviceType::cuda,
                    .fn = dropout_cuda,
                    .dtypes = kFloatTypes,
                    .note = "one Philox call per 4 elements, 4-wide vector loads and stores"});
}

}  // namespace ember
