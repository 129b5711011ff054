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
// CPU: the reference computes z with the matmul op (so the fast CPU GEMM serves it too), then
// bias and activation in one pass.
#include "kernels/ops/linear.h"

#include "kernels/common/math.h"
#include "kernels/common/samples.h"
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
  Tensor x2 = x.reshape({-1, x.shape().back()});
  Tensor z = matmul(x2, w.t());  // runs the default CPU matmul variant
  EMBER_DISPATCH_FLOAT(x.dtype(), "linear", [&] { epilogue_cpu<scalar_t>(z, b.defined() ? b.contiguous() : b, act); });
  Tensor yv = y.view(z.shape());
  copy_(yv, z);
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
  Tensor dz2 = dz.reshape({-1, out_f});
  Tensor dx, dw, db;
  if (ctx.needs_grad(0)) dx = matmul(dz2, w).reshape(x.shape());
  if (ctx.needs_grad(1)) dw = matmul(dz2.t(), x.reshape({-1, in_f}));
  if (ctx.needs_grad(2) && b.defined()) db = sum(dz2, {0});
  return {dx, dw, db};
}

std::vector<OpSample> linear_samples() {
  std::vector<OpSample> out;
  uint64_t seed = 900;
  auto mk = [&](std::string name, Shape xs, int64_t out_f, bool bias, Activation act) {
    OpSample s;
    s.name = std::move(name);
    int64_t in_f = xs.back();
    Tensor x = samples::uniform(xs, -1, 1, ++seed);
    Tensor w = samples::uniform({out_f, in_f}, -1, 1, ++seed);
    Tensor b = bias ? samples::uniform({out_f}, -1, 1, ++seed) : Tensor();
    s.inputs = {x, w, b};
    s.attrs = LinearAttrs{static_cast<int64_t>(act)};
    if (in_f > 64) {
      s.tol = {{DType::f32, {1e-5, 1e-4}}};
      s.tol_note = "GEMM kernels sum the K products in another order than the CPU reference";
    }
    if (act == Activation::relu) {
      // keep pre-activations away from the kink at 0: gradcheck perturbations must not flip signs
      s.gradcheck = false;
    }
    out.push_back(std::move(s));
  };
  mk("[4, 3] -> 5 with bias", {4, 3}, 5, true, Activation::none);
  mk("[7, 17] -> 13 no bias", {7, 17}, 13, false, Activation::none);
  mk("[2, 3, 8] -> 6 (leading dims)", {2, 3, 8}, 6, true, Activation::none);
  mk("[1, 1] -> 1", {1, 1}, 1, true, Activation::none);
  mk("[64, 129] -> 33", {64, 129}, 33, true, Activation::none);
  mk("[9] -> 4 (vector)", {9}, 4, true, Activation::none);
  mk("[0, 5] -> 3 (empty batch)", {0, 5}, 3, true, Activation::none);
  mk("[5, 6] -> 4 gelu", {5, 6}, 4, true, Activation::gelu);
  mk("[5, 6] -> 4 relu", {5, 6}, 4, true, Activation::relu);
  mk("[64, 784] -> 128 relu (MNIST)", {64, 784}, 128, true, Activation::relu);
  return out;
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
  info.samples = linear_samples;
  info.cost = linear_cost;
  info.autocast = AutocastPolicy::lower;
  info.add_variant({"cpu", DeviceType::cpu, linear_cpu, kFloatTypes, 0, nullptr,
                    "matmul op, then bias and activation in one pass"});
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias, Activation act) {
  return call1(OpId::linear, {x, weight, bias}, LinearAttrs{static_cast<int64_t>(act)});
}

}  // namespace ember
