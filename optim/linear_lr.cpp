#include "optim/linear_lr.h"

#include <algorithm>

namespace ember::optim {

LinearLR::LinearLR(Optimizer& optimizer, double start_factor, double end_factor, int64_t total_iters)
    : LRScheduler(optimizer), start_(start_factor), end_(end_factor), total_iters_(total_iters) {
  EMBER_CHECK(start_factor > 0 && start_factor <= 1, "LinearLR: start_factor must be in (0, 1], got ", start_factor);
  EMBER_CHECK(end_factor >= 0 && end_factor <= 1, "LinearLR: end_factor must be in [0, 1], got ", end_factor);
  EMBER_CHECK(total_iters > 0, "LinearLR: total_iters must be > 0, got ", total_iters);
  initial_step();
}

std::vector<double> LinearLR::get_lr() {
  std::vector<double> lrs = group_lrs();
  if (last_epoch_ == 0) {
    for (double& lr : lrs) lr *= start_;
    return lrs;
  }
  if (last_epoch_ > total_iters_) return lrs;
  const double f = 1.0 + (end_ - start_) / (static_cast<double>(total_iters_) * start_ +
                                            static_cast<double>(last_epoch_ - 1) * (end_ - start_));
  for (double& lr : lrs) lr *= f;
  return lrs;
}

std::optional<std::vector<double>> LinearLR::closed_form_lr() const {
  std::vector<double> out;
  const double t = static_cast<double>(std::min(total_iters_, last_epoch_)) / static_cast<double>(total_iters_);
  for (double b : base_lrs_) out.push_back(b * (start_ + (end_ - start_) * t));
  return out;
}

}  // namespace ember::optim
