#include "optim/sequential_lr.h"

#include <algorithm>

namespace ember::optim {

SequentialLR::SequentialLR(Optimizer& optimizer, std::vector<std::shared_ptr<LRScheduler>> schedulers,
                           std::vector<int64_t> milestones)
    : ComposedScheduler(optimizer, std::move(schedulers)), milestones_(std::move(milestones)) {
  EMBER_CHECK(!schedulers_.empty(), "SequentialLR: expects at least one scheduler");
  EMBER_CHECK(milestones_.size() == schedulers_.size() - 1, "SequentialLR: ", schedulers_.size(), " schedulers need ",
              schedulers_.size() - 1, " milestones, got ", milestones_.size());
  check_children();
  last_epoch_ = 0;
  for (ParamGroup& g : optimizer_.param_groups()) g.options().set_lr(*g.initial_lr);
  for (auto& s : schedulers_) s->last_epoch_ -= 1;
  schedulers_[0]->initial_step();
  last_lr_ = schedulers_[0]->get_last_lr();
}

void SequentialLR::step() {
  ++last_epoch_;
  ++step_count_;
  size_t idx =
      static_cast<size_t>(std::upper_bound(milestones_.begin(), milestones_.end(), last_epoch_) - milestones_.begin());
  LRScheduler& s = *schedulers_[idx];
  if (idx > 0 && milestones_[idx - 1] == last_epoch_) s.step_to(0);
  else s.step();
  last_lr_ = s.get_last_lr();
}

}  // namespace ember::optim
