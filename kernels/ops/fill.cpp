#include "kernels/ops/fill.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/parallel.h"
#include "kernels/common/cpu_loops.h"
#include "kernels/functional.h"
#include "kernels/registry.h"

namespace ember {

namespace {

std::vector<TensorSpec> infer_inplace_self(std::span<const Tensor> in, const Attrs&) {
  EMBER_CHECK(in.size() == 1, "expects the tensor to write into as the only input");
  return {{in[0].shape(), in[0].dtype(), in[0].strides(), 0}};
}

void fill_cpu(const KernelCall& c) {
  const Tensor& t = c.out[0];
  double v = c.attr<ScalarAttrs>().value;
  ElementwiseLayout L = make_layout({&t});
  EMBER_DISPATCH_ALL(t.dtype(), "fill",
                     [&] { cpu_map<scalar_t>(L, {&t}, FillFn<scalar_t>{convert<scalar_t, double>(v)}); });
}

// Each tensor dense, all on one device; each output is its input.
std::vector<TensorSpec> infer_zero_many(std::span<const Tensor> in, const Attrs&) {
  std::vector<TensorSpec> out;
  for (size_t i = 0; i < in.size(); ++i) {
    const Tensor& t = in[i];
    EMBER_CHECK(t.defined(), "zero_many: tensor ", i, " is undefined");
    // the kernels clear each tensor's bytes as one flat range, which any dense layout is
    EMBER_CHECK(t.is_non_overlapping_and_dense(), "zero_many: tensor ", i, " is ", t.describe(),
                "; it must be dense (contiguous or a permutation of it, such as channels-last)");
    EMBER_CHECK(t.device() == in[0].device(), "zero_many: tensor ", i, " is on ", t.device(), ", tensor 0 on ",
                in[0].device(), "; one call zeroes the tensors of one device");
    out.push_back({t.shape(), t.dtype(), t.strides(), static_cast<int>(i)});
  }
  return out;
}

void zero_many_cpu(const KernelCall& c) {
  for (const Tensor& t : c.out)
    if (t.numel() > 0) std::memset(t.data_ptr(), 0, t.nbytes());
}

Cost zero_many_cost(const KernelCall& c) {
  double b = 0;
  for (const Tensor& t : c.out) b += static_cast<double>(t.nbytes());
  return {b, 0};
}

std::vector<TensorSpec> infer_arange(std::span<const Tensor> in, const Attrs& a) {
  EMBER_CHECK(in.size() == 1 && in[0].is_contiguous(), "arange: expects one contiguous tensor to fill");
  return {{in[0].shape(), in[0].dtype(), {}, 0}};
}

void arange_cpu(const KernelCall& c) {
  const Tensor& t = c.out[0];
  const ArangeAttrs& a = c.attr<ArangeAttrs>();
  EMBER_DISPATCH_NUMERIC(t.dtype(), "arange", [&] {
    scalar_t* p = static_cast<scalar_t*>(t.data_ptr());
    parallel_for(0, t.numel(), 65536, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) p[i] = convert<scalar_t, double>(a.start + static_cast<double>(i) * a.step);
    });
  });
}

Cost write_cost(const KernelCall& c) { return {static_cast<double>(c.out[0].nbytes()), 0}; }

}  // namespace

void define_op_fill(OpInfo& info) {
  info.doc = "set every element to a value (in place)";
  info.infer = infer_inplace_self;
  info.cost = write_cost;
  info.contiguous_inputs = false;
  info.add_variant({.name = "cpu", .device = DeviceType::cpu, .fn = fill_cpu, .note = "generic CPU elementwise loop"});
}

void define_op_zero_many(OpInfo& info) {
  info.doc = "zero several dense tensors in place (one multi-tensor launch on CUDA)";
  info.infer = infer_zero_many;
  info.cost = zero_many_cost;
  info.contiguous_inputs = false;  // dense layouts reach the kernels as they are (infer_zero_many)
  info.add_variant(
      {.name = "cpu", .device = DeviceType::cpu, .fn = zero_many_cpu, .note = "memset of each tensor's bytes"});
}

