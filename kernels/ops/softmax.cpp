// softmax / log_softmax and their fused gradients: inference, the CPU reference, gradients, cost
// and the functional API. Formulas in softmax.h.
//
// CPU reference: per row, two passes in double (max with NaN propagation, then Σ exp(x - max)),
// then the output pass; rows run in parallel. It is the definition the CUDA kernels are checked
// against, including the special values listed in softmax.h.
#include "kernels/ops/softmax.h"

#include <cmath>
#include <limits>

#include "core/parallel.h"
#include "kernels/functional.h"
#include "kernels/ops/dtype_promotion.h"
#include "kernels/registry.h"

namespace ember {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// max that propagates NaN (std::max and fmax do not).
inline double nan_max(double a, double b) {
  if (a != a || b != b) return std::numeric_limits<double>::quiet_NaN();
  return a > b ? a : b;
}

// Calls f(base, stride) for every row of the [A, C, B] geometry, rows in parallel.
template <class F>
void for_each_row(const RowGeometry& g, const F& f) {
  const int64_t rows = g.rows();
  if (rows == 0 || g.C == 0) return;
  int64_t grain = std::max<int64_t>(1, 16384 / g.C);
  parallel_for(0, rows, grain, [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      int64_t a = r / g.B, b = r % g.B;
      f(a * g.C * g.B + b, g.B);
    }
  });
}

// ---- forward ----

std::vector<TensorSpec> infer_softmax(std::span<const Tensor> in, const Attrs& a, const char* name) {
  EMBER_CHECK(in.size() == 1, name, ": expects one input");
  const Tensor& x = in[0];
  EMBER_CHECK(is_floating(x.dtype()), name, ": expects a floating tensor, got ", x.describe(),
              " (the functional API promotes integers to f32)");
  wrap_dim(a.get<SoftmaxAttrs>().dim, x.dim(), name);
  return {{x.shape(), x.dtype(), {}}};
}

template <bool kLog>
void softmax_cpu(const KernelCall& c) {
  const Tensor& x = c.in[0];
  const Tensor& y = c.out[0];
  RowGeometry g = row_geometry(x.shape(), wrap_dim(c.attr<SoftmaxAttrs>().dim, x.dim()));
  EMBER_DISPATCH_FLOAT(x.dtype(), kLog ? "log_softmax" : "softmax", [&] {
    const scalar_t* xp = static_cast<const scalar_t*>(x.data_ptr());
    scalar_t* yp = static_cast<scalar_t*>(y.data_ptr());
    for_each_row(g, [&](int64_t base, int64_t stride) {
      double m = -kInf;
      for (int64_t k = 0; k < g.C; ++k) m = nan_max(m, static_cast<double>(xp[base + k * stride]));
      double s = 0;
      for (int64_t k = 0; k < g.C; ++k) s += std::exp(static_cast<double>(xp[base + k * stride]) - m);
      const double log_s = std::log(s);
      for (int64_t k = 0; k < g.C; ++k) {
        double v = static_cast<double>(xp[base + k * stride]) - m;
        yp[base + k * stride] = static_cast<scalar_t>(kLog ? v - log_s : std::exp(v) / s);
      }
    });
  });
}

// ---- fused gradients ----

std::vector<TensorSpec> infer_softmax_backward(std::span<const Tensor> in, const Attrs& a, const char* name) {
  EMBER_CHECK(in.size() == 2, name, ": expects (grad, output)");
  const Tensor &g = in[0], &y = in[1];
  EMBER_CHECK(is_floating(y.dtype()), name, ": expects a floating output tensor, got ", y.describe());
  EMBER_CHECK(g.shape() == y.shape() && g.dtype() == y.dtype(), name, ": grad ", g.describe(),
              " must match the forward output ", y.describe());
  wrap_dim(a.get<SoftmaxAttrs>().dim, y.dim(), name);
  return {{y.shape(), y.dtype(), {}}};
}

template <bool kLog>
void softmax_backward_cpu(const KernelCall& c) {
  const Tensor &g = c.in[0], &y = c.in[1];
  const Tensor& dx = c.out[0];
  RowGeometry geo = row_geometry(y.shape(), wrap_dim(c.attr<SoftmaxAttrs>().dim, y.dim()));
  EMBER_DISPATCH_FLOAT(y.dtype(), kLog ? "log_softmax_backward" : "softmax_backward", [&] {
    const scalar_t* gp = static_cast<const scalar_t*>(g.data_ptr());
    const scalar_t* yp = static_cast<const scalar_t*>(y.data_ptr());
    scalar_t* dp = static_cast<scalar_t*>(dx.data_ptr());
    for_each_row(geo, [&](int64_t base, int64_t stride) {
      double s = 0;
      for (int64_t k = 0; k < geo.C; ++k) {
        int64_t o = base + k * stride;
        s += kLog ? static_cast<double>(gp[o]) : static_cast<double>(gp[o]) * static_cast<double>(yp[o]);
      }
      for (int64_t k = 0; k < geo.C; ++k) {
        int64_t o = base + k * stride;
        double gv = static_cast<double>(gp[o]), yv = static_cast<double>(yp[o]);
        dp[o] = static_cast<scalar_t>(kLog ? gv - std::exp(yv) * s : yv * (gv - s));
      }
    });
  });
}

