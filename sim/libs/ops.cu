// The kernels of the simulator's cuDNN pooling, softmax and batch norm (ops.h declares the
// launchers; cudnn_ops.cpp checks the calls). Simulator build only: compiled as a simulator kernel
// source, so every read and write below goes through the simulator's bounds, race and
// initialisation checks, and the work runs in stream order like any kernel.
//
// Written from cuDNN's documented definitions, independently of ember's own kernels (which they
// are compared against). Everything computes in S = float for f16, bf16 and f32 data (double for
// f64), one rounding at the store. Reductions run in a fixed order (these cuDNN calls are
// deterministic), except max-pooling backward in CUDNN_POOLING_MAX mode, which cuDNN allows to be
// nondeterministic: there the order in which overlapping windows add into dx flips from call to
// call. Simple shapes of parallelism, fine for test sizes: a thread per output element (pooling,
// inference batch norm), a thread per softmax row, a block per batch-norm feature.
#if EMBER_WITH_CUDNN  // built where CMake found cudnn.h (CMakeLists.txt)

#include <cmath>
#include <limits>

#include "sim/libs/launch.h"
#include "sim/libs/ops.h"

namespace ember::sim::libs::dnn {

namespace {

constexpr int kThreads = 128;

unsigned blocks_for(int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

template <class S>
__device__ S ld(const void* p, int64_t i, Elem e) {
  return static_cast<S>(load_elem(p, i, e));
}

// alpha * r + beta * old, the output read only when beta is nonzero (cuDNN's contract).
template <class S>
__device__ void blend_store(void* out, int64_t i, Elem e, S r, S alpha, S beta) {
  S v = alpha * r;
  if (beta != S(0)) v += beta * ld<S>(out, i, e);
  store_elem(out, i, e, static_cast<double>(v));
}

// (n, c, h, w) of the i-th element of v in logical NCHW order.
struct Idx4 {
  int64_t n, c, h, w;
};
__device__ Idx4 decode(const View4& v, int64_t i) {
  Idx4 r{};
  r.w = i % v.w;
  i /= v.w;
  r.h = i % v.h;
  i /= v.h;
  r.c = i % v.c;
  r.n = i / v.c;
  return r;
}

// ---- pooling ----

// The window of output (oh, ow) clipped to the input: rows [hb, he), cols [wb, we).
struct Window {
  int64_t hb, he, wb, we;
};
__device__ Window window_of(const PoolGeom& g, const View4& xv, int64_t oh, int64_t ow) {
  const int64_t h0 = oh * g.stride_h - g.pad_h, w0 = ow * g.stride_w - g.pad_w;
  Window r{};
  r.hb = h0 > 0 ? h0 : 0;
  r.wb = w0 > 0 ? w0 : 0;
  r.he = h0 + g.win_h < xv.h ? h0 + g.win_h : xv.h;
  r.we = w0 + g.win_w < xv.w ? w0 + g.win_w : xv.w;
  return r;
}

// The element max pooling picks in a window: the first maximum in row-major order; with NaN
// propagation the first NaN, without it NaNs are skipped. Returns false when nothing qualifies (a
// window of NaNs only, without propagation). `best` gets the value.
template <class S>
__device__ bool window_max(const PoolGeom& g, Elem e, const View4& xv, const void* x, int64_t n, int64_t c,
                           const Window& wd, int64_t& bh, int64_t& bw, S& best) {
  bool found = false;
  for (int64_t h = wd.hb; h < wd.he; ++h)
    for (int64_t w = wd.wb; w < wd.we; ++w) {
      const S v = ld<S>(x, at(xv, n, c, h, w), e);
      if (std::isnan(v)) {
        if (!g.propagate_nan) continue;
        bh = h;
        bw = w;
        best = v;
        return true;
      }
      if (!found || v > best) {
        found = true;
        bh = h;
        bw = w;
        best = v;
      }
    }
  return found;
}

__device__ int64_t window_count(const PoolGeom& g, const Window& wd) {
  // include-padding: the whole window (the output formula keeps every window inside the padded
  // input); exclude-padding: the input elements it covers
  return g.mode == PoolMode::avg_include_pad ? int64_t{g.win_h} * g.win_w : (wd.he - wd.hb) * (wd.we - wd.wb);
}

template <class S>
__global__ void pool_forward_kernel(PoolGeom g, Elem e, View4 xv, const void* x, View4 yv, void* y, S alpha, S beta) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= yv.n * yv.c * yv.h * yv.w) return;
  const Idx4 o = decode(yv, i);
  const Window wd = window_of(g, xv, o.h, o.w);
  S r = 0;
  if (g.mode == PoolMode::max) {
    int64_t bh = 0, bw = 0;
    // a window of NaNs only, NaNs not propagated: -inf, the maximum of nothing
    if (!window_max<S>(g, e, xv, x, o.n, o.c, wd, bh, bw, r)) r = -std::numeric_limits<S>::infinity();
  } else {
    S sum = 0;
    for (int64_t h = wd.hb; h < wd.he; ++h)
      for (int64_t w = wd.wb; w < wd.we; ++w) sum += ld<S>(x, at(xv, o.n, o.c, h, w), e);
    r = sum / static_cast<S>(window_count(g, wd));
  }
  blend_store(y, at(yv, o.n, o.c, o.h, o.w), e, r, alpha, beta);
}

// A gather: a thread per dx element adds the shares of every window covering it (no atomics).
// `reverse` visits the windows last to first (CUDNN_POOLING_MAX: the order may vary per call).
template <class S>
__global__ void pool_backward_kernel(PoolGeom g, Elem e, View4 dyv, const void* dy, View4 xv, const void* x, View4 dxv,
                                     void* dx, S alpha, S beta, bool reverse) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= dxv.n * dxv.c * dxv.h * dxv.w) return;
  const Idx4 p = decode(dxv, i);
  // windows oh with oh * stride - pad <= ih < oh * stride - pad + win, within [0, OH)
  auto first = [](int64_t ip, int pad, int win, int stride) {
    const int64_t lo = ip + pad - win + 1;
    return lo <= 0 ? int64_t{0} : (lo + stride - 1) / stride;
  };
  auto last = [](int64_t ip, int pad, int stride, int64_t out) {
    const int64_t hi = (ip + pad) / stride;
    return hi < out - 1 ? hi : out - 1;
  };
  const int64_t oh0 = first(p.h, g.pad_h, g.win_h, g.stride_h), oh1 = last(p.h, g.pad_h, g.stride_h, dyv.h);
  const int64_t ow0 = first(p.w, g.pad_w, g.win_w, g.stride_w), ow1 = last(p.w, g.pad_w, g.stride_w, dyv.w);
  const int64_t nh = oh1 - oh0 + 1, nw = ow1 - ow0 + 1;
  S sum = 0;
  for (int64_t k = 0; nh > 0 && nw > 0 && k < nh * nw; ++k) {
    const int64_t kk = reverse ? nh * nw - 1 - k : k;
    const int64_t oh = oh0 + kk / nw, ow = ow0 + kk % nw;
    const Window wd = window_of(g, xv, oh, ow);
    const S d = ld<S>(dy, at(dyv, p.n, p.c, oh, ow), e);
    if (g.mode == PoolMode::max) {
      int64_t bh = -1, bw = -1;
      S best = 0;
      if (window_max<S>(g, e, xv, x, p.n, p.c, wd, bh, bw, best) && bh == p.h && bw == p.w) sum += d;
    } else {
      sum += d / static_cast<S>(window_count(g, wd));
    }
  }
  blend_store(dx, at(dxv, p.n, p.c, p.h, p.w), e, sum, alpha, beta);
}

