// Reductions: plan, inference, CPU kernels, gradients, functional API.
#include "kernels/ops/reduce.h"

#include <cmath>
#include <numeric>

#include "core/parallel.h"
#include "kernels/functional.h"
#include "kernels/ops/dtype_promotion.h"
#include "kernels/registry.h"

namespace ember {

ReducePlan plan_reduce(const Tensor& x, uint64_t mask, bool keepdim) {
  ReducePlan p;
  const int n = x.dim();
  const Shape& s = x.shape();
  for (int d = 0; d < n; ++d) {
    bool red = (mask >> d) & 1u;
    if (!red) p.out_shape.push_back(s[d]);
    else if (keepdim) p.out_shape.push_back(1);
  }
  // reduced dims that matter (size != 1), and whether they are adjacent in memory
  int first = -1, last = -1;
  for (int d = 0; d < n; ++d)
    if (((mask >> d) & 1u) && s[d] != 1) {
      if (first < 0) first = d;
      last = d;
    }
  if (first < 0) {  // nothing (of size > 1) is reduced
    p.A = x.numel();
    return p;
  }
  bool adjacent = true;
  for (int d = first; d <= last; ++d)
    if (!((mask >> d) & 1u) && s[d] != 1) adjacent = false;
  if (adjacent) {
    for (int d = 0; d < first; ++d) p.A *= s[d];
    for (int d = first; d <= last; ++d) p.R *= s[d];
    for (int d = last + 1; d < n; ++d) p.B *= s[d];
    return p;
  }
  p.permute = true;
  for (int d = 0; d < n; ++d)
    if (!((mask >> d) & 1u)) {
      p.perm.push_back(d);
      p.A *= s[d];
    }
  for (int d = 0; d < n; ++d)
    if ((mask >> d) & 1u) {
      p.perm.push_back(d);
      p.R *= s[d];
    }
  return p;
}

int64_t reduced_count(const Shape& s, uint64_t mask) {
  int64_t r = 1;
  for (int d = 0; d < s.size(); ++d)
    if ((mask >> d) & 1u) r *= s[d];
  return r;
}

// The input as the plan wants it: contiguous, permuted when the reduced dims are not adjacent.
Tensor reduce_input(const Tensor& x, const ReducePlan& p) {
  if (!p.permute) return x.is_contiguous() ? x : x.contiguous();
  return x.permute(p.perm).contiguous();
}

namespace {

enum class Kind { sum, mean, amax, amin, argmax, var };

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::sum: return "sum";
    case Kind::mean: return "mean";
    case Kind::amax: return "amax";
    case Kind::amin: return "amin";
    case Kind::argmax: return "argmax";
    case Kind::var: return "var";
  }
  return "?";
}

template <Kind K>
std::vector<TensorSpec> infer_reduce(std::span<const Tensor> in, const Attrs& a) {
  const char* name = kind_name(K);
  EMBER_CHECK(in.size() == 1, name, ": expects one input");
  const Tensor& x = in[0];
  const ReduceAttrs& ra = a.get<ReduceAttrs>();
  EMBER_CHECK(ra.mask >> x.dim() == 0, name, ": dims out of range for ", x.describe());
  ReducePlan p = plan_reduce(x, ra.mask, ra.keepdim != 0);
  DType t = x.dtype();
  if constexpr (K == Kind::sum) {
    if (!is_floating(t)) t = DType::i64;
  } else if constexpr (K == Kind::mean || K == Kind::var) {
    EMBER_CHECK(is_floating(t), name, ": expects a floating tensor, got ", x.describe(),
                " (the functional API promotes integers to f32)");
  } else if constexpr (K == Kind::argmax) {
    EMBER_CHECK(t != DType::boolean, "argmax: bool tensors are not supported");
    EMBER_CHECK(p.R > 0 || x.numel() == 0 || p.A * p.B == 0, "argmax: cannot take the argmax of an empty dim");
    EMBER_CHECK(x.numel() > 0, "argmax: expected a non-empty tensor, got ", x.describe());
    t = DType::i64;
  } else {
    EMBER_CHECK(t != DType::boolean, name, ": bool tensors are not supported");
    EMBER_CHECK(x.numel() > 0 || p.A * p.B == 0, name, ": cannot reduce an empty dimension (", x.describe(),
                ") because the result has no identity");
  }
  return {{p.out_shape, t, {}}};
}

