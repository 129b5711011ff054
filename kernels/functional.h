// The functional API: what nn/, optim/, data/, amp/ and users call. Every function checks its
// arguments, runs an op from the registry (kernels/ops.def) and records autograd.
#pragma once

#include <array>
#include <span>
#include <vector>

#include "core/tensor.h"
#include "kernels/options.h"  // Activation, Reduction, CrossEntropyOptions, Conv2dFuncOptions

namespace ember {

// ---- factories ----
Tensor zeros(const Shape& shape, const TensorOptions& options = {});
Tensor ones(const Shape& shape, const TensorOptions& options = {});
Tensor full(const Shape& shape, double value, const TensorOptions& options = {});
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor full_like(const Tensor& t, double value);
// [0, end) and [start, end) step `step` (default dtype i64 when every argument is integral).
Tensor arange(double end, const TensorOptions& options = TensorOptions(DType::i64));
Tensor arange(double start, double end, double step, const TensorOptions& options = TensorOptions(DType::i64));
// Uniform in [low, high), standard normal, and 0/1 draws with probability p, from the default
// Philox generator (the same numbers on CPU and CUDA for the same seed).
Tensor rand(const Shape& shape, const TensorOptions& options = {});
Tensor uniform(const Shape& shape, double low, double high, const TensorOptions& options = {});
Tensor randn(const Shape& shape, const TensorOptions& options = {});
Tensor normal(const Shape& shape, double mean, double std, const TensorOptions& options = {});
Tensor bernoulli(const Shape& shape, double p, const TensorOptions& options = {});
Tensor rand_like(const Tensor& t);
Tensor randn_like(const Tensor& t);
// Fills an existing tensor in place (no autograd): uniform_, normal_ are what nn initialisers use.
Tensor& uniform_(Tensor& t, double low, double high);
Tensor& normal_(Tensor& t, double mean, double std);
// Copies host values into a new tensor of the given shape (CPU, then moved to options.device).
Tensor tensor(const std::vector<double>& values, const Shape& shape, const TensorOptions& options = {});
Tensor tensor(const std::vector<double>& values, const TensorOptions& options = {});
Tensor tensor_i64(const std::vector<int64_t>& values, const Shape& shape, Device device = kCPU);
Tensor scalar_tensor(double value, const TensorOptions& options = {});

// ---- elementwise unary (floating; integer inputs are promoted to f32, except neg/abs/relu) ----
// Declared from kernels/ops.def, a pair per EMBER_UNARY(name, Functor) line (neg, exp, relu, gelu,
// ...; the formulas are the functors' in kernels/ops/unary.h): `name(x)`, and the fused gradient
// `name_backward(grad, x)` = grad * f'(x) that composite backwards call.
#define EMBER_UNARY(name, Functor) \
  Tensor name(const Tensor& x);    \
  Tensor name##_backward(const Tensor& grad, const Tensor& x);
#include "kernels/ops.def"

// ---- elementwise binary with broadcasting and type promotion ----
// Declared from kernels/ops.def, a pair per EMBER_BINARY(name, Functor) line (add, sub, mul, div,
// pow, maximum, minimum, eq, ne, lt, le, gt, ge; the formulas are the functors' in
// kernels/ops/binary.h): `name(a, b)` of two tensors and `name(a, b)` of a tensor and a scalar.
// div is true division (integers give f32); the comparisons give bool tensors.
#define EMBER_BINARY(name, Functor)              \
  Tensor name(const Tensor& a, const Tensor& b); \
  Tensor name(const Tensor& a, double b);
#include "kernels/ops.def"

Tensor clamp(const Tensor& x, double lo, double hi);

Tensor operator-(const Tensor& x);
Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, double b);
Tensor operator-(const Tensor& a, double b);
Tensor operator*(const Tensor& a, double b);
Tensor operator/(const Tensor& a, double b);
Tensor operator+(double a, const Tensor& b);
Tensor operator-(double a, const Tensor& b);
Tensor operator*(double a, const Tensor& b);
Tensor operator/(double a, const Tensor& b);

// where(cond, a, b): a where cond is true, else b (broadcast together).
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor where(const Tensor& cond, const Tensor& a, double b);

