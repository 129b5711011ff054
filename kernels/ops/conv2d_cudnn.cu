// cuDNN variants of the three convolution ops (legacy API: cudnnConvolutionForward /
// BackwardData / BackwardFilter), registered as kVendor so "ours vs vendor" is one bench command.
//
// - Algorithm: cudnnGet*Algorithm_v7 (heuristics: no sync, no allocation) by default; with
//   EMBER_CUDNN_BENCHMARK=1, cudnnFind*AlgorithmEx times the candidates once per shape (it
//   synchronises: the cudnn.benchmark idea; heuristics instead while a graph is being captured). Either way the choice
//   is cached per shape, dtype, layout and determinism requirement, and the first usable algorithm wins: status
//   success, workspace <= 1 GiB, deterministic unless the variant is cudnn_nondet (kNondeterministic, so deterministic
//   mode never picks it), and for f32 no tensor-op (TF32) math.
// - Math: CUDNN_FMA_MATH for f32 (no TF32: results comparable with the CPU reference) and
//   CUDNN_DEFAULT_MATH for f64; for f16/bf16 the math type the algorithm was listed with, compute
//   type float (cuDNN may still keep f16 partial sums: Note [cuDNN f16 partial sums] in
//   tests/op_samples/conv2d_samples.cpp). An f32 entry listed with another math type runs with
//   FMA math, so its workspace is asked again for FMA math: the listed size was for the listed
//   math type's kernels.
// - Layouts: tensor descriptors carry the real strides (NCHW or channels-last); the filter is KCRS
//   (format NCHW) or KRSC (format NHWC) to match.
// - Handles: one per (thread, device), returned to a pool when the thread ends; the stream is set
//   on every call. Workspace comes from the caching allocator (empty()).
// - Bias: added by a small kernel of ours after the convolution.
#include "core/cuda/device_guard.h"
#include "core/cuda/kernel.cuh"
#include "kernels/common/current_stream.cuh"
#include "kernels/common/grid_size.cuh"
#include "kernels/ops/conv2d_cuda.h"

#if EMBER_WITH_CUDNN

#include <cudnn.h>

#include "kernels/common/cudnn_utils.h"

#include <cstdio>
#include <map>
#include <string>
#include <mutex>
#include <tuple>
#include <vector>

#include "core/runtime.h"
#include "kernels/common/memory_format.h"

namespace ember::convcuda {

namespace {

using cudnn::handle_for;
using cudnn::TensorDesc;
cudnnDataType_t data_type(DType t) { return cudnn::data_type(t, "cuDNN convolution"); }

// ---- descriptors ----

struct FilterDesc {
  cudnnFilterDescriptor_t d = nullptr;
  FilterDesc() { EMBER_CUDNN_CHECK(cudnnCreateFilterDescriptor(&d)); }
  ~FilterDesc() { cudnnDestroyFilterDescriptor(d); }
  FilterDesc(const FilterDesc&) = delete;
  FilterDesc& operator=(const FilterDesc&) = delete;
};

struct ConvDesc {
  cudnnConvolutionDescriptor_t d = nullptr;
  ConvDesc() { EMBER_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&d)); }
  ~ConvDesc() { cudnnDestroyConvolutionDescriptor(d); }
  ConvDesc(const ConvDesc&) = delete;
  ConvDesc& operator=(const ConvDesc&) = delete;
};

cudnnMathType_t math_type(DType t) {
  if (t == DType::f32) return CUDNN_FMA_MATH;  // never TF32
  if (t == DType::f64) return CUDNN_DEFAULT_MATH;
  return CUDNN_TENSOR_OP_MATH;
}

