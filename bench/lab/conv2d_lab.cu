// conv2d's CUDA oracles, the "naive" variant of conv2d, conv2d_backward_input and
// conv2d_backward_weight: one thread per output element, int64 indexing, any shape and either
// layout, accumulating in acc_t. They exist to be compared with (kReference: never a default,
// never an autotune candidate), so they live in the lab, not in the library (Note [lab variants]
// in kernels/lab_variants.h). Napkin math: every product loads both operands from global memory
// (through L1/L2), so they run far below the tiled kernels of kernels/ops/conv2d.cu; they exist
// to be obviously right.
#include "bench/lab/lab.h"

#include "core/cuda/device_guard.h"
#include "core/cuda/kernel.cuh"
#include "kernels/common/current_stream.cuh"
#include "kernels/common/grid_size.cuh"
#include "kernels/ops/conv2d_cuda.h"
#include "kernels/lab_variants.h"
#include "kernels/registry.h"

namespace ember {

namespace {

using convcuda::ConvArgs;
using convcuda::cp;
using convcuda::mp;

struct NaiveGeom {
  int64_t N, C, H, W, K, R, S, P, Q, Cg, Kg;
  int64_t sh, sw, ph, pw, dh, dw;
  bool cl;
};
NaiveGeom naive_geom(const ConvGeom& g) {
  return {g.N, g.C, g.H, g.W, g.K, g.R, g.S, g.P, g.Q, g.Cg, g.Kg, g.sh, g.sw, g.ph, g.pw, g.dh, g.dw, g.channels_last};
}
// offsets of logical (n, c, h, w) in a [N, C, H, W] tensor of either layout
__device__ __forceinline__ int64_t off4(bool cl, int64_t n, int64_t c, int64_t h, int64_t w, int64_t C, int64_t H,
                                        int64_t W) {
  return cl ? ((n * H + h) * W + w) * C + c : ((n * C + c) * H + h) * W + w;
}

#define EMBER_GRID_LOOP64(i, n)                                                          \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

template <class T>
__global__ void naive_forward_kernel(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b,
                                     T* __restrict__ y, NaiveGeom g) {
  using Acc = acc_t<T>;
  const int64_t total = g.N * g.K * g.P * g.Q;
  EMBER_GRID_LOOP64(i, total) {
    // logical (n, k, p, q) of the i-th element in memory order
    int64_t n, k, p, q;
    if (g.cl) {
      k = i % g.K;
      int64_t r = i / g.K;
      q = r % g.Q;
      r /= g.Q;
      p = r % g.P;
      n = r / g.P;
    } else {
      q = i % g.Q;
      int64_t r = i / g.Q;
      p = r % g.P;
      r /= g.P;
      k = r % g.K;
      n = r / g.K;
    }
    const int64_t grp = k / g.Kg;
    Acc acc = b != nullptr ? static_cast<Acc>(b[k]) : Acc(0);
    for (int64_t c = 0; c < g.Cg; ++c)
      for (int64_t r = 0; r < g.R; ++r) {
        const int64_t h = p * g.sh - g.ph + r * g.dh;
        if (h < 0 || h >= g.H) continue;
        for (int64_t s = 0; s < g.S; ++s) {
          const int64_t ww = q * g.sw - g.pw + s * g.dw;
          if (ww < 0 || ww >= g.W) continue;
          acc += static_cast<Acc>(x[off4(g.cl, n, grp * g.Cg + c, h, ww, g.C, g.H, g.W)]) *
                 static_cast<Acc>(w[off4(g.cl, k, c, r, s, g.Cg, g.R, g.S)]);
        }
      }
    y[i] = static_cast<T>(acc);
  }
}

template <class T>
__global__ void naive_backward_input_kernel(const T* __restrict__ gy, const T* __restrict__ w, T* __restrict__ dx,
                                            NaiveGeom g) {
  using Acc = acc_t<T>;
  const int64_t total = g.N * g.C * g.H * g.W;
  EMBER_GRID_LOOP64(i, total) {
    int64_t n, cc, h, ww;
    if (g.cl) {
      cc = i % g.C;
      int64_t r = i / g.C;
      ww = r % g.W;
      r /= g.W;
      h = r % g.H;
      n = r / g.H;
    } else {
      ww = i % g.W;
      int64_t r = i / g.W;
      h = r % g.H;
      r /= g.H;
      cc = r % g.C;
      n = r / g.C;
    }
    const int64_t grp = cc / g.Cg, c = cc % g.Cg;
    Acc acc = 0;
    for (int64_t kk = 0; kk < g.Kg; ++kk) {
      const int64_t k = grp * g.Kg + kk;
      for (int64_t r = 0; r < g.R; ++r) {
        const int64_t t = h + g.ph - r * g.dh;
        if (t < 0 || t % g.sh != 0 || t / g.sh >= g.P) continue;
        for (int64_t s = 0; s < g.S; ++s) {
          const int64_t u = ww + g.pw - s * g.dw;
          if (u < 0 || u % g.sw != 0 || u / g.sw >= g.Q) continue;
          acc += static_cast<Acc>(gy[off4(g.cl, n, k, t / g.sh, u / g.sw, g.K, g.P, g.Q)]) *
                 static_cast<Acc>(w[off4(g.cl, k, c, r, s, g.Cg, g.R, g.S)]);
        }
      }
    }
    dx[i] = static_cast<T>(acc);
  }
}

template <class T>
__global__ void naive_backward_weight_kernel(const T* __restrict__ gy, const T* __restrict__ x, T* __restrict__ dw,
                                             NaiveGeom g) {
  using Acc = acc_t<T>;
  const int64_t total = g.K * g.Cg * g.R * g.S;
  EMBER_GRID_LOOP64(i, total) {
    int64_t k, c, r, s;
    if (g.cl) {  // KRSC memory
      c = i % g.Cg;
      int64_t t = i / g.Cg;
      s = t % g.S;
      t /= g.S;
      r = t % g.R;
      k = t / g.R;
    } else {
      s = i % g.S;
      int64_t t = i / g.S;
      r = t % g.R;
      t /= g.R;
      c = t % g.Cg;
      k = t / g.Cg;
    }
    const int64_t grp = k / g.Kg;
    Acc acc = 0;
    for (int64_t n = 0; n < g.N; ++n)
      for (int64_t p = 0; p < g.P; ++p) {
        const int64_t h = p * g.sh - g.ph + r * g.dh;
        if (h < 0 || h >= g.H) continue;
        for (int64_t q = 0; q < g.Q; ++q) {
          const int64_t ww = q * g.sw - g.pw + s * g.dw;
          if (ww < 0 || ww >= g.W) continue;
          acc += static_cast<Acc>(gy[off4(g.cl, n, k, p, q, g.K, g.P, g.Q)]) *
                 static_cast<Acc>(x[off4(g.cl, n, grp * g.Cg + c, h, ww, g.C, g.H, g.W)]);
        }
      }
    dw[i] = static_cast<T>(acc);
  }
}

void naive_forward(const KernelCall& c) {
  ConvArgs a = convcuda::forward_args(c);
  const int64_t n = a.y.numel();
  if (n == 0) return;
  cuda::DeviceGuard scope(a.y.device().index);
  EMBER_DISPATCH_FLOAT(a.y.dtype(), "conv2d", [&] {
    cuda::launch(naive_forward_kernel<scalar_t>, cuda::grid_for(n, 256, a.y.device().index), 256, 0,
                 cuda::stream_for(a.y), cp<scalar_t>(a.x), cp<scalar_t>(a.w), cp<scalar_t>(a.b), mp<scalar_t>(a.y),
                 naive_geom(a.g));
  });
}

void naive_backward_input(const KernelCall& c) {
  ConvArgs a = convcuda::backward_input_args(c);
  const int64_t n = a.x.numel();
  if (n == 0) return;
  cuda::DeviceGuard scope(a.x.device().index);
  EMBER_DISPATCH_FLOAT(a.x.dtype(), "conv2d_backward_input", [&] {
    cuda::launch(naive_backward_input_kernel<scalar_t>, cuda::grid_for(n, 256, a.x.device().index), 256, 0,
                 cuda::stream_for(a.x), cp<scalar_t>(a.y), cp<scalar_t>(a.w), mp<scalar_t>(a.x), naive_geom(a.g));
  });
}

void naive_backward_weight(const KernelCall& c) {
  conv_bias_grad_apart(c);  // Note [conv bias gradient]
  ConvArgs a = convcuda::backward_weight_args(c);
  const int64_t n = a.w.numel();
  cuda::DeviceGuard scope(a.w.device().index);
  EMBER_DISPATCH_FLOAT(a.w.dtype(), "conv2d_backward_weight", [&] {
    cuda::launch(naive_backward_weight_kernel<scalar_t>, cuda::grid_for(n, 256, a.w.device().index), 256, 0,
                 cuda::stream_for(a.w), cp<scalar_t>(a.y), cp<scalar_t>(a.x), mp<scalar_t>(a.w), naive_geom(a.g));
  });
}

}  // namespace

void register_lab_conv2d() {
  add_lab_variant(OpId::conv2d, {.name = "naive",
                                 .device = DeviceType::cuda,
                                 .fn = naive_forward,
                                 .dtypes = kFloatTypes,
                                 .flags = kReference,
                                 .note = "one thread per output element (the oracle)"});
  add_lab_variant(OpId::conv2d_backward_input, {.name = "naive",
                                                .device = DeviceType::cuda,
                                                .fn = naive_backward_input,
                                                .dtypes = kFloatTypes,
                                                .flags = kReference,
                                                .note = "one thread per input element (the oracle)"});
  add_lab_variant(OpId::conv2d_backward_weight, {.name = "naive",
                                                 .device = DeviceType::cuda,
                                                 .fn = naive_backward_weight,
                                                 .dtypes = kFloatTypes,
                                                 .flags = kReference,
                                                 .note = "one thread per weight element (the oracle)"});
}

}  // namespace ember