// ---- CPU kernels ----

template <class Op, class T, class Out, class Project>
void reduce_loop_cpu(const T* x, Out* out, const ReducePlan& p, const Project& proj) {
  const int64_t A = p.A, R = p.R, B = p.B;
  if (B == 1) {  // rows: one output per row, the row read sequentially
    int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(R, 1));
    parallel_for(0, A, grain, [&](int64_t lo, int64_t hi) {
      for (int64_t a = lo; a < hi; ++a) {
        typename Op::acc_type acc = Op::init();
        const T* row = x + a * R;
        for (int64_t r = 0; r < R; ++r) acc = Op::step(acc, row[r], r);
        out[a] = proj(acc);
      }
    });
    return;
  }
  // columns: a tile of up to 256 outputs walks the R rows together, each row read contiguously
  constexpr int64_t kTile = 256;
  const int64_t tiles = (B + kTile - 1) / kTile;
  int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(R * kTile, 1));
  parallel_for(0, A * tiles, grain, [&](int64_t lo, int64_t hi) {
    typename Op::acc_type acc[kTile];
    for (int64_t t = lo; t < hi; ++t) {
      int64_t a = t / tiles, b0 = (t % tiles) * kTile, nb = std::min(kTile, B - b0);
      for (int64_t j = 0; j < nb; ++j) acc[j] = Op::init();
      const T* base = x + a * R * B + b0;
      for (int64_t r = 0; r < R; ++r) {
        const T* row = base + r * B;
        for (int64_t j = 0; j < nb; ++j) acc[j] = Op::step(acc[j], row[j], r);
      }
      for (int64_t j = 0; j < nb; ++j) out[a * B + b0 + j] = proj(acc[j]);
    }
  });
}

template <Kind K>
void reduce_cpu(const KernelCall& c) {
  const ReduceAttrs& ra = c.attr<ReduceAttrs>();
  ReducePlan p = plan_reduce(c.in[0], ra.mask, ra.keepdim != 0);
  Tensor x = reduce_input(c.in[0], p);
  const Tensor& out = c.out[0];
  if (out.numel() == 0) return;
  const int64_t R = p.R;
  EMBER_DISPATCH_ALL(x.dtype(), kind_name(K), [&] {
    using acc_t_ = std::conditional_t<std::is_floating_point_v<scalar_t> || std::is_same_v<scalar_t, Half> ||
                                          std::is_same_v<scalar_t, BFloat16>,
                                      double, int64_t>;
    const scalar_t* xp = static_cast<const scalar_t*>(x.data_ptr());
    if constexpr (K == Kind::sum) {
      using out_t = std::conditional_t<std::is_same_v<acc_t_, double>, scalar_t, int64_t>;
      reduce_loop_cpu<reduce::SumOp<acc_t_>>(xp, static_cast<out_t*>(out.data_ptr()), p,
                                             [](acc_t_ v) { return static_cast<out_t>(v); });
    } else if constexpr (K == Kind::mean) {
      if constexpr (std::is_same_v<acc_t_, double>)
        reduce_loop_cpu<reduce::SumOp<double>>(xp, static_cast<scalar_t*>(out.data_ptr()), p, [R](double v) {
          return static_cast<scalar_t>(R == 0 ? std::nan("") : v / static_cast<double>(R));
        });
    } else if constexpr ((K == Kind::amax || K == Kind::amin) && !std::is_same_v<scalar_t, bool>) {
      using Op = std::conditional_t<K == Kind::amax, reduce::MaxOp<acc_t_>, reduce::MinOp<acc_t_>>;
      reduce_loop_cpu<Op>(xp, static_cast<scalar_t*>(out.data_ptr()), p,
                          [](acc_t_ v) { return static_cast<scalar_t>(v); });
    } else if constexpr (K == Kind::argmax && !std::is_same_v<scalar_t, bool>) {
      reduce_loop_cpu<reduce::ArgMaxOp<acc_t_>>(xp, static_cast<int64_t*>(out.data_ptr()), p,
                                                [](reduce::ArgMaxAcc<acc_t_> v) { return v.index; });
    } else if constexpr (K == Kind::var) {
      if constexpr (std::is_same_v<acc_t_, double>) {
        double corr = ra.correction;
        reduce_loop_cpu<reduce::WelfordOp<double>>(xp, static_cast<scalar_t*>(out.data_ptr()), p,
                                                   [corr](reduce::WelfordAcc<double> w) {
                                                     double den = static_cast<double>(w.n) - corr;
                                                     return static_cast<scalar_t>(den > 0 ? w.m2 / den : std::nan(""));
                                                   });
      }
    }
  });
}

