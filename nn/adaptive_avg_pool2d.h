// AdaptiveAvgPool2d: averages into a fixed output size (bins [floor(i H / OH), ceil((i+1) H / OH)),
// as torch.nn.AdaptiveAvgPool2d); output 1 is the global average pool.
#pragma once

#include "core/arg.h"
#include "nn/expanding_array.h"
#include "nn/module.h"

namespace ember::nn {

struct AdaptiveAvgPool2dOptions {
  AdaptiveAvgPool2dOptions(int64_t output_size) : output_size_{output_size, output_size} {}  // NOLINT
  AdaptiveAvgPool2dOptions(ExpandingArray2 output_size) : output_size_(output_size) {}       // NOLINT
  EMBER_ARG(ExpandingArray2, output_size);
};

class AdaptiveAvgPool2dImpl : public Module {
 public:
  explicit AdaptiveAvgPool2dImpl(const AdaptiveAvgPool2dOptions& options)
      : Module("AdaptiveAvgPool2d"), options(options) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  AdaptiveAvgPool2dOptions options;
};
EMBER_MODULE(AdaptiveAvgPool2d);

}  // namespace ember::nn
