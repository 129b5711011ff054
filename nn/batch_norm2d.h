// BatchNorm2d: batch normalisation of (N, C, H, W) inputs, NCHW or channels-last (see nn/batch_norm.h).
#pragma once

#include "nn/batch_norm.h"

namespace ember::nn {

class BatchNorm2dImpl : public BatchNormImplBase {
 public:
  explicit BatchNorm2dImpl(const BatchNormOptions& options) : BatchNormImplBase(options, "BatchNorm2d") {}

 protected:
  void check_input(const Tensor& x) const override;
};
EMBER_MODULE(BatchNorm2d);

}  // namespace ember::nn
