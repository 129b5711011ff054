// Dropout: while training, zeroes each element with probability p and scales the kept ones by
// 1/(1-p) (inverted dropout, as torch.nn.Dropout); the identity in eval mode. The mask comes from
// the default Philox generator, so a seed (and a checkpoint's RNG state) reproduces it, on CPU and
// CUDA alike.
#pragma once

#include "core/arg.h"
#include "nn/module.h"

namespace ember::nn {

struct DropoutOptions {
  DropoutOptions(double p = 0.5) : p_(p) {}  // NOLINT: Dropout(0.2)
  EMBER_ARG(double, p);
};

class DropoutImpl : public Module {
 public:
  explicit DropoutImpl(const DropoutOptions& options = {});
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  DropoutOptions options;
};
EMBER_MODULE(Dropout);

}  // namespace ember::nn
