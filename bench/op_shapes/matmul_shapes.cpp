// Benchmark shapes of matmul (kernels/ops/matmul.*).
#include "bench/op_shapes/op_shapes.h"

namespace ember {

// GEMMs at the sizes vendor libraries are judged by, in every dtype; and the x W^T layout (b a
// transposed view) that linear and the backward pass use.
std::vector<BenchCase> benches_matmul() {
  std::vector<BenchCase> out;
  for (int64_t n : {4096, 8192})
    for (DType dt : {DType::f32, DType::f16, DType::bf16}) {
      BenchCase c;
      c.name = str("[", n, ",", n, "] x [", n, ",", n, "] ", dt);
      c.inputs = {TensorSpec{Shape{n, n}, dt, {}, -1}, TensorSpec{Shape{n, n}, dt, {}, -1}};
      out.push_back(std::move(c));
    }
  for (DType dt : {DType::f32, DType::bf16}) {
    BenchCase c;
    c.name = str("[4096,4096] x [4096,4096]^T (b transposed) ", dt);
    c.inputs = {TensorSpec{Shape{4096, 4096}, dt, {}, -1}, TensorSpec{Shape{4096, 4096}, dt, Strides{1, 4096}, -1}};
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace ember
