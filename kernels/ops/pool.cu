// Pooling on CUDA (see pool.h for the definitions). One variant per op ("cuda"):
//   forward ops   one thread per output element in memory order (NCHW: along w; channels-last:
//                 along c, so a warp reads 32 consecutive channels of each window pixel: coalesced)
//   adaptive 1x1  NCHW global average: one warp per (n, c) plane, coalesced along the plane
//   gradients     gather form: one thread per input element sums the windows that cover it in
//                 increasing (p, q) order (deterministic, no atomics); max_pool2d_backward compares
//                 the saved argmax of each covering window with its own position (an index of -1,
//                 a window relu zeroed, matches none: Note [relu after max pooling])
// Memory bound (max_pool2d's indices are part of the traffic both ways); the adaptive 1x1 average
// of small planes is launch bound.
// Napkin math: docs/perf.md ("Napkin math behind the kernels").
#include "core/cuda/device_guard.h"
#include "core/cuda/kernel.cuh"
#include "kernels/common/current_stream.cuh"
#include "kernels/common/grid_size.cuh"
#include "kernels/common/memory_format.h"
#include "kernels/ops/pool.h"
#include "kernels/registry.h"

#if EMBER_WITH_CUDNN
#include "kernels/common/cudnn_utils.h"
#endif

