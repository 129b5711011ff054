// batch_norm, batch_norm_max_pool2d, batch_norm_global_avg_pool2d and batch_norm_backward: shape
// inference, the CPU reference (per channel, two passes in double, parallel over channels), the
// vjps, cost and the functional API. See batch_norm.h for the formulas, Note [max pooling in the
// batch norm backward] and Note [global average pooling in the batch norm backward].
//
// Note [running statistics]: the op writes running_mean / running_var in place (inputs 3 and 4;
// contiguous_inputs is off, so the kernel sees the caller's tensors) and bumps their versions. They
// are not saved for backward (save_inputs_mask), so calling the same module twice before backward
// is fine, and they must not require grad.
#include "kernels/ops/batch_norm.h"

#include <algorithm>
#include <cmath>

#include "core/parallel.h"
#include "kernels/common/memory_format.h"
#include "kernels/functional.h"
#include "kernels/registry.h"

namespace ember {

void register_dnnl_batch_norm(OpInfo& info);  // batch_norm_dnnl.cpp, only when EMBER_WITH_DNNL

BnGeom bn_geometry(const Tensor& x) {
  BnGeom g;
  g.N = x.shape()[0];
  g.C = x.shape()[1];
  g.L = 1;
  for (int d = 2; d < x.dim(); ++d) g.L *= x.shape()[d];
  if (runs_channels_last(x) || g.L == 1) {
    g.channels_last = true;
    g.sn = g.L * g.C;
    g.sc = 1;
    g.sl = g.C;
  } else {
    g.sn = g.C * g.L;
    g.sc = g.L;
    g.sl = 1;
  }
  return g;
}

const Tensor* bn_counter(const KernelCall& c) {
  const bool counts = c.in.size() > 5 && c.in[5].defined() && c.attr<BatchNormAttrs>().training != 0;
  return counts ? &c.in[5] : nullptr;
}

void bn_count_batch(const KernelCall& c) {
  if (const Tensor* n = bn_counter(c)) {
    Tensor t = *n;
    t.add_(1.0);
  }
}

namespace {

void check_param(const char* op, const Tensor& t, const char* name, int64_t C, DType x, DType s) {
  if (!t.defined()) return;
  EMBER_CHECK(t.dim() == 1 && t.shape()[0] == C, op, ": ", name, " must be [", C, "] (one value per channel), got ",
              t.shape());
  EMBER_CHECK(t.dtype() == x || t.dtype() == s, op, ": ", name, " ", t.describe(), " must be ", x,
              s != x ? str(" or ", s) : std::string(), " for an input of dtype ", x);
}

// Input 5 (Note [batch norm counts its batches]): undefined, or one i64 (on x's device: the registry checks).
void check_counter(const char* op, std::span<const Tensor> in) {
  if (in.size() < 6 || !in[5].defined()) return;
  const Tensor& n = in[5];
  EMBER_CHECK(n.dtype() == DType::i64 && n.numel() == 1 && n.is_contiguous(), op,
              ": num_batches_tracked must be one contiguous i64, got ", n.describe());
  EMBER_CHECK(!n.requires_grad(), op, ": num_batches_tracked must not require grad (it is a buffer)");
}

std::vector<TensorSpec> infer_batch_norm(std::span<const Tensor> in, const Attrs& attrs) {
  EMBER_CHECK(in.size() == 5 || in.size() == 6,
              "batch_norm: expects (input, weight, bias, running_mean, running_var[, num_batches_tracked])");
  check_counter("batch_norm", in);
  const Tensor &x = in[0], &w = in[1], &b = in[2], &rm = in[3], &rv = in[4];
  const auto& a = attrs.get<BatchNormAttrs>();
  EMBER_CHECK(a.max_pool == 0, "batch_norm: max_pool = ", a.max_pool,
              " is an attribute of batch_norm_max_pool2d and batch_norm_backward only");
  EMBER_CHECK(a.avg_pool == 0 && a.relu == 0, "batch_norm: avg_pool = ", a.avg_pool, ", relu = ", a.relu,
              " are attributes of batch_norm_global_avg_pool2d and batch_norm_backward only");
  EMBER_CHECK(x.defined(), "batch_norm: the input is undefined");
  EMBER_CHECK(x.dim() >= 2, "batch_norm: expects an input (N, C) or (N, C, *), got ", x.shape());
  EMBER_CHECK(is_floating(x.dtype()), "batch_norm: expects a floating input, got ", x.describe());
  const int64_t C = x.shape()[1];
  const DType s = bn_stats_dtype(x.dtype());
  check_param("batch_norm", w, "weight", C, x.dtype(), s);
  check_param("batch_norm", b, "bias", C, x.dtype(), s);
  check_param("batch_norm", rm, "running_mean", C, x.dtype(), s);
  check_param("batch_norm", rv, "running_var", C, x.dtype(), s);
  EMBER_CHECK(rm.defined() == rv.defined(),
              "batch_norm: running_mean and running_var must both be given or both be undefined");
  for (const Tensor* r : {&rm, &rv}) {
    if (!r->defined()) continue;
    EMBER_CHECK(!r->requires_grad(), "batch_norm: running statistics must not require grad (they are buffers), got ",
                r->describe(), " with requires_grad");
    EMBER_CHECK(!a.training || r->is_contiguous(),
                "batch_norm: running statistics are updated in place and must be contiguous");
  }
  const int64_t M = C == 0 ? 0 : x.numel() / C;
  if (a.training) {
    EMBER_CHECK(M > 1 || x.numel() == 0, "batch_norm: expected more than 1 value per channel when training, got input ",
                x.shape());
  } else {
    EMBER_CHECK(rm.defined(), "batch_norm: running_mean and running_var are required in eval mode (training = false)");
  }
  Strides st = layout_strides(x.shape(), runs_channels_last(x));
  return {{x.shape(), x.dtype(), st}, {Shape{C}, s, {}}, {Shape{C}, s, {}}};
}

// batch_norm_max_pool2d: batch_norm's checks, then the pooling's of a 4-D input.
std::vector<TensorSpec> infer_batch_norm_max_pool2d(std::span<const Tensor> in, const Attrs& attrs) {
  const auto& a = attrs.get<BatchNormAttrs>();
  EMBER_CHECK(a.max_pool == 1, "batch_norm_max_pool2d: max_pool must be 1 (the op pools), got ", a.max_pool);
  EMBER_CHECK((in.size() == 5 || in.size() == 6) && in[0].defined() && in[0].dim() == 4,
              "batch_norm_max_pool2d: expects (input [N, C, H, W], weight, bias, running_mean, running_var[, "
              "num_batches_tracked])");
  BatchNormAttrs plain = a;
  plain.max_pool = 0;
  std::vector<TensorSpec> bn = infer_batch_norm(in, plain);
  const PoolGeom pg = pool_geometry("batch_norm_max_pool2d", in[0].shape(), a.pool);
  const Shape ps{pg.N, pg.C, pg.P, pg.Q};
  const Strides st = layout_strides(ps, runs_channels_last(in[0]));
  return {{ps, in[0].dtype(), st}, {ps, DType::i64, st}, bn[1], bn[2]};
}

// batch_norm_global_avg_pool2d: batch_norm's checks on a 4-D input; the means [N, C, 1, 1] in x's
// layout.
std::vector<TensorSpec> infer_batch_norm_global_avg_pool2d(std::span<const Tensor> in, const Attrs& attrs) {
  const auto& a = attrs.get<BatchNormAttrs>();
  EMBER_CHECK(a.avg_pool == 1 && a.max_pool == 0,
              "batch_norm_global_avg_pool2d: avg_pool must be 1 and max_pool 0 (the op averages), got avg_pool = ",
              a.avg_pool, ", max_pool = ", a.max_pool);
  EMBER_CHECK(a.relu == 0 || a.relu == 1, "batch_norm_global_avg_pool2d: relu must be 0 or 1, got ", a.relu);
  EMBER_CHECK((in.size() == 5 || in.size() == 6) && in[0].defined() && in[0].dim() == 4,
              "batch_norm_global_avg_pool2d: expects (input [N, C, H, W], weight, bias, running_mean, running_var[, "
              "num_batches_tracked])");
  BatchNormAttrs plain = a;
  plain.avg_pool = 0;
  plain.relu = 0;
  std::vector<TensorSpec> bn = infer_batch_norm(in, plain);
  const Shape ps{in[0].shape()[0], in[0].shape()[1], 1, 1};
  return {{ps, in[0].dtype(), layout_strides(ps, runs_channels_last(in[0]))}, bn[1], bn[2]};
}

std::vector<double> as_doubles(const Tensor& t, int64_t C, double fill) {
  if (!t.defined()) return std::vector<double>(static_cast<size_t>(C), fill);
  return t.to_vector<double>();
}

void write_doubles(const Tensor& dst, const std::vector<double>& v) {
  Tensor src = tensor(v, dst.shape(), TensorOptions(DType::f64));
  Tensor d = dst;
  copy_(d, src);
}

template <class T>
void bn_forward_cpu_impl(const BnGeom& g, const Tensor& x, const Tensor& y, bool training, double eps,
                         const std::vector<double>& w, const std::vector<double>& b, const std::vector<double>& rm,
                         const std::vector<double>& rv, std::vector<double>& mean, std::vector<double>& var,
                         std::vector<double>& invstd) {
  const T* xp = static_cast<const T*>(x.data_ptr());
  T* yp = static_cast<T*>(y.data_ptr());
  const double M = static_cast<double>(g.M());
  parallel_for(0, g.C, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t c = lo; c < hi; ++c) {
      const size_t ci = static_cast<size_t>(c);
      auto at = [&](int64_t n, int64_t l) { return n * g.sn + c * g.sc + l * g.sl; };
      double mu, is;
      if (training) {
        double s = 0;
        for (int64_t n = 0; n < g.N; ++n)
          for (int64_t l = 0; l < g.L; ++l) s += static_cast<double>(xp[at(n, l)]);
        mu = s / M;
        double s2 = 0;
        for (int64_t n = 0; n < g.N; ++n)
          for (int64_t l = 0; l < g.L; ++l) {
            const double d = static_cast<double>(xp[at(n, l)]) - mu;
            s2 += d * d;
          }
        var[ci] = s2 / M;
        is = 1.0 / std::sqrt(var[ci] + eps);
      } else {
        mu = rm[ci];
        is = 1.0 / std::sqrt(rv[ci] + eps);
      }
      mean[ci] = mu;
      invstd[ci] = is;
      for (int64_t n = 0; n < g.N; ++n)
        for (int64_t l = 0; l < g.L; ++l) {
          const int64_t o = at(n, l);
          yp[o] = static_cast<T>((static_cast<double>(xp[o]) - mu) * is * w[ci] + b[ci]);
        }
    }
  });
}

