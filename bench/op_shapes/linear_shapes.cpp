// Benchmark shapes of linear (kernels/ops/linear.*).
#include "bench/op_shapes/op_shapes.h"
#include "kernels/ops/linear.h"

namespace ember {

// The MNIST models' layers (MLP 784 -> 128 -> 10, the CNN's 3136 -> 128 head) at batch 64, 128
// and 512, in f32 and in bf16 (autocast), and large layers with the gelu and bias epilogues.
std::vector<BenchCase> benches_linear() {
  std::vector<BenchCase> out;
  auto add = [&](int64_t rows, int64_t in_f, int64_t out_f, Activation act, DType dt) {
    BenchCase c;
    const char* an = act == Activation::relu ? " relu" : act == Activation::gelu ? " gelu" : "";
    c.name = str("[", rows, ",", in_f, "] -> ", out_f, an, " ", dt);
    c.inputs = {TensorSpec{Shape{rows, in_f}, dt, {}, -1}, TensorSpec{Shape{out_f, in_f}, dt, {}, -1},
                TensorSpec{Shape{out_f}, dt, {}, -1}};
    c.attrs = LinearAttrs{static_cast<int64_t>(act)};
    out.push_back(std::move(c));
  };
  for (DType dt : {DType::f32, DType::bf16})
    for (int64_t rows : {64, 128, 512}) {
      add(rows, 784, 128, Activation::relu, dt);
      add(rows, 128, 10, Activation::none, dt);
      add(rows, 3136, 128, Activation::relu, dt);
    }
  add(4096, 4096, 4096, Activation::gelu, DType::bf16);
  // a transformer-sized MLP layer: with gelu (ember's erf form), and bias only, which cuBLASLt fuses too
  add(8192, 4096, 4096, Activation::gelu, DType::bf16);
  add(8192, 4096, 4096, Activation::none, DType::bf16);
  add(4096, 4096, 4096, Activation::none, DType::f32);
  return out;
}

}  // namespace ember
