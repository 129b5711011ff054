#include "nn/adaptive_avg_pool2d.h"

#include "kernels/functional.h"
#include "nn/pool_util.h"

namespace ember::nn {

using pool_util::pair_str;
using pool_util::stride_or_kernel;

Tensor AdaptiveAvgPool2dImpl::forward(const Tensor& x) { return adaptive_avg_pool2d(x, options.output_size()); }
std::string AdaptiveAvgPool2dImpl::extra_repr() const { return str("output_size=", pair_str(options.output_size())); }

}  // namespace ember::nn
