// ChainedScheduler: steps several schedulers together each step; their (recursive) updates
// multiply, as in PyTorch (e.g. a warmup factor on top of an exponential decay).
#pragma once

#include <memory>

#include "optim/lr_scheduler.h"

namespace ember::optim {

class ChainedScheduler : public ComposedScheduler {
 public:
  explicit ChainedScheduler(std::vector<std::shared_ptr<LRScheduler>> schedulers);
  void step() override;
  std::string name() const override { return "ChainedScheduler"; }
};

}  // namespace ember::optim
