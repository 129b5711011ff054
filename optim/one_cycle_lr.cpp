#include "optim/one_cycle_lr.h"

#include <cmath>
#include <numbers>

namespace ember::optim {

namespace {
enum { kInitial = 0, kMax = 1, kMin = 2 };  // lr slots
enum { kMaxM = 0, kBaseM = 1 };             // momentum slots
}  // namespace

OneCycleLR::OneCycleLR(Optimizer& optimizer, double max_lr, int64_t epochs, int64_t steps_per_epoch)
    : OneCycleLR(optimizer, OneCycleLROptions(max_lr, [&] {
                   EMBER_CHECK(epochs > 0 && steps_per_epoch > 0, "OneCycleLR: epochs (", epochs,
                               ") and steps_per_epoch (", steps_per_epoch, ") must be positive");
                   return epochs * steps_per_epoch;
                 }())) {}

OneCycleLR::OneCycleLR(Optimizer& optimizer, const OneCycleLROptions& o) : LRScheduler(optimizer), options_(o) {
  const size_t n = optimizer.param_groups().size();
  EMBER_CHECK(o.total_steps() > 0, "OneCycleLR: total_steps must be positive, got ", o.total_steps());
  EMBER_CHECK(o.pct_start() >= 0 && o.pct_start() <= 1, "OneCycleLR: pct_start must be in [0, 1], got ", o.pct_start());
  EMBER_CHECK(o.max_lr().size() == 1 || o.max_lr().size() == n, "OneCycleLR: ", o.max_lr().size(),
              " max_lr values for ", n, " parameter groups");
  const double T = static_cast<double>(o.total_steps());
  if (o.three_phase()) {
    phases_ = {{o.pct_start() * T - 1, kInitial, kMax, kMaxM, kBaseM},
               {2 * o.pct_start() * T - 2, kMax, kInitial, kBaseM, kMaxM},
               {T - 1, kInitial, kMin, kMaxM, kMaxM}};
  } else {
    phases_ = {{o.pct_start() * T - 1, kInitial, kMax, kMaxM, kBaseM}, {T - 1, kMax, kMin, kBaseM, kMaxM}};
  }
  // PyTorch sets these group entries (initial_lr overwritten, not setdefault).
  auto& groups = optimizer.param_groups();
  for (size_t i = 0; i < n; ++i) {
    double mx = o.max_lr().size() == 1 ? o.max_lr()[0] : o.max_lr()[i];
    initial_.push_back(mx / o.div_factor());
    max_.push_back(mx);
    min_.push_back(initial_.back() / o.final_div_factor());
    groups[i].initial_lr = initial_.back();
    if (o.cycle_momentum()) groups[i].options().set_momentum(o.max_momentum());
  }
  base_lrs_ = initial_;
  initial_step();
}

std::vector<double> OneCycleLR::get_lr() {
  const int64_t step = last_epoch_;
  EMBER_CHECK(step <= options_.total_steps(), "OneCycleLR: tried to step ", step,
              " times; the specified number of total steps is ", options_.total_steps());
  const double pi = std::numbers::pi;
  auto anneal = [&](double start, double end, double pct) {
    if (options_.anneal_strategy() == AnnealStrategy::cos) return end + (start - end) / 2.0 * (std::cos(pi * pct) + 1);
    return (end - start) * pct + start;
  };
  auto& groups = optimizer_.param_groups();
  std::vector<double> lrs;
  for (size_t g = 0; g < groups.size(); ++g) {
    const double lr_slots[3] = {initial_[g], max_[g], min_[g]};
    const double m_slots[2] = {options_.max_momentum(), options_.base_momentum()};
    double start_step = 0, lr = 0, mom = 0;
    for (size_t i = 0; i < phases_.size(); ++i) {
      const Phase& ph = phases_[i];
      if (static_cast<double>(step) <= ph.end_step || i + 1 == phases_.size()) {
        EMBER_CHECK(ph.end_step != start_step, "OneCycleLR: phase ", i, " is empty (pct_start ", options_.pct_start(),
                    " with total_steps ", options_.total_steps(), ")");
        double pct = (static_cast<double>(step) - start_step) / (ph.end_step - start_step);
        lr = anneal(lr_slots[ph.start_lr], lr_slots[ph.end_lr], pct);
        mom = anneal(m_slots[ph.start_m], m_slots[ph.end_m], pct);
        break;
      }
      start_step = ph.end_step;
    }
    lrs.push_back(lr);
    if (options_.cycle_momentum()) groups[g].options().set_momentum(mom);
  }
  return lrs;
}

}  // namespace ember::optim
