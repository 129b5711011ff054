// CyclicLR (Smith, "Cyclical Learning Rates"), stepped once per batch, exactly as PyTorch:
//   cycle = floor(1 + it / (up + down)),  x = 1 + it / (up + down) - cycle
//   scale = x / r if x <= r else (x - 1) / (r - 1),   r = up / (up + down)
//   lr = base_lr + (max_lr - base_lr) * scale * f,     f = scale_fn(cycle) or scale_fn(it)
//   triangular: f = 1;  triangular2: f = 1 / 2^(cycle - 1);  exp_range: f = gamma^it
// With cycle_momentum, momentum (SGD) or beta1 (Adam) = max_m - (max_m - base_m) * scale * f.
// Construction sets every group's lr to base_lr (and momentum to max_momentum).
#pragma once

#include <functional>

#include "core/arg.h"
#include "optim/lr_scheduler.h"

namespace ember::optim {

enum class CyclicMode { triangular, triangular2, exp_range };
enum class ScaleMode { cycle, iterations };

struct CyclicLROptions {
  CyclicLROptions(std::vector<double> base_lr, std::vector<double> max_lr)
      : base_lr_(std::move(base_lr)), max_lr_(std::move(max_lr)) {}
  CyclicLROptions(double base_lr, double max_lr) : base_lr_{base_lr}, max_lr_{max_lr} {}
  EMBER_ARG(std::vector<double>, base_lr);
  EMBER_ARG(std::vector<double>, max_lr);
  EMBER_ARG(int64_t, step_size_up) = 2000;
  EMBER_ARG(int64_t, step_size_down) = 0;  // 0: same as step_size_up
  EMBER_ARG(CyclicMode, mode) = CyclicMode::triangular;
  EMBER_ARG(double, gamma) = 1.0;
  // A custom scale function replaces the mode's (with its own scale_mode).
  EMBER_ARG(std::function<double(double)>, scale_fn);
  EMBER_ARG(ScaleMode, scale_mode) = ScaleMode::cycle;
  EMBER_ARG(bool, cycle_momentum) = true;
  EMBER_ARG(double, base_momentum) = 0.8;
  EMBER_ARG(double, max_momentum) = 0.9;
};

class CyclicLR : public LRScheduler {
 public:
  CyclicLR(Optimizer& optimizer, const CyclicLROptions& options);
  std::string name() const override { return "CyclicLR"; }

 protected:
  std::vector<double> get_lr() override;

 private:
  double scale(double x) const;
  CyclicLROptions options_;
  std::vector<double> max_lrs_;
  double total_size_, step_ratio_;
  ScaleMode scale_mode_;
};

}  // namespace ember::optim
