// Benchmark shapes of amp_unscale (kernels/ops/amp.*): the gradients of a small CNN.
#include "bench/op_shapes/op_shapes.h"
#include "kernels/functional.h"

namespace ember {

std::vector<BenchCase> benches_amp_unscale() {
  return std::vector<BenchCase>{{"10 grads, 1.2M elements f32", {}, Attrs(), [](Device d) {
                                   std::vector<Tensor> in{zeros({1}, TensorOptions(DType::f32).device(d)),
                                                          full({1}, 1.0 / 1024, TensorOptions(DType::f32).device(d))};
                                   for (int64_t n : {401408, 128, 8192, 64, 640, 10, 401408, 128, 200704, 64})
                                     in.push_back(uniform({n}, -1, 1, TensorOptions().device(d)));
                                   return in;
                                 }}};
}

}  // namespace ember
