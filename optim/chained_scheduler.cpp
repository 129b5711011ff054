#include "optim/chained_scheduler.h"

namespace ember::optim {

namespace {
Optimizer& first_optimizer(const std::vector<std::shared_ptr<LRScheduler>>& s) {
  EMBER_CHECK(!s.empty() && s[0] != nullptr, "ChainedScheduler: expects at least one scheduler");
  return s[0]->optimizer();
}
}  // namespace

ChainedScheduler::ChainedScheduler(std::vector<std::shared_ptr<LRScheduler>> schedulers)
    : LRScheduler(first_optimizer(schedulers)), schedulers_(std::move(schedulers)) {
  for (size_t i = 0; i < schedulers_.size(); ++i) {
    EMBER_CHECK(schedulers_[i] != nullptr, "ChainedScheduler: scheduler ", i, " is empty");
    EMBER_CHECK(&schedulers_[i]->optimizer() == &optimizer_, "ChainedScheduler: scheduler ", i,
                " belongs to another optimizer");
  }
  last_lr_ = group_lrs();
}

void ChainedScheduler::step() {
  for (auto& s : schedulers_) s->step();
  ++step_count_;
  ++last_epoch_;
  last_lr_ = group_lrs();
}

void ChainedScheduler::save_extra(Metadata& m) const { save_children(schedulers_, m); }

void ChainedScheduler::load_extra(const Metadata& m) { load_children(schedulers_, m); }

}  // namespace ember::optim
