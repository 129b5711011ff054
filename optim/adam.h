// Adam (torch.optim.Adam): L2 weight decay added to the gradient; amsgrad and maximize optional.
//   m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2
//   p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
// State per parameter: "exp_avg", "exp_avg_sq", ("max_exp_avg_sq" with amsgrad), "step" (an f32
// scalar on the parameter's device, advanced by the kernel itself: the bias corrections never need
// the host). Formula details: kernels/ops/optim.h.
#pragma once

#include <tuple>

#include "core/arg.h"
#include "optim/adam_base.h"

namespace ember::optim {

using Betas = std::tuple<double, double>;

struct AdamOptions : OptimizerOptions {
  explicit AdamOptions(double lr = 1e-3) : lr_(lr) {}
  EMBER_ARG(double, lr);
  EMBER_ARG(Betas, betas) = std::make_tuple(0.9, 0.999);
  EMBER_ARG(double, eps) = 1e-8;
  EMBER_ARG(double, weight_decay) = 0;
  EMBER_ARG(bool, amsgrad) = false;
  EMBER_ARG(bool, maximize) = false;

 public:
  std::unique_ptr<OptimizerOptions> clone() const override { return std::make_unique<AdamOptions>(*this); }
  double get_lr() const override { return lr_; }
  void set_lr(double lr) override { lr_ = lr; }
  double get_momentum() const override { return std::get<0>(betas_); }
  void set_momentum(double m) override { std::get<0>(betas_) = m; }
  std::map<std::string, double> to_map() const override;
  void from_map(const std::map<std::string, double>& m) override;
  void validate() const override;
};

class Adam : public AdamBase {
 public:
  Adam(std::vector<Tensor> params, const AdamOptions& defaults = AdamOptions());
  Adam(std::vector<ParamGroup> groups, const AdamOptions& defaults = AdamOptions());
};

}  // namespace ember::optim