// ---- softmax ----

// The offset of element k of softmax row r: CHANNEL rows are (n, h, w) over c; INSTANCE rows are n
// over (c, h, w).
__device__ int64_t row_at(const View4& v, bool channel, int64_t r, int64_t k) {
  const int64_t hw = v.h * v.w;
  if (channel) return at(v, r / hw, k, (r % hw) / v.w, r % v.w);
  return at(v, r, k / hw, (k % hw) / v.w, k % v.w);
}

template <class S>
__global__ void softmax_forward_kernel(SoftmaxAlgo algo, bool channel, Elem e, View4 xv, const void* x, View4 yv,
                                       void* y, S alpha, S beta) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t rows = channel ? xv.n * xv.h * xv.w : xv.n, len = channel ? xv.c : xv.c * xv.h * xv.w;
  if (r >= rows) return;
  // ACCURATE and LOG subtract the row's maximum (NaNs skipped, as fmaxf does; they still reach
  // the sum below); FAST does not, so it overflows where exp(x) does
  S m = 0;
  if (algo != SoftmaxAlgo::fast) {
    m = -std::numeric_limits<S>::infinity();
    for (int64_t k = 0; k < len; ++k) {
      const S v = ld<S>(x, row_at(xv, channel, r, k), e);
      if (v > m) m = v;
    }
  }
  S sum = 0;
  for (int64_t k = 0; k < len; ++k) sum += std::exp(ld<S>(x, row_at(xv, channel, r, k), e) - m);
  const S log_sum = std::log(sum);
  for (int64_t k = 0; k < len; ++k) {
    const S d = ld<S>(x, row_at(xv, channel, r, k), e) - m;
    const S v = algo == SoftmaxAlgo::log ? d - log_sum : std::exp(d) / sum;
    blend_store(y, row_at(yv, channel, r, k), e, v, alpha, beta);
  }
}

