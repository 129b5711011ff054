// CosineAnnealingLR (SGDR without restarts):
//   closed form: lr = eta_min + (base_lr - eta_min) * (1 + cos(pi * epoch / T_max)) / 2
// PyTorch computes it recursively from the current lr (so it composes with other schedulers);
// past T_max the cosine continues (the lr rises again over the next T_max epochs), as in PyTorch.
#pragma once

#include "optim/lr_scheduler.h"

namespace ember::optim {

class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min = 0.0);
  std::string name() const override { return "CosineAnnealingLR"; }

 protected:
  std::vector<double> get_lr() override;
  std::optional<std::vector<double>> closed_form_lr() const override;

 private:
  int64_t T_max_;
  double eta_min_;
};

}  // namespace ember::optim
