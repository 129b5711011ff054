// MSELoss: (input - target)^2, reduced by none/mean/sum, as torch.nn.MSELoss.
#pragma once

#include "kernels/options.h"
#include "core/arg.h"
#include "nn/module.h"

namespace ember::nn {

struct MSELossOptions {
  MSELossOptions(Reduction reduction = Reduction::mean) : reduction_(reduction) {}  // NOLINT
  EMBER_ARG(Reduction, reduction);
};

class MSELossImpl : public Module {
 public:
  explicit MSELossImpl(const MSELossOptions& options = {}) : Module("MSELoss"), options(options) {}
  Tensor forward(const Tensor& input, const Tensor& target);
  std::string extra_repr() const override;
  MSELossOptions options;
};
EMBER_MODULE(MSELoss);

}  // namespace ember::nn
