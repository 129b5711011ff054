#include "nn/nll_loss.h"

#include "kernels/functional.h"
#include "nn/loss_util.h"

namespace ember::nn {

NLLLossImpl::NLLLossImpl(const NLLLossOptions& o) : Module("NLLLoss"), options(o) {
  if (o.weight().defined()) options.weight() = register_buffer("weight", o.weight());
}

Tensor NLLLossImpl::forward(const Tensor& log_probs, const Tensor& target) {
  CrossEntropyOptions o;
  o.reduction = options.reduction();
  o.ignore_index = options.ignore_index();
  o.weight = options.weight();
  return nll_loss(log_probs, target, o);
}

std::string NLLLossImpl::extra_repr() const {
  return str("reduction=", reduction_name(options.reduction()), ", ignore_index=", options.ignore_index(),
             options.weight().defined() ? ", weight" : "");
}

}  // namespace ember::nn
