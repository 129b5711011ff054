// cast and copy: shape inference, CPU kernels, the functional copy_ and cast.
#include "kernels/ops/copy.h"

#include "core/cuda/runtime.h"
#include "kernels/common/cpu_loops.h"
#include "kernels/functional.h"
#include "kernels/registry.h"

namespace ember {

namespace {

// ---- cast ----

std::vector<TensorSpec> infer_cast(std::span<const Tensor> in, const Attrs& a) {
  EMBER_CHECK(in.size() == 1, "cast: expects one input");
  const Tensor& x = in[0];
  const CastAttrs& ca = a.get<CastAttrs>();
  auto t = static_cast<DType>(ca.dtype);
  return {{x.shape(), t, ca.contiguous ? Strides() : elementwise_out_strides(x.shape(), {&x})}};
}

template <class Out>
void convert_loop_cpu(const Tensor& dst, const Tensor& src) {
  ElementwiseLayout L = make_layout({&dst, &src});
  EMBER_DISPATCH_ALL(src.dtype(), "copy", [&] { cpu_map<Out, scalar_t>(L, {&dst, &src}, ConvertFn<Out, scalar_t>{}); });
}

void convert_cpu(const Tensor& dst, const Tensor& src) {
  EMBER_DISPATCH_ALL(dst.dtype(), "copy", [&] { convert_loop_cpu<scalar_t>(dst, src); });
}

void cast_cpu(const KernelCall& c) { convert_cpu(c.out[0], c.in[0]); }

std::vector<Tensor> cast_vjp(const BackwardCtx& ctx) {
  DType src = ctx.input_meta[0].dtype;
  Tensor g = ctx.grad(0);
  return {g.dtype() == src ? g : cast(g, src)};
}

// ---- cast_many ----

std::vector<TensorSpec> infer_cast_many(std::span<const Tensor> in, const Attrs& a) {
  EMBER_CHECK(!in.empty(), "cast_many: expects at least one input");
  const auto t = static_cast<DType>(a.get<CastManyAttrs>().dtype);
  EMBER_CHECK(is_floating(t), "cast_many: converts to floating dtypes only, got ", t);
  std::vector<TensorSpec> out;
  for (size_t i = 0; i < in.size(); ++i) {
    EMBER_CHECK(is_floating(in[i].dtype()), "cast_many: input ", i, " is ", in[i].describe(), ", not floating");
    out.push_back({in[i].shape(), t});
  }
  return out;
}

void cast_many_cpu(const KernelCall& c) {
  for (size_t i = 0; i < c.in.size(); ++i) convert_cpu(c.out[i], c.in[i]);
}

// Each gradient back to its input's dtype: one cast_many per dtype the inputs had (autocast's
// calls have one), none for a gradient that is undefined, unwanted or already in that dtype.
std::vector<Tensor> cast_many_vjp(const BackwardCtx& ctx) {
  const size_t n = ctx.input_meta.size();
  std::vector<Tensor> grads(n);
  std::vector<bool> done(n, false);
  for (size_t i = 0; i < n; ++i) {
    if (done[i]) continue;
    const DType to = ctx.input_meta[i].dtype;
    std::vector<size_t> idx;
    std::vector<Tensor> gs;
    for (size_t j = i; j < n; ++j) {
      if (done[j] || ctx.input_meta[j].dtype != to) continue;
      done[j] = true;
      if (!ctx.needs_grad(j) || j >= ctx.grads.size() || !ctx.grads[j].defined()) continue;
      if (ctx.grads[j].dtype() == to) {
        grads[j] = ctx.grads[j];
        continue;
      }
      idx.push_back(j);
      gs.push_back(ctx.grads[j]);
    }
    if (gs.empty()) continue;
    std::vector<Tensor> r = gs.size() == 1 ? std::vector<Tensor>{cast(gs[0], to)} : cast_many(gs, to);
    for (size_t k = 0; k < idx.size(); ++k) grads[idx[k]] = std::move(r[k]);
  }
  return grads;
}

Cost elementwise_io_cost(const KernelCall& c) {
  double bytes = 0;
  for (const Tensor& t : c.in) bytes += static_cast<double>(t.nbytes());
  for (const Tensor& t : c.out) bytes += static_cast<double>(t.nbytes());
  return {bytes, 0};
}

// ---- copy ----

std::vector<TensorSpec> infer_copy(std::span<const Tensor> in, const Attrs&) {
  EMBER_CHECK(in.size() == 2, "copy: expects (dst, src)");
  const Tensor &dst = in[0], &src = in[1];
  Shape b = broadcast_shapes(dst.shape(), src.shape());
  EMBER_CHECK(b == dst.shape(), "copy: source ", src.describe(), " does not broadcast to the destination ",
              dst.describe());
  if (dst.device() != src.device()) {
    // the bytes move as they are: both dense, in the same layout (contiguous, or e.g. channels-last)
    const bool same_dense = dst.is_non_overlapping_and_dense() && src.is_non_overlapping_and_dense() &&
                            (dst.strides() == src.strides() || (dst.is_contiguous() && src.is_contiguous()));
    EMBER_CHECK(dst.dtype() == src.dtype() && dst.shape() == src.shape() && same_dense,
                "copy between devices needs dense tensors of the same dtype, shape and layout; got ", src.describe(),
                " -> ", dst.describe(), " (use copy_(), which arranges that)");
  }
  return {{dst.shape(), dst.dtype(), dst.strides(), 0}};
}

void copy_cpu(const KernelCall& c) { convert_cpu(c.in[0], c.in[1]); }

}  // namespace

void define_op_cast(OpInfo& info) {
  info.doc = "dtype conversion (differentiable)";
  info.infer = infer_cast;
  info.backward = cast_vjp;
  info.cost = elementwise_io_cost;
  info.contiguous_inputs = false;
  info.add_variant({.name = "cpu", .device = DeviceType::cpu, .fn = cast_cpu, .note = "generic CPU elementwise loop"});
}

void define_op_cast_many(OpInfo& info) {
  info.doc = "several tensors' dtype conversions in one launch (autocast's casts of an op's inputs)";
  info.infer = infer_cast_many;
  info.backward = cast_many_vjp;
  info.cost = elementwise_io_cost;
  info.add_variant(
      {.name = "cpu", .device = DeviceType::cpu, .fn = cast_many_cpu, .note = "cast's CPU loop, tensor by tensor"});
}

void define_op_copy(OpInfo& info) {
  info.doc = "strided copy with dtype conversion, across devices";
  info.infer = infer_copy;
  info.cost = elementwise_io_cost;
  info.contiguous_inputs = false;
  info.add_variant({.name = "cpu", .device = DeviceType::cpu, .fn = copy_cpu, .note = "generic CPU elementwise loop"});
}

Tensor cast(const Tensor& x, DType dtype) { return call1(OpId::cast, {x}, CastAttrs{static_cast<int64_t>(dtype), 0}); }

std::vector<Tensor> cast_many(const std::vector<Tensor>& xs, DType dtype) {
  return call(OpId::cast_many, xs, CastManyAttrs{static_cast<int64_t>(dtype)});
}

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  return call1(OpId::cast, {*this}, CastAttrs{static_cast<int64_t>(dtype()), 1});
}

