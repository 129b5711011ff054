// linear: y = act(x W^T + b), and its backward ops linear_backward_input and
// linear_backward_weight. See linear.cpp for shapes, formulas and gradients.
#pragma once

#include <cstdint>

#include "kernels/options.h"  // Activation

namespace ember {

struct LinearAttrs {
  int64_t activation = 0;  // Activation (the backward ops take none or relu)
};

struct KernelCall;
// The backward ops' composite kernels (relu_backward, matmul, sum through the registry), on either
// device: linear.cpp registers them for the CPU, linear.cu for CUDA where the fused kernel refuses.
void linear_backward_input_composite(const KernelCall& c);
void linear_backward_weight_composite(const KernelCall& c);

}  // namespace ember
