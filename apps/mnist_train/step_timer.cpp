#include "apps/mnist_train/step_timer.h"

#include <utility>

namespace mnist {

using namespace ember;

void StepTimer::mark() {
  if (!device_.is_cuda()) return;
  if (used_ == events_.size()) events_.emplace_back(true);
  events_[used_++].record(cuda::current_stream(device_.index));
}

void StepTimer::collect() {
  // Events come in (start, end) pairs; slot 0 may hold the previous interval's last end event.
  if (used_ < 2) return;
  const size_t first = used_ % 2;  // 1 when slot 0 is a carried-over end event
  for (size_t k = first; k + 1 < used_; k += 2) {
    busy_ms_ += events_[k].elapsed_ms(events_[k + 1]);
    if (k >= 1) idle_ms_ += events_[k - 1].elapsed_ms(events_[k]);
  }
  std::swap(events_[0], events_[used_ - 1]);  // the last end event starts the next gap
  used_ = 1;
}

double StepTimer::idle_fraction() const {
  return device_.is_cuda() && busy_ms_ + idle_ms_ > 0 ? idle_ms_ / (busy_ms_ + idle_ms_) : -1;
}

}  // namespace mnist
