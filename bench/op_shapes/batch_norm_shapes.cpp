// Benchmark shapes of batch_norm, batch_norm_backward, batch_norm_max_pool2d and
// batch_norm_global_avg_pool2d (kernels/ops/batch_norm.*): the MNIST models' activations and
// ResNet-50's, in f32 and under AMP; at the MNIST shapes also with relu and 2x2 max pooling
// (" relu pool 2": the pooled backward), and the fast model's last block with relu and the global
// average (" relu global avg": the averaged backward).
#include "bench/op_shapes/op_shapes.h"
#include "kernels/common/memory_format.h"
#include "kernels/functional.h"
#include "kernels/ops/batch_norm.h"
#include "kernels/ops/pool.h"

namespace ember {

namespace {

// batch_norm_max_pool2d's attributes: relu, 2x2 windows (with x's size for the backward).
BatchNormAttrs relu_pool2(const LayerInput& s, bool backward) {
  BatchNormAttrs a{};
  a.max_pool = 1;
  a.pool = pool_attrs(2, 2, 2, 2, 0, 0);
  a.pool.relu = 1;
  if (backward) a.pool = with_input_size(a.pool, s.x[2], s.x[3]);
  return a;
}

// The training-mode inputs on s: x, f32 parameters and running statistics (as AMP runs them).
std::vector<Tensor> bn_forward_inputs(const LayerInput& s, Device d) {
  const int64_t C = s.x[1];
  TensorOptions o = TensorOptions().dtype(s.dt).device(d);
  TensorOptions so = TensorOptions().dtype(bn_stats_dtype(s.dt)).device(d);
  Tensor x = contiguous_as(uniform(s.x, -1, 1, o), s.cl);
  return {x, ones({C}, so), zeros({C}, so), zeros({C}, so), ones({C}, so)};
}

// batch_norm_max_pool2d (backward: batch_norm_backward on its pooled gradient) at s.
BenchCase pooled_bench(const LayerInput& s, bool backward) {
  BenchCase b;
  b.name = s.name() + " training relu pool 2";
  b.attrs = relu_pool2(s, backward);
  b.make = [s, backward](Device d) {
    std::vector<Tensor> in = bn_forward_inputs(s, d);
    if (!backward) return in;
    std::vector<Tensor> f = call(OpId::batch_norm_max_pool2d, in, relu_pool2(s, false));
    Tensor gp = uniform(f[0].shape(), -1, 1, TensorOptions().dtype(s.dt).device(d));
    return std::vector<Tensor>{gp, in[0], in[1], f[2], f[3], f[1]};
  };
  return b;
}

// batch_norm_global_avg_pool2d's attributes: relu, then the plane means.
BatchNormAttrs relu_avg() {
  BatchNormAttrs a{};
  a.avg_pool = 1;
  a.relu = 1;
  return a;
}

// batch_norm_global_avg_pool2d (backward: batch_norm_backward on its averaged gradient) at s.
BenchCase averaged_bench(const LayerInput& s, bool backward) {
  BenchCase b;
  b.name = s.name() + " training relu global avg";
  b.attrs = relu_avg();
  b.make = [s, backward](Device d) {
    std::vector<Tensor> in = bn_forward_inputs(s, d);
    if (!backward) return in;
    std::vector<Tensor> f = call(OpId::batch_norm_global_avg_pool2d, in, relu_avg());
    Tensor gp = uniform(f[0].shape(), -1, 1, TensorOptions().dtype(s.dt).device(d));
    return std::vector<Tensor>{gp, in[0], in[1], f[1], f[2], in[2]};
  };
  return b;
}

// The fast model's last block: conv3's activations at 7x7, averaged to 1x1.
std::vector<LayerInput> mnist_last_block() {
  return {{"mnist after conv3", {64, 128, 7, 7}, false, DType::f32},
          {"mnist after conv3", {512, 128, 7, 7}, false, DType::f32},
          {"mnist after conv3", {512, 128, 7, 7}, false, DType::bf16}};
}

// The MNIST CNNs' activations after each conv (NCHW), pooled 2x2 in both models.
std::vector<LayerInput> mnist_activations() {
  std::vector<LayerInput> shapes;
  for (int64_t n : {64, 512}) {
    shapes.push_back({"mnist after conv1", {n, 32, 28, 28}, false, DType::f32});
    shapes.push_back({"mnist after conv2", {n, 64, 14, 14}, false, DType::f32});
  }
  shapes.push_back({"mnist after conv2", {512, 64, 14, 14}, false, DType::bf16});
  return shapes;
}

std::vector<BenchCase> bn_benches(bool backward) {
  std::vector<LayerInput> shapes = mnist_activations();
  for (const LayerInput& s : mnist_last_block()) shapes.push_back(s);  // the unfused rows beside the fused ones
  shapes.push_back({"mlp hidden (2-D)", {512, 128}, false, DType::f32});
  shapes.push_back({"resnet50 64ch 56x56", {32, 64, 56, 56}, true, DType::f16});
  shapes.push_back({"resnet50 256ch 56x56", {32, 256, 56, 56}, true, DType::f16});
  shapes.push_back({"resnet50 2048ch 7x7", {32, 2048, 7, 7}, true, DType::f16});
  shapes.push_back({"resnet50 64ch 56x56", {32, 64, 56, 56}, false, DType::f32});
  std::vector<BenchCase> out;
  for (const LayerInput& s : shapes) {
    BenchCase b;
    b.name = s.name() + " training";
    BatchNormAttrs a{};
    b.attrs = a;
    b.make = [s, backward, a](Device d) {
      std::vector<Tensor> in = bn_forward_inputs(s, d);
      if (!backward) return in;
      std::vector<Tensor> f = call(OpId::batch_norm, in, a);
      Tensor gy = contiguous_as(uniform(s.x, -1, 1, TensorOptions().dtype(s.dt).device(d)), s.cl);
      return std::vector<Tensor>{gy, in[0], in[1], f[1], f[2]};
    };
    out.push_back(std::move(b));
  }
  if (backward) {
    for (const LayerInput& s : mnist_activations()) out.push_back(pooled_bench(s, true));
    for (const LayerInput& s : mnist_last_block()) out.push_back(averaged_bench(s, true));
  }
  return out;
}

}  // namespace

std::vector<BenchCase> benches_batch_norm() { return bn_benches(false); }
std::vector<BenchCase> benches_batch_norm_backward() { return bn_benches(true); }
std::vector<BenchCase> benches_batch_norm_global_avg_pool2d() {
  std::vector<BenchCase> out;
  for (const LayerInput& s : mnist_last_block()) out.push_back(averaged_bench(s, false));
  return out;
}
std::vector<BenchCase> benches_batch_norm_max_pool2d() {
  std::vector<BenchCase> out;
  for (const LayerInput& s : mnist_activations()) out.push_back(pooled_bench(s, false));
  return out;
}

}  // namespace ember
