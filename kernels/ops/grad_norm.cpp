// total_norm and clip_by_total_norm on the CPU (the specification). See grad_norm.h.
#include "kernels/ops/grad_norm.h"

#include <map>

#include "core/autograd/node.h"
#include "kernels/functional.h"
#include "kernels/ops/copy.h"
#include "kernels/registry.h"

namespace ember {

namespace {

void check_norm_type(double p) {
  EMBER_CHECK(!std::isnan(p) && (p >= 0 || std::isinf(p)) && !(std::isinf(p) && p < 0),
              "total_norm: norm_type must be >= 0 or inf, got ", p);
}

std::vector<TensorSpec> infer_total_norm(std::span<const Tensor> in, const Attrs& attrs) {
  check_norm_type(attrs.get<TotalNormAttrs>().norm_type);
  EMBER_CHECK(!in.empty(), "total_norm: expects at least one tensor");
  const Tensor& x0 = in[0];
  for (size_t i = 0; i < in.size(); ++i) {
    const Tensor& t = in[i];
    EMBER_CHECK(t.defined(), "total_norm: tensor ", i, " is undefined");
    EMBER_CHECK(is_floating(t.dtype()) && t.dtype() == x0.dtype(), "total_norm: tensor ", i, " is ", t.describe(),
                " but tensor 0 is ", x0.describe(), "; one call takes tensors of one floating dtype");
  }
  return {{Shape{}, x0.dtype() == DType::f64 ? DType::f64 : DType::f32, {}}};
}

void total_norm_cpu(const KernelCall& c) {
  const double p = c.attr<TotalNormAttrs>().norm_type;
  const int kind = norm_detail::kind_of(p);
  double acc = 0;
  EMBER_DISPATCH_FLOAT(c.in[0].dtype(), "total_norm", [&] {
    for (const Tensor& t : c.in) {
      const scalar_t* x = t.data<scalar_t>();
      for (int64_t i = 0; i < t.numel(); ++i)
        acc = norm_detail::combine(acc, norm_detail::term(convert<double, scalar_t>(x[i]), kind, p), kind);
    }
  });
  double r = norm_detail::finish(acc, kind, p);
  Tensor& out = c.out[0];
  if (out.dtype() == DType::f64) out.data<double>()[0] = r;
  else out.data<float>()[0] = static_cast<float>(r);
}

std::vector<TensorSpec> infer_clip(std::span<const Tensor> in, const Attrs& attrs) {
  double max_norm = attrs.get<ClipByNormAttrs>().max_norm;
  EMBER_CHECK(!std::isnan(max_norm), "clip_by_total_norm: max_norm is NaN");
  EMBER_CHECK(in.size() >= 1 && in[0].defined(), "clip_by_total_norm: expects the total norm, then the tensors");
  const Tensor& norm = in[0];
  EMBER_CHECK((norm.dtype() == DType::f32 || norm.dtype() == DType::f64) && norm.numel() == 1,
              "clip_by_total_norm: the norm must be one f32 or f64 element, got ", norm.describe());
  std::vector<TensorSpec> out;
  for (size_t i = 1; i < in.size(); ++i) {
    const Tensor& t = in[i];
    EMBER_CHECK(t.defined() && is_floating(t.dtype()), "clip_by_total_norm: tensor ", i - 1, " must be floating, got ",
                t.defined() ? t.describe() : std::string("undefined"));
    EMBER_CHECK(t.dtype() == in[1].dtype(), "clip_by_total_norm: tensor ", i - 1, " is ", t.dtype(),
                " but tensor 0 is ", in[1].dtype());
    EMBER_CHECK(t.device() == norm.device(), "clip_by_total_norm: tensor ", i - 1, " is on ", t.device(),
                " but the norm is on ", norm.device());
    EMBER_CHECK(t.is_contiguous(), "clip_by_total_norm: tensor ", i - 1, " (", t.describe(), ") must be contiguous");
    out.push_back({t.shape(), t.dtype(), {}, static_cast<int>(i)});
  }
  return out;
}

void clip_cpu(const KernelCall& c) {
  if (c.in.size() < 2) return;
  const double max_norm = c.attr<ClipByNormAttrs>().max_norm;
  const Tensor& norm = c.in[0];
  EMBER_DISPATCH_FLOAT(c.in[1].dtype(), "clip_by_total_norm", [&] {
    using A = acc_t<scalar_t>;
    A coef = norm.dtype() == DType::f64
                 ? static_cast<A>(norm_detail::clip_coef<double>(norm.data<double>()[0], max_norm))
                 : static_cast<A>(norm_detail::clip_coef<float>(norm.data<float>()[0], max_norm));
    for (size_t k = 1; k < c.in.size(); ++k) {
      scalar_t* x = static_cast<scalar_t*>(c.in[k].data_ptr());
      for (int64_t i = 0; i < c.in[k].numel(); ++i) x[i] = convert<scalar_t, A>(convert<A, scalar_t>(x[i]) * coef);
    }
  });
}

Cost total_norm_cost(const KernelCall& c) {
  double b = 0, n = 0;
  for (const Tensor& t : c.in) {
    b += static_cast<double>(t.nbytes());
    n += static_cast<double>(t.numel());
  }
  return {b, 2 * n};
}
Cost clip_cost(const KernelCall& c) {
  double b = 0, n = 0;
  for (size_t i = 1; i < c.in.size(); ++i) {
    b += 2.0 * static_cast<double>(c.in[i].nbytes());
    n += static_cast<double>(c.in[i].numel());
  }
  return {b, n};
}

}  // namespace

void define_op_total_norm(OpInfo& info) {
  info.doc = "p-norm over a list of tensors (f64 accumulation, deterministic)";
  info.infer = infer_total_norm;
  info.cost = total_norm_cost;
  info.autocast = AutocastPolicy::none;
  info.add_variant({.name = "cpu",
                    .device = DeviceType::cpu,
                    .fn = total_norm_cpu,
                    .dtypes = kFloatTypes,
                    .note = "serial f64 accumulation"});
}

void define_op_clip_by_total_norm(OpInfo& info) {
  info.doc = "x *= min(1, max_norm / (norm + 1e-6)) over a list of tensors, in place";
  info.infer = infer_clip;
  info.cost = clip_cost;
  info.contiguous_inputs = false;
  info.add_variant(
      {.name = "cpu", .device = DeviceType::cpu, .fn = clip_cpu, .dtypes = kFloatTypes, .note = "loop over tensors"});
}

// ---- functional ----

Tensor total_norm(const std::vector<Tensor>& tensors, double norm_type) {
  check_norm_type(norm_type);
  EMBER_CHECK(!tensors.empty(), "total_norm: expects at least one tensor");
  autograd::NoGradGuard no_grad;
  // One call per (device, dtype) bucket; the bucket norms are then combined on the first device.
  std::map<std::pair<int, int>, std::vector<Tensor>> buckets;
  std::vector<std::pair<int, int>> order;
  for (const Tensor& t : tensors) {
    EMBER_CHECK(t.defined(), "total_norm: undefined tensor in the list");
    std::pair<int, int> key{static_cast<int>(t.device().type) * 256 + t.device().index, static_cast<int>(t.dtype())};
    if (!buckets.count(key)) order.push_back(key);
    buckets[key].push_back(t);
  }
  if (order.size() == 1) return call1(OpId::total_norm, tensors, TotalNormAttrs{norm_type});
  Device dev = tensors[0].device();
  std::vector<Tensor> norms;
  bool any_f64 = false;
  for (const auto& key : order) {
    Tensor nrm = call1(OpId::total_norm, buckets[key], TotalNormAttrs{norm_type});
    any_f64 = any_f64 || nrm.dtype() == DType::f64;
    norms.push_back(nrm);
  }
  DType dt = any_f64 ? DType::f64 : DType::f32;
  // Asynchronous only towards a GPU: a device-to-host copy must land before the CPU reads it.
  for (Tensor& n : norms) n = n.to(dev, dt, /*non_blocking=*/dev.is_cuda());
  // the norm of the bucket norms (counts of nonzeros add up)
  return call1(OpId::total_norm, norms, TotalNormAttrs{norm_type == 0 ? 1.0 : norm_type});
}

void clip_by_total_norm_(const std::vector<Tensor>& tensors, const Tensor& norm, double max_norm) {
  autograd::NoGradGuard no_grad;
  std::map<std::pair<int, int>, std::vector<Tensor>> buckets;
  for (const Tensor& t : tensors) {
    EMBER_CHECK(t.defined(), "clip_by_total_norm_: undefined tensor in the list");
    buckets[{static_cast<int>(t.device().type) * 256 + t.device().index, static_cast<int>(t.dtype())}].push_back(t);
  }
  for (auto& [key, list] : buckets) {
    const Device d = list[0].device();
    Tensor nrm = norm.device() == d ? norm : norm.to(d, /*non_blocking=*/d.is_cuda());
    std::vector<Tensor> in{nrm};
    in.insert(in.end(), list.begin(), list.end());
    call(OpId::clip_by_total_norm, std::move(in), ClipByNormAttrs{max_norm});
  }
}

}  // namespace ember