// ---- conversion and copies ----
Tensor cast(const Tensor& x, DType dtype);
// Each of xs (contiguous, floating) cast to dtype in one launch (kernels/ops/copy.h).
std::vector<Tensor> cast_many(const std::vector<Tensor>& xs, DType dtype);
// Copies src into dst (broadcast, dtype conversion, any device pair); no autograd.
void copy_(Tensor& dst, const Tensor& src, bool non_blocking = false);
// Zeroes every tensor in place: one zero_many call per device (one multi-tensor launch on CUDA for
// up to 32 tensors); a tensor that is not dense is zeroed on its own (kernels/ops/fill.h). No autograd.
void zero_many_(const std::vector<Tensor>& tensors);

// ---- reductions (dims may be negative; an empty dims list reduces everything) ----
Tensor sum(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor amax(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor amin(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor max(const Tensor& x);  // all elements (amax)
Tensor min(const Tensor& x);
// Index of the first maximum along dim (i64); without dim, of the flattened tensor.
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmax(const Tensor& x);
// Variance with Bessel's correction by default (correction = 1).
Tensor var(const Tensor& x, const std::vector<int64_t>& dims = {}, double correction = 1, bool keepdim = false);
// Reduces a broadcast result back to `shape` (sums the broadcast dims): the gradient of expand.
Tensor sum_to(const Tensor& x, const Shape& shape);
// log(sum(exp(x))) over dim, computed stably.
Tensor logsumexp(const Tensor& x, int64_t dim, bool keepdim = false);

// ---- joining and indexing ----
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);
// Rows (along dim) of x picked by a 1-D i32/i64 index.
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
// out[i][j] = x[index[i][j]][j] for dim 0 (and likewise for other dims); index has x's rank.
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
// self + source scattered by index (the gradients of index_select and gather).
Tensor index_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& source);
Tensor scatter_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src);

// ---- linear algebra ----
// Matrix product with numpy semantics: 1-D operands are promoted and the added dim removed;
// batch dims broadcast.
Tensor matmul(const Tensor& a, const Tensor& b);
// x W^T + b (W is [out, in], b is [out] or undefined) with a fused activation.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
              Activation activation = Activation::none);
// A stack of linear layers, relu after layer l where bit l of relu_mask is set (biases: an
// undefined tensor for none): one op, fused on CUDA (kernels/ops/mlp.*).
Tensor mlp(const Tensor& x, std::span<const Tensor> weights, std::span<const Tensor> biases, uint64_t relu_mask);

// ---- mixed precision (the device side of amp::GradScaler; see kernels/ops/amp.h) ----
// grads *= inv_scale in place; found_inf (f32 [1]) := 1 if any gradient has inf/NaN.
void amp_unscale_(const std::vector<Tensor>& grads, Tensor& found_inf, const Tensor& inv_scale);
// PyTorch's scale update rule on the device (scale f32 [1], growth_tracker i32 [1], skipped i64 [1]).
void amp_update_scale_(Tensor& scale, Tensor& growth_tracker, const Tensor& found_inf, Tensor& skipped,
                       double growth_factor, double backoff_factor, int64_t growth_interval);

// ---- softmax, losses, dropout (kernels/ops/softmax.*, loss.*, dropout.*) ----
// softmax / log_softmax over `dim` (any dim, negative allowed; integers are promoted to f32).
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);
// Their fused gradients given the forward output y: y (g - Σ g y) and g - exp(y) Σ g over dim.
Tensor softmax_backward(const Tensor& grad, const Tensor& y, int64_t dim);
Tensor log_softmax_backward(const Tensor& grad, const Tensor& y, int64_t dim);
// Losses (Reduction, CrossEntropyOptions: kernels/options.h; the exact formulas: kernels/ops/loss.h).
// logits [N, C] or [N, C, d1, ...] (class dim 1) or [C]; target i64/i32 class indices [N] /
// [N, d1, ...] / []. The result is a device tensor: nothing here synchronises the host.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, const CrossEntropyOptions& o = {});
// cross_entropy for the loss a backward() starts from, called with `grad` (the loss's shape; the
// logits' floating dtype, f32 under autocast; not requiring grad): the logits' gradient is computed
// in the same pass (one launch on CUDA at MNIST sizes) and handed over when backward(grad) reaches
// the loss. Any other gradient reaching it is still exact (op cross_entropy_with_grad, loss.h).
// Without grad mode or a logits that requires grad it is cross_entropy.
Tensor cross_entropy_with_grad(const Tensor& logits, const Tensor& target, const Tensor& grad,
                               const CrossEntropyOptions& o = {});
