// OneCycleLR (Smith & Topsoe's 1cycle policy), stepped once per batch, exactly as PyTorch:
//   initial_lr = max_lr / div_factor,  min_lr = initial_lr / final_div_factor
//   two phases (three with three_phase) over total_steps, each annealing from its start to its end
//   value with pct = (step - phase_start) / (phase_end - phase_start):
//     cos:    end + (start - end) / 2 * (1 + cos(pi * pct))
//     linear: start + (end - start) * pct
//   phase 1 ends at pct_start * total_steps - 1: lr initial -> max, momentum max -> base
//   phase 2 ends at total_steps - 1:             lr max -> min,     momentum base -> max
//   (three_phase: max -> initial ending at 2 * pct_start * total_steps - 2, then initial -> min)
// With cycle_momentum, the momentum (SGD) or beta1 (Adam/AdamW) follows the inverse cycle.
// Stepping more than total_steps times is an error.
#pragma once

#include "core/arg.h"
#include "optim/lr_scheduler.h"

namespace ember::optim {

enum class AnnealStrategy { cos, linear };

struct OneCycleLROptions {
  // max_lr per group (one value applies to every group).
  OneCycleLROptions(std::vector<double> max_lr, int64_t total_steps)
      : max_lr_(std::move(max_lr)), total_steps_(total_steps) {}
  OneCycleLROptions(double max_lr, int64_t total_steps) : max_lr_{max_lr}, total_steps_(total_steps) {}
  EMBER_ARG(std::vector<double>, max_lr);
  EMBER_ARG(int64_t, total_steps);
  EMBER_ARG(double, pct_start) = 0.3;
  EMBER_ARG(AnnealStrategy, anneal_strategy) = AnnealStrategy::cos;
  EMBER_ARG(bool, cycle_momentum) = true;
  EMBER_ARG(double, base_momentum) = 0.85;
  EMBER_ARG(double, max_momentum) = 0.95;
  EMBER_ARG(double, div_factor) = 25.0;
  EMBER_ARG(double, final_div_factor) = 1e4;
  EMBER_ARG(bool, three_phase) = false;
};

class OneCycleLR : public LRScheduler {
 public:
  OneCycleLR(Optimizer& optimizer, const OneCycleLROptions& options);
  // total_steps = epochs * steps_per_epoch
  OneCycleLR(Optimizer& optimizer, double max_lr, int64_t epochs, int64_t steps_per_epoch);
  std::string name() const override { return "OneCycleLR"; }
  const OneCycleLROptions& options() const { return options_; }

 protected:
  std::vector<double> get_lr() override;

 private:
  struct Phase {
    double end_step;
    int start_lr, end_lr, start_m, end_m;  // indices into {initial, max, min} / {max_m, base_m}
  };
  OneCycleLROptions options_;
  std::vector<Phase> phases_;
  std::vector<double> initial_, max_, min_;
};

}  // namespace ember::optim