// softmax: dx = y (dy - sum(dy y)); log-softmax: dx = dy - exp(y) sum(dy).
template <class S>
__global__ void softmax_backward_kernel(SoftmaxAlgo algo, bool channel, Elem e, View4 yv, const void* y, View4 dyv,
                                        const void* dy, View4 dxv, void* dx, S alpha, S beta) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t rows = channel ? yv.n * yv.h * yv.w : yv.n, len = channel ? yv.c : yv.c * yv.h * yv.w;
  if (r >= rows) return;
  const bool lg = algo == SoftmaxAlgo::log;
  S s = 0;
  for (int64_t k = 0; k < len; ++k) {
    const S g = ld<S>(dy, row_at(dyv, channel, r, k), e);
    s += lg ? g : g * ld<S>(y, row_at(yv, channel, r, k), e);
  }
  for (int64_t k = 0; k < len; ++k) {
    const S g = ld<S>(dy, row_at(dyv, channel, r, k), e), yk = ld<S>(y, row_at(yv, channel, r, k), e);
    const S v = lg ? g - std::exp(yk) * s : yk * (g - s);
    blend_store(dx, row_at(dxv, channel, r, k), e, v, alpha, beta);
  }
}

// ---- batch norm ----

// Feature f's reduction set: SPATIAL: channel f over (n, h, w); PER_ACTIVATION: position
// f = (c, h, w) over n.
struct Feature {
  int64_t c, h, w;  // h, w: the position (PER_ACTIVATION) or unused
  int64_t m;        // elements reduced over
};
__device__ Feature feature_of(const BnShape& s, const View4& xv, int64_t f) {
  if (!s.per_activation) return {f, 0, 0, xv.n * xv.h * xv.w};
  return {f / (xv.h * xv.w), (f / xv.w) % xv.h, f % xv.w, xv.n};
}
// The offset in `v` of element r of feature ft.
__device__ int64_t feature_at(const BnShape& s, const View4& v, const Feature& ft, int64_t r) {
  if (s.per_activation) return at(v, r, ft.c, ft.h, ft.w);
  const int64_t hw = v.h * v.w;
  return at(v, r / hw, ft.c, (r % hw) / v.w, r % v.w);
}
__device__ int64_t param_at(const BnShape& s, const Feature& ft) {
  return s.per_activation ? at(s.pv, 0, ft.c, ft.h, ft.w) : at(s.pv, 0, ft.c, 0, 0);
}

