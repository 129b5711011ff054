// ReLU: max(0, x), elementwise.
#pragma once

#include "nn/module.h"

namespace ember::nn {

class ReLUImpl : public Module {
 public:
  ReLUImpl() : Module("ReLU") {}
  Tensor forward(const Tensor& x) override;
};
EMBER_MODULE(ReLU);

}  // namespace ember::nn
