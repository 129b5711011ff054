// Losses: cross_entropy (fused log-softmax + NLL), nll_loss, mse_loss, and their fused gradients.
//
// cross_entropy(x, t; weight w, reduction, ignore_index, label_smoothing ε) -> (loss, total_weight)
//   x [N, C], [N, C, d1, ...] (classes along dim 1) or [C]; t i32/i64 class indices [N] /
//   [N, d1, ...] / []. Each target position n (a row: the C logits x[n, :, ...]) has
//     lse_n  = log Σ_c exp(x_nc)                                (computed as max + log Σ exp(x - max))
//     l_n    = (1 - ε) w_{t_n} (lse_n - x_{n,t_n}) + (ε / C) Σ_c w_c (lse_n - x_nc)
//   (w = 1 without weights; the smoothing term only when ε > 0), and l_n = 0 where
//   t_n == ignore_index. With W = Σ_{n not ignored} w_{t_n}:
//     none -> l (t's shape),  sum -> Σ l_n,  mean -> Σ l_n / W   (NaN when W = 0, e.g. no targets)
//   which is PyTorch's definition: its label smoothing adds (ε/C) * the weighted smooth loss and,
//   for mean, divides that part by the same W as the NLL part.
//   total_weight (0-d, f32; f64 for f64 logits) is W for mean and sum, 0 for none; it is saved for
//   the backward (PyTorch's nll_loss returns it too). Targets outside [0, C) that are not
//   ignore_index are an error (the CPU throws naming the value; CUDA reports through the device
//   error word, Note [device errors] in core/cuda/runtime.h, and writes NaN).
// cross_entropy_backward(g, x, t, w, total_weight) -> dx, per row n and class c:
//     p_c = exp(x_nc - lse_n),  A_n = (1 - ε) w_{t_n} + (ε / C) Σ_k w_k,
//     B_nc = (1 - ε) w_{t_n} [c == t_n] + (ε / C) w_c
//     dx_nc = (p_c A_n - B_nc) s_n,  s_n = g_n (none), g (sum), g / W (mean); 0 for ignored rows.
//   Without weights A_n = 1 and this is (softmax - smoothed one-hot) * scale. There is no gradient
//   for the weights or the targets. cross_entropy_backward is not differentiated again.
// cross_entropy_with_grad(x, t, w, g) -> (loss, total_weight, dx): both of the above from one
//   pass, for the loss that ends the graph (llm.c's fused classifier): g is the gradient its
//   backward() will be called with (the loss's shape and dtype: a ones scalar, the AMP scale, 1 /
//   accumulation steps), and dx = cross_entropy_backward(g, x, t, w, total_weight). When that very
//   tensor arrives in the backward, the vjp hands dx over without a launch; any other gradient
//   (the loss used again, a different seed) gets cross_entropy_backward, so the op is exact for
//   every use. On CUDA the MNIST-sized batches (the forward's one-block path) take one launch for
//   the loss and dx together, where cross_entropy and its backward take two.
//   f32_loss (set by the functional under autocast, for f16/bf16 logits): x stays in its dtype, w
//   and g are f32, the loss and total_weight are f32 and dx has x's dtype. The values are those of
//   the f32 op on x converted (exactly) to f32, with dx rounded to x's dtype once: what autocast's
//   fp32 policy gave with a cast of the logits before and of dx after, without those two launches
//   (Note [the loss reads the logits as they are] in loss.cpp).
//
// nll_loss(lp, t; w, reduction, ignore_index) -> (loss, total_weight): l_n = -w_{t_n} lp_{n,t_n},
//   the same shapes, reductions and W (label_smoothing must be 0).
// nll_loss_backward(g, lp, t, w, total_weight) -> dlp: -w_{t_n} s_n at (n, t_n), 0 elsewhere.
//   Its own gradient (w.r.t. g) is nll_loss of the incoming gradient with the same options.
//
// mse_loss(x, y; reduction): (x - y)^2 elementwise, then none / sum / mean (NaN for 0 elements).
// mse_loss_backward(g, x, y) -> dx = 2 (x - y) g s (s = 1/n for mean); dy = -dx.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "kernels/common/row_geometry.h"
#include "kernels/options.h"  // Reduction, CrossEntropyOptions

namespace ember {

struct LossAttrs {
  Reduction reduction = Reduction::mean;
  int64_t ignore_index = -100;
  double label_smoothing = 0;
  int64_t f32_loss = 0;  // cross_entropy_with_grad only: f16/bf16 logits, f32 loss (see above)
};

// The dtype total_weight has for logits of dtype t (the accumulation dtype).
inline DType loss_acc_dtype(DType t) { return t == DType::f64 ? DType::f64 : DType::f32; }

// "none", "mean" or "sum" (messages, and the names of the loss samples).
const char* reduction_name(Reduction r);

// logits [N, C, d...] / [C] and targets [N, d...] / [] -> the row geometry (A = N, C, B = Π d),
// after checking the dtypes, the target shape and the class weights w (`op` names the op).
RowGeometry class_loss_geometry(const char* op, const Tensor& x, const Tensor& t, const Tensor& w);

struct KernelCall;
// cross_entropy_with_grad with f32_loss by a kernel of the op in f32 (`f32_kernel`): the logits
// converted to f32, dx computed in f32 and rounded into the f16/bf16 output (loss.cpp).
void cross_entropy_with_grad_in_f32(const KernelCall& c, void (*f32_kernel)(const KernelCall&));

struct OpInfo;
// The CPU variants (loss_cpu.cpp), registered by define_op_* (loss.cpp).
void register_cpu_cross_entropy(OpInfo& info);
void register_cpu_cross_entropy_backward(OpInfo& info);
void register_cpu_cross_entropy_with_grad(OpInfo& info);
void register_cpu_nll_loss(OpInfo& info);
void register_cpu_nll_loss_backward(OpInfo& info);
void register_cpu_mse_loss(OpInfo& info);
void register_cpu_mse_loss_backward(OpInfo& info);

}  // namespace ember
