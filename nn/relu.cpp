#include "nn/relu.h"

#include "kernels/functional.h"

namespace ember::nn {

Tensor ReLUImpl::forward(const Tensor& x) { return ember::relu(x); }

}  // namespace ember::nn