namespace ember {

namespace {

struct Dims {
  int64_t N, C, H, W, P, Q;
  int64_t kh, kw, sh, sw, ph, pw;
  bool include_pad;
  bool relu;  // max_pool2d (Note [relu after max pooling])
};

Dims dims_of(const PoolGeom& g) {
  return {g.N, g.C, g.H, g.W, g.P, g.Q, g.kh, g.kw, g.sh, g.sw, g.ph, g.pw, g.count_include_pad, g.relu};
}

// logical (n, c, a, b) of the i-th element (memory order) of a [N, C, A, B] tensor
template <bool CL>
__device__ __forceinline__ void unravel(int64_t i, int64_t C, int64_t A, int64_t B, int64_t& n, int64_t& c, int64_t& a,
                                        int64_t& b) {
  if (CL) {
    c = i % C;
    i /= C;
    b = i % B;
    i /= B;
    a = i % A;
    n = i / A;
  } else {
    b = i % B;
    i /= B;
    a = i % A;
    i /= A;
    c = i % C;
    n = i / C;
  }
}
template <bool CL>
__device__ __forceinline__ int64_t offset(int64_t n, int64_t c, int64_t a, int64_t b, int64_t C, int64_t A, int64_t B) {
  return CL ? ((n * A + a) * B + b) * C + c : ((n * C + c) * A + a) * B + b;
}

#define EMBER_POOL_LOOP(i, n)                                                            \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

template <class T, bool CL>
__global__ void max_pool_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t* __restrict__ ind, Dims d) {
  const int64_t total = d.N * d.C * d.P * d.Q;
  EMBER_POOL_LOOP(i, total) {
    int64_t n, c, p, q;
    unravel<CL>(i, d.C, d.P, d.Q, n, c, p, q);
    int64_t h0, h1, w0, w1;
    pool::max_window(p, d.sh, d.ph, d.kh, d.H, h0, h1);
    pool::max_window(q, d.sw, d.pw, d.kw, d.W, w0, w1);
    acc_t<T> best = -INFINITY;
    int64_t idx = h0 * d.W + w0;
    for (int64_t h = h0; h < h1; ++h)
      for (int64_t w = w0; w < w1; ++w) {
        const acc_t<T> v = static_cast<acc_t<T>>(x[offset<CL>(n, c, h, w, d.C, d.H, d.W)]);
        if (v > best || v != v) {
          best = v;
          idx = h * d.W + w;
        }
      }
    if (d.relu) pool::relu_max(best, idx);
    y[i] = static_cast<T>(best);
    ind[i] = idx;
  }
}

template <class T, bool CL>
__global__ void max_pool_backward_kernel(const T* __restrict__ gy, const int64_t* __restrict__ ind, T* __restrict__ dx,
                                         Dims d) {
  const int64_t total = d.N * d.C * d.H * d.W;
  EMBER_POOL_LOOP(i, total) {
    int64_t n, c, h, w;
    unravel<CL>(i, d.C, d.H, d.W, n, c, h, w);
    int64_t p0, p1, q0, q1;
    pool::covering(h, d.sh, d.ph, d.kh, d.P, p0, p1);
    pool::covering(w, d.sw, d.pw, d.kw, d.Q, q0, q1);
    const int64_t me = h * d.W + w;
    acc_t<T> acc = 0;
    for (int64_t p = p0; p < p1; ++p)
      for (int64_t q = q0; q < q1; ++q) {
        const int64_t o = offset<CL>(n, c, p, q, d.C, d.P, d.Q);
        if (ind[o] == me) acc += static_cast<acc_t<T>>(gy[o]);
      }
    dx[i] = static_cast<T>(acc);
  }
}

template <class T, bool CL>
__global__ void avg_pool_kernel(const T* __restrict__ x, T* __restrict__ y, Dims d) {
  const int64_t total = d.N * d.C * d.P * d.Q;
  EMBER_POOL_LOOP(i, total) {
    int64_t n, c, p, q;
    unravel<CL>(i, d.C, d.P, d.Q, n, c, p, q);
    int64_t h0, h1, eh, w0, w1, ew;
    pool::avg_window(p, d.sh, d.ph, d.kh, d.H, d.include_pad, h0, h1, eh);
    pool::avg_window(q, d.sw, d.pw, d.kw, d.W, d.include_pad, w0, w1, ew);
    acc_t<T> s = 0;
    for (int64_t h = h0; h < h1; ++h)
      for (int64_t w = w0; w < w1; ++w) s += static_cast<acc_t<T>>(x[offset<CL>(n, c, h, w, d.C, d.H, d.W)]);
    y[i] = static_cast<T>(s / static_cast<acc_t<T>>(eh * ew));
  }
}

template <class T, bool CL>
__global__ void avg_pool_backward_kernel(const T* __restrict__ gy, T* __restrict__ dx, Dims d) {
  const int64_t total = d.N * d.C * d.H * d.W;
  EMBER_POOL_LOOP(i, total) {
    int64_t n, c, h, w;
    unravel<CL>(i, d.C, d.H, d.W, n, c, h, w);
    int64_t p0, p1, q0, q1;
    pool::covering(h, d.sh, d.ph, d.kh, d.P, p0, p1);
    pool::covering(w, d.sw, d.pw, d.kw, d.Q, q0, q1);
    acc_t<T> acc = 0;
    for (int64_t p = p0; p < p1; ++p) {
      int64_t h0, h1, eh;
      pool::avg_window(p, d.sh, d.ph, d.kh, d.H, d.include_pad, h0, h1, eh);
      for (int64_t q = q0; q < q1; ++q) {
        int64_t w0, w1, ew;
        pool::avg_window(q, d.sw, d.pw, d.kw, d.W, d.include_pad, w0, w1, ew);
        acc += static_cast<acc_t<T>>(gy[offset<CL>(n, c, p, q, d.C, d.P, d.Q)]) / static_cast<acc_t<T>>(eh * ew);
      }
    }
    dx[i] = static_cast<T>(acc);
  }
}

template <class T, bool CL>
__global__ void adaptive_kernel(const T* __restrict__ x, T* __restrict__ y, Dims d) {
  const int64_t total = d.N * d.C * d.P * d.Q;
  EMBER_POOL_LOOP(i, total) {
    int64_t n, c, p, q;
    unravel<CL>(i, d.C, d.P, d.Q, n, c, p, q);
    const int64_t h0 = pool::bin_start(p, d.H, d.P), h1 = pool::bin_end(p, d.H, d.P);
    const int64_t w0 = pool::bin_start(q, d.W, d.Q), w1 = pool::bin_end(q, d.W, d.Q);
    acc_t<T> s = 0;
    for (int64_t h = h0; h < h1; ++h)
      for (int64_t w = w0; w < w1; ++w) s += static_cast<acc_t<T>>(x[offset<CL>(n, c, h, w, d.C, d.H, d.W)]);
    y[i] = static_cast<T>(s / static_cast<acc_t<T>>((h1 - h0) * (w1 - w0)));
  }
}

// NCHW global average: one warp per (n, c) plane.
template <class T>
__global__ void global_avg_nchw_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t planes, int64_t HW) {
  const int lane = threadIdx.x % 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / 32);
  for (int64_t pl = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + threadIdx.x / 32; pl < planes; pl += warps) {
    const T* p = x + pl * HW;
    acc_t<T> s = 0;
    for (int64_t i = lane; i < HW; i += 32) s += static_cast<acc_t<T>>(p[i]);
    EMBER_UNROLL
    for (int off = 16; off > 0; off >>= 1) s += __shfl_down_sync(0xffffffffu, s, off);
    if (lane == 0) y[pl] = static_cast<T>(s / static_cast<acc_t<T>>(HW));
  }
}

