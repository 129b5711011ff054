// Benchmark shapes of softmax, log_softmax and their fused gradients (kernels/ops/softmax.*).
#include <tuple>

#include "bench/op_shapes/op_shapes.h"
#include "kernels/ops/softmax.h"

namespace ember {

namespace {

// The benchmarked shapes (bench/torch_ops.py times PyTorch on the same case names).
const std::vector<std::tuple<const char*, Shape, DType>>& bench_shapes() {
  static const std::vector<std::tuple<const char*, Shape, DType>> v{
      {"[8192, 32768] f32", Shape{8192, 32768}, DType::f32},
      {"[8192, 32768] bf16", Shape{8192, 32768}, DType::bf16},
      {"[64, 10] f32", Shape{64, 10}, DType::f32},
      {"[512, 10] f32", Shape{512, 10}, DType::f32}};
  return v;
}

std::vector<BenchCase> softmax_benches() {
  std::vector<BenchCase> v;
  for (const auto& [name, shape, dt] : bench_shapes())
    v.push_back({name, {TensorSpec{shape, dt, {}}}, SoftmaxAttrs{1}, {}});
  return v;
}
std::vector<BenchCase> softmax_backward_benches() {
  std::vector<BenchCase> v;
  for (const auto& [name, shape, dt] : bench_shapes())
    v.push_back({name, {TensorSpec{shape, dt, {}}, TensorSpec{shape, dt, {}}}, SoftmaxAttrs{1}, {}});
  return v;
}

}  // namespace

std::vector<BenchCase> benches_softmax() { return softmax_benches(); }
std::vector<BenchCase> benches_log_softmax() { return softmax_benches(); }
std::vector<BenchCase> benches_softmax_backward() { return softmax_backward_benches(); }
std::vector<BenchCase> benches_log_softmax_backward() { return softmax_backward_benches(); }

}  // namespace ember
