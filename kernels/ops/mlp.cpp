// mlp: a stack of L linear layers (1 <= L <= kMlpMaxLayers), each followed by relu or nothing, as
// one op: what nn::Sequential runs for its Linear/ReLU stacks (Note [fused MLP] in mlp.cu).
//
// Inputs: x [..., K_1], then per layer W_l [N_l, K_l] and b_l [N_l] or absent (K_{l+1} = N_l).
// Outputs: y [..., N_L], then the hidden layers' outputs h_1 .. h_{L-1} [..., N_l], which the
// backward needs (the masks, and the inputs of the weight gradients) and the layers would have
// kept anyway. Each layer is linear(h, W, b, relu or none): rounded to the dtype once per layer,
// as the layers one by one round.
//
// mlp_backward: inputs g [..., N_L]; the activations x, h_1 .. h_{L-1}, y; the weights; then the
// hidden outputs' own gradients, absent where none flowed (the usual case). Outputs: dx (x's
// shape, or [0] without input_grad), then dW_l and db_l per layer. From the top layer down:
// dz_l = g_l relu'(h_l), dW_l = dz_l^T h_{l-1}, db_l = sum(dz_l), g_{l-1} = dz_l W_l (+ h_{l-1}'s
// own gradient), each rounded to the dtype as linear's backward ops round it.
//
// Variants: "cpu" (kReference) runs linear's and its backward ops' reference kernels layer by
// layer; "composite" (both devices) runs the layers' ops through the registry, which is what
// Sequential ran before it fused the stack (the CPU's default); CUDA's "fused" (mlp.cu) runs the
// stack in one launch each way.
#include "kernels/ops/mlp.h"

#include "kernels/functional.h"
#include "kernels/ops/linear.h"
#include "kernels/registry.h"

