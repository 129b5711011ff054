// softmax and log_softmax over one dim, and their fused gradients.
//
// Shapes: x [d0..dn) (any rank, 0-d included), dim d -> y with x's shape. The tensor is viewed as
// [A, C, B]: A = product of the dims before d, C = x.shape[d] (the softmax length), B = product of
// the dims after d. Row (a, b) is the C elements x[a, :, b] (stride B).
//
// Forward (per row, m = max_c x_c, s = Σ_c exp(x_c - m)):
//   softmax      y_c = exp(x_c - m) / s
//   log_softmax  y_c = (x_c - m) - log s
// Gradients (g = dL/dy, per row):
//   softmax_backward(g, y)      dx = y * (g - Σ_c g_c y_c)
//   log_softmax_backward(g, y)  dx = g - exp(y) * Σ_c g_c
// Both gradients are ops with fused kernels; their own gradients (double backward) are composite:
//   softmax_backward:     d/dg = softmax_backward(gg, y),  d/dy = gg * (g - Σ g y) - g * Σ gg y
//   log_softmax_backward: d/dg = gg - Σ_c gg_c exp(y_c),   d/dy = -gg * exp(y) * Σ g
//
// Special values (PyTorch's definition, kept by every kernel): a row holding NaN or +inf gives NaN
// everywhere (x - m is NaN at the max); an all -inf row gives NaN (-inf - -inf); -inf entries of a
// row with a finite max give 0 (softmax) and -inf (log_softmax). An empty dim gives an empty result;
// a dim of length 1 gives 1 (softmax) and 0 (log_softmax).
//
// Accumulation: the CPU reference computes in double; CUDA in float for f32/f16/bf16 (double for f64).
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "kernels/common/row_geometry.h"  // RowGeometry: the [A, C, B] view above

namespace ember {

struct SoftmaxAttrs {
  int64_t dim = -1;
};

}  // namespace ember
