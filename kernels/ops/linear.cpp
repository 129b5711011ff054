// linear: y = act(x W^T + b), the fully connected layer.
//
// Shapes: x [..., in], W [out, in] (PyTorch's layout), b [out] or absent -> y [..., out].
// act: none, relu, gelu (exact) - fused epilogues.
// Gradients (z = x W^T + b, y = act(z), dz = g * act'(z)):
//   dx = dz W,  dW = dz^T x (summed over the leading dims),  db = sum(dz) over the leading dims.
// For relu, act'(z) is read from the saved output (y > 0); for gelu the pre-activation z is
// recomputed in backward (one extra GEMM instead of keeping another activation-sized buffer).
// FLOPs: 2 * rows * in * out (+ rows * out for the epilogue).
//
// Numerics: z is accumulated in acc_t (f32 for f16/bf16), the bias and the activation are applied
// in acc_t too, and the result is rounded to the output dtype once (as cuBLASLt's epilogues and
// ember's CUDA kernels do; rounding z first and adding the bias after would round twice).
//
// CPU: "cpu" is the reference (kReference): z = x W^T by matmul's reference loop on inputs widened
// to acc_t (exact), then bias and activation in one pass. "cpu_fused" (the default) runs the
// blocked GEMM (kernels/gemm/cpu_gemm.h) with bias, activation and rounding applied to each output
// micro-tile while it is still in L1.
//
// The backward is two ops, so that a device can fuse each (Note [fused linear backward] in
// linear.cu): linear_backward_input (g, y, W) -> dx = dz W and linear_backward_weight (g, y, x) ->
// (dW = dz^T x, db = sum(dz)), with dz = g * relu'(y) for relu (y, the saved output, is > 0
// exactly where z is) and dz = g for none. gelu's vjp computes dz itself and passes none. On the
// CPU "cpu" is their reference (in acc_t, matmul's reference loop) and "composite" the default:
// relu_backward, matmul and sum, the ops the backward ran before it was fused.
#include "kernels/ops/linear.h"

#include "kernels/common/math.h"
#include "kernels/gemm/cpu_gemm.h"
#include "kernels/functional.h"
#include "kernels/ops/reduce.h"  // ReduceAttrs
#include "kernels/ops/unary.h"
#include "kernels/registry.h"