// Every descriptor of one convolution.
struct Descs {
  TensorDesc x, y;
  FilterDesc w;
  ConvDesc conv;
  Descs(const ConvGeom& g, DType t) {
    const int64_t N = g.N, C = g.C, H = g.H, W = g.W, K = g.K, P = g.P, Q = g.Q;
    if (g.channels_last) {
      x.set(t, {N, C, H, W}, {H * W * C, 1, W * C, C});
      y.set(t, {N, K, P, Q}, {P * Q * K, 1, Q * K, K});
    } else {
      x.set(t, {N, C, H, W}, {C * H * W, H * W, W, 1});
      y.set(t, {N, K, P, Q}, {K * P * Q, P * Q, Q, 1});
    }
    EMBER_CUDNN_CHECK(cudnnSetFilter4dDescriptor(
        w.d, data_type(t), g.channels_last ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW, static_cast<int>(g.K),
        static_cast<int>(g.Cg), static_cast<int>(g.R), static_cast<int>(g.S)));
    EMBER_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(
        conv.d, static_cast<int>(g.ph), static_cast<int>(g.pw), static_cast<int>(g.sh), static_cast<int>(g.sw),
        static_cast<int>(g.dh), static_cast<int>(g.dw), CUDNN_CROSS_CORRELATION,
        t == DType::f64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT));
    EMBER_CUDNN_CHECK(cudnnSetConvolutionGroupCount(conv.d, static_cast<int>(g.G)));
    EMBER_CUDNN_CHECK(cudnnSetConvolutionMathType(conv.d, math_type(t)));
  }
};

// ---- algorithm choice, cached per shape ----

struct Choice {
  int algo = -1;  // -1: cuDNN has no usable algorithm for this shape
  size_t workspace = 0;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
};

using Key = std::tuple<int, int, int, bool, bool, std::vector<int64_t>>;

Key make_key(ConvDirection kind, int device, DType t, const ConvGeom& g, bool nondet) {
  return {static_cast<int>(kind), device, static_cast<int>(t),
          g.channels_last,        nondet, {g.N, g.C, g.H, g.W, g.K, g.R, g.S, g.G, g.sh, g.sw, g.ph, g.pw, g.dh, g.dw}};
}

std::mutex g_cache_mu;
std::map<Key, Choice>& cache() {
  static auto* m = new std::map<Key, Choice>();
  return *m;
}

constexpr size_t kMaxWorkspace = size_t{1} << 30;

bool benchmark_mode() {
  static const bool on = runtime::env("EMBER_CUDNN_BENCHMARK") == "1";
  return on;
}

// FFT and non-fused Winograd compute through transforms whose error grows with the inputs'
// magnitude, not the output's: an H200 run had f32 weight gradients at MNIST batch 64 up to 2%
// off the CPU's in elements near zero. ember's kernels and the CPU sum the products directly, so
// the cuDNN variants keep to the GEMM-like algorithms.
bool lossy(cudnnConvolutionFwdAlgo_t a) {
  return a == CUDNN_CONVOLUTION_FWD_ALGO_FFT || a == CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING ||
         a == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED;
}
bool lossy(cudnnConvolutionBwdDataAlgo_t a) {
  return a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT || a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING ||
         a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED;
}
bool lossy(cudnnConvolutionBwdFilterAlgo_t a) {
  return a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT || a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING ||
         a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED;
}

// EMBER_VENDOR_LOG=1 prints every candidate cuDNN listed and the one taken (stderr), for telling
// which algorithm produced a vendor variant's numbers on a user's GPU.
bool vendor_log() {
  static const bool on = runtime::env("EMBER_VENDOR_LOG") == "1";
  return on;
}

