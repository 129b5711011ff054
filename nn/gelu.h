// GELU: x * Phi(x), the exact (erf) form as torch.nn.GELU(), elementwise.
#pragma once

#include "nn/module.h"

namespace ember::nn {

class GELUImpl : public Module {
 public:
  GELUImpl() : Module("GELU") {}
  Tensor forward(const Tensor& x) override;
};
EMBER_MODULE(GELU);

}  // namespace ember::nn
