// Benchmark shapes of matmul (kernels/ops/matmul.*).
#include <utility>

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
  // b transposed: both operands K-major, the layout the Hopper kernel (wgmma_*) reads
  for (auto [n, dt] : std::vector<std::pair<int64_t, DType>>{
           {4096, DType::f32}, {4096, DType::bf16}, {4096, DType::f16}, {8192, DType::bf16}, {8192, DType::f16}}) {
    BenchCase c;
    c.name = str("[", n, ",", n, "] x [", n, ",", n, "]^T (b transposed) ", dt);
    c.inputs = {TensorSpec{Shape{n, n}, dt, {}, -1}, TensorSpec{Shape{n, n}, dt, Strides{1, n}, -1}};
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace ember
