// Elementwise binary ops: inference, CPU kernels, composite backward, functional API.
#include "kernels/ops/binary.h"

#include <cmath>

#include "kernels/common/cpu_loops.h"
#include "kernels/functional.h"
#include "kernels/ops/dtype_promotion.h"
#include "kernels/registry.h"

namespace ember {

namespace {

template <class Op>
void check_binary_dtype(DType t) {
  EMBER_CHECK(t != DType::boolean, Op::kName, ": bool tensors are not supported; cast to an integer or float dtype");
  if constexpr (std::is_same_v<Op, binary::Div>)
    EMBER_CHECK(is_floating(t), "div: the kernel expects floating inputs (the functional API promotes integers)");
}

template <class Op>
std::vector<TensorSpec> infer_binary(std::span<const Tensor> in, const Attrs&) {
  EMBER_CHECK(in.size() == 2, Op::kName, ": expects two inputs");
  const Tensor &a = in[0], &b = in[1];
  EMBER_CHECK(a.dtype() == b.dtype(), Op::kName, ": inputs must have the same dtype by now, got ", a.describe(),
              " and ", b.describe(), " (the functional API promotes them)");
  check_binary_dtype<Op>(a.dtype());
  Shape s = broadcast_shapes(a.shape(), b.shape());
  return {{s, Op::kCompare ? DType::boolean : a.dtype(), elementwise_out_strides(s, {&a, &b})}};
}

template <class Op>
std::vector<TensorSpec> infer_binary_scalar(std::span<const Tensor> in, const Attrs&) {
  EMBER_CHECK(in.size() == 1, Op::kName, "_scalar: expects one tensor input");
  const Tensor& a = in[0];
  check_binary_dtype<Op>(a.dtype());
  return {{a.shape(), Op::kCompare ? DType::boolean : a.dtype(), elementwise_out_strides(a.shape(), {&a})}};
}

template <class Op>
void cpu_binary(const KernelCall& c) {
  const Tensor &a = c.in[0], &b = c.in[1];
  Tensor& out = c.out[0];
  ElementwiseLayout L = make_layout({&out, &a, &b});
  EMBER_DISPATCH_NUMERIC(a.dtype(), Op::kName, [&] {
    cpu_map<binary::out_t<Op, scalar_t>, scalar_t, scalar_t>(L, {&out, &a, &b}, binary::Fn<Op, scalar_t>{});
  });
}

template <class Op>
void cpu_binary_scalar(const KernelCall& c) {
  const Tensor& a = c.in[0];
  Tensor& out = c.out[0];
  double s = c.attr<ScalarAttrs>().value;
  ElementwiseLayout L = make_layout({&out, &a});
  EMBER_DISPATCH_NUMERIC(a.dtype(), Op::kName, [&] {
    cpu_map<binary::out_t<Op, scalar_t>, scalar_t>(L, {&out, &a},
                                                   binary::ScalarFn<Op, scalar_t>{static_cast<acc_t<scalar_t>>(s)});
  });
}

// ---- gradients ----

Tensor reduce_to(const Tensor& g, const autograd::OutputMeta& m) {
  return g.shape() == m.shape ? g : sum_to(g, m.shape);
}

std::vector<Tensor> add_vjp(const BackwardCtx& ctx) {
  Tensor g = ctx.grad(0);
  return {ctx.needs_grad(0) ? reduce_to(g, ctx.input_meta[0]) : Tensor(),
          ctx.needs_grad(1) ? reduce_to(g, ctx.input_meta[1]) : Tensor()};
}
std::vector<Tensor> sub_vjp(const BackwardCtx& ctx) {
  Tensor g = ctx.grad(0);
  return {ctx.needs_grad(0) ? reduce_to(g, ctx.input_meta[0]) : Tensor(),
          ctx.needs_grad(1) ? reduce_to(neg(g), ctx.input_meta[1]) : Tensor()};
}
std::vector<Tensor> mul_vjp(const BackwardCtx& ctx) {
  Tensor g = ctx.grad(0);
  const Tensor &a = ctx.inputs[0], &b = ctx.inputs[1];
  return {ctx.needs_grad(0) ? reduce_to(mul(g, b), ctx.input_meta[0]) : Tensor(),
          ctx.needs_grad(1) ? reduce_to(mul(g, a), ctx.input_meta[1]) : Tensor()};
}
std::vector<Tensor> div_vjp(const BackwardCtx& ctx) {
  Tensor g = ctx.grad(0);
  const Tensor &a = ctx.inputs[0], &b = ctx.inputs[1];
  Tensor ga, gb;
  if (ctx.needs_grad(0)) ga = reduce_to(div(g, b), ctx.input_meta[0]);
  if (ctx.needs_grad(1)) gb = reduce_to(neg(div(mul(g, a), mul(b, b))), ctx.input_meta[1]);
  return {ga, gb};
}
std::vector<Tensor> pow_vjp(const BackwardCtx& ctx) {
  Tensor g = ctx.grad(0);
  const Tensor &a = ctx.inputs[0], &b = ctx.inputs[1];
  Tensor ga, gb;
  if (ctx.needs_grad(0)) ga = reduce_to(mul(mul(g, b), pow(a, sub(b, 1.0))), ctx.input_meta[0]);
  if (ctx.needs_grad(1)) {
    Tensor t = mul(mul(g, pow(a, b)), log(a));
    gb = reduce_to(where(eq(a, 0.0), zeros_like(t), t), ctx.input_meta[1]);
  }
  return {ga, gb};
}
// Share of the gradient that goes to `a` for maximum (want_greater) or minimum: 1, 0, or 1/2 on ties.
Tensor extremum_mask(const Tensor& a, const Tensor& b, bool want_greater) {
  Tensor win = cast(want_greater ? gt(a, b) : lt(a, b), a.dtype());
  Tensor tie = cast(eq(a, b), a.dtype());
  return add(win, mul(tie, 0.5));
}
template <bool kMax>
std::vector<Tensor> extremum_vjp(const BackwardCtx& ctx) {
  Tensor g = ctx.grad(0);
  const Tensor &a = ctx.inputs[0], &b = ctx.inputs[1];
  Tensor ga, gb;
  if (ctx.needs_grad(0)) ga = reduce_to(mul(g, extremum_mask(a, b, kMax)), ctx.input_meta[0]);
  if (ctx.needs_grad(1)) gb = reduce_to(mul(g, extremum_mask(b, a, kMax)), ctx.input_meta[1]);
  return {ga, gb};
}

double scalar_of(const BackwardCtx& ctx) { return ctx.attr<ScalarAttrs>().value; }
std::vector<Tensor> add_scalar_vjp(const BackwardCtx& ctx) { return {ctx.grad(0)}; }
std::vector<Tensor> mul_scalar_vjp(const BackwardCtx& ctx) { return {mul(ctx.grad(0), scalar_of(ctx))}; }
std::vector<Tensor> div_scalar_vjp(const BackwardCtx& ctx) { return {div(ctx.grad(0), scalar_of(ctx))}; }
std::vector<Tensor> pow_scalar_vjp(const BackwardCtx& ctx) {
  double s = scalar_of(ctx);
  if (s == 0) return {zeros_like(ctx.grad(0))};
  return {mul(ctx.grad(0), mul(pow(ctx.inputs[0], s - 1), s))};
}
template <bool kMax>
std::vector<Tensor> extremum_scalar_vjp(const BackwardCtx& ctx) {
  const Tensor& a = ctx.inputs[0];
  double s = scalar_of(ctx);
  Tensor win = cast(kMax ? gt(a, s) : lt(a, s), a.dtype());
  Tensor tie = cast(eq(a, s), a.dtype());
  return {mul(ctx.grad(0), add(win, mul(tie, 0.5)))};
}

Cost binary_cost(const KernelCall& c) {
  double bytes = static_cast<double>(c.out[0].nbytes());
  for (const Tensor& t : c.in) bytes += static_cast<double>(t.nbytes());
  return {bytes, static_cast<double>(c.out[0].numel())};
}

template <class Op>
BackwardFn binary_vjp() {
  if constexpr (std::is_same_v<Op, binary::Add>) return add_vjp;
  if constexpr (std::is_same_v<Op, binary::Sub>) return sub_vjp;
  if constexpr (std::is_same_v<Op, binary::Mul>) return mul_vjp;
  if constexpr (std::is_same_v<Op, binary::Div>) return div_vjp;
  if constexpr (std::is_same_v<Op, binary::Pow>) return pow_vjp;
  if constexpr (std::is_same_v<Op, binary::Maximum>) return extremum_vjp<true>;
  if constexpr (std::is_same_v<Op, binary::Minimum>) return extremum_vjp<false>;
  return nullptr;
}
template <class Op>
BackwardFn binary_scalar_vjp() {
  if constexpr (std::is_same_v<Op, binary::Add> || std::is_same_v<Op, binary::Sub>) return add_scalar_vjp;
  if constexpr (std::is_same_v<Op, binary::Mul>) return mul_scalar_vjp;
  if constexpr (std::is_same_v<Op, binary::Div>) return div_scalar_vjp;
  if constexpr (std::is_same_v<Op, binary::Pow>) return pow_scalar_vjp;
  if constexpr (std::is_same_v<Op, binary::Maximum>) return extremum_scalar_vjp<true>;
  if constexpr (std::is_same_v<Op, binary::Minimum>) return extremum_scalar_vjp<false>;
  return nullptr;
}

template <class Op>
Save binary_save() {
  if constexpr (std::is_same_v<Op, binary::Add> || std::is_same_v<Op, binary::Sub> || Op::kCompare)
    return Save::nothing;
  return Save::inputs;
}

template <class Op>
void define_binary(OpInfo& info) {
  info.doc = std::string("elementwise ") + Op::kName + " with broadcasting";
  info.infer = infer_binary<Op>;
  info.backward = binary_vjp<Op>();
  info.save = binary_save<Op>();
  info.cost = binary_cost;
  info.contiguous_inputs = false;
  info.autocast = std::is_same_v<Op, binary::Pow> ? AutocastPolicy::fp32 : AutocastPolicy::promote;
  info.add_variant({.name = "cpu",
                    .device = DeviceType::cpu,
                    .fn = cpu_binary<Op>,
                    .dtypes = kNumericTypes,
                    .note = "generic CPU elementwise loop"});
}

template <class Op>
void define_binary_scalar(OpInfo& info) {
  info.doc = std::string("elementwise ") + Op::kName + " with a scalar";
  info.infer = infer_binary_scalar<Op>;
  info.backward = binary_scalar_vjp<Op>();
  info.save =
      (std::is_same_v<Op, binary::Pow> || std::is_same_v<Op, binary::Maximum> || std::is_same_v<Op, binary::Minimum>)
          ? Save::inputs
          : Save::nothing;
  info.cost = binary_cost;
  info.contiguous_inputs = false;
  info.autocast = std::is_same_v<Op, binary::Pow> ? AutocastPolicy::fp32 : AutocastPolicy::none;
  info.add_variant({.name = "cpu",
                    .device = DeviceType::cpu,
                    .fn = cpu_binary_scalar<Op>,
                    .dtypes = kNumericTypes,
                    .note = "generic CPU elementwise loop"});
}

// ---- promotion for the functional API ----

DType result_dtype(const Tensor& a, const Tensor& b) {
  // A 0-dim tensor does not widen a tensor of the same kind (float/float or int/int).
  bool a0 = a.dim() == 0, b0 = b.dim() == 0;
  if (a0 != b0) {
    const Tensor& big = a0 ? b : a;
    const Tensor& small = a0 ? a : b;
    if (is_floating(big.dtype()) == is_floating(small.dtype()) && big.dtype() != DType::boolean) return big.dtype();
  }
  return promote_types(a.dtype(), b.dtype());
}

template <class Op>
Tensor binary_call(OpId id, const Tensor& a, const Tensor& b) {
  DType t = result_dtype(a, b);
  if (std::is_same_v<Op, binary::Div> && !is_floating(t)) t = kDefaultFloat;
  return call1(id, {to_dtype(a, t), to_dtype(b, t)});
}

bool is_integer_value(double v) { return std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 9e15; }

template <class Op>
Tensor binary_scalar_call(OpId id, const Tensor& a, double s) {
  DType t = promote_with_scalar(a.dtype(), is_integer_value(s));
  if (std::is_same_v<Op, binary::Div> && !is_floating(t)) t = kDefaultFloat;
  if constexpr (std::is_same_v<Op, binary::Pow>) {
    EMBER_CHECK(is_floating(t) || s >= 0, "pow: integers to negative integer powers are not allowed (", a.describe(),
                " ** ", s, ")");
  }
  return call1(id, {to_dtype(a, t)}, ScalarAttrs{s});
}

}  // namespace

#define EMBER_BINARY(name, Functor)                                                                        \
  void define_op_##name(OpInfo& info) { define_binary<binary::Functor>(info); }                            \
  void define_op_##name##_scalar(OpInfo& info) { define_binary_scalar<binary::Functor>(info); }            \
  Tensor name(const Tensor& a, const Tensor& b) { return binary_call<binary::Functor>(OpId::name, a, b); } \
  Tensor name(const Tensor& a, double b) { return binary_scalar_call<binary::Functor>(OpId::name##_scalar, a, b); }
#include "kernels/ops.def"

Tensor operator-(const Tensor& x) { return neg(x); }
Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator+(const Tensor& a, double b) { return add(a, b); }
Tensor operator-(const Tensor& a, double b) { return sub(a, b); }
Tensor operator*(const Tensor& a, double b) { return mul(a, b); }
Tensor operator/(const Tensor& a, double b) { return div(a, b); }
Tensor operator+(double a, const Tensor& b) { return add(b, a); }
Tensor operator-(double a, const Tensor& b) { return add(neg(b), a); }
Tensor operator*(double a, const Tensor& b) { return mul(b, a); }
Tensor operator/(double a, const Tensor& b) { return mul(pow(promote_to_float(b), -1.0), a); }

Tensor clamp(const Tensor& x, double lo, double hi) {
  EMBER_CHECK(lo <= hi, "clamp: lo ", lo, " > hi ", hi);
  return minimum(maximum(x, lo), hi);
}

}  // namespace ember
