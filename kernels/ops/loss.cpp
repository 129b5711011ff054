// Losses: the op definitions: inference, gradients, samples, cost, benches and the functional API.
// Formulas and the exact PyTorch semantics (weights, ignore_index, label smoothing, total_weight)
// are in loss.h. The CPU references are in loss_cpu.cpp, the CUDA kernels in loss.cu.
#include "kernels/ops/loss.h"

#include <cmath>
#include <limits>

#include "kernels/common/samples.h"
#include "kernels/functional.h"
#include "kernels/ops/dtype_promotion.h"
#include "kernels/ops/softmax.h"
#include "kernels/registry.h"

namespace ember {

// Shared with the CPU kernels (loss_cpu.cpp), which validate with the same checks.
RowGeometry class_loss_geometry(const char* op, const Tensor& x, const Tensor& t, const Tensor& w) {
  EMBER_CHECK(is_floating(x.dtype()), op, ": input must be floating, got ", x.describe());
  EMBER_CHECK(x.dim() >= 1, op, ": input must have a class dim ([C], [N, C] or [N, C, d1, ...]), got ", x.describe());
  EMBER_CHECK(t.dtype() == DType::i64 || t.dtype() == DType::i32, op,
              ": target must hold class indices as i64 or i32, got ", t.describe(),
              " (class-probability targets are not supported)");
  RowGeometry g;
  if (x.dim() == 1) {
    EMBER_CHECK(t.dim() == 0, op, ": input ", x.shape(), " (one sample of ", x.shape()[0],
                " classes) needs a 0-d target, got ", t.shape());
    g.C = x.shape()[0];
  } else {
    Shape want;
    want.push_back(x.shape()[0]);
    for (int i = 2; i < x.dim(); ++i) want.push_back(x.shape()[i]);
    EMBER_CHECK(t.shape() == want, op, ": input ", x.shape(), " (classes along dim 1) needs target shape ", want,
                ", got ", t.shape());
    g = row_geometry(x.shape(), 1);
  }
  EMBER_CHECK(g.C > 0 || g.rows() == 0, op, ": input ", x.shape(), " has no classes");
  if (w.defined()) {
    EMBER_CHECK(w.dim() == 1 && w.shape()[0] == g.C, op, ": weight must be [", g.C, "] (one per class), got ",
                w.shape());
    EMBER_CHECK(w.dtype() == x.dtype(), op, ": weight ", w.describe(), " must have the input's dtype ", x.dtype());
  }
  return g;
}

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

const char* reduction_name(Reduction r) {
  switch (r) {
    case Reduction::none: return "none";
    case Reduction::mean: return "mean";
    case Reduction::sum: return "sum";
  }
  return "?";
}

// An enum holds any value of its type: a Reduction cast from a bad integer is caught here.
void check_reduction(const char* op, Reduction r) {
  const auto v = static_cast<int64_t>(r);
  EMBER_CHECK(v >= 0 && v <= 2, op, ": unknown reduction ", v, " (expected none = 0, mean = 1 or sum = 2)");
}

// ---- class-index losses: shapes ----


std::vector<TensorSpec> class_loss_outputs(const Tensor& x, const Tensor& t, Reduction reduction) {
  Shape out = reduction == Reduction::none ? t.shape() : Shape{};
  return {{out, x.dtype(), {}}, {Shape{}, loss_acc_dtype(x.dtype()), {}}};
}

template <bool kCE>
std::vector<TensorSpec> infer_class_loss(std::span<const Tensor> in, const Attrs& a) {
  const char* op = kCE ? "cross_entropy" : "nll_loss";
  EMBER_CHECK(in.size() == 3, op, ": expects (input, target, weight)");
  const LossAttrs& la = a.get<LossAttrs>();
  check_reduction(op, la.reduction);
  EMBER_CHECK(la.label_smoothing >= 0 && la.label_smoothing <= 1, op, ": label_smoothing must be in [0, 1], got ",
              la.label_smoothing);
  EMBER_CHECK(kCE || la.label_smoothing == 0, "nll_loss: label_smoothing is not supported (got ",
              la.label_smoothing, "); use cross_entropy");
  class_loss_geometry(op, in[0], in[1], in[2]);
  return class_loss_outputs(in[0], in[1], la.reduction);
}

// (grad, input, target, weight, total_weight) -> d input.
template <bool kCE>
std::vector<TensorSpec> infer_class_loss_backward(std::span<const Tensor> in, const Attrs& a) {
  const char* op = kCE ? "cross_entropy_backward" : "nll_loss_backward";
  EMBER_CHECK(in.size() == 5, op, ": expects (grad, input, target, weight, total_weight)");
  const LossAttrs& la = a.get<LossAttrs>();
  check_reduction(op, la.reduction);
  const Tensor &g = in[0], &x = in[1], &t = in[2], &tw = in[4];
  class_loss_geometry(op, x, t, in[3]);
  Shape gs = la.reduction == Reduction::none ? t.shape() : Shape{};
  EMBER_CHECK(g.shape() == gs && g.dtype() == x.dtype(), op, ": grad must be ", x.dtype(), gs, " for reduction ",
              reduction_name(la.reduction), ", got ", g.describe());
  EMBER_CHECK(tw.defined() && tw.numel() == 1 && is_floating(tw.dtype()), op,
              ": total_weight must be a one-element floating tensor, got ",
              tw.defined() ? tw.describe() : std::string("undefined"));
  return {{x.shape(), x.dtype(), {}}};
}

// ---- mse_loss: shapes ----

std::vector<TensorSpec> infer_mse(std::span<const Tensor> in, const Attrs& a) {
  EMBER_CHECK(in.size() == 2, "mse_loss: expects (input, target)");
  const Tensor &x = in[0], &y = in[1];
  const LossAttrs& la = a.get<LossAttrs>();
  check_reduction("mse_loss", la.reduction);
  EMBER_CHECK(is_floating(x.dtype()) && x.dtype() == y.dtype(), "mse_loss: input ", x.describe(), " and target ",
              y.describe(), " must share a floating dtype");
  EMBER_CHECK(x.shape() == y.shape(), "mse_loss: input ", x.shape(), " and target ", y.shape(),
              " must have the same shape (the functional API broadcasts them)");
  return {{la.reduction == Reduction::none ? x.shape() : Shape{}, x.dtype(), {}}};
}

std::vector<TensorSpec> infer_mse_backward(std::span<const Tensor> in, const Attrs& a) {
  EMBER_CHECK(in.size() == 3, "mse_loss_backward: expects (grad, input, target)");
  const Tensor &g = in[0], &x = in[1], &y = in[2];
  const LossAttrs& la = a.get<LossAttrs>();
  check_reduction("mse_loss_backward", la.reduction);
  EMBER_CHECK(is_floating(x.dtype()) && x.dtype() == y.dtype() && x.shape() == y.shape(), "mse_loss_backward: input ",
              x.describe(), " and target ", y.describe(), " must match");
  Shape gs = la.reduction == Reduction::none ? x.shape() : Shape{};
  EMBER_CHECK(g.shape() == gs && g.dtype() == x.dtype(), "mse_loss_backward: grad must be ", x.dtype(), gs,
              " for reduction ", reduction_name(la.reduction), ", got ", g.describe());
  return {{x.shape(), x.dtype(), {}}};
}

// ---- gradients ----

std::vector<Tensor> cross_entropy_vjp(const BackwardCtx& ctx) {
  Tensor dx;
  if (ctx.needs_grad(0))
    dx = call1(OpId::cross_entropy_backward,
               {ctx.grad(0), ctx.inputs[0], ctx.inputs[1], ctx.inputs[2], ctx.outputs[1]}, *ctx.attrs);
  return {dx, Tensor(), Tensor()};  // no gradient for targets or class weights
}

std::vector<Tensor> nll_loss_vjp(const BackwardCtx& ctx) {
  Tensor dx;
  if (ctx.needs_grad(0))
    dx = call1(OpId::nll_loss_backward, {ctx.grad(0), ctx.inputs[0], ctx.inputs[1], ctx.inputs[2], ctx.outputs[1]},
               *ctx.attrs);
  return {dx, Tensor(), Tensor()};
}

// nll_loss_backward is linear in g: its gradient w.r.t. g is nll_loss of the incoming gradient
// with the same options, except that a mean over W = 0 (no targets) gives 0 here, not 0/0: the
// gradient it differentiates is identically zero then.
std::vector<Tensor> nll_loss_backward_vjp(const BackwardCtx& ctx) {
  Tensor dg;
  if (ctx.needs_grad(0)) {
    LossAttrs a = ctx.attr<LossAttrs>();
    if (a.reduction == Reduction::mean) {
      Tensor s = call(OpId::nll_loss, {ctx.grad(0), ctx.inputs[2], ctx.inputs[3]}, LossAttrs{Reduction::sum, a.ignore_index, 0})[0];
      Tensor tw = to_dtype(ctx.inputs[4], s.dtype());
      dg = where(eq(tw, 0.0), zeros_like(s), div(s, tw));  // on the device: no host sync
    } else {
      dg = call(OpId::nll_loss, {ctx.grad(0), ctx.inputs[2], ctx.inputs[3]}, a)[0];
    }
  }
  return {dg, Tensor(), Tensor(), Tensor(), Tensor()};
}

std::vector<Tensor> mse_loss_vjp(const BackwardCtx& ctx) {
  Tensor dx = call1(OpId::mse_loss_backward, {ctx.grad(0), ctx.inputs[0], ctx.inputs[1]}, *ctx.attrs);
  return {ctx.needs_grad(0) ? dx : Tensor(), ctx.needs_grad(1) ? neg(dx) : Tensor()};
}

// dx = 2 s (x - y) g: d/dg = Σ 2 s (x - y) gg (or elementwise for none), d/dx = 2 s g gg = -d/dy.
std::vector<Tensor> mse_loss_backward_vjp(const BackwardCtx& ctx) {
  const Tensor &g = ctx.inputs[0], &x = ctx.inputs[1], &y = ctx.inputs[2];
  const Reduction red = ctx.attr<LossAttrs>().reduction;
  const double s = red == Reduction::mean ? 2.0 / static_cast<double>(x.numel()) : 2.0;
  Tensor gg = ctx.grad(0);
  Tensor dg, dx;
  if (ctx.needs_grad(0)) {
    Tensor t = mul(mul(gg, sub(x, y)), s);
    dg = red == Reduction::none ? t : sum(t);
  }
  if (ctx.needs_grad(1) || ctx.needs_grad(2)) dx = mul(mul(gg, g), s);
  return {dg, ctx.needs_grad(1) ? dx : Tensor(), ctx.needs_grad(2) ? neg(dx) : Tensor()};
}

// ---- samples ----

Tensor with_targets(std::vector<int64_t> v, const Shape& s) { return tensor_i64(v, s); }

struct ClassCase {
  std::string name;
  Tensor x, t, w;
  LossAttrs attrs;
  bool gradcheck = true;
};

std::vector<ClassCase> class_cases(bool smoothing) {
  std::vector<ClassCase> v;
  uint64_t seed = 2100;
  auto u = [&](Shape s, double lo = -3, double hi = 3) { return samples::uniform(s, lo, hi, ++seed); };
  auto ri = [&](Shape s, int64_t C) { return samples::randint(s, C, ++seed); };
  auto weights = [&](int64_t C) { return samples::uniform({C}, 0.2, 2.0, ++seed); };
  const LossAttrs mean{Reduction::mean, -100, 0}, sum{Reduction::sum, -100, 0}, none{Reduction::none, -100, 0};
  v.push_back({"[5, 7] mean", u({5, 7}), ri({5}, 7), {}, mean});
  v.push_back({"[5, 7] sum", u({5, 7}), ri({5}, 7), {}, sum});
  v.push_back({"[5, 7] none", u({5, 7}), ri({5}, 7), {}, none});
  v.push_back({"[6, 4] ignore_index -100 present, mean", u({6, 4}), with_targets({1, -100, 3, 0, -100, 2}, {6}), {},
               mean});
  v.push_back({"[6, 4] ignore_index 2 (a real class), none", u({6, 4}), with_targets({1, 2, 3, 0, 2, 2}, {6}), {},
               LossAttrs{Reduction::none, 2, 0}});
  v.push_back({"[6, 4] weights, mean", u({6, 4}), ri({6}, 4), weights(4), mean});
  v.push_back({"[6, 4] weights, sum", u({6, 4}), ri({6}, 4), weights(4), sum});
  v.push_back({"[6, 4] weights, none", u({6, 4}), ri({6}, 4), weights(4), none});
  v.push_back({"[6, 4] weights and ignore_index, mean", u({6, 4}), with_targets({3, -100, 0, 0, 2, -100}, {6}),
               weights(4), mean});
  v.push_back({"[2, 5, 3] class dim 1, mean", u({2, 5, 3}), ri({2, 3}, 5), {}, mean});
  v.push_back({"[2, 5, 3] class dim 1, none", u({2, 5, 3}), ri({2, 3}, 5), {}, none});
  v.push_back({"[2, 4, 3, 2] class dim 1 of 4-D, weights, ignore, mean", u({2, 4, 3, 2}),
               with_targets({0, 1, 2, 3, -100, 1, 2, 2, 3, 0, -100, 1}, {2, 3, 2}), weights(4), mean});
  v.push_back({"[7] one sample, 0-d target, mean", u({7}), tensor_i64({3}, Shape{}), {}, mean});
  v.push_back({"[7] one sample, 0-d target, none", u({7}), tensor_i64({6}, Shape{}), {}, none});
  v.push_back({"[0, 5] empty batch, mean (NaN)", u({0, 5}), ri({0}, 5), {}, mean});
  v.push_back({"[0, 5] empty batch, sum", u({0, 5}), ri({0}, 5), {}, sum});
  v.push_back({"[0, 5] empty batch, none", u({0, 5}), ri({0}, 5), {}, none});
  v.push_back({"[3, 5] all ignored, mean (NaN)", u({3, 5}), with_targets({-100, -100, -100}, {3}), {}, mean, false});
  {
    ClassCase c{"[5, 7] i32 targets, mean", u({5, 7}), ri({5}, 7).to(DType::i32), {}, mean};
    v.push_back(c);
  }
  v.push_back({"[64, 10] MNIST batch, mean", u({64, 10}), ri({64}, 10), {}, mean});
  v.push_back({"[512, 10] MNIST batch, mean, i32 targets", u({512, 10}), ri({512}, 10).to(DType::i32), {}, mean});
  v.push_back({"[8000, 10] mean (multi-block + finalize)", u({8000, 10}), ri({8000}, 10), {}, mean});
  v.push_back({"[8000, 10] weights, sum", u({8000, 10}), ri({8000}, 10), weights(10), sum});
  v.push_back({"[9, 100] mean", u({9, 100}), ri({9}, 100), {}, mean});
  v.push_back({"[3, 700] none", u({3, 700}), ri({3}, 700), {}, none});
  v.push_back({"[3, 5000] mean (block per row)", u({3, 5000}), ri({3}, 5000), {}, mean});
  v.push_back({"[3, 60, 50] class dim 1 (strided), none", u({3, 60, 50}), ri({3, 50}, 60), {}, none});
  v.push_back({"+-1e4 [16, 50] mean (large magnitudes)", u({16, 50}, -1e4, 1e4), ri({16}, 50), {}, mean});
  v.push_back({"+-1e4 [4, 5000] none (large magnitudes, long)", u({4, 5000}, -1e4, 1e4), ri({4}, 5000), {}, none});
  {
    // -inf logits at non-target classes contribute exp(-inf) = 0
    Tensor x = u({4, 6});
    double* p = x.data<double>();
    p[1] = -kInf;
    p[8] = -kInf;
    v.push_back({"-inf at non-target logits, none", x, with_targets({0, 3, 5, 2}, {4}), {}, none, false});
  }
  if (smoothing) {
    const LossAttrs smean{Reduction::mean, -100, 0.1}, ssum{Reduction::sum, -100, 0.1}, snone{Reduction::none, -100, 0.1};
    v.push_back({"[5, 7] smoothing 0.1, mean", u({5, 7}), ri({5}, 7), {}, smean});
    v.push_back({"[5, 7] smoothing 0.1, sum", u({5, 7}), ri({5}, 7), {}, ssum});
    v.push_back({"[5, 7] smoothing 0.1, none", u({5, 7}), ri({5}, 7), {}, snone});
    v.push_back({"[6, 4] smoothing 0.1, weights, ignore, mean", u({6, 4}),
                 with_targets({3, -100, 0, 1, 2, -100}, {6}), weights(4), smean});
    v.push_back({"[6, 4] smoothing 0.1, weights, ignore, none", u({6, 4}),
                 with_targets({3, -100, 0, 1, 2, -100}, {6}), weights(4), snone});
    v.push_back({"[2, 4, 3, 2] class dim 1, smoothing 0.1, weights, ignore, sum", u({2, 4, 3, 2}),
                 with_targets({0, 1, 2, 3, -100, 1, 2, 2, 3, 0, -100, 1}, {2, 3, 2}), weights(4), ssum});
    v.push_back({"[512, 10] smoothing 0.1, weights, mean", u({512, 10}), ri({512}, 10), weights(10), smean});
    v.push_back({"[3, 5000] smoothing 0.1, weights, none (block per row)", u({3, 5000}), ri({3}, 5000),
                 weights(5000), snone});
    v.push_back({"[3, 60, 50] class dim 1 (strided), smoothing 0.1, weights, mean", u({3, 60, 50}), ri({3, 50}, 60),
                 weights(60), smean});
    v.push_back({"+-1e4 [16, 50] smoothing 0.1, weights, mean", u({16, 50}, -1e4, 1e4), ri({16}, 50), weights(50),
                 smean});
    v.push_back({"near-equal large [8, 100] smoothing 0.1, mean", u({8, 100}, 9000, 9001), ri({8}, 100), {}, smean});
    v.push_back({"[4, 6] smoothing 1.0, mean", u({4, 6}), ri({4}, 6), {}, LossAttrs{Reduction::mean, -100, 1.0}});
  }
  return v;
}

// f32: sums over rows and classes in another order than the f64 reference. f16/bf16: the outputs
// are rounded once more; the absolute tolerance covers the gradients of near-cancelling terms.
void set_loss_tolerance(OpSample& s) {
  s.tol = {{DType::f32, {1e-5, 1e-5}}, {DType::f16, {1e-3, 1e-3}}, {DType::bf16, {1.6e-2, 1e-2}}};
  s.tol_note = "CUDA accumulates in f32 per row and in f64 across rows, in another order than the f64 reference";
}

template <bool kCE>
std::vector<OpSample> class_loss_samples() {
  std::vector<OpSample> out;
  for (ClassCase& c : class_cases(kCE)) {
    OpSample s;
    s.name = c.name;
    s.inputs = {kCE ? c.x : log_softmax(c.x, c.x.dim() == 1 ? 0 : 1), c.t, c.w};
    s.attrs = c.attrs;
    s.grad_inputs = {0};  // not the targets, not the class weights (no gradient, like PyTorch)
    s.gradcheck = c.gradcheck;
    set_loss_tolerance(s);
    out.push_back(std::move(s));
  }
  return out;
}

template <bool kCE>
std::vector<OpSample> class_loss_backward_samples() {
  std::vector<OpSample> out;
  uint64_t seed = 2300;
  for (ClassCase& c : class_cases(kCE)) {
    OpSample s;
    s.name = c.name;
    Tensor x = kCE ? c.x : log_softmax(c.x, c.x.dim() == 1 ? 0 : 1);
    std::vector<Tensor> fwd = call(kCE ? OpId::cross_entropy : OpId::nll_loss, {x, c.t, c.w}, c.attrs);
    Tensor g = samples::uniform(fwd[0].shape(), 0.5, 2, ++seed);
    s.inputs = {g, x, c.t, c.w, fwd[1]};
    s.attrs = c.attrs;
    s.grad_inputs = {0};
    // cross_entropy_backward is not differentiated again; nll_loss_backward is (w.r.t. grad)
    s.gradcheck = !kCE && c.gradcheck;
    set_loss_tolerance(s);
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<OpSample> mse_samples(bool backward) {
  std::vector<OpSample> out;
  uint64_t seed = 2500;
  auto add = [&](std::string name, Tensor x, Tensor y, Reduction red) {
    OpSample s;
    s.name = std::move(name) + " " + reduction_name(red);
    s.attrs = LossAttrs{red, -100, 0};
    if (backward) {
      Shape gs = red == Reduction::none ? x.shape() : Shape{};
      s.inputs = {samples::uniform(gs, -1, 1, ++seed), x, y};
    } else {
      s.inputs = {x, y};
    }
    if (x.numel() > 1000) {
      s.tol = {{DType::f32, {1e-5, 1e-5}}};
      s.tol_note = "CUDA sums in f32 per thread and f64 across threads, in another order than the f64 reference";
    }
    out.push_back(std::move(s));
  };
  auto pair = [&](std::string name, Shape shape, Reduction red, bool transposed = false) {
    Tensor x = transposed ? samples::transposed(shape, -2, 2, ++seed) : samples::uniform(shape, -2, 2, ++seed);
    Tensor y = samples::uniform(shape, -2, 2, ++seed);
    add(std::move(name), x, y, red);
  };
  for (Reduction red : {Reduction::none, Reduction::mean, Reduction::sum}) {
    pair("[5, 6]", {5, 6}, red);
    pair("scalar", {}, red);
    pair("[7]", {7}, red);
    pair("[0] empty", {0}, red);
    pair("[1023]", {1023}, red);
    pair("transposed [6, 5]", {6, 5}, red, true);
    pair("[2^20+3]", {(1 << 20) + 3}, red);
  }
  pair("[300, 300] (multi-block)", {300, 300}, Reduction::mean);
  return out;
}

// ---- cost and benches ----

Cost io_cost(const KernelCall& c) {
  double b = 0;
  for (const Tensor& t : c.in)
    if (t.defined()) b += static_cast<double>(t.nbytes());
  for (const Tensor& t : c.out) b += static_cast<double>(t.nbytes());
  return {b, 0};
}

// cross_entropy: every logit is read once (exp, max, sum: ~4 FLOPs each); the backward also writes dx.
Cost cross_entropy_cost(const KernelCall& c) {
  Cost k = io_cost(c);
  k.flops = 4.0 * static_cast<double>(c.in[0].numel());
  return k;
}
Cost cross_entropy_backward_cost(const KernelCall& c) {
  Cost k = io_cost(c);
  k.flops = 6.0 * static_cast<double>(c.in[1].numel());
  return k;
}
// nll_loss reads one element per row, not the whole input.
Cost nll_loss_cost(const KernelCall& c) {
  const Tensor &x = c.in[0], &t = c.in[1];
  double b = static_cast<double>(t.nbytes() + static_cast<size_t>(t.numel()) * x.element_size());
  for (const Tensor& o : c.out) b += static_cast<double>(o.nbytes());
  return {b, static_cast<double>(t.numel())};
}
Cost nll_loss_backward_cost(const KernelCall& c) {
  return {static_cast<double>(c.in[0].nbytes() + c.in[2].nbytes() + c.out[0].nbytes()), 0};
}
Cost mse_cost(const KernelCall& c) {
  Cost k = io_cost(c);
  k.flops = 3.0 * static_cast<double>(c.in[0].numel());
  return k;
}

struct BenchShape {
  const char* name;
  int64_t N, C;
  DType dt;
};
const std::vector<BenchShape>& class_bench_shapes() {
  static const std::vector<BenchShape> v{{"[8192, 32768] f32", 8192, 32768, DType::f32},
                                         {"[8192, 32768] bf16", 8192, 32768, DType::bf16},
                                         {"[64, 10] f32", 64, 10, DType::f32},
                                         {"[512, 10] f32", 512, 10, DType::f32}};
  return v;
}

template <bool kBackward>
std::vector<BenchCase> cross_entropy_benches() {
  std::vector<BenchCase> v;
  for (const BenchShape& b : class_bench_shapes()) {
    BenchCase bc;
    bc.name = b.name;
    bc.attrs = LossAttrs{Reduction::mean, -100, 0};
    bc.make = [b](Device d) {
      Tensor x = uniform({b.N, b.C}, -1, 1, TensorOptions().dtype(b.dt).device(d));
      Tensor t = samples::randint({b.N}, b.C, 7).to(d);
      if (!kBackward) return std::vector<Tensor>{x, t, Tensor()};
      Tensor g = full({}, 1.0, TensorOptions().dtype(b.dt).device(d));
      Tensor tw = full({}, static_cast<double>(b.N), TensorOptions().dtype(loss_acc_dtype(b.dt)).device(d));
      return std::vector<Tensor>{g, x, t, Tensor(), tw};
    };
    v.push_back(std::move(bc));
  }
  return v;
}

std::vector<BenchCase> nll_loss_benches() {
  BenchCase bc;
  bc.name = "[512, 10] f32";
  bc.attrs = LossAttrs{Reduction::mean, -100, 0};
  bc.make = [](Device d) {
    return std::vector<Tensor>{uniform({512, 10}, -3, 0, TensorOptions().device(d)),
                               samples::randint({512}, 10, 7).to(d), Tensor()};
  };
  return {bc};
}

std::vector<BenchCase> mse_benches() {
  Shape s{int64_t{1} << 26};
  return {{"2^26 f32 mean", {TensorSpec{s, DType::f32, {}}, TensorSpec{s, DType::f32, {}}}, LossAttrs{Reduction::mean, -100, 0}, {}}};
}
std::vector<BenchCase> mse_backward_benches() {
  Shape s{int64_t{1} << 26};
  return {{"2^26 f32 mean",
           {TensorSpec{Shape{}, DType::f32, {}}, TensorSpec{s, DType::f32, {}}, TensorSpec{s, DType::f32, {}}},
           LossAttrs{Reduction::mean, -100, 0},
           {}}};
}

}  // namespace

void define_op_cross_entropy(OpInfo& info) {
  info.doc = "fused log-softmax + NLL over class dim 1 with weights, ignore_index, label smoothing";
  info.infer = infer_class_loss<true>;
  info.backward = cross_entropy_vjp;
  info.save = Save::both;
  info.samples = class_loss_samples<true>;
  info.cost = cross_entropy_cost;
  info.benches = cross_entropy_benches<false>;
  info.autocast = AutocastPolicy::fp32;
  register_cpu_cross_entropy(info);  // loss_cpu.cpp
}
void define_op_cross_entropy_backward(OpInfo& info) {
  info.doc = "gradient of cross_entropy: (softmax * A - smoothed weighted one-hot) * scale, one pass per row";
  info.infer = infer_class_loss_backward<true>;
  info.samples = class_loss_backward_samples<true>;
  info.cost = cross_entropy_backward_cost;
  info.benches = cross_entropy_benches<true>;
  register_cpu_cross_entropy_backward(info);  // loss_cpu.cpp
}
void define_op_nll_loss(OpInfo& info) {
  info.doc = "negative log likelihood of class indices with weights and ignore_index";
  info.infer = infer_class_loss<false>;
  info.backward = nll_loss_vjp;
  info.save = Save::both;
  info.samples = class_loss_samples<false>;
  info.cost = nll_loss_cost;
  info.benches = nll_loss_benches;
  info.autocast = AutocastPolicy::fp32;
  register_cpu_nll_loss(info);  // loss_cpu.cpp
}
void define_op_nll_loss_backward(OpInfo& info) {
  info.doc = "gradient of nll_loss: -w_t * scale at the target, 0 elsewhere";
  info.infer = infer_class_loss_backward<false>;
  info.backward = nll_loss_backward_vjp;
  info.save = Save::inputs;
  info.samples = class_loss_backward_samples<false>;
  info.cost = nll_loss_backward_cost;
  register_cpu_nll_loss_backward(info);  // loss_cpu.cpp
}
void define_op_mse_loss(OpInfo& info) {
  info.doc = "mean squared error (none, mean, sum)";
  info.infer = infer_mse;
  info.backward = mse_loss_vjp;
  info.save = Save::inputs;
  info.samples = [] { return mse_samples(false); };
  info.cost = mse_cost;
  info.benches = mse_benches;
  info.autocast = AutocastPolicy::fp32;
  register_cpu_mse_loss(info);  // loss_cpu.cpp
}
void define_op_mse_loss_backward(OpInfo& info) {
  info.doc = "gradient of mse_loss: 2 (x - y) g (/ n for mean)";
  info.infer = infer_mse_backward;
  info.backward = mse_loss_backward_vjp;
  info.save = Save::inputs;
  info.samples = [] { return mse_samples(true); };
  info.cost = mse_cost;
  info.benches = mse_backward_benches;
  register_cpu_mse_loss_backward(info);  // loss_cpu.cpp
}

// ---- functional API ----

namespace {
LossAttrs loss_attrs(const char* op, const CrossEntropyOptions& o) {
  const Reduction r = o.reduction;
  check_reduction(op, r);
  EMBER_CHECK(std::isfinite(o.label_smoothing) && o.label_smoothing >= 0 && o.label_smoothing <= 1, op,
              ": label_smoothing must be in [0, 1], got ", o.label_smoothing);
  return LossAttrs{r, o.ignore_index, o.label_smoothing};
}
Tensor class_weight(const Tensor& w, const Tensor& x) { return w.defined() ? to_dtype(w, x.dtype()) : w; }
}  // namespace

Tensor cross_entropy(const Tensor& logits, const Tensor& target, const CrossEntropyOptions& o) {
  EMBER_CHECK(logits.defined() && target.defined(), "cross_entropy: logits and target must be defined tensors");
  LossAttrs a = loss_attrs("cross_entropy", o);
  Tensor x = promote_to_float(logits);
  return call(OpId::cross_entropy, {x, target, class_weight(o.weight, x)}, a)[0];
}

Tensor nll_loss(const Tensor& log_probs, const Tensor& target, const CrossEntropyOptions& o) {
  EMBER_CHECK(log_probs.defined() && target.defined(), "nll_loss: log_probs and target must be defined tensors");
  EMBER_CHECK(o.label_smoothing == 0, "nll_loss: label_smoothing must be 0 (got ", o.label_smoothing,
              "); cross_entropy supports it");
  LossAttrs a = loss_attrs("nll_loss", o);
  Tensor x = promote_to_float(log_probs);
  return call(OpId::nll_loss, {x, target, class_weight(o.weight, x)}, a)[0];
}

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  EMBER_CHECK(input.defined() && target.defined(), "mse_loss: input and target must be defined tensors");
  const Reduction r = reduction;
  check_reduction("mse_loss", r);
  DType dt = promote_types(input.dtype(), target.dtype());
  if (!is_floating(dt)) dt = kDefaultFloat;
  Tensor x = to_dtype(input, dt), y = to_dtype(target, dt);
  if (x.shape() != y.shape()) {  // PyTorch broadcasts (with a warning); so do we, silently
    Shape s = broadcast_shapes(x.shape(), y.shape());
    x = x.expand(s);
    y = y.expand(s);
  }
  return call1(OpId::mse_loss, {x, y}, LossAttrs{r, -100, 0});
}

}  // namespace ember
