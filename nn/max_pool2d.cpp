#include "nn/max_pool2d.h"

#include "kernels/functional.h"
#include "nn/pool_util.h"

namespace ember::nn {

using pool_util::pair_str;
using pool_util::stride_or_kernel;

Tensor MaxPool2dImpl::forward(const Tensor& x) {
  return max_pool2d(x, options.kernel_size(), options.stride(), options.padding());
}
std::string MaxPool2dImpl::extra_repr() const {
  return str("kernel_size=", pair_str(options.kernel_size()),
             ", stride=", pair_str(stride_or_kernel(options.stride(), options.kernel_size())),
             ", padding=", pair_str(options.padding()));
}

}  // namespace ember::nn
