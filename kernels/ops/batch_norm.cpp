// batch_norm and batch_norm_backward: shape inference, the CPU reference (per channel, two passes
// in double, parallel over channels), the vjp, samples, cost, benches and the functional API.
// See batch_norm.h for the formulas.
//
// Note [running statistics]: the op writes running_mean / running_var in place (inputs 3 and 4;
// contiguous_inputs is off, so the kernel sees the caller's tensors) and bumps their versions. They
// are not saved for backward (save_inputs_mask), so calling the same module twice before backward
// is fine, and they must not require grad.
#include "kernels/ops/batch_norm.h"

#include <cmath>

#include "core/parallel.h"
#include "kernels/common/memory_format.h"
#include "kernels/common/samples.h"
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

namespace {

void check_param(const char* op, const Tensor& t, const char* name, int64_t C, DType x, DType s) {
  if (!t.defined()) return;
  EMBER_CHECK(t.dim() == 1 && t.shape()[0] == C, op, ": ", name, " must be [", C, "] (one value per channel), got ",
              t.shape());
  EMBER_CHECK(t.dtype() == x || t.dtype() == s, op, ": ", name, " ", t.describe(), " must be ", x,
              s != x ? str(" or ", s) : std::string(), " for an input of dtype ", x);
}

std::vector<TensorSpec> infer_batch_norm(std::span<const Tensor> in, const Attrs& attrs) {
  EMBER_CHECK(in.size() == 5, "batch_norm: expects (input, weight, bias, running_mean, running_var)");
  const Tensor &x = in[0], &w = in[1], &b = in[2], &rm = in[3], &rv = in[4];
  const auto& a = attrs.get<BatchNormAttrs>();
  EMBER_CHECK(x.defined(), "batch_norm: the input is undefined");
  EMBER_CHECK(x.dim() >= 2, "batch_norm: expects an input (N, C) or (N, C, *), got ", x.shape());
  EMBER_CHECK(is_floating(x.dtype()), "batch_norm: expects a floating input, got ", x.describe());
  const int64_t C = x.shape()[1];
  const DType s = bn_stats_dtype(x.dtype());
  check_param("batch_norm", w, "weight", C, x.dtype(), s);
  check_param("batch_norm", b, "bias", C, x.dtype(), s);
  check_param("batch_norm", rm, "running_mean", C, x.dtype(), s);
  check_param("batch_norm", rv, "running_var", C, x.dtype(), s);
  EMBER_CHECK(rm.defined() == rv.defined(), "batch_norm: running_mean and running_var must both be given or both be undefined");
  for (const Tensor* r : {&rm, &rv}) {
    if (!r->defined()) continue;
    EMBER_CHECK(!r->requires_grad(), "batch_norm: running statistics must not require grad (they are buffers), got ",
                r->describe(), " with requires_grad");
    EMBER_CHECK(!a.training || r->is_contiguous(), "batch_norm: running statistics are updated in place and must be contiguous");
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

std::vector<TensorSpec> infer_batch_norm_backward(std::span<const Tensor> in, const Attrs&) {
  EMBER_CHECK(in.size() == 5, "batch_norm_backward: expects (grad_output, input, weight, mean, invstd)");
  const Tensor &gy = in[0], &x = in[1], &w = in[2], &mean = in[3], &invstd = in[4];
  EMBER_CHECK(x.defined() && gy.defined() && mean.defined() && invstd.defined(),
              "batch_norm_backward: grad_output, input, mean and invstd must be defined");
  EMBER_CHECK(x.dim() >= 2, "batch_norm_backward: expects an input (N, C) or (N, C, *), got ", x.shape());
  EMBER_CHECK(gy.shape() == x.shape(), "batch_norm_backward: grad_output ", gy.shape(), " must match the input ", x.shape());
  EMBER_CHECK(is_floating(x.dtype()) && gy.dtype() == x.dtype(), "batch_norm_backward: grad_output ", gy.describe(),
              " and input ", x.describe(), " must share a floating dtype");
  const int64_t C = x.shape()[1];
  const DType s = bn_stats_dtype(x.dtype());
  check_param("batch_norm_backward", w, "weight", C, x.dtype(), s);
  for (const Tensor* t : {&mean, &invstd})
    EMBER_CHECK(t->dim() == 1 && t->shape()[0] == C && (t->dtype() == s || t->dtype() == x.dtype()),
                "batch_norm_backward: saved statistics must be ", s, "[", C, "] (as batch_norm returns them), got ",
                t->describe());
  DType pd = w.defined() ? w.dtype() : s;
  return {{x.shape(), x.dtype(), layout_strides(x.shape(), runs_channels_last(x))}, {Shape{C}, pd, {}}, {Shape{C}, pd, {}}};
}

template <class T>
void bn_backward_cpu_impl(const BnGeom& g, const Tensor& gy, const Tensor& x, const Tensor& dx, bool training,
                          const std::vector<double>& w, const std::vector<double>& mean,
                          const std::vector<double>& invstd, std::vector<double>& dw, std::vector<double>& db) {
  const T* gp = static_cast<const T*>(gy.data_ptr());
  const T* xp = static_cast<const T*>(x.data_ptr());
  T* dp = static_cast<T*>(dx.data_ptr());
  const double M = static_cast<double>(g.M());
  parallel_for(0, g.C, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t c = lo; c < hi; ++c) {
      const size_t ci = static_cast<size_t>(c);
      auto at = [&](int64_t n, int64_t l) { return n * g.sn + c * g.sc + l * g.sl; };
      double sg = 0, sgx = 0;
      for (int64_t n = 0; n < g.N; ++n)
        for (int64_t l = 0; l < g.L; ++l) {
          const int64_t o = at(n, l);
          const double gv = static_cast<double>(gp[o]);
          sg += gv;
          sgx += gv * (static_cast<double>(xp[o]) - mean[ci]);
        }
      db[ci] = sg;
      dw[ci] = sgx * invstd[ci];
      const double k = w[ci] * invstd[ci];
      for (int64_t n = 0; n < g.N; ++n)
        for (int64_t l = 0; l < g.L; ++l) {
          const int64_t o = at(n, l);
          const double gv = static_cast<double>(gp[o]);
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
  std::vector<double> wv = as_doubles(c.in[2], g.C, 1.0), mean = c.in[3].to_vector<double>(),
                      invstd = c.in[4].to_vector<double>();
  std::vector<double> dw(C, 0.0), db(C, 0.0);
  if (x.numel() > 0) {
    EMBER_DISPATCH_FLOAT(x.dtype(), "batch_norm_backward", [&] {
      bn_backward_cpu_impl<scalar_t>(g, gy, x, c.out[0], a.training != 0, wv, mean, invstd, dw, db);
    });
  }
  write_doubles(c.out[1], dw);
  write_doubles(c.out[2], db);
}

// ---- autograd ----

std::vector<Tensor> batch_norm_vjp(const BackwardCtx& ctx) {
  const Tensor &x = ctx.inputs[0], &w = ctx.inputs[1];
  const Tensor &mean = ctx.outputs[1], &invstd = ctx.outputs[2];
  const auto& a = ctx.attr<BatchNormAttrs>();
  Tensor gy = contiguous_as(ctx.grad(0), runs_channels_last(x));
  std::vector<Tensor> r = call(OpId::batch_norm_backward, {gy, x, w, mean, invstd}, a);
  Tensor dx = ctx.needs_grad(0) ? r[0] : Tensor();
  Tensor dw = ctx.needs_grad(1) ? r[1] : Tensor();
  Tensor db = ctx.needs_grad(2) ? r[2] : Tensor();
  const bool gmean = ctx.grads.size() > 1 && ctx.grads[1].defined();
  const bool ginv = ctx.grads.size() > 2 && ctx.grads[2].defined();
  if (a.training && dx.defined() && (gmean || ginv) && x.numel() > 0) {
    // the statistics outputs are functions of x too: d mean / dx = 1 / M, d invstd / dx = -invstd^3 (x - mean) / M
    const int64_t C = x.shape()[1];
    const double M = static_cast<double>(x.numel() / C);
    Shape bshape = Shape::filled(x.dim(), 1);
    bshape[1] = C;
    const DType s = mean.dtype();
    Tensor term;
    if (gmean) term = mul(ctx.grads[1], 1.0 / M).reshape(bshape);
    if (ginv) {
      Tensor k = mul(mul(ctx.grads[2], mul(mul(invstd, invstd), invstd)), -1.0 / M).reshape(bshape);
      Tensor t2 = mul(k, sub(x.to(s), mean.reshape(bshape)));
      term = term.defined() ? add(term, t2) : t2;
    }
    dx = add(dx, term.to(x.dtype()));
  }
  return {dx, dw, db, Tensor(), Tensor()};
}

// ---- samples ----

struct BnCase {
  std::string name;
  Shape x;
  bool training = true, affine = true, running = true, channels_last = false;
  double momentum = 0.1, eps = 1e-5;
};

std::vector<BnCase> bn_cases() {
  return {
      {"2-D training affine [8,5]", {8, 5}},
      {"2-D training, no affine, no running stats [6,3]", {6, 3}, true, false, false},
      {"2-D eval affine [7,4]", {7, 4}, false},
      {"2-D eval no affine [5,3]", {5, 3}, false, false},
      {"2-D minimal batch 2 [2,1]", {2, 1}},
      {"3-D (N,C,L) training [3,4,7]", {3, 4, 7}},
      {"4-D training affine [4,3,5,5]", {4, 3, 5, 5}},
      {"4-D training no affine momentum 0.3 eps 1e-3 [2,3,4,5]", {2, 3, 4, 5}, true, false, true, false, 0.3, 1e-3},
      {"4-D eval affine [2,3,4,4]", {2, 3, 4, 4}, false},
      {"4-D channels-last training [4,6,3,5]", {4, 6, 3, 5}, true, true, true, true},
      {"4-D channels-last eval [2,6,3,3]", {2, 6, 3, 3}, false, true, true, true},
      {"4-D channels-last training no running stats [3,8,4,4]", {3, 8, 4, 4}, true, true, false, true},
      {"4-D training 1x1 spatial [6,4,1,1]", {6, 4, 1, 1}},
      {"MNIST conv1 activations [8,32,28,28]", {8, 32, 28, 28}},
      {"MNIST conv2 activations [16,64,14,14]", {16, 64, 14, 14}},
      {"MNIST conv2 activations eval [16,64,14,14]", {16, 64, 14, 14}, false},
      {"2-D many rows [4099,7]", {4099, 7}},
      {"large planes [2,3,64,64]", {2, 3, 64, 64}},
      {"channels-last many rows [64,16,9,9]", {64, 16, 9, 9}, true, true, true, true},
      {"empty batch [0,3,2,2] eval", {0, 3, 2, 2}, false},
  };
}

BatchNormAttrs bn_attrs(const BnCase& bc) {
  BatchNormAttrs a{};
  a.training = bc.training ? 1 : 0;
  a.momentum = bc.momentum;
  a.eps = bc.eps;
  return a;
}

std::vector<Tensor> bn_inputs(const BnCase& bc, uint64_t& seed) {
  const int64_t C = bc.x[1];
  Tensor x = samples::uniform(bc.x, -2, 3, ++seed);
  if (bc.channels_last) x = contiguous_as(x, true);
  Tensor w = bc.affine ? samples::uniform({C}, 0.5, 1.5, ++seed) : Tensor();
  Tensor b = bc.affine ? samples::uniform({C}, -1, 1, ++seed) : Tensor();
  Tensor rm = bc.running ? samples::uniform({C}, -0.5, 0.5, ++seed) : Tensor();
  Tensor rv = bc.running ? samples::uniform({C}, 0.5, 2, ++seed) : Tensor();
  return {x, w, b, rm, rv};
}

std::vector<OpSample> batch_norm_samples() {
  std::vector<OpSample> out;
  uint64_t seed = 6000;
  for (const BnCase& bc : bn_cases()) {
    OpSample s;
    s.name = bc.name;
    s.inputs = bn_inputs(bc, seed);
    s.attrs = bn_attrs(bc);
    s.grad_inputs = bc.affine ? std::vector<int>{0, 1, 2} : std::vector<int>{0};
    s.tol = {{DType::f32, {1e-5, 1e-5}}};
    s.tol_note = "CUDA merges per-block Welford statistics in fp32; the reference sums in double";
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<OpSample> batch_norm_backward_samples() {
  std::vector<OpSample> out;
  uint64_t seed = 6500;
  for (const BnCase& bc : bn_cases()) {
    std::vector<Tensor> in = bn_inputs(bc, seed);
    std::vector<Tensor> fwd = call(OpId::batch_norm, in, bn_attrs(bc));
    Tensor gy = samples::uniform(bc.x, -1, 1, ++seed);
    if (bc.channels_last) gy = contiguous_as(gy, true);
    OpSample s;
    s.name = bc.name;
    s.inputs = {gy, in[0], in[1], fwd[1], fwd[2]};
    s.attrs = bn_attrs(bc);
    s.gradcheck = false;
    s.tol = {{DType::f32, {1e-5, 1e-4}}};
    s.tol_note = "per-channel sums over M values: fp32 partial sums in another order than the double reference";
    out.push_back(std::move(s));
  }
  return out;
}

// ---- cost and benches ----

Cost batch_norm_cost(const KernelCall& c) {
  double bytes = 0;
  for (const Tensor& t : c.in)
    if (t.defined()) bytes += static_cast<double>(t.nbytes());
  for (const Tensor& t : c.out) bytes += static_cast<double>(t.nbytes());
  const double n = static_cast<double>(c.in[0].numel());
  return {bytes, (c.op == OpId::batch_norm ? 8.0 : 10.0) * n};
}

std::vector<BenchCase> bn_benches(bool backward) {
  struct S {
    const char* name;
    Shape x;
    bool cl;
    DType dt;
  };
  std::vector<S> shapes;
  for (int64_t n : {64, 512}) {
    shapes.push_back({"mnist after conv1", {n, 32, 28, 28}, false, DType::f32});
    shapes.push_back({"mnist after conv2", {n, 64, 14, 14}, false, DType::f32});
  }
  shapes.push_back({"mnist after conv2", {512, 64, 14, 14}, false, DType::bf16});
  shapes.push_back({"mlp hidden (2-D)", {512, 128}, false, DType::f32});
  shapes.push_back({"resnet50 64ch 56x56", {32, 64, 56, 56}, true, DType::f16});
  shapes.push_back({"resnet50 256ch 56x56", {32, 256, 56, 56}, true, DType::f16});
  shapes.push_back({"resnet50 2048ch 7x7", {32, 2048, 7, 7}, true, DType::f16});
  shapes.push_back({"resnet50 64ch 56x56", {32, 64, 56, 56}, false, DType::f32});
  std::vector<BenchCase> out;
  for (const S& s : shapes) {
    BenchCase b;
    b.name = str(s.name, " ", s.x, " ", s.dt, s.cl ? " channels-last" : "", " training");
    BatchNormAttrs a{};
    b.attrs = a;
    Shape xs = s.x;
    bool cl = s.cl;
    DType dt = s.dt;
    b.make = [xs, cl, dt, backward, a](Device d) {
      const int64_t C = xs[1];
      TensorOptions o = TensorOptions().dtype(dt).device(d);
      TensorOptions so = TensorOptions().dtype(bn_stats_dtype(dt)).device(d);  // f32 parameters, as AMP runs them
      Tensor x = contiguous_as(uniform(xs, -1, 1, o), cl);
      Tensor w = ones({C}, so), bb = zeros({C}, so), rm = zeros({C}, so), rv = ones({C}, so);
      if (!backward) return std::vector<Tensor>{x, w, bb, rm, rv};
      std::vector<Tensor> f = call(OpId::batch_norm, {x, w, bb, rm, rv}, a);
      Tensor gy = contiguous_as(uniform(xs, -1, 1, o), cl);
      return std::vector<Tensor>{gy, x, w, f[1], f[2]};
    };
    out.push_back(std::move(b));
  }
  return out;
}

}  // namespace

void define_op_batch_norm(OpInfo& info) {
  info.doc = "batch normalisation (training: batch statistics + running-stat update in place; eval)";
  info.infer = infer_batch_norm;
  info.backward = batch_norm_vjp;
  info.save = Save::both;
  info.save_inputs_mask = 0b00011;   // x, weight: never the running statistics (Note [running statistics])
  info.save_outputs_mask = 0b110;    // mean, invstd: not y
  info.samples = batch_norm_samples;
  info.cost = batch_norm_cost;
  info.benches = [] { return bn_benches(false); };
  // f16/bf16 activations stay in their dtype with f32 statistics and parameters (as cuDNN's path)
  info.autocast = AutocastPolicy::none;
  info.contiguous_inputs = false;
  info.add_variant({.name = "cpu", .device = DeviceType::cpu, .fn = batch_norm_cpu, .dtypes = kFloatTypes,
                    .note = "two passes per channel in double, parallel over channels"});
#if EMBER_WITH_DNNL
  register_dnnl_batch_norm(info);  // batch_norm_dnnl.cpp: oneDNN forward, kVendor
#endif
}

void define_op_batch_norm_backward(OpInfo& info) {
  info.doc = "fused gradient of batch_norm: dx, dweight, dbias";
  info.infer = infer_batch_norm_backward;
  info.samples = batch_norm_backward_samples;
  info.cost = batch_norm_cost;
  info.benches = [] { return bn_benches(true); };
  info.contiguous_inputs = false;
  info.add_variant({.name = "cpu", .device = DeviceType::cpu, .fn = batch_norm_backward_cpu, .dtypes = kFloatTypes,
                    .note = "per channel in double, parallel over channels"});
}

Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor running_mean, Tensor running_var,
                  bool training, double momentum, double eps) {
  BatchNormAttrs a{};
  a.training = training ? 1 : 0;
  a.momentum = momentum;
  a.eps = eps;
  return call(OpId::batch_norm, {x, weight, bias, running_mean, running_var}, a)[0];
}

}  // namespace ember