// The block's sum of `v` (a fixed tree over the threads: the same bits every call).
template <class S>
__device__ S block_sum(S v, S* buf) {
  const int t = static_cast<int>(threadIdx.x);
  buf[t] = v;
  __syncthreads();
  for (int half = static_cast<int>(blockDim.x) / 2; half > 0; half /= 2) {
    if (t < half) buf[t] = buf[t] + buf[t + half];
    __syncthreads();
  }
  const S r = buf[0];
  __syncthreads();
  return r;
}

// The biased mean and variance of feature ft (two passes: the variance about the mean).
template <class S>
__device__ void feature_stats(const BnShape& s, const View4& xv, const void* x, const Feature& ft, S* buf, S& mean,
                              S& var) {
  S acc = 0;
  for (int64_t r = threadIdx.x; r < ft.m; r += blockDim.x) acc += ld<S>(x, feature_at(s, xv, ft, r), s.e);
  mean = block_sum(acc, buf) / static_cast<S>(ft.m);
  acc = 0;
  for (int64_t r = threadIdx.x; r < ft.m; r += blockDim.x) {
    const S d = ld<S>(x, feature_at(s, xv, ft, r), s.e) - mean;
    acc += d * d;
  }
  var = block_sum(acc, buf) / static_cast<S>(ft.m);
}

template <class S>
__global__ void bn_training_kernel(BnShape s, View4 xv, const void* x, View4 yv, void* y, const void* scale,
                                   const void* bias, S factor, void* running_mean, void* running_var, void* save_mean,
                                   void* save_invstd, S alpha, S beta) {
  EMBER_SIM_SHARED(S[kThreads], buf);
  const Feature ft = feature_of(s, xv, blockIdx.x);
  S mean = 0, var = 0;
  feature_stats<S>(s, xv, x, ft, buf, mean, var);
  const S invstd = S(1) / std::sqrt(var + static_cast<S>(s.eps));
  const int64_t pi = param_at(s, ft);
  if (threadIdx.x == 0) {
    if (save_mean != nullptr) store_elem(save_mean, pi, s.pe, mean);
    if (save_invstd != nullptr) store_elem(save_invstd, pi, s.pe, invstd);
    if (running_mean != nullptr) {
      // documented: the running variance is the moving average of the unbiased variance
      // (undefined for one value: NaN)
      const S m = static_cast<S>(ft.m);
      const S unbiased = ft.m > 1 ? var * m / (m - S(1)) : std::numeric_limits<S>::quiet_NaN();
      const S rm = ld<S>(running_mean, pi, s.pe), rv = ld<S>(running_var, pi, s.pe);
      store_elem(running_mean, pi, s.pe, (S(1) - factor) * rm + factor * mean);
      store_elem(running_var, pi, s.pe, (S(1) - factor) * rv + factor * unbiased);
    }
  }
  const S w = ld<S>(scale, pi, s.pe), b = ld<S>(bias, pi, s.pe);
  for (int64_t r = threadIdx.x; r < ft.m; r += blockDim.x) {
    const S v = ld<S>(x, feature_at(s, xv, ft, r), s.e);
    blend_store(y, feature_at(s, yv, ft, r), s.e, w * ((v - mean) * invstd) + b, alpha, beta);
  }
}

template <class S>
__global__ void bn_inference_kernel(BnShape s, View4 xv, const void* x, View4 yv, void* y, const void* scale,
                                    const void* bias, const void* mean, const void* var, S alpha, S beta) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= xv.n * xv.c * xv.h * xv.w) return;
  const Idx4 p = decode(xv, i);
  const int64_t pi = s.per_activation ? at(s.pv, 0, p.c, p.h, p.w) : at(s.pv, 0, p.c, 0, 0);
  const S invstd = S(1) / std::sqrt(ld<S>(var, pi, s.pe) + static_cast<S>(s.eps));
  const S v = ld<S>(x, at(xv, p.n, p.c, p.h, p.w), s.e);
  const S r = ld<S>(scale, pi, s.pe) * ((v - ld<S>(mean, pi, s.pe)) * invstd) + ld<S>(bias, pi, s.pe);
  blend_store(y, at(yv, p.n, p.c, p.h, p.w), s.e, r, alpha, beta);
}