void batch_norm_cpu(const KernelCall& c) {
  const auto& a = c.attr<BatchNormAttrs>();
  const Tensor &w = c.in[1], &b = c.in[2], &rm = c.in[3], &rv = c.in[4];
  const Tensor& y = c.out[0];
  Tensor x = contiguous_as(c.in[0], runs_channels_last(c.in[0]));
  BnGeom g = bn_geometry(x);
  const size_t C = static_cast<size_t>(g.C);
  std::vector<double> wv = as_doubles(w, g.C, 1.0), bv = as_doubles(b, g.C, 0.0);
  std::vector<double> rmv = as_doubles(rm, g.C, 0.0), rvv = as_doubles(rv, g.C, 1.0);
  std::vector<double> mean(C), var(C), invstd(C);
  const bool training = a.training != 0;
  if (x.numel() == 0) {
    for (size_t i = 0; i < C; ++i) {
      mean[i] = training ? NAN : rmv[i];
      invstd[i] = training ? NAN : 1.0 / std::sqrt(rvv[i] + a.eps);
    }
  } else {
    EMBER_DISPATCH_FLOAT(x.dtype(), "batch_norm", [&] {
      bn_forward_cpu_impl<scalar_t>(g, x, y, training, a.eps, wv, bv, rmv, rvv, mean, var, invstd);
    });
  }
  write_doubles(c.out[1], mean);
  write_doubles(c.out[2], invstd);
  bn_count_batch(c);
  if (training && rm.defined() && x.numel() > 0) {
    const double m = a.momentum, M = static_cast<double>(g.M());
    std::vector<double> nm(C), nv(C);
    for (size_t i = 0; i < C; ++i) {
      nm[i] = (1 - m) * rmv[i] + m * mean[i];
      nv[i] = (1 - m) * rvv[i] + m * var[i] * M / (M - 1);
    }
    write_doubles(rm, nm);
    write_doubles(rv, nv);
    rm.bump_version();
    rv.bump_version();
  }
}