namespace ember {

namespace {

// How the layer-by-layer variants run each layer's op.
enum class Layers { reference, registry, vendor };

// Runs op `id` into `out` as `mode` says: its reference kernel (variant 0), through the registry,
// or on the variant the "vendor" preference picks (`--backends '*=vendor'`).
void run_layer_op(Layers mode, OpId id, std::vector<Tensor> in, std::vector<Tensor> out, const Attrs& attrs) {
  const OpInfo& info = op_info(id);
  if (mode == Layers::registry) {
    call_into(id, std::move(in), std::move(out), attrs);
  } else if (mode == Layers::reference) {
    call_variant_into(info.variants.at(0), id, std::move(in), std::move(out), attrs);
  } else {
    const KernelCall probe{id, in, {}, attrs};
    const Variant& v = select_variant(info, probe, in[0].device().type, "vendor");
    call_variant_into(v, id, std::move(in), std::move(out), attrs);
  }
}

// The checked layer count of an mlp or mlp_backward call.
int checked_layers(const char* op, const Attrs& attrs) {
  const MlpAttrs& a = attrs.get<MlpAttrs>();
  EMBER_CHECK(a.layers >= 1 && a.layers <= kMlpMaxLayers, op, ": layers must be 1 to ", kMlpMaxLayers, ", got ",
              a.layers);
  EMBER_CHECK(a.relu_mask >= 0 && a.relu_mask < (int64_t{1} << a.layers), op, ": relu_mask ", a.relu_mask,
              " names a layer past the ", a.layers, " there are");
  return static_cast<int>(a.layers);
}

// x's shape with the last dim n.
Shape with_last(const Tensor& x, int64_t n) {
  Shape s = x.shape();
  s[s.size() - 1] = n;
  return s;
}

// Checks the weights (at in[first + l * step]) against x and each other: W_l [N_l, K_l] with K_1
// = x's features and K_{l+1} = N_l, all of x's dtype.
void check_weights(const char* op, std::span<const Tensor> in, const Tensor& x, int L, size_t first, size_t step) {
  int64_t k = x.shape().back();
  for (int l = 0; l < L; ++l) {
    const Tensor& w = in[first + static_cast<size_t>(l) * step];
    EMBER_CHECK(w.defined() && w.dim() == 2, op, ": layer ", l, "'s weight must be [out_features, in_features], got ",
                w.defined() ? w.describe() : std::string("none"));
    EMBER_CHECK(w.shape()[1] == k, op, ": layer ", l, "'s weight ", w.shape(), " expects ", w.shape()[1],
                " inputs but ", l == 0 ? "x gives " : "the layer before gives ", k);
    EMBER_CHECK(w.dtype() == x.dtype(), op, ": layer ", l, "'s weight ", w.describe(), " must have x's dtype ",
                x.dtype());
    k = w.shape()[0];
  }
}

std::vector<TensorSpec> infer_mlp(std::span<const Tensor> in, const Attrs& attrs) {
  const int L = checked_layers("mlp", attrs);
  EMBER_CHECK(in.size() == static_cast<size_t>(2 * L + 1), "mlp: expects x and a weight and a bias per layer, ",
              2 * L + 1, " inputs for ", L, " layers; got ", in.size());
  const Tensor& x = in[0];
  EMBER_CHECK(x.defined() && x.dim() >= 1 && is_floating(x.dtype()),
              "mlp: x must be floating with at least one dim, got ", x.defined() ? x.describe() : std::string("none"));
  check_weights("mlp", in, x, L, 1, 2);
  std::vector<TensorSpec> out;
  for (int l = 0; l < L; ++l) {
    const Tensor &w = in[static_cast<size_t>(1 + 2 * l)], &b = in[static_cast<size_t>(2 + 2 * l)];
    if (b.defined())
      EMBER_CHECK(b.dim() == 1 && b.shape()[0] == w.shape()[0] && b.dtype() == x.dtype(), "mlp: layer ", l,
                  "'s bias must be [", w.shape()[0], "] of x's dtype ", x.dtype(), ", got ", b.describe());
  }
  out.push_back({with_last(x, in[static_cast<size_t>(2 * L - 1)].shape()[0]), x.dtype(), {}});
  for (int l = 0; l + 1 < L; ++l)
    out.push_back({with_last(x, in[static_cast<size_t>(1 + 2 * l)].shape()[0]), x.dtype(), {}});
  return out;
}

// The output of layer l: y for the top one, else h_{l+1}.
const Tensor& layer_output(const KernelCall& c, int l, int L) { return l == L - 1 ? c.out[0] : c.out[1 + l]; }

// Runs the layers one by one.
void mlp_layers(const KernelCall& c, Layers mode) {
  const MlpAttrs& a = c.attr<MlpAttrs>();
  const int L = static_cast<int>(a.layers);
  Tensor h = c.in[0];
  for (int l = 0; l < L; ++l) {
    const LinearAttrs la{static_cast<int64_t>(a.relu_at(l) ? Activation::relu : Activation::none)};
    const Tensor& out = layer_output(c, l, L);
    run_layer_op(mode, OpId::linear, {h, c.in[1 + 2 * l], c.in[2 + 2 * l]}, {out}, la);
    h = out;
  }
}

void mlp_cpu(const KernelCall& c) { mlp_layers(c, Layers::reference); }

}  // namespace

void mlp_composite(const KernelCall& c) { mlp_layers(c, Layers::registry); }
void mlp_vendor(const KernelCall& c) { mlp_layers(c, Layers::vendor); }

namespace {

std::vector<Tensor> mlp_vjp(const BackwardCtx& ctx) {
  const MlpAttrs& a = ctx.attr<MlpAttrs>();
  const int L = static_cast<int>(a.layers);
  std::vector<Tensor> in;
  in.reserve(static_cast<size_t>(3 * L + 1));
  in.push_back(ctx.grad(0));
  in.push_back(ctx.inputs[0]);
  for (int l = 1; l < L; ++l) in.push_back(ctx.outputs[static_cast<size_t>(l)]);
  in.push_back(ctx.outputs[0]);
  for (int l = 0; l < L; ++l) in.push_back(ctx.inputs[static_cast<size_t>(1 + 2 * l)]);
  for (int l = 1; l < L; ++l) {
    const size_t i = static_cast<size_t>(l);
    in.push_back(i < ctx.grads.size() ? ctx.grads[i] : Tensor());
  }
  MlpAttrs ba = a;
  ba.input_grad = ctx.needs_grad(0) ? 1 : 0;
  std::vector<Tensor> r = call(OpId::mlp_backward, std::move(in), ba);
  std::vector<Tensor> out(static_cast<size_t>(2 * L + 1));
  if (ctx.needs_grad(0)) out[0] = r[0];
  for (size_t i = 1; i < out.size(); ++i)
    if (ctx.needs_grad(i) && ctx.inputs[i].defined()) out[i] = r[i];
  return out;
}

Cost mlp_cost(const KernelCall& c) {
  const int L = static_cast<int>(c.attr<MlpAttrs>().layers);
  const Tensor& x = c.in[0];
  const double rows = static_cast<double>(linear_rows(x));
  double bytes = static_cast<double>(x.nbytes()), flops = 0;
  for (const Tensor& t : c.in.subspan(1))
    if (t.defined()) bytes += static_cast<double>(t.nbytes());
  for (const Tensor& t : c.out) bytes += static_cast<double>(t.nbytes());
  for (int l = 0; l < L; ++l) {
    const Tensor& w = c.in[static_cast<size_t>(1 + 2 * l)];
    flops += 2.0 * rows * static_cast<double>(w.shape()[0]) * static_cast<double>(w.shape()[1]);
  }
  return {bytes, flops};
}

// ---- mlp_backward ----

// Its inputs by role (L layers): g; act(0) = x, act(1..L-1) = h, act(L) = y; the weights; the
// hidden outputs' gradients.
struct BackwardInputs {
  std::span<const Tensor> in;
  int L;
  const Tensor& g() const { return in[0]; }
  const Tensor& act(int i) const { return in[static_cast<size_t>(1 + i)]; }
  const Tensor& weight(int l) const { return in[static_cast<size_t>(2 + L + l)]; }
  const Tensor& hidden_grad(int i) const { return in[static_cast<size_t>(1 + 2 * L + i)]; }  // of act(i), 1 <= i < L
};

std::vector<TensorSpec> infer_mlp_backward(std::span<const Tensor> in, const Attrs& attrs) {
  const int L = checked_layers("mlp_backward", attrs);
  EMBER_CHECK(in.size() == static_cast<size_t>(3 * L + 1), "mlp_backward: expects g, the ", L + 1, " activations, the ",
              L, " weights and ", L - 1, " hidden gradients: ", 3 * L + 1, " inputs; got ", in.size());
  const BackwardInputs b{in, L};
  const Tensor& x = b.act(0);
  EMBER_CHECK(x.defined() && x.dim() >= 1 && is_floating(x.dtype()),
              "mlp_backward: x must be floating with at least one dim, got ",
              x.defined() ? x.describe() : std::string("none"));
  check_weights("mlp_backward", in, x, L, static_cast<size_t>(2 + L), 1);
  for (int i = 1; i <= L; ++i) {
    const Shape want = with_last(x, b.weight(i - 1).shape()[0]);
    const Tensor& h = b.act(i);
    EMBER_CHECK(h.defined() && h.shape() == want && h.dtype() == x.dtype(), "mlp_backward: activation ", i, " must be ",
                want, " ", x.dtype(), ", got ", h.defined() ? h.describe() : std::string("none"));
    const Tensor& gi = i == L ? b.g() : b.hidden_grad(i);
    if (i == L || gi.defined())
      EMBER_CHECK(gi.defined() && gi.shape() == want && gi.dtype() == x.dtype(), "mlp_backward: the gradient of ",
                  i == L ? std::string("y") : str("activation ", i), " must be ", want, " ", x.dtype(), ", got ",
                  gi.defined() ? gi.describe() : std::string("none"));
  }
  std::vector<TensorSpec> out;
  out.push_back({attrs.get<MlpAttrs>().input_grad != 0 ? x.shape() : Shape{0}, x.dtype(), {}});
  for (int l = 0; l < L; ++l) {
    out.push_back({b.weight(l).shape(), x.dtype(), {}});
    out.push_back({Shape{b.weight(l).shape()[0]}, x.dtype(), {}});
  }
  return out;
}

// From the top layer down, linear's backward ops; through the registry with linear's rule for
// computing dz once (linear_masks_on_load).
void mlp_backward_layers(const KernelCall& c, Layers mode) {
  const MlpAttrs& a = c.attr<MlpAttrs>();
  const int L = static_cast<int>(a.layers);
  const BackwardInputs b{c.in, L};
  Tensor g = b.g();
  for (int l = L - 1; l >= 0; --l) {
    if (l + 1 < L && b.hidden_grad(l + 1).defined()) g = add(g, b.hidden_grad(l + 1));
    const Tensor &in = b.act(l), &out = b.act(l + 1), &w = b.weight(l);
    const bool want_dx = l > 0 || a.input_grad != 0;
    Activation act = a.relu_at(l) ? Activation::relu : Activation::none;
    Tensor gl = g;
    if (mode == Layers::registry && act == Activation::relu && want_dx && !linear_masks_on_load(g, w.shape()[1])) {
      gl = relu_backward(g, out);
      act = Activation::none;
    }
    const LinearAttrs la{static_cast<int64_t>(act)};
    run_layer_op(mode, OpId::linear_backward_weight, {gl, out, in},
                 {c.out[static_cast<size_t>(1 + 2 * l)], c.out[static_cast<size_t>(2 + 2 * l)]}, la);
    if (!want_dx) break;
    Tensor dx = l == 0 ? c.out[0] : empty(in.shape(), TensorOptions(g.dtype()).device(g.device()));
    run_layer_op(mode, OpId::linear_backward_input, {gl, out, w}, {dx}, la);
    g = dx;
  }
}

void mlp_backward_cpu(const KernelCall& c) { mlp_backward_layers(c, Layers::reference); }

Cost mlp_backward_cost(const KernelCall& c) {
  const MlpAttrs& a = c.attr<MlpAttrs>();
  const int L = static_cast<int>(a.layers);
  const BackwardInputs b{c.in, L};
  const double rows = static_cast<double>(linear_rows(b.g()));
  double bytes = 0, flops = 0;
  for (const Tensor& t : c.in)
    if (t.defined()) bytes += static_cast<double>(t.nbytes());
  for (const Tensor& t : c.out) bytes += static_cast<double>(t.nbytes());
  for (int l = 0; l < L; ++l) {
    const double nk = static_cast<double>(b.weight(l).shape()[0]) * static_cast<double>(b.weight(l).shape()[1]);
    flops += 2.0 * rows * nk * (l > 0 || a.input_grad != 0 ? 2.0 : 1.0);
  }
  return {bytes, flops};
}

}  // namespace

void mlp_backward_composite(const KernelCall& c) { mlp_backward_layers(c, Layers::registry); }
void mlp_backward_vendor(const KernelCall& c) { mlp_backward_layers(c, Layers::vendor); }

void define_op_mlp(OpInfo& info) {
  info.doc = "a stack of linear layers with relu or none after each, as one op (Sequential's Linear/ReLU stacks)";
  info.infer = infer_mlp;
  info.backward = mlp_vjp;
  info.save = Save::both;
  info.cost = mlp_cost;
  info.autocast = AutocastPolicy::lower;
  info.add_variant({.name = "cpu",
                    .device = DeviceType::cpu,
                    .fn = mlp_cpu,
                    .dtypes = kFloatTypes,
                    .flags = kReference,
                    .note = "reference: linear's reference kernel layer by layer"});
  info.add_variant({.name = "composite",
                    .device = DeviceType::cpu,
                    .fn = mlp_composite,
                    .dtypes = kFloatTypes,
                    .note = "linear layer by layer through the registry"});
}

void define_op_mlp_backward(OpInfo& info) {
  info.doc = "dx and every layer's (dW, db) of an mlp from the top layer down";
  info.infer = infer_mlp_backward;
  info.cost = mlp_backward_cost;
  info.add_variant({.name = "cpu",
                    .device = DeviceType::cpu,
                    .fn = mlp_backward_cpu,
                    .dtypes = kFloatTypes,
                    .flags = kReference,
                    .note = "reference: linear's backward reference kernels layer by layer"});
  info.add_variant({.name = "composite",
                    .device = DeviceType::cpu,
                    .fn = mlp_backward_composite,
                    .dtypes = kFloatTypes,
                    .note = "linear_backward_weight and _input layer by layer through the registry"});
}

Tensor mlp(const Tensor& x, std::span<const Tensor> weights, std::span<const Tensor> biases, uint64_t relu_mask) {
  EMBER_CHECK(weights.size() == biases.size(), "mlp: ", weights.size(), " weights but ", biases.size(),
              " biases (an absent bias is an undefined tensor)");
  std::vector<Tensor> in{x};
  for (size_t l = 0; l < weights.size(); ++l) {
    in.push_back(weights[l]);
    in.push_back(biases[l]);
  }
  MlpAttrs a;
  a.layers = static_cast<int64_t>(weights.size());
  a.relu_mask = static_cast<int64_t>(relu_mask);
  return call(OpId::mlp, std::move(in), a).at(0);
}

}  // namespace ember
