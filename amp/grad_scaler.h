// GradScaler: dynamic loss scaling for fp16 training, with PyTorch's semantics and defaults, and
// no host synchronisation.
//
//   amp::GradScaler scaler;                         // init scale 65536, growth 2, backoff 0.5, interval 2000
//   for (...) {
//     opt.zero_grad();
//     Tensor loss;
//     { amp::autocast ac(DeviceType::cuda, DType::f16); loss = model_and_loss(x, y); }
//     scaler.scale(loss).backward();
//     scaler.unscale_(opt);                          // optional: before clipping
//     optim::clip_grad_norm_(params, 1.0);
//     scaler.step(opt);                              // skipped on the device when a grad is inf/NaN
//     // or clipping folded into the step (optim/clip_grad.h):
//     //   optim::GradScaling clip; optim::clip_grad_norm_into_step(params, 1.0, clip); scaler.step(opt, clip);
//     scaler.update();
//   }
//
// Note [sync-free loss scaling]: the scale, the growth tracker, each optimizer's found_inf flag and
// the count of skipped steps are device tensors. unscale_ runs the fused amp_unscale op (grads *=
// 1/scale and the non-finite check in one pass); step passes found_inf to the fused optimizer op,
// which leaves params, state and step counters untouched when it is set; update runs
// amp_update_scale on the device. Nothing reads a value back, so the whole AMP step can be captured
// in a CUDA graph. scale_value() and skipped_steps() read back (they sync): call them once per log
// interval, not per step.
//
// With bf16 autocast no scaler is needed; using one is allowed and harmless (the scale just grows).
#pragma once

#include <functional>
#include <map>
#include <string>

#include "core/arg.h"
#include "core/tensor.h"
#include "io/state_dict.h"
#include "optim/optimizer.h"

namespace ember::amp {

struct GradScalerOptions {
  EMBER_FIELD(double, init_scale) = 65536.0;
  EMBER_FIELD(double, growth_factor) = 2.0;
  EMBER_FIELD(double, backoff_factor) = 0.5;
  EMBER_FIELD(int64_t, growth_interval) = 2000;
  EMBER_FIELD(bool, enabled) = true;
};

class GradScaler : public Stateful {
 public:
  explicit GradScaler(GradScalerOptions options = {});

  // loss * scale (a device multiply; the scale lives on the loss's device from the first call).
  Tensor scale(const Tensor& loss);
  // The scale as the gradient a backward starts from: `loss.backward(g)` with g = scale_as_grad()
  // equals `scale(loss).backward()` for an f32 scalar loss, and g is what cross_entropy_with_grad
  // is told. A 0-d f32 view of the scale on `device` (no launch; it follows update()), or an
  // undefined tensor when the scaler is disabled (then nothing scales: start from ones).
  Tensor scale_as_grad(Device device);
  // Divides the optimizer's gradients by the scale in place and records whether any is inf/NaN.
  // At most once per optimizer between update() calls.
  void unscale_(optim::Optimizer& optimizer);
  // unscale_ (if not done yet), then the optimizer's step, skipped on the device when found_inf.
  // `clip` carries clipping folded into the step (clip_grad_norm_into_step, after unscale_).
  void step(optim::Optimizer& optimizer);
  void step(optim::Optimizer& optimizer, const optim::GradScaling& clip);
  // Grows or backs off the scale on the device and resets the per-step state.
  void update();
  // Runs `fn(found_inf)` after every unscale_, before the flag is used: dist::sync_grad_scaler
  // installs an all_reduce (max) across ranks here so that every rank skips the same steps.
  void set_found_inf_hook(std::function<void(Tensor& found_inf)> fn) { found_inf_hook_ = std::move(fn); }
  // Forgets unscale_/step calls since the last update() without touching the device (after a
  // CUDA graph capture that failed half-way: nothing it queued ran).
  void discard_step();

  bool enabled() const { return options_.enabled_; }
  // The scale as a device tensor (no sync).
  Tensor scale_tensor() const { return scale_; }
  // Reads back (syncs): once per log interval.
  double scale_value() const;
  int64_t skipped_steps() const;

  StateDict state_dict() const override;
  void load_state_dict(const StateDict& state) override;

 private:
  std::function<void(Tensor&)> found_inf_hook_;
  enum class Stage { ready, unscaled, stepped };
  struct PerOptimizer {
    Stage stage = Stage::ready;
    Tensor found_inf;  // f32 [1]
  };
  void lazy_init(Device device);
  PerOptimizer& state_of(optim::Optimizer& optimizer);

  GradScalerOptions options_;
  Device device_;
  bool initialised_ = false;
  Tensor scale_;           // f32 [1]
  Tensor growth_tracker_;  // i32 [1]
  Tensor skipped_;         // i64 [1]
  Tensor found_any_;       // f32 [1]: the sum over optimizers, for update()
  Tensor one_;             // f32 [1] = 1, the numerator of 1 / scale in unscale_ (not re-made per step)
  // A state loaded before the first scale() (resuming from a checkpoint): the device is not known
  // yet, so these wait for lazy_init (the scale waits in options_.init_scale_).
  int64_t loaded_tracker_ = 0;
  int64_t loaded_skipped_ = 0;
  std::map<const optim::Optimizer*, PerOptimizer> per_opt_;
};

}  // namespace ember::amp
