// CrossEntropyLoss: log-softmax over the class dim (1) fused with the negative log-likelihood, as
// torch.nn.CrossEntropyLoss: class weights, ignore_index, label smoothing, none/mean/sum
// (formulas in kernels/ops/loss.h). input [N, C] (or [N, C, d1, ...], or [C]); target class
// indices (i64/i32) [N] (or [N, d1, ...], or []).
#pragma once

#include "kernels/options.h"
#include "core/arg.h"
#include "nn/module.h"

namespace ember::nn {

struct CrossEntropyLossOptions {
  EMBER_ARG(Tensor, weight);  // [C] or undefined
  EMBER_ARG(int64_t, ignore_index) = -100;
  EMBER_ARG(Reduction, reduction) = Reduction::mean;
  EMBER_ARG(double, label_smoothing) = 0.0;
};

class CrossEntropyLossImpl : public Module {
 public:
  explicit CrossEntropyLossImpl(const CrossEntropyLossOptions& options = {});
  Tensor forward(const Tensor& input, const Tensor& target);
  std::string extra_repr() const override;
  CrossEntropyLossOptions options;
};
EMBER_MODULE(CrossEntropyLoss);

}  // namespace ember::nn