namespace ember {

// Explicit, so in_features = 0 works.
int64_t linear_rows(const Tensor& t) {
  int64_t r = 1;
  for (int d = 0; d + 1 < t.dim(); ++d) r *= t.shape()[d];
  return r;
}

bool linear_masks(const KernelCall& c) {
  return static_cast<Activation>(c.attr<LinearAttrs>().activation) == Activation::relu;
}

// g, or g where y > 0 and 0 elsewhere (exact in any dtype); no copy when g has `dtype` and no mask.
Tensor linear_dz(const KernelCall& c, DType dtype) {
  const Shape s{linear_rows(c.in[0]), c.in[0].shape().back()};
  auto as = [&](const Tensor& t) { return t.dtype() == dtype ? t.reshape(s) : cast(t.reshape(s), dtype); };
  Tensor g2 = as(c.in[0]);
  return linear_masks(c) ? relu_backward(g2, as(c.in[1])) : g2;
}

bool linear_masks_on_load(const Tensor& g, int64_t in_f) {
#if EMBER_WITH_CUDA
  return g.is_cuda() && cuda_linear_backward_masks_on_load(g, in_f);
#else
  (void)g;
  (void)in_f;
  return false;
#endif
}

namespace {

std::vector<TensorSpec> infer_linear(std::span<const Tensor> in, const Attrs& a) {
  EMBER_CHECK(in.size() == 3, "linear: expects (x, weight, bias)");
  const Tensor &x = in[0], &w = in[1], &b = in[2];
  EMBER_CHECK(w.dim() == 2, "linear: weight must be [out_features, in_features], got ", w.shape());
  EMBER_CHECK(x.dim() >= 1, "linear: input must have at least one dim, got ", x.shape());
  EMBER_CHECK(x.shape().back() == w.shape()[1], "linear: input ", x.shape(), " has ", x.shape().back(),
              " features but weight ", w.shape(), " expects ", w.shape()[1]);
  EMBER_CHECK(is_floating(x.dtype()) && x.dtype() == w.dtype(), "linear: input ", x.describe(), " and weight ",
              w.describe(), " must share a floating dtype");
  if (b.defined()) {
    EMBER_CHECK(b.dim() == 1 && b.shape()[0] == w.shape()[0], "linear: bias must be [", w.shape()[0], "], got ",
                b.shape());
    EMBER_CHECK(b.dtype() == x.dtype(), "linear: bias ", b.describe(), " must have the input's dtype ", x.dtype());
  }
  int act = a.get<LinearAttrs>().activation;
  EMBER_CHECK(act >= 0 && act <= 2, "linear: unknown activation ", act);
  Shape s = x.shape();
  s[s.size() - 1] = w.shape()[0];
  return {{s, x.dtype(), {}}};
}

template <class T>
void epilogue_cpu(Tensor& z, const Tensor& b, Activation act) {
  T* zp = z.data<T>();
  const int64_t out = z.shape().back(), rows = out == 0 ? 0 : z.numel() / out;
  const T* bp = b.defined() ? b.data<T>() : nullptr;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < out; ++j) {
      acc_t<T> v = static_cast<acc_t<T>>(zp[r * out + j]);
      if (bp != nullptr) v += static_cast<acc_t<T>>(bp[j]);
      if (act == Activation::relu) v = unary::Relu::f(v);
      else if (act == Activation::gelu) v = unary::Gelu::f(v);
      zp[r * out + j] = static_cast<T>(v);
    }
}

void linear_cpu(const KernelCall& c) {
  const Tensor &x = c.in[0], &w = c.in[1], &b = c.in[2];
  Tensor& y = c.out[0];
  auto act = static_cast<Activation>(c.attr<LinearAttrs>().activation);
  const DType acc = x.dtype() == DType::f64 ? DType::f64 : DType::f32;
  Tensor x2 = cast(x.reshape({linear_rows(x), x.shape().back()}), acc);
  Tensor w2 = cast(w, acc);
  const Variant& ref = op_info(OpId::matmul).variants.at(0);  // the reference loop, not the default
  Tensor z = call_variant(ref, OpId::matmul, {x2, w2.t()}).at(0);
  Tensor b2 = b.defined() ? cast(b, acc).contiguous() : b;
  EMBER_DISPATCH_FLOAT(acc, "linear", [&] { epilogue_cpu<scalar_t>(z, b2, act); });
  Tensor yv = y.view(z.shape());
  copy_(yv, z);  // the one rounding to y's dtype
}

void linear_cpu_fused(const KernelCall& c) {
  const Tensor &x = c.in[0], &w = c.in[1], &b = c.in[2];  // contiguous (the runner made them so)
  const Tensor& y = c.out[0];
  const int64_t in_f = w.shape()[1], out_f = w.shape()[0];
  const int64_t rows = out_f == 0 ? 0 : y.numel() / out_f;
  EMBER_DISPATCH_FLOAT(x.dtype(), "linear", [&] {
    gemm::CpuGemm<scalar_t> g;
    g.M = rows;
    g.N = out_f;
    g.K = in_f;
    g.a = x.data<scalar_t>();
    g.a_rs = in_f;
    g.a_cs = 1;
    g.b = w.data<scalar_t>();  // B = W^T: element (k, n) is w[n, k]
    g.b_rs = 1;
    g.b_cs = in_f;
    g.c = y.data<scalar_t>();
    g.c_rs = out_f;
    g.bias = b.defined() ? b.data<scalar_t>() : nullptr;
    g.act = static_cast<int>(c.attr<LinearAttrs>().activation);
    gemm::cpu_gemm(g);
  });
}

std::vector<Tensor> linear_vjp(const BackwardCtx& ctx) {
  const Tensor &x = ctx.inputs[0], &w = ctx.inputs[1], &b = ctx.inputs[2];
  auto act = static_cast<Activation>(ctx.attr<LinearAttrs>().activation);
  Tensor g = ctx.grad(0);
  Tensor y;  // the relu mask's source
  if (act == Activation::relu) {
    y = ctx.outputs[0];
  } else if (act == Activation::gelu) {
    Tensor z = linear(x, w, b);  // recompute the pre-activation
    g = gelu_backward(g, z);
    act = Activation::none;
  }
  // Both gradients of a relu layer: dz once, unless both ops apply the mask as they load g (CUDA's
  // outer-product kernels and, in f32, the SIMT GEMM's fused form, which never write dz; Note
  // [fused linear backward] in linear.cu). The CPU's kernels and CUDA's composite compute dz
  // themselves, so each op would pass over g again.
  // (A --backends or autotune choice other than outer is not foreseen here: it costs that pass.)
  const bool weight_grads = ctx.needs_grad(1) || (ctx.needs_grad(2) && b.defined());
  if (act == Activation::relu && ctx.needs_grad(0) && weight_grads && !linear_masks_on_load(g, w.shape()[1])) {
    g = relu_backward(g, y);
    act = Activation::none;
  }
  const LinearAttrs ba{static_cast<int64_t>(act)};
  Tensor dx, dw, db;
  if (ctx.needs_grad(0)) dx = call1(OpId::linear_backward_input, {g, y, w}, ba);
  if (weight_grads) {
    std::vector<Tensor> r = call(OpId::linear_backward_weight, {g, y, x}, ba);
    if (ctx.needs_grad(1)) dw = r[0];
    if (ctx.needs_grad(2) && b.defined()) db = r[1];
  }
  return {dx, dw, db};
}

Cost linear_cost(const KernelCall& c) {
  const Tensor &x = c.in[0], &w = c.in[1];
  double rows = static_cast<double>(x.numel() / std::max<int64_t>(1, x.shape().back()));
  double in_f = static_cast<double>(w.shape()[1]), out_f = static_cast<double>(w.shape()[0]);
  double bytes = static_cast<double>(x.nbytes() + w.nbytes() + c.out[0].nbytes());
  if (c.in[2].defined()) bytes += static_cast<double>(c.in[2].nbytes());
  return {bytes, 2.0 * rows * in_f * out_f};
}

// ---- linear_backward_input, linear_backward_weight ----

// What both backward ops check of (grad_output, output, ...): g [..., out] floating; y g's shape
// and dtype when the activation is relu (its mask), ignored for none.
void check_grad_and_output(const char* op, const Tensor& g, const Tensor& y, const Attrs& a) {
  const int64_t act = a.get<LinearAttrs>().activation;
  EMBER_CHECK(act == 0 || act == 1, op, ": the activation must be none (0) or relu (1), got ", act,
              " (for gelu, apply gelu_backward to the gradient first and pass none)");
  EMBER_CHECK(g.defined() && g.dim() >= 1, op, ": grad_output must have at least one dim, got ",
              g.defined() ? g.describe() : std::string("none"));
  EMBER_CHECK(is_floating(g.dtype()), op, ": grad_output ", g.describe(), " must be floating");
  if (act == 1) {
    EMBER_CHECK(y.defined(), op, ": relu needs the layer's output y for its mask, got none");
    EMBER_CHECK(y.shape() == g.shape() && y.dtype() == g.dtype(), op, ": the output ", y.describe(),
                " must have grad_output's shape and dtype ", g.describe());
  }
}

std::vector<TensorSpec> infer_linear_backward_input(std::span<const Tensor> in, const Attrs& a) {
  EMBER_CHECK(in.size() == 3, "linear_backward_input: expects (grad_output, output, weight)");
  const Tensor &g = in[0], &y = in[1], &w = in[2];
  check_grad_and_output("linear_backward_input", g, y, a);
  EMBER_CHECK(w.defined() && w.dim() == 2, "linear_backward_input: weight must be [out_features, in_features], got ",
              w.defined() ? w.describe() : std::string("none"));
  EMBER_CHECK(g.shape().back() == w.shape()[0], "linear_backward_input: grad_output ", g.shape(), " has ",
              g.shape().back(), " features but weight ", w.shape(), " has ", w.shape()[0], " outputs");
  EMBER_CHECK(w.dtype() == g.dtype(), "linear_backward_input: weight ", w.describe(), " must have grad_output's dtype ",
              g.dtype());
  Shape s = g.shape();
  s[s.size() - 1] = w.shape()[1];
  return {{s, g.dtype(), {}}};
}

std::vector<TensorSpec> infer_linear_backward_weight(std::span<const Tensor> in, const Attrs& a) {
  EMBER_CHECK(in.size() == 3, "linear_backward_weight: expects (grad_output, output, input)");
  const Tensor &g = in[0], &y = in[1], &x = in[2];
  check_grad_and_output("linear_backward_weight", g, y, a);
  EMBER_CHECK(x.defined(), "linear_backward_weight: the layer's input is missing");
  bool same_lead = x.dim() == g.dim();
  for (int d = 0; same_lead && d + 1 < x.dim(); ++d) same_lead = x.shape()[d] == g.shape()[d];
  EMBER_CHECK(same_lead, "linear_backward_weight: input ", x.shape(), " and grad_output ", g.shape(),
              " must have the same leading dims");
  EMBER_CHECK(x.dtype() == g.dtype(), "linear_backward_weight: input ", x.describe(), " must have grad_output's dtype ",
              g.dtype());
  const int64_t out_f = g.shape().back(), in_f = x.shape().back();
  return {{Shape{out_f, in_f}, g.dtype(), {}}, {Shape{out_f}, g.dtype(), {}}};
}

DType acc_dtype(DType t) { return t == DType::f64 ? DType::f64 : DType::f32; }

void linear_backward_input_cpu(const KernelCall& c) {
  const DType acc = acc_dtype(c.in[0].dtype());
  const Variant& ref = op_info(OpId::matmul).variants.at(0);
  Tensor dx = call_variant(ref, OpId::matmul, {linear_dz(c, acc), cast(c.in[2], acc)}).at(0);
  Tensor out = c.out[0].view(dx.shape());
  copy_(out, dx);  // the one rounding
}

void linear_backward_weight_cpu(const KernelCall& c) {
  const Tensor& x = c.in[2];
  const DType acc = acc_dtype(x.dtype());
  Tensor dz = linear_dz(c, acc);
  const Variant& ref = op_info(OpId::matmul).variants.at(0);
  Tensor x2 = cast(x.reshape({dz.shape()[0], x.shape().back()}), acc);
  Tensor dw = call_variant(ref, OpId::matmul, {dz.t(), x2}).at(0);
  Tensor db = sum(dz, {0});
  Tensor out_w = c.out[0], out_b = c.out[1];
  copy_(out_w, dw);
  copy_(out_b, db);
}

// Gradients of the backward ops themselves (dz = g m, m = relu'(y) or 1, piecewise constant in y,
// so y gets none). input: dx = dz W -> dg = (G W^T) m, dW = dz^T G.
std::vector<Tensor> linear_backward_input_vjp(const BackwardCtx& ctx) {
  const Tensor &g = ctx.inputs[0], &y = ctx.inputs[1], &w = ctx.inputs[2];
  const bool relu = static_cast<Activation>(ctx.attr<LinearAttrs>().activation) == Activation::relu;
  const int64_t rows = linear_rows(g), out_f = w.shape()[0], in_f = w.shape()[1];
  Tensor G = ctx.grad(0).reshape({rows, in_f});
  Tensor y2 = relu ? y.reshape({rows, out_f}) : Tensor();
  Tensor dg, dw;
  if (ctx.needs_grad(0)) {
    Tensor t = matmul(G, w.t());
    dg = (relu ? relu_backward(t, y2) : t).reshape(g.shape());
  }
  if (ctx.needs_grad(2)) {
    Tensor g2 = g.reshape({rows, out_f});
    dw = matmul((relu ? relu_backward(g2, y2) : g2).t(), G);
  }
  return {dg, Tensor(), dw};
}

// weight: dW = dz^T x, db = sum(dz) -> dg = (x GW^T + Gb) m, dx = dz GW.
std::vector<Tensor> linear_backward_weight_vjp(const BackwardCtx& ctx) {
  const Tensor &g = ctx.inputs[0], &y = ctx.inputs[1], &x = ctx.inputs[2];
  const bool relu = static_cast<Activation>(ctx.attr<LinearAttrs>().activation) == Activation::relu;
  const int64_t rows = linear_rows(g), out_f = g.shape().back(), in_f = x.shape().back();
  Tensor Gw = ctx.grad(0), Gb = ctx.grad(1);
  Tensor y2 = relu ? y.reshape({rows, out_f}) : Tensor();
  Tensor dg, dx;
  if (ctx.needs_grad(0)) {
    Tensor t = linear(x.reshape({rows, in_f}), Gw, Gb);  // x GW^T + Gb, rounded once
    dg = (relu ? relu_backward(t, y2) : t).reshape(g.shape());
  }
  if (ctx.needs_grad(2)) {
    Tensor g2 = g.reshape({rows, out_f});
    dx = matmul(relu ? relu_backward(g2, y2) : g2, Gw).reshape(x.shape());
  }
  return {dg, Tensor(), dx};
}

Cost linear_backward_input_cost(const KernelCall& c) {
  const Tensor &g = c.in[0], &w = c.in[2];
  double bytes = static_cast<double>(g.nbytes() + w.nbytes() + c.out[0].nbytes());
  if (linear_masks(c)) bytes += static_cast<double>(c.in[1].nbytes());
  const double rows = static_cast<double>(linear_rows(g));
  return {bytes, 2.0 * rows * static_cast<double>(w.shape()[0]) * static_cast<double>(w.shape()[1])};
}

Cost linear_backward_weight_cost(const KernelCall& c) {
  const Tensor &g = c.in[0], &x = c.in[2];
  double bytes = static_cast<double>(g.nbytes() + x.nbytes() + c.out[0].nbytes() + c.out[1].nbytes());
  if (linear_masks(c)) bytes += static_cast<double>(c.in[1].nbytes());
  const double rows = static_cast<double>(linear_rows(g)), out_f = static_cast<double>(g.shape().back());
  return {bytes, 2.0 * rows * out_f * static_cast<double>(x.shape().back()) + rows * out_f};
}

}  // namespace

