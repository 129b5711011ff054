// cat(tensors, dim): tensors joined along dim; all have the same shape except at dim and the same
// dtype (the functional API promotes). The kernel is one strided copy per input into its slice
// of the output, on either device. Backward: each input gets its slice of the gradient.
// stack(tensors, dim) = cat of the tensors unsqueezed at dim.
#include "kernels/ops/cat.h"

#include "kernels/functional.h"
#include "kernels/registry.h"

namespace ember {

namespace {

std::vector<TensorSpec> infer_cat(std::span<const Tensor> in, const Attrs& a) {
  EMBER_CHECK(!in.empty(), "cat: expects a non-empty list of tensors");
  const Tensor& f = in[0];
  EMBER_CHECK(f.dim() > 0, "cat: zero-dimensional tensor (input 0) cannot be concatenated");
  int d = wrap_dim(a.get<CatAttrs>().dim, f.dim(), "cat dim");
  Shape s = f.shape();
  s[d] = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    const Tensor& t = in[i];
    EMBER_CHECK(t.dtype() == f.dtype(), "cat: input ", i, " is ", t.describe(), " but input 0 is ", f.describe(),
                " (the functional API promotes dtypes)");
    EMBER_CHECK(t.dim() == f.dim(), "cat: input ", i, " has shape ", t.shape(), " but input 0 has shape ", f.shape(),
                " (ranks differ)");
    for (int k = 0; k < f.dim(); ++k)
      EMBER_CHECK(k == d || t.shape()[k] == f.shape()[k], "cat: input ", i, " has shape ", t.shape(),
                  " but input 0 has shape ", f.shape(), "; sizes must match except in dim ", d);
    s[d] += t.shape()[d];
  }
  return {{s, f.dtype(), {}}};
}

void cat_kernel(const KernelCall& c) {
  int d = wrap_dim(c.attr<CatAttrs>().dim, c.in[0].dim());
  Tensor out = c.out[0];
  int64_t off = 0;
  for (const Tensor& t : c.in) {
    int64_t n = t.shape()[d];
    if (n > 0) {
      Tensor part = out.narrow(d, off, n);
      copy_(part, t);
    }
    off += n;
  }
}

std::vector<Tensor> cat_vjp(const BackwardCtx& ctx) {
  int d = wrap_dim(ctx.attr<CatAttrs>().dim, ctx.output_meta[0].shape.size());
  Tensor g = ctx.grad(0);
  std::vector<Tensor> out;
  int64_t off = 0;
  for (size_t i = 0; i < ctx.input_meta.size(); ++i) {
    int64_t n = ctx.input_meta[i].shape[d];
    out.push_back(ctx.needs_grad(i) ? g.narrow(d, off, n) : Tensor());
    off += n;
  }
  return out;
}

Cost cat_cost(const KernelCall& c) { return {2.0 * static_cast<double>(c.out[0].nbytes()), 0}; }

}  // namespace

void define_op_cat(OpInfo& info) {
  info.doc = "concatenate along a dim";
  info.infer = infer_cat;
  info.backward = cat_vjp;
  info.cost = cat_cost;
  info.contiguous_inputs = false;
  info.autocast = AutocastPolicy::promote;
  info.add_variant({.name = "cpu", .device = DeviceType::cpu, .fn = cat_kernel, .note = "a strided copy per input"});
}

void register_cuda_cat(OpInfo& info) {
  info.add_variant(
      {.name = "cuda", .device = DeviceType::cuda, .fn = cat_kernel, .note = "a strided copy kernel per input"});
}

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  EMBER_CHECK(!tensors.empty(), "cat: expects a non-empty list of tensors");
  DType t = tensors[0].dtype();
  for (const Tensor& x : tensors) t = promote_types(t, x.dtype());
  std::vector<Tensor> in;
  for (const Tensor& x : tensors) in.push_back(x.dtype() == t ? x : cast(x, t));
  return call1(OpId::cat, std::move(in), CatAttrs{dim});
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  EMBER_CHECK(!tensors.empty(), "stack: expects a non-empty list of tensors");
  int d = wrap_dim(dim, tensors[0].dim() + 1, "stack dim");
  std::vector<Tensor> u;
  for (size_t i = 0; i < tensors.size(); ++i) {
    EMBER_CHECK(tensors[i].shape() == tensors[0].shape(), "stack: input ", i, " has shape ", tensors[i].shape(),
                " but input 0 has shape ", tensors[0].shape(), "; stack needs equal shapes");
    u.push_back(tensors[i].unsqueeze(d));
  }
  return cat(u, d);
}

}  // namespace ember
