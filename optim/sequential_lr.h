// SequentialLR: runs schedulers one after another, switching at the milestones - the usual
// "LinearLR warmup, then cosine":
//   auto warm = std::make_shared<optim::LinearLR>(opt, 0.1, 1.0, 5);
//   auto cos = std::make_shared<optim::CosineAnnealingLR>(opt, 95);
//   optim::SequentialLR sched(opt, {warm, cos}, {5});
// As PyTorch: construction resets the lrs to the initial ones and re-runs the first scheduler's
// initial step; at a milestone the next scheduler restarts from epoch 0 (its closed form).
#pragma once

#include <memory>

#include "optim/lr_scheduler.h"

namespace ember::optim {

class SequentialLR : public ComposedScheduler {
 public:
  SequentialLR(Optimizer& optimizer, std::vector<std::shared_ptr<LRScheduler>> schedulers,
               std::vector<int64_t> milestones);
  void step() override;
  std::string name() const override { return "SequentialLR"; }

 private:
  std::vector<int64_t> milestones_;
};

}  // namespace ember::optim