Tensor nll_loss(const Tensor& log_probs, const Tensor& target,
                const CrossEntropyOptions& o = {});  // label_smoothing must be 0
// input and target broadcast together (like PyTorch, which warns).
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean);
// Scales kept values by 1/(1-p); identity (the same tensor) when !training or p == 0. The mask comes
// from the default Philox generator (the same on CPU and CUDA for the same seed and offset).
Tensor dropout(const Tensor& x, double p, bool training = true);

// ---- convolution, pooling, batch norm (kernels/ops/conv2d.h, pool.h, batch_norm.h) ----
// x [N, C, H, W] (NCHW or channels-last; a channels-last input gives a channels-last output),
// weight [K, C/groups, R, S], bias [K] or undefined.
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(), const Conv2dFuncOptions& o = {});
// The gradient ops conv2d's backward runs (each its own op): dx of size input_hw, dw of size kernel_rs.
Tensor conv2d_backward_input(const Tensor& grad_output, const Tensor& weight, std::array<int64_t, 2> input_hw,
                             const Conv2dFuncOptions& o = {});
Tensor conv2d_backward_weight(const Tensor& grad_output, const Tensor& x, std::array<int64_t, 2> kernel_rs,
                              const Conv2dFuncOptions& o = {});
// Pooling as PyTorch (floor mode; padding at most half the kernel). stride {0, 0} means the kernel size.
Tensor max_pool2d(const Tensor& x, std::array<int64_t, 2> kernel,
                  std::array<int64_t, 2> stride = {0, 0} /*0: = kernel*/, std::array<int64_t, 2> padding = {0, 0});
// max_pool2d(relu(x)), which is relu(max_pool2d(x)), as one op each way (Note [relu after max
// pooling] in kernels/ops/pool.h).
Tensor relu_max_pool2d(const Tensor& x, std::array<int64_t, 2> kernel, std::array<int64_t, 2> stride = {0, 0},
                       std::array<int64_t, 2> padding = {0, 0});
// max_pool2d(conv2d(x, weight, bias)), with relu between them when `relu`, as one op each way:
// the backward reads the pooled gradient, not the convolution's (Note [max pooling in the conv
// backward] in kernels/ops/conv2d.h).
Tensor conv2d_max_pool2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dFuncOptions& o,
                         std::array<int64_t, 2> kernel, std::array<int64_t, 2> stride = {0, 0},
                         std::array<int64_t, 2> padding = {0, 0}, bool relu = false);
// (out, indices): indices (i64) of each maximum in its (n, c) plane, h * W + w, first maximum on ties.
std::vector<Tensor> max_pool2d_with_indices(const Tensor& x, std::array<int64_t, 2> kernel,
                                            std::array<int64_t, 2> stride = {0, 0},
                                            std::array<int64_t, 2> padding = {0, 0});
Tensor avg_pool2d(const Tensor& x, std::array<int64_t, 2> kernel, std::array<int64_t, 2> stride = {0, 0},
                  std::array<int64_t, 2> padding = {0, 0}, bool count_include_pad = true);
// Output bins [floor(i H / OH), ceil((i + 1) H / OH)) (PyTorch's); output 1x1 is the global average.
Tensor adaptive_avg_pool2d(const Tensor& x, std::array<int64_t, 2> output_size);
// x (N, C) or (N, C, *). training: normalise with the batch statistics (biased variance) and, when
// running_mean/running_var are defined, update them in place: r = (1 - momentum) r + momentum s with
// the unbiased batch variance (as PyTorch). Eval: normalise with the running statistics.
// weight/bias may be undefined (affine = false). f16/bf16 x may come with f32 weight/bias/running stats.
// num_batches_tracked (one i64, optional): += 1 in place when training, in the op's own launch
// (Note [batch norm counts its batches] in kernels/ops/batch_norm.h); the pooled forms below too.
Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor running_mean, Tensor running_var,
                  bool training, double momentum = 0.1, double eps = 1e-5, const Tensor& num_batches_tracked = {});
