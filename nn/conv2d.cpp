#include "nn/conv2d.h"

#include <cmath>

#include "kernels/functional.h"
#include "nn/init.h"

namespace ember::nn {

Conv2dImpl::Conv2dImpl(const Conv2dOptions& o) : Module("Conv2d"), options(o) {
  EMBER_CHECK(o.in_channels() > 0 && o.out_channels() > 0,
              "Conv2d: channel counts must be positive, got in_channels=", o.in_channels(),
              ", out_channels=", o.out_channels());
  EMBER_CHECK(o.groups() > 0, "Conv2d: groups must be positive, got ", o.groups());
  EMBER_CHECK(o.in_channels() % o.groups() == 0, "Conv2d: in_channels (", o.in_channels(),
              ") must be divisible by groups (", o.groups(), ")");
  EMBER_CHECK(o.out_channels() % o.groups() == 0, "Conv2d: out_channels (", o.out_channels(),
              ") must be divisible by groups (", o.groups(), ")");
  for (int i = 0; i < 2; ++i) {
    EMBER_CHECK(o.kernel_size()[i] > 0, "Conv2d: kernel_size must be positive, got [", o.kernel_size()[0], ", ",
                o.kernel_size()[1], "]");
    EMBER_CHECK(o.stride()[i] > 0 && o.dilation()[i] > 0 && o.padding()[i] >= 0,
                "Conv2d: stride and dilation must be "
                "positive and padding non-negative");
  }
  weight = register_parameter(
      "weight", empty({o.out_channels(), o.in_channels() / o.groups(), o.kernel_size()[0], o.kernel_size()[1]}));
  if (o.bias()) bias = register_parameter("bias", empty({o.out_channels()}));
  reset_parameters();
}

void Conv2dImpl::reset_parameters() {
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    auto [fan_in, fan_out] = init::calculate_fan_in_and_fan_out(weight);
    double bound = fan_in > 0 ? 1.0 / std::sqrt(static_cast<double>(fan_in)) : 0.0;
    init::uniform_(bias, -bound, bound);
  }
}

namespace {

// The layer's options for the functional API, after checking x against the layer.
ember::Conv2dFuncOptions func_options(const Conv2dOptions& options, const Tensor& x) {
  EMBER_CHECK(x.dim() == 4, "Conv2d: expects a 4-D input [N, C, H, W], got ", x.shape());
  EMBER_CHECK(x.shape()[1] == options.in_channels(), "Conv2d: input ", x.shape(), " has ", x.shape()[1],
              " channels but the layer expects ", options.in_channels());
  return ember::Conv2dFuncOptions()
      .set_stride(options.stride()[0], options.stride()[1])
      .set_padding(options.padding()[0], options.padding()[1])
      .set_dilation(options.dilation()[0], options.dilation()[1])
      .set_groups(options.groups());
}

}  // namespace

Tensor Conv2dImpl::forward(const Tensor& x) { return conv2d(x, weight, bias, func_options(options, x)); }

Tensor Conv2dImpl::forward_max_pooled(const Tensor& x, std::array<int64_t, 2> kernel, std::array<int64_t, 2> stride,
                                      std::array<int64_t, 2> padding, bool relu) {
  return ember::conv2d_max_pool2d(x, weight, bias, func_options(options, x), kernel, stride, padding, relu);
}

std::string Conv2dImpl::extra_repr() const {
  const auto& o = options;
  std::string s = str(o.in_channels(), ", ", o.out_channels(), ", kernel_size=(", o.kernel_size()[0], ", ",
                      o.kernel_size()[1], "), stride=(", o.stride()[0], ", ", o.stride()[1], ")");
  if (o.padding() != ExpandingArray2{0, 0}) s += str(", padding=(", o.padding()[0], ", ", o.padding()[1], ")");
  if (o.dilation() != ExpandingArray2{1, 1}) s += str(", dilation=(", o.dilation()[0], ", ", o.dilation()[1], ")");
  if (o.groups() != 1) s += str(", groups=", o.groups());
  if (!bias.defined()) s += ", bias=false";
  return s;
}

}  // namespace ember::nn
