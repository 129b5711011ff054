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
#include "kernels/ops/linear.h"

#include "kernels/common/math.h"
#include "kernels/gemm/cpu_gemm.h"
#include "kernels/functional.h"
#include "kernels/ops/unary.h"
#include "kernels/registry.h"

namespace ember {

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

// Rows of x seen as a matrix (the product of the leading dims; explicit, so in_features = 0 works).
int64_t leading_rows(const Tensor& x) {
  int64_t r = 1;
  for (int d = 0; d + 1 < x.dim(); ++d) r *= x.shape()[d];
  return r;
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
  Tensor x2 = cast(x.reshape({leading_rows(x), x.shape().back()}), acc);
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
  Tensor dz = g;
  if (act == Activation::relu) {
    dz = relu_backward(g, ctx.outputs[0]);  // y > 0 exactly where z > 0
  } else if (act == Activation::gelu) {
    Tensor z = linear(x, w, b);  // recompute the pre-activation
    dz = gelu_backward(g, z);
  }
  int64_t in_f = w.shape()[1], out_f = w.shape()[0];
  const int64_t rows = leading_rows(x);
  Tensor dz2 = dz.reshape({rows, out_f});
  Tensor dx, dw, db;
  if (ctx.needs_grad(0)) dx = matmul(dz2, w).reshape(x.shape());
  if (ctx.needs_grad(1)) dw = matmul(dz2.t(), x.reshape({rows, in_f}));
  if (ctx.needs_grad(2) && b.defined()) db = sum(dz2, {0});
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

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias, Activation act) {
  return call1(OpId::linear, {x, weight, bias}, LinearAttrs{static_cast<int64_t>(act)});
}

}  // namespace ember
