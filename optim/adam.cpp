#include "optim/adam.h"

#include <cmath>

#include "kernels/functional.h"
#include "optim/adamw.h"

namespace ember::optim {

std::map<std::string, double> AdamOptions::to_map() const {
  return {{"lr", lr_},
          {"beta1", std::get<0>(betas_)},
          {"beta2", std::get<1>(betas_)},
          {"eps", eps_},
          {"weight_decay", weight_decay_},
          {"amsgrad", amsgrad_ ? 1.0 : 0.0},
          {"maximize", maximize_ ? 1.0 : 0.0}};
}

void AdamOptions::from_map(const std::map<std::string, double>& m) {
  auto get = [&](const char* k) {
    auto it = m.find(k);
    EMBER_CHECK(it != m.end(), "AdamOptions: missing option '", k, "'");
    return it->second;
  };
  lr_ = get("lr");
  betas_ = std::make_tuple(get("beta1"), get("beta2"));
  eps_ = get("eps");
  weight_decay_ = get("weight_decay");
  amsgrad_ = get("amsgrad") != 0;
  maximize_ = get("maximize") != 0;
}

void AdamOptions::validate() const {
  EMBER_CHECK(lr_ >= 0, "Adam: invalid learning rate ", lr_, " (must be >= 0)");
  EMBER_CHECK(eps_ >= 0, "Adam: invalid epsilon ", eps_, " (must be >= 0)");
  double b1 = std::get<0>(betas_), b2 = std::get<1>(betas_);
  EMBER_CHECK(b1 >= 0 && b1 < 1, "Adam: invalid beta1 ", b1, " (must be in [0, 1))");
  EMBER_CHECK(b2 >= 0 && b2 < 1, "Adam: invalid beta2 ", b2, " (must be in [0, 1))");
  EMBER_CHECK(weight_decay_ >= 0, "Adam: invalid weight_decay ", weight_decay_, " (must be >= 0)");
}

AdamBase::AdamBase(std::vector<ParamGroup> groups, std::unique_ptr<OptimizerOptions> defaults, bool decoupled,
                   std::string name)
    : Optimizer(std::move(groups), std::move(defaults), std::move(name)), decoupled_(decoupled) {
  for (const ParamGroup& g : param_groups())
    EMBER_CHECK(dynamic_cast<const AdamOptions*>(&g.options()) != nullptr,
                "Adam/AdamW: parameter group options must be AdamOptions");
}

std::vector<double> AdamBase::hyper_values(const OptimizerOptions& base) const {
  const auto& o = static_cast<const AdamOptions&>(base);
  return {o.lr(), std::get<0>(o.betas()), std::get<1>(o.betas()), o.eps(), o.weight_decay()};
}

std::vector<std::string> AdamBase::state_names(const OptimizerOptions& base) const {
  const auto& o = static_cast<const AdamOptions&>(base);
  if (o.amsgrad()) return {"exp_avg", "exp_avg_sq", "max_exp_avg_sq", "step"};
  return {"exp_avg", "exp_avg_sq", "step"};
}

void AdamBase::step(const GradScaling& scaling) {
  for (size_t gi = 0; gi < param_groups().size(); ++gi) {
    const auto& o = static_cast<const AdamOptions&>(param_groups()[gi].options());
    o.validate();
    for (Bucket& b : buckets(gi)) {
      std::vector<Tensor> m, v, vmax, steps;
      for (const Tensor& p : b.params) {
        TensorDict& st = mutable_state(p);
        TensorOptions to = TensorOptions(p.dtype()).device(p.device());
        if (!st.contains("exp_avg")) {
          st.set("exp_avg", zeros(p.shape(), to));
          st.set("exp_avg_sq", zeros(p.shape(), to));
          st.set("step", zeros({}, TensorOptions(DType::f32).device(p.device())));
        }
        if (o.amsgrad() && !st.contains("max_exp_avg_sq")) st.set("max_exp_avg_sq", zeros(p.shape(), to));
        m.push_back(st.at("exp_avg"));
        v.push_back(st.at("exp_avg_sq"));
        if (o.amsgrad()) vmax.push_back(st.at("max_exp_avg_sq"));
        steps.push_back(st.at("step"));
      }
      const Tensor h = hyper(gi, b.device);  // first: it makes the slot the ticket lives in
      adam_step(h, b.params, b.grads, m, v, vmax, steps, decoupled_, o.maximize(),
                on_device(scaling.found_inf, b.device), on_device(scaling.inv_scale, b.device), ticket(gi, b.device),
                on_device(scaling.clip_norm, b.device), scaling.max_norm);
    }
  }
}

Adam::Adam(std::vector<Tensor> params, const AdamOptions& defaults)
    : Adam(std::vector<ParamGroup>{ParamGroup(std::move(params))}, defaults) {}
Adam::Adam(std::vector<ParamGroup> groups, const AdamOptions& defaults)
    : AdamBase(std::move(groups), std::make_unique<AdamOptions>(defaults), false, "Adam") {}

AdamW::AdamW(std::vector<Tensor> params, const AdamOptions& defaults)
    : AdamW(std::vector<ParamGroup>{ParamGroup(std::move(params))}, defaults) {}
AdamW::AdamW(std::vector<ParamGroup> groups, const AdamOptions& defaults)
    : AdamBase(std::move(groups), defaults.clone(), true, "AdamW") {}

}  // namespace ember::optim
