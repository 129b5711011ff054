// ChainedScheduler: steps several schedulers together each step; their (recursive) updates
// multiply, as in PyTorch (e.g. a warmup factor on top of an exponential decay).
#pragma once

#include <memory>

#include "optim/lr_scheduler.h"

namespace ember::optim {

class ChainedScheduler : public LRScheduler {
 public:
  explicit ChainedScheduler(std::vector<std::shared_ptr<LRScheduler>> schedulers);
  void step() override;
  std::string name() const override { return "ChainedScheduler"; }

 protected:
  std::vector<double> get_lr() override { return group_lrs(); }
  void save_extra(Metadata& m) const override;
  void load_extra(const Metadata& m) override;

 private:
  std::vector<std::shared_ptr<LRScheduler>> schedulers_;
};

}  // namespace ember::optim
