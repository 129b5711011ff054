// Fused multi-tensor optimizer steps: sgd_step and adam_step (Adam and AdamW).
//
// Both ops update a whole list of parameters (and their optimizer state) in place: one CPU loop
// over the tensors, one CUDA launch per table of up to 32 tensors (so a small model is one launch;
// see optim.cu), which also advances the step counters when the caller passes a ticket (below;
// without one, a tiny launch before it does). Every tensor of one call shares a device; params,
// grads and state share a dtype.
//
// Note [optimizer hyperparameters on the device]: what may change between steps is read by the
// kernels from device memory, never baked into kernel arguments, so a step replayed from a CUDA
// graph sees new values:
//   hyper     f64 [K] on the params' device, owned by the optimizer (one per param group and
//             device). The optimizer rewrites it only when a value changed (a scheduler moved lr or
//             momentum/beta1): on the CPU by a direct store, on CUDA by an asynchronous copy from a
//             pinned host buffer (stream-ordered, no host sync). In graph mode, call
//             Optimizer::sync_hyperparameters() after scheduler.step() and before each replay; the
//             graph itself holds only these kernels.
//   step      one f32 scalar per parameter (PyTorch's state["step"]), incremented ON THE DEVICE by
//             the op itself, so bias corrections advance with every replay without the host.
//   ticket    optional, int32 [1] on the params' device, 0 at rest, owned by the caller (the
//             optimizer keeps one per param group and device). With it the CUDA update kernel
//             advances the step counters itself: each block reads the old count, and the last
//             block to finish (a ticket taken with atomicAdd) adds 1 to every counter of its table
//             and puts the ticket back to 0. One launch per step instead of two. Calls that could
//             run at the same time (other streams) must not share a ticket. The CPU loop ignores it.
// Structural switches (nesterov, amsgrad, decoupled weight decay, maximize, whether momentum
// buffers exist) are attributes: changing them means a different kernel anyway.
//
// Loss scaling (amp/): two optional inputs, each f32 [1] on the params' device or undefined.
//   found_inf  when nonzero, the op leaves params, state AND step counters untouched (the step is
//              skipped, as GradScaler.step skips optimizer.step()).
//   inv_scale  grads are multiplied by it before use (g = grad * inv_scale); grads themselves are
//              not written.
//
// Note [clipping folded into the step]: one more optional input, clip_norm (one f32 or f64
// element on the params' device: total_norm's result), with the attribute max_norm. When present,
// each gradient is multiplied by clip_by_total_norm's coefficient as it is read:
//   g = round_T(g * min(1, max_norm / (clip_norm + 1e-6)))     (coefficient in the norm's dtype)
// rounded to the gradient's dtype as clipping in place stores it, so a step with it equals
// clip_by_total_norm_ followed by the step, bit for bit, with one pass over the gradients fewer
// and one launch fewer. The gradients themselves are not written. (With inv_scale too, the norm
// must be the unscaled gradients'; GradScaler unscales in place before clipping instead.)
//
// ---- sgd_step ----
// inputs:  hyper f64[kSgdHyper]: an SgdHyper (kernels/options.h), its fields in order,
//          found_inf, inv_scale, ticket, clip_norm,
//          params[n], grads[n], and when attrs.momentum_buffers: bufs[n], steps[n]
// outputs: params[n] (aliases), then bufs[n], steps[n] (aliases) when present
// per element (PyTorch's torch.optim.SGD):
//   g = grad * inv_scale;  g = clip(g);  if maximize: g = -g
//   if weight_decay != 0:  g = g + weight_decay * p
//   if momentum buffers:   step += 1
//                          buf = (step == 1) ? g : momentum * buf + (1 - dampening) * g
//                          g = nesterov ? g + momentum * buf : buf
//   p = p - lr * g
//
// ---- adam_step ----
// inputs:  hyper f64[5] = {lr, beta1, beta2, eps, weight_decay}, found_inf, inv_scale, ticket, clip_norm,
//          params[n], grads[n], exp_avgs[n], exp_avg_sqs[n], max_exp_avg_sqs[n] (amsgrad only),
//          steps[n]
// outputs: params, exp_avgs, exp_avg_sqs, (max_exp_avg_sqs), steps - all aliases
// per element (PyTorch's torch.optim.Adam / AdamW, the fused form):
//   step += 1;  g = grad * inv_scale;  g = clip(g);  if maximize: g = -g
//   if weight_decay != 0:  AdamW: p = p * (1 - lr * weight_decay)   Adam: g = g + weight_decay * p
//   m = beta1 * m + (1 - beta1) * g
//   v = beta2 * v + (1 - beta2) * g * g
//   if amsgrad: vmax = max(vmax, v), v_hat = vmax else v_hat = v
//   bc1 = 1 - beta1^step,  bc2 = 1 - beta2^step               (f64, from the device step counter)
//   p = p - (lr / bc1) * m / (sqrt(v_hat) / sqrt(bc2) + eps)
//
// Arithmetic runs in acc_t<T> (float for f16/bf16/f32, double for f64); the per-step scalars
// (1 - dampening, lr / bc1, sqrt(bc2), 1 - lr * wd) are formed in f64 and then rounded to acc_t.
// The same EMBER_HD functors below are the CPU loop and the CUDA kernel body, so CPU and CUDA agree
// up to FMA contraction (nvcc contracts a*b+c; the CPU build does not).
// Bytes per element (f32): sgd 16 (p r/w, g r) + 8 (buf r/w); adam 28 (+8 for amsgrad).
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/common/math.h"
#include "kernels/ops/copy.h"
#include "kernels/ops/grad_norm.h"  // norm_detail::clip_coef
#include "kernels/options.h"        // SgdHyper