// ---- batch_norm_backward ----

// (grad_output, input, weight, mean, invstd), or with max_pool (pooled gradient, ..., indices)
// (Note [max pooling in the batch norm backward]).
std::vector<TensorSpec> infer_batch_norm_backward(std::span<const Tensor> in, const Attrs& attrs) {
  const auto& a = attrs.get<BatchNormAttrs>();
  EMBER_CHECK((a.max_pool == 0 || a.max_pool == 1) && (a.avg_pool == 0 || a.avg_pool == 1) &&
                  a.max_pool + a.avg_pool <= 1 && (a.relu == 0 || a.avg_pool == 1) && (a.relu == 0 || a.relu == 1),
              "batch_norm_backward: expects max_pool, avg_pool and relu of 0 or 1, at most one pooling, relu only "
              "with avg_pool; got max_pool = ",
              a.max_pool, ", avg_pool = ", a.avg_pool, ", relu = ", a.relu);
  if (a.max_pool == 1)
    EMBER_CHECK(in.size() == 6,
                "batch_norm_backward: with max_pool expects (pooled gradient, input, weight, mean, invstd, indices), "
                "got ",
                in.size(), " inputs");
  else if (a.avg_pool == 1)
    EMBER_CHECK(in.size() == 6,
                "batch_norm_backward: with avg_pool expects (pooled gradient, input, weight, mean, invstd, bias), got ",
                in.size(), " inputs");
  else
    EMBER_CHECK(in.size() == 5, "batch_norm_backward: expects (grad_output, input, weight, mean, invstd), got ",
                in.size(), " inputs");
  const Tensor &gy = in[0], &x = in[1], &w = in[2], &mean = in[3], &invstd = in[4];
  EMBER_CHECK(x.defined() && gy.defined() && mean.defined() && invstd.defined(),
              "batch_norm_backward: grad_output, input, mean and invstd must be defined");
  EMBER_CHECK(x.dim() >= 2, "batch_norm_backward: expects an input (N, C) or (N, C, *), got ", x.shape());
  if (a.max_pool == 1) check_pooled_gradient("batch_norm_backward", gy, in[5], x.shape(), a.pool, "the input");
  else if (a.avg_pool == 1)
    EMBER_CHECK(x.dim() == 4 && gy.shape() == Shape({x.shape()[0], x.shape()[1], 1, 1}),
                "batch_norm_backward: with avg_pool expects an input [N, C, H, W] and a pooled gradient [N, C, 1, 1], "
                "got input ",
                x.shape(), " and gradient ", gy.shape());
  else
    EMBER_CHECK(gy.shape() == x.shape(), "batch_norm_backward: grad_output ", gy.shape(), " must match the input ",
                x.shape());
  EMBER_CHECK(is_floating(x.dtype()) && gy.dtype() == x.dtype(), "batch_norm_backward: grad_output ", gy.describe(),
              " and input ", x.describe(), " must share a floating dtype");
  const int64_t C = x.shape()[1];
  const DType s = bn_stats_dtype(x.dtype());
  check_param("batch_norm_backward", w, "weight", C, x.dtype(), s);
  if (a.avg_pool == 1) check_param("batch_norm_backward", in[5], "bias", C, x.dtype(), s);
  for (const Tensor* t : {&mean, &invstd})
    EMBER_CHECK(t->dim() == 1 && t->shape()[0] == C && (t->dtype() == s || t->dtype() == x.dtype()),
                "batch_norm_backward: saved statistics must be ", s, "[", C, "] (as batch_norm returns them), got ",
                t->describe());
  DType pd = w.defined() ? w.dtype() : s;
  return {
      {x.shape(), x.dtype(), layout_strides(x.shape(), runs_channels_last(x))}, {Shape{C}, pd, {}}, {Shape{C}, pd, {}}};
}

