#include "optim/cyclic_lr.h"

#include <cmath>

namespace ember::optim {

namespace {
std::vector<double> per_group(const std::vector<double>& v, size_t n, const char* what) {
  EMBER_CHECK(v.size() == 1 || v.size() == n, "CyclicLR: ", v.size(), " ", what, " values for ", n,
              " parameter groups");
  return v.size() == 1 ? std::vector<double>(n, v[0]) : v;
}
}  // namespace

CyclicLR::CyclicLR(Optimizer& optimizer, const CyclicLROptions& o) : LRScheduler(optimizer), options_(o) {
  auto& groups = optimizer.param_groups();
  const size_t n = groups.size();
  std::vector<double> base = per_group(o.base_lr(), n, "base_lr");
  max_lrs_ = per_group(o.max_lr(), n, "max_lr");
  EMBER_CHECK(o.step_size_up() > 0, "CyclicLR: step_size_up must be > 0, got ", o.step_size_up());
  EMBER_CHECK(o.step_size_down() >= 0, "CyclicLR: step_size_down must be >= 0, got ", o.step_size_down());
  const double up = static_cast<double>(o.step_size_up());
  const double down = o.step_size_down() > 0 ? static_cast<double>(o.step_size_down()) : up;
  total_size_ = up + down;
  step_ratio_ = up / total_size_;
  if (o.scale_fn()) {
    scale_mode_ = o.scale_mode();
  } else {
    scale_mode_ = o.mode() == CyclicMode::exp_range ? ScaleMode::iterations : ScaleMode::cycle;
  }
  for (size_t i = 0; i < n; ++i) {
    groups[i].options().set_lr(base[i]);
    groups[i].initial_lr = base[i];  // PyTorch sets lr = base_lr before its setdefault of initial_lr
    if (o.cycle_momentum()) groups[i].options().set_momentum(o.max_momentum());
  }
  base_lrs_ = base;
  initial_step();
}

double CyclicLR::scale(double x) const {
  if (options_.scale_fn()) return options_.scale_fn()(x);
  switch (options_.mode()) {
    case CyclicMode::triangular: return 1.0;
    case CyclicMode::triangular2: return 1.0 / std::pow(2.0, x - 1);
    case CyclicMode::exp_range: return std::pow(options_.gamma(), x);
  }
  return 1.0;
}

std::vector<double> CyclicLR::get_lr() {
  const double it = static_cast<double>(last_epoch_);
  const double cycle = std::floor(1 + it / total_size_);
  const double x = 1.0 + it / total_size_ - cycle;
  const double scale_factor = x <= step_ratio_ ? x / step_ratio_ : (x - 1) / (step_ratio_ - 1);
  const double f = scale(scale_mode_ == ScaleMode::cycle ? cycle : it);
  std::vector<double> lrs;
  for (size_t i = 0; i < base_lrs_.size(); ++i)
    lrs.push_back(base_lrs_[i] + (max_lrs_[i] - base_lrs_[i]) * scale_factor * f);
  if (options_.cycle_momentum()) {
    const double height = (options_.max_momentum() - options_.base_momentum()) * scale_factor;
    for (ParamGroup& g : optimizer_.param_groups()) g.options().set_momentum(options_.max_momentum() - height * f);
  }
  return lrs;
}

}  // namespace ember::optim