// The workspace `algo` needs with the math type `d` has now (FMA for f32); false when cuDNN does
// not run `algo` with it.
bool workspace_for(ConvDirection kind, cudnnHandle_t h, Descs& d, int algo, size_t* bytes) {
  cudnnStatus_t st = CUDNN_STATUS_NOT_SUPPORTED;
  switch (kind) {
    case ConvDirection::forward:
      st = cudnnGetConvolutionForwardWorkspaceSize(h, d.x.d, d.w.d, d.conv.d, d.y.d,
                                                   static_cast<cudnnConvolutionFwdAlgo_t>(algo), bytes);
      break;
    case ConvDirection::backward_input:
      st = cudnnGetConvolutionBackwardDataWorkspaceSize(h, d.w.d, d.y.d, d.conv.d, d.x.d,
                                                        static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), bytes);
      break;
    case ConvDirection::backward_weight:
      st = cudnnGetConvolutionBackwardFilterWorkspaceSize(h, d.x.d, d.y.d, d.conv.d, d.w.d,
                                                          static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo), bytes);
      break;
  }
  return st == CUDNN_STATUS_SUCCESS;
}

template <class Perf>
Choice pick(const Perf* perf, int n, DType t, bool nondet, const char* what, ConvDirection kind, cudnnHandle_t h,
            Descs& d) {
  Choice c;
  for (int i = 0; i < n && c.algo < 0; ++i) {
    const Perf& p = perf[i];
    if (vendor_log())
      std::fprintf(stderr,
                   "ember vendor: cuDNN %s %s candidate algo %d status %d determinism %d math %d workspace %zu\n", what,
                   std::string(dtype_name(t)).c_str(), static_cast<int>(p.algo), static_cast<int>(p.status),
                   static_cast<int>(p.determinism), static_cast<int>(p.mathType), p.memory);
    if (p.status != CUDNN_STATUS_SUCCESS) continue;
    if (!nondet && p.determinism != CUDNN_DETERMINISTIC) continue;
    if (t == DType::f32 && p.mathType != CUDNN_FMA_MATH && p.mathType != CUDNN_DEFAULT_MATH) continue;
    if (lossy(p.algo)) continue;
    // f32 runs with FMA math whatever the heuristic listed (CUDNN_DEFAULT_MATH lets cuDNN use TF32
    // on sm_80+), and the workspace is the one FMA math needs
    size_t memory = p.memory;
    if (t == DType::f32 && p.mathType != CUDNN_FMA_MATH &&
        !workspace_for(kind, h, d, static_cast<int>(p.algo), &memory))
      continue;
    if (memory > kMaxWorkspace) continue;
    c = {static_cast<int>(p.algo), memory, t == DType::f32 ? CUDNN_FMA_MATH : p.mathType};
  }
  if (vendor_log())
    std::fprintf(stderr, "ember vendor: cuDNN %s %s took algo %d math %d\n", what, std::string(dtype_name(t)).c_str(),
                 c.algo, static_cast<int>(c.math));
  return c;
}

// The operand pointers, for the Find (benchmark) path, which runs the candidates on real buffers.
struct Ptrs {
  const void* x = nullptr;
  const void* w = nullptr;
  const void* y = nullptr;
  void* out = nullptr;
};