// The per-channel values the CPU backward reads: the weight, the saved statistics and, with
// avg_pool and relu, the bias (for the relu's mask).
struct BnCpuParams {
  std::vector<double> w, mean, invstd, b;
};

template <class T>
void bn_backward_cpu_impl(const BnGeom& g, const Tensor& gy, const Tensor& x, const Tensor& dx, const BatchNormAttrs& a,
                          const BnCpuParams& p, std::vector<double>& dw, std::vector<double>& db) {
  const T* gp = static_cast<const T*>(gy.data_ptr());
  const T* xp = static_cast<const T*>(x.data_ptr());
  T* dp = static_cast<T*>(dx.data_ptr());
  const double M = static_cast<double>(g.M()), L = static_cast<double>(g.L);
  const bool training = a.training != 0;
  const std::vector<double>&w = p.w, &mean = p.mean, &invstd = p.invstd;
  // g at x's offset o in image n (Note [global average pooling in the batch norm backward])
  auto grad = [&](int64_t o, int64_t n, size_t ci) {
    if (a.avg_pool == 0) return static_cast<double>(gp[o]);
    if (a.relu != 0) {  // y as the forward stores it, then relu's mask
      const T y = static_cast<T>((static_cast<double>(xp[o]) - mean[ci]) * invstd[ci] * w[ci] + p.b[ci]);
      if (!(static_cast<double>(y) > 0)) return 0.0;
    }
    return static_cast<double>(static_cast<T>(static_cast<double>(gp[n * g.C + static_cast<int64_t>(ci)]) / L));
  };
  parallel_for(0, g.C, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t c = lo; c < hi; ++c) {
      const size_t ci = static_cast<size_t>(c);
      auto at = [&](int64_t n, int64_t l) { return n * g.sn + c * g.sc + l * g.sl; };
      double sg = 0, sgx = 0;
      for (int64_t n = 0; n < g.N; ++n)
        for (int64_t l = 0; l < g.L; ++l) {
          const int64_t o = at(n, l);
          const double gv = grad(o, n, ci);
          sg += gv;
          sgx += gv * (static_cast<double>(xp[o]) - mean[ci]);
        }
      db[ci] = sg;
      dw[ci] = sgx * invstd[ci];
      const double k = w[ci] * invstd[ci];
      for (int64_t n = 0; n < g.N; ++n)
        for (int64_t l = 0; l < g.L; ++l) {
          const int64_t o = at(n, l);
          const double gv = grad(o, n, ci);
          double v = gv;
          if (training) {
            const double xhat = (static_cast<double>(xp[o]) - mean[ci]) * invstd[ci];
            v = gv - sg / M - xhat * dw[ci] / M;
          }
          dp[o] = static_cast<T>(k * v);
        }
    }
  });
}

