#include "nn/mse_loss.h"

#include "kernels/functional.h"
#include "nn/loss_util.h"

namespace ember::nn {

Tensor MSELossImpl::forward(const Tensor& input, const Tensor& target) {
  return mse_loss(input, target, options.reduction());
}

std::string MSELossImpl::extra_repr() const { return str("reduction=", reduction_name(options.reduction())); }

}  // namespace ember::nn
