// Test samples of conv2d and its gradients (kernels/ops/conv2d.*): stride, padding, dilation,
// groups and depthwise, 1x1 and non-square kernels, channels-last and sliced inputs, tile edges of
// the CUDA kernels, Winograd's paths on the CPU, the MNIST CNN's layers, an empty batch; and
// conv2d_max_pool2d with the gradient ops on pooled gradients (Note [max pooling in the conv
// backward]): disjoint and overlapping windows, rows in no window, relu or not.
#include <algorithm>
#include <cmath>
#include <string>

#include "kernels/common/memory_format.h"
#include "kernels/ops/conv2d.h"
#include "kernels/options.h"
#include "kernels/registry.h"
#include "tests/op_samples/sample_inputs.h"

namespace ember {

namespace {

struct ConvCase {
  std::string name;
  Shape x, w;
  Conv2dFuncOptions o;
  bool bias = true;
  bool channels_last = false;
  bool sliced = false;  // x is a strided slice (neither layout): the kernels must make it dense
};

std::vector<ConvCase> conv_cases() {
  using O = Conv2dFuncOptions;
  return {
      {"3x3 pad 1 [2,3,5,5] -> 4", {2, 3, 5, 5}, {4, 3, 3, 3}, O().set_padding(1)},
      {"stride 2 odd 7x5 [2,3,7,5] -> 4", {2, 3, 7, 5}, {4, 3, 3, 3}, O().set_stride(2).set_padding(1)},
      {"dilation 2 [1,2,7,7] -> 3", {1, 2, 7, 7}, {3, 2, 3, 3}, O().set_padding(2).set_dilation(2)},
      {"groups 2 [2,4,5,5] -> 6", {2, 4, 5, 5}, {6, 2, 3, 3}, O().set_padding(1).set_groups(2), false},
      {"depthwise groups=C [2,4,6,6] -> 8", {2, 4, 6, 6}, {8, 1, 3, 3}, O().set_padding(1).set_groups(4)},
      {"1x1 [2,8,4,4] -> 5", {2, 8, 4, 4}, {5, 8, 1, 1}, O(), false},
      {"1x1 stride 2 [2,6,5,5] -> 4", {2, 6, 5, 5}, {4, 6, 1, 1}, O().set_stride(2)},
      {"non-square kernel 2x4 stride (2,1) pad (1,0) [1,3,6,8] -> 2",
       {1, 3, 6, 8},
       {2, 3, 2, 4},
       O().set_stride(2, 1).set_padding(1, 0)},
      {"batch 1, C = 1 [1,1,6,6] -> 2", {1, 1, 6, 6}, {2, 1, 3, 3}, O().set_padding(1)},
      {"5x5 pad 2 [2,2,7,7] -> 3", {2, 2, 7, 7}, {3, 2, 5, 5}, O().set_padding(2)},
      {"stride 3 > kernel, rows unused [1,2,8,7] -> 2", {1, 2, 8, 7}, {2, 2, 2, 2}, O().set_stride(3)},
      {"channels-last [2,4,5,6] -> 6", {2, 4, 5, 6}, {6, 4, 3, 3}, O().set_padding(1), true, true},
      {"channels-last groups 2 stride 2 [2,4,7,5] -> 6",
       {2, 4, 7, 5},
       {6, 2, 3, 3},
       O().set_stride(2).set_padding(1).set_groups(2),
       true,
       true},
      {"channels-last 1x1 [2,16,4,3] -> 8", {2, 16, 4, 3}, {8, 16, 1, 1}, O(), false, true},
      // a GEMM with a bias epilogue: the Hopper GEMM's 1x1 lab variants (bench/lab/conv2d_lab.cu)
      {"channels-last 1x1 biased [2,24,5,3] -> 16", {2, 24, 5, 3}, {16, 24, 1, 1}, O(), true, true},
      {"channels-last C%8==0 (vector loads) [2,16,6,6] -> 24",
       {2, 16, 6, 6},
       {24, 16, 3, 3},
       O().set_padding(1),
       true,
       true},
      {"sliced input [2,3,5,5] (every other column)",
       {2, 3, 5, 5},
       {4, 3, 3, 3},
       O().set_padding(1),
       true,
       false,
       true},
      {"odd channels, K not a tile multiple [2,9,9,9] -> 70", {2, 9, 9, 9}, {70, 9, 3, 3}, O().set_padding(1)},
      {"several tiles [2,40,12,12] -> 72", {2, 40, 12, 12}, {72, 40, 3, 3}, O().set_padding(1)},
      {"several tiles channels-last [2,40,12,12] -> 72",
       {2, 40, 12, 12},
       {72, 40, 3, 3},
       O().set_padding(1),
       true,
       true},
      {"MNIST conv1 [2,1,28,28] -> 32 3x3 pad 1", {2, 1, 28, 28}, {32, 1, 3, 3}, O().set_padding(1)},
      {"MNIST conv2 [2,32,14,14] -> 64 3x3 pad 1", {2, 32, 14, 14}, {64, 32, 3, 3}, O().set_padding(1)},
      {"MNIST conv1 5x5 pad 2 [2,1,28,28] -> 32", {2, 1, 28, 28}, {32, 1, 5, 5}, O().set_padding(2)},
      {"MNIST conv2 5x5 pad 2 [2,32,14,14] -> 64", {2, 32, 14, 14}, {64, 32, 5, 5}, O().set_padding(2)},
      // Winograd F(2x2, 3x3) (conv2d_cpu.cpp, >= 8 channels per group each way): odd output sizes (tiles half
      // outside), no padding and padding 2 (backward_input's own padding 2 and 0), groups
      {"winograd groups 2 pad 0 odd [2,16,7,9] -> 16", {2, 16, 7, 9}, {16, 8, 3, 3}, O().set_groups(2)},
      {"winograd pad 2 [1,8,6,5] -> 9", {1, 8, 6, 5}, {9, 8, 3, 3}, O().set_padding(2)},
      {"empty batch [0,3,5,5]", {0, 3, 5, 5}, {4, 3, 3, 3}, O().set_padding(1)},
  };
}

Tensor make_input(const ConvCase& cc, const Shape& s, uint64_t seed, bool layout_cl) {
  if (cc.sliced) {
    Shape wide = s;
    wide[3] = 2 * s[3];
    return samples::uniform(wide, -1, 1, seed).slice(3, 0, 2 * s[3], 2);
  }
  Tensor t = samples::uniform(s, -1, 1, seed);
  return layout_cl ? contiguous_as(t, true) : t;
}

// Tolerances: the kernels sum in another order than the double-accumulating reference.
void conv_tol(OpSample& s, int64_t reduction) {
  double f32 = reduction > 64 ? 1e-5 : 2e-6;
  s.tol = {{DType::f32, {f32, 1e-4}}, {DType::f16, {2e-3, 1e-3}}, {DType::bf16, {1.6e-2, 1e-2}}};
  s.tol_note =
      "fp32 accumulation in another order than the double-accumulating reference; the f16/bf16 result is one "
      "rounding of that fp32 sum, which may land on the neighbouring value";
  // Note [cuDNN f16 partial sums]: cuDNN 9.14's backward-data algorithm 1 in f16 on an H200 gave 25
  // of 12544 input gradients of the MNIST CNN's 5x5 conv (1600 products a sum) up to 0.0034 off at
  // 0.35, whether listed with default or tensor-op math: an error that grows like an f16 rounding
  // per partial sum, not one rounding of an f32 sum. ember's kernels keep the tight bound; the
  // vendor variants get an f16 partial-sum bound. The simulator's cuDNN models it as partial sums of
  // 32 products each rounded to f16 (sim/libs/cudnn.cpp); with these samples' inputs in
  // [-1, 1] (products of rms 1/3) each rounding is off by up to half an f16 ulp of a partial sum,
  // and the largest error over a sample's outputs stays within 5e-4 sqrt(n): about four standard
  // deviations of that model (the first bound, 2e-4 sqrt(n), was fitted to the H200's one shape and
  // failed 1 to 3 outputs in 10^4 of the emulation at others).
  const double f16_partial = std::max(1e-3, 5e-4 * std::sqrt(static_cast<double>(reduction)));
  if (f16_partial > 1e-3) {
    s.vendor_tol = {{DType::f16, {2e-3, f16_partial}}};
    s.tol_note += "; the cuDNN variants' f16 results allow partial sums kept in f16 (Note [cuDNN f16 partial sums])";
  }
}

// Each direction's inputs, attributes and reduction length, from the same cases (seeds 2000, 3000
// and 4000 on: each direction draws its own values).
std::vector<OpSample> conv_samples(ConvDirection dir) {
  std::vector<OpSample> out;
  uint64_t seed = dir == ConvDirection::forward ? 2000 : dir == ConvDirection::backward_input ? 3000 : 4000;
  for (const ConvCase& cc : conv_cases()) {
    ConvGeom g = conv_geometry("conv2d", cc.x, cc.w, Conv2dAttrs{cc.o});
    OpSample s;
    s.name = cc.name;
    const Shape gy_shape{g.N, g.K, g.P, g.Q};
    int64_t reduction = 0;
    switch (dir) {
      case ConvDirection::forward: {
        Tensor x = make_input(cc, cc.x, ++seed, cc.channels_last);
        Tensor w = samples::uniform(cc.w, -1, 1, ++seed);
        if (cc.channels_last && cc.name.find("1x1") != std::string::npos) w = contiguous_as(w, true);  // KRSC too
        Tensor b = cc.bias ? samples::uniform({cc.w[0]}, -1, 1, ++seed) : Tensor();
        s.inputs = {x, w, b};
        s.attrs = Conv2dAttrs{cc.o};
        reduction = g.Cg * g.R * g.S;
        break;
      }
      case ConvDirection::backward_input: {
        Tensor gy = make_input(cc, gy_shape, ++seed, cc.channels_last);
        s.inputs = {gy, samples::uniform(cc.w, -1, 1, ++seed)};
        s.attrs = Conv2dAttrs{cc.o, {g.H, g.W}};
        reduction = g.Kg * g.R * g.S;
        break;
      }
      case ConvDirection::backward_weight: {
        Tensor gy = samples::uniform(gy_shape, -1, 1, ++seed);
        if (cc.channels_last) gy = contiguous_as(gy, true);
        Tensor x = make_input(cc, cc.x, ++seed, cc.channels_last);
        s.inputs = {gy, x};
        s.attrs = Conv2dAttrs{cc.o, {g.R, g.S}, cc.bias ? 1 : 0};  // a biased layer's call: dW and db
        reduction = g.N * g.P * g.Q;
        break;
      }
    }
    conv_tol(s, reduction);
    out.push_back(std::move(s));
  }
  return out;
}

// ---- with max pooling (Note [max pooling in the conv backward]) ----

struct PooledCase {
  std::string name;
  Shape x, w;
  Conv2dFuncOptions o;
  PoolAttrs pool;
  bool bias = true;
  bool channels_last = false;
};

std::vector<PooledCase> pooled_cases() {
  using O = Conv2dFuncOptions;
  PoolAttrs p2 = pool_attrs(2, 2, 2, 2, 0, 0), relu2 = p2;
  relu2.relu = 1;
  PoolAttrs overlapping = pool_attrs(3, 3, 2, 2, 1, 1);
  PoolAttrs relu21 = pool_attrs(2, 1, 2, 1, 0, 0);
  relu21.relu = 1;
  return {
      {"MNIST conv1 + relu + pool 2 [2,1,28,28] -> 32", {2, 1, 28, 28}, {32, 1, 3, 3}, O().set_padding(1), relu2},
      {"MNIST conv2 + relu + pool 2 [2,32,14,14] -> 64", {2, 32, 14, 14}, {64, 32, 3, 3}, O().set_padding(1), relu2},
      {"5x5 + pool 2, 7x7 output: the last row and column in no window [2,3,7,7] -> 8",
       {2, 3, 7, 7},
       {8, 3, 5, 5},
       O().set_padding(2),
       p2},
      {"overlapping pool 3x3 stride 2 pad 1 [2,3,8,8] -> 4",
       {2, 3, 8, 8},
       {4, 3, 3, 3},
       O().set_padding(1),
       overlapping},
      {"channels-last + relu + pool 2 [2,4,6,6] -> 6",
       {2, 4, 6, 6},
       {6, 4, 3, 3},
       O().set_padding(1),
       relu2,
       true,
       true},
      {"no bias, relu + pool 2x1 [1,2,6,5] -> 3", {1, 2, 6, 5}, {3, 2, 3, 3}, O().set_padding(1), relu21, false},
  };
}

// Multiples of 1/8 in [-1, 1] (CPU f64): every product and partial sum of these convolutions is
// exact in f32, so every device and dtype sees the same pooling windows, ties and all, and picks
// the same maximum.
Tensor eighths(const Shape& shape, uint64_t seed) {
  Tensor k = samples::randint(shape, 17, seed);
  Tensor t = empty(shape, DType::f64);
  const int64_t* src = k.data<int64_t>();
  double* dst = t.data<double>();
  for (int64_t i = 0; i < t.numel(); ++i) dst[i] = static_cast<double>(src[i] - 8) / 8.0;
  return t;
}

// The case's attributes; the gradient ops' with their size, the pool's input size (P, Q) and
// bias_grad.
Conv2dAttrs pooled_attrs(const PooledCase& pc, const ConvGeom* g = nullptr, int64_t s0 = 0, int64_t s1 = 0,
                         int64_t bias_grad = 0) {
  Conv2dAttrs a{pc.o, {s0, s1}, bias_grad};
  a.max_pool = 1;
  a.pool = g != nullptr ? with_input_size(pc.pool, g->P, g->Q) : pc.pool;
  return a;
}

// conv2d_max_pool2d: each case with continuous values, f32 only and gradchecked (a maximum or a
// relu at a kink is improbable), then with eighths in every dtype (ties are common, so no
// gradcheck: the devices' indices agree exactly).
std::vector<OpSample> conv_max_pool_samples() {
  std::vector<OpSample> out;
  uint64_t seed = 5000;
  for (bool grid : {false, true}) {
    for (const PooledCase& pc : pooled_cases()) {
      auto values = [&](const Shape& s) { return grid ? eighths(s, ++seed) : samples::uniform(s, -1, 1, ++seed); };
      OpSample s;
      s.name = pc.name + (grid ? ", eighths" : "");
      Tensor x = values(pc.x);
      s.inputs = {pc.channels_last ? contiguous_as(x, true) : x, values(pc.w), pc.bias ? values({pc.w[0]}) : Tensor()};
      s.attrs = pooled_attrs(pc);
      ConvGeom g = conv_geometry("conv2d", pc.x, pc.w, Conv2dAttrs{pc.o});
      conv_tol(s, g.Cg * g.R * g.S);
      if (grid) s.gradcheck = false;
      else s.dtypes = {DType::f32};
      out.push_back(std::move(s));
    }
  }
  return out;
}

// The gradient ops on a pooled gradient: the indices of a relu-max pooling (or a plain one) of
// random values of the convolution's output shape.
std::vector<OpSample> pooled_grad_samples(ConvDirection dir) {
  std::vector<OpSample> out;
  uint64_t seed = dir == ConvDirection::backward_input ? 6000 : 7000;
  for (const PooledCase& pc : pooled_cases()) {
    const ConvGeom g = conv_geometry("conv2d", pc.x, pc.w, Conv2dAttrs{pc.o});
    Tensor y = samples::uniform({g.N, g.K, g.P, g.Q}, -1, 1, ++seed);
    if (pc.channels_last) y = contiguous_as(y, true);
    Tensor ind = call(OpId::max_pool2d, {y}, pc.pool)[1];
    Tensor gp = samples::uniform(ind.shape(), -1, 1, ++seed);
    if (pc.channels_last) gp = contiguous_as(gp, true);
    OpSample s;
    s.name = pc.name;
    int64_t reduction = 0;
    if (dir == ConvDirection::backward_input) {
      s.inputs = {gp, samples::uniform(pc.w, -1, 1, ++seed), ind};
      s.attrs = pooled_attrs(pc, &g, g.H, g.W);
      reduction = g.Kg * g.R * g.S;
    } else {
      Tensor x = samples::uniform(pc.x, -1, 1, ++seed);
      s.inputs = {gp, pc.channels_last ? contiguous_as(x, true) : x, ind};
      s.attrs = pooled_attrs(pc, &g, g.R, g.S, pc.bias ? 1 : 0);
      reduction = g.N * g.P * g.Q;
    }
    conv_tol(s, reduction);
    out.push_back(std::move(s));
  }
  return out;
}

// A direction's samples: the plain ones, then on pooled gradients.
std::vector<OpSample> with_pooled(ConvDirection dir) {
  std::vector<OpSample> out = conv_samples(dir);
  for (OpSample& s : pooled_grad_samples(dir)) out.push_back(std::move(s));
  return out;
}

}  // namespace

std::vector<OpSample> samples_conv2d() { return conv_samples(ConvDirection::forward); }
std::vector<OpSample> samples_conv2d_backward_input() { return with_pooled(ConvDirection::backward_input); }
std::vector<OpSample> samples_conv2d_backward_weight() { return with_pooled(ConvDirection::backward_weight); }
std::vector<OpSample> samples_conv2d_max_pool2d() { return conv_max_pool_samples(); }

}  // namespace ember
