#include "kernels/ops/where.h"

#include "kernels/common/cpu_loops.h"
#include "kernels/functional.h"
#include "kernels/ops/dtype_promotion.h"
#include "kernels/registry.h"

namespace ember {

namespace {

std::vector<TensorSpec> infer_where(std::span<const Tensor> in, const Attrs&) {
  EMBER_CHECK(in.size() == 3, "where: expects (cond, a, b)");
  const Tensor &c = in[0], &a = in[1], &b = in[2];
  EMBER_CHECK(c.dtype() == DType::boolean, "where: the condition must be bool, got ", c.describe());
  EMBER_CHECK(a.dtype() == b.dtype(), "where: a and b must have the same dtype by now, got ", a.describe(), " and ",
              b.describe());
  Shape s = broadcast_shapes(broadcast_shapes(c.shape(), a.shape()), b.shape());
  return {{s, a.dtype(), elementwise_out_strides(s, {&a, &b})}};
}

void where_cpu(const KernelCall& k) {
  const Tensor &c = k.in[0], &a = k.in[1], &b = k.in[2];
  Tensor& out = k.out[0];
  ElementwiseLayout L = make_layout({&out, &c, &a, &b});
  EMBER_DISPATCH_ALL(a.dtype(), "where", [&] {
    cpu_map<scalar_t, bool, scalar_t, scalar_t>(L, {&out, &c, &a, &b}, WhereFn<scalar_t>{});
  });
}

std::vector<Tensor> where_vjp(const BackwardCtx& ctx) {
  const Tensor& c = ctx.inputs[0];
  Tensor g = ctx.grad(0);
  Tensor z = zeros({}, TensorOptions().dtype(g.dtype()).device(g.device()));
  Tensor ga, gb;
  if (ctx.needs_grad(1)) ga = sum_to(where(c, g, z), ctx.input_meta[1].shape);
  if (ctx.needs_grad(2)) gb = sum_to(where(c, z, g), ctx.input_meta[2].shape);
  return {Tensor(), ga, gb};
}

Cost where_cost(const KernelCall& c) {
  double bytes = static_cast<double>(c.out[0].nbytes());
  for (const Tensor& t : c.in) bytes += static_cast<double>(t.nbytes());
  return {bytes, 0};
}

}  // namespace

void define_op_where(OpInfo& info) {
  info.doc = "select a or b by a bool condition";
  info.infer = infer_where;
  info.backward = where_vjp;
  info.save = Save::inputs;
  info.cost = where_cost;
  info.contiguous_inputs = false;
  info.autocast = AutocastPolicy::promote;
  info.add_variant({.name = "cpu", .device = DeviceType::cpu, .fn = where_cpu, .note = "generic CPU elementwise loop"});
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  DType t = promote_types(a.dtype(), b.dtype());
  if (a.dim() == 0 && b.dim() != 0 && is_floating(a.dtype()) == is_floating(b.dtype())) t = b.dtype();
  if (b.dim() == 0 && a.dim() != 0 && is_floating(a.dtype()) == is_floating(b.dtype())) t = a.dtype();
  Tensor c = cond.dtype() == DType::boolean ? cond : ne(cond, 0.0);
  return call1(OpId::where, {c, to_dtype(a, t), to_dtype(b, t)});
}

Tensor where(const Tensor& cond, const Tensor& a, double b) {
  return where(
      cond, a,
      full({}, b, TensorOptions().dtype(is_floating(a.dtype()) ? a.dtype() : kDefaultFloat).device(a.device())));
}

}  // namespace ember