// dBias = sum(dy), dScale = sum(dy xhat), dx = scale invstd (dy - dBias / M - xhat dScale / M).
template <class S>
__global__ void bn_backward_kernel(BnShape s, View4 xv, const void* x, View4 dyv, const void* dy, View4 dxv, void* dx,
                                   const void* scale, void* dscale, void* dbias, const void* saved_mean,
                                   const void* saved_invstd, S alpha_d, S beta_d, S alpha_p, S beta_p) {
  EMBER_SIM_SHARED(S[kThreads], buf);
  const Feature ft = feature_of(s, xv, blockIdx.x);
  const int64_t pi = param_at(s, ft);
  S mean = 0, invstd = 0;
  if (saved_mean != nullptr) {
    mean = ld<S>(saved_mean, pi, s.pe);
    invstd = ld<S>(saved_invstd, pi, s.pe);
  } else {
    S var = 0;
    feature_stats<S>(s, xv, x, ft, buf, mean, var);
    invstd = S(1) / std::sqrt(var + static_cast<S>(s.eps));
  }
  S sg = 0, sgx = 0;
  for (int64_t r = threadIdx.x; r < ft.m; r += blockDim.x) {
    const S g = ld<S>(dy, feature_at(s, dyv, ft, r), s.e);
    sg += g;
    sgx += g * (ld<S>(x, feature_at(s, xv, ft, r), s.e) - mean);
  }
  const S dbias_v = block_sum(sg, buf);
  const S dscale_v = block_sum(sgx, buf) * invstd;
  if (threadIdx.x == 0) {
    blend_store(dscale, pi, s.pe, dscale_v, alpha_p, beta_p);
    blend_store(dbias, pi, s.pe, dbias_v, alpha_p, beta_p);
  }
  const S m = static_cast<S>(ft.m), k = ld<S>(scale, pi, s.pe) * invstd;
  for (int64_t r = threadIdx.x; r < ft.m; r += blockDim.x) {
    const S g = ld<S>(dy, feature_at(s, dyv, ft, r), s.e);
    const S xhat = (ld<S>(x, feature_at(s, xv, ft, r), s.e) - mean) * invstd;
    blend_store(dx, feature_at(s, dxv, ft, r), s.e, k * (g - dbias_v / m - xhat * dscale_v / m), alpha_d, beta_d);
  }
}

int64_t features(const BnShape& s, const View4& xv) { return s.per_activation ? xv.c * xv.h * xv.w : xv.c; }

}  // namespace

void pool_forward(const PoolGeom& g, Elem e, const View4& xv, const void* x, const View4& yv, void* y, double alpha,
                  double beta, cudaStream_t stream) {
  const unsigned grid = blocks_for(yv.n * yv.c * yv.h * yv.w);
  if (e == Elem::f64)
    libs::enqueue(pool_forward_kernel<double>, grid, kThreads, 0, stream, g, e, xv, x, yv, y, alpha, beta);
  else libs::enqueue(pool_forward_kernel<float>, grid, kThreads, 0, stream, g, e, xv, x, yv, y, alpha, beta);
}

void pool_backward(const PoolGeom& g, Elem e, const View4& dyv, const void* dy, const View4& xv, const void* x,
                   const View4& dxv, void* dx, double alpha, double beta, cudaStream_t stream) {
  const unsigned grid = blocks_for(dxv.n * dxv.c * dxv.h * dxv.w);
  const bool reverse = !g.deterministic && (next_call_seed() >> 63) != 0;
  if (e == Elem::f64)
    libs::enqueue(pool_backward_kernel<double>, grid, kThreads, 0, stream, g, e, dyv, dy, xv, x, dxv, dx, alpha, beta,
                  reverse);
  else
    libs::enqueue(pool_backward_kernel<float>, grid, kThreads, 0, stream, g, e, dyv, dy, xv, x, dxv, dx, alpha, beta,
                  reverse);
}

