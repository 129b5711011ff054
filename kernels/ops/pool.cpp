// Pooling ops: the op definitions: shape inference, vjps, cost and the functional API. See pool.h
// for the definitions. The CPU kernels are in pool_cpu.cpp, the CUDA ones in pool.cu.
#include "kernels/ops/pool.h"

#include <cmath>
#include <vector>

#include "core/autograd/node.h"
#include "kernels/common/memory_format.h"
#include "kernels/ops/batch_norm.h"
#include "kernels/ops/conv2d.h"
#include "kernels/functional.h"
#include "kernels/registry.h"

namespace ember {

Shape check_pooled_gradient(const char* op, const Tensor& gp, const Tensor& ind, const Shape& full, const PoolAttrs& p,
                            const char* what) {
  const PoolGeom pg = pool_geometry(op, full, p);
  const Shape ps{pg.N, pg.C, pg.P, pg.Q};
  EMBER_CHECK(gp.shape() == ps, op, ": the pooled gradient ", gp.shape(), " does not match ", ps, ", the max pooling (",
              p.kernel[0], "x", p.kernel[1], ", stride ", p.stride[0], "x", p.stride[1], ", padding ", p.padding[0],
              "x", p.padding[1], ") of ", what, " ", full);
  EMBER_CHECK(ind.defined() && ind.dtype() == DType::i64 && ind.shape() == ps, op, ": the pool's indices must be i64 ",
              ps, ", got ", ind.defined() ? ind.describe() : std::string("none"));
  return ps;
}

void run_unpooled(const KernelCall& c, void (*f)(const KernelCall&), const PoolAttrs& p, const Shape& full,
                  const Attrs& plain) {
  std::vector<Tensor> in(c.in.begin(), c.in.end() - 1);  // without the indices
  {
    autograd::NoGradGuard no_grad;  // a kernel's scratch
    in[0] = call1(OpId::max_pool2d_backward, {c.in.front(), c.in.back()}, with_input_size(p, full[2], full[3]));
  }
  f(KernelCall{c.op, in, c.out, plain});
}

Tensor max_pool_gather(const Tensor& full, const Tensor& ind, bool relu) {
  Tensor G = full.contiguous();
  const int64_t N = G.shape()[0], C = G.shape()[1], HW = G.shape()[2] * G.shape()[3];
  Tensor flat_ind = ind.contiguous().reshape({N, C, ind.shape()[2] * ind.shape()[3]});
  if (!relu) return gather(G.reshape({N, C, HW}), 2, flat_ind).reshape(ind.shape());
  Tensor routed = ge(flat_ind, 0.0);
  Tensor dg = gather(G.reshape({N, C, HW}), 2, clamp(flat_ind, 0, static_cast<double>(HW - 1)));
  return where(routed, dg, 0.0).reshape(ind.shape());
}

PoolGeom pool_geometry(const char* op, const Shape& x, const PoolAttrs& a) {
  EMBER_CHECK(x.size() == 4, op, ": expects a 4-D input [N, C, H, W], got ", x, " (", x.size(), " dims)");
  PoolGeom g;
  g.N = x[0];
  g.C = x[1];
  g.H = x[2];
  g.W = x[3];
  g.kh = a.kernel[0];
  g.kw = a.kernel[1];
  g.sh = a.stride[0];
  g.sw = a.stride[1];
  g.ph = a.padding[0];
  g.pw = a.padding[1];
  g.count_include_pad = a.count_include_pad != 0;
  g.relu = a.relu != 0;
  EMBER_CHECK(a.relu == 0 || a.relu == 1, op, ": relu must be 0 or 1, got ", a.relu);
  EMBER_CHECK(g.kh >= 1 && g.kw >= 1, op, ": kernel size must be positive, got (", g.kh, ", ", g.kw, ")");
  EMBER_CHECK(g.sh >= 1 && g.sw >= 1, op, ": stride must be positive, got (", g.sh, ", ", g.sw, ")");
  EMBER_CHECK(g.ph >= 0 && g.pw >= 0, op, ": padding must be non-negative, got (", g.ph, ", ", g.pw, ")");
  EMBER_CHECK(2 * g.ph <= g.kh && 2 * g.pw <= g.kw, op, ": padding (", g.ph, ", ", g.pw,
              ") must be at most half the kernel size (", g.kh, ", ", g.kw, ")");
  EMBER_CHECK(g.H + 2 * g.ph >= g.kh && g.W + 2 * g.pw >= g.kw, op, ": the kernel ", g.kh, "x", g.kw,
              " is larger than the padded input ", g.H + 2 * g.ph, "x", g.W + 2 * g.pw, " (input ", x, ", padding ",
              g.ph, "x", g.pw, "): the output would be empty");
  g.P = (g.H + 2 * g.ph - g.kh) / g.sh + 1;
  g.Q = (g.W + 2 * g.pw - g.kw) / g.sw + 1;
  return g;
}

PoolGeom adaptive_geometry(const char* op, const Shape& x, const AdaptivePoolAttrs& a) {
  EMBER_CHECK(x.size() == 4, op, ": expects a 4-D input [N, C, H, W], got ", x, " (", x.size(), " dims)");
  EMBER_CHECK(a.output[0] >= 1 && a.output[1] >= 1, op, ": output size must be positive, got (", a.output[0], ", ",
              a.output[1], ")");
  EMBER_CHECK(x[2] >= 1 && x[3] >= 1, op, ": the input ", x, " has an empty spatial dimension");
  PoolGeom g;
  g.N = x[0];
  g.C = x[1];
  g.H = x[2];
  g.W = x[3];
  g.P = a.output[0];
  g.Q = a.output[1];
  return g;
}

namespace {

void check_float(const char* op, const Tensor& x) {
  EMBER_CHECK(is_floating(x.dtype()), op, ": expects a floating input, got ", x.describe());
}

// ---- max_pool2d ----

std::vector<TensorSpec> infer_max_pool2d(std::span<const Tensor> in, const Attrs& attrs) {
  EMBER_CHECK(in.size() == 1, "max_pool2d: expects one input");
  const Tensor& x = in[0];
  check_float("max_pool2d", x);
  PoolGeom g = pool_geometry("max_pool2d", x.shape(), attrs.get<PoolAttrs>());
  Shape s{g.N, g.C, g.P, g.Q};
  Strides st = layout_strides(s, runs_channels_last(x));
  return {{s, x.dtype(), st}, {s, DType::i64, st}};
}

std::vector<Tensor> max_pool2d_vjp(const BackwardCtx& ctx) {
  const Shape& xs = ctx.input_meta[0].shape;
  const Tensor& ind = ctx.outputs[1];
  Tensor g = contiguous_as(ctx.grad(0), runs_channels_last(ind));
  return {call1(OpId::max_pool2d_backward, {g, ind}, with_input_size(ctx.attr<PoolAttrs>(), xs[2], xs[3]))};
}

// ---- max_pool2d_backward ----

std::vector<TensorSpec> infer_max_pool2d_backward(std::span<const Tensor> in, const Attrs& attrs) {
  EMBER_CHECK(in.size() == 2, "max_pool2d_backward: expects (grad_output, indices)");
  const Tensor &gy = in[0], &ind = in[1];
  const auto& a = attrs.get<PoolAttrs>();
  check_float("max_pool2d_backward", gy);
  EMBER_CHECK(ind.dtype() == DType::i64, "max_pool2d_backward: indices must be i64, got ", ind.describe());
  EMBER_CHECK(gy.dim() == 4, "max_pool2d_backward: expects a 4-D grad_output, got ", gy.shape());
  PoolGeom g = pool_geometry("max_pool2d_backward", {gy.shape()[0], gy.shape()[1], a.size[0], a.size[1]}, a);
  Shape ys{g.N, g.C, g.P, g.Q};
  EMBER_CHECK(gy.shape() == ys && ind.shape() == ys, "max_pool2d_backward: grad_output ", gy.shape(), " and indices ",
              ind.shape(), " must both be ", ys, ", the output of pooling an input of size ", a.size[0], "x",
              a.size[1]);
  Shape xs{g.N, g.C, g.H, g.W};
  return {{xs, gy.dtype(), layout_strides(xs, runs_channels_last(gy))}};
}

std::vector<Tensor> max_pool2d_backward_vjp(const BackwardCtx& ctx) {
  // linear in grad_output: d/dg = the upstream gradient gathered at the indices
  return {max_pool_gather(ctx.grad(0), ctx.inputs[1], ctx.attr<PoolAttrs>().relu != 0), Tensor()};
}

// ---- avg_pool2d ----

std::vector<TensorSpec> infer_avg_pool2d(std::span<const Tensor> in, const Attrs& attrs) {
  EMBER_CHECK(in.size() == 1, "avg_pool2d: expects one input");
  const Tensor& x = in[0];
  check_float("avg_pool2d", x);
  PoolGeom g = pool_geometry("avg_pool2d", x.shape(), attrs.get<PoolAttrs>());
  EMBER_CHECK(!g.relu, "avg_pool2d: relu fuses into max_pool2d only");
  Shape s{g.N, g.C, g.P, g.Q};
  return {{s, x.dtype(), layout_strides(s, runs_channels_last(x))}};
}

std::vector<Tensor> avg_pool2d_vjp(const BackwardCtx& ctx) {
  const autograd::OutputMeta& xm = ctx.input_meta[0];
  Tensor g = ctx.grad(0);
  return {call1(OpId::avg_pool2d_backward, {g}, with_input_size(ctx.attr<PoolAttrs>(), xm.shape[2], xm.shape[3]))};
}

std::vector<TensorSpec> infer_avg_pool2d_backward(std::span<const Tensor> in, const Attrs& attrs) {
  EMBER_CHECK(in.size() == 1, "avg_pool2d_backward: expects (grad_output)");
  const Tensor& gy = in[0];
  const auto& a = attrs.get<PoolAttrs>();
  check_float("avg_pool2d_backward", gy);
  EMBER_CHECK(gy.dim() == 4, "avg_pool2d_backward: expects a 4-D grad_output, got ", gy.shape());
  PoolGeom g = pool_geometry("avg_pool2d_backward", {gy.shape()[0], gy.shape()[1], a.size[0], a.size[1]}, a);
  EMBER_CHECK(!g.relu, "avg_pool2d_backward: relu fuses into max_pool2d only");
  Shape ys{g.N, g.C, g.P, g.Q};
  EMBER_CHECK(gy.shape() == ys, "avg_pool2d_backward: grad_output ", gy.shape(), " must be ", ys,
              ", the output of pooling an input of size ", a.size[0], "x", a.size[1]);
  Shape xs{g.N, g.C, g.H, g.W};
  return {{xs, gy.dtype(), layout_strides(xs, runs_channels_last(gy))}};
}

std::vector<Tensor> avg_pool2d_backward_vjp(const BackwardCtx& ctx) {
  PoolAttrs a = ctx.attr<PoolAttrs>();
  a.size[0] = a.size[1] = 0;
  return {call1(OpId::avg_pool2d, {ctx.grad(0)}, a)};
}

// ---- adaptive_avg_pool2d ----

std::vector<TensorSpec> infer_adaptive(std::span<const Tensor> in, const Attrs& attrs) {
  EMBER_CHECK(in.size() == 1, "adaptive_avg_pool2d: expects one input");
  const Tensor& x = in[0];
  check_float("adaptive_avg_pool2d", x);
  PoolGeom g = adaptive_geometry("adaptive_avg_pool2d", x.shape(), attrs.get<AdaptivePoolAttrs>());
  Shape s{g.N, g.C, g.P, g.Q};
  return {{s, x.dtype(), layout_strides(s, runs_channels_last(x))}};
}

std::vector<Tensor> adaptive_vjp(const BackwardCtx& ctx) {
  const autograd::OutputMeta& xm = ctx.input_meta[0];
  AdaptivePoolAttrs a = ctx.attr<AdaptivePoolAttrs>();
  a.size[0] = xm.shape[2];
  a.size[1] = xm.shape[3];
  return {call1(OpId::adaptive_avg_pool2d_backward, {ctx.grad(0)}, a)};
}

std::vector<TensorSpec> infer_adaptive_backward(std::span<const Tensor> in, const Attrs& attrs) {
  EMBER_CHECK(in.size() == 1, "adaptive_avg_pool2d_backward: expects (grad_output)");
  const Tensor& gy = in[0];
  const auto& a = attrs.get<AdaptivePoolAttrs>();
  check_float("adaptive_avg_pool2d_backward", gy);
  EMBER_CHECK(gy.dim() == 4, "adaptive_avg_pool2d_backward: expects a 4-D grad_output, got ", gy.shape());
  PoolGeom g =
      adaptive_geometry("adaptive_avg_pool2d_backward", {gy.shape()[0], gy.shape()[1], a.size[0], a.size[1]}, a);
  Shape ys{g.N, g.C, g.P, g.Q};
  EMBER_CHECK(gy.shape() == ys, "adaptive_avg_pool2d_backward: grad_output ", gy.shape(), " must be ", ys);
  Shape xs{g.N, g.C, g.H, g.W};
  return {{xs, gy.dtype(), layout_strides(xs, runs_channels_last(gy))}};
}

std::vector<Tensor> adaptive_backward_vjp(const BackwardCtx& ctx) {
  AdaptivePoolAttrs a = ctx.attr<AdaptivePoolAttrs>();
  a.size[0] = a.size[1] = 0;
  return {call1(OpId::adaptive_avg_pool2d, {ctx.grad(0)}, a)};
}

// ---- cost ----

Cost pool_cost(const KernelCall& c) {
  double bytes = 0;
  for (const Tensor& t : c.in)
    if (t.defined()) bytes += static_cast<double>(t.nbytes());
  for (const Tensor& t : c.out) bytes += static_cast<double>(t.nbytes());
  // one add or compare per window element read
  double window = 1;
  if (c.op == OpId::max_pool2d || c.op == OpId::avg_pool2d) {
    const auto& a = c.attr<PoolAttrs>();
    window = static_cast<double>(a.kernel[0] * a.kernel[1]);
    return {bytes, window * static_cast<double>(c.out[0].numel())};
  }
  return {bytes, static_cast<double>(std::max(c.in[0].numel(), c.out[0].numel()))};
}

}  // namespace

namespace {

// What every pooling op and gradient shares: the cost model, and kernels that take NCHW and
// channels-last inputs as they are.
void define_pool(OpInfo& info, const char* doc, InferFn infer, BackwardFn backward) {
  info.doc = doc;
  info.infer = infer;
  info.backward = backward;
  info.cost = pool_cost;
  info.contiguous_inputs = false;
}

}  // namespace

// The CPU variants are in pool_cpu.cpp, the oneDNN ones in pool_dnnl.cpp.
void define_op_max_pool2d(OpInfo& info) {
  define_pool(info, "2-D max pooling with argmax indices (NCHW or channels-last)", infer_max_pool2d, max_pool2d_vjp);
  info.save = Save::outputs;
  info.save_outputs_mask = 0b10;  // only the indices
  register_cpu_max_pool2d(info);
}

void define_op_max_pool2d_backward(OpInfo& info) {
  define_pool(info, "gradient of max_pool2d: grad_output routed to the saved argmax", infer_max_pool2d_backward,
              max_pool2d_backward_vjp);
  info.save = Save::inputs;
  info.save_inputs_mask = 0b10;  // only the indices
  register_cpu_max_pool2d_backward(info);
}

void define_op_avg_pool2d(OpInfo& info) {
  define_pool(info, "2-D average pooling (count_include_pad as PyTorch)", infer_avg_pool2d, avg_pool2d_vjp);
  register_cpu_avg_pool2d(info);
#if EMBER_WITH_DNNL
  register_dnnl_avg_pool2d(info);
#endif
}

void define_op_avg_pool2d_backward(OpInfo& info) {
  define_pool(info, "gradient of avg_pool2d (gather form: each input sums its windows)", infer_avg_pool2d_backward,
              avg_pool2d_backward_vjp);
  register_cpu_avg_pool2d_backward(info);
#if EMBER_WITH_DNNL
  register_dnnl_avg_pool2d_backward(info);
#endif
}

void define_op_adaptive_avg_pool2d(OpInfo& info) {
  define_pool(info, "2-D adaptive average pooling (PyTorch's bins; 1x1 = global average)", infer_adaptive,
              adaptive_vjp);
  register_cpu_adaptive_avg_pool2d(info);
}

void define_op_adaptive_avg_pool2d_backward(OpInfo& info) {
  define_pool(info, "gradient of adaptive_avg_pool2d (gather form)", infer_adaptive_backward, adaptive_backward_vjp);
  register_cpu_adaptive_avg_pool2d_backward(info);
}

namespace {

PoolAttrs functional_attrs(const char* op, std::array<int64_t, 2> kernel, std::array<int64_t, 2> stride,
                           std::array<int64_t, 2> padding, bool count_include_pad) {
  EMBER_CHECK(stride[0] >= 0 && stride[1] >= 0, op, ": stride must be positive (or 0 for the kernel size), got (",
              stride[0], ", ", stride[1], ")");
  PoolAttrs a{};
  for (int i = 0; i < 2; ++i) {
    a.kernel[i] = kernel[static_cast<size_t>(i)];
    a.stride[i] = stride[static_cast<size_t>(i)] == 0 ? kernel[static_cast<size_t>(i)] : stride[static_cast<size_t>(i)];
    a.padding[i] = padding[static_cast<size_t>(i)];
  }
  a.count_include_pad = count_include_pad ? 1 : 0;
  return a;
}

// Unbatched (C, H, W) inputs run as a batch of one, as PyTorch allows.
template <class F>
Tensor unbatched(const Tensor& x, const F& f) {
  if (x.defined() && x.dim() == 3) return f(x.unsqueeze(0)).squeeze(0);
  return f(x);
}

}  // namespace

std::vector<Tensor> max_pool2d_with_indices(const Tensor& x, std::array<int64_t, 2> kernel,
                                            std::array<int64_t, 2> stride, std::array<int64_t, 2> padding) {
  PoolAttrs a = functional_attrs("max_pool2d", kernel, stride, padding, true);
  if (x.defined() && x.dim() == 3) {
    std::vector<Tensor> r = call(OpId::max_pool2d, {x.unsqueeze(0)}, a);
    return {r[0].squeeze(0), r[1].squeeze(0)};
  }
  return call(OpId::max_pool2d, {x}, a);
}

Tensor max_pool2d(const Tensor& x, std::array<int64_t, 2> kernel, std::array<int64_t, 2> stride,
                  std::array<int64_t, 2> padding) {
  return max_pool2d_with_indices(x, kernel, stride, padding)[0];
}

Tensor relu_max_pool2d(const Tensor& x, std::array<int64_t, 2> kernel, std::array<int64_t, 2> stride,
                       std::array<int64_t, 2> padding) {
  PoolAttrs a = functional_attrs("max_pool2d", kernel, stride, padding, true);
  a.relu = 1;
  return unbatched(x, [&](const Tensor& t) { return call(OpId::max_pool2d, {t}, a)[0]; });
}

Tensor conv2d_max_pool2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dFuncOptions& o,
                         std::array<int64_t, 2> kernel, std::array<int64_t, 2> stride, std::array<int64_t, 2> padding,
                         bool relu) {
  Conv2dAttrs a{o};
  a.max_pool = 1;
  a.pool = functional_attrs("conv2d_max_pool2d", kernel, stride, padding, true);
  a.pool.relu = relu ? 1 : 0;
  return call(OpId::conv2d_max_pool2d, {x, weight, bias}, a)[0];
}