std::vector<Tensor> softmax_vjp(const BackwardCtx& ctx) {
  return {softmax_backward(ctx.grad(0), ctx.outputs[0], ctx.attr<SoftmaxAttrs>().dim)};
}
std::vector<Tensor> log_softmax_vjp(const BackwardCtx& ctx) {
  return {log_softmax_backward(ctx.grad(0), ctx.outputs[0], ctx.attr<SoftmaxAttrs>().dim)};
}

// Double backward (formulas in softmax.h).
std::vector<Tensor> softmax_backward_vjp(const BackwardCtx& ctx) {
  const int64_t d = ctx.attr<SoftmaxAttrs>().dim;
  const Tensor &g = ctx.inputs[0], &y = ctx.inputs[1];
  Tensor gg = ctx.grad(0);
  Tensor dg, dy;
  if (ctx.needs_grad(0)) dg = softmax_backward(gg, y, d);
  if (ctx.needs_grad(1)) dy = sub(mul(gg, sub(g, sum(mul(g, y), {d}, true))), mul(g, sum(mul(gg, y), {d}, true)));
  return {dg, dy};
}
std::vector<Tensor> log_softmax_backward_vjp(const BackwardCtx& ctx) {
  const int64_t d = ctx.attr<SoftmaxAttrs>().dim;
  const Tensor &g = ctx.inputs[0], &y = ctx.inputs[1];
  Tensor gg = ctx.grad(0);
  Tensor p = exp(y);
  Tensor dg, dy;
  if (ctx.needs_grad(0)) dg = sub(gg, sum(mul(gg, p), {d}, true));
  if (ctx.needs_grad(1)) dy = neg(mul(mul(gg, p), sum(g, {d}, true)));
  return {dg, dy};
}

Cost softmax_cost(const KernelCall& c) {
  double bytes = static_cast<double>(c.out[0].nbytes());
  for (const Tensor& t : c.in) bytes += static_cast<double>(t.nbytes());
  return {bytes, 5.0 * static_cast<double>(c.out[0].numel())};  // max, sub, exp, add, scale
}

template <bool kLog>
void define_softmax(OpInfo& info) {
  info.doc = kLog ? "log(softmax(x)) over one dim, computed as (x - max) - log Σ exp(x - max)"
                  : "exp(x - max) / Σ exp(x - max) over one dim";
  info.infer = [](std::span<const Tensor> in, const Attrs& a) {
    return infer_softmax(in, a, kLog ? "log_softmax" : "softmax");
  };
  info.backward = kLog ? log_softmax_vjp : softmax_vjp;
  info.save = Save::outputs;
  info.cost = softmax_cost;
  info.autocast = AutocastPolicy::fp32;
  info.add_variant({.name = "cpu",
                    .device = DeviceType::cpu,
                    .fn = softmax_cpu<kLog>,
                    .dtypes = kFloatTypes,
                    .note = "two passes per row in f64 (max, Σ exp), rows in parallel"});
}

template <bool kLog>
void define_softmax_backward(OpInfo& info) {
  info.doc = kLog ? "gradient of log_softmax: g - exp(y) Σ g" : "gradient of softmax: y (g - Σ g y)";
  info.infer = [](std::span<const Tensor> in, const Attrs& a) {
    return infer_softmax_backward(in, a, kLog ? "log_softmax_backward" : "softmax_backward");
  };
  info.backward = kLog ? log_softmax_backward_vjp : softmax_backward_vjp;
  info.save = Save::inputs;
  info.cost = softmax_cost;
  info.add_variant({.name = "cpu",
                    .device = DeviceType::cpu,
                    .fn = softmax_backward_cpu<kLog>,
                    .dtypes = kFloatTypes,
                    .note = "one reduction pass and one output pass per row in f64"});
}

}  // namespace

void define_op_softmax(OpInfo& info) { define_softmax<false>(info); }
void define_op_log_softmax(OpInfo& info) { define_softmax<true>(info); }
void define_op_softmax_backward(OpInfo& info) { define_softmax_backward<false>(info); }
void define_op_log_softmax_backward(OpInfo& info) { define_softmax_backward<true>(info); }

// ---- functional API ----

Tensor softmax(const Tensor& x, int64_t dim) {
  EMBER_CHECK(x.defined(), "softmax: input is an undefined tensor");
  wrap_dim(dim, x.dim(), "softmax dim");
  return call1(OpId::softmax, {promote_to_float(x)}, SoftmaxAttrs{dim});
}
Tensor log_softmax(const Tensor& x, int64_t dim) {
  EMBER_CHECK(x.defined(), "log_softmax: input is an undefined tensor");
  wrap_dim(dim, x.dim(), "log_softmax dim");
  return call1(OpId::log_softmax, {promote_to_float(x)}, SoftmaxAttrs{dim});
}
Tensor softmax_backward(const Tensor& grad, const Tensor& y, int64_t dim) {
  return call1(OpId::softmax_backward, {to_dtype(grad, y.dtype()), y}, SoftmaxAttrs{dim});
}
Tensor log_softmax_backward(const Tensor& grad, const Tensor& y, int64_t dim) {
  return call1(OpId::log_softmax_backward, {to_dtype(grad, y.dtype()), y}, SoftmaxAttrs{dim});
}

}  // namespace ember
