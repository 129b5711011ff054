// conv2d: 2-D convolution (cross-correlation, as PyTorch) and its two gradient ops.
//
// Shapes: x [N, C, H, W], weight [K, C/G, R, S], bias [K] or undefined -> y [N, K, P, Q] with
//   P = floor((H + 2 ph - dh (R - 1) - 1) / sh) + 1,  Q likewise with (W, pw, dw, S, sw);
//   G groups: output channels [g K/G, (g+1) K/G) see input channels [g C/G, (g+1) C/G).
// Forward (k in group g, Cg = C/G):
//   y[n,k,p,q] = b[k] + sum_{c<Cg, r<R, s<S} x[n, g Cg + c, p sh - ph + r dh, q sw - pw + s dw] w[k,c,r,s]
//   (x is zero outside [0,H) x [0,W)).
// Gradients (g = dL/dy):
//   conv2d_backward_input:  dx[n, gCg+c, h, w] = sum_{k in g, r, s} g[n,k,p,q] w[k,c,r,s]
//                           over (p, q) with p sh = h + ph - r dh, q sw = w + pw - s dw (exact division)
//   conv2d_backward_weight: dw[k,c,r,s] = sum_{n,p,q} g[n,k,p,q] x[n, gCg+c, p sh - ph + r dh, q sw - pw + s dw]
//   db[k] = sum_{n,p,q} g[n,k,p,q]   (conv2d_backward_weight's second output with bias_grad)
// Both gradient ops are linear in each argument, so their own vjps are convolutions again
// (double backward): backward_input(g, w) has d/dg = conv2d(G, w), d/dw = backward_weight(g, G);
// backward_weight(g, x) has d/dg = conv2d(x, G), d/dx = backward_input(g, G).
// FLOPs (each of the three): 2 N K P Q (C/G) R S.
//
// Layouts: NCHW and channels-last (Note [channels-last decision] in kernels/common/memory_format.h).
// The layout follows x (forward), g (backward_input) or x (backward_weight); the output (and dw)
// comes out in that layout; a channels-last dw is [K, C/G, R, S] with KRSC memory.
#pragma once

#include <array>
#include <cstdint>
#include <type_traits>

#include "core/tensor.h"
#include "kernels/ops/pool.h"  // PoolAttrs
#include "kernels/options.h"   // Conv2dFuncOptions

namespace ember {

// Op attributes: the options plus, for the gradient ops, the size that cannot be recovered from the
// other operands: the input's (H, W) for backward_input, the kernel's (R, S) for backward_weight.
// bias_grad (backward_weight only): 1 makes the op return the bias gradient db as a second output
// (Note [conv bias gradient]). max_pool (conv2d_max_pool2d, and the gradient ops it calls): 1 = the
// convolution's output is max pooled with `pool` (Note [max pooling in the conv backward]). Only
// int64_t members (no padding bytes), value-initialised: Attrs keys the autotune cache by bytes.
struct Conv2dAttrs {
  Conv2dFuncOptions conv;
  int64_t size[2] = {0, 0};
  int64_t bias_grad = 0;
  int64_t max_pool = 0;
  PoolAttrs pool;  // with max_pool: the pooling (relu, and size = the convolution's output (P, Q))
};
static_assert(std::is_trivially_copyable_v<Conv2dAttrs> && std::has_unique_object_representations_v<Conv2dAttrs>,
              "Conv2dAttrs is copied and hashed as bytes: trivially copyable, no padding");

// The three convolutions of a conv2d layer, each its own op (conv2d, conv2d_backward_input,
// conv2d_backward_weight). Code that serves all three (the cuDNN and oneDNN variants, the test
// samples, the benchmark shapes) takes the direction, not a number.
enum class ConvDirection : uint8_t { forward, backward_input, backward_weight };

// Every size of one convolution, validated.
struct ConvGeom {
  int64_t N = 0, C = 0, H = 0, W = 0;  // input
  int64_t K = 0, R = 0, S = 0;         // weight [K, C/G, R, S]
  int64_t P = 0, Q = 0;                // output spatial
  int64_t G = 1, Cg = 0, Kg = 0;       // groups, channels per group
  int64_t sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1;
  bool channels_last = false;  // the layout the op runs in

