// Benchmark shapes of fill and zero_many (kernels/ops/fill.*). zero_many's case is
// Optimizer::zero_grad(false) on mnist_train's CNN (bench/torch_ops.py times PyTorch's foreach
// zero_ on the same list).
#include "bench/op_shapes/op_shapes.h"
#include "kernels/functional.h"

namespace ember {

std::vector<BenchCase> benches_fill() {
  return std::vector<BenchCase>{{"2^26 f32", {{Shape{int64_t{1} << 26}, DType::f32}}, ScalarAttrs{1.5}, {}}};
}

std::vector<BenchCase> benches_zero_many() {
  return std::vector<BenchCase>{{"the MNIST CNN's 8 gradients f32", {}, Attrs(), [](Device d) {
                                   std::vector<Tensor> in;  // conv1, conv2, fc1, fc2: weight and bias
                                   for (int64_t n : {288, 32, 18432, 64, 401408, 128, 1280, 10})
                                     in.push_back(uniform({n}, -1, 1, TensorOptions().device(d)));
                                   return in;
                                 }}};
}

}  // namespace ember
