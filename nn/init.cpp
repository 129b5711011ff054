#include "nn/init.h"

#include <cmath>

#include "core/autograd/node.h"
#include "kernels/functional.h"

namespace ember::nn::init {

std::pair<int64_t, int64_t> calculate_fan_in_and_fan_out(const Tensor& t) {
  EMBER_CHECK(t.dim() >= 2, "fan in and fan out cannot be computed for a tensor with fewer than 2 dimensions (",
              t.describe(), ")");
  int64_t receptive = 1;
  for (int d = 2; d < t.dim(); ++d) receptive *= t.shape()[d];
  return {t.shape()[1] * receptive, t.shape()[0] * receptive};
}

double calculate_gain(Nonlinearity n, double param) {
  switch (n) {
    case Nonlinearity::linear:
    case Nonlinearity::conv:
    case Nonlinearity::sigmoid: return 1.0;
    case Nonlinearity::tanh: return 5.0 / 3.0;
    case Nonlinearity::relu: return std::sqrt(2.0);
    case Nonlinearity::leaky_relu: {
      double slope = param < 0 ? 0.01 : param;
      return std::sqrt(2.0 / (1.0 + slope * slope));
    }
    case Nonlinearity::selu: return 3.0 / 4.0;
  }
  return 1.0;
}

Tensor& uniform_(Tensor& t, double a, double b) {
  autograd::NoGradGuard ng;
  return ember::uniform_(t, a, b);
}

Tensor& normal_(Tensor& t, double mean, double std) {
  autograd::NoGradGuard ng;
  return ember::normal_(t, mean, std);
}

Tensor& constant_(Tensor& t, double value) {
  autograd::NoGradGuard ng;
  return t.fill_(value);
}
Tensor& zeros_(Tensor& t) { return constant_(t, 0.0); }
Tensor& ones_(Tensor& t) { return constant_(t, 1.0); }

namespace {
int64_t fan_of(const Tensor& t, FanMode mode) {
  auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(t);
  return mode == FanMode::fan_in ? fan_in : fan_out;
}
}  // namespace

Tensor& kaiming_uniform_(Tensor& t, double a, FanMode mode, Nonlinearity nonlinearity) {
  int64_t fan = fan_of(t, mode);
  if (t.numel() == 0) return t;
  EMBER_CHECK(fan > 0, "kaiming_uniform_: fan is 0 for ", t.describe());
  double gain = calculate_gain(nonlinearity, a);
  double bound = std::sqrt(3.0) * gain / std::sqrt(static_cast<double>(fan));
  return init::uniform_(t, -bound, bound);
}

Tensor& kaiming_normal_(Tensor& t, double a, FanMode mode, Nonlinearity nonlinearity) {
  int64_t fan = fan_of(t, mode);
  if (t.numel() == 0) return t;
  EMBER_CHECK(fan > 0, "kaiming_normal_: fan is 0 for ", t.describe());
  return init::normal_(t, 0.0, calculate_gain(nonlinearity, a) / std::sqrt(static_cast<double>(fan)));
}

Tensor& xavier_uniform_(Tensor& t, double gain) {
  auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(t);
  if (t.numel() == 0) return t;
  double a = gain * std::sqrt(6.0 / static_cast<double>(fan_in + fan_out));
  return init::uniform_(t, -a, a);
}

Tensor& xavier_normal_(Tensor& t, double gain) {
  auto [fan_in, fan_out] = calculate_fan_in_and_fan_out(t);
  if (t.numel() == 0) return t;
  return init::normal_(t, 0.0, gain * std::sqrt(2.0 / static_cast<double>(fan_in + fan_out)));
}

}  // namespace ember::nn::init
