// Losses: the op definitions: inference, gradients, cost and the functional API.
// Formulas and the exact PyTorch semantics (weights, ignore_index, label smoothing, total_weight)
// are in loss.h. The CPU references are in loss_cpu.cpp, the CUDA kernels in loss.cu.
#include "kernels/ops/loss.h"

#include <array>
#include <cmath>

#include "core/autocast.h"
#include "core/autograd/node.h"
#include "kernels/functional.h"
#include "kernels/ops/dtype_promotion.h"
#include "kernels/ops/softmax.h"
#include "kernels/registry.h"

namespace ember {

const char* reduction_name(Reduction r) {
  switch (r) {
    case Reduction::none: return "none";
    case Reduction::mean: return "mean";
    case Reduction::sum: return "sum";
  }
  return "?";
}

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

// (input, target, weight) of op `op` -> (loss, total_weight).
template <bool kCE>
std::vector<TensorSpec> infer_class_loss_of(const char* op, std::span<const Tensor> in, const Attrs& a) {
  const LossAttrs& la = a.get<LossAttrs>();
  check_reduction(op, la.reduction);
  EMBER_CHECK(la.label_smoothing >= 0 && la.label_smoothing <= 1, op, ": label_smoothing must be in [0, 1], got ",
              la.label_smoothing);
  EMBER_CHECK(kCE || la.label_smoothing == 0, "nll_loss: label_smoothing is not supported (got ", la.label_smoothing,
              "); use cross_entropy");
  class_loss_geometry(op, in[0], in[1], in[2]);
  return class_loss_outputs(in[0], in[1], la.reduction);
}

template <bool kCE>
std::vector<TensorSpec> infer_class_loss(std::span<const Tensor> in, const Attrs& a) {
  const char* op = kCE ? "cross_entropy" : "nll_loss";
  EMBER_CHECK(in.size() == 3, op, ": expects (input, target, weight)");
  return infer_class_loss_of<kCE>(op, in, a);
}

// (input, target, weight, grad) -> (loss, total_weight, d input).
std::vector<TensorSpec> infer_cross_entropy_with_grad(std::span<const Tensor> in, const Attrs& a) {
  const char* op = "cross_entropy_with_grad";
  EMBER_CHECK(in.size() == 4, op, ": expects (input, target, weight, grad)");
  const Tensor &x = in[0], &w = in[2], &g = in[3];
  const bool f32_loss = a.get<LossAttrs>().f32_loss != 0;
  DType loss_dtype = x.dtype();
  std::vector<TensorSpec> out;
  if (f32_loss) {  // Note [the loss reads the logits as they are]
    EMBER_CHECK(is_reduced_float(x.dtype()), op, ": f32_loss takes f16 or bf16 logits, got ", x.describe());
    const std::array<Tensor, 3> as_f32{x, in[1], Tensor()};  // the weight is checked below, as f32
    out = infer_class_loss_of<true>(op, as_f32, a);
    const int64_t C = class_loss_geometry(op, x, in[1], Tensor()).C;
    if (w.defined())
      EMBER_CHECK(w.dim() == 1 && w.shape()[0] == C && w.dtype() == DType::f32, op,
                  ": with f32_loss the weight must be f32 [", C, "], got ", w.describe());
    loss_dtype = out[0].dtype = DType::f32;
  } else {
    out = infer_class_loss_of<true>(op, in.first(3), a);
  }
  EMBER_CHECK(g.defined() && g.shape() == out[0].shape && g.dtype() == loss_dtype && g.device() == x.device(), op,
              ": grad (the gradient the loss's backward will get) must be ", loss_dtype, out[0].shape, " on ",
              x.device(), " for reduction ", reduction_name(a.get<LossAttrs>().reduction), ", got ",
              g.defined() ? g.describe() : std::string("undefined"));
  out.push_back({x.shape(), x.dtype(), {}});
  return out;
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
    dx = call1(OpId::cross_entropy_backward, {ctx.grad(0), ctx.inputs[0], ctx.inputs[1], ctx.inputs[2], ctx.outputs[1]},
               *ctx.attrs);
  return {dx, Tensor(), Tensor()};  // no gradient for targets or class weights
}

// The forward computed dx for the gradient `grad` (input 3); when that very tensor arrives (the
// backward() the caller announced), dx is the answer. The AccumulateGrad of a leaf copies it, since
// this node still holds it. Any other gradient gets cross_entropy_backward, with f32_loss on the
// logits converted to f32 and dx rounded back to their dtype (as the loss computed it).
std::vector<Tensor> cross_entropy_with_grad_vjp(const BackwardCtx& ctx) {
  Tensor dx;
  if (ctx.needs_grad(0)) {
    const Tensor g = ctx.grad(0), &announced = ctx.inputs[3], &x = ctx.inputs[0];
    const bool same = g.defined() && g.data_ptr() == announced.data_ptr() && g.dtype() == announced.dtype() &&
                      g.shape() == announced.shape() && g.strides() == announced.strides() &&
                      g.device() == announced.device();
    LossAttrs la = ctx.attr<LossAttrs>();
    const bool f32_loss = la.f32_loss != 0;
    la.f32_loss = 0;
    if (same) {
      dx = ctx.outputs[2];
    } else {
      dx = call1(OpId::cross_entropy_backward,
                 {g, f32_loss ? to_dtype(x, DType::f32) : x, ctx.inputs[1], ctx.inputs[2], ctx.outputs[1]}, la);
      if (f32_loss) dx = to_dtype(dx, x.dtype());
    }
  }
  return {dx, Tensor(), Tensor(), Tensor()};  // none for targets, class weights or the announced grad
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
      Tensor s = call(OpId::nll_loss, {ctx.grad(0), ctx.inputs[2], ctx.inputs[3]},
                      LossAttrs{Reduction::sum, a.ignore_index, 0})[0];
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

// ---- cost ----

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
// cross_entropy_with_grad: the forward's read of the logits and the backward's write of dx (its
// second read of each row is an L1/L2 hit in the one-block kernel).
Cost cross_entropy_with_grad_cost(const KernelCall& c) {
  Cost k = io_cost(c);
  k.flops = 10.0 * static_cast<double>(c.in[0].numel());
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

}  // namespace

// Note [the loss reads the logits as they are]: under autocast the losses run in f32 (their fp32
// policy), so a step in bf16 cast its logits to f32 before the loss and the logits' gradient back
// after it: two launches of the dozen or so in mnist_train's MLP step (one mlp op each way). With
// f32_loss, which cross_entropy_with_grad sets under autocast for f16/bf16 logits, the op takes the
// logits as they are. On CUDA the one-block kernel of the MNIST-sized batches converts each logit
// as it loads it and rounds dx as it stores it; the CPU and the larger batches run the op's f32
// kernels on a converted copy (cross_entropy_with_grad_in_f32). The values are the f32 op's on the
// same logits (exact in f32), dx rounded once, as by the cast after it; the class weights stay f32
// (under the policy they went through the logits' dtype and back). f64 or f32 logits, and an
// f16/bf16 gradient arriving in the backward, take the usual ways.
void cross_entropy_with_grad_in_f32(const KernelCall& c, KernelFn f32_kernel) {
  autograd::NoGradGuard ng;
  LossAttrs la = c.attr<LossAttrs>();
  la.f32_loss = 0;
  const Attrs attrs = la;
  const Tensor& x = c.in[0];
  const std::array<Tensor, 4> in{to_dtype(x, DType::f32), c.in[1], c.in[2], c.in[3]};
  std::array<Tensor, 3> out{c.out[0], c.out[1], empty(x.shape(), TensorOptions(DType::f32).device(x.device()))};
  f32_kernel(KernelCall{c.op, in, out, attrs});
  c.out[2].copy_(out[2]);
}

namespace {

// Every loss op and gradient: its CPU kernel is in loss_cpu.cpp, its CUDA ones in loss.cu. The
// losses run in fp32 under autocast (autocast = fp32); their gradients keep the dtype they get.
void define_loss(OpInfo& info, const char* doc, InferFn infer, BackwardFn backward, Save save, CostFn cost,
                 AutocastPolicy autocast, void (*register_cpu)(OpInfo&)) {
  info.doc = doc;
  info.infer = infer;
  info.backward = backward;
  info.save = save;
  info.cost = cost;
  info.autocast = autocast;
  register_cpu(info);
}

}  // namespace

void define_op_cross_entropy(OpInfo& info) {
  define_loss(info, "fused log-softmax + NLL over class dim 1 with weights, ignore_index, label smoothing",
              infer_class_loss<true>, cross_entropy_vjp, Save::both, cross_entropy_cost, AutocastPolicy::fp32,
              register_cpu_cross_entropy);
}
void define_op_cross_entropy_backward(OpInfo& info) {
  define_loss(info, "gradient of cross_entropy: (softmax * A - smoothed weighted one-hot) * scale, one pass per row",
              infer_class_loss_backward<true>, nullptr, Save::nothing, cross_entropy_backward_cost,
              AutocastPolicy::none, register_cpu_cross_entropy_backward);
}
void define_op_cross_entropy_with_grad(OpInfo& info) {
  define_loss(info, "cross_entropy and, from the same pass, its backward for an announced gradient (the loss last)",
              infer_cross_entropy_with_grad, cross_entropy_with_grad_vjp, Save::both, cross_entropy_with_grad_cost,
              AutocastPolicy::fp32, register_cpu_cross_entropy_with_grad);
}
void define_op_nll_loss(OpInfo& info) {
  define_loss(info, "negative log likelihood of class indices with weights and ignore_index", infer_class_loss<false>,
              nll_loss_vjp, Save::both, nll_loss_cost, AutocastPolicy::fp32, register_cpu_nll_loss);
}
void define_op_nll_loss_backward(OpInfo& info) {
  define_loss(info, "gradient of nll_loss: -w_t * scale at the target, 0 elsewhere", infer_class_loss_backward<false>,
              nll_loss_backward_vjp, Save::inputs, nll_loss_backward_cost, AutocastPolicy::none,
              register_cpu_nll_loss_backward);
}
void define_op_mse_loss(OpInfo& info) {
  define_loss(info, "mean squared error (none, mean, sum)", infer_mse, mse_loss_vjp, Save::inputs, mse_cost,
              AutocastPolicy::fp32, register_cpu_mse_loss);
}
void define_op_mse_loss_backward(OpInfo& info) {
  define_loss(info, "gradient of mse_loss: 2 (x - y) g (/ n for mean)", infer_mse_backward, mse_loss_backward_vjp,
              Save::inputs, mse_cost, AutocastPolicy::none, register_cpu_mse_loss_backward);
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

Tensor cross_entropy_with_grad(const Tensor& logits, const Tensor& target, const Tensor& grad,
                               const CrossEntropyOptions& o) {
  EMBER_CHECK(logits.defined() && target.defined() && grad.defined(),
              "cross_entropy_with_grad: logits, target and grad must be defined tensors");
  EMBER_CHECK(!grad.requires_grad(), "cross_entropy_with_grad: grad ", grad.describe(),
              " requires grad; the announced gradient is a constant of the backward (detach it)");
  if (!autograd::grad_mode_enabled() || !logits.requires_grad()) return cross_entropy(logits, target, o);
  LossAttrs a = loss_attrs("cross_entropy_with_grad", o);
  Tensor x = promote_to_float(logits);
  if (autocast::is_enabled(x.device().type) && is_reduced_float(x.dtype())) {
    // what the fp32 policy would hand the op, but x (Note [the loss reads the logits as they are])
    a.f32_loss = 1;
    const Tensor w = o.weight.defined() ? to_dtype(o.weight, DType::f32) : Tensor();
    const Tensor g = is_reduced_float(grad.dtype()) ? to_dtype(grad, DType::f32) : grad;
    autocast::Suspend as_given;
    return call(OpId::cross_entropy_with_grad, {x, target, w, g}, a)[0];
  }
  return call(OpId::cross_entropy_with_grad, {x, target, class_weight(o.weight, x), grad}, a)[0];
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