void softmax_forward(SoftmaxAlgo algo, bool channel, Elem e, const View4& xv, const void* x, const View4& yv, void* y,
                     double alpha, double beta, cudaStream_t stream) {
  const unsigned grid = blocks_for(channel ? xv.n * xv.h * xv.w : xv.n);
  if (e == Elem::f64)
    libs::enqueue(softmax_forward_kernel<double>, grid, kThreads, 0, stream, algo, channel, e, xv, x, yv, y, alpha,
                  beta);
  else
    libs::enqueue(softmax_forward_kernel<float>, grid, kThreads, 0, stream, algo, channel, e, xv, x, yv, y, alpha,
                  beta);
}

void softmax_backward(SoftmaxAlgo algo, bool channel, Elem e, const View4& yv, const void* y, const View4& dyv,
                      const void* dy, const View4& dxv, void* dx, double alpha, double beta, cudaStream_t stream) {
  const unsigned grid = blocks_for(channel ? yv.n * yv.h * yv.w : yv.n);
  if (e == Elem::f64)
    libs::enqueue(softmax_backward_kernel<double>, grid, kThreads, 0, stream, algo, channel, e, yv, y, dyv, dy, dxv, dx,
                  alpha, beta);
  else
    libs::enqueue(softmax_backward_kernel<float>, grid, kThreads, 0, stream, algo, channel, e, yv, y, dyv, dy, dxv, dx,
                  alpha, beta);
}

void bn_forward_training(const BnShape& s, const View4& xv, const void* x, const View4& yv, void* y, const void* scale,
                         const void* bias, double factor, void* running_mean, void* running_var, void* save_mean,
                         void* save_invstd, double alpha, double beta, cudaStream_t stream) {
  const auto grid = static_cast<unsigned>(features(s, xv));
  if (s.e == Elem::f64)
    libs::enqueue(bn_training_kernel<double>, grid, kThreads, 0, stream, s, xv, x, yv, y, scale, bias, factor,
                  running_mean, running_var, save_mean, save_invstd, alpha, beta);
  else
    libs::enqueue(bn_training_kernel<float>, grid, kThreads, 0, stream, s, xv, x, yv, y, scale, bias, factor,
                  running_mean, running_var, save_mean, save_invstd, alpha, beta);
}

void bn_forward_inference(const BnShape& s, const View4& xv, const void* x, const View4& yv, void* y, const void* scale,
                          const void* bias, const void* mean, const void* var, double alpha, double beta,
                          cudaStream_t stream) {
  const unsigned grid = blocks_for(xv.n * xv.c * xv.h * xv.w);
  if (s.e == Elem::f64)
    libs::enqueue(bn_inference_kernel<double>, grid, kThreads, 0, stream, s, xv, x, yv, y, scale, bias, mean, var,
                  alpha, beta);
  else
    libs::enqueue(bn_inference_kernel<float>, grid, kThreads, 0, stream, s, xv, x, yv, y, scale, bias, mean, var, alpha,
                  beta);
}

void bn_backward(const BnShape& s, const View4& xv, const void* x, const View4& dyv, const void* dy, const View4& dxv,
                 void* dx, const void* scale, void* dscale, void* dbias, const void* saved_mean,
                 const void* saved_invstd, double alpha_data, double beta_data, double alpha_param, double beta_param,
                 cudaStream_t stream) {
  const auto grid = static_cast<unsigned>(features(s, xv));
  if (s.e == Elem::f64)
    libs::enqueue(bn_backward_kernel<double>, grid, kThreads, 0, stream, s, xv, x, dyv, dy, dxv, dx, scale, dscale,
                  dbias, saved_mean, saved_invstd, alpha_data, beta_data, alpha_param, beta_param);
  else
    libs::enqueue(bn_backward_kernel<float>, grid, kThreads, 0, stream, s, xv, x, dyv, dy, dxv, dx, scale, dscale,
                  dbias, saved_mean, saved_invstd, alpha_data, beta_data, alpha_param, beta_param);
}

}  // namespace ember::sim::libs::dnn

#endif  // EMBER_WITH_CUDNN