// ---- gradients ----

std::vector<int64_t> dims_of(uint64_t mask, int n) {
  std::vector<int64_t> d;
  for (int i = 0; i < n; ++i)
    if ((mask >> i) & 1u) d.push_back(i);
  return d;
}

// g (the gradient of a reduced result) broadcast back to the input's shape.
Tensor unreduce(const Tensor& g, const Shape& in_shape, uint64_t mask, bool keepdim) {
  Tensor t = g;
  if (!keepdim)
    for (int64_t d : dims_of(mask, in_shape.size())) t = t.unsqueeze(d);
  return t.expand(in_shape);
}

std::vector<Tensor> sum_vjp(const BackwardCtx& ctx) {
  const ReduceAttrs& a = ctx.attr<ReduceAttrs>();
  return {unreduce(ctx.grad(0), ctx.input_meta[0].shape, a.mask, a.keepdim != 0)};
}
std::vector<Tensor> mean_vjp(const BackwardCtx& ctx) {
  const ReduceAttrs& a = ctx.attr<ReduceAttrs>();
  double r = static_cast<double>(reduced_count(ctx.input_meta[0].shape, a.mask));
  return {unreduce(div(ctx.grad(0), r), ctx.input_meta[0].shape, a.mask, a.keepdim != 0)};
}
std::vector<Tensor> extremum_vjp(const BackwardCtx& ctx) {
  const ReduceAttrs& a = ctx.attr<ReduceAttrs>();
  const Tensor& x = ctx.inputs[0];
  const Tensor& y = ctx.outputs[0];
  bool kd = a.keepdim != 0;
  Tensor hit = eq(x, unreduce(y, x.shape(), a.mask, kd));
  Tensor count = sum(hit, dims_of(a.mask, x.dim()), true);
  Tensor share = div(unreduce(ctx.grad(0), x.shape(), a.mask, kd), count.expand(x.shape()));
  return {where(hit, share, 0.0)};
}
std::vector<Tensor> var_vjp(const BackwardCtx& ctx) {
  const ReduceAttrs& a = ctx.attr<ReduceAttrs>();
  const Tensor& x = ctx.inputs[0];
  double r = static_cast<double>(reduced_count(x.shape(), a.mask));
  Tensor centered = sub(x, mean(x, dims_of(a.mask, x.dim()), true));
  Tensor g = unreduce(ctx.grad(0), x.shape(), a.mask, a.keepdim != 0);
  return {mul(mul(g, centered), 2.0 / (r - a.correction))};
}

Cost reduce_cost(const KernelCall& c) {
  return {static_cast<double>(c.in[0].nbytes() + c.out[0].nbytes()), static_cast<double>(c.in[0].numel())};
}

template <Kind K>
void define_reduce(OpInfo& info, const char* doc, BackwardFn vjp, Save save, DTypeSet types) {
  info.doc = doc;
  info.infer = infer_reduce<K>;
  info.backward = vjp;
  info.save = save;
  info.cost = reduce_cost;
  info.autocast = K == Kind::argmax || K == Kind::amax || K == Kind::amin ? AutocastPolicy::none : AutocastPolicy::fp32;
  info.add_variant({.name = "cpu",
                    .device = DeviceType::cpu,
                    .fn = reduce_cpu<K>,
                    .dtypes = types,
                    .note = "[A, R, B] plan, f64 accumulation, parallel over outputs"});
}

}  // namespace