template <class T, bool CL>
__global__ void adaptive_backward_kernel(const T* __restrict__ gy, T* __restrict__ dx, Dims d) {
  const int64_t total = d.N * d.C * d.H * d.W;
  EMBER_POOL_LOOP(i, total) {
    int64_t n, c, h, w;
    unravel<CL>(i, d.C, d.H, d.W, n, c, h, w);
    int64_t p0, p1, q0, q1;
    pool::bins_covering(h, d.H, d.P, p0, p1);
    pool::bins_covering(w, d.W, d.Q, q0, q1);
    acc_t<T> acc = 0;
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t h0 = pool::bin_start(p, d.H, d.P), h1 = pool::bin_end(p, d.H, d.P);
      if (h < h0 || h >= h1) continue;
      for (int64_t q = q0; q < q1; ++q) {
        const int64_t w0 = pool::bin_start(q, d.W, d.Q), w1 = pool::bin_end(q, d.W, d.Q);
        if (w < w0 || w >= w1) continue;
        acc += static_cast<acc_t<T>>(gy[offset<CL>(n, c, p, q, d.C, d.P, d.Q)]) /
               static_cast<acc_t<T>>((h1 - h0) * (w1 - w0));
      }
    }
    dx[i] = static_cast<T>(acc);
  }
}

// ---- launchers ----

template <class F>
void dispatch(DType t, const char* op, const F& f) {
  switch (t) {
    case DType::f32: f(float{}); break;
    case DType::f64: f(double{}); break;
    case DType::f16: f(Half{}); break;
    case DType::bf16: f(BFloat16{}); break;
    default: EMBER_FAIL(op, ": expects a floating dtype, got ", t);
  }
}

template <class T>
const T* cp(const Tensor& t) {
  return static_cast<const T*>(t.data_ptr());
}
template <class T>
T* mp(const Tensor& t) {
  return static_cast<T*>(t.data_ptr());
}

// Runs `launch(bool_constant<CL>, grid, stream)` for `n` threads' worth of elements.
template <class F>
void launch_elems(const Tensor& out, int64_t n, bool cl, const F& launch) {
  if (n == 0) return;
  cuda::DeviceGuard scope(out.device().index);
  const unsigned grid = cuda::grid_for(n, 256, out.device().index);
  cudaStream_t st = cuda::stream_for(out);
  if (cl) launch(std::true_type{}, grid, st);
  else launch(std::false_type{}, grid, st);
}

void max_pool2d_cuda(const KernelCall& c) {
  const bool cl = runs_channels_last(c.in[0]);
  Tensor x = contiguous_as(c.in[0], cl);
  Dims d = dims_of(pool_geometry("max_pool2d", x.shape(), c.attr<PoolAttrs>()));
  dispatch(x.dtype(), "max_pool2d", [&](auto tag) {
    using T = decltype(tag);
    launch_elems(c.out[0], c.out[0].numel(), cl, [&](auto CL, unsigned grid, cudaStream_t st) {
      cuda::launch(max_pool_kernel<T, decltype(CL)::value>, grid, 256, 0, st, cp<T>(x), mp<T>(c.out[0]),
                   mp<int64_t>(c.out[1]), d);
    });
  });
}

PoolGeom backward_geom(const char* op, const KernelCall& c) {
  const auto& a = c.attr<PoolAttrs>();
  return pool_geometry(op, {c.in[0].shape()[0], c.in[0].shape()[1], a.size[0], a.size[1]}, a);
}

void max_pool2d_backward_cuda(const KernelCall& c) {
  const bool cl = runs_channels_last(c.in[0]);
  Tensor gy = contiguous_as(c.in[0], cl), ind = contiguous_as(c.in[1], cl);
  Dims d = dims_of(backward_geom("max_pool2d_backward", c));
  dispatch(gy.dtype(), "max_pool2d_backward", [&](auto tag) {
    using T = decltype(tag);
    launch_elems(c.out[0], c.out[0].numel(), cl, [&](auto CL, unsigned grid, cudaStream_t st) {
      cuda::launch(max_pool_backward_kernel<T, decltype(CL)::value>, grid, 256, 0, st, cp<T>(gy), cp<int64_t>(ind),
                   mp<T>(c.out[0]), d);
    });
  });
}