void batch_norm_backward_cpu(const KernelCall& c) {
  const auto& a = c.attr<BatchNormAttrs>();
  const bool cl = runs_channels_last(c.in[1]);
  Tensor x = contiguous_as(c.in[1], cl), gy = contiguous_as(c.in[0], cl);
  BnGeom g = bn_geometry(x);
  const size_t C = static_cast<size_t>(g.C);
  const BnCpuParams p{as_doubles(c.in[2], g.C, 1.0), c.in[3].to_vector<double>(), c.in[4].to_vector<double>(),
                      a.avg_pool != 0 ? as_doubles(c.in[5], g.C, 0.0) : std::vector<double>()};
  std::vector<double> dw(C, 0.0), db(C, 0.0);
  if (x.numel() > 0) {
    EMBER_DISPATCH_FLOAT(x.dtype(), "batch_norm_backward",
                         [&] { bn_backward_cpu_impl<scalar_t>(g, gy, x, c.out[0], a, p, dw, db); });
  }
  write_doubles(c.out[1], dw);
  write_doubles(c.out[2], db);
}

// ---- autograd ----

// The gradients of batch_norm's or batch_norm_max_pool2d's inputs: batch_norm_backward on g (the
// pooled gradient with the indices where the op pools), plus the terms of the gradients arriving
// at the mean and invstd outputs (`stats` is the first of those two outputs).
std::vector<Tensor> bn_input_grads(const BackwardCtx& ctx, const BatchNormAttrs& a, std::vector<Tensor> bwd_in,
                                   size_t stats) {
  const Tensor& x = ctx.inputs[0];
  const Tensor &mean = ctx.outputs[stats], &invstd = ctx.outputs[stats + 1];
  std::vector<Tensor> r = call(OpId::batch_norm_backward, bwd_in, a);
  Tensor dx = ctx.needs_grad(0) ? r[0] : Tensor();
  Tensor dw = ctx.needs_grad(1) ? r[1] : Tensor();
  Tensor db = ctx.needs_grad(2) ? r[2] : Tensor();
  const bool gmean = ctx.grads.size() > stats && ctx.grads[stats].defined();
  const bool ginv = ctx.grads.size() > stats + 1 && ctx.grads[stats + 1].defined();
  if (a.training && dx.defined() && (gmean || ginv) && x.numel() > 0) {
    // the statistics outputs are functions of x too: d mean / dx = 1 / M, d invstd / dx = -invstd^3 (x - mean) / M
    const int64_t C = x.shape()[1];
    const double M = static_cast<double>(x.numel() / C);
    Shape bshape = Shape::filled(x.dim(), 1);
    bshape[1] = C;
    const DType s = mean.dtype();
    Tensor term;
    if (gmean) term = mul(ctx.grads[stats], 1.0 / M).reshape(bshape);
    if (ginv) {
      Tensor k = mul(mul(ctx.grads[stats + 1], mul(mul(invstd, invstd), invstd)), -1.0 / M).reshape(bshape);
      Tensor t2 = mul(k, sub(x.to(s), mean.reshape(bshape)));
      term = term.defined() ? add(term, t2) : t2;
    }
    dx = add(dx, term.to(x.dtype()));
  }
  std::vector<Tensor> grads(std::max<size_t>(ctx.inputs.size(), 5));  // none for the buffers
  grads[0] = dx;
  grads[1] = dw;
  grads[2] = db;
  return grads;
}

