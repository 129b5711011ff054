// Benchmark shapes of conv2d, its gradients and conv2d_max_pool2d (kernels/ops/conv2d.*).
#include <utility>

#include "bench/op_shapes/op_shapes.h"
#include "kernels/common/memory_format.h"
#include "kernels/functional.h"
#include "kernels/ops/conv2d.h"
#include "kernels/options.h"

namespace ember {

namespace {

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

// The MNIST CNN's pooling after each conv: relu, 2x2 max pooling.
Conv2dAttrs mnist_pooled(Conv2dAttrs a, const ConvGeom& g) {
  a.max_pool = 1;
  a.pool = with_input_size(pool_attrs(2, 2, 2, 2, 0, 0), g.P, g.Q);
  a.pool.relu = 1;
  return a;
}

// The gradient ops at the MNIST shapes on the pooled gradient, as the CNN's backward calls them
// (Note [max pooling in the conv backward]): the indices of a relu-max pooling of random values.
BenchCase pooled_bench(BenchCase bc, ConvDirection dir, const ConvGeom& g, DType dt) {
  bc.name += " pooled";
  bc.attrs = mnist_pooled(bc.attrs.get<Conv2dAttrs>(), g);
  const PoolAttrs pool = bc.attrs.get<Conv2dAttrs>().pool;
  bc.make = [g, dt, dir, pool](Device d) {
    Shape xs{g.N, g.C, g.H, g.W}, ws{g.K, g.Cg, g.R, g.S}, ys{g.N, g.K, g.P, g.Q};
    const Tensor ind = call(OpId::max_pool2d, {bench_tensor(ys, dt, d, false)}, pool)[1];
    const Tensor gp = bench_tensor(ind.shape(), dt, d, false);
    return std::vector<Tensor>{gp, bench_tensor(dir == ConvDirection::backward_input ? ws : xs, dt, d, false), ind};
  };
  return bc;
}

// Inputs: forward (x, w, b); backward_input (gy, w); backward_weight (gy, x), with db at the MNIST
// shapes, and there also on the pooled gradient.
std::vector<BenchCase> conv_benches(ConvDirection dir) {
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
      const Conv2dFuncOptions o = Conv2dFuncOptions().set_stride(b.stride).set_padding(b.pad);
      ConvGeom g = conv_geometry("conv2d", {b.N, b.C, b.H, b.W}, {b.K, b.C, b.R, b.R}, Conv2dAttrs{o});
      // the MNIST CNN's conv layers have biases: their weight gradient comes with db (Note [conv
      // bias gradient]), as in training
      const bool bias = mnist && dir == ConvDirection::backward_weight;
      const Conv2dAttrs attrs = dir == ConvDirection::forward          ? Conv2dAttrs{o}
                                : dir == ConvDirection::backward_input ? Conv2dAttrs{o, {g.H, g.W}}
                                                                       : Conv2dAttrs{o, {g.R, g.S}, bias ? 1 : 0};
      BenchCase bc;
      bc.name = str(b.name, " n", b.N, " ", dt, cl ? " channels-last" : "", bias ? " bias" : "");
      bc.attrs = attrs;
      bc.make = [g, dt, cl, dir](Device d) {
        Shape xs{g.N, g.C, g.H, g.W}, ws{g.K, g.Cg, g.R, g.S}, ys{g.N, g.K, g.P, g.Q};
        if (dir == ConvDirection::forward)
          return std::vector<Tensor>{bench_tensor(xs, dt, d, cl), bench_tensor(ws, dt, d, cl),
                                     bench_tensor({g.K}, dt, d, false)};
        if (dir == ConvDirection::backward_input)
          return std::vector<Tensor>{bench_tensor(ys, dt, d, cl), bench_tensor(ws, dt, d, cl)};
        return std::vector<Tensor>{bench_tensor(ys, dt, d, cl), bench_tensor(xs, dt, d, cl)};
      };
      if (mnist && dir != ConvDirection::forward) out.push_back(pooled_bench(bc, dir, g, dt));
      out.push_back(std::move(bc));
    }
  }
  return out;
}

// conv2d_max_pool2d: the MNIST CNN's conv, relu, 2x2 max pool layers.
std::vector<BenchCase> conv_pool_benches() {
  std::vector<BenchCase> out;
  size_t n_mnist = 0;
  std::vector<BenchShape> shapes = bench_shapes(&n_mnist);
  for (size_t i = 0; i < n_mnist; ++i) {
    const BenchShape b = shapes[i];
    for (DType dt : {DType::f32, DType::bf16}) {
      const Conv2dFuncOptions o = Conv2dFuncOptions().set_stride(b.stride).set_padding(b.pad);
      ConvGeom g = conv_geometry("conv2d", {b.N, b.C, b.H, b.W}, {b.K, b.C, b.R, b.R}, Conv2dAttrs{o});
      BenchCase bc;
      bc.name = str(b.name, " n", b.N, " ", dt, " relu pool 2");
      Conv2dAttrs a = mnist_pooled(Conv2dAttrs{o}, g);
      a.pool.size[0] = a.pool.size[1] = 0;  // the forward op's pooling has no input size
      bc.attrs = a;
      bc.make = [g, dt](Device d) {
        return std::vector<Tensor>{bench_tensor({g.N, g.C, g.H, g.W}, dt, d, false),
                                   bench_tensor({g.K, g.Cg, g.R, g.S}, dt, d, false),
                                   bench_tensor({g.K}, dt, d, false)};
      };
      out.push_back(std::move(bc));
    }
  }
  return out;
}

}  // namespace

std::vector<BenchCase> benches_conv2d() { return conv_benches(ConvDirection::forward); }
std::vector<BenchCase> benches_conv2d_backward_input() { return conv_benches(ConvDirection::backward_input); }
std::vector<BenchCase> benches_conv2d_backward_weight() { return conv_benches(ConvDirection::backward_weight); }
std::vector<BenchCase> benches_conv2d_max_pool2d() { return conv_pool_benches(); }

}  // namespace ember
