// batch_norm and its fused gradient op.
//
// Shapes: x (N, C) or (N, C, *) (4-D may be channels-last; y follows x's layout); weight, bias,
// running_mean, running_var [C] or undefined. Per channel c, over the M = numel / C values x_i:
//   training: mean = sum x_i / M, var = sum (x_i - mean)^2 / M (biased, for normalising),
//             invstd = 1 / sqrt(var + eps);
//             running_mean <- (1 - momentum) running_mean + momentum mean
//             running_var  <- (1 - momentum) running_var + momentum var M / (M - 1)  (unbiased)
//             (in place, when defined; M = 1 is an error, as PyTorch)
//   eval:     mean = running_mean, invstd = 1 / sqrt(running_var + eps)
//   y = (x - mean) invstd w + b   (w = 1, b = 0 when undefined)
// Outputs: y, mean [C], invstd [C] (what batch_norm_backward reads). Statistics are f32 for
// f16/bf16/f32 inputs and f64 for f64; weight, bias and running stats may be the input's dtype or
// the statistics dtype (f16 activations with f32 parameters, as AMP wants).
// Gradients (g = dL/dy, xhat = (x - mean) invstd), batch_norm_backward:
//   dbias = sum g,  dweight = sum g xhat
//   training: dx = w invstd (g - dbias / M - xhat dweight / M)
//   eval:     dx = w invstd g
// The vjp adds the terms for gradients arriving at the mean and invstd outputs (training only):
//   dx += gmean / M - ginvstd invstd^3 (x - mean) / M.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace ember {

struct BatchNormAttrs {
  int64_t training = 1;
  double momentum = 0.1;
  double eps = 1e-5;
};

// f64 for f64 inputs, f32 otherwise.
inline DType bn_stats_dtype(DType x) { return x == DType::f64 ? DType::f64 : DType::f32; }

// (N, C, L) view of x's geometry, in elements: element (n, c, l) sits at n * sn + c * sc + l * sl.
// Either NCHW-contiguous (sc = L, sl = 1) or channels-last / 2-D (sc = 1, sl = C).
struct BnGeom {
  int64_t N = 0, C = 0, L = 1;
  int64_t sn = 0, sc = 0, sl = 0;
  bool channels_last = false;  // sc == 1: channels are the fastest dim (4-D channels-last, or 2-D)
  int64_t M() const { return N * L; }
};

// The geometry of x as the kernels read it: x must already be NCHW-contiguous or (4-D)
// channels-last, see contiguous_as in kernels/common/memory_format.h.
BnGeom bn_geometry(const Tensor& x);

}  // namespace ember