Choice choose(ConvDirection kind, cudnnHandle_t h, Descs& d, DType t, bool nondet, const Ptrs* bufs, Device dev) {
  constexpr int kMax = 16;
  int n = 0;
  // Find times the candidates and synchronises: never while a CUDA graph is being captured
  if (bufs != nullptr && benchmark_mode() && !cuda::current_stream(dev.index).is_capturing()) {
    Tensor ws = empty({static_cast<int64_t>(kMaxWorkspace / 4)}, TensorOptions().dtype(DType::u8).device(dev));
    const size_t wss = kMaxWorkspace / 4;
    switch (kind) {
      case ConvDirection::forward: {
        cudnnConvolutionFwdAlgoPerf_t perf[kMax];
        EMBER_CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(h, d.x.d, bufs->x, d.w.d, bufs->w, d.conv.d, d.y.d,
                                                                 bufs->out, kMax, &n, perf, ws.data_ptr(), wss));
        return pick(perf, n, t, nondet, "forward", kind, h, d);
      }
      case ConvDirection::backward_input: {
        cudnnConvolutionBwdDataAlgoPerf_t perf[kMax];
        EMBER_CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(
            h, d.w.d, bufs->w, d.y.d, bufs->y, d.conv.d, d.x.d, bufs->out, kMax, &n, perf, ws.data_ptr(), wss));
        return pick(perf, n, t, nondet, "backward-data", kind, h, d);
      }
      case ConvDirection::backward_weight: {
        cudnnConvolutionBwdFilterAlgoPerf_t perf[kMax];
        EMBER_CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(
            h, d.x.d, bufs->x, d.y.d, bufs->y, d.conv.d, d.w.d, bufs->out, kMax, &n, perf, ws.data_ptr(), wss));
        return pick(perf, n, t, nondet, "backward-filter", kind, h, d);
      }
    }
  }
  switch (kind) {
    case ConvDirection::forward: {
      cudnnConvolutionFwdAlgoPerf_t perf[kMax];
      EMBER_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(h, d.x.d, d.w.d, d.conv.d, d.y.d, kMax, &n, perf));
      return pick(perf, n, t, nondet, "forward", kind, h, d);
    }
    case ConvDirection::backward_input: {
      cudnnConvolutionBwdDataAlgoPerf_t perf[kMax];
      EMBER_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, d.w.d, d.y.d, d.conv.d, d.x.d, kMax, &n, perf));
      return pick(perf, n, t, nondet, "backward-data", kind, h, d);
    }
    case ConvDirection::backward_weight: {
      cudnnConvolutionBwdFilterAlgoPerf_t perf[kMax];
      EMBER_CUDNN_CHECK(
          cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, d.x.d, d.y.d, d.conv.d, d.w.d, kMax, &n, perf));
      return pick(perf, n, t, nondet, "backward-filter", kind, h, d);
    }
  }
  return {};
}

Choice cached_choice(ConvDirection kind, const ConvGeom& g, DType t, bool nondet, Device dev, cudnnHandle_t h, Descs& d,
                     const Ptrs* bufs) {
  Key key = make_key(kind, dev.index, t, g, nondet);
  {
    std::lock_guard<std::mutex> lock(g_cache_mu);
    auto it = cache().find(key);
    if (it != cache().end()) return it->second;
  }
  if (vendor_log())
    std::fprintf(
        stderr,
        "ember vendor: cuDNN conv2d N=%lld C=%lld H=%lld W=%lld K=%lld R=%lld S=%lld groups=%lld stride %lldx%lld "
        "pad %lldx%lld dilation %lldx%lld%s%s\n",
        (long long)g.N, (long long)g.C, (long long)g.H, (long long)g.W, (long long)g.K, (long long)g.R, (long long)g.S,
        (long long)g.G, (long long)g.sh, (long long)g.sw, (long long)g.ph, (long long)g.pw, (long long)g.dh,
        (long long)g.dw, g.channels_last ? " channels-last" : "", nondet ? " nondeterministic allowed" : "");
  Choice c = choose(kind, h, d, t, nondet, bufs, dev);
  std::lock_guard<std::mutex> lock(g_cache_mu);
  cache()[key] = c;
  return c;
}

// ---- bias (ours: one add per output element) ----

template <class T>
__global__ void add_bias_kernel(T* __restrict__ y, const T* __restrict__ b, int64_t n, int64_t K, int64_t PQ, bool cl) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t k = cl ? i % K : (i / PQ) % K;
    y[i] = static_cast<T>(static_cast<float>(y[i]) + static_cast<float>(b[k]));
  }
}
template <>
__global__ void add_bias_kernel<double>(double* __restrict__ y, const double* __restrict__ b, int64_t n, int64_t K,
                                        int64_t PQ, bool cl) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t k = cl ? i % K : (i / PQ) % K;
    y[i] += b[k];
  }
}