Tensor batch_norm_max_pool2d(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor running_mean,
                             Tensor running_var, bool training, double momentum, double eps,
                             std::array<int64_t, 2> kernel, std::array<int64_t, 2> stride,
                             std::array<int64_t, 2> padding, bool relu, const Tensor& num_batches_tracked) {
  BatchNormAttrs a{};
  a.training = training ? 1 : 0;
  a.momentum = momentum;
  a.eps = eps;
  a.max_pool = 1;
  a.pool = functional_attrs("batch_norm_max_pool2d", kernel, stride, padding, true);
  a.pool.relu = relu ? 1 : 0;
  return call(OpId::batch_norm_max_pool2d, {x, weight, bias, running_mean, running_var, num_batches_tracked}, a)[0];
}

Tensor batch_norm_global_avg_pool2d(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor running_mean,
                                    Tensor running_var, bool training, double momentum, double eps, bool relu,
                                    const Tensor& num_batches_tracked) {
  BatchNormAttrs a{};
  a.training = training ? 1 : 0;
  a.momentum = momentum;
  a.eps = eps;
  a.avg_pool = 1;
  a.relu = relu ? 1 : 0;
  return call(OpId::batch_norm_global_avg_pool2d, {x, weight, bias, running_mean, running_var, num_batches_tracked},
              a)[0];
}

Tensor avg_pool2d(const Tensor& x, std::array<int64_t, 2> kernel, std::array<int64_t, 2> stride,
                  std::array<int64_t, 2> padding, bool count_include_pad) {
  PoolAttrs a = functional_attrs("avg_pool2d", kernel, stride, padding, count_include_pad);
  return unbatched(x, [&](const Tensor& t) { return call1(OpId::avg_pool2d, {t}, a); });
}

Tensor adaptive_avg_pool2d(const Tensor& x, std::array<int64_t, 2> output_size) {
  return unbatched(x, [&](const Tensor& t) {
    return call1(OpId::adaptive_avg_pool2d, {t}, adaptive_pool_attrs(output_size[0], output_size[1]));
  });
}

}  // namespace ember
