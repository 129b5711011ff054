// LinearLR: multiplies the lr by a factor that moves linearly from start_factor to end_factor over
// total_iters epochs (the usual warmup), then stays.
//   closed form: lr = base_lr * (start + (end - start) * min(epoch, total_iters) / total_iters)
#pragma once

#include "optim/lr_scheduler.h"

namespace ember::optim {

class LinearLR : public LRScheduler {
 public:
  LinearLR(Optimizer& optimizer, double start_factor = 1.0 / 3, double end_factor = 1.0, int64_t total_iters = 5);
  std::string name() const override { return "LinearLR"; }

 protected:
  std::vector<double> get_lr() override;
  std::optional<std::vector<double>> closed_form_lr() const override;

 private:
  double start_, end_;
  int64_t total_iters_;
};

}  // namespace ember::optim