void add_bias(const ConvArgs& a) {
  const int64_t n = a.y.numel();
  if (!a.b.defined() || n == 0) return;
  const unsigned grid = cuda::grid_for(n, 256, a.y.device().index);
  cudaStream_t st = cuda::stream_for(a.y);
  const int64_t PQ = a.g.P * a.g.Q;
  switch (a.y.dtype()) {
    case DType::f32:
      cuda::launch(add_bias_kernel<float>, grid, 256, 0, st, static_cast<float*>(a.y.data_ptr()),
                   static_cast<const float*>(a.b.data_ptr()), n, a.g.K, PQ, a.g.channels_last);
      break;
    case DType::f64:
      cuda::launch(add_bias_kernel<double>, grid, 256, 0, st, static_cast<double*>(a.y.data_ptr()),
                   static_cast<const double*>(a.b.data_ptr()), n, a.g.K, PQ, a.g.channels_last);
      break;
    case DType::f16:
      cuda::launch(add_bias_kernel<Half>, grid, 256, 0, st, static_cast<Half*>(a.y.data_ptr()),
                   static_cast<const Half*>(a.b.data_ptr()), n, a.g.K, PQ, a.g.channels_last);
      break;
    case DType::bf16:
      cuda::launch(add_bias_kernel<BFloat16>, grid, 256, 0, st, static_cast<BFloat16*>(a.y.data_ptr()),
                   static_cast<const BFloat16*>(a.b.data_ptr()), n, a.g.K, PQ, a.g.channels_last);
      break;
    default: EMBER_FAIL("conv2d cudnn: unsupported dtype ", a.y.dtype());
  }
}

// ---- running one op ----

struct Scalars {
  float f1 = 1.f, f0 = 0.f;
  double d1 = 1.0, d0 = 0.0;
  const void* one(DType t) const { return t == DType::f64 ? static_cast<const void*>(&d1) : &f1; }
  const void* zero(DType t) const { return t == DType::f64 ? static_cast<const void*>(&d0) : &f0; }
};

std::string shape_text(const ConvGeom& g) {
  return str("input [", g.N, ", ", g.C, ", ", g.H, ", ", g.W, "], weight [", g.K, ", ", g.Cg, ", ", g.R, ", ", g.S,
             "], stride (", g.sh, ", ", g.sw, "), padding (", g.ph, ", ", g.pw, "), dilation (", g.dh, ", ", g.dw,
             "), groups ", g.G, g.channels_last ? ", channels-last" : "");
}

void run(ConvDirection kind, const ConvArgs& a, DType t, bool nondet) {
  const ConvGeom& g = a.g;
  const Tensor& out = kind == ConvDirection::forward ? a.y : kind == ConvDirection::backward_input ? a.x : a.w;
  if (out.numel() == 0) return;
  if (g.N == 0) {  // the weight gradient of an empty batch
    Tensor o = out;
    o.zero_();
    return;
  }
  cuda::DeviceGuard scope(out.device().index);
  cudaStream_t st = cuda::stream_for(out);
  cudnnHandle_t h = handle_for(out.device().index, st);
  Descs d(g, t);
  Ptrs bufs;
  bufs.x = kind == ConvDirection::backward_input ? nullptr : a.x.data_ptr();
  bufs.w = kind == ConvDirection::backward_weight ? nullptr : a.w.data_ptr();
  bufs.y = kind == ConvDirection::forward ? nullptr : a.y.data_ptr();
  bufs.out = out.data_ptr();
  Choice c = cached_choice(kind, g, t, nondet, out.device(), h, d, &bufs);
  EMBER_CHECK(c.algo >= 0, "cuDNN has no usable ", nondet ? "" : "deterministic ", "algorithm for this convolution (",
              shape_text(g), ", ", t, ")");
  EMBER_CUDNN_CHECK(cudnnSetConvolutionMathType(d.conv.d, c.math));
  Tensor ws;
  void* wsp = nullptr;
  if (c.workspace > 0) {
    ws = empty({static_cast<int64_t>(c.workspace)}, TensorOptions().dtype(DType::u8).device(out.device()));
    wsp = ws.data_ptr();
  }
  Scalars s;
  switch (kind) {
    case ConvDirection::forward:
      EMBER_CUDNN_CHECK(cudnnConvolutionForward(h, s.one(t), d.x.d, a.x.data_ptr(), d.w.d, a.w.data_ptr(), d.conv.d,
                                                static_cast<cudnnConvolutionFwdAlgo_t>(c.algo), wsp, c.workspace,
                                                s.zero(t), d.y.d, a.y.data_ptr()));
      add_bias(a);
      break;
    case ConvDirection::backward_input:
      EMBER_CUDNN_CHECK(cudnnConvolutionBackwardData(h, s.one(t), d.w.d, a.w.data_ptr(), d.y.d, a.y.data_ptr(),
                                                     d.conv.d, static_cast<cudnnConvolutionBwdDataAlgo_t>(c.algo), wsp,
                                                     c.workspace, s.zero(t), d.x.d, a.x.data_ptr()));
      break;
    case ConvDirection::backward_weight:
      EMBER_CUDNN_CHECK(cudnnConvolutionBackwardFilter(h, s.one(t), d.x.d, a.x.data_ptr(), d.y.d, a.y.data_ptr(),
                                                       d.conv.d, static_cast<cudnnConvolutionBwdFilterAlgo_t>(c.algo),
                                                       wsp, c.workspace, s.zero(t), d.w.d, a.w.data_ptr()));
      break;
  }
}