void define_op_arange(OpInfo& info) {
  info.doc = "start + i * step (in place)";
  info.infer = infer_arange;
  info.cost = write_cost;
  info.add_variant({.name = "cpu",
                    .device = DeviceType::cpu,
                    .fn = arange_cpu,
                    .dtypes = kNumericTypes,
                    .note = "parallel CPU loop"});
}

// ---- factories ----

Tensor full(const Shape& shape, double value, const TensorOptions& o) { return empty(shape, o).fill_(value); }
Tensor zeros(const Shape& shape, const TensorOptions& o) { return full(shape, 0.0, o); }
Tensor ones(const Shape& shape, const TensorOptions& o) { return full(shape, 1.0, o); }
Tensor zeros_like(const Tensor& t) { return empty_like(t).fill_(0.0); }
Tensor ones_like(const Tensor& t) { return empty_like(t).fill_(1.0); }
Tensor full_like(const Tensor& t, double v) { return empty_like(t).fill_(v); }
Tensor scalar_tensor(double value, const TensorOptions& o) { return full({}, value, o); }

void zero_many_(const std::vector<Tensor>& tensors) {
  // one call per device (as a rule there is one); a tensor that is not dense (a strided view) is
  // zeroed on its own
  std::vector<std::vector<Tensor>> by_device;
  for (const Tensor& t : tensors) {
    EMBER_CHECK(t.defined(), "zero_many_: an undefined tensor");
    if (!t.is_non_overlapping_and_dense()) {
      Tensor view = t;
      view.zero_();
      continue;
    }
    auto same = std::find_if(by_device.begin(), by_device.end(),
                             [&](const std::vector<Tensor>& g) { return g[0].device() == t.device(); });
    if (same == by_device.end()) by_device.push_back({t});
    else same->push_back(t);
  }
  for (const std::vector<Tensor>& ts : by_device) call_into(OpId::zero_many, ts, ts);
}

Tensor arange(double end, const TensorOptions& o) { return arange(0, end, 1, o); }

Tensor arange(double start, double end, double step, const TensorOptions& o) {
  EMBER_CHECK(step != 0, "arange: step must be non-zero");
  EMBER_CHECK(std::isfinite(start) && std::isfinite(end) && std::isfinite(step), "arange: non-finite bounds");
  EMBER_CHECK((end - start) / step >= 0 || start == end, "arange: step ", step, " goes away from end (start ", start,
              ", end ", end, ")");
  auto n = static_cast<int64_t>(std::ceil((end - start) / step));
  Tensor t = empty({std::max<int64_t>(n, 0)}, o);
  call_into(OpId::arange, {t}, {t}, ArangeAttrs{start, step});
  return t;
}

Tensor tensor(const std::vector<double>& values, const Shape& shape, const TensorOptions& o) {
  EMBER_CHECK(static_cast<int64_t>(values.size()) == shape.numel(), "tensor: ", values.size(),
              " values do not fill shape ", shape);
  Tensor host = empty(shape, TensorOptions(DType::f64));
  std::copy(values.begin(), values.end(), host.data<double>());
  Tensor t = host.to(o.dtype_).to(o.device_);
  if (t.is_same(host)) t = host;
  if (o.requires_grad_) t.requires_grad_(true);
  return t;
}

Tensor tensor(const std::vector<double>& values, const TensorOptions& o) {
  return tensor(values, {static_cast<int64_t>(values.size())}, o);
}

Tensor tensor_i64(const std::vector<int64_t>& values, const Shape& shape, Device device) {
  EMBER_CHECK(static_cast<int64_t>(values.size()) == shape.numel(), "tensor_i64: ", values.size(),
              " values do not fill shape ", shape);
  Tensor host = empty(shape, TensorOptions(DType::i64));
  std::copy(values.begin(), values.end(), host.data<int64_t>());
  return host.to(device);
}

}  // namespace ember