void define_op_linear(OpInfo& info) {
  info.doc = "x W^T + b with a fused activation (none, relu, gelu)";
  info.infer = infer_linear;
  info.backward = linear_vjp;
  info.save = Save::both;
  info.cost = linear_cost;
  info.autocast = AutocastPolicy::lower;
  info.add_variant({.name = "cpu",
                    .device = DeviceType::cpu,
                    .fn = linear_cpu,
                    .dtypes = kFloatTypes,
                    .flags = kReference,
                    .note = "reference: matmul's loop in acc_t, then bias and activation in one pass"});
  info.add_variant({.name = "cpu_fused",
                    .device = DeviceType::cpu,
                    .fn = linear_cpu_fused,
                    .dtypes = kFloatTypes,
                    .note = "blocked GEMM with bias, activation and rounding fused into each output tile"});
}

void linear_backward_input_composite(const KernelCall& c) {
  const Tensor& w = c.in[2];
  Tensor dz = linear_dz(c, w.dtype());
  call_into(OpId::matmul, {dz, w}, {c.out[0].view({dz.shape()[0], w.shape()[1]})});
}

void linear_backward_weight_composite(const KernelCall& c) {
  const Tensor& x = c.in[2];
  Tensor dz = linear_dz(c, x.dtype());
  call_into(OpId::matmul, {dz.t(), x.reshape({dz.shape()[0], x.shape().back()})}, {c.out[0]});
  call_into(OpId::sum, {dz}, {c.out[1]}, ReduceAttrs{1, 0, 1});
}

