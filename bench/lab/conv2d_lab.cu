// conv2d's CUDA oracles, the "naive" variant of conv2d, conv2d_backward_input and
// conv2d_backward_weight: one thread per output element, int64 indexing, any shape and either
// layout, accumulating in acc_t. They exist to be compared with (kReference: never a default,
// never an autotune candidate), so they live in the lab, not in the library (Note [lab variants]
// in kernels/lab_variants.h). Napkin math: every product loads both operands from global memory
// (through L1/L2), so they run far below the tiled kernels of kernels/ops/conv2d.cu; they exist
// to be obviously right.
//
// And conv2d's wgmma_1x1 and wgmma_tf32_1x1: a 1x1, stride-1, unpadded, ungrouped convolution of
// a channels-last input is linear's GEMM, y [N H W, K] = x [N H W, C] W^T + b (a [K, C, 1, 1]
// weight is [K, C] in either layout), so the Hopper GEMM (Note [warp-specialised GEMM] in
// kernels/gemm/gemm_wgmma_sm90a.cu) runs it in place: f16/bf16, and f32 as TF32 (Note [TF32
// through wgmma]). Lab variants until a GPU run records where they win (Note [library rule]).
#include "bench/lab/lab.h"
#include "bench/lab/wgmma_lab.h"

#include "core/cuda/device_guard.h"
#include "core/cuda/kernel.cuh"
#include "kernels/common/current_stream.cuh"
#include "kernels/common/grid_size.cuh"
#include "kernels/common/memory_format.h"
#include "kernels/gemm/cuda_gemm.h"
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

// A 1x1 convolution's x as [N H W, C] and W as [K, C] (views; see the top of the file), or why the
// call is not one: "" when it is.
std::string conv1x1_views(const KernelCall& c, Tensor& x2, Tensor& w2) {
  const Tensor &x = c.in[0], &w = c.in[1];
  const ConvGeom g = conv_geometry("conv2d", x.shape(), w.shape(), c.attr<Conv2dAttrs>());
  if (g.R != 1 || g.S != 1 || g.sh != 1 || g.sw != 1 || g.ph != 0 || g.pw != 0 || g.G != 1) return "not a plain 1x1";
  if (!runs_channels_last(x)) return "x is not channels-last";
  if (w.stride(0) != g.C || w.stride(1) != 1) return "the weight is not [K, C] contiguous";
  if (c.in[2].defined() && !c.in[2].is_contiguous()) return "the bias is not contiguous";
  x2 = make_view(x, {g.N * g.H * g.W, g.C}, {g.C, 1}, x.offset());
  w2 = make_view(w, {g.K, g.C}, {g.C, 1}, w.offset());
  return "";
}

template <bool TF32>
bool wgmma_1x1_ok(const KernelCall& c) {
  Tensor x2, w2;
  return conv1x1_views(c, x2, w2).empty() && gemm::wgmma_takes_linear(x2, w2, TF32);
}

template <bool TF32>
void wgmma_1x1(const KernelCall& c) {
  Tensor x2, w2;
  const std::string why = conv1x1_views(c, x2, w2);
  EMBER_CHECK(why.empty(), "conv2d wgmma_1x1: ", why);
  const Tensor& y = c.out[0];
  const int64_t K = w2.shape()[0];
  EMBER_CHECK(y.stride(1) == 1 && y.stride(3) == K, "conv2d wgmma_1x1: the output is not channels-last");
  Tensor y2 = make_view(y, {x2.shape()[0], K}, {K, 1}, y.offset());
  const gemm::Prepared pr = gemm::prepare_linear(x2, w2, c.in[2], y2, 0, gemm::Layout::unit_stride);
  gemm::run_wgmma(pr.p, {.bn = 128, .tf32 = TF32});
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
                                                .fn = unpool_apart<naive_backward_input>,
                                                .dtypes = kFloatTypes,
                                                .flags = kReference,
                                                .note = "one thread per input element (the oracle)"});
  add_lab_variant(OpId::conv2d_backward_weight, {.name = "naive",
                                                 .device = DeviceType::cuda,
                                                 .fn = unpool_apart<naive_backward_weight>,
                                                 .dtypes = kFloatTypes,
                                                 .flags = kReference,
                                                 .note = "one thread per weight element (the oracle)"});
  add_lab_variant(OpId::conv2d, {.name = "wgmma_1x1",
                                 .device = DeviceType::cuda,
                                 .fn = wgmma_1x1<false>,
                                 .dtypes = DTypeSet{DType::f16, DType::bf16},
                                 .flags = kReference,
                                 .supports = wgmma_1x1_ok<false>,
                                 .note = "1x1 channels-last as the Hopper GEMM (TMA + wgmma, 128x128x64, TMA stores)"});
  add_lab_variant(OpId::conv2d, {.name = "wgmma_tf32_1x1",
                                 .device = DeviceType::cuda,
                                 .fn = wgmma_1x1<true>,
                                 .dtypes = DTypeSet{DType::f32},
                                 .flags = kReference | kTf32,
                                 .supports = wgmma_1x1_ok<true>,
                                 .note = "1x1 channels-last f32 read as TF32 by the Hopper GEMM (wgmma k8.tf32)"});
}

}  // namespace ember
