// Tensor: a shape, strides and an offset onto a Storage, plus autograd metadata.
//
// A Tensor is a cheap handle (a shared pointer to its TensorImpl); copies of a Tensor are the same
// tensor. Views (view, transpose, slice, expand, ...) make a new TensorImpl on the same storage.
//
// Note [where tensor methods live]: core/ holds the data structures (this file, storage, the
// autograd engine); every method that computes or records autograd (views, contiguous, to, item,
// in-place math, backward) is declared here and defined in kernels/, next to the ops it forwards
// to. kernels/ is the layer above (ember_kernels links ember_core, never the reverse), so code in
// core/ must not call these methods: the autograd engine is handed the few ops it computes with
// (Note [gradient arithmetic] in core/autograd/engine.h).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/shape.h"
#include "core/storage.h"

namespace ember {

namespace autograd {
struct Node;
}

class Tensor;
struct TensorImpl;

struct TensorOptions {
  DType dtype_ = kDefaultFloat;
  Device device_ = kCPU;
  bool requires_grad_ = false;
  bool pinned_ = false;

  TensorOptions() = default;
  TensorOptions(DType t) : dtype_(t) {}    // NOLINT: implicit on purpose, zeros({2}, DType::f16)
  TensorOptions(Device d) : device_(d) {}  // NOLINT: zeros({2}, kCUDA)
  TensorOptions& dtype(DType t) {
    dtype_ = t;
    return *this;
  }
  TensorOptions& device(Device d) {
    device_ = d;
    return *this;
  }
  TensorOptions& requires_grad(bool r = true) {
    requires_grad_ = r;
    return *this;
  }
  // Page-locked host memory (only meaningful for CPU tensors).
  TensorOptions& pinned_memory(bool p = true) {
    pinned_ = p;
    return *this;
  }
};

struct AutogradMeta {
  bool requires_grad = false;
  bool retains_grad = false;
  std::shared_ptr<TensorImpl> grad;
  std::shared_ptr<autograd::Node> grad_fn;         // set for results of differentiable ops
  uint32_t output_nr = 0;                          // which output of grad_fn this is
  std::weak_ptr<autograd::Node> grad_accumulator;  // leaves: the node that adds into .grad
  // Leaves: run by AccumulateGrad after it wrote .grad (PyTorch's post-accumulate-grad hooks;
  // DDP's bucket reductions start here). Keyed by the id register_...() returned.
  std::vector<std::pair<uint64_t, std::function<void(const Tensor&)>>> post_accumulate_hooks;
  // Leaves: a defined .grad is accumulated into in place instead of replaced by old + new (DDP
  // sets it so .grad stays a view into its bucket across no_sync() steps).
  bool accumulate_grad_in_place = false;
};

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape shape;
  Strides strides;
  int64_t offset = 0;  // in elements
  DType dtype = kDefaultFloat;
  std::unique_ptr<AutogradMeta> autograd;

