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
  // the MLP's first layer's backward (784 -> 128, batch 64 and 512): dW = dz^T x (dz^T a
  // transposed view) and dx = dz W, the products matmul's `outer` is for
  for (DType dt : {DType::f32, DType::bf16})
    for (int64_t batch : {64, 512}) {
      BenchCase w;
      w.name = str("[128,", batch, "]^T x [", batch, ",784] (linear dW, batch ", batch, ") ", dt);
      w.inputs = {TensorSpec{Shape{128, batch}, dt, Strides{1, 128}, -1}, TensorSpec{Shape{batch, 784}, dt, {}, -1}};
      out.push_back(std::move(w));
      BenchCase x;
      x.name = str("[", batch, ",128] x [128,784] (linear dx, batch ", batch, ") ", dt);
      x.inputs = {TensorSpec{Shape{batch, 128}, dt, {}, -1}, TensorSpec{Shape{128, 784}, dt, {}, -1}};
      out.push_back(std::move(x));
    }
  return out;
}

}  // namespace ember
