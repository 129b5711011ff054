// sgd_step and adam_step: shape checks, the CPU loops (the specification), costs and the
// functional entry points. Formulas and the hyperparameter protocol: kernels/ops/optim.h.
#include "kernels/ops/optim.h"

#include <cmath>

#include "core/autograd/node.h"
#include "core/parallel.h"
#include "kernels/functional.h"
#include "kernels/registry.h"

namespace ember {

namespace {

using namespace optim_layout;

// Checks the scalar inputs shared by both ops and returns the device.
Device check_scalars(const char* op, std::span<const Tensor> in, int hyper_len) {
  const Tensor& hyper = in[kHyper];
  EMBER_CHECK(hyper.defined(), op, ": the hyperparameter tensor is undefined");
  EMBER_CHECK(hyper.dtype() == DType::f64 && hyper.numel() == hyper_len && hyper.is_contiguous(), op,
              ": hyperparameters must be a contiguous f64 tensor of ", hyper_len, " values, got ", hyper.describe());
  for (int k : {kFoundInf, kInvScale}) {
    const Tensor& t = in[k];
    if (!t.defined()) continue;
    EMBER_CHECK(t.dtype() == DType::f32 && t.numel() == 1, op, ": ", k == kFoundInf ? "found_inf" : "inv_scale",
                " must be an f32 tensor of one element, got ", t.describe());
    EMBER_CHECK(t.device() == hyper.device(), op, ": ", k == kFoundInf ? "found_inf" : "inv_scale", " is on ",
                t.device(), " but the hyperparameters are on ", hyper.device());
  }
  if (const Tensor& t = in[kClipNorm]; t.defined()) {
    EMBER_CHECK((t.dtype() == DType::f32 || t.dtype() == DType::f64) && t.numel() == 1 && t.is_contiguous(), op,
                ": clip_norm (the total norm clipping scales by) must be one f32 or f64 element, got ", t.describe());
    EMBER_CHECK(t.device() == hyper.device(), op, ": clip_norm is on ", t.device(), " but the hyperparameters are on ",
                hyper.device());
  }
  if (const Tensor& t = in[kTicket]; t.defined()) {
    EMBER_CHECK(t.dtype() == DType::i32 && t.numel() == 1 && t.is_contiguous(), op,
                ": the ticket must be an int32 tensor of one element, got ", t.describe());
    EMBER_CHECK(t.device() == hyper.device(), op, ": the ticket is on ", t.device(), " but the hyperparameters are on ",
                hyper.device());
  }
  return hyper.device();
}

// Checks list `list` (0 = params, 1 = grads, ...) of n tensors against the params.
void check_list(const char* op, const char* what, std::span<const Tensor> in, int64_t n, int list, Device dev) {
  for (int64_t i = 0; i < n; ++i) {
    const Tensor& p = in[static_cast<size_t>(kFirstTensor + i)];
    const Tensor& t = in[static_cast<size_t>(kFirstTensor + list * n + i)];
    EMBER_CHECK(t.defined(), op, ": ", what, " ", i, " is undefined");
    EMBER_CHECK(t.device() == dev, op, ": ", what, " ", i, " is on ", t.device(), " but the hyperparameters are on ",
                dev, "; every tensor of one step must be on one device");
    EMBER_CHECK(t.is_contiguous(), op, ": ", what, " ", i, " (", t.describe(), ") must be contiguous");
    if (list == 0) {
      EMBER_CHECK(is_floating(t.dtype()), op, ": parameter ", i, " must be floating, got ", t.describe());
      const Tensor& p0 = in[static_cast<size_t>(kFirstTensor)];
      EMBER_CHECK(t.dtype() == p0.dtype(), op, ": parameter ", i, " is ", t.dtype(), " but parameter 0 is ", p0.dtype(),
                  "; one call updates parameters of one dtype (the optimizer groups them)");
    } else {
      EMBER_CHECK(t.shape() == p.shape() && t.dtype() == p.dtype(), op, ": ", what, " ", i, " is ", t.describe(),
                  " but parameter ", i, " is ", p.describe());
    }
  }
}

void check_steps(const char* op, std::span<const Tensor> in, int64_t n, int list, Device dev) {
  for (int64_t i = 0; i < n; ++i) {
    const Tensor& t = in[static_cast<size_t>(kFirstTensor + list * n + i)];
    EMBER_CHECK(t.defined() && t.dtype() == DType::f32 && t.numel() == 1 && t.device() == dev, op, ": step counter ", i,
                " must be an f32 scalar on ", dev, ", got ", t.defined() ? t.describe() : std::string("undefined"));
  }
}

int sgd_lists(const SgdStepAttrs& a) { return a.momentum_buffers ? 4 : 2; }
int adam_lists(const AdamStepAttrs& a) { return a.amsgrad ? 6 : 5; }

std::vector<TensorSpec> alias_specs(std::span<const Tensor> in, int64_t n, std::initializer_list<int> lists) {
  std::vector<TensorSpec> out;
  for (int list : lists)
    for (int64_t i = 0; i < n; ++i) {
      int idx = static_cast<int>(kFirstTensor + list * n + i);
      const Tensor& t = in[static_cast<size_t>(idx)];
      out.push_back({t.shape(), t.dtype(), {}, idx});
    }
  return out;
}

std::vector<TensorSpec> infer_sgd(std::span<const Tensor> in, const Attrs& attrs) {
  const auto& a = attrs.get<SgdStepAttrs>();
  EMBER_CHECK(a.n >= 0, "sgd_step: negative parameter count ", a.n);
  const int lists = sgd_lists(a);
  EMBER_CHECK(static_cast<int64_t>(in.size()) == kFirstTensor + lists * a.n, "sgd_step: expects ", kFirstTensor,
              " scalar inputs and ", lists, " lists of ", a.n, " tensors, got ", in.size(), " inputs");
  EMBER_CHECK(!in[kClipNorm].defined() || !std::isnan(a.max_norm), "sgd_step: max_norm is NaN");
  Device dev = check_scalars("sgd_step", in, kSgdHyper);
  check_list("sgd_step", "parameter", in, a.n, 0, dev);
  check_list("sgd_step", "gradient", in, a.n, 1, dev);
  if (a.momentum_buffers) {
    check_list("sgd_step", "momentum buffer", in, a.n, 2, dev);
    check_steps("sgd_step", in, a.n, 3, dev);
    return alias_specs(in, a.n, {0, 2, 3});
  }
  return alias_specs(in, a.n, {0});
}

std::vector<TensorSpec> infer_adam(std::span<const Tensor> in, const Attrs& attrs) {
  const auto& a = attrs.get<AdamStepAttrs>();
  EMBER_CHECK(a.n >= 0, "adam_step: negative parameter count ", a.n);
  const int lists = adam_lists(a);
  EMBER_CHECK(static_cast<int64_t>(in.size()) == kFirstTensor + lists * a.n, "adam_step: expects ", kFirstTensor,
              " scalar inputs and ", lists, " lists of ", a.n, " tensors, got ", in.size(), " inputs");
  EMBER_CHECK(!in[kClipNorm].defined() || !std::isnan(a.max_norm), "adam_step: max_norm is NaN");
  Device dev = check_scalars("adam_step", in, kAdamHyper);
  check_list("adam_step", "parameter", in, a.n, 0, dev);
  check_list("adam_step", "gradient", in, a.n, 1, dev);
  check_list("adam_step", "exp_avg", in, a.n, 2, dev);
  check_list("adam_step", "exp_avg_sq", in, a.n, 3, dev);
  if (a.amsgrad) {
    check_list("adam_step", "max_exp_avg_sq", in, a.n, 4, dev);
    check_steps("adam_step", in, a.n, 5, dev);
    return alias_specs(in, a.n, {0, 2, 3, 4, 5});
  }
  check_steps("adam_step", in, a.n, 4, dev);
  return alias_specs(in, a.n, {0, 2, 3, 4});
}

// found_inf / inv_scale as host values (CPU tensors).
bool skip_step(const KernelCall& c) {
  const Tensor& f = c.in[kFoundInf];
  return f.defined() && f.data<float>()[0] != 0.0f;
}
// inv_scale and the clipping coefficient (Note [clipping folded into the step]) as host values.
GradFactors grad_factors(const KernelCall& c, double max_norm) {
  GradFactors f;
  if (const Tensor& s = c.in[kInvScale]; s.defined()) f.inv_scale = static_cast<double>(s.data<float>()[0]);
  if (const Tensor& n = c.in[kClipNorm]; n.defined()) {
    f.clip = true;
    f.clip_coef = n.dtype() == DType::f64 ? step_clip_coef(nullptr, n.data<double>(), max_norm)
                                          : step_clip_coef(n.data<float>(), nullptr, max_norm);
  }
  return f;
}

template <class T>
T* ptr(const KernelCall& c, int64_t n, int list, int64_t i) {
  return static_cast<T*>(c.in[static_cast<size_t>(kFirstTensor + list * n + i)].data_ptr());
}
float* step_ptr(const KernelCall& c, int64_t n, int list, int64_t i) { return ptr<float>(c, n, list, i); }
int64_t numel_of(const KernelCall& c, int64_t i) { return c.in[static_cast<size_t>(kFirstTensor + i)].numel(); }

constexpr int64_t kGrain = 32768;

void sgd_cpu(const KernelCall& c) {
  const auto& a = c.attr<SgdStepAttrs>();
  if (a.n == 0 || skip_step(c)) return;
  const double* hyper = c.in[kHyper].data<double>();
  const GradFactors factors = grad_factors(c, a.max_norm);
  const bool scale = c.in[kInvScale].defined();
  EMBER_DISPATCH_FLOAT(c.in[kFirstTensor].dtype(), "sgd_step", [&] {
    using A = acc_t<scalar_t>;
    for (int64_t i = 0; i < a.n; ++i) {
      float step = 0;
      if (a.momentum_buffers) {
        float* st = step_ptr(c, a.n, 3, i);
        *st += 1.0f;
        step = *st;
      }
      SgdScalars<A> s = make_sgd_scalars<A>(hyper, factors, step, a);
      scalar_t* p = ptr<scalar_t>(c, a.n, 0, i);
      const scalar_t* g = ptr<scalar_t>(c, a.n, 1, i);
      scalar_t* buf = a.momentum_buffers ? ptr<scalar_t>(c, a.n, 2, i) : nullptr;
      parallel_for(0, numel_of(c, i), kGrain, [&](int64_t b, int64_t e) {
        for (int64_t j = b; j < e; ++j) sgd_update<scalar_t, A>(p, g, buf, j, s, scale);
      });
    }
  });
}

void adam_cpu(const KernelCall& c) {
  const auto& a = c.attr<AdamStepAttrs>();
  if (a.n == 0 || skip_step(c)) return;
  const double* hyper = c.in[kHyper].data<double>();
  const GradFactors factors = grad_factors(c, a.max_norm);
  const bool scale = c.in[kInvScale].defined();
  const int step_list = a.amsgrad ? 5 : 4;
  EMBER_DISPATCH_FLOAT(c.in[kFirstTensor].dtype(), "adam_step", [&] {
    using A = acc_t<scalar_t>;
    for (int64_t i = 0; i < a.n; ++i) {
      float* st = step_ptr(c, a.n, step_list, i);
      *st += 1.0f;
      AdamScalars<A> s = make_adam_scalars<A>(hyper, factors, *st, a);
      scalar_t* p = ptr<scalar_t>(c, a.n, 0, i);
      const scalar_t* g = ptr<scalar_t>(c, a.n, 1, i);
      scalar_t* m = ptr<scalar_t>(c, a.n, 2, i);
      scalar_t* v = ptr<scalar_t>(c, a.n, 3, i);
      scalar_t* vmax = a.amsgrad ? ptr<scalar_t>(c, a.n, 4, i) : nullptr;
      parallel_for(0, numel_of(c, i), kGrain, [&](int64_t b, int64_t e) {
        for (int64_t j = b; j < e; ++j) adam_update<scalar_t, A>(p, g, m, v, vmax, j, s, scale);
      });
    }
  });
}

// ---- cost ----

Cost list_cost(const KernelCall& c, int64_t n, int read_lists, int rw_lists) {
  double elems = 0, bytes_per = 0;
  for (int64_t i = 0; i < n; ++i) elems += static_cast<double>(numel_of(c, i));
  if (n > 0) bytes_per = static_cast<double>(c.in[kFirstTensor].element_size());
  return {elems * bytes_per * (read_lists + 2.0 * rw_lists), elems * 10.0};
}

Cost sgd_cost(const KernelCall& c) {
  const auto& a = c.attr<SgdStepAttrs>();
  return list_cost(c, a.n, 1, a.momentum_buffers ? 2 : 1);
}
Cost adam_cost(const KernelCall& c) {
  const auto& a = c.attr<AdamStepAttrs>();
  return list_cost(c, a.n, 1, a.amsgrad ? 4 : 3);
}

}  // namespace

void define_op_sgd_step(OpInfo& info) {
  info.doc = "fused multi-tensor SGD step (momentum, dampening, nesterov, weight decay), in place";
  info.infer = infer_sgd;
  info.cost = sgd_cost;
  info.contiguous_inputs = false;  // in place: params and state must stay the caller's tensors
  info.add_variant({.name = "cpu",
                    .device = DeviceType::cpu,
                    .fn = sgd_cpu,
                    .dtypes = kFloatTypes,
                    .note = "loop over tensors, parallel over elements"});
}

void define_op_adam_step(OpInfo& info) {
  info.doc = "fused multi-tensor Adam/AdamW step (amsgrad, maximize, loss-scale aware), in place";
  info.infer = infer_adam;
  info.cost = adam_cost;
  info.contiguous_inputs = false;
  info.add_variant({.name = "cpu",
                    .device = DeviceType::cpu,
                    .fn = adam_cpu,
                    .dtypes = kFloatTypes,
                    .note = "loop over tensors, parallel over elements"});
}

// ---- functional entry points ----

namespace {
void check_same_count(const char* op, const char* what, size_t got, size_t want) {
  EMBER_CHECK(got == want, op, ": ", want, " parameters but ", got, " ", what);
}
}  // namespace

void sgd_step(const Tensor& hyper, const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
              const std::vector<Tensor>& momentum_buffers, const std::vector<Tensor>& steps, bool nesterov,
              bool maximize, const Tensor& found_inf, const Tensor& inv_scale, const Tensor& ticket,
              const Tensor& clip_norm, double max_norm) {
  const size_t n = params.size();
  check_same_count("sgd_step", "gradients", grads.size(), n);
  const bool bufs = !momentum_buffers.empty();
  if (bufs) {
    check_same_count("sgd_step", "momentum buffers", momentum_buffers.size(), n);
    check_same_count("sgd_step", "step counters", steps.size(), n);
  }
  EMBER_CHECK(!nesterov || bufs, "sgd_step: nesterov needs momentum buffers");
  std::vector<Tensor> in{hyper, found_inf, inv_scale, ticket, clip_norm};
  for (const auto* list : {&params, &grads}) in.insert(in.end(), list->begin(), list->end());
  if (bufs) {
    in.insert(in.end(), momentum_buffers.begin(), momentum_buffers.end());
    in.insert(in.end(), steps.begin(), steps.end());
  }
  autograd::NoGradGuard no_grad;
  call(OpId::sgd_step, std::move(in),
       SgdStepAttrs{static_cast<int64_t>(n), bufs ? 1 : 0, nesterov ? 1 : 0, maximize ? 1 : 0, max_norm});
}

void adam_step(const Tensor& hyper, const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
               const std::vector<Tensor>& exp_avgs, const std::vector<Tensor>& exp_avg_sqs,
               const std::vector<Tensor>& max_exp_avg_sqs, const std::vector<Tensor>& steps,
               bool decoupled_weight_decay, bool maximize, const Tensor& found_inf, const Tensor& inv_scale,
               const Tensor& ticket, const Tensor& clip_norm, double max_norm) {
  const size_t n = params.size();
  check_same_count("adam_step", "gradients", grads.size(), n);
  check_same_count("adam_step", "exp_avg tensors", exp_avgs.size(), n);
  check_same_count("adam_step", "exp_avg_sq tensors", exp_avg_sqs.size(), n);
  check_same_count("adam_step", "step counters", steps.size(), n);
  const bool amsgrad = !max_exp_avg_sqs.empty();
  if (amsgrad) check_same_count("adam_step", "max_exp_avg_sq tensors", max_exp_avg_sqs.size(), n);
  std::vector<Tensor> in{hyper, found_inf, inv_scale, ticket, clip_norm};
  for (const auto* list : {&params, &grads, &exp_avgs, &exp_avg_sqs}) in.insert(in.end(), list->begin(), list->end());
  if (amsgrad) in.insert(in.end(), max_exp_avg_sqs.begin(), max_exp_avg_sqs.end());
  in.insert(in.end(), steps.begin(), steps.end());
  autograd::NoGradGuard no_grad;
  call(OpId::adam_step, std::move(in),
       AdamStepAttrs{static_cast<int64_t>(n), amsgrad ? 1 : 0, decoupled_weight_decay ? 1 : 0, maximize ? 1 : 0,
                     max_norm});
}

}  // namespace ember
