// BatchNorm1d: batch normalisation of (N, C) or (N, C, L) inputs (see nn/batch_norm.h).
#pragma once

#include "nn/batch_norm.h"

namespace ember::nn {

class BatchNorm1dImpl : public BatchNormImplBase {
 public:
  explicit BatchNorm1dImpl(const BatchNormOptions& options) : BatchNormImplBase(options, "BatchNorm1d") {}

 protected:
  void check_input(const Tensor& x) const override;
};
EMBER_MODULE(BatchNorm1d);

}  // namespace ember::nn
