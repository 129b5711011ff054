// StepLR: the lr decays by gamma every step_size epochs.
//   closed form: lr = base_lr * gamma^floor(epoch / step_size)
#pragma once

#include "optim/lr_scheduler.h"

namespace ember::optim {

class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1);
  std::string name() const override { return "StepLR"; }

 protected:
  std::vector<double> get_lr() override;
  std::optional<std::vector<double>> closed_form_lr() const override;

 private:
  int64_t step_size_;
  double gamma_;
};

}  // namespace ember::optim