std::vector<Tensor> batch_norm_vjp(const BackwardCtx& ctx) {
  const Tensor &x = ctx.inputs[0], &w = ctx.inputs[1];
  const Tensor gy = contiguous_as(ctx.grad(0), runs_channels_last(x));
  return bn_input_grads(ctx, ctx.attr<BatchNormAttrs>(), {gy, x, w, ctx.outputs[1], ctx.outputs[2]}, 1);
}

// batch_norm_max_pool2d: batch_norm_backward on the pooled gradient and the indices (Note [max
// pooling in the batch norm backward]).
std::vector<Tensor> batch_norm_max_pool2d_vjp(const BackwardCtx& ctx) {
  const Tensor &x = ctx.inputs[0], &w = ctx.inputs[1];
  BatchNormAttrs a = ctx.attr<BatchNormAttrs>();
  a.pool = with_input_size(a.pool, x.shape()[2], x.shape()[3]);
  const Tensor gp = contiguous_as(ctx.grad(0), runs_channels_last(x));
  return bn_input_grads(ctx, a, {gp, x, w, ctx.outputs[2], ctx.outputs[3], ctx.outputs[1]}, 2);
}

// batch_norm_global_avg_pool2d: batch_norm_backward on the pooled gradient, with the bias for the
// relu's mask (Note [global average pooling in the batch norm backward]).
std::vector<Tensor> batch_norm_global_avg_pool2d_vjp(const BackwardCtx& ctx) {
  const Tensor &x = ctx.inputs[0], &w = ctx.inputs[1], &b = ctx.inputs[2];
  const Tensor gp = contiguous_as(ctx.grad(0), runs_channels_last(x));
  return bn_input_grads(ctx, ctx.attr<BatchNormAttrs>(), {gp, x, w, ctx.outputs[1], ctx.outputs[2], b}, 1);
}

// ---- cost ----

Cost batch_norm_cost(const KernelCall& c) {
  double bytes = 0;
  for (const Tensor& t : c.in)
    if (t.defined()) bytes += static_cast<double>(t.nbytes());
  for (const Tensor& t : c.out) bytes += static_cast<double>(t.nbytes());
  const double n = static_cast<double>(c.in[c.op == OpId::batch_norm_backward ? 1 : 0].numel());
  return {bytes, (c.op == OpId::batch_norm_backward ? 10.0 : 8.0) * n};
}