// Whether cuDNN has an algorithm (heuristics only: cheap, cached); the geometry comes from the
// inputs and attributes (the call's outputs may be placeholders).
bool has_algorithm(ConvDirection kind, const ConvGeom& g, DType t, bool nondet, Device dev) {
  if (!fits_int32(g)) return false;
  if (g.N == 0) return true;
  Key key = make_key(kind, dev.index, t, g, nondet);
  {
    std::lock_guard<std::mutex> lock(g_cache_mu);
    auto it = cache().find(key);
    if (it != cache().end()) return it->second.algo >= 0;
  }
  if (benchmark_mode()) return true;  // the Find at the first call decides (and reports)
  cuda::DeviceGuard scope(dev.index);
  cudnnHandle_t h = handle_for(dev.index, cuda::stream_for(dev));
  Descs d(g, t);
  return cached_choice(kind, g, t, nondet, dev, h, d, nullptr).algo >= 0;
}

DType floating_dtype(const KernelCall& c) { return c.in[0].dtype(); }

ConvGeom geom_fwd(const KernelCall& c) {
  ConvGeom g = conv_geometry("conv2d", c.in[0].shape(), c.in[1].shape(), c.attr<Conv2dAttrs>());
  g.channels_last = runs_channels_last(c.in[0]);
  return g;
}
ConvGeom geom_bwd_data(const KernelCall& c) {
  const auto& a = c.attr<Conv2dAttrs>();
  const Shape& gy = c.in[0].shape();
  const Shape& w = c.in[1].shape();
  ConvGeom g = conv_geometry("conv2d_backward_input", {gy[0], w[1] * a.conv.groups, a.size[0], a.size[1]}, w, a);
  g.channels_last = runs_channels_last(c.in[0]);
  return g;
}
ConvGeom geom_bwd_filter(const KernelCall& c) {
  const auto& a = c.attr<Conv2dAttrs>();
  const Shape& gy = c.in[0].shape();
  const Shape& x = c.in[1].shape();
  ConvGeom g = conv_geometry("conv2d_backward_weight", x, {gy[1], x[1] / a.conv.groups, a.size[0], a.size[1]}, a);
  g.channels_last = runs_channels_last(c.in[1]);
  return g;
}

