// Benchmark shapes of batch_norm and batch_norm_backward (kernels/ops/batch_norm.*): the MNIST
// models' activations and ResNet-50's, in f32 and under AMP.
#include "bench/op_shapes/op_shapes.h"
#include "kernels/common/memory_format.h"
#include "kernels/functional.h"
#include "kernels/ops/batch_norm.h"

namespace ember {

namespace {

std::vector<BenchCase> bn_benches(bool backward) {
  std::vector<LayerInput> shapes;
  for (int64_t n : {64, 512}) {
    shapes.push_back({"mnist after conv1", {n, 32, 28, 28}, false, DType::f32});
    shapes.push_back({"mnist after conv2", {n, 64, 14, 14}, false, DType::f32});
  }
  shapes.push_back({"mnist after conv2", {512, 64, 14, 14}, false, DType::bf16});
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
      const int64_t C = s.x[1];
      TensorOptions o = TensorOptions().dtype(s.dt).device(d);
      TensorOptions so = TensorOptions().dtype(bn_stats_dtype(s.dt)).device(d);  // f32 parameters, as AMP runs them
      Tensor x = contiguous_as(uniform(s.x, -1, 1, o), s.cl);
      Tensor w = ones({C}, so), bb = zeros({C}, so), rm = zeros({C}, so), rv = ones({C}, so);
      if (!backward) return std::vector<Tensor>{x, w, bb, rm, rv};
      std::vector<Tensor> f = call(OpId::batch_norm, {x, w, bb, rm, rv}, a);
      Tensor gy = contiguous_as(uniform(s.x, -1, 1, o), s.cl);
      return std::vector<Tensor>{gy, x, w, f[1], f[2]};
    };
    out.push_back(std::move(b));
  }
  return out;
}

}  // namespace

std::vector<BenchCase> benches_batch_norm() { return bn_benches(false); }
std::vector<BenchCase> benches_batch_norm_backward() { return bn_benches(true); }

}  // namespace ember
