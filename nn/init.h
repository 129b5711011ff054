// Parameter initialisers, as torch.nn.init (in place, no autograd, drawing from the default
// Philox generator).
#pragma once

#include <string>
#include <utility>

#include "core/tensor.h"

namespace ember::nn::init {

enum class FanMode { fan_in, fan_out };
enum class Nonlinearity { linear, conv, sigmoid, tanh, relu, leaky_relu, selu };

// (fan_in, fan_out) of a weight [out, in, *kernel]: in * prod(kernel), out * prod(kernel).
std::pair<int64_t, int64_t> calculate_fan_in_and_fan_out(const Tensor& t);
// The recommended gain: 1 for linear/conv/sigmoid, 5/3 for tanh, sqrt(2) for relu,
// sqrt(2 / (1 + a^2)) for leaky_relu (a defaults to 0.01), 3/4 for selu.
double calculate_gain(Nonlinearity nonlinearity, double param = -1);

Tensor& uniform_(Tensor& t, double a = 0, double b = 1);
Tensor& normal_(Tensor& t, double mean = 0, double std = 1);
Tensor& constant_(Tensor& t, double value);
Tensor& zeros_(Tensor& t);
Tensor& ones_(Tensor& t);
// U(-bound, bound), bound = gain * sqrt(3 / fan), gain = calculate_gain(nonlinearity, a).
Tensor& kaiming_uniform_(Tensor& t, double a = 0, FanMode mode = FanMode::fan_in,
                         Nonlinearity nonlinearity = Nonlinearity::leaky_relu);
// N(0, std^2), std = gain / sqrt(fan).
Tensor& kaiming_normal_(Tensor& t, double a = 0, FanMode mode = FanMode::fan_in,
                        Nonlinearity nonlinearity = Nonlinearity::leaky_relu);
// U(-a, a), a = gain * sqrt(6 / (fan_in + fan_out)).
Tensor& xavier_uniform_(Tensor& t, double gain = 1);
// N(0, std^2), std = gain * sqrt(2 / (fan_in + fan_out)).
Tensor& xavier_normal_(Tensor& t, double gain = 1);

}  // namespace ember::nn::init
