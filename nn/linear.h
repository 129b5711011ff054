// Linear: y = x W^T + b, W [out_features, in_features], b [out_features].
// Initialisation (PyTorch's reset_parameters): W ~ kaiming_uniform(a = sqrt(5)), i.e.
// U(-1/sqrt(in), 1/sqrt(in)); b ~ U(-1/sqrt(in), 1/sqrt(in)) (0 when in_features is 0).
#pragma once

#include "core/arg.h"
#include "nn/module.h"

namespace ember::nn {

struct LinearOptions {
  LinearOptions(int64_t in_features, int64_t out_features) : in_features_(in_features), out_features_(out_features) {}
  EMBER_ARG(int64_t, in_features);
  EMBER_ARG(int64_t, out_features);
  EMBER_ARG(bool, bias) = true;
};

class LinearImpl : public Module {
 public:
  explicit LinearImpl(const LinearOptions& options);
  LinearImpl(int64_t in_features, int64_t out_features) : LinearImpl(LinearOptions(in_features, out_features)) {}

  // Draws new weights (PyTorch's initialisation).
  void reset_parameters();
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  LinearOptions options;
  Tensor weight;  // [out, in]
  Tensor bias;    // [out] or undefined
};
EMBER_MODULE(Linear);

}  // namespace ember::nn