  double flops() const { return 2.0 * N * K * P * Q * Cg * R * S; }
};

struct OpInfo;
// The CPU variants (conv2d_cpu.cpp). define_op_conv2d* (conv2d.cpp) call these before anything else
// registers a variant, so each op's naive kernel (kReference) is its first CPU variant.
void register_cpu_conv2d(OpInfo& info);
void register_cpu_conv2d_backward_input(OpInfo& info);
void register_cpu_conv2d_backward_weight(OpInfo& info);
// The oneDNN variants ("dnnl", kVendor; conv2d_dnnl.cpp), defined and called only when EMBER_WITH_DNNL.
void register_dnnl_conv2d(OpInfo& info);
void register_dnnl_conv2d_backward_input(OpInfo& info);
void register_dnnl_conv2d_backward_weight(OpInfo& info);

// Note [conv bias gradient]: a conv layer's bias gradient is a sum of grad_output over (n, p, q).
// As the sum op it is a permuting copy of grad_output and a reduction (on CUDA three launches and
// three passes over the largest tensor of the layer's backward; on the CPU the copy cost more than
// the MNIST weight gradient it came with). The weight gradient reads the same grad_output, so
// conv2d's vjp asks conv2d_backward_weight for both (bias_grad = 1): CUDA's direct kernel adds db
// from the values it already loads and writes it with dw in the one launch that sums its image
// splits. The other variants call conv_bias_grad_apart: on the CPU one pass over grad_output in
// its own layout (conv_bias_grad_cpu), on CUDA the sum op. Every variant returns the same outputs.
struct KernelCall;
// out[1] = the sum of grad_output (in[0]) over (n, p, q) where the call has a second output, in a
// pass of its own.
void conv_bias_grad_apart(const KernelCall& c);
// The CPU's pass (conv2d_cpu.cpp): db[k] = the sum of gy[n, k, p, q] over (n, p, q), in double, in
// an order that does not depend on the thread count.
void conv_bias_grad_cpu(const Tensor& gy, const Tensor& db);

// Note [max pooling in the conv backward]: the CNNs run conv, relu, max pool, and the pool's
// backward writes the conv's whole grad_output (zero but at one position a window) for the conv's
// two gradient ops to read it back: at MNIST batch 128, 12.8 MB for conv1 and 6.4 MB for conv2,
// and a launch. conv2d_max_pool2d is the three layers as one op (the forward: conv2d, then
// max_pool2d with the relu, Note [relu after max pooling] in pool.h); its backward calls the two
// gradient ops with max_pool = 1 and (pooled gradient, ..., indices) instead of grad_output, and a
// kernel that fuses the pooling reads grad_output[n, k, h, w] as the pooled gradient where the
// index of the window holding (h, w) names (h, w), else 0 (pool::unpooled_at in pool.h). CUDA's
// direct kernels do, in their shared-memory staging, for windows that do not overlap (stride =
// kernel, no padding: every (h, w) in at most one window); every other variant runs
// max_pool2d_backward first and then its own kernel on the result (conv_unpooled_apart): the same
// gradients, in the launches of the unfused layers. The gradient ops' inputs with max_pool:
// backward_input (pooled gradient, weight, indices), backward_weight (pooled gradient, input,
// indices); the pooled gradient and the indices have the pool's output shape.
struct KernelCall;
// Runs f on c, with c's pooled gradient (max_pool = 1) unpooled by max_pool2d_backward into a
// grad_output of the convolution's shape first; on c itself where max_pool = 0.
void conv_unpooled_apart(const KernelCall& c, void (*f)(const KernelCall&));
// A variant that does not fuse the pooling: `.fn = unpool_apart<its_fn>`.
template <void (*F)(const KernelCall&)>
void unpool_apart(const KernelCall& c) {
  conv_unpooled_apart(c, F);
}
// conv2d_max_pool2d's variant on each device: conv2d, then max_pool2d, each through the registry.
void conv_then_pool_ops(const KernelCall& c);
// Validates and returns the geometry from the shapes of x [N,C,H,W] and weight [K,C/G,R,S]
// (`op` names the op in messages). Throws on every bad combination, naming the shapes and values.
ConvGeom conv_geometry(const char* op, const Shape& x, const Shape& w, const Conv2dAttrs& a);

}  // namespace ember
