#include "nn/cross_entropy_loss.h"

#include "kernels/functional.h"
#include "nn/loss_util.h"

namespace ember::nn {

CrossEntropyLossImpl::CrossEntropyLossImpl(const CrossEntropyLossOptions& o) : Module("CrossEntropyLoss"), options(o) {
  EMBER_CHECK(o.label_smoothing() >= 0 && o.label_smoothing() <= 1,
              "CrossEntropyLoss: label_smoothing must be in [0, 1], got ", o.label_smoothing());
  // The weights move with the module (to()) and are saved with it, as in PyTorch.
  if (o.weight().defined()) options.weight() = register_buffer("weight", o.weight());
}

Tensor CrossEntropyLossImpl::forward(const Tensor& input, const Tensor& target) {
  CrossEntropyOptions o;
  o.reduction = options.reduction();
  o.ignore_index = options.ignore_index();
  o.label_smoothing = options.label_smoothing();
  o.weight = options.weight();
  return cross_entropy(input, target, o);
}

std::string CrossEntropyLossImpl::extra_repr() const {
  return str("reduction=", reduction_name(options.reduction()), ", ignore_index=", options.ignore_index(),
             ", label_smoothing=", options.label_smoothing(), options.weight().defined() ? ", weight" : "");
}

}  // namespace ember::nn
