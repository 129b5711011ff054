#include "amp/grad_scaler.h"

#include <nlohmann/json.hpp>

#include "core/autograd/node.h"
#include "core/runtime.h"
#include "kernels/functional.h"

namespace ember::amp {

GradScaler::GradScaler(GradScalerOptions options) : options_(options) {
  EMBER_CHECK(options_.init_scale_ > 0, "GradScaler: init_scale must be > 0, got ", options_.init_scale_);
  EMBER_CHECK(options_.growth_factor_ > 1, "GradScaler: growth_factor must be > 1, got ", options_.growth_factor_);
  EMBER_CHECK(options_.backoff_factor_ > 0 && options_.backoff_factor_ < 1,
              "GradScaler: backoff_factor must be in (0, 1), got ", options_.backoff_factor_);
  EMBER_CHECK(options_.growth_interval_ >= 1, "GradScaler: growth_interval must be >= 1, got ",
              options_.growth_interval_);
}

void GradScaler::lazy_init(Device device) {
  if (initialised_) {
    EMBER_CHECK(device == device_, "GradScaler: it scales losses on ", device_, " but this one is on ", device);
    return;
  }
  autograd::NoGradGuard ng;
  device_ = device;
  TensorOptions f32 = TensorOptions(DType::f32).device(device);
  scale_ = full({1}, options_.init_scale_, f32);
  growth_tracker_ = full({1}, static_cast<double>(loaded_tracker_), TensorOptions(DType::i32).device(device));
  skipped_ = full({1}, static_cast<double>(loaded_skipped_), TensorOptions(DType::i64).device(device));
  found_any_ = zeros({1}, f32);
  one_ = ones({1}, f32);
  initialised_ = true;
}

Tensor GradScaler::scale(const Tensor& loss) {
  if (!options_.enabled_) return loss;
  EMBER_CHECK(is_floating(loss.dtype()), "GradScaler::scale: the loss must be floating, got ", loss.describe());
  lazy_init(loss.device());
  // the multiply records autograd, so backward carries the scale into every gradient
  return mul(loss, scale_.dtype() == loss.dtype() ? scale_.reshape({}) : scale_.reshape({}).to(loss.dtype()));
}

Tensor GradScaler::scale_as_grad(Device device) {
  if (!options_.enabled_) return Tensor();
  lazy_init(device);
  return scale_.reshape({});
}

GradScaler::PerOptimizer& GradScaler::state_of(optim::Optimizer& optimizer) {
  PerOptimizer& s = per_opt_[&optimizer];
  if (!s.found_inf.defined()) s.found_inf = zeros({1}, TensorOptions(DType::f32).device(device_));
  return s;
}

void GradScaler::unscale_(optim::Optimizer& optimizer) {
  if (!options_.enabled_) return;
  EMBER_CHECK(initialised_, "GradScaler::unscale_: scale() was never called, so there is nothing to unscale");
  PerOptimizer& s = state_of(optimizer);
  EMBER_CHECK(s.stage == Stage::ready,
              s.stage == Stage::unscaled ? "GradScaler::unscale_() has already been called on this optimizer since "
                                           "the last update()"
                                         : "GradScaler::unscale_() is being called after step(); call update() first");
  autograd::NoGradGuard ng;
  std::vector<Tensor> grads;
  for (const optim::ParamGroup& g : optimizer.param_groups())
    for (const Tensor& p : g.params())
      if (p.grad().defined()) {
        EMBER_CHECK(p.grad().device() == device_, "GradScaler: a gradient is on ", p.grad().device(),
                    " but the loss was scaled on ", device_);
        grads.push_back(p.grad());
      }
  Tensor inv = div(one_, scale_);  // on the device: no sync
  amp_unscale_(grads, s.found_inf, inv);
  if (found_inf_hook_) found_inf_hook_(s.found_inf);
  s.stage = Stage::unscaled;
}

void GradScaler::step(optim::Optimizer& optimizer) { step(optimizer, optim::GradScaling{}); }

void GradScaler::step(optim::Optimizer& optimizer, const optim::GradScaling& clip) {
  EMBER_CHECK(!clip.found_inf.defined() && !clip.inv_scale.defined(),
              "GradScaler::step: the scaler sets found_inf and inv_scale itself; pass only clipping");
  if (!options_.enabled_) {
    optimizer.step(clip);
    return;
  }
  EMBER_CHECK(initialised_, "GradScaler::step: scale() was never called");
  PerOptimizer& s = state_of(optimizer);
  EMBER_CHECK(s.stage != Stage::stepped,
              "GradScaler::step() has already been called on this optimizer since the last "
              "update()");
  EMBER_CHECK(s.stage == Stage::unscaled || !clip.clip_norm.defined(),
              "GradScaler::step: clipping folded into the step needs the norm of unscaled gradients; call "
              "unscale_(optimizer) before clip_grad_norm_into_step");
  if (s.stage == Stage::ready) unscale_(optimizer);
  optim::GradScaling scaling = clip;
  scaling.found_inf = s.found_inf;
  optimizer.step(scaling);
  s.stage = Stage::stepped;
}

void GradScaler::update() {
  if (!options_.enabled_ || !initialised_) return;
  autograd::NoGradGuard ng;
  Tensor found = found_any_;
  found.zero_();
  for (auto& [opt, s] : per_opt_)
    if (s.stage != Stage::ready) found.add_(s.found_inf);
  amp_update_scale_(scale_, growth_tracker_, found, skipped_, options_.growth_factor_, options_.backoff_factor_,
                    options_.growth_interval_);
  for (auto& [opt, s] : per_opt_) {
    s.found_inf.zero_();
    s.stage = Stage::ready;
  }
}

void GradScaler::discard_step() {
  for (auto& [opt, s] : per_opt_) s.stage = Stage::ready;
}

double GradScaler::scale_value() const {
  if (!initialised_) return options_.init_scale_;
  runtime::AllowSyncScope allow;
  return scale_.item();
}

int64_t GradScaler::skipped_steps() const {
  if (!initialised_) return loaded_skipped_;
  runtime::AllowSyncScope allow;
  return static_cast<int64_t>(skipped_.item());
}

StateDict GradScaler::state_dict() const {
  runtime::AllowSyncScope allow;  // reads the device values back (a checkpoint is a deliberate read)
  StateDict sd;
  nlohmann::json j = {{"scale", scale_value()},
                      {"growth_factor", options_.growth_factor_},
                      {"backoff_factor", options_.backoff_factor_},
                      {"growth_interval", options_.growth_interval_},
                      {"growth_tracker", initialised_ ? static_cast<int64_t>(growth_tracker_.item()) : loaded_tracker_},
                      {"skipped_steps", skipped_steps()}};
  sd.metadata["grad_scaler"] = j.dump();
  return sd;
}

void GradScaler::load_state_dict(const StateDict& state) {
  auto it = state.metadata.find("grad_scaler");
  EMBER_CHECK(it != state.metadata.end(), "GradScaler::load_state_dict: no 'grad_scaler' entry in the state");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(it->second);
  } catch (const std::exception& e) {
    EMBER_FAIL("GradScaler::load_state_dict: malformed 'grad_scaler' entry: ", e.what());
  }
  for (const char* key :
       {"scale", "growth_factor", "backoff_factor", "growth_interval", "growth_tracker", "skipped_steps"})
    EMBER_CHECK(j.contains(key) && j[key].is_number(), "GradScaler::load_state_dict: '", key,
                "' is missing or not a number");
  double scale = j["scale"].get<double>();
  EMBER_CHECK(scale > 0 && std::isfinite(scale), "GradScaler::load_state_dict: bad scale ", scale);
  options_.growth_factor_ = j["growth_factor"].get<double>();
  options_.backoff_factor_ = j["backoff_factor"].get<double>();
  options_.growth_interval_ = j["growth_interval"].get<int64_t>();
  loaded_tracker_ = j["growth_tracker"].get<int64_t>();
  loaded_skipped_ = j["skipped_steps"].get<int64_t>();
  options_.init_scale_ = scale;
  // Before the first scale() the device is unknown (a checkpoint is loaded before training
  // resumes on the GPU): the values wait for lazy_init, which puts them on the loss's device.
  if (!initialised_) return;
  autograd::NoGradGuard ng;
  scale_.fill_(scale);
  growth_tracker_.fill_(static_cast<double>(loaded_tracker_));
  skipped_.fill_(static_cast<double>(loaded_skipped_));
}

}  // namespace ember::amp
