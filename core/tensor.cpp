#include "core/tensor.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <numeric>

#include "core/autograd/engine.h"
#include "core/autograd/node.h"

namespace ember {

int64_t Tensor::size(int64_t d) const { return impl_->shape[wrap_dim(d, dim())]; }
int64_t Tensor::stride(int64_t d) const { return impl_->strides[wrap_dim(d, dim())]; }

void* Tensor::data_ptr() const {
  auto* base = static_cast<char*>(impl_->storage->data());
  if (base == nullptr) return nullptr;
  return base + impl_->offset * static_cast<int64_t>(element_size());
}

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (int i = dim() - 1; i >= 0; --i) {
    int64_t s = impl_->shape[i];
    if (s == 0) return true;
    if (s != 1 && impl_->strides[i] != expected) return false;
    expected *= s;
  }
  return true;
}

bool Tensor::is_channels_last() const {
  if (dim() != 4) return false;
  const Shape& s = impl_->shape;
  const Strides& st = impl_->strides;
  if (s.numel() == 0) return true;
  // expected NHWC strides for NCHW shape: C=1, W=C, H=W*C, N=H*W*C; size-1 dims are free
  int64_t n = s[0], c = s[1], h = s[2], w = s[3];
  auto ok = [](int64_t size, int64_t stride, int64_t want) { return size == 1 || stride == want; };
  return ok(c, st[1], 1) && ok(w, st[3], c) && ok(h, st[2], w * c) && ok(n, st[0], h * w * c);
}

bool Tensor::is_non_overlapping_and_dense() const {
  if (is_contiguous()) return true;
  int n = dim();
  std::vector<int> perm(n);
  std::iota(perm.begin(), perm.end(), 0);
  const Shape& s = impl_->shape;
  const Strides& st = impl_->strides;
  std::sort(perm.begin(), perm.end(), [&](int a, int b) {
    if (s[a] < 2) return false;
    if (s[b] < 2) return true;
    return st[a] < st[b];
  });
  int64_t expected = 1;
  for (int i : perm) {
    if (s[i] == 1) continue;
    if (st[i] != expected) return false;
    expected *= s[i];
  }
  return true;
}

std::string Tensor::describe() const {
  if (!defined()) return "undefined tensor";
  return ember::str(dtype(), shape(), " on ", device());
}

// ---- autograd metadata ----

Tensor& Tensor::requires_grad_(bool r) {
  EMBER_CHECK(!r || is_floating(dtype()), "only floating point tensors can require gradients; got ", describe());
  EMBER_CHECK(is_leaf() || r, "requires_grad_(false) on a non-leaf tensor; use detach() instead");
  impl_->meta().requires_grad = r;
  return *this;
}

const std::shared_ptr<autograd::Node>& Tensor::grad_fn() const {
  static const std::shared_ptr<autograd::Node> none;
  return impl_->autograd ? impl_->autograd->grad_fn : none;
}

Tensor Tensor::grad() const {
  if (!impl_->autograd || !impl_->autograd->grad) return Tensor();
  return Tensor(impl_->autograd->grad);
}

void Tensor::set_grad(const Tensor& g) {
  if (!g.defined()) {
    reset_grad();
    return;
  }
  EMBER_CHECK(g.shape() == shape() && g.dtype() == dtype() && g.device() == device(), "assigned grad ", g.describe(),
              " does not match the tensor ", describe());
  impl_->meta().grad = g.impl_ptr();
}

void Tensor::reset_grad() {
  if (impl_->autograd) impl_->autograd->grad.reset();
}

uint64_t Tensor::register_post_accumulate_grad_hook(std::function<void(const Tensor&)> fn) const {
  EMBER_CHECK(requires_grad() && is_leaf(),
              "register_post_accumulate_grad_hook: only leaves that require grad "
              "accumulate gradients; got ",
              describe());
  static std::atomic<uint64_t> next{1};
  uint64_t id = next.fetch_add(1);
  impl_->meta().post_accumulate_hooks.emplace_back(id, std::move(fn));
  return id;
}

