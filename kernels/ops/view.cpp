// Views: results share the input's storage; no kernel runs. Each is an op in the registry so
// autograd records it and the generic tests gradcheck it.
//
//   view(x, shape)           same elements, new shape; needs strides compatible with the shape
//                            (backward: grad.reshape(x.shape))
//   permute(x, dims)         dims reordered (backward: permute by the inverse)
//   slice(x, dim, a, b, s)   elements a, a+s, ... < b along dim (backward: zeros with grad copied in)
//   expand(x, shape)         size-1 dims repeated with stride 0 (backward: sum over them)
// transpose, narrow, select, squeeze, unsqueeze, flatten and reshape are built from these.
#include "kernels/ops/view.h"

#include <algorithm>
#include <numeric>
#include <optional>

#include "kernels/functional.h"
#include "kernels/registry.h"

namespace ember {

namespace {

// Strides for viewing (shape, strides) as `target`, or an empty list when impossible (PyTorch's
// computeStride: each run of target dims must fit inside one contiguous chunk of the old dims).
std::optional<Strides> view_strides(const Shape& shape, const Strides& strides, const Shape& target) {
  Strides out = IntList::filled(target.size(), 1);
  if (shape.numel() == 0 || shape.size() == 0) return contiguous_strides(target);
  int view_d = target.size() - 1;
  int64_t chunk_base_stride = strides.size() ? strides.back() : 1;
  int64_t tensor_numel = 1, view_numel = 1;
  for (int tensor_d = shape.size() - 1; tensor_d >= 0; --tensor_d) {
    tensor_numel *= shape[tensor_d];
    if (tensor_d == 0 || (shape[tensor_d - 1] != 1 && strides[tensor_d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || target[view_d] == 1)) {
        out[view_d] = view_numel * chunk_base_stride;
        view_numel *= target[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (tensor_d > 0) {
        chunk_base_stride = strides[tensor_d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return out;
}

Shape infer_size(const Shape& requested, int64_t numel, const Shape& from) {
  Shape out = requested;
  int infer = -1;
  int64_t known = 1;
  for (int i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      EMBER_CHECK(infer < 0, "view: only one dimension can be -1, got shape ", requested);
      infer = i;
    } else {
      EMBER_CHECK(out[i] >= 0, "view: invalid size ", out[i], " in shape ", requested);
      known *= out[i];
    }
  }
  if (infer >= 0) {
    EMBER_CHECK(known != 0 && numel % known == 0, "shape ", requested, " is invalid for input of shape ", from, " (",
                numel, " elements)");
    out[infer] = numel / known;
  }
  EMBER_CHECK(out.numel() == numel, "shape ", requested, " is invalid for input of shape ", from, " (", numel,
              " elements)");
  return out;
}

// ---- view ----

Tensor view_fn(const Tensor& x, const Attrs& a) {
  Shape target = infer_size(a.get<ShapeAttrs>().list(), x.numel(), x.shape());
  auto st = view_strides(x.shape(), x.strides(), target);
  EMBER_CHECK(st.has_value(), "view: shape ", target, " is not compatible with the input's shape ", x.shape(),
              " and strides ", x.strides(), " (a dimension would span non-contiguous memory); use reshape()");
  return make_view(x, target, *st, x.offset());
}

std::vector<Tensor> view_vjp(const BackwardCtx& ctx) { return {ctx.grad(0).reshape(ctx.input_meta[0].shape)}; }

// ---- permute ----

Tensor permute_fn(const Tensor& x, const Attrs& a) {
  IntList dims = a.get<ShapeAttrs>().list();
  EMBER_CHECK(dims.size() == x.dim(), "permute: got ", dims.size(), " dims ", dims, " for a tensor with ", x.dim(),
              " dimensions");
  Shape s = IntList::filled(x.dim(), 0);
  Strides st = IntList::filled(x.dim(), 0);
  std::vector<bool> seen(static_cast<size_t>(x.dim()), false);
  for (int i = 0; i < dims.size(); ++i) {
    int d = wrap_dim(dims[i], x.dim(), "permute dim");
    EMBER_CHECK(!seen[static_cast<size_t>(d)], "permute: dim ", d, " repeats in ", dims);
    seen[static_cast<size_t>(d)] = true;
    s[i] = x.shape()[d];
    st[i] = x.strides()[d];
  }
  return make_view(x, s, st, x.offset());
}

std::vector<Tensor> permute_vjp(const BackwardCtx& ctx) {
  IntList dims = ctx.attr<ShapeAttrs>().list();
  int n = dims.size();
  std::vector<int64_t> inv(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) inv[static_cast<size_t>(wrap_dim(dims[i], n))] = i;
  return {ctx.grad(0).permute(inv)};
}

// ---- slice ----

Tensor slice_fn(const Tensor& x, const Attrs& a) {
  const SliceAttrs& s = a.get<SliceAttrs>();
  EMBER_CHECK(x.dim() > 0, "slice: cannot slice a 0-dim tensor");
  int d = wrap_dim(s.dim, x.dim(), "slice dim");
  EMBER_CHECK(s.step > 0, "slice: step must be positive, got ", s.step);
  int64_t n = x.shape()[d];
  auto clampi = [&](int64_t v) {
    if (v < 0) v += n;
    return std::clamp<int64_t>(v, 0, n);
  };
  int64_t start = clampi(s.start), end = std::max(clampi(s.end), start);
  Shape shape = x.shape();
  Strides st = x.strides();
  shape[d] = (end - start + s.step - 1) / s.step;
  st[d] = x.strides()[d] * s.step;
  return make_view(x, shape, st, x.offset() + start * x.strides()[d]);
}

std::vector<Tensor> slice_vjp(const BackwardCtx& ctx) {
  const SliceAttrs& s = ctx.attr<SliceAttrs>();
  Tensor g = zeros_meta(ctx.input_meta[0]);
  Tensor part = g.slice(s.dim, s.start, s.end, s.step);
  copy_(part, ctx.grad(0));
  return {g};
}

// ---- expand ----

Tensor expand_fn(const Tensor& x, const Attrs& a) {
  Shape req = a.get<ShapeAttrs>().list();
  EMBER_CHECK(req.size() >= x.dim(), "expand: the target ", req, " has fewer dims than the input ", x.shape());
  Shape shape = req;
  Strides st = IntList::filled(req.size(), 0);
  int off = req.size() - x.dim();
  for (int i = 0; i < req.size(); ++i) {
    int xi = i - off;
    int64_t xs = xi >= 0 ? x.shape()[xi] : 1;
    if (req[i] == -1) {
      EMBER_CHECK(xi >= 0, "expand: -1 is not allowed for a new leading dim (target ", req, ")");
      shape[i] = xs;
    }
    if (xi >= 0 && xs == shape[i]) {
      st[i] = x.strides()[xi];
    } else {
      EMBER_CHECK(xs == 1, "expand: the input's size ", xs, " at dim ", i, " must be 1 to expand to ", shape[i],
                  " (input ", x.shape(), ", target ", req, ")");
      st[i] = 0;
    }
  }
  return make_view(x, shape, st, x.offset());
}

std::vector<Tensor> expand_vjp(const BackwardCtx& ctx) { return {sum_to(ctx.grad(0), ctx.input_meta[0].shape)}; }

void define_view_op(OpInfo& info, ViewFn fn, BackwardFn vjp, const char* doc) {
  info.view = fn;
  info.backward = vjp;
  info.doc = doc;
}

}  // namespace

void define_op_view(OpInfo& info) { define_view_op(info, view_fn, view_vjp, "view with a new shape"); }
void define_op_permute(OpInfo& info) { define_view_op(info, permute_fn, permute_vjp, "view with dims reordered"); }
void define_op_slice(OpInfo& info) { define_view_op(info, slice_fn, slice_vjp, "view of start:end:step along a dim"); }
void define_op_expand(OpInfo& info) {
  define_view_op(info, expand_fn, expand_vjp, "view with size-1 dims broadcast (stride 0)");
}

// ---- Tensor view methods ----

Tensor Tensor::view(const Shape& shape) const { return call1(OpId::view, {*this}, ShapeAttrs::from(shape)); }

Tensor Tensor::reshape(const Shape& shape) const {
  Shape target = infer_size(shape, numel(), this->shape());
  if (view_strides(this->shape(), strides(), target)) return view(target);
  return contiguous().view(target);
}

Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  if (dim() == 0) return reshape({1});
  int s = wrap_dim(start_dim, dim()), e = wrap_dim(end_dim, dim());
  EMBER_CHECK(s <= e, "flatten: start_dim ", start_dim, " is after end_dim ", end_dim);
  Shape out;
  for (int i = 0; i < s; ++i) out.push_back(shape()[i]);
  int64_t m = 1;
  for (int i = s; i <= e; ++i) m *= shape()[i];
  out.push_back(m);
  for (int i = e + 1; i < dim(); ++i) out.push_back(shape()[i]);
  return reshape(out);
}

Tensor Tensor::permute(const std::vector<int64_t>& dims) const {
  return call1(OpId::permute, {*this}, ShapeAttrs::from(IntList(dims)));
}

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  if (dim() == 0) return *this;
  int a = wrap_dim(d0, dim()), b = wrap_dim(d1, dim());
  if (a == b) return *this;
  std::vector<int64_t> p(static_cast<size_t>(dim()));
  std::iota(p.begin(), p.end(), 0);
  std::swap(p[static_cast<size_t>(a)], p[static_cast<size_t>(b)]);
  return permute(p);
}

Tensor Tensor::slice(int64_t d, int64_t start, int64_t end, int64_t step) const {
  return call1(OpId::slice, {*this}, SliceAttrs{d, start, end, step});
}

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  int dd = wrap_dim(d, dim());
  int64_t n = shape()[dd];
  if (start < 0) start += n;
  EMBER_CHECK(start >= 0 && length >= 0 && start + length <= n, "narrow: start ", start, " length ", length,
              " is out of range for dim ", dd, " of size ", n);
  return slice(dd, start, start + length, 1);
}

Tensor Tensor::select(int64_t d, int64_t index) const {
  int dd = wrap_dim(d, dim());
  int64_t n = shape()[dd];
  EMBER_CHECK(index >= -n && index < n, "select: index ", index, " is out of range for dim ", dd, " of size ", n);
  if (index < 0) index += n;
  return slice(dd, index, index + 1, 1).squeeze(dd);
}

Tensor Tensor::expand(const Shape& shape) const { return call1(OpId::expand, {*this}, ShapeAttrs::from(shape)); }

Tensor Tensor::squeeze() const {
  Shape s;
  for (int64_t v : shape())
    if (v != 1) s.push_back(v);
  return s == shape() ? *this : view(s);
}

Tensor Tensor::squeeze(int64_t d) const {
  if (dim() == 0) return *this;
  int dd = wrap_dim(d, dim());
  if (shape()[dd] != 1) return *this;
  Shape s = shape();
  s.erase(dd);
  return view(s);
}

Tensor Tensor::unsqueeze(int64_t d) const {
  int dd = wrap_dim(d, dim() + 1);
  Shape s = shape();
  s.insert(dd, 1);
  return view(s);
}

}  // namespace ember
