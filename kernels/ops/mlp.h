// mlp: a stack of linear layers as one op, y = act_L(... act_1(x W_1^T + b_1) ... W_L^T + b_L),
// and its backward op mlp_backward. See mlp.cpp for shapes and gradients, mlp.cu for the fused
// CUDA kernels (Note [fused MLP]).
#pragma once

#include <cstdint>

namespace ember {

inline constexpr int kMlpMaxLayers = 8;

struct MlpAttrs {
  int64_t layers = 0;
  int64_t relu_mask = 0;   // bit l: layer l (0 = the first) applies relu
  int64_t input_grad = 0;  // mlp_backward only: 1 computes dx, 0 leaves it empty ([0])
  bool relu_at(int l) const { return ((relu_mask >> l) & 1) != 0; }
};

class Tensor;
struct KernelCall;
// The layers one by one through the registry, on either device (mlp.cpp; CUDA registers them too).
void mlp_composite(const KernelCall& c);
void mlp_backward_composite(const KernelCall& c);
// The same with each layer's op on its vendor variant (cuBLAS/cuBLASLt on CUDA), as
// `--backends '*=vendor'` runs a model's layers.
void mlp_vendor(const KernelCall& c);
void mlp_backward_vendor(const KernelCall& c);
// The largest layer width the fused CUDA kernels take (every layer's outputs; so every hidden
// layer's inputs too): the activations of a block's rows live in shared memory.
inline constexpr int64_t kMlpMaxWidth = 128;

}  // namespace ember
