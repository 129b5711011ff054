// batch_norm, batch_norm_max_pool2d (batch norm, relu, max pool as one op),
// batch_norm_global_avg_pool2d (batch norm, relu, the mean of each plane as one op) and their
// gradient op.
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
// Input 5, optional (the three forward ops): num_batches_tracked, i64 with one element, += 1 in place
// when training (Note [batch norm counts its batches]).
// Outputs: y, mean [C], invstd [C] (what batch_norm_backward reads); batch_norm_max_pool2d's:
// the pooled y, its i64 indices, mean, invstd; batch_norm_global_avg_pool2d's: the plane means
// [N, C, 1, 1] of y (relu first when asked), mean, invstd. Statistics are f32 for
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
#include "kernels/ops/pool.h"  // PoolAttrs

namespace ember {

// max_pool (batch_norm_max_pool2d and batch_norm_backward): 1 = the normalised output is max
// pooled with `pool` (Note [max pooling in the batch norm backward]); 0 elsewhere.
// avg_pool (batch_norm_global_avg_pool2d and batch_norm_backward): 1 = the normalised output, relu'd
// when `relu`, is averaged over each plane (Note [global average pooling in the batch norm
// backward]); 0 elsewhere. At most one of max_pool and avg_pool.
struct BatchNormAttrs {
  int64_t training = 1;
  double momentum = 0.1;
  double eps = 1e-5;
  int64_t max_pool = 0;
  PoolAttrs pool;  // with max_pool: the pooling (relu, and size = x's (H, W))
  int64_t avg_pool = 0;
  int64_t relu = 0;  // with avg_pool: relu before the average
};

// Note [max pooling in the batch norm backward]: mnist_train's fast model runs conv, batch norm,
// relu, 2x2 max pool, and the pool's backward writes batch_norm's whole grad_output (zero but at
// one position a window), which batch_norm_backward then reads twice (its sums, then dx).
// batch_norm_max_pool2d is batch norm, relu and pool as one op (batch_norm, then max_pool2d with the
// relu, Note [relu after max pooling] in pool.h): (pooled, indices, mean, invstd). Its backward
// calls batch_norm_backward with max_pool = 1 and (pooled gradient, x, weight, mean, invstd,
// indices): the sums need only the pooled positions (g is 0 elsewhere), and dx, which is dense,
// reads g as the pooled gradient where the index of the window holding a position names it, else
// 0 (pool::unpooled_at). CUDA's NCHW kernels do both for windows that do not overlap, and the
// forward pools the normalised values before storing them; every other variant runs
// max_pool2d_backward first (bn_unpooled_apart), the unfused layers' launches. Same values and
// gradients as the three layers.
struct KernelCall;
// Runs f on c with c's pooled gradient (max_pool = 1) unpooled into a grad_output of x's shape by
// max_pool2d_backward first; on c itself where max_pool = 0.
void bn_unpooled_apart(const KernelCall& c, void (*f)(const KernelCall&));
template <void (*F)(const KernelCall&)>
void bn_unpool_apart(const KernelCall& c) {
  bn_unpooled_apart(c, F);
}
// batch_norm_max_pool2d as its two ops through the registry (a variant on each device).
void bn_then_pool_ops(const KernelCall& c);

// Note [global average pooling in the batch norm backward]: the fast model's last block is conv,
// batch norm, relu, then AdaptiveAvgPool2d(1). Unfused, batch_norm writes y, relu reads it and
// writes its output, the average reads that; backward, adaptive_avg_pool2d_backward writes a dense
// gradient (each plane's pooled gradient / L), relu's backward masks it into another, and
// batch_norm_backward reads that twice. batch_norm_global_avg_pool2d is the three as one op:
// (means [N, C, 1, 1], mean, invstd). Its backward calls batch_norm_backward with avg_pool = 1 (and
// the relu bit) on (pooled gradient, x, weight, mean, invstd, bias): every variant reads g at (n, c,
// l) as the pooled gradient / L, rounded to the dtype as adaptive_avg_pool2d_backward stores it, or
// 0 where the relu's input, y recomputed from x with the saved statistics, weight and bias, is not
// positive. On CUDA the recomputation is the forward's own arithmetic (Affine::apply), so the mask
// and the gradients are the unfused ones bit for bit; the CPU normalises in double and its saved
// statistics are rounded to f32, so there a y within rounding of 0 may take the other side of the
// relu's kink. CUDA's `fused` forward (NCHW) normalises, relus and sums each plane in the order
// adaptive_avg_pool2d's kernel does; elsewhere `ops` runs batch_norm, relu, adaptive_avg_pool2d.
void bn_then_avg_ops(const KernelCall& c);

// Note [batch norm counts its batches]: BatchNorm's num_batches_tracked += 1 was an op of its own,
// one launch per layer and training step on CUDA (3 in mnist_train's fast model). The forward ops
// take the counter as an optional sixth input and count the batch themselves: CUDA's kernels in
// the thread that writes channel 0's statistics, every other variant through bn_count_batch (the
// `ops` variants by passing the counter on to batch_norm). Only when training, as PyTorch's module
// counts; an empty batch counts too. nn::BatchNorm (and SyncBatchNorm on a single process) passes
// it unless its momentum is None, which reads the new count on the host before the op (the
// cumulative average's factor).

// The call's counter when it counts (training, input 5 given), else nullptr.
const Tensor* bn_counter(const KernelCall& c);
// counter += 1 in place (one add_scalar launch on CUDA) when the call counts.
void bn_count_batch(const KernelCall& c);

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