// Average pooling and its gradient read one tensor and write one, with the same geometry.
template <bool Backward>
void avg_pool2d_cuda(const KernelCall& c) {
  const char* op = Backward ? "avg_pool2d_backward" : "avg_pool2d";
  const bool cl = runs_channels_last(c.in[0]);
  Tensor in = contiguous_as(c.in[0], cl);  // x, or grad_output
  Dims d = dims_of(Backward ? backward_geom(op, c) : pool_geometry(op, in.shape(), c.attr<PoolAttrs>()));
  dispatch(in.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    launch_elems(c.out[0], c.out[0].numel(), cl, [&](auto CL, unsigned grid, cudaStream_t st) {
      constexpr bool kCL = decltype(CL)::value;
      auto* kernel = Backward ? avg_pool_backward_kernel<T, kCL> : avg_pool_kernel<T, kCL>;
      cuda::launch(kernel, grid, 256, 0, st, cp<T>(in), mp<T>(c.out[0]), d);
    });
  });
}

void adaptive_cuda(const KernelCall& c) {
  const bool cl = runs_channels_last(c.in[0]);
  Tensor x = contiguous_as(c.in[0], cl);
  PoolGeom g = adaptive_geometry("adaptive_avg_pool2d", x.shape(), c.attr<AdaptivePoolAttrs>());
  Dims d = dims_of(g);
  const Tensor& y = c.out[0];
  if (y.numel() == 0) return;
  dispatch(x.dtype(), "adaptive_avg_pool2d", [&](auto tag) {
    using T = decltype(tag);
    if (!cl && g.P == 1 && g.Q == 1 && g.H * g.W >= pool::kLaneSumMinValues) {
      cuda::DeviceGuard scope(y.device().index);
      const int64_t planes = g.N * g.C;
      const unsigned grid = cuda::grid_for(planes * 32, 256, y.device().index);
      cuda::launch(global_avg_nchw_kernel<T>, grid, 256, 0, cuda::stream_for(y), cp<T>(x), mp<T>(y), planes, g.H * g.W);
      return;
    }
    launch_elems(y, y.numel(), cl, [&](auto CL, unsigned grid, cudaStream_t st) {
      cuda::launch(adaptive_kernel<T, decltype(CL)::value>, grid, 256, 0, st, cp<T>(x), mp<T>(y), d);
    });
  });
}

void adaptive_backward_cuda(const KernelCall& c) {
  const bool cl = runs_channels_last(c.in[0]);
  Tensor gy = contiguous_as(c.in[0], cl);
  const auto& a = c.attr<AdaptivePoolAttrs>();
  Dims d = dims_of(
      adaptive_geometry("adaptive_avg_pool2d_backward", {gy.shape()[0], gy.shape()[1], a.size[0], a.size[1]}, a));
  dispatch(gy.dtype(), "adaptive_avg_pool2d_backward", [&](auto tag) {
    using T = decltype(tag);
    launch_elems(c.out[0], c.out[0].numel(), cl, [&](auto CL, unsigned grid, cudaStream_t st) {
      cuda::launch(adaptive_backward_kernel<T, decltype(CL)::value>, grid, 256, 0, st, cp<T>(gy), mp<T>(c.out[0]), d);
    });
  });
}

#if EMBER_WITH_CUDNN
// cuDNN's average pooling forward (cudnnPoolingForward, AVERAGE_COUNT_INCLUDE/EXCLUDE_PADDING, which
// are count_include_pad), the vendor variant to compare against. Descriptors carry the packed
// strides of the layout (NCHW or channels-last). Max pooling has no cuDNN variant: cuDNN does not return the argmax
// indices the backward op reads.
// From the input alone: `supports` may see placeholder outputs (a valid non-empty input always
// has a non-empty output, infer() saw to that).
bool cudnn_avg_ok(const KernelCall& c) {
  const Tensor& x = c.in[0];
  return x.numel() > 0 && x.numel() <= 0x7fffffff && x.dtype() != DType::bf16;
}

// `t` is dense in its layout (contiguous_as, or allocated so); the descriptor gets that layout's
// packed strides, not t's own: ember's contiguity ignores a size-1 dimension's stride (a view of
// one image or channel keeps the batch's), cuDNN's does not (Note [cuDNN layouts from strides] in
// sim/libs/cudnn_common.cpp).
void nchw_desc(cudnn::TensorDesc& d, const Tensor& t, bool channels_last) {
  EMBER_CHECK(channels_last ? t.is_channels_last() : t.is_contiguous(), "cuDNN avg_pool2d: ", t.describe(),
              " is not dense in the ", channels_last ? "channels-last" : "NCHW", " layout");
  const Shape& s = t.shape();
  const int64_t size[4] = {s[0], s[1], s[2], s[3]};
  const Strides packed = channels_last ? channels_last_strides(s) : contiguous_strides(s);
  const int64_t stride[4] = {packed[0], packed[1], packed[2], packed[3]};
  d.set(t.dtype(), size, stride, "cuDNN avg_pool2d");
}

