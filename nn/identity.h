// Identity: returns its input (a placeholder, e.g. the shortcut of a residual block).
#pragma once

#include "nn/module.h"

namespace ember::nn {

class IdentityImpl : public Module {
 public:
  IdentityImpl() : Module("Identity") {}
  Tensor forward(const Tensor& x) override { return x; }
};
EMBER_MODULE(Identity);

}  // namespace ember::nn
