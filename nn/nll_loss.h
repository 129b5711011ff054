// NLLLoss: the negative log-likelihood of log-probabilities (e.g. log_softmax output), as
// torch.nn.NLLLoss: class weights, ignore_index, none/mean/sum (kernels/ops/loss.h).
#pragma once

#include "kernels/options.h"
#include "core/arg.h"
#include "nn/module.h"

namespace ember::nn {

struct NLLLossOptions {
  EMBER_ARG(Tensor, weight);
  EMBER_ARG(int64_t, ignore_index) = -100;
  EMBER_ARG(Reduction, reduction) = Reduction::mean;
};

class NLLLossImpl : public Module {
 public:
  explicit NLLLossImpl(const NLLLossOptions& options = {});
  Tensor forward(const Tensor& log_probs, const Tensor& target);
  std::string extra_repr() const override;
  NLLLossOptions options;
};
EMBER_MODULE(NLLLoss);

}  // namespace ember::nn
