// The functional forms of the nn layers (torch.nn.functional / libtorch's F::). The layers are
// thin modules over these; most are the kernels' functional API under nn::functional, so
//   namespace F = ember::nn::functional;   F::linear(x, w, b); F::dropout(x, 0.1, training);
#pragma once

#include "kernels/functional.h"

namespace ember::nn::functional {

using ember::adaptive_avg_pool2d;      // (x, output_size)
using ember::avg_pool2d;               // (x, kernel, stride, padding, count_include_pad)
using ember::batch_norm;               // (x, weight, bias, running_mean, running_var, training, momentum, eps)
using ember::conv2d;                   // (x, weight, bias, Conv2dFuncOptions)
using ember::cross_entropy;            // (logits, target, CrossEntropyOptions)
using ember::cross_entropy_with_grad;  // (logits, target, the gradient backward() will get, options)
using ember::dropout;                  // (x, p, training)
using ember::gelu;
using ember::linear;  // (x, weight [out, in], bias, activation)
using ember::log_softmax;
using ember::max_pool2d;  // (x, kernel, stride, padding)
using ember::mse_loss;    // (input, target, Reduction)
using ember::nll_loss;    // (log_probs, target, CrossEntropyOptions)
using ember::relu;
using ember::silu;
using ember::softmax;

inline Tensor flatten(const Tensor& x, int64_t start_dim = 1, int64_t end_dim = -1) {
  return x.flatten(start_dim, end_dim);
}
inline Tensor identity(const Tensor& x) { return x; }

}  // namespace ember::nn::functional
