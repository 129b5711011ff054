#include "nn/silu.h"

#include "kernels/functional.h"

namespace ember::nn {

Tensor SiLUImpl::forward(const Tensor& x) { return ember::silu(x); }

}  // namespace ember::nn