struct PoolingDesc {
  cudnnPoolingDescriptor_t d = nullptr;
  PoolingDesc() { EMBER_CUDNN_CHECK(cudnnCreatePoolingDescriptor(&d)); }
  ~PoolingDesc() { cudnnDestroyPoolingDescriptor(d); }
  PoolingDesc(const PoolingDesc&) = delete;
  PoolingDesc& operator=(const PoolingDesc&) = delete;
};

void avg_pool2d_cudnn(const KernelCall& c) {
  const bool cl = runs_channels_last(c.in[0]);
  const Tensor x = contiguous_as(c.in[0], cl);
  const Tensor& y = c.out[0];
  const auto& a = c.attr<PoolAttrs>();
  cuda::DeviceGuard scope(x.device().index);
  cudnnHandle_t h = cudnn::handle_for(x.device().index, cuda::stream_for(x));
  cudnn::TensorDesc xd, yd;
  nchw_desc(xd, x, cl);
  nchw_desc(yd, y, cl);
  PoolingDesc pd;
  const cudnnPoolingMode_t mode =
      a.count_include_pad ? CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING : CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING;
  EMBER_CUDNN_CHECK(cudnnSetPooling2dDescriptor(pd.d, mode, CUDNN_PROPAGATE_NAN, static_cast<int>(a.kernel[0]),
                                                static_cast<int>(a.kernel[1]), static_cast<int>(a.padding[0]),
                                                static_cast<int>(a.padding[1]), static_cast<int>(a.stride[0]),
                                                static_cast<int>(a.stride[1])));
  const double one_d = 1, zero_d = 0;
  const float one_f = 1, zero_f = 0;
  const bool dbl = x.dtype() == DType::f64;
  EMBER_CUDNN_CHECK(cudnnPoolingForward(h, pd.d, dbl ? static_cast<const void*>(&one_d) : &one_f, xd.d, x.data_ptr(),
                                        dbl ? static_cast<const void*>(&zero_d) : &zero_f, yd.d, y.data_ptr()));
}
#endif

}  // namespace

void register_cuda_max_pool2d(OpInfo& info) {
  info.add_variant({.name = "cuda",
                    .device = DeviceType::cuda,
                    .fn = max_pool2d_cuda,
                    .dtypes = kFloatTypes,
                    .note = "thread per output, first maximum, NCHW or channels-last"});
}
void register_cuda_max_pool2d_backward(OpInfo& info) {
  info.add_variant({.name = "cuda",
                    .device = DeviceType::cuda,
                    .fn = max_pool2d_backward_cuda,
                    .dtypes = kFloatTypes,
                    .note = "gather: thread per input element over its covering windows (no atomics)"});
}
void register_cuda_avg_pool2d(OpInfo& info) {
  info.add_variant({.name = "cuda",
                    .device = DeviceType::cuda,
                    .fn = avg_pool2d_cuda<false>,
                    .dtypes = kFloatTypes,
                    .note = "thread per output"});
#if EMBER_WITH_CUDNN
  info.add_variant({.name = "cudnn",
                    .device = DeviceType::cuda,
                    .fn = avg_pool2d_cudnn,
                    .dtypes = DTypeSet{DType::f32, DType::f64, DType::f16},
                    .flags = kVendor,
                    .supports = cudnn_avg_ok,
                    .note = "cudnnPoolingForward (AVERAGE, count_include_pad as the mode)"});
#endif
}
void register_cuda_avg_pool2d_backward(OpInfo& info) {
  info.add_variant({.name = "cuda",
                    .device = DeviceType::cuda,
                    .fn = avg_pool2d_cuda<true>,
                    .dtypes = kFloatTypes,
                    .note = "gather: thread per input element (no atomics)"});
}
void register_cuda_adaptive_avg_pool2d(OpInfo& info) {
  info.add_variant({.name = "cuda",
                    .device = DeviceType::cuda,
                    .fn = adaptive_cuda,
                    .dtypes = kFloatTypes,
                    .note = "thread per output; NCHW 1x1: warp per plane"});
}
void register_cuda_adaptive_avg_pool2d_backward(OpInfo& info) {
  info.add_variant({.name = "cuda",
                    .device = DeviceType::cuda,
                    .fn = adaptive_backward_cuda,
                    .dtypes = kFloatTypes,
                    .note = "gather: thread per input element (no atomics)"});
}

}  // namespace ember
