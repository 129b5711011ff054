// ExponentialLR: the lr decays by gamma every epoch.  closed form: lr = base_lr * gamma^epoch
#pragma once

#include "optim/lr_scheduler.h"

namespace ember::optim {

class ExponentialLR : public LRScheduler {
 public:
  ExponentialLR(Optimizer& optimizer, double gamma);
  std::string name() const override { return "ExponentialLR"; }

 protected:
  std::vector<double> get_lr() override;
  std::optional<std::vector<double>> closed_form_lr() const override;

 private:
  double gamma_;
};

}  // namespace ember::optim
