// Tensor methods that compute (see Note [where tensor methods live] in core/tensor.h).
#include <cmath>
#include <cstdio>
#include <sstream>

#include "core/autograd/node.h"
#include "core/cuda/runtime.h"
#include "core/runtime.h"
#include "kernels/functional.h"
#include "kernels/registry.h"

namespace ember {

Tensor Tensor::to(DType t) const {
  EMBER_CHECK(defined(), "to(", t, ") of an undefined tensor (e.g. the grad() of a tensor that got no gradient)");
  if (t == dtype()) return *this;
  return cast(*this, t);
}

Tensor Tensor::to(Device d, bool non_blocking) const {
  EMBER_CHECK(defined(), "to(", d, ") of an undefined tensor (e.g. the grad() of a tensor that got no gradient)");
  if (d == device()) return *this;
  EMBER_CHECK(!d.is_cuda() || d.index < cuda::device_count(), "to(", d, "): ",
              cuda::device_count() == 0 ? cuda::unavailable_reason()
                                        : "no such device (" + std::to_string(cuda::device_count()) + " CUDA devices)");
  // The memory format is kept (PyTorch's preserve_format): a dense tensor, e.g. channels-last,
  // moves as it is laid out; anything else is made contiguous first.
  const bool dense = is_non_overlapping_and_dense();
  Tensor src = dense ? *this : contiguous();
  // Device-to-host with non_blocking lands in pinned memory so the copy can be asynchronous; the
  // caller synchronises before reading (as in PyTorch).
  bool pinned_dst = d.is_cpu() && non_blocking && cuda::device_count() > 0;
  const TensorOptions opts = TensorOptions().dtype(dtype()).device(d).pinned_memory(pinned_dst);
  Tensor dst = dense && !is_contiguous() ? empty_strided(shape(), src.strides(), opts) : empty(shape(), opts);
  ember::copy_(dst, src, non_blocking);
  if (requires_grad() && autograd::grad_mode_enabled()) {
    // Cross-device copies are differentiable: the gradient goes back to the source device.
    struct ToDeviceBackward final : autograd::Node {
      Device src_device;
      std::string name() const override { return "ToDeviceBackward"; }
      std::vector<Tensor> apply(std::vector<Tensor>&& grads) override {
        if (!grads[0].defined()) return {Tensor()};
        return {grads[0].to(src_device)};
      }
    };
    auto node = std::make_shared<ToDeviceBackward>();
    node->src_device = device();
    node->next_edges.push_back(autograd::gradient_edge(*this));
    autograd::set_history(node, {dst});
  }
  return dst;
}

Tensor Tensor::to(Device d, DType t, bool non_blocking) const {
  // Convert on the side where the data is smaller, so uint8 images travel as uint8.
  if (dtype_size(t) < element_size()) return to(t).to(d, non_blocking);
  return to(d, non_blocking).to(t);
}

Tensor Tensor::pin_memory() const {
  EMBER_CHECK(is_cpu(), "pin_memory() is for CPU tensors; got ", describe());
  if (is_pinned()) return *this;
  Tensor dst = empty(shape(), TensorOptions().dtype(dtype()).pinned_memory(cuda::device_count() > 0));
  Tensor d = dst;
  ember::copy_(d, *this);
  return dst;
}

double Tensor::item() const {
  EMBER_CHECK(numel() == 1, "item() needs a tensor with exactly one element; got ", describe());
  Tensor c = *this;
  if (is_cuda()) {
    runtime::note_host_sync("item()");
    runtime::AllowSyncScope allow;  // reported once above, not again for the copy
    c = to(kCPU);
  }
  const void* p = c.data_ptr();
  switch (c.dtype()) {
    case DType::f32: return *static_cast<const float*>(p);
    case DType::f64: return *static_cast<const double*>(p);
    case DType::f16: return static_cast<float>(*static_cast<const Half*>(p));
    case DType::bf16: return static_cast<float>(*static_cast<const BFloat16*>(p));
    case DType::i32: return *static_cast<const int32_t*>(p);
    case DType::i64: return static_cast<double>(*static_cast<const int64_t*>(p));
    case DType::u8: return *static_cast<const uint8_t*>(p);
    case DType::boolean: return *static_cast<const bool*>(p) ? 1.0 : 0.0;
  }
  return 0;
}

template <class T>
std::vector<T> Tensor::to_vector() const {
  Tensor c = to(kCPU).contiguous();
  std::vector<T> out(static_cast<size_t>(c.numel()));
  EMBER_DISPATCH_ALL(c.dtype(), "to_vector", [&] {
    const scalar_t* p = static_cast<const scalar_t*>(c.data_ptr());
    for (size_t i = 0; i < out.size(); ++i) {
      if constexpr (std::is_same_v<scalar_t, Half> || std::is_same_v<scalar_t, BFloat16>)
        out[i] = static_cast<T>(static_cast<float>(p[i]));
      else out[i] = static_cast<T>(p[i]);
    }
  });
  return out;
}
template std::vector<float> Tensor::to_vector<float>() const;
template std::vector<double> Tensor::to_vector<double>() const;
template std::vector<int32_t> Tensor::to_vector<int32_t>() const;
template std::vector<int64_t> Tensor::to_vector<int64_t>() const;
template std::vector<uint8_t> Tensor::to_vector<uint8_t>() const;
template std::vector<bool> Tensor::to_vector<bool>() const;

// ---- in-place ----

Tensor& Tensor::fill_(double value) {
  call_into(OpId::fill, {*this}, {*this}, ScalarAttrs{value});
  return *this;
}

Tensor& Tensor::copy_(const Tensor& src, bool non_blocking) {
  ember::copy_(*this, src, non_blocking);
  return *this;
}

Tensor& Tensor::add_(const Tensor& other, double alpha) {
  Tensor o = alpha == 1.0 ? other : ember::mul(other, alpha);
  if (o.dtype() != dtype()) o = o.to(dtype());
  call_into(OpId::add, {*this, o}, {*this});
  return *this;
}

Tensor& Tensor::add_(double value) {
  call_into(OpId::add_scalar, {*this}, {*this}, ScalarAttrs{value});
  return *this;
}

Tensor& Tensor::mul_(double value) {
  call_into(OpId::mul_scalar, {*this}, {*this}, ScalarAttrs{value});
  return *this;
}

Tensor Tensor::add(const Tensor& o) const { return ember::add(*this, o); }
Tensor Tensor::sub(const Tensor& o) const { return ember::sub(*this, o); }
Tensor Tensor::mul(const Tensor& o) const { return ember::mul(*this, o); }
Tensor Tensor::div(const Tensor& o) const { return ember::div(*this, o); }

// ---- printing ----

namespace {

std::string format_value(double v, DType t, int precision) {
  char buf[64];
  if (is_floating(t)) {
    if (std::isnan(v)) return "nan";
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
    std::snprintf(buf, sizeof buf, "%.*f", precision, v);
  } else if (t == DType::boolean) {
    return v != 0 ? "true" : "false";
  } else {
    std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(v));
  }
  return buf;
}

void print_rec(std::ostringstream& os, const std::vector<double>& v, const Shape& shape, const Strides& st, int dim,
               int64_t off, DType t, int precision, bool summarize, int indent) {
  constexpr int64_t kEdge = 3;
  if (dim == shape.size()) {
    os << format_value(v[static_cast<size_t>(off)], t, precision);
    return;
  }
  os << '[';
  int64_t n = shape[dim];
  for (int64_t i = 0; i < n; ++i) {
    if (summarize && n > 2 * kEdge && i == kEdge) {
      os << "...";
      i = n - kEdge - 1;
      if (dim + 1 < shape.size()) os << ",\n" << std::string(static_cast<size_t>(indent + dim + 1), ' ');
      else os << ", ";
      continue;
    }
    print_rec(os, v, shape, st, dim + 1, off + i * st[dim], t, precision, summarize, indent);
    if (i + 1 < n) {
      if (dim + 1 < shape.size()) os << ",\n" << std::string(static_cast<size_t>(indent + dim + 1), ' ');
      else os << ", ";
    }
  }
  os << ']';
}

}  // namespace

