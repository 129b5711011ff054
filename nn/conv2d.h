// Conv2d: 2-D convolution over [N, C, H, W] input (NCHW, or channels-last: the output follows the
// input's layout), weight [out, in / groups, kh, kw], bias [out]. Formula and layouts:
// kernels/ops/conv2d.h. Initialisation (PyTorch's): weight ~ kaiming_uniform(a = sqrt(5)), i.e.
// U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with fan_in = in / groups * kh * kw; bias ~ the same bound.
//
//   nn::Conv2d conv(nn::Conv2dOptions(3, 64, 3).stride(2).padding(1).bias(false));
#pragma once

#include <array>

#include "core/arg.h"
#include "nn/expanding_array.h"
#include "nn/module.h"

namespace ember::nn {

struct Conv2dOptions {
  Conv2dOptions(int64_t in_channels, int64_t out_channels, int64_t kernel_size)
      : in_channels_(in_channels), out_channels_(out_channels), kernel_size_{kernel_size, kernel_size} {}
  Conv2dOptions(int64_t in_channels, int64_t out_channels, ExpandingArray2 kernel_size)
      : in_channels_(in_channels), out_channels_(out_channels), kernel_size_(kernel_size) {}
  EMBER_ARG(int64_t, in_channels);
  EMBER_ARG(int64_t, out_channels);
  EMBER_ARG(ExpandingArray2, kernel_size);
  EMBER_ARG(ExpandingArray2, stride) = ExpandingArray2{1, 1};
  EMBER_ARG(ExpandingArray2, padding) = ExpandingArray2{0, 0};
  EMBER_ARG(ExpandingArray2, dilation) = ExpandingArray2{1, 1};
  EMBER_ARG(int64_t, groups) = 1;
  EMBER_ARG(bool, bias) = true;

 public:
  // Square shorthands: .stride(2), .padding(1), .dilation(2).
  Conv2dOptions& stride(int64_t s) { return stride(ExpandingArray2{s, s}); }
  Conv2dOptions& padding(int64_t p) { return padding(ExpandingArray2{p, p}); }
  Conv2dOptions& dilation(int64_t d) { return dilation(ExpandingArray2{d, d}); }
};

class Conv2dImpl : public Module {
 public:
  explicit Conv2dImpl(const Conv2dOptions& options);
  Conv2dImpl(int64_t in_channels, int64_t out_channels, int64_t kernel_size)
      : Conv2dImpl(Conv2dOptions(in_channels, out_channels, kernel_size)) {}
  void reset_parameters();
  Tensor forward(const Tensor& x) override;
  // max_pool2d(forward(x)), with relu between them when `relu`, as one op each way (Sequential's
  // fusion, Note [fused layer and max pooling] in nn/sequential.h).
  Tensor forward_max_pooled(const Tensor& x, std::array<int64_t, 2> kernel, std::array<int64_t, 2> stride,
                            std::array<int64_t, 2> padding, bool relu);
  std::string extra_repr() const override;

  Conv2dOptions options;
  Tensor weight;  // [out, in / groups, kh, kw]
  Tensor bias;    // [out] or undefined
};
EMBER_MODULE(Conv2d);

}  // namespace ember::nn
