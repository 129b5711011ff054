#include "optim/chained_scheduler.h"

namespace ember::optim {

namespace {
Optimizer& first_optimizer(const std::vector<std::shared_ptr<LRScheduler>>& s) {
  EMBER_CHECK(!s.empty() && s[0] != nullptr, "ChainedScheduler: expects at least one scheduler");
  return s[0]->optimizer();
}
}  // namespace

ChainedScheduler::ChainedScheduler(std::vector<std::shared_ptr<LRScheduler>> schedulers)
    : ComposedScheduler(first_optimizer(schedulers), std::move(schedulers)) {
  check_children();
  last_lr_ = group_lrs();
}

void ChainedScheduler::step() {
  for (auto& s : schedulers_) s->step();
  ++step_count_;
  ++last_epoch_;
  last_lr_ = group_lrs();
}

}  // namespace ember::optim