// batch_norm_max_pool2d as its two ops: batch_norm into a scratch output, max_pool2d from it into
// the call's outputs; each op's reference kernel (variant 0) or through the registry.
void bn_then_pool(const KernelCall& c, bool reference) {
  BatchNormAttrs bn = c.attr<BatchNormAttrs>();
  const PoolAttrs pool = bn.pool;
  bn.max_pool = 0;
  bn.pool = PoolAttrs{};
  const Tensor& x = c.in[0];
  const TensorSpec ys = op_info(OpId::batch_norm).infer(c.in, bn)[0];
  const TensorOptions opts = TensorOptions().dtype(ys.dtype).device(x.device());
  Tensor y = ys.strides.empty() ? empty(ys.shape, opts) : empty_strided(ys.shape, ys.strides, opts);
  const std::vector<Tensor> in(c.in.begin(), c.in.end()), bn_out{y, c.out[2], c.out[3]};
  if (reference) {
    call_variant_into(op_info(OpId::batch_norm).variants.at(0), OpId::batch_norm, in, bn_out, bn);
    call_variant_into(op_info(OpId::max_pool2d).variants.at(0), OpId::max_pool2d, {y}, {c.out[0], c.out[1]}, pool);
  } else {
    call_into(OpId::batch_norm, in, bn_out, bn);
    call_into(OpId::max_pool2d, {y}, {c.out[0], c.out[1]}, pool);
  }
}

void bn_pool_reference(const KernelCall& c) { bn_then_pool(c, true); }

// batch_norm_global_avg_pool2d as its ops: batch_norm into a scratch tensor, relu in place there,
// adaptive_avg_pool2d to 1x1 into the call's output; reference kernels or through the registry.
void bn_then_avg(const KernelCall& c, bool reference) {
  BatchNormAttrs bn = c.attr<BatchNormAttrs>();
  const bool relu = bn.relu != 0;
  bn.avg_pool = 0;
  bn.relu = 0;
  const Tensor& x = c.in[0];
  const TensorSpec ys = op_info(OpId::batch_norm).infer(c.in, bn)[0];
  const TensorOptions opts = TensorOptions().dtype(ys.dtype).device(x.device());
  const Tensor y = ys.strides.empty() ? empty(ys.shape, opts) : empty_strided(ys.shape, ys.strides, opts);
  const std::vector<Tensor> in(c.in.begin(), c.in.end()), bn_out{y, c.out[1], c.out[2]};
  const AdaptivePoolAttrs avg = adaptive_pool_attrs(1, 1);
  auto run = [&](OpId op, std::vector<Tensor> i, std::vector<Tensor> o, const Attrs& attrs) {
    if (reference) call_variant_into(op_info(op).variants.at(0), op, std::move(i), std::move(o), attrs);
    else call_into(op, std::move(i), std::move(o), attrs);
  };
  run(OpId::batch_norm, in, bn_out, bn);
  if (relu) run(OpId::relu, {y}, {y}, Attrs{});  // elementwise: in place is safe
  run(OpId::adaptive_avg_pool2d, {y}, {c.out[0]}, avg);
}

void bn_avg_reference(const KernelCall& c) { bn_then_avg(c, true); }

}  // namespace

void bn_then_pool_ops(const KernelCall& c) { bn_then_pool(c, false); }
void bn_then_avg_ops(const KernelCall& c) { bn_then_avg(c, false); }

void bn_unpooled_apart(const KernelCall& c, void (*f)(const KernelCall&)) {
  const auto& a = c.attr<BatchNormAttrs>();
  if (a.max_pool == 0) return f(c);
  EMBER_CHECK(c.op == OpId::batch_norm_backward, "bn_unpooled_apart: called for op ", op_info(c.op).name);
  BatchNormAttrs plain = a;
  plain.max_pool = 0;
  plain.pool = PoolAttrs{};
  run_unpooled(c, f, a.pool, c.in[1].shape(), Attrs(plain));
}

namespace {

void batch_norm_backward_reference(const KernelCall& c) { bn_unpooled_apart(c, batch_norm_backward_cpu); }

}  // namespace

