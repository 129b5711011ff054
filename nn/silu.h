// SiLU: x * sigmoid(x), elementwise.
#pragma once

#include "nn/module.h"

namespace ember::nn {

class SiLUImpl : public Module {
 public:
  SiLUImpl() : Module("SiLU") {}
  Tensor forward(const Tensor& x) override;
};
EMBER_MODULE(SiLU);

}  // namespace ember::nn