void cudnn_forward(const KernelCall& c) { run(ConvDirection::forward, forward_args(c), floating_dtype(c), false); }
void cudnn_backward_data(const KernelCall& c) {
  run(ConvDirection::backward_input, backward_input_args(c), floating_dtype(c), false);
}
void cudnn_backward_data_nondet(const KernelCall& c) {
  run(ConvDirection::backward_input, backward_input_args(c), floating_dtype(c), true);
}
void cudnn_backward_filter(const KernelCall& c) {
  conv_bias_grad_apart(c);  // Note [conv bias gradient]
  run(ConvDirection::backward_weight, backward_weight_args(c), floating_dtype(c), false);
}
void cudnn_backward_filter_nondet(const KernelCall& c) {
  conv_bias_grad_apart(c);  // Note [conv bias gradient]
  run(ConvDirection::backward_weight, backward_weight_args(c), floating_dtype(c), true);
}

constexpr DTypeSet kCudnnTypes{DType::f32, DType::f64, DType::f16, DType::bf16};

}  // namespace

void register_cudnn_forward(OpInfo& info) {
  info.add_variant({.name = "cudnn",
                    .device = DeviceType::cuda,
                    .fn = cudnn_forward,
                    .dtypes = kCudnnTypes,
                    .flags = kVendor,
                    .supports =
                        [](const KernelCall& c) {
                          return has_algorithm(ConvDirection::forward, geom_fwd(c), floating_dtype(c), false,
                                               c.in[0].device());
                        },
                    .note = "cudnnConvolutionForward, algorithm from Get_v7 (or Find) cached per shape, no TF32"});
}

void register_cudnn_backward_input(OpInfo& info) {
  info.add_variant({.name = "cudnn",
                    .device = DeviceType::cuda,
                    .fn = unpool_apart<cudnn_backward_data>,
                    .dtypes = kCudnnTypes,
                    .flags = kVendor,
                    .supports =
                        [](const KernelCall& c) {
                          return has_algorithm(ConvDirection::backward_input, geom_bwd_data(c), floating_dtype(c),
                                               false, c.in[0].device());
                        },
                    .note = "cudnnConvolutionBackwardData, deterministic algorithms only"});
  info.add_variant({.name = "cudnn_nondet",
                    .device = DeviceType::cuda,
                    .fn = unpool_apart<cudnn_backward_data_nondet>,
                    .dtypes = kCudnnTypes,
                    .flags = kVendor | kNondeterministic,
                    .supports =
                        [](const KernelCall& c) {
                          return has_algorithm(ConvDirection::backward_input, geom_bwd_data(c), floating_dtype(c), true,
                                               c.in[0].device());
                        },
                    .note = "cudnnConvolutionBackwardData, any algorithm (may use atomics)"});
}

void register_cudnn_backward_weight(OpInfo& info) {
  info.add_variant({.name = "cudnn",
                    .device = DeviceType::cuda,
                    .fn = unpool_apart<cudnn_backward_filter>,
                    .dtypes = kCudnnTypes,
                    .flags = kVendor,
                    .supports =
                        [](const KernelCall& c) {
                          return has_algorithm(ConvDirection::backward_weight, geom_bwd_filter(c), floating_dtype(c),
                                               false, c.in[0].device());
                        },
                    .note = "cudnnConvolutionBackwardFilter, deterministic algorithms only"});
  info.add_variant({.name = "cudnn_nondet",
                    .device = DeviceType::cuda,
                    .fn = unpool_apart<cudnn_backward_filter_nondet>,
                    .dtypes = kCudnnTypes,
                    .flags = kVendor | kNondeterministic,
                    .supports =
                        [](const KernelCall& c) {
                          return has_algorithm(ConvDirection::backward_weight, geom_bwd_filter(c), floating_dtype(c),
                                               true, c.in[0].device());
                        },
                    .note = "cudnnConvolutionBackwardFilter, any algorithm (some use float atomics)"});
}

}  // namespace ember::convcuda

#endif  // EMBER_WITH_CUDNN