  AutogradMeta& meta() {
    if (!autograd) autograd = std::make_unique<AutogradMeta>();
    return *autograd;
  }
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return impl_ != nullptr; }
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool is_same(const Tensor& o) const { return impl_ == o.impl_; }

  // ---- metadata (core/tensor.cpp) ----
  const Shape& shape() const { return impl_->shape; }
  const Strides& strides() const { return impl_->strides; }
  int dim() const { return impl_->shape.size(); }
  int64_t size(int64_t d) const;
  int64_t stride(int64_t d) const;
  int64_t offset() const { return impl_->offset; }
  int64_t numel() const { return impl_->shape.numel(); }
  DType dtype() const { return impl_->dtype; }
  size_t element_size() const { return dtype_size(impl_->dtype); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * element_size(); }
  Device device() const { return impl_->storage->device(); }
  bool is_cuda() const { return device().is_cuda(); }
  bool is_cpu() const { return device().is_cpu(); }
  bool is_pinned() const { return impl_->storage->pinned(); }
  const std::shared_ptr<Storage>& storage() const { return impl_->storage; }
  bool is_contiguous() const;
  // NCHW shape laid out as NHWC in memory (channels-last).
  bool is_channels_last() const;
  // No element repeats and there are no gaps: some permutation of the dims is contiguous.
  bool is_non_overlapping_and_dense() const;
  // Address of element 0 (storage + offset).
  void* data_ptr() const;
  template <class T>
  T* data() const {
    EMBER_CHECK(dtype_v<T> == dtype(), "data<", dtype_v<T>, ">() called on a tensor of dtype ", dtype());
    return static_cast<T*>(data_ptr());
  }
  std::string describe() const;  // "f32[2, 3] on cuda:0"

  // ---- autograd (core/autograd) ----
  bool requires_grad() const { return impl_->autograd && impl_->autograd->requires_grad; }
  // Only floating tensors can require grad; only leaves can have it set.
  Tensor& requires_grad_(bool r = true);
  bool is_leaf() const { return !impl_->autograd || !impl_->autograd->grad_fn; }
  const std::shared_ptr<autograd::Node>& grad_fn() const;
  Tensor grad() const;
  void set_grad(const Tensor& g);
  // Sets .grad to none (what zero_grad does).
  void reset_grad();
  // Leaves: `fn(leaf)` runs each time backward has accumulated a gradient into .grad. Returns an
  // id for remove_post_accumulate_grad_hook.
  uint64_t register_post_accumulate_grad_hook(std::function<void(const Tensor&)> fn) const;
  void remove_post_accumulate_grad_hook(uint64_t id) const;
  // Keep .grad for this non-leaf after backward.
  void retain_grad();
  // Runs the backward pass from this tensor. `grad` may be omitted for a scalar (implicitly 1).
  void backward(const Tensor& grad = Tensor(), bool retain_graph = false) const;
  // A tensor on the same storage with no autograd history.
  Tensor detach() const;
  uint64_t version() const { return impl_->storage->version(); }
  void bump_version() const { impl_->storage->bump_version(); }

  // ---- views (kernels/ops/view.cpp); record autograd like any op ----
  Tensor view(const Shape& shape) const;     // requires compatible strides; one dim may be -1
  Tensor reshape(const Shape& shape) const;  // a view when possible, else a copy
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor t() const { return transpose(0, 1); }
  Tensor permute(const std::vector<int64_t>& dims) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor select(int64_t dim, int64_t index) const;
  Tensor expand(const Shape& shape) const;  // -1 keeps a dim
  Tensor expand_as(const Tensor& other) const { return expand(other.shape()); }
  Tensor squeeze() const;
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor operator[](int64_t index) const { return select(0, index); }

  // ---- copies and conversions (kernels/tensor_methods.cpp) ----
  Tensor contiguous() const;
  // Copies to a device and/or dtype. non_blocking: asynchronous where it can be (pinned host
  // memory, device to device); otherwise the copy completes before returning.
  Tensor to(Device device, bool non_blocking = false) const;
  Tensor to(DType dtype) const;
  Tensor to(Device device, DType dtype, bool non_blocking = false) const;
  Tensor cpu() const { return to(kCPU); }
  Tensor cuda(int index = 0) const { return to(Device(DeviceType::cuda, index)); }
  Tensor clone() const;
  // A copy in page-locked host memory (a CPU tensor).
  Tensor pin_memory() const;

  // The value of a one-element tensor. The one place a step is allowed to wait for the device.
  double item() const;
  template <class T>
  T item() const {
    return static_cast<T>(item());
  }
  // All elements, converted to T, in row-major order (copies to the host, syncs).
  template <class T>
  std::vector<T> to_vector() const;

  // ---- arithmetic (kernels/tensor_methods.cpp; the operators live in kernels/functional.h) ----
  Tensor add(const Tensor& other) const;
  Tensor sub(const Tensor& other) const;
  Tensor mul(const Tensor& other) const;
  Tensor div(const Tensor& other) const;

  // ---- in-place (no autograd; an error on a tensor that requires grad in grad mode) ----
  Tensor& fill_(double value);
  Tensor& zero_() { return fill_(0.0); }
  Tensor& copy_(const Tensor& src, bool non_blocking = false);
  Tensor& add_(const Tensor& other, double alpha = 1.0);
  Tensor& add_(double value);  // one launch (add_scalar in place), integer tensors included
  Tensor& mul_(double value);

  // Printing (syncs: reads the values).
  std::string str() const;

 private:
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// Uninitialised tensor (contiguous).
Tensor empty(const Shape& shape, const TensorOptions& options = {});
// Uninitialised tensor with the given strides (the storage covers the largest offset).
Tensor empty_strided(const Shape& shape, const Strides& strides, const TensorOptions& options = {});
Tensor empty_like(const Tensor& t);
// A new TensorImpl on the storage of `base` (no autograd, no checks beyond bounds).
Tensor make_view(const Tensor& base, const Shape& shape, const Strides& strides, int64_t offset);
// The same, reading the storage's bytes as `dtype` (offset in its elements, so aligned to them):
// one allocation holding tensors of several dtypes, e.g. a batch's images and labels moved to
// the device in one copy (data/data_loader.cpp).
Tensor make_view(const Tensor& base, DType dtype, const Shape& shape, const Strides& strides, int64_t offset);
// Wraps host memory that outlives the tensor (no copy, no ownership).
Tensor from_blob(void* data, const Shape& shape, DType dtype, Device device = kCPU);

// The number of bytes a strided tensor's storage must span.
int64_t storage_span(const Shape& shape, const Strides& strides);

}  // namespace ember
