// 2-D pooling: max_pool2d (+ indices), avg_pool2d, adaptive_avg_pool2d and their gradient ops.
//
// Shapes: x [N, C, H, W] (NCHW or channels-last; the outputs follow x's layout) -> [N, C, P, Q].
// max/avg (PyTorch semantics, floor mode): P = floor((H + 2 ph - kh) / sh) + 1 (Q likewise);
//   padding at most half the kernel; window of (p, q): rows [p sh - ph, p sh - ph + kh) clipped.
//   max_pool2d:  out = max over the window (padding never wins), indices = h W + w of the first
//                maximum (a NaN counts as the maximum; the last NaN wins, as PyTorch's kernels);
//                with relu: out = relu(max) and index -1 where out is not > 0 (Note [relu after max
//                pooling])
//   avg_pool2d:  out = sum over the window / divisor; divisor = the window clipped to the padded
//                input (count_include_pad) or to the input (not counting padding)
//   adaptive_avg_pool2d(OH, OW): bin i covers rows [floor(i H / OH), ceil((i + 1) H / OH)), the mean
// Gradients (g = dL/dout):
//   max_pool2d_backward(g, indices):  dx[n, c, idx] += g[n, c, p, q] with idx = indices[n, c, p, q]
//                                     (an index of -1 routes nothing)
//   avg_pool2d_backward(g):           dx[h, w] = sum over windows containing (h, w) of g / divisor
//   adaptive_avg_pool2d_backward(g):  dx[h, w] = sum over bins containing (h, w) of g / bin size
// The gradient ops are linear in g; their vjps are the forwards again (max: gather by indices).
// Both devices compute the gradients in gather form (each input element sums the windows that
// cover it, in increasing (p, q) order): deterministic, no atomics, the same order as the CPU.
#pragma once

#include <cstdint>

#include "core/error.h"
#include "core/tensor.h"

