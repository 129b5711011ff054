#include "optim/sgd.h"

#include "kernels/functional.h"

namespace ember::optim {

std::map<std::string, double> SGDOptions::to_map() const {
  return {{"lr", lr_},
          {"momentum", momentum_},
          {"dampening", dampening_},
          {"weight_decay", weight_decay_},
          {"nesterov", nesterov_ ? 1.0 : 0.0},
          {"maximize", maximize_ ? 1.0 : 0.0}};
}

void SGDOptions::from_map(const std::map<std::string, double>& m) {
  auto get = [&](const char* k, double& dst) {
    auto it = m.find(k);
    EMBER_CHECK(it != m.end(), "SGDOptions: missing option '", k, "'");
    dst = it->second;
  };
  double nesterov = 0, maximize = 0;
  get("lr", lr_);
  get("momentum", momentum_);
  get("dampening", dampening_);
  get("weight_decay", weight_decay_);
  get("nesterov", nesterov);
  get("maximize", maximize);
  nesterov_ = nesterov != 0;
  maximize_ = maximize != 0;
}

void SGDOptions::validate() const {
  EMBER_CHECK(lr_ >= 0, "SGD: invalid learning rate ", lr_, " (must be >= 0)");
  EMBER_CHECK(momentum_ >= 0, "SGD: invalid momentum ", momentum_, " (must be >= 0)");
  EMBER_CHECK(weight_decay_ >= 0, "SGD: invalid weight_decay ", weight_decay_, " (must be >= 0)");
  EMBER_CHECK(!nesterov_ || (momentum_ > 0 && dampening_ == 0),
              "SGD: Nesterov momentum requires a momentum > 0 and zero dampening (momentum ", momentum_, ", dampening ",
              dampening_, ")");
}

SGD::SGD(std::vector<Tensor> params, const SGDOptions& defaults)
    : SGD(std::vector<ParamGroup>{ParamGroup(std::move(params))}, defaults) {}

SGD::SGD(std::vector<ParamGroup> groups, const SGDOptions& defaults)
    : Optimizer(std::move(groups), std::make_unique<SGDOptions>(defaults), "SGD") {}

std::vector<double> SGD::hyper_values(const OptimizerOptions& base) const {
  const auto& o = static_cast<const SGDOptions&>(base);
  return SgdHyper{.lr = o.lr(), .momentum = o.momentum(), .dampening = o.dampening(), .weight_decay = o.weight_decay()}
      .values();
}

std::vector<std::string> SGD::state_names(const OptimizerOptions& base) const {
  const auto& o = static_cast<const SGDOptions&>(base);
  if (o.momentum() == 0) return {};
  return {"momentum_buffer", "step"};
}

void SGD::step(const GradScaling& scaling) {
  for (size_t gi = 0; gi < param_groups().size(); ++gi) {
    const auto& o = static_cast<const SGDOptions&>(param_groups()[gi].options());
    o.validate();
    const bool momentum = o.momentum() != 0;
    for (Bucket& b : buckets(gi)) {
      std::vector<Tensor> bufs, steps;
      if (momentum) {
        for (const Tensor& p : b.params) {
          TensorDict& st = mutable_state(p);
          if (!st.contains("momentum_buffer")) {
            st.set("momentum_buffer", zeros(p.shape(), TensorOptions(p.dtype()).device(p.device())));
            st.set("step", zeros({}, TensorOptions(DType::f32).device(p.device())));
          }
          bufs.push_back(st.at("momentum_buffer"));
          steps.push_back(st.at("step"));
        }
      }
      const Tensor h = hyper(gi, b.device);  // first: it makes the slot the ticket lives in
      sgd_step(h, b.params, b.grads, bufs, steps, o.nesterov(), o.maximize(), on_device(scaling.found_inf, b.device),
               on_device(scaling.inv_scale, b.device), ticket(gi, b.device), on_device(scaling.clip_norm, b.device),
               scaling.max_norm);
    }
  }
}

}  // namespace ember::optim
