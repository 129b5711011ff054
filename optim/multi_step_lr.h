// MultiStepLR: the lr decays by gamma at each milestone epoch (a milestone listed twice decays twice).
//   closed form: lr = base_lr * gamma^(number of milestones <= epoch)
#pragma once

#include "optim/lr_scheduler.h"

namespace ember::optim {

class MultiStepLR : public LRScheduler {
 public:
  MultiStepLR(Optimizer& optimizer, std::vector<int64_t> milestones, double gamma = 0.1);
  std::string name() const override { return "MultiStepLR"; }

 protected:
  std::vector<double> get_lr() override;
  std::optional<std::vector<double>> closed_form_lr() const override;

 private:
  std::vector<int64_t> milestones_;  // sorted
  double gamma_;
};

}  // namespace ember::optim
