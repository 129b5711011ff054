// BatchNorm2d: batch normalisation of (N, C, H, W) inputs, NCHW or channels-last (see nn/batch_norm.h).
#pragma once

#include <array>

#include "nn/batch_norm.h"

namespace ember::nn {

class BatchNorm2dImpl : public BatchNormImplBase {
 public:
  explicit BatchNorm2dImpl(const BatchNormOptions& options) : BatchNormImplBase(options, "BatchNorm2d") {}
  // max_pool2d(forward(x)), with relu between them when `relu`, as one op each way (Sequential's
  // fusion, Note [fused layer and max pooling] in nn/sequential.h).
  Tensor forward_max_pooled(const Tensor& x, std::array<int64_t, 2> kernel, std::array<int64_t, 2> stride,
                            std::array<int64_t, 2> padding, bool relu);
  // adaptive_avg_pool2d(forward(x), 1), with relu between them when `relu`, as one op each way.
  Tensor forward_global_avg_pooled(const Tensor& x, bool relu);

 protected:
  void check_input(const Tensor& x) const override;
};
EMBER_MODULE(BatchNorm2d);

}  // namespace ember::nn
