// conv2d, conv2d_backward_input, conv2d_backward_weight: the op definitions: shape inference, the
// composite vjps, samples, cost and benches, and the functional API. See conv2d.h for formulas.
// The CPU engines (naive reference, im2col) are in conv2d_cpu.cpp, the CUDA ones in conv2d.cu,
// conv2d_igemm.cu and conv2d_cudnn.cu.
#include "kernels/ops/conv2d.h"

#include "core/autograd/node.h"
#include "kernels/common/memory_format.h"
#include "kernels/common/samples.h"
#include "kernels/functional.h"
#include "kernels/registry.h"

#include <algorithm>
#include <cmath>

namespace ember {

ConvGeom conv_geometry(const char* op, const Shape& x, const Shape& w, const Conv2dAttrs& a) {
  const Conv2dOptions& o = a.conv;
  EMBER_CHECK(x.size() == 4, op, ": expects a 4-D input [N, C, H, W], got ", x, " (", x.size(), " dims)");
  EMBER_CHECK(w.size() == 4, op, ": expects a 4-D weight [K, C/groups, R, S], got ", w, " (", w.size(), " dims)");
  EMBER_CHECK(o.groups >= 1, op, ": groups must be positive, got ", o.groups);
  for (int i = 0; i < 2; ++i) {
    EMBER_CHECK(o.stride[i] >= 1, op, ": stride must be positive, got (", o.stride[0], ", ", o.stride[1], ")");
    EMBER_CHECK(o.dilation[i] >= 1, op, ": dilation must be positive, got (", o.dilation[0], ", ", o.dilation[1], ")");
    EMBER_CHECK(o.padding[i] >= 0, op, ": padding must be non-negative, got (", o.padding[0], ", ", o.padding[1], ")");
  }
  ConvGeom g;
  g.N = x[0];
  g.C = x[1];
  g.H = x[2];
  g.W = x[3];
  g.K = w[0];
  g.R = w[2];
  g.S = w[3];
  g.G = o.groups;
  g.sh = o.stride[0];
  g.sw = o.stride[1];
  g.ph = o.padding[0];
  g.pw = o.padding[1];
  g.dh = o.dilation[0];
  g.dw = o.dilation[1];
  EMBER_CHECK(g.C >= 1, op, ": the input ", x, " has no channels");
  EMBER_CHECK(g.K >= 1 && w[1] >= 1 && g.R >= 1 && g.S >= 1, op, ": the weight ", w, " has an empty dimension");
  EMBER_CHECK(g.C % g.G == 0, op, ": groups = ", g.G, " must divide the input channels C = ", g.C, " (input ", x, ")");
  EMBER_CHECK(g.K % g.G == 0, op, ": groups = ", g.G, " must divide the output channels K = ", g.K, " (weight ", w, ")");
  g.Cg = g.C / g.G;
  g.Kg = g.K / g.G;
  EMBER_CHECK(w[1] == g.Cg, op, ": input ", x, " has ", g.C, " channels but weight ", w, " expects ", w[1], " * groups = ",
              w[1] * g.G, " channels (groups = ", g.G, ")");
  const int64_t eh = g.dh * (g.R - 1) + 1, ew = g.dw * (g.S - 1) + 1;
  const int64_t hp = g.H + 2 * g.ph, wp = g.W + 2 * g.pw;
  EMBER_CHECK(eh <= hp && ew <= wp, op, ": the kernel ", g.R, "x", g.S, " (", eh, "x", ew, " with dilation ", g.dh, "x",
              g.dw, ") is larger than the padded input ", hp, "x", wp, " (input ", g.H, "x", g.W, ", padding ", g.ph, "x",
              g.pw, ")");
  g.P = (hp - eh) / g.sh + 1;
  g.Q = (wp - ew) / g.sw + 1;
  return g;
}

namespace {

// ---- shape inference ----

void check_dtypes(const char* op, const Tensor& a, const char* an, const Tensor& b, const char* bn) {
  EMBER_CHECK(is_floating(a.dtype()), op, ": expects a floating ", an, ", got ", a.describe());
  EMBER_CHECK(a.dtype() == b.dtype(), op, ": ", an, " ", a.describe(), " and ", bn, " ", b.describe(),
              " must have the same dtype");
}

std::vector<TensorSpec> infer_conv2d(std::span<const Tensor> in, const Attrs& attrs) {
  EMBER_CHECK(in.size() == 3, "conv2d: expects (input, weight, bias)");
  const Tensor &x = in[0], &w = in[1], &b = in[2];
  EMBER_CHECK(x.defined() && w.defined(), "conv2d: input and weight must be defined");
  ConvGeom g = conv_geometry("conv2d", x.shape(), w.shape(), attrs.get<Conv2dAttrs>());
  check_dtypes("conv2d", x, "input", w, "weight");
  if (b.defined()) {
    EMBER_CHECK(b.dim() == 1 && b.shape()[0] == g.K, "conv2d: bias must be [", g.K, "] (one value per output channel), got ",
                b.shape());
    check_dtypes("conv2d", x, "input", b, "bias");
  }
  Shape out{g.N, g.K, g.P, g.Q};
  return {{out, x.dtype(), layout_strides(out, runs_channels_last(x))}};
}

std::vector<TensorSpec> infer_conv2d_backward_input(std::span<const Tensor> in, const Attrs& attrs) {
  EMBER_CHECK(in.size() == 2, "conv2d_backward_input: expects (grad_output, weight)");
  const Tensor &gy = in[0], &w = in[1];
  const auto& a = attrs.get<Conv2dAttrs>();
  EMBER_CHECK(gy.dim() == 4, "conv2d_backward_input: expects a 4-D grad_output [N, K, P, Q], got ", gy.shape());
  EMBER_CHECK(w.dim() == 4, "conv2d_backward_input: expects a 4-D weight [K, C/groups, R, S], got ", w.shape());
  EMBER_CHECK(a.size[0] >= 1 && a.size[1] >= 1, "conv2d_backward_input: the input size (H, W) = (", a.size[0], ", ",
              a.size[1], ") must be positive");
  Shape xs{gy.shape()[0], w.shape()[1] * a.conv.groups, a.size[0], a.size[1]};
  ConvGeom g = conv_geometry("conv2d_backward_input", xs, w.shape(), a);
  Shape ys{g.N, g.K, g.P, g.Q};
  EMBER_CHECK(gy.shape() == ys, "conv2d_backward_input: grad_output ", gy.shape(), " does not match the output ", ys,
              " of a convolution of input ", xs, " with weight ", w.shape());
  check_dtypes("conv2d_backward_input", gy, "grad_output", w, "weight");
  return {{xs, gy.dtype(), layout_strides(xs, runs_channels_last(gy))}};
}

std::vector<TensorSpec> infer_conv2d_backward_weight(std::span<const Tensor> in, const Attrs& attrs) {
  EMBER_CHECK(in.size() == 2, "conv2d_backward_weight: expects (grad_output, input)");
  const Tensor &gy = in[0], &x = in[1];
  const auto& a = attrs.get<Conv2dAttrs>();
  EMBER_CHECK(gy.dim() == 4, "conv2d_backward_weight: expects a 4-D grad_output [N, K, P, Q], got ", gy.shape());
  EMBER_CHECK(x.dim() == 4, "conv2d_backward_weight: expects a 4-D input [N, C, H, W], got ", x.shape());
  EMBER_CHECK(a.size[0] >= 1 && a.size[1] >= 1, "conv2d_backward_weight: the kernel size (R, S) = (", a.size[0], ", ",
              a.size[1], ") must be positive");
  const int64_t groups = a.conv.groups;
  EMBER_CHECK(groups >= 1 && x.shape()[1] % groups == 0, "conv2d_backward_weight: groups = ", groups,
              " must divide the input channels C = ", x.shape()[1]);
  Shape ws{gy.shape()[1], x.shape()[1] / groups, a.size[0], a.size[1]};
  ConvGeom g = conv_geometry("conv2d_backward_weight", x.shape(), ws, a);
  Shape ys{g.N, g.K, g.P, g.Q};
  EMBER_CHECK(gy.shape() == ys, "conv2d_backward_weight: grad_output ", gy.shape(), " does not match the output ", ys,
              " of a convolution of input ", x.shape(), " with weight ", ws);
  check_dtypes("conv2d_backward_weight", gy, "grad_output", x, "input");
  return {{ws, x.dtype(), layout_strides(ws, runs_channels_last(x))}};
}

// ---- autograd ----

Conv2dAttrs with_size(Conv2dAttrs a, int64_t s0, int64_t s1) {
  a.size[0] = s0;
  a.size[1] = s1;
  return a;
}

std::vector<Tensor> conv2d_vjp(const BackwardCtx& ctx) {
  const Tensor &x = ctx.inputs[0], &w = ctx.inputs[1], &b = ctx.inputs[2];
  const auto& a = ctx.attr<Conv2dAttrs>();
  Tensor g = ctx.grad(0);
  // the gradient ops run in the layout of their first operand: keep it the forward's
  g = contiguous_as(g, runs_channels_last(x));
  Tensor dx, dw, db;
  if (ctx.needs_grad(0)) dx = call1(OpId::conv2d_backward_input, {g, w}, with_size(a, x.shape()[2], x.shape()[3]));
  if (ctx.needs_grad(1)) dw = call1(OpId::conv2d_backward_weight, {g, x}, with_size(a, w.shape()[2], w.shape()[3]));
  if (ctx.needs_grad(2) && b.defined()) db = sum(g, {0, 2, 3});
  return {dx, dw, db};
}

std::vector<Tensor> conv2d_backward_input_vjp(const BackwardCtx& ctx) {
  const Tensor &gy = ctx.inputs[0], &w = ctx.inputs[1];
  const auto& a = ctx.attr<Conv2dAttrs>();
  Tensor G = contiguous_as(ctx.grad(0), runs_channels_last(gy));
  Tensor dgy, dw;
  if (ctx.needs_grad(0)) dgy = call1(OpId::conv2d, {G, w, Tensor()}, with_size(a, 0, 0));
  if (ctx.needs_grad(1)) dw = call1(OpId::conv2d_backward_weight, {gy, G}, with_size(a, w.shape()[2], w.shape()[3]));
  return {dgy, dw};
}

std::vector<Tensor> conv2d_backward_weight_vjp(const BackwardCtx& ctx) {
  const Tensor &gy = ctx.inputs[0], &x = ctx.inputs[1];
  const auto& a = ctx.attr<Conv2dAttrs>();
  Tensor G = ctx.grad(0);
  Tensor dgy, dx;
  if (ctx.needs_grad(0)) dgy = call1(OpId::conv2d, {x, G, Tensor()}, with_size(a, 0, 0));
  if (ctx.needs_grad(1)) dx = call1(OpId::conv2d_backward_input, {contiguous_as(gy, runs_channels_last(x)), G},
                                    with_size(a, x.shape()[2], x.shape()[3]));
  return {dgy, dx};
}

// ---- samples ----

struct ConvCase {
  std::string name;
  Shape x, w;
  Conv2dOptions o;
  bool bias = true;
  bool channels_last = false;
  bool sliced = false;  // x is a strided slice (neither layout): the kernels must make it dense
};

std::vector<ConvCase> conv_cases() {
  using O = Conv2dOptions;
  return {
      {"3x3 pad 1 [2,3,5,5] -> 4", {2, 3, 5, 5}, {4, 3, 3, 3}, O().set_padding(1)},
      {"stride 2 odd 7x5 [2,3,7,5] -> 4", {2, 3, 7, 5}, {4, 3, 3, 3}, O().set_stride(2).set_padding(1)},
      {"dilation 2 [1,2,7,7] -> 3", {1, 2, 7, 7}, {3, 2, 3, 3}, O().set_padding(2).set_dilation(2)},
      {"groups 2 [2,4,5,5] -> 6", {2, 4, 5, 5}, {6, 2, 3, 3}, O().set_padding(1).set_groups(2), false},
      {"depthwise groups=C [2,4,6,6] -> 8", {2, 4, 6, 6}, {8, 1, 3, 3}, O().set_padding(1).set_groups(4)},
      {"1x1 [2,8,4,4] -> 5", {2, 8, 4, 4}, {5, 8, 1, 1}, O(), false},
      {"1x1 stride 2 [2,6,5,5] -> 4", {2, 6, 5, 5}, {4, 6, 1, 1}, O().set_stride(2)},
      {"non-square kernel 2x4 stride (2,1) pad (1,0) [1,3,6,8] -> 2", {1, 3, 6, 8}, {2, 3, 2, 4},
       O().set_stride(2, 1).set_padding(1, 0)},
      {"batch 1, C = 1 [1,1,6,6] -> 2", {1, 1, 6, 6}, {2, 1, 3, 3}, O().set_padding(1)},
      {"5x5 pad 2 [2,2,7,7] -> 3", {2, 2, 7, 7}, {3, 2, 5, 5}, O().set_padding(2)},
      {"stride 3 > kernel, rows unused [1,2,8,7] -> 2", {1, 2, 8, 7}, {2, 2, 2, 2}, O().set_stride(3)},
      {"channels-last [2,4,5,6] -> 6", {2, 4, 5, 6}, {6, 4, 3, 3}, O().set_padding(1), true, true},
      {"channels-last groups 2 stride 2 [2,4,7,5] -> 6", {2, 4, 7, 5}, {6, 2, 3, 3},
       O().set_stride(2).set_padding(1).set_groups(2), true, true},
      {"channels-last 1x1 [2,16,4,3] -> 8", {2, 16, 4, 3}, {8, 16, 1, 1}, O(), false, true},
      {"channels-last C%8==0 (vector loads) [2,16,6,6] -> 24", {2, 16, 6, 6}, {24, 16, 3, 3}, O().set_padding(1), true,
       true},
      {"sliced input [2,3,5,5] (every other column)", {2, 3, 5, 5}, {4, 3, 3, 3}, O().set_padding(1), true, false, true},
      {"odd channels, K not a tile multiple [2,9,9,9] -> 70", {2, 9, 9, 9}, {70, 9, 3, 3}, O().set_padding(1)},
      {"several tiles [2,40,12,12] -> 72", {2, 40, 12, 12}, {72, 40, 3, 3}, O().set_padding(1)},
      {"several tiles channels-last [2,40,12,12] -> 72", {2, 40, 12, 12}, {72, 40, 3, 3}, O().set_padding(1), true, true},
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
  // vendor variants get the f16 accumulation bound, about sqrt(n) half-ulps of the result.
  const double f16_partial = std::max(1e-3, 2e-4 * std::sqrt(static_cast<double>(reduction)));
  if (f16_partial > 1e-3) {
    s.vendor_tol = {{DType::f16, {2e-3, f16_partial}}};
    s.tol_note += "; the cuDNN variants' f16 results allow partial sums kept in f16 (Note [cuDNN f16 partial sums])";
  }
}

std::vector<OpSample> conv2d_samples() {
  std::vector<OpSample> out;
  uint64_t seed = 2000;
  for (const ConvCase& cc : conv_cases()) {
    ConvGeom g = conv_geometry("conv2d", cc.x, cc.w, Conv2dAttrs{cc.o});
    OpSample s;
    s.name = cc.name;
    Tensor x = make_input(cc, cc.x, ++seed, cc.channels_last);
    Tensor w = samples::uniform(cc.w, -1, 1, ++seed);
    if (cc.channels_last && cc.name.find("1x1") != std::string::npos) w = contiguous_as(w, true);  // a KRSC weight too
    Tensor b = cc.bias ? samples::uniform({cc.w[0]}, -1, 1, ++seed) : Tensor();
    s.inputs = {x, w, b};
    s.attrs = Conv2dAttrs{cc.o};
    conv_tol(s, g.Cg * g.R * g.S);
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<OpSample> conv2d_backward_input_samples() {
  std::vector<OpSample> out;
  uint64_t seed = 3000;
  for (const ConvCase& cc : conv_cases()) {
    ConvGeom g = conv_geometry("conv2d", cc.x, cc.w, Conv2dAttrs{cc.o});
    OpSample s;
    s.name = cc.name;
    Tensor gy = make_input(cc, {g.N, g.K, g.P, g.Q}, ++seed, cc.channels_last);
    Tensor w = samples::uniform(cc.w, -1, 1, ++seed);
    s.inputs = {gy, w};
    s.attrs = Conv2dAttrs{cc.o, {g.H, g.W}};
    conv_tol(s, g.Kg * g.R * g.S);
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<OpSample> conv2d_backward_weight_samples() {
  std::vector<OpSample> out;
  uint64_t seed = 4000;
  for (const ConvCase& cc : conv_cases()) {
    ConvGeom g = conv_geometry("conv2d", cc.x, cc.w, Conv2dAttrs{cc.o});
    OpSample s;
    s.name = cc.name;
    Tensor gy = samples::uniform({g.N, g.K, g.P, g.Q}, -1, 1, ++seed);
    if (cc.channels_last) gy = contiguous_as(gy, true);
    Tensor x = make_input(cc, cc.x, ++seed, cc.channels_last);
    s.inputs = {gy, x};
    s.attrs = Conv2dAttrs{cc.o, {g.R, g.S}};
    conv_tol(s, g.N * g.P * g.Q);
    out.push_back(std::move(s));
  }
  return out;
}

// ---- cost and benches ----

Cost conv2d_cost(const KernelCall& c) {
  ConvGeom g = conv_geometry("conv2d", c.in[0].shape(), c.in[1].shape(), c.attr<Conv2dAttrs>());
  double bytes = static_cast<double>(c.in[0].nbytes() + c.in[1].nbytes() + c.out[0].nbytes());
  if (c.in[2].defined()) bytes += static_cast<double>(c.in[2].nbytes());
  return {bytes, g.flops()};
}
Cost conv2d_backward_input_cost(const KernelCall& c) {
  ConvGeom g = conv_geometry("conv2d_backward_input", c.out[0].shape(), c.in[1].shape(), c.attr<Conv2dAttrs>());
  return {static_cast<double>(c.in[0].nbytes() + c.in[1].nbytes() + c.out[0].nbytes()), g.flops()};
}
Cost conv2d_backward_weight_cost(const KernelCall& c) {
  ConvGeom g = conv_geometry("conv2d_backward_weight", c.in[1].shape(), c.out[0].shape(), c.attr<Conv2dAttrs>());
  return {static_cast<double>(c.in[0].nbytes() + c.in[1].nbytes() + c.out[0].nbytes()), g.flops()};
}

struct BenchShape {
  const char* name;
  int64_t N, C, H, W, K, R, pad, stride;
};

// The MNIST CNN (conv 1->32 and 32->64, 3x3 pad 1) and ResNet-50's convolutions at batch 32.
std::vector<BenchShape> bench_shapes(size_t* n_mnist) {
  std::vector<BenchShape> v;
  for (int64_t n : {64, 128, 512}) {
    v.push_back({"mnist conv1 1->32 3x3 28x28", n, 1, 28, 28, 32, 3, 1, 1});
    v.push_back({"mnist conv2 32->64 3x3 14x14", n, 32, 14, 14, 64, 3, 1, 1});
  }
  *n_mnist = v.size();
  v.push_back({"resnet50 64->64 3x3 56x56", 32, 64, 56, 56, 64, 3, 1, 1});
  v.push_back({"resnet50 128->128 3x3 28x28", 32, 128, 28, 28, 128, 3, 1, 1});
  v.push_back({"resnet50 256->256 3x3 14x14", 32, 256, 14, 14, 256, 3, 1, 1});
  v.push_back({"resnet50 512->512 3x3 7x7", 32, 512, 7, 7, 512, 3, 1, 1});
  v.push_back({"resnet50 1x1 64->256 56x56", 32, 64, 56, 56, 256, 1, 0, 1});
  v.push_back({"resnet50 1x1 256->64 56x56", 32, 256, 56, 56, 64, 1, 0, 1});
  v.push_back({"resnet50 1x1 512->128 28x28", 32, 512, 28, 28, 128, 1, 0, 1});
  v.push_back({"resnet50 1x1 1024->256 14x14", 32, 1024, 14, 14, 256, 1, 0, 1});
  v.push_back({"resnet50 1x1 2048->512 7x7", 32, 2048, 7, 7, 512, 1, 0, 1});
  v.push_back({"resnet50 1x1 s2 256->512 56x56", 32, 256, 56, 56, 512, 1, 0, 2});
  return v;
}

Tensor bench_tensor(const Shape& s, DType dt, Device d, bool cl) {
  Tensor t = uniform(s, -1, 1, TensorOptions().dtype(dt).device(d));
  return cl ? contiguous_as(t, true) : t;
}

// kind 0: forward (x, w, b); 1: backward_input (gy, w); 2: backward_weight (gy, x)
std::vector<BenchCase> conv_benches(int kind) {
  std::vector<BenchCase> out;
  size_t n_mnist = 0;
  std::vector<BenchShape> shapes = bench_shapes(&n_mnist);
  for (size_t i = 0; i < shapes.size(); ++i) {
    const BenchShape b = shapes[i];
    const bool mnist = i < n_mnist;
    std::vector<std::pair<DType, bool>> configs;  // dtype, channels-last
    if (mnist) configs = {{DType::f32, false}, {DType::bf16, false}};
    else configs = {{DType::f32, false}, {DType::f16, true}, {DType::bf16, true}};
    for (const auto& config : configs) {
      const DType dt = config.first;  // not a structured binding: clang 14 cannot capture those
      const bool cl = config.second;
      const Conv2dOptions o = Conv2dOptions().set_stride(b.stride).set_padding(b.pad);
      ConvGeom g = conv_geometry("conv2d", {b.N, b.C, b.H, b.W}, {b.K, b.C, b.R, b.R}, Conv2dAttrs{o});
      const Conv2dAttrs attrs =
          kind == 0 ? Conv2dAttrs{o} : kind == 1 ? Conv2dAttrs{o, {g.H, g.W}} : Conv2dAttrs{o, {g.R, g.S}};
      BenchCase bc;
      bc.name = str(b.name, " n", b.N, " ", dt, cl ? " channels-last" : "");
      bc.attrs = attrs;
      bc.make = [g, dt, cl, kind](Device d) {
        Shape xs{g.N, g.C, g.H, g.W}, ws{g.K, g.Cg, g.R, g.S}, ys{g.N, g.K, g.P, g.Q};
        if (kind == 0)
          return std::vector<Tensor>{bench_tensor(xs, dt, d, cl), bench_tensor(ws, dt, d, cl),
                                     bench_tensor({g.K}, dt, d, false)};
        if (kind == 1) return std::vector<Tensor>{bench_tensor(ys, dt, d, cl), bench_tensor(ws, dt, d, cl)};
        return std::vector<Tensor>{bench_tensor(ys, dt, d, cl), bench_tensor(xs, dt, d, cl)};
      };
      out.push_back(std::move(bc));
    }
  }
  return out;
}

}  // namespace

void define_op_conv2d(OpInfo& info) {
  info.doc = "2-D convolution (NCHW or channels-last), stride/padding/dilation/groups, fused bias";
  info.infer = infer_conv2d;
  info.backward = conv2d_vjp;
  info.save = Save::inputs;
  info.samples = conv2d_samples;
  info.cost = conv2d_cost;
  info.benches = [] { return conv_benches(0); };
  info.autocast = AutocastPolicy::lower;
  info.contiguous_inputs = false;  // NCHW and channels-last both reach the kernels
  register_cpu_conv2d(info);  // conv2d_cpu.cpp: naive (the reference) first
#if EMBER_WITH_DNNL
  register_dnnl_conv2d(info);  // conv2d_dnnl.cpp
#endif
}

void define_op_conv2d_backward_input(OpInfo& info) {
  info.doc = "gradient of conv2d with respect to its input (a transposed convolution)";
  info.infer = infer_conv2d_backward_input;
  info.backward = conv2d_backward_input_vjp;
  info.save = Save::inputs;
  info.samples = conv2d_backward_input_samples;
  info.cost = conv2d_backward_input_cost;
  info.benches = [] { return conv_benches(1); };
  info.contiguous_inputs = false;
  register_cpu_conv2d_backward_input(info);  // conv2d_cpu.cpp: naive (the reference) first
#if EMBER_WITH_DNNL
  register_dnnl_conv2d_backward_input(info);  // conv2d_dnnl.cpp
#endif
}

void define_op_conv2d_backward_weight(OpInfo& info) {
  info.doc = "gradient of conv2d with respect to its weight";
  info.infer = infer_conv2d_backward_weight;
  info.backward = conv2d_backward_weight_vjp;
  info.save = Save::inputs;
  info.samples = conv2d_backward_weight_samples;
  info.cost = conv2d_backward_weight_cost;
  info.benches = [] { return conv_benches(2); };
  info.contiguous_inputs = false;
  register_cpu_conv2d_backward_weight(info);  // conv2d_cpu.cpp: naive (the reference) first
#if EMBER_WITH_DNNL
  register_dnnl_conv2d_backward_weight(info);  // conv2d_dnnl.cpp
#endif
}

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dOptions& o) {
  return call1(OpId::conv2d, {x, weight, bias}, Conv2dAttrs{o});
}

Tensor conv2d_backward_input(const Tensor& grad_output, const Tensor& weight, std::array<int64_t, 2> input_hw,
                             const Conv2dOptions& o) {
  return call1(OpId::conv2d_backward_input, {grad_output, weight}, Conv2dAttrs{o, {input_hw[0], input_hw[1]}});
}

Tensor conv2d_backward_weight(const Tensor& grad_output, const Tensor& x, std::array<int64_t, 2> kernel_rs,
                              const Conv2dOptions& o) {
  return call1(OpId::conv2d_backward_weight, {grad_output, x}, Conv2dAttrs{o, {kernel_rs[0], kernel_rs[1]}});
}

}  // namespace ember
