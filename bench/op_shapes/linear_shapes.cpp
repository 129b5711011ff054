// Benchmark shapes of linear and its backward ops (kernels/ops/linear.*).
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

namespace {

// A layer of the MNIST models: rows, in -> out, with relu or not.
struct Layer {
  int64_t in_f, out_f;
  bool relu;
};

// The backward ops at the models' layers (MLP 784 -> 128 -> 64 -> 10, the CNN's 3136 -> 128 -> 10
// head) and batches, f32 and bf16: g, the relu output (random, so about half the mask is set) or
// none, and W (input gradient) or x (weight gradient).
std::vector<BenchCase> backward_benches(bool weight, const std::vector<Layer>& layers) {
  std::vector<BenchCase> out;
  for (DType dt : {DType::f32, DType::bf16})
    for (int64_t rows : {64, 128, 512})
      for (const Layer& l : layers) {
        BenchCase c;
        c.name = str("[", rows, ",", l.in_f, "] -> ", l.out_f, l.relu ? " relu " : " ", dt);
        const Shape gs{rows, l.out_f};
        const Shape other = weight ? Shape{rows, l.in_f} : Shape{l.out_f, l.in_f};
        c.inputs = {TensorSpec{gs, dt, {}, -1}, l.relu ? TensorSpec{gs, dt, {}, -1} : TensorSpec{Shape{0}, dt, {}, -1},
                    TensorSpec{other, dt, {}, -1}};
        c.attrs = LinearAttrs{static_cast<int64_t>(l.relu ? Activation::relu : Activation::none)};
        out.push_back(std::move(c));
      }
  return out;
}

}  // namespace

// The first layer has no input gradient to compute (its input is the data).
std::vector<BenchCase> benches_linear_backward_input() {
  return backward_benches(false, {{128, 64, true}, {64, 10, false}, {3136, 128, true}, {128, 10, false}});
}

std::vector<BenchCase> benches_linear_backward_weight() {
  return backward_benches(true,
                          {{784, 128, true}, {128, 64, true}, {64, 10, false}, {3136, 128, true}, {128, 10, false}});
}

}  // namespace ember