void define_op_batch_norm(OpInfo& info) {
  info.doc = "batch normalisation (training: batch statistics + running-stat update in place; eval)";
  info.infer = infer_batch_norm;
  info.backward = batch_norm_vjp;
  info.save = Save::both;
  info.save_inputs_mask = 0b00011;  // x, weight: never the running statistics (Note [running statistics])
  info.save_outputs_mask = 0b110;   // mean, invstd: not y
  info.cost = batch_norm_cost;
  // f16/bf16 activations stay in their dtype with f32 statistics and parameters (as cuDNN's path)
  info.autocast = AutocastPolicy::none;
  info.contiguous_inputs = false;
  info.add_variant({.name = "cpu",
                    .device = DeviceType::cpu,
                    .fn = batch_norm_cpu,
                    .dtypes = kFloatTypes,
                    .note = "two passes per channel in double, parallel over channels"});
#if EMBER_WITH_DNNL
  register_dnnl_batch_norm(info);  // batch_norm_dnnl.cpp: oneDNN forward, kVendor
#endif
}

void define_op_batch_norm_backward(OpInfo& info) {
  info.doc = "fused gradient of batch_norm: dx, dweight, dbias";
  info.infer = infer_batch_norm_backward;
  info.cost = batch_norm_cost;
  info.contiguous_inputs = false;
  info.add_variant({.name = "cpu",
                    .device = DeviceType::cpu,
                    .fn = batch_norm_backward_reference,
                    .dtypes = kFloatTypes,
                    .note = "per channel in double, parallel over channels (a pooled gradient unpooled first)"});
}

void define_op_batch_norm_max_pool2d(OpInfo& info) {
  info.doc = "batch_norm, then max_pool2d (relu optional): the backward reads the pooled gradient";
  info.infer = infer_batch_norm_max_pool2d;
  info.backward = batch_norm_max_pool2d_vjp;
  info.save = Save::both;
  info.save_inputs_mask = 0b00011;  // x, weight: never the running statistics (Note [running statistics])
  info.save_outputs_mask = 0b1110;  // indices, mean, invstd: not the pooled output
  info.cost = batch_norm_cost;
  info.autocast = AutocastPolicy::none;  // as batch_norm
  info.contiguous_inputs = false;
  info.add_variant({.name = "naive",
                    .device = DeviceType::cpu,
                    .fn = bn_pool_reference,
                    .dtypes = kFloatTypes,
                    .flags = kReference,
                    .note = "reference: batch_norm's and max_pool2d's reference kernels"});
  info.add_variant({.name = "ops",
                    .device = DeviceType::cpu,
                    .fn = bn_then_pool_ops,
                    .dtypes = kFloatTypes,
                    .note = "batch_norm, then max_pool2d, each through the registry"});
}

void define_op_batch_norm_global_avg_pool2d(OpInfo& info) {
  info.doc = "batch_norm, relu (optional), then the mean of each plane: the backward reads the pooled gradient";
  info.infer = infer_batch_norm_global_avg_pool2d;
  info.backward = batch_norm_global_avg_pool2d_vjp;
  info.save = Save::both;
  info.save_inputs_mask = 0b00111;  // x, weight, bias (the relu's mask): never the running statistics
  info.save_outputs_mask = 0b110;   // mean, invstd: not the means
  info.cost = batch_norm_cost;
  info.autocast = AutocastPolicy::none;  // as batch_norm
  info.contiguous_inputs = false;
  info.add_variant({.name = "naive",
                    .device = DeviceType::cpu,
                    .fn = bn_avg_reference,
                    .dtypes = kFloatTypes,
                    .flags = kReference,
                    .note = "reference: batch_norm's, relu's and adaptive_avg_pool2d's reference kernels"});
  info.add_variant({.name = "ops",
                    .device = DeviceType::cpu,
                    .fn = bn_then_avg_ops,
                    .dtypes = kFloatTypes,
                    .note = "batch_norm, relu, then adaptive_avg_pool2d, each through the registry"});
}

Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor running_mean, Tensor running_var,
                  bool training, double momentum, double eps, const Tensor& num_batches_tracked) {
  BatchNormAttrs a{};
  a.training = training ? 1 : 0;
  a.momentum = momentum;
  a.eps = eps;
  return call(OpId::batch_norm, {x, weight, bias, running_mean, running_var, num_batches_tracked}, a)[0];
}

}  // namespace ember
