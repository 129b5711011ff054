// Internal interface between conv2d's CUDA files (conv2d.cu registers every variant; the implicit
// GEMM kernels live in conv2d_igemm.cu, the cuDNN calls in conv2d_cudnn.cu) and the benchmark
// lab's oracles (bench/lab/conv2d_lab.cu). Host-only header.
#pragma once

#include "kernels/ops/conv2d.h"
#include "kernels/registry.h"

namespace ember::convcuda {

// Operands of one convolution call, already in the layout the kernels read: NCHW with a KCRS
// weight, or NHWC (channels-last) with a KRSC weight (a channels-last [K, C/G, R, S] tensor).
struct ConvArgs {
  ConvGeom g;
  Tensor x, w, b, y;  // forward:          x, w, bias (may be undefined) -> y
                      // backward_input:   y = grad_output, w -> x = grad_input
                      // backward_weight:  y = grad_output, x -> w = grad_weight
};

// Builds the operands from a call (layout conversion included; y / x / w the op's output).
ConvArgs forward_args(const KernelCall& c);
ConvArgs backward_input_args(const KernelCall& c);
ConvArgs backward_weight_args(const KernelCall& c);

// True when every tensor of the convolution fits 32-bit indexing (the fast kernels use int).
bool fits_int32(const ConvGeom& g);

// Implicit GEMM kernels (conv2d_igemm.cu). dtype: f32/f64 for simt, f16/bf16 for mma.
void igemm_simt_forward(const ConvArgs& a);
void igemm_simt_backward_input(const ConvArgs& a);
void igemm_simt_backward_weight(const ConvArgs& a);
void igemm_mma_forward(const ConvArgs& a);
void igemm_mma_backward_input(const ConvArgs& a);
void igemm_mma_backward_weight(const ConvArgs& a);

// Typed data pointers of an operand (cp: nullptr for an undefined optional one, e.g. no bias).
template <class T>
const T* cp(const Tensor& t) {
  return t.defined() ? static_cast<const T*>(t.data_ptr()) : nullptr;
}
template <class T>
T* mp(const Tensor& t) {
  return static_cast<T*>(t.data_ptr());
}

// cuDNN (conv2d_cudnn.cu); registered only when EMBER_WITH_CUDNN.
void register_cudnn_forward(OpInfo& info);
void register_cudnn_backward_input(OpInfo& info);
void register_cudnn_backward_weight(OpInfo& info);

}  // namespace ember::convcuda