void define_op_linear_backward_input(OpInfo& info) {
  info.doc = "dx = (g relu'(y)) W: linear's input gradient with the activation's mask fused";
  info.infer = infer_linear_backward_input;
  info.backward = linear_backward_input_vjp;
  info.save = Save::inputs;
  info.cost = linear_backward_input_cost;
  info.add_variant({.name = "cpu",
                    .device = DeviceType::cpu,
                    .fn = linear_backward_input_cpu,
                    .dtypes = kFloatTypes,
                    .flags = kReference,
                    .note = "reference: the mask, then matmul's loop in acc_t"});
  info.add_variant({.name = "composite",
                    .device = DeviceType::cpu,
                    .fn = linear_backward_input_composite,
                    .dtypes = kFloatTypes,
                    .note = "relu_backward, then matmul"});
}

void define_op_linear_backward_weight(OpInfo& info) {
  info.doc = "(dW, db) = (dz^T x, sum(dz)), dz = g relu'(y): linear's weight and bias gradients";
  info.infer = infer_linear_backward_weight;
  info.backward = linear_backward_weight_vjp;
  info.save = Save::inputs;
  info.cost = linear_backward_weight_cost;
  info.add_variant({.name = "cpu",
                    .device = DeviceType::cpu,
                    .fn = linear_backward_weight_cpu,
                    .dtypes = kFloatTypes,
                    .flags = kReference,
                    .note = "reference: the mask, then matmul's loop and the sum in acc_t"});
  info.add_variant({.name = "composite",
                    .device = DeviceType::cpu,
                    .fn = linear_backward_weight_composite,
                    .dtypes = kFloatTypes,
                    .note = "relu_backward, then matmul and sum"});
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias, Activation act) {
  return call1(OpId::linear, {x, weight, bias}, LinearAttrs{static_cast<int64_t>(act)});
}

}  // namespace ember
