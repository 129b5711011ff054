// AvgPool2d: the mean over each kernel window (floor mode; with padding, count_include_pad chooses
// whether the zeros count), as torch.nn.AvgPool2d. NCHW or channels-last.
#pragma once

#include "core/arg.h"
#include "nn/expanding_array.h"
#include "nn/module.h"

namespace ember::nn {

struct AvgPool2dOptions {
  AvgPool2dOptions(int64_t kernel_size) : kernel_size_{kernel_size, kernel_size} {}  // NOLINT
  AvgPool2dOptions(ExpandingArray2 kernel_size) : kernel_size_(kernel_size) {}       // NOLINT
  EMBER_ARG(ExpandingArray2, kernel_size);
  EMBER_ARG(ExpandingArray2, stride) = ExpandingArray2{0, 0};  // {0, 0}: the kernel size
  EMBER_ARG(ExpandingArray2, padding) = ExpandingArray2{0, 0};
  EMBER_ARG(bool, count_include_pad) = true;

 public:
  AvgPool2dOptions& stride(int64_t s) { return stride(ExpandingArray2{s, s}); }
  AvgPool2dOptions& padding(int64_t p) { return padding(ExpandingArray2{p, p}); }
};

class AvgPool2dImpl : public Module {
 public:
  explicit AvgPool2dImpl(const AvgPool2dOptions& options) : Module("AvgPool2d"), options(options) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  AvgPool2dOptions options;
};
EMBER_MODULE(AvgPool2d);

}  // namespace ember::nn