namespace ember {

// Note [relu after max pooling]: the CNNs run conv, relu, max pool. Max pooling commutes with relu
// (a non-decreasing function): max(relu(x)) = relu(max(x)), and both backwards route g to the
// window's first maximum only where that maximum is > 0 (a window of values <= 0 or with a NaN
// maximum gets no gradient either way: relu_backward's mask is y > 0). So relu fuses into the pool,
// both ways, with the same values and gradients bit for bit: the forward writes relu(max) and, where
// that is not > 0, the index -1, which max_pool2d_backward routes nowhere. The conv output's relu
// and relu_backward launches go, and the relu runs on the pooled tensor, a quarter of the size at
// 2x2. nn::Sequential fuses a ReLU followed by a MaxPool2d this way (Note [fused activations] in
// nn/sequential.h).
struct PoolAttrs {
  int64_t kernel[2] = {1, 1};
  int64_t stride[2] = {1, 1};  // resolved: never 0 here
  int64_t padding[2] = {0, 0};
  int64_t count_include_pad = 1;
  int64_t size[2] = {0, 0};  // gradient ops: the input's (H, W)
  int64_t relu = 0;          // max_pool2d: relu(max) (Note [relu after max pooling]); 0 or 1
};

struct AdaptivePoolAttrs {
  int64_t output[2] = {1, 1};
  int64_t size[2] = {0, 0};  // gradient op: the input's (H, W)
};

// Attribute builders: the op's samples and benchmark shapes describe their cases with them.
inline PoolAttrs pool_attrs(int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t ph, int64_t pw,
                            bool count_include_pad = true) {
  PoolAttrs a{};
  a.kernel[0] = kh;
  a.kernel[1] = kw;
  a.stride[0] = sh;
  a.stride[1] = sw;
  a.padding[0] = ph;
  a.padding[1] = pw;
  a.count_include_pad = count_include_pad ? 1 : 0;
  return a;
}
inline AdaptivePoolAttrs adaptive_pool_attrs(int64_t oh, int64_t ow, int64_t h = 0, int64_t w = 0) {
  AdaptivePoolAttrs a{};
  a.output[0] = oh;
  a.output[1] = ow;
  a.size[0] = h;
  a.size[1] = w;
  return a;
}
// The attributes of a pooling gradient op: the forward's, with the input's (H, W).
inline PoolAttrs with_input_size(PoolAttrs a, int64_t h, int64_t w) {
  a.size[0] = h;
  a.size[1] = w;
  return a;
}

struct PoolGeom {
  int64_t N = 0, C = 0, H = 0, W = 0, P = 0, Q = 0;
  int64_t kh = 1, kw = 1, sh = 1, sw = 1, ph = 0, pw = 0;
  bool count_include_pad = true;
  bool relu = false;  // max_pool2d (Note [relu after max pooling])
};

// Validates x's shape [N, C, H, W] against the attributes (named `op` in messages).
PoolGeom pool_geometry(const char* op, const Shape& x, const PoolAttrs& a);
PoolGeom adaptive_geometry(const char* op, const Shape& x, const AdaptivePoolAttrs& a);

// The transpose of max_pool2d_backward: full ([N, C, H, W], the pool's input shape) gathered at
// the indices ([N, C, P, Q]); 0 at an index of -1, which routed nothing (relu: Note [relu after max
// pooling]). max_pool2d_backward's own vjp, and the gradient of a pooled gradient (conv2d.h).
Tensor max_pool_gather(const Tensor& full, const Tensor& ind, bool relu);

// A gradient op that reads a pooled gradient (conv2d's and batch_norm's, with max_pool = 1):
// checks that gp and the i64 indices ind have the shape of `p`'s pooling of `full` (the op's
// output, named `what` in messages); returns that shape.
Shape check_pooled_gradient(const char* op, const Tensor& gp, const Tensor& ind, const Shape& full, const PoolAttrs& p,
                            const char* what);
// A gradient op's call c with a pooled gradient (its first input; the pool's indices its last),
// for a variant that does not fuse the unpooling: max_pool2d_backward into a gradient of `full`'s
// shape [N, C, H, W] (scratch, no autograd), then f on (that gradient, c's inputs between) with
// the attributes `plain` (the op's, without the pooling).
struct KernelCall;
class Attrs;
void run_unpooled(const KernelCall& c, void (*f)(const KernelCall&), const PoolAttrs& p, const Shape& full,
                  const Attrs& plain);

struct OpInfo;
// The CPU variants (pool_cpu.cpp), registered by define_op_* (pool.cpp).
void register_cpu_max_pool2d(OpInfo& info);
void register_cpu_max_pool2d_backward(OpInfo& info);
void register_cpu_avg_pool2d(OpInfo& info);
void register_cpu_avg_pool2d_backward(OpInfo& info);
void register_cpu_adaptive_avg_pool2d(OpInfo& info);
void register_cpu_adaptive_avg_pool2d_backward(OpInfo& info);
// The oneDNN variants ("dnnl", kVendor; pool_dnnl.cpp), defined and called only when EMBER_WITH_DNNL.
void register_dnnl_avg_pool2d(OpInfo& info);
void register_dnnl_avg_pool2d_backward(OpInfo& info);

namespace pool {

// adaptive_avg_pool2d's CUDA kernel sums an NCHW plane to 1x1 across a warp's lanes (then a shuffle
// tree) from this many values, serially below; batch_norm_global_avg_pool2d's fused kernel sums in
// the same order, so its means are the unfused ones bit for bit.
inline constexpr int64_t kLaneSumMinValues = 16;

// First and one-past-last input row of the max-pool window (clipped to the input).
EMBER_HD inline void max_window(int64_t o, int64_t s, int64_t p, int64_t k, int64_t in, int64_t& b, int64_t& e) {
  b = o * s - p;
  e = b + k < in ? b + k : in;
  b = b > 0 ? b : 0;
}

// The avg-pool window (clipped to the input) and its divisor's extent along one dim.
EMBER_HD inline void avg_window(int64_t o, int64_t s, int64_t p, int64_t k, int64_t in, bool include_pad, int64_t& b,
                                int64_t& e, int64_t& extent) {
  b = o * s - p;
  e = b + k < in + p ? b + k : in + p;
  const int64_t padded = e - b;
  b = b > 0 ? b : 0;
  e = e < in ? e : in;
  extent = include_pad ? padded : e - b;
}

// Outputs whose window may cover input row i: [first, last) (before checking the exact window).
EMBER_HD inline void covering(int64_t i, int64_t s, int64_t p, int64_t k, int64_t out, int64_t& first, int64_t& last) {
  first = i + p < k ? 0 : (i + p - k) / s + 1;
  const int64_t l = (i + p) / s + 1;
  last = l < out ? l : out;
}

// max_pool2d with relu (Note [relu after max pooling]): relu(best) (NaN stays NaN, as relu), and
// the index -1 where that is not > 0.
template <class A>
EMBER_HD inline void relu_max(A& best, int64_t& idx) {
  if (!(best > A(0))) {
    idx = -1;
    if (best == best) best = A(0);
  }
}

// Pooling whose windows do not overlap (stride = kernel, no padding): every input position is in
// at most one window, so a fused kernel can unpool a pooled gradient where it reads it.
inline bool disjoint_windows(const PoolAttrs& a) {
  return a.stride[0] == a.kernel[0] && a.stride[1] == a.kernel[1] && a.padding[0] == 0 && a.padding[1] == 0;
}

// The gradient at input (h, w) of a plane of width W from the pooled gradient gp and indices ind
// of disjoint kh x kw windows (both [PH, PW] per plane, the plane at plane_offset): gp where the
// index of the window holding (h, w) names (h, w), else 0 (max_pool2d_backward's value there).
template <class A, class T>
EMBER_HD inline A unpooled_at(const T* gp, const int64_t* ind, int64_t plane_offset, int h, int w, int W, int kh,
                              int kw, int PH, int PW) {
  const int i = h / kh, j = w / kw;
  if (i >= PH || j >= PW) return A(0);  // rows and columns past the last window
  const int64_t o = plane_offset + static_cast<int64_t>(i) * PW + j;
  return ind[o] == static_cast<int64_t>(h) * W + w ? static_cast<A>(gp[o]) : A(0);
}

// Adaptive bins.
EMBER_HD inline int64_t bin_start(int64_t o, int64_t in, int64_t out) { return (o * in) / out; }
EMBER_HD inline int64_t bin_end(int64_t o, int64_t in, int64_t out) { return ((o + 1) * in + out - 1) / out; }
// Bins that may contain input row i (each is then checked exactly).
EMBER_HD inline void bins_covering(int64_t i, int64_t in, int64_t out, int64_t& first, int64_t& last) {
  first = (i * out) / in;
  const int64_t l = ((i + 1) * out + in - 1) / in;
  last = l < out ? l : out;
}

}  // namespace pool

}  // namespace ember
