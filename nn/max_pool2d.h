// MaxPool2d: the maximum over each kernel window (floor mode, zero-free padding of at most half the
// kernel; stride defaults to the kernel size), as torch.nn.MaxPool2d. NCHW or channels-last.
#pragma once

#include "core/arg.h"
#include "nn/expanding_array.h"
#include "nn/module.h"

namespace ember::nn {

struct MaxPool2dOptions {
  MaxPool2dOptions(int64_t kernel_size) : kernel_size_{kernel_size, kernel_size} {}  // NOLINT
  MaxPool2dOptions(ExpandingArray2 kernel_size) : kernel_size_(kernel_size) {}       // NOLINT
  EMBER_ARG(ExpandingArray2, kernel_size);
  EMBER_ARG(ExpandingArray2, stride) = ExpandingArray2{0, 0};  // {0, 0}: the kernel size
  EMBER_ARG(ExpandingArray2, padding) = ExpandingArray2{0, 0};

 public:
  MaxPool2dOptions& stride(int64_t s) { return stride(ExpandingArray2{s, s}); }
  MaxPool2dOptions& padding(int64_t p) { return padding(ExpandingArray2{p, p}); }
};

class MaxPool2dImpl : public Module {
 public:
  explicit MaxPool2dImpl(const MaxPool2dOptions& options) : Module("MaxPool2d"), options(options) {}
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  MaxPool2dOptions options;
};
EMBER_MODULE(MaxPool2d);

}  // namespace ember::nn