Tensor Tensor::clone() const { return call1(OpId::cast, {*this}, CastAttrs{static_cast<int64_t>(dtype()), 0}); }

void copy_(Tensor& dst, const Tensor& src, bool non_blocking) {
  EMBER_CHECK(dst.defined() && src.defined(), "copy_: undefined tensor");
  if (dst.device() == src.device()) {
    call_into(OpId::copy, {dst, src}, {dst}, CopyAttrs{non_blocking});
    return;
  }
  // Across devices: make the source contiguous, broadcast and converted on the side where the
  // data is smaller, move the bytes, then scatter into dst if it is not contiguous.
  Tensor s = src;
  if (s.shape() != dst.shape()) s = s.expand(dst.shape());
  if (s.dtype() != dst.dtype() && dtype_size(dst.dtype()) <= s.element_size()) s = cast(s, dst.dtype());
  s = s.contiguous();
  Tensor staging = dst;
  if (!dst.is_contiguous() || s.dtype() != dst.dtype())
    staging = empty(dst.shape(), TensorOptions().dtype(s.dtype()).device(dst.device()));
  call_into(OpId::copy, {staging, s}, {staging}, CopyAttrs{non_blocking});
  if (!staging.is_same(dst)) call_into(OpId::copy, {dst, staging}, {dst}, CopyAttrs{non_blocking});
}

}  // namespace ember
