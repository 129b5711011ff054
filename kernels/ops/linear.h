// linear: y = act(x W^T + b), and its backward ops linear_backward_input and
// linear_backward_weight. See linear.cpp for shapes, formulas and gradients.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "kernels/options.h"  // Activation

namespace ember {

struct LinearAttrs {
  int64_t activation = 0;  // Activation (the backward ops take none or relu)
};

class Tensor;
struct KernelCall;
// What linear's kernels on either device share (linear.cpp):
int64_t linear_rows(const Tensor& t);                // the product of t's leading dims (its rows as a matrix)
bool linear_masks(const KernelCall& c);              // a backward op's call with relu: dz = g where y > 0
Tensor linear_dz(const KernelCall& c, DType dtype);  // a backward op's dz as [rows, out] in dtype
// The backward ops' composite kernels (relu_backward, matmul, sum through the registry), on either
// device: linear.cpp registers them for the CPU, linear.cu for CUDA where the fused kernel refuses.
void linear_backward_input_composite(const KernelCall& c);
void linear_backward_weight_composite(const KernelCall& c);
// Whether both backward ops of a relu layer with gradient g [..., out] and in_f inputs apply the
// mask as they load g by default (CUDA's outer-product kernels, linear.cu): where they do not, a
// caller that wants both gradients computes dz = relu_backward(g, y) once and passes none.
bool linear_masks_on_load(const Tensor& g, int64_t in_f);
bool cuda_linear_backward_masks_on_load(const Tensor& g, int64_t in_f);

}  // namespace ember
