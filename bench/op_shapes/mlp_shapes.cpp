// Benchmark shapes of mlp and mlp_backward (kernels/ops/mlp.*): the MNIST models' Linear/ReLU
// stacks (the MLP 784 -> 128 -> 64 -> 10, the CNN's head 3136 -> 128 -> 10) at batch 64, 128
// and 512, in f32 and in bf16 (autocast). Their rows beside linear's show what one launch saves.
#include "bench/op_shapes/op_shapes.h"
#include "kernels/functional.h"
#include "kernels/ops/mlp.h"

namespace ember {

namespace {

struct Stack {
  const char* label;
  std::vector<int64_t> widths;  // the input's, then each layer's outputs
  bool input_grad;              // the MLP's input is the data; the CNN head's comes from a conv
};

const std::vector<Stack>& stacks() {
  static const std::vector<Stack> s{{"MLP", {784, 128, 64, 10}, false}, {"CNN head", {3136, 128, 10}, true}};
  return s;
}

MlpAttrs attrs_of(const Stack& s, bool backward) {
  MlpAttrs a;
  a.layers = static_cast<int64_t>(s.widths.size()) - 1;
  a.relu_mask = (int64_t{1} << (a.layers - 1)) - 1;  // relu after every layer but the last
  a.input_grad = backward && s.input_grad ? 1 : 0;
  return a;
}

std::string name_of(const Stack& s, int64_t rows, DType dt) {
  std::string n = str(s.label, " [", rows, ",", s.widths[0], "]");
  for (size_t i = 1; i < s.widths.size(); ++i) n += str(" -> ", s.widths[i]);
  return str(n, " ", dt);
}

// x, then W and b per layer, on the device.
std::vector<Tensor> forward_inputs(const Stack& s, int64_t rows, DType dt, Device d) {
  const TensorOptions o = TensorOptions().dtype(dt).device(d);
  std::vector<Tensor> in{uniform({rows, s.widths[0]}, -1, 1, o)};
  for (size_t i = 1; i < s.widths.size(); ++i) {
    in.push_back(uniform({s.widths[i], s.widths[i - 1]}, -0.1, 0.1, o));
    in.push_back(uniform({s.widths[i]}, -0.1, 0.1, o));
  }
  return in;
}

std::vector<BenchCase> cases(bool backward) {
  std::vector<BenchCase> out;
  for (DType dt : {DType::f32, DType::bf16})
    for (int64_t rows : {64, 128, 512})
      for (const Stack& s : stacks()) {
        BenchCase c;
        c.name = name_of(s, rows, dt);
        c.attrs = attrs_of(s, backward);
        const MlpAttrs fa = attrs_of(s, false);
        c.make = [s, rows, dt, backward, fa](Device d) {
          std::vector<Tensor> in = forward_inputs(s, rows, dt, d);
          if (!backward) return in;
          // the backward's inputs from a forward run: g, the activations, the weights, no hidden gradients
          std::vector<Tensor> outs = call(OpId::mlp, in, fa);
          const int L = static_cast<int>(fa.layers);
          std::vector<Tensor> b{uniform(outs[0].shape(), -1, 1, TensorOptions().dtype(dt).device(d)), in[0]};
          for (int l = 1; l < L; ++l) b.push_back(outs[static_cast<size_t>(l)]);
          b.push_back(outs[0]);
          for (int l = 0; l < L; ++l) b.push_back(in[static_cast<size_t>(1 + 2 * l)]);
          for (int l = 1; l < L; ++l) b.emplace_back();
          return b;
        };
        out.push_back(std::move(c));
      }
  return out;
}

}  // namespace

std::vector<BenchCase> benches_mlp() { return cases(false); }
std::vector<BenchCase> benches_mlp_backward() { return cases(true); }

}  // namespace ember
