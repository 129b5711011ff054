// The simulated kernels behind the simulator's cuDNN pooling, softmax and batch-norm calls
// (cudnn_ops.cpp checks the arguments, these compute): plain launchers that enqueue kernels
// (ops.cu) on a stream. Simulator build only; Note [simulated vendor libraries] in common.h.
//
// Each launcher throws std::runtime_error when the launch fails (enqueue does); the caller turns that
// into CUDNN_STATUS_EXECUTION_FAILED. Scaling factors arrive as doubles (read from the caller's host
// memory at the call, as cuDNN reads them) and are applied in the compute type: f32 for f16, bf16
// and f32 data, f64 for f64 data. An output is read only where its beta is nonzero: cuDNN
// documents that with beta = 0 the output is not read, so it may be uninitialised (or NaN).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "sim/libs/common.h"

namespace ember::sim::libs::dnn {

// A 4-d tensor as a descriptor gives it: logical NCHW dims and element strides (any layout).
struct View4 {
  int64_t n = 0, c = 0, h = 0, w = 0;
  int64_t sn = 0, sc = 0, sh = 0, sw = 0;
};
inline int64_t at(const View4& v, int64_t n, int64_t c, int64_t h, int64_t w) {
  return n * v.sn + c * v.sc + h * v.sh + w * v.sw;
}

// ---- pooling ----
enum class PoolMode : uint8_t { max, avg_include_pad, avg_exclude_pad };
struct PoolGeom {
  PoolMode mode = PoolMode::max;
  bool propagate_nan = false;  // max only: a NaN in the window makes the output NaN
  bool deterministic = true;   // max backward: false lets the order of the window sums vary per call
  int win_h = 1, win_w = 1, pad_h = 0, pad_w = 0, stride_h = 1, stride_w = 1;
};
// y = alpha * pool(x) + beta * y
void pool_forward(const PoolGeom& g, Elem e, const View4& xv, const void* x, const View4& yv, void* y, double alpha,
                  double beta, cudaStream_t stream);
// dx = alpha * pool'(x)^T dy + beta * dx
void pool_backward(const PoolGeom& g, Elem e, const View4& dyv, const void* dy, const View4& xv, const void* x,
                   const View4& dxv, void* dx, double alpha, double beta, cudaStream_t stream);

// ---- softmax ----
enum class SoftmaxAlgo : uint8_t { fast, accurate, log };
// channel: over C for each (n, h, w); otherwise over C*H*W for each n (INSTANCE).
void softmax_forward(SoftmaxAlgo algo, bool channel, Elem e, const View4& xv, const void* x, const View4& yv, void* y,
                     double alpha, double beta, cudaStream_t stream);
void softmax_backward(SoftmaxAlgo algo, bool channel, Elem e, const View4& yv, const void* y, const View4& dyv,
                      const void* dy, const View4& dxv, void* dx, double alpha, double beta, cudaStream_t stream);

// ---- batch norm ----
// A feature is a channel (SPATIAL: statistics over N*H*W) or a (c, h, w) position (PER_ACTIVATION:
// statistics over N). Parameters and statistics are `pe` elements (f32, or f64 for f64 data)
// laid out as `pv` ([1, C, 1, 1] or [1, C, H, W]).
struct BnShape {
  bool per_activation = false;
  Elem e = Elem::f32, pe = Elem::f32;
  View4 pv;
  double eps = 0;
};
// Training forward: batch statistics, y, optionally the saved mean / inverse std and the running
// statistics (running var from the unbiased variance). Null pointers are skipped.
void bn_forward_training(const BnShape& s, const View4& xv, const void* x, const View4& yv, void* y, const void* scale,
                         const void* bias, double factor, void* running_mean, void* running_var, void* save_mean,
                         void* save_invstd, double alpha, double beta, cudaStream_t stream);
// Inference forward: y = scale * (x - mean) / sqrt(var + eps) + bias with the given statistics.
void bn_forward_inference(const BnShape& s, const View4& xv, const void* x, const View4& yv, void* y, const void* scale,
                          const void* bias, const void* mean, const void* var, double alpha, double beta,
                          cudaStream_t stream);
// Backward (the training formula): dx, dScale, dBias; the statistics from saved_mean/saved_invstd
// when given, else recomputed from x.
void bn_backward(const BnShape& s, const View4& xv, const void* x, const View4& dyv, const void* dy, const View4& dxv,
                 void* dx, const void* scale, void* dscale, void* dbias, const void* saved_mean,
                 const void* saved_invstd, double alpha_data, double beta_data, double alpha_param, double beta_param,
                 cudaStream_t stream);

}  // namespace ember::sim::libs::dnn
