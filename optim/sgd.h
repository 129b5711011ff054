// SGD with momentum, dampening, Nesterov momentum, weight decay (L2) and maximize, exactly
// torch.optim.SGD's update (see kernels/ops/optim.h for the per-element formula):
//   g = grad (+ weight_decay * p);  buf = g on the first step, else momentum * buf + (1 - dampening) * g
//   g = nesterov ? g + momentum * buf : buf;   p -= lr * g
// State per parameter (when momentum != 0): "momentum_buffer" and "step" (f32 scalar on the
// parameter's device; the kernel uses it to recognise the first step without asking the host).
#pragma once

#include "core/arg.h"
#include "optim/optimizer.h"

namespace ember::optim {

struct SGDOptions : OptimizerOptions {
  explicit SGDOptions(double lr) : lr_(lr) {}
  EMBER_ARG(double, lr);
  EMBER_ARG(double, momentum) = 0;
  EMBER_ARG(double, dampening) = 0;
  EMBER_ARG(double, weight_decay) = 0;
  EMBER_ARG(bool, nesterov) = false;
  EMBER_ARG(bool, maximize) = false;

 public:
  std::unique_ptr<OptimizerOptions> clone() const override { return std::make_unique<SGDOptions>(*this); }
  double get_lr() const override { return lr_; }
  void set_lr(double lr) override { lr_ = lr; }
  double get_momentum() const override { return momentum_; }
  void set_momentum(double m) override { momentum_ = m; }
  std::map<std::string, double> to_map() const override;
  void from_map(const std::map<std::string, double>& m) override;
  void validate() const override;
};

class SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, const SGDOptions& defaults);
  SGD(std::vector<ParamGroup> groups, const SGDOptions& defaults);

  using Optimizer::step;
  void step(const GradScaling& scaling) override;

 protected:
  std::vector<double> hyper_values(const OptimizerOptions& o) const override;
  std::vector<std::string> state_names(const OptimizerOptions& o) const override;
};

}  // namespace ember::optim