std::string Tensor::str() const {
  if (!defined()) return "tensor(undefined)";
  std::ostringstream os;
  os << "tensor(";
  if (numel() == 0) {
    os << "[]";
    if (dim() > 1) os << ", size=" << shape();
    if (dtype() != kDefaultFloat && dtype() != DType::i64) os << ", dtype=" << dtype();
    if (!is_cpu()) os << ", device=" << device();
    os << ')';
    return os.str();
  }
  std::vector<double> v = to_vector<double>();
  bool summarize = numel() > 1000;
  int precision = 4;
  if (is_floating(dtype())) {
    // integers-valued floats print with one decimal place, like PyTorch's "1." style
    bool all_int = true;
    for (double x : v)
      if (std::isfinite(x) && x != std::floor(x)) all_int = false;
    if (all_int) precision = 1;
  }
  print_rec(os, v, shape(), contiguous_strides(shape()), 0, 0, dtype(), precision, summarize, 7);
  if (dtype() != kDefaultFloat && dtype() != DType::i64) os << ", dtype=" << dtype();
  if (!is_cpu()) os << ", device=" << device();
  if (grad_fn()) os << ", grad_fn=<" << grad_fn()->name() << ">";
  else if (requires_grad()) os << ", requires_grad=true";
  os << ')';
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.str(); }

}  // namespace ember