void define_op_sum(OpInfo& info) { define_reduce<Kind::sum>(info, "sum over dims", sum_vjp, Save::nothing, kAllTypes); }
void define_op_mean(OpInfo& info) {
  define_reduce<Kind::mean>(info, "mean over dims", mean_vjp, Save::nothing, kFloatTypes);
}
void define_op_amax(OpInfo& info) {
  define_reduce<Kind::amax>(info, "max over dims", extremum_vjp, Save::both, kNumericTypes);
}
void define_op_amin(OpInfo& info) {
  define_reduce<Kind::amin>(info, "min over dims", extremum_vjp, Save::both, kNumericTypes);
}
void define_op_argmax(OpInfo& info) {
  define_reduce<Kind::argmax>(info, "index of the max along a dim", nullptr, Save::nothing, kNumericTypes);
}
void define_op_var(OpInfo& info) {
  define_reduce<Kind::var>(info, "variance over dims (Welford)", var_vjp, Save::inputs, kFloatTypes);
}

// ---- functional API ----

namespace {
uint64_t dims_mask(const Tensor& x, const std::vector<int64_t>& dims, const char* op) {
  if (dims.empty()) return x.dim() == 0 ? 0 : (uint64_t{1} << x.dim()) - 1;
  uint64_t m = 0;
  for (int64_t d : dims) {
    int w = wrap_dim(d, x.dim(), op);
    if (x.dim() == 0) continue;
    EMBER_CHECK(!((m >> w) & 1u), op, ": dim ", d, " appears twice in the dims list");
    m |= uint64_t{1} << w;
  }
  return m;
}
}  // namespace

Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return call1(OpId::sum, {x}, ReduceAttrs{dims_mask(x, dims, "sum"), keepdim, 1});
}
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return call1(OpId::mean, {promote_to_float(x)}, ReduceAttrs{dims_mask(x, dims, "mean"), keepdim, 1});
}
Tensor amax(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return call1(OpId::amax, {x}, ReduceAttrs{dims_mask(x, dims, "amax"), keepdim, 1});
}
Tensor amin(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return call1(OpId::amin, {x}, ReduceAttrs{dims_mask(x, dims, "amin"), keepdim, 1});
}
Tensor max(const Tensor& x) { return amax(x); }
Tensor min(const Tensor& x) { return amin(x); }
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim) {
  return call1(OpId::argmax, {x}, ReduceAttrs{dims_mask(x, {dim}, "argmax"), keepdim, 1});
}
Tensor argmax(const Tensor& x) { return call1(OpId::argmax, {x.reshape({-1})}, ReduceAttrs{1, 0, 1}); }
Tensor var(const Tensor& x, const std::vector<int64_t>& dims, double correction, bool keepdim) {
  return call1(OpId::var, {promote_to_float(x)}, ReduceAttrs{dims_mask(x, dims, "var"), keepdim, correction});
}

Tensor sum_to(const Tensor& x, const Shape& shape) {
  if (x.shape() == shape) return x;
  EMBER_CHECK(shape.size() <= x.dim(), "sum_to: cannot reduce ", x.shape(), " to the larger rank ", shape);
  int lead = x.dim() - shape.size();
  std::vector<int64_t> dims;
  for (int d = 0; d < x.dim(); ++d) {
    if (d < lead) dims.push_back(d);
    else if (shape[d - lead] == 1 && x.shape()[d] != 1) dims.push_back(d);
    else
      EMBER_CHECK(shape[d - lead] == x.shape()[d] || shape[d - lead] == 1, "sum_to: ", x.shape(),
                  " does not broadcast from ", shape);
  }
  Tensor r = dims.empty() ? x : sum(x, dims, true);
  return r.reshape(shape);
}

Tensor logsumexp(const Tensor& x, int64_t dim, bool keepdim) {
  Tensor m = amax(x, {dim}, true).detach();
  // exp(x - m) is at most 1; infinities in m would give nan, so they are replaced by 0
  Tensor safe_m = where(eq(abs(m), INFINITY), zeros_like(m), m);
  Tensor r = add(log(sum(exp(sub(x, safe_m)), {dim}, true)), safe_m);
  return keepdim ? r : r.squeeze(dim);
}

}  // namespace ember