namespace ember {

struct SgdStepAttrs {
  int64_t n = 0;                 // number of parameters
  int64_t momentum_buffers = 0;  // bufs[] and steps[] present
  int64_t nesterov = 0;
  int64_t maximize = 0;
  double max_norm = 0;  // with clip_norm (Note [clipping folded into the step])
};

struct AdamStepAttrs {
  int64_t n = 0;
  int64_t amsgrad = 0;
  int64_t decoupled = 0;  // AdamW
  int64_t maximize = 0;
  double max_norm = 0;  // with clip_norm
};

inline constexpr int kSgdHyper = SgdHyper::kCount;
inline constexpr int kAdamHyper = 5;  // lr, beta1, beta2, eps, weight_decay

// Input positions.
namespace optim_layout {
inline constexpr int kHyper = 0, kFoundInf = 1, kInvScale = 2, kTicket = 3, kClipNorm = 4, kFirstTensor = 5;
}

// Per-call scalars of SGD, in the accumulation type A.
// What scales a step's gradients besides the hyperparameters: AMP's inv_scale and the clipping
// coefficient (Note [clipping folded into the step]); clip_coef is read only when clip is set.
struct GradFactors {
  double inv_scale = 1.0;
  bool clip = false;
  double clip_coef = 1.0;
};

// The clipping coefficient from the norm as the op received it (one of the two pointers set).
EMBER_HD inline double step_clip_coef(const float* norm32, const double* norm64, double max_norm) {
  return norm64 != nullptr ? norm_detail::clip_coef<double>(*norm64, max_norm)
                           : static_cast<double>(norm_detail::clip_coef<float>(*norm32, max_norm));
}

// g * coef stored in the gradient's dtype T and read back, as clipping in place would leave it.
template <class T, class A>
EMBER_HD inline A clip_grad(A g, A coef) {
  return convert<A, T>(convert<T, A>(g * coef));
}

template <class A>
struct SgdScalars {
  A lr, momentum, one_minus_dampening, weight_decay, inv_scale, clip_coef;
  bool has_weight_decay, first, has_momentum, nesterov, maximize, clip;
};

// The hyper tensor's contents as the struct the optimizer filled, field by field in SgdHyper's
// order (not memcpy: in device code that is a library call the simulator's memory checks do not
// see, and AddressSanitizer stopped it reading device memory).
EMBER_HD inline SgdHyper load_sgd_hyper(const double* hyper) {
  static_assert(SgdHyper::kCount == 4, "load every SgdHyper field");
  return SgdHyper{hyper[0], hyper[1], hyper[2], hyper[3]};
}

template <class A>
EMBER_HD inline SgdScalars<A> make_sgd_scalars(const double* hyper, const GradFactors& f, float step,
                                               const SgdStepAttrs& a) {
  const SgdHyper h = load_sgd_hyper(hyper);
  SgdScalars<A> s;
  s.lr = static_cast<A>(h.lr);
  s.momentum = static_cast<A>(h.momentum);
  s.one_minus_dampening = static_cast<A>(1.0 - h.dampening);
  s.weight_decay = static_cast<A>(h.weight_decay);
  s.has_weight_decay = h.weight_decay != 0.0;
  s.inv_scale = static_cast<A>(f.inv_scale);
  s.clip = f.clip;
  s.clip_coef = static_cast<A>(f.clip_coef);
  s.first = step <= 1.0f;  // step was already incremented for this update
  s.has_momentum = a.momentum_buffers != 0;
  s.nesterov = a.nesterov != 0;
  s.maximize = a.maximize != 0;
  return s;
}

// One element of SGD; buf is null without momentum buffers.
template <class T, class A>
EMBER_HD inline void sgd_update(T* p, const T* grad, T* buf, int64_t i, const SgdScalars<A>& s, bool scale) {
  A g = convert<A, T>(grad[i]);
  if (scale) g = g * s.inv_scale;
  if (s.clip) g = clip_grad<T>(g, s.clip_coef);
  if (s.maximize) g = -g;
  A pv = convert<A, T>(p[i]);
  if (s.has_weight_decay) g = g + s.weight_decay * pv;
  if (s.has_momentum) {
    A b = s.first ? g : s.momentum * convert<A, T>(buf[i]) + s.one_minus_dampening * g;
    buf[i] = convert<T, A>(b);
    b = convert<A, T>(buf[i]);  // continue with the stored (rounded) buffer, as PyTorch does
    g = s.nesterov ? g + s.momentum * b : b;
  }
  p[i] = convert<T, A>(pv - s.lr * g);
}

template <class A>
struct AdamScalars {
  A lr, beta1, one_minus_beta1, beta2, one_minus_beta2, eps, weight_decay, decay_factor, step_size, bc2_sqrt, inv_scale,
      clip_coef;
  bool has_weight_decay, decoupled, amsgrad, maximize, clip;
};

template <class A>
EMBER_HD inline AdamScalars<A> make_adam_scalars(const double* hyper, const GradFactors& f, float step,
                                                 const AdamStepAttrs& a) {
  double lr = hyper[0], beta1 = hyper[1], beta2 = hyper[2], eps = hyper[3], wd = hyper[4];
  double st = static_cast<double>(step);
  double bc1 = 1.0 - math::pow(beta1, st), bc2 = 1.0 - math::pow(beta2, st);
  AdamScalars<A> s;
  s.lr = static_cast<A>(lr);
  s.beta1 = static_cast<A>(beta1);
  s.one_minus_beta1 = static_cast<A>(1.0 - beta1);
  s.beta2 = static_cast<A>(beta2);
  s.one_minus_beta2 = static_cast<A>(1.0 - beta2);
  s.eps = static_cast<A>(eps);
  s.weight_decay = static_cast<A>(wd);
  s.decay_factor = static_cast<A>(1.0 - lr * wd);
  s.step_size = static_cast<A>(lr / bc1);
  s.bc2_sqrt = static_cast<A>(math::sqrt(bc2));
  s.inv_scale = static_cast<A>(f.inv_scale);
  s.clip = f.clip;
  s.clip_coef = static_cast<A>(f.clip_coef);
  s.has_weight_decay = wd != 0.0;
  s.decoupled = a.decoupled != 0;
  s.amsgrad = a.amsgrad != 0;
  s.maximize = a.maximize != 0;
  return s;
}

// One element of Adam/AdamW; vmax is null without amsgrad.
template <class T, class A>
EMBER_HD inline void adam_update(T* p, const T* grad, T* m, T* v, T* vmax, int64_t i, const AdamScalars<A>& s,
                                 bool scale) {
  A g = convert<A, T>(grad[i]);
  if (scale) g = g * s.inv_scale;
  if (s.clip) g = clip_grad<T>(g, s.clip_coef);
  if (s.maximize) g = -g;
  A pv = convert<A, T>(p[i]);
  if (s.has_weight_decay) {
    if (s.decoupled) pv = pv * s.decay_factor;
    else g = g + s.weight_decay * pv;
  }
  A mv = s.beta1 * convert<A, T>(m[i]) + s.one_minus_beta1 * g;
  A vv = s.beta2 * convert<A, T>(v[i]) + s.one_minus_beta2 * g * g;
  m[i] = convert<T, A>(mv);
  v[i] = convert<T, A>(vv);
  mv = convert<A, T>(m[i]);
  vv = convert<A, T>(v[i]);
  A vhat = vv;
  if (s.amsgrad) {
    A old = convert<A, T>(vmax[i]);
    A mx = old > vv || old != old ? old : vv;  // torch.maximum: NaN propagates
    if (vv != vv) mx = vv;
    vmax[i] = convert<T, A>(mx);
    vhat = convert<A, T>(vmax[i]);
  }
  A denom = math::sqrt(vhat) / s.bc2_sqrt + s.eps;
  p[i] = convert<T, A>(pv - s.step_size * mv / denom);
}

}  // namespace ember
