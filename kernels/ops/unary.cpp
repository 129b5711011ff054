// Elementwise unary ops: shape inference, CPU kernels, backward, functional API.
#include "kernels/ops/unary.h"

#include "kernels/common/cpu_loops.h"
#include "kernels/functional.h"
#include "kernels/ops/dtype_promotion.h"
#include "kernels/registry.h"

namespace ember {

namespace {

template <class Op>
std::vector<TensorSpec> infer_unary(std::span<const Tensor> in, const Attrs&) {
  EMBER_CHECK(in.size() == 1, Op::kName, ": expects one input, got ", in.size());
  const Tensor& x = in[0];
  EMBER_CHECK(x.dtype() != DType::boolean, Op::kName, ": bool tensors are not supported (got ", x.describe(), ")");
  EMBER_CHECK(!Op::kFloatOnly || is_floating(x.dtype()), Op::kName, ": expects a floating tensor, got ", x.describe(),
              " (the functional API promotes integer tensors to f32)");
  return {{x.shape(), x.dtype(), elementwise_out_strides(x.shape(), {&x})}};
}

template <class Op>
std::vector<TensorSpec> infer_unary_backward(std::span<const Tensor> in, const Attrs&) {
  EMBER_CHECK(in.size() == 2, Op::kName, "_backward: expects (grad, x), got ", in.size(), " inputs");
  const Tensor &g = in[0], &x = in[1];
  EMBER_CHECK(is_floating(x.dtype()), Op::kName, "_backward: expects floating tensors, got ", x.describe());
  EMBER_CHECK(g.shape() == x.shape() && g.dtype() == x.dtype(), Op::kName, "_backward: grad ", g.describe(),
              " does not match x ", x.describe());
  return {{x.shape(), x.dtype(), elementwise_out_strides(x.shape(), {&x, &g})}};
}

template <class Op>
void cpu_unary(const KernelCall& c) {
  const Tensor& x = c.in[0];
  Tensor& y = c.out[0];
  ElementwiseLayout L = make_layout({&y, &x});
  auto run = [&]<class scalar_t>() { cpu_map<scalar_t, scalar_t>(L, {&y, &x}, unary::Fwd<Op, scalar_t>{}); };
  if constexpr (Op::kFloatOnly) {
    EMBER_DISPATCH_FLOAT(x.dtype(), Op::kName, [&] { run.template operator()<scalar_t>(); });
  } else {
    EMBER_DISPATCH_NUMERIC(x.dtype(), Op::kName, [&] { run.template operator()<scalar_t>(); });
  }
}

template <class Op>
void cpu_unary_backward(const KernelCall& c) {
  const Tensor &g = c.in[0], &x = c.in[1];
  Tensor& dx = c.out[0];
  ElementwiseLayout L = make_layout({&dx, &g, &x});
  EMBER_DISPATCH_FLOAT(x.dtype(), Op::kName, [&] {
    cpu_map<scalar_t, scalar_t, scalar_t>(L, {&dx, &g, &x}, unary::Bwd<Op, scalar_t>{});
  });
}

template <OpId kBwd>
std::vector<Tensor> unary_vjp(const BackwardCtx& ctx) {
  return {call1(kBwd, {ctx.grad(0), ctx.inputs[0]})};
}

Cost unary_cost(const KernelCall& c) {
  double n = static_cast<double>(c.out[0].numel());
  double bytes = 0;
  for (const Tensor& t : c.in) bytes += static_cast<double>(t.nbytes());
  return {bytes + static_cast<double>(c.out[0].nbytes()), n};
}

template <class Op, OpId kBwd>
void define_unary(OpInfo& info) {
  info.doc = "elementwise " + std::string(Op::kName);
  info.infer = infer_unary<Op>;
  info.backward = unary_vjp<kBwd>;
  info.save = Save::inputs;
  info.cost = unary_cost;
  info.contiguous_inputs = false;
  info.autocast = Op::kAutocast;
  info.add_variant({.name = "cpu",
                    .device = DeviceType::cpu,
                    .fn = cpu_unary<Op>,
                    .dtypes = Op::kFloatOnly ? kFloatTypes : kNumericTypes,
                    .note = "generic CPU elementwise loop"});
}

template <class Op>
void define_unary_backward(OpInfo& info) {
  info.doc = "fused gradient of " + std::string(Op::kName) + ": g * f'(x)";
  info.infer = infer_unary_backward<Op>;
  info.cost = unary_cost;
  info.contiguous_inputs = false;
  info.add_variant({.name = "cpu",
                    .device = DeviceType::cpu,
                    .fn = cpu_unary_backward<Op>,
                    .dtypes = kFloatTypes,
                    .note = "generic CPU elementwise loop"});
}

}  // namespace

// Per ops.def line: the op's definitions and its functional API, `name(x)` and `name_backward(grad, x)`
// (kernels/functional.h declares both from the same line).
#define EMBER_UNARY(name, Functor)                                                                                   \
  void define_op_##name(OpInfo& info) { define_unary<unary::Functor, OpId::name##_backward>(info); }                 \
  void define_op_##name##_backward(OpInfo& info) { define_unary_backward<unary::Functor>(info); }                    \
  Tensor name(const Tensor& x) { return call1(OpId::name, {unary::Functor::kFloatOnly ? promote_to_float(x) : x}); } \
  Tensor name##_backward(const Tensor& grad, const Tensor& x) { return call1(OpId::name##_backward, {grad, x}); }
#include "kernels/ops.def"

}  // namespace ember
