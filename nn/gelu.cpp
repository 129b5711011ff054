#include "nn/gelu.h"

#include "kernels/functional.h"

namespace ember::nn {

Tensor GELUImpl::forward(const Tensor& x) { return ember::gelu(x); }

}  // namespace ember::nn
