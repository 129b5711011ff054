// Flatten: merges dims start_dim..end_dim into one (a view when possible), default [N, ...] -> [N, -1].
#pragma once

#include "core/arg.h"
#include "nn/module.h"

namespace ember::nn {

struct FlattenOptions {
  EMBER_ARG(int64_t, start_dim) = 1;
  EMBER_ARG(int64_t, end_dim) = -1;
};

class FlattenImpl : public Module {
 public:
  explicit FlattenImpl(const FlattenOptions& options = {}) : Module("Flatten"), options(options) {}
  Tensor forward(const Tensor& x) override { return x.flatten(options.start_dim(), options.end_dim()); }
  std::string extra_repr() const override {
    return str("start_dim=", options.start_dim(), ", end_dim=", options.end_dim());
  }
  FlattenOptions options;
};
EMBER_MODULE(Flatten);

}  // namespace ember::nn