void Tensor::remove_post_accumulate_grad_hook(uint64_t id) const {
  if (!impl_ || !impl_->autograd) return;
  auto& hooks = impl_->autograd->post_accumulate_hooks;
  std::erase_if(hooks, [&](const auto& h) { return h.first == id; });
}

void Tensor::retain_grad() {
  EMBER_CHECK(requires_grad(), "retain_grad() on a tensor that does not require grad");
  if (is_leaf()) return;  // leaves keep .grad anyway
  impl_->meta().retains_grad = true;
  grad_fn()->retain_output(impl_->autograd->output_nr, impl_ptr());
}

Tensor Tensor::detach() const {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = impl_->storage;
  impl->shape = impl_->shape;
  impl->strides = impl_->strides;
  impl->offset = impl_->offset;
  impl->dtype = impl_->dtype;
  return Tensor(std::move(impl));
}

// ---- construction ----

int64_t storage_span(const Shape& shape, const Strides& strides) {
  if (shape.numel() == 0) return 0;
  int64_t last = 0;
  for (int i = 0; i < shape.size(); ++i) {
    EMBER_CHECK(strides[i] >= 0, "negative strides are not supported (stride ", strides[i], " in dim ", i, ")");
    last += (shape[i] - 1) * strides[i];
  }
  return last + 1;
}

static void check_shape(const Shape& shape) {
  int64_t n = 1;
  for (int i = 0; i < shape.size(); ++i) {
    EMBER_CHECK(shape[i] >= 0, "negative dimension ", shape[i], " in shape ", shape);
    EMBER_CHECK(shape[i] == 0 || n <= (int64_t{1} << 62) / shape[i], "shape ", shape, " has too many elements");
    n *= shape[i];
  }
}

Tensor empty_strided(const Shape& shape, const Strides& strides, const TensorOptions& o) {
  check_shape(shape);
  EMBER_CHECK(shape.size() == strides.size(), "shape ", shape, " and strides ", strides, " differ in length");
  EMBER_CHECK(!o.pinned_ || o.device_.is_cpu(), "pinned memory is host memory; asked for ", o.device_);
  auto impl = std::make_shared<TensorImpl>();
  size_t bytes = static_cast<size_t>(storage_span(shape, strides)) * dtype_size(o.dtype_);
  impl->storage = std::make_shared<Storage>(bytes, allocator_for(o.device_, o.pinned_));
  impl->shape = shape;
  impl->strides = strides;
  impl->dtype = o.dtype_;
  Tensor t(std::move(impl));
  if (o.requires_grad_) t.requires_grad_(true);
  return t;
}

Tensor empty(const Shape& shape, const TensorOptions& o) { return empty_strided(shape, contiguous_strides(shape), o); }

Tensor empty_like(const Tensor& t) {
  TensorOptions o = TensorOptions().dtype(t.dtype()).device(t.device());
  if (t.is_non_overlapping_and_dense() && !t.is_contiguous()) return empty_strided(t.shape(), t.strides(), o);
  return empty(t.shape(), o);
}

Tensor make_view(const Tensor& base, const Shape& shape, const Strides& strides, int64_t offset) {
  return make_view(base, base.dtype(), shape, strides, offset);
}

Tensor make_view(const Tensor& base, DType dtype, const Shape& shape, const Strides& strides, int64_t offset) {
  int64_t span = storage_span(shape, strides);
  int64_t cap = static_cast<int64_t>(base.storage()->nbytes() / dtype_size(dtype));
  EMBER_CHECK(span == 0 || (offset >= 0 && offset + span <= cap), "view ", shape, " strides ", strides, " offset ",
              offset, " is out of bounds of a storage of ", cap, " ", dtype, " elements");
  EMBER_CHECK(reinterpret_cast<uintptr_t>(base.storage()->data()) % dtype_size(dtype) == 0, "a ", dtype,
              " view of a storage not aligned to ", dtype_size(dtype), " bytes");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = base.storage();
  impl->shape = shape;
  impl->strides = strides;
  impl->offset = offset;
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor from_blob(void* data, const Shape& shape, DType dtype, Device device) {
  check_shape(shape);
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(data, static_cast<size_t>(shape.numel()) * dtype_size(dtype), device,
                                            std::function<void(void*)>());
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

}  // namespace ember
