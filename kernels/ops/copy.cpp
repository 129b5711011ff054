// cast and copy: shape inference, CPU kernels, samples, the functional copy_ and cast.
#include "kernels/ops/copy.h"

#include "core/cuda/runtime.h"
#include "kernels/common/cpu_loops.h"
#include "kernels/common/samples.h"
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

std::vector<OpSample> cast_samples() {
  std::vector<OpSample> out;
  uint64_t seed = 1;
  for (const auto& ns : samples::elementwise_shapes()) {
    OpSample s;
    s.name = ns.name + " to same dtype (a copy)";
    s.inputs = {samples::uniform(ns.shape, -3, 3, ++seed)};
    s.attrs = CastAttrs{static_cast<int64_t>(DType::f64), 0};
    out.push_back(std::move(s));
  }
  // conversions to every dtype (not differentiable into integers)
  for (DType t : {DType::f32, DType::f16, DType::bf16, DType::i32, DType::i64, DType::u8, DType::boolean}) {
    OpSample s;
    s.name = std::string("[257] to ") + std::string(dtype_name(t));
    s.inputs = {samples::uniform({257}, 0, 100, ++seed)};
    s.attrs = CastAttrs{static_cast<int64_t>(t)};
    s.gradcheck = false;  // f64 -> lower precision: central differences drown in rounding
    out.push_back(std::move(s));
  }
  OpSample tr;
  tr.name = "transposed [6, 5]";
  tr.inputs = {samples::uniform({5, 6}, -1, 1, 99).transpose(0, 1)};
  tr.attrs = CastAttrs{static_cast<int64_t>(DType::f64), 1};
  out.push_back(std::move(tr));
  OpSample ex;
  ex.name = "expanded [1, 9] -> [4, 9]";
  ex.inputs = {samples::uniform({1, 9}, -1, 1, 98).expand({4, 9})};
  ex.attrs = CastAttrs{static_cast<int64_t>(DType::f64)};
  out.push_back(std::move(ex));
  return out;
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

std::vector<OpSample> copy_samples() {
  std::vector<OpSample> out;
  auto mk = [&](const char* name, Tensor dst, Tensor src) {
    OpSample s;
    s.name = name;
    s.inputs = {std::move(dst), std::move(src)};
    s.attrs = CopyAttrs{};  // the op's attributes, as copy_() passes them (the CUDA kernel reads them)
    s.gradcheck = false;    // copy_ is not differentiable (use cast or clone)
    out.push_back(std::move(s));
  };
  mk("[1023] contiguous", samples::uniform({1023}, -1, 1, 1), samples::uniform({1023}, -1, 1, 2));
  mk("into transposed [6,5]", samples::uniform({5, 6}, -1, 1, 3).transpose(0, 1), samples::uniform({6, 5}, -1, 1, 4));
  mk("broadcast [5] -> [3,5]", samples::uniform({3, 5}, -1, 1, 5), samples::uniform({5}, -1, 1, 6));
  mk("strided source", samples::uniform({4, 3}, -1, 1, 7), samples::uniform({4, 7}, -1, 1, 8).slice(1, 0, 6, 2));
  mk("empty", samples::uniform({0, 4}, -1, 1, 9), samples::uniform({0, 4}, -1, 1, 10));
  return out;
}

}  // namespace

void define_op_cast(OpInfo& info) {
  info.doc = "dtype conversion (differentiable)";
  info.infer = infer_cast;
  info.backward = cast_vjp;
  info.samples = cast_samples;
  info.cost = elementwise_io_cost;
  info.contiguous_inputs = false;
  info.add_variant({.name = "cpu", .device = DeviceType::cpu, .fn = cast_cpu, .note = "generic CPU elementwise loop"});
}

void define_op_copy(OpInfo& info) {
  info.doc = "strided copy with dtype conversion, across devices";
  info.infer = infer_copy;
  info.samples = copy_samples;
  info.cost = elementwise_io_cost;
  info.contiguous_inputs = false;
  info.add_variant({.name = "cpu", .device = DeviceType::cpu, .fn = copy_cpu, .note = "generic CPU elementwise loop"});
}

Tensor cast(const Tensor& x, DType dtype) {
  return call1(OpId::cast, {x}, CastAttrs{static_cast<int64_t>(dtype), 0});
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
