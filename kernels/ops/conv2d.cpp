// conv2d, conv2d_backward_input, conv2d_backward_weight and conv2d_max_pool2d: the op definitions:
// shape inference, the composite vjps, cost and the functional API. See conv2d.h for formulas.
// The CPU engines (naive reference, im2col) are in conv2d_cpu.cpp, the CUDA ones in conv2d.cu,
// conv2d_igemm.cu and conv2d_cudnn.cu.
#include "kernels/ops/conv2d.h"

#include "core/autograd/node.h"
#include "kernels/common/memory_format.h"
#include "kernels/functional.h"
#include "kernels/ops/reduce.h"
#include "kernels/registry.h"

#include <algorithm>
#include <array>
#include <cmath>

namespace ember {

ConvGeom conv_geometry(const char* op, const Shape& x, const Shape& w, const Conv2dAttrs& a) {
  const Conv2dFuncOptions& o = a.conv;
  EMBER_CHECK(x.size() == 4, op, ": expects a 4-D input [N, C, H, W], got ", x, " (", x.size(), " dims)");
  EMBER_CHECK(w.size() == 4, op, ": expects a 4-D weight [K, C/groups, R, S], got ", w, " (", w.size(), " dims)");
  EMBER_CHECK(o.groups >= 1, op, ": groups must be positive, got ", o.groups);
  for (int i = 0; i < 2; ++i) {
    EMBER_CHECK(o.stride[i] >= 1, op, ": stride must be positive, got (", o.stride[0], ", ", o.stride[1], ")");
    EMBER_CHECK(o.dilation[i] >= 1, op, ": dilation must be positive, got (", o.dilation[0], ", ", o.dilation[1], ")");
    EMBER_CHECK(o.padding[i] >= 0, op, ": padding must be non-negative, got (", o.padding[0], ", ", o.padding[1], ")");
  }
  ConvGeom g;
  g.N = x[0];
  g.C = x[1];
  g.H = x[2];
  g.W = x[3];
  g.K = w[0];
  g.R = w[2];
  g.S = w[3];
  g.G = o.groups;
  g.sh = o.stride[0];
  g.sw = o.stride[1];
  g.ph = o.padding[0];
  g.pw = o.padding[1];
  g.dh = o.dilation[0];
  g.dw = o.dilation[1];
  EMBER_CHECK(g.C >= 1, op, ": the input ", x, " has no channels");
  EMBER_CHECK(g.K >= 1 && w[1] >= 1 && g.R >= 1 && g.S >= 1, op, ": the weight ", w, " has an empty dimension");
  EMBER_CHECK(g.C % g.G == 0, op, ": groups = ", g.G, " must divide the input channels C = ", g.C, " (input ", x, ")");
  EMBER_CHECK(g.K % g.G == 0, op, ": groups = ", g.G, " must divide the output channels K = ", g.K, " (weight ", w,
              ")");
  g.Cg = g.C / g.G;
  g.Kg = g.K / g.G;
  EMBER_CHECK(w[1] == g.Cg, op, ": input ", x, " has ", g.C, " channels but weight ", w, " expects ", w[1],
              " * groups = ", w[1] * g.G, " channels (groups = ", g.G, ")");
  const int64_t eh = g.dh * (g.R - 1) + 1, ew = g.dw * (g.S - 1) + 1;
  const int64_t hp = g.H + 2 * g.ph, wp = g.W + 2 * g.pw;
  EMBER_CHECK(eh <= hp && ew <= wp, op, ": the kernel ", g.R, "x", g.S, " (", eh, "x", ew, " with dilation ", g.dh, "x",
              g.dw, ") is larger than the padded input ", hp, "x", wp, " (input ", g.H, "x", g.W, ", padding ", g.ph,
              "x", g.pw, ")");
  g.P = (hp - eh) / g.sh + 1;
  g.Q = (wp - ew) / g.sw + 1;
  return g;
}

namespace {

// ---- shape inference ----

void check_dtypes(const char* op, const Tensor& a, const char* an, const Tensor& b, const char* bn) {
  EMBER_CHECK(is_floating(a.dtype()), op, ": expects a floating ", an, ", got ", a.describe());
  EMBER_CHECK(a.dtype() == b.dtype(), op, ": ", an, " ", a.describe(), " and ", bn, " ", b.describe(),
              " must have the same dtype");
}

std::vector<TensorSpec> infer_conv2d(std::span<const Tensor> in, const Attrs& attrs) {
  EMBER_CHECK(in.size() == 3, "conv2d: expects (input, weight, bias)");
  const Tensor &x = in[0], &w = in[1], &b = in[2];
  EMBER_CHECK(x.defined() && w.defined(), "conv2d: input and weight must be defined");
  const auto& a = attrs.get<Conv2dAttrs>();
  EMBER_CHECK(a.bias_grad == 0, "conv2d: bias_grad = ", a.bias_grad, " is an attribute of conv2d_backward_weight only");
  EMBER_CHECK(a.max_pool == 0, "conv2d: max_pool = ", a.max_pool,
              " is an attribute of conv2d_max_pool2d and its gradient ops only");
  ConvGeom g = conv_geometry("conv2d", x.shape(), w.shape(), a);
  check_dtypes("conv2d", x, "input", w, "weight");
  if (b.defined()) {
    EMBER_CHECK(b.dim() == 1 && b.shape()[0] == g.K, "conv2d: bias must be [", g.K,
                "] (one value per output channel), got ", b.shape());
    check_dtypes("conv2d", x, "input", b, "bias");
  }
  Shape out{g.N, g.K, g.P, g.Q};
  return {{out, x.dtype(), layout_strides(out, runs_channels_last(x))}};
}

// The gradient ops' inputs: (grad_output, operand), or with max_pool (pooled gradient, operand,
// indices) (Note [max pooling in the conv backward]).
void check_arity(const char* op, std::span<const Tensor> in, const Conv2dAttrs& a, const char* operand) {
  EMBER_CHECK(a.max_pool == 0 || a.max_pool == 1, op, ": max_pool must be 0 or 1, got ", a.max_pool);
  if (a.max_pool == 0)
    EMBER_CHECK(in.size() == 2, op, ": expects (grad_output, ", operand, "), got ", in.size(), " inputs");
  else
    EMBER_CHECK(in.size() == 3, op, ": with max_pool expects (pooled gradient, ", operand, ", indices), got ",
                in.size(), " inputs");
}

// The max pooling of the convolution's output ys ([N, K, P, Q]) as the attributes say, checked;
// returns its output shape.
Shape pooled_shape(const char* op, const Shape& ys, const Conv2dAttrs& a) {
  const PoolGeom pg = pool_geometry(op, ys, a.pool);
  return {pg.N, pg.C, pg.P, pg.Q};
}

// grad_output gy against the convolution's output ys: ys itself, or with max_pool the pooling's
// output, with i64 indices of the same shape.
void check_grad_output(const char* op, std::span<const Tensor> in, const Shape& ys, const Conv2dAttrs& a) {
  if (a.max_pool == 1) check_pooled_gradient(op, in[0], in[2], ys, a.pool, "the convolution's output");
}

std::vector<TensorSpec> infer_conv2d_backward_input(std::span<const Tensor> in, const Attrs& attrs) {
  const auto& a = attrs.get<Conv2dAttrs>();
  check_arity("conv2d_backward_input", in, a, "weight");
  const Tensor &gy = in[0], &w = in[1];
  EMBER_CHECK(gy.dim() == 4, "conv2d_backward_input: expects a 4-D grad_output [N, K, P, Q], got ", gy.shape());
  EMBER_CHECK(w.dim() == 4, "conv2d_backward_input: expects a 4-D weight [K, C/groups, R, S], got ", w.shape());
  EMBER_CHECK(a.size[0] >= 1 && a.size[1] >= 1, "conv2d_backward_input: the input size (H, W) = (", a.size[0], ", ",
              a.size[1], ") must be positive");
  EMBER_CHECK(a.bias_grad == 0, "conv2d_backward_input: bias_grad = ", a.bias_grad,
              " is an attribute of conv2d_backward_weight only");
  Shape xs{gy.shape()[0], w.shape()[1] * a.conv.groups, a.size[0], a.size[1]};
  ConvGeom g = conv_geometry("conv2d_backward_input", xs, w.shape(), a);
  Shape ys{g.N, g.K, g.P, g.Q};
  EMBER_CHECK(a.max_pool == 1 || gy.shape() == ys, "conv2d_backward_input: grad_output ", gy.shape(),
              " does not match the output ", ys, " of a convolution of input ", xs, " with weight ", w.shape());
  check_grad_output("conv2d_backward_input", in, ys, a);
  check_dtypes("conv2d_backward_input", gy, "grad_output", w, "weight");
  return {{xs, gy.dtype(), layout_strides(xs, runs_channels_last(gy))}};
}

std::vector<TensorSpec> infer_conv2d_backward_weight(std::span<const Tensor> in, const Attrs& attrs) {
  const auto& a = attrs.get<Conv2dAttrs>();
  check_arity("conv2d_backward_weight", in, a, "input");
  const Tensor &gy = in[0], &x = in[1];
  EMBER_CHECK(gy.dim() == 4, "conv2d_backward_weight: expects a 4-D grad_output [N, K, P, Q], got ", gy.shape());
  EMBER_CHECK(x.dim() == 4, "conv2d_backward_weight: expects a 4-D input [N, C, H, W], got ", x.shape());
  EMBER_CHECK(a.size[0] >= 1 && a.size[1] >= 1, "conv2d_backward_weight: the kernel size (R, S) = (", a.size[0], ", ",
              a.size[1], ") must be positive");
  EMBER_CHECK(a.bias_grad == 0 || a.bias_grad == 1, "conv2d_backward_weight: bias_grad must be 0 or 1, got ",
              a.bias_grad);
  const int64_t groups = a.conv.groups;
  EMBER_CHECK(groups >= 1 && x.shape()[1] % groups == 0, "conv2d_backward_weight: groups = ", groups,
              " must divide the input channels C = ", x.shape()[1]);
  Shape ws{gy.shape()[1], x.shape()[1] / groups, a.size[0], a.size[1]};
  ConvGeom g = conv_geometry("conv2d_backward_weight", x.shape(), ws, a);
  Shape ys{g.N, g.K, g.P, g.Q};
  EMBER_CHECK(a.max_pool == 1 || gy.shape() == ys, "conv2d_backward_weight: grad_output ", gy.shape(),
              " does not match the output ", ys, " of a convolution of input ", x.shape(), " with weight ", ws);
  check_grad_output("conv2d_backward_weight", in, ys, a);
  check_dtypes("conv2d_backward_weight", gy, "grad_output", x, "input");
  std::vector<TensorSpec> out{{ws, x.dtype(), layout_strides(ws, runs_channels_last(x))}};
  if (a.bias_grad == 1) out.push_back({Shape{g.K}, x.dtype()});  // Note [conv bias gradient]
  return out;
}

std::vector<TensorSpec> infer_conv2d_max_pool2d(std::span<const Tensor> in, const Attrs& attrs) {
  EMBER_CHECK(in.size() == 3, "conv2d_max_pool2d: expects (input, weight, bias)");
  const auto& a = attrs.get<Conv2dAttrs>();
  EMBER_CHECK(a.max_pool == 1, "conv2d_max_pool2d: max_pool must be 1 (the op pools), got ", a.max_pool);
  Conv2dAttrs conv = a;
  conv.max_pool = 0;
  const Shape ys = infer_conv2d(in, conv)[0].shape;
  const Shape ps = pooled_shape("conv2d_max_pool2d", ys, a);
  const Strides st = layout_strides(ps, runs_channels_last(in[0]));
  return {{ps, in[0].dtype(), st}, {ps, DType::i64, st}};
}

// ---- autograd ----

// The attributes of one of the gradient ops, from another's: the size it needs, without a bias
// gradient (the pooling stays).
Conv2dAttrs with_size(Conv2dAttrs a, int64_t s0, int64_t s1) {
  a.size[0] = s0;
  a.size[1] = s1;
  a.bias_grad = 0;
  return a;
}

// The attributes of conv2d from another op's: no size, no bias gradient, no pooling.
Conv2dAttrs forward_attrs(Conv2dAttrs a) {
  a = with_size(a, 0, 0);
  a.max_pool = 0;
  a.pool = PoolAttrs{};
  return a;
}

// A gradient op's inputs (a, b) from a gradient op's vjp: with its pooling, a is a pooled gradient
// and the pool's indices (the vjp's third input) follow.
std::vector<Tensor> grad_inputs(const Tensor& a, const Tensor& b, const BackwardCtx& ctx) {
  if (ctx.attr<Conv2dAttrs>().max_pool == 0) return {a, b};
  return {a, b, ctx.inputs[2]};
}

// A gradient with respect to the convolution's output (full), as one with respect to the pooled
// gradient where the op reads one: the transpose of max_pool2d_backward, full gathered at the
// indices (Note [max pooling in the conv backward]).
Tensor to_pooled(const Tensor& full, const BackwardCtx& ctx) {
  const auto& a = ctx.attr<Conv2dAttrs>();
  return a.max_pool == 0 ? full : max_pool_gather(full, ctx.inputs[2], a.pool.relu != 0);
}

// A gradient op's gradients: the indices (a third input with max_pool) have none.
std::vector<Tensor> pad_to_inputs(std::vector<Tensor> grads, const BackwardCtx& ctx) {
  grads.resize(ctx.inputs.size());
  return grads;
}

std::vector<Tensor> conv2d_vjp(const BackwardCtx& ctx) {
  const Tensor &x = ctx.inputs[0], &w = ctx.inputs[1], &b = ctx.inputs[2];
  const auto& a = ctx.attr<Conv2dAttrs>();
  Tensor g = ctx.grad(0);
  // the gradient ops run in the layout of their first operand: keep it the forward's
  g = contiguous_as(g, runs_channels_last(x));
  Tensor dx, dw, db;
  if (ctx.needs_grad(0)) dx = call1(OpId::conv2d_backward_input, {g, w}, with_size(a, x.shape()[2], x.shape()[3]));
  const bool bias = ctx.needs_grad(2) && b.defined();
  if (ctx.needs_grad(1)) {
    Conv2dAttrs wa = with_size(a, w.shape()[2], w.shape()[3]);
    wa.bias_grad = bias ? 1 : 0;  // Note [conv bias gradient]
    std::vector<Tensor> r = call(OpId::conv2d_backward_weight, {g, x}, wa);
    dw = r[0];
    if (bias) db = r[1];
  } else if (bias) {
    db = sum(g, {0, 2, 3});
  }
  return {dx, dw, db};
}

// conv2d_max_pool2d: the gradient ops on the pooled gradient and the pool's indices (Note [max
// pooling in the conv backward]).
std::vector<Tensor> conv2d_max_pool2d_vjp(const BackwardCtx& ctx) {
  const Tensor &x = ctx.inputs[0], &w = ctx.inputs[1], &b = ctx.inputs[2];
  const Tensor& ind = ctx.outputs[1];
  Conv2dAttrs a = ctx.attr<Conv2dAttrs>();
  const ConvGeom geom = conv_geometry("conv2d_max_pool2d", x.shape(), w.shape(), a);
  a.pool = with_input_size(a.pool, geom.P, geom.Q);
  const Tensor g = contiguous_as(ctx.grad(0), runs_channels_last(x));
  Tensor dx, dw, db;
  if (ctx.needs_grad(0)) dx = call1(OpId::conv2d_backward_input, {g, w, ind}, with_size(a, geom.H, geom.W));
  const bool bias = ctx.needs_grad(2) && b.defined();
  if (ctx.needs_grad(1)) {
    Conv2dAttrs wa = with_size(a, geom.R, geom.S);
    wa.bias_grad = bias ? 1 : 0;  // Note [conv bias gradient]
    std::vector<Tensor> r = call(OpId::conv2d_backward_weight, {g, x, ind}, wa);
    dw = r[0];
    if (bias) db = r[1];
  } else if (bias) {
    db = sum(call1(OpId::max_pool2d_backward, {g, ind}, a.pool), {0, 2, 3});
  }
  return {dx, dw, db};
}

std::vector<Tensor> conv2d_backward_input_vjp(const BackwardCtx& ctx) {
  const Tensor &gy = ctx.inputs[0], &w = ctx.inputs[1];
  const auto& a = ctx.attr<Conv2dAttrs>();
  Tensor G = contiguous_as(ctx.grad(0), runs_channels_last(gy));
  Tensor dgy, dw;
  if (ctx.needs_grad(0)) dgy = to_pooled(call1(OpId::conv2d, {G, w, Tensor()}, forward_attrs(a)), ctx);
  if (ctx.needs_grad(1))
    dw = call1(OpId::conv2d_backward_weight, grad_inputs(gy, G, ctx), with_size(a, w.shape()[2], w.shape()[3]));
  return pad_to_inputs({dgy, dw}, ctx);
}

std::vector<Tensor> conv2d_backward_weight_vjp(const BackwardCtx& ctx) {
  const Tensor &gy = ctx.inputs[0], &x = ctx.inputs[1];
  const auto& a = ctx.attr<Conv2dAttrs>();
  Tensor G = ctx.grad(0);
  Tensor dgy, dx;
  // db = sum of gy over (n, p, q): its gradient Gb reaches every gy[n, k, p, q], which is the
  // forward convolution's bias
  const Tensor Gb = a.bias_grad == 1 && ctx.grads.size() > 1 ? ctx.grads[1] : Tensor();
  if (ctx.needs_grad(0)) dgy = to_pooled(call1(OpId::conv2d, {x, G, Gb}, forward_attrs(a)), ctx);
  if (ctx.needs_grad(1))
    dx = call1(OpId::conv2d_backward_input, grad_inputs(contiguous_as(gy, runs_channels_last(x)), G, ctx),
               with_size(a, x.shape()[2], x.shape()[3]));
  return pad_to_inputs({dgy, dx}, ctx);
}

// ---- cost ----

Cost conv2d_cost(const KernelCall& c) {
  ConvGeom g = conv_geometry("conv2d", c.in[0].shape(), c.in[1].shape(), c.attr<Conv2dAttrs>());
  double bytes = static_cast<double>(c.in[0].nbytes() + c.in[1].nbytes() + c.out[0].nbytes());
  if (c.in[2].defined()) bytes += static_cast<double>(c.in[2].nbytes());
  return {bytes, g.flops()};
}
// Every operand's bytes once: with max_pool the pooled gradient and the indices, not the
// convolution's grad_output (Note [max pooling in the conv backward]).
double operand_bytes(const KernelCall& c) {
  double bytes = 0;
  for (const Tensor& t : c.in)
    if (t.defined()) bytes += static_cast<double>(t.nbytes());
  for (const Tensor& t : c.out) bytes += static_cast<double>(t.nbytes());
  return bytes;
}
Cost conv2d_backward_input_cost(const KernelCall& c) {
  ConvGeom g = conv_geometry("conv2d_backward_input", c.out[0].shape(), c.in[1].shape(), c.attr<Conv2dAttrs>());
  return {operand_bytes(c), g.flops()};
}
Cost conv2d_backward_weight_cost(const KernelCall& c) {
  ConvGeom g = conv_geometry("conv2d_backward_weight", c.in[1].shape(), c.out[0].shape(), c.attr<Conv2dAttrs>());
  return {operand_bytes(c), g.flops()};
}
// The fused op's: the pooled output and indices, not the convolution's output.
Cost conv2d_max_pool2d_cost(const KernelCall& c) {
  ConvGeom g = conv_geometry("conv2d_max_pool2d", c.in[0].shape(), c.in[1].shape(), c.attr<Conv2dAttrs>());
  return {operand_bytes(c), g.flops()};
}

}  // namespace

void conv_bias_grad_apart(const KernelCall& c) {
  if (c.out.size() < 2) return;
  if (c.in[0].device().type == DeviceType::cpu) conv_bias_grad_cpu(c.in[0], c.out[1]);
  else call_into(OpId::sum, {c.in[0]}, {c.out[1]}, ReduceAttrs{0b1101, 0, 1});
}

void conv_unpooled_apart(const KernelCall& c, void (*f)(const KernelCall&)) {
  const auto& a = c.attr<Conv2dAttrs>();
  if (a.max_pool == 0) return f(c);
  const bool bwi = c.op == OpId::conv2d_backward_input;
  EMBER_CHECK(bwi || c.op == OpId::conv2d_backward_weight, "conv_unpooled_apart: called for op ", op_info(c.op).name);
  const ConvGeom g = bwi ? conv_geometry("conv2d_backward_input", c.out[0].shape(), c.in[1].shape(), a)
                         : conv_geometry("conv2d_backward_weight", c.in[1].shape(), c.out[0].shape(), a);
  Conv2dAttrs plain = a;
  plain.max_pool = 0;
  plain.pool = PoolAttrs{};
  run_unpooled(c, f, a.pool, {g.N, g.K, g.P, g.Q}, Attrs(plain));
}

namespace {

// conv2d_max_pool2d as its two ops: conv2d into a scratch output, max_pool2d from it into the
// call's outputs; each op's reference kernel (variant 0) or through the registry.
void conv_then_pool(const KernelCall& c, bool reference) {
  Conv2dAttrs conv = c.attr<Conv2dAttrs>();
  const PoolAttrs pool = conv.pool;
  conv.max_pool = 0;
  conv.pool = PoolAttrs{};
  const Tensor& x = c.in[0];
  const TensorSpec ys = op_info(OpId::conv2d).infer(c.in, conv)[0];
  const TensorOptions opts = TensorOptions().dtype(ys.dtype).device(x.device());
  Tensor y = ys.strides.empty() ? empty(ys.shape, opts) : empty_strided(ys.shape, ys.strides, opts);
  std::vector<Tensor> in(c.in.begin(), c.in.end());
  if (reference) {
    call_variant_into(op_info(OpId::conv2d).variants.at(0), OpId::conv2d, in, {y}, conv);
    call_variant_into(op_info(OpId::max_pool2d).variants.at(0), OpId::max_pool2d, {y}, {c.out[0], c.out[1]}, pool);
  } else {
    call_into(OpId::conv2d, in, {y}, conv);
    call_into(OpId::max_pool2d, {y}, {c.out[0], c.out[1]}, pool);
  }
}

void conv_pool_reference(const KernelCall& c) { conv_then_pool(c, true); }

}  // namespace

void conv_then_pool_ops(const KernelCall& c) { conv_then_pool(c, false); }

namespace {

// What the three convolution ops share: inputs saved for the gradient, kernels that take NCHW and
// channels-last as they are, the CPU variants (conv2d_cpu.cpp: the naive reference first) and
// oneDNN's (conv2d_dnnl.cpp).
void define_conv(OpInfo& info, ConvDirection dir, const char* doc, InferFn infer, BackwardFn backward, CostFn cost) {
  info.doc = doc;
  info.infer = infer;
  info.backward = backward;
  info.save = Save::inputs;
  info.cost = cost;
  info.contiguous_inputs = false;
  const auto d = static_cast<size_t>(dir);
  constexpr std::array<void (*)(OpInfo&), 3> cpu = {register_cpu_conv2d, register_cpu_conv2d_backward_input,
                                                    register_cpu_conv2d_backward_weight};
  cpu[d](info);
#if EMBER_WITH_DNNL
  constexpr std::array<void (*)(OpInfo&), 3> dnnl = {register_dnnl_conv2d, register_dnnl_conv2d_backward_input,
                                                     register_dnnl_conv2d_backward_weight};
  dnnl[d](info);
#endif
}

}  // namespace

void define_op_conv2d(OpInfo& info) {
  define_conv(info, ConvDirection::forward,
              "2-D convolution (NCHW or channels-last), stride/padding/dilation/groups, fused bias", infer_conv2d,
              conv2d_vjp, conv2d_cost);
  info.autocast = AutocastPolicy::lower;
}

void define_op_conv2d_backward_input(OpInfo& info) {
  define_conv(info, ConvDirection::backward_input,
              "gradient of conv2d with respect to its input (a transposed convolution)", infer_conv2d_backward_input,
              conv2d_backward_input_vjp, conv2d_backward_input_cost);
}

void define_op_conv2d_backward_weight(OpInfo& info) {
  define_conv(info, ConvDirection::backward_weight, "gradient of conv2d with respect to its weight",
              infer_conv2d_backward_weight, conv2d_backward_weight_vjp, conv2d_backward_weight_cost);
}

void define_op_conv2d_max_pool2d(OpInfo& info) {
  info.doc = "conv2d, then max_pool2d (relu optional): the backward reads the pooled gradient";
  info.infer = infer_conv2d_max_pool2d;
  info.backward = conv2d_max_pool2d_vjp;
  info.save = Save::both;
  info.save_outputs_mask = 0b10;  // only the indices
  info.cost = conv2d_max_pool2d_cost;
  info.contiguous_inputs = false;
  info.autocast = AutocastPolicy::lower;
  info.add_variant({.name = "naive",
                    .device = DeviceType::cpu,
                    .fn = conv_pool_reference,
                    .dtypes = kFloatTypes,
                    .flags = kReference,
                    .note = "reference: conv2d's and max_pool2d's reference kernels"});
  info.add_variant({.name = "ops",
                    .device = DeviceType::cpu,
                    .fn = conv_then_pool_ops,
                    .dtypes = kFloatTypes,
                    .note = "conv2d, then max_pool2d, each through the registry"});
}

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dFuncOptions& o) {
  return call1(OpId::conv2d, {x, weight, bias}, Conv2dAttrs{o});
}

Tensor conv2d_backward_input(const Tensor& grad_output, const Tensor& weight, std::array<int64_t, 2> input_hw,
                             const Conv2dFuncOptions& o) {
  return call1(OpId::conv2d_backward_input, {grad_output, weight}, Conv2dAttrs{o, {input_hw[0], input_hw[1]}});
}

Tensor conv2d_backward_weight(const Tensor& grad_output, const Tensor& x, std::array<int64_t, 2> kernel_rs,
                              const Conv2dFuncOptions& o) {
  return call1(OpId::conv2d_backward_weight, {grad_output, x}, Conv2dAttrs{o, {kernel_rs[0], kernel_rs[1]}});
}

}  // namespace ember