// max_pool2d(batch_norm(x, ...)), with relu between them when `relu`, as one op each way: the
// backward reads the pooled gradient (Note [max pooling in the batch norm backward] in
// kernels/ops/batch_norm.h). x [N, C, H, W].
Tensor batch_norm_max_pool2d(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor running_mean,
                             Tensor running_var, bool training, double momentum, double eps,
                             std::array<int64_t, 2> kernel, std::array<int64_t, 2> stride = {0, 0},
                             std::array<int64_t, 2> padding = {0, 0}, bool relu = false,
                             const Tensor& num_batches_tracked = {});
// adaptive_avg_pool2d(batch_norm(x, ...), 1), with relu between them when `relu`, as one op each
// way: the means [N, C, 1, 1]; the backward reads their gradient (Note [global average pooling in
// the batch norm backward] in kernels/ops/batch_norm.h). x [N, C, H, W].
Tensor batch_norm_global_avg_pool2d(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor running_mean,
                                    Tensor running_var, bool training, double momentum, double eps, bool relu = false,
                                    const Tensor& num_batches_tracked = {});
// ---- training bookkeeping ----
// One step's bookkeeping on the device, in place, one launch (kernels/ops/train_stats.h): loss_sum +=
// loss, correct += the rows whose argmax is their label, the non-finite run and the step it reached
// `limit` at, steps += 1 when count_step.
void train_stats_(const Tensor& logits, const Tensor& labels, const Tensor& loss, Tensor& loss_sum, Tensor& correct,
                  Tensor& nonfinite_run, Tensor& diverged_at, Tensor& steps, int64_t limit, bool count_step);
// ---- data ----
// u8 images [N, C, ...] (or any shape with one channel) -> (x/255 - mean[c]) / std[c] in `dtype`,
// one pass (torchvision's ToTensor + Normalize). mean/std: one entry per channel, or one for all.
Tensor normalize_u8(const Tensor& x, const std::vector<double>& mean = {0.0}, const std::vector<double>& std = {1.0},
                    DType dtype = DType::f32);

// ---- fused multi-tensor optimizer steps and gradient clipping (kernels/ops/optim.h, grad_norm.h) ----
// In place on params and state (run under no_grad internally). `hyper` is the optimizer's f64
// device tensor of hyperparameters; `steps` are f32 scalar step counters the op increments;
// found_inf / inv_scale (f32 [1], optional) are the loss scaler's hooks; `ticket` (int32 [1], 0,
// optional) lets the CUDA kernel advance the step counters itself; clip_norm (total_norm's result,
// optional) with max_norm clips the gradients as they are read: see kernels/ops/optim.h.
void sgd_step(const Tensor& hyper, const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
              const std::vector<Tensor>& momentum_buffers, const std::vector<Tensor>& steps, bool nesterov,
              bool maximize, const Tensor& found_inf = Tensor(), const Tensor& inv_scale = Tensor(),
              const Tensor& ticket = Tensor(), const Tensor& clip_norm = Tensor(), double max_norm = 0);
void adam_step(const Tensor& hyper, const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
               const std::vector<Tensor>& exp_avgs, const std::vector<Tensor>& exp_avg_sqs,
               const std::vector<Tensor>& max_exp_avg_sqs, const std::vector<Tensor>& steps,
               bool decoupled_weight_decay, bool maximize, const Tensor& found_inf = Tensor(),
               const Tensor& inv_scale = Tensor(), const Tensor& ticket = Tensor(), const Tensor& clip_norm = Tensor(),
               double max_norm = 0);
// The p-norm of all elements of all tensors (inf for the max norm), as a device scalar (f32; f64
// for f64 tensors). Tensors may mix devices and dtypes (one launch per bucket).
Tensor total_norm(const std::vector<Tensor>& tensors, double norm_type = 2.0);
// tensors *= min(1, max_norm / (norm + 1e-6)), computed on the device from `norm` (no host sync).
void clip_by_total_norm_(const std::vector<Tensor>& tensors, const Tensor& norm, double max_norm);

}  // namespace ember
