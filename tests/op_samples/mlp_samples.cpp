// Test samples of mlp and mlp_backward (kernels/ops/mlp.*): one to three layers, relu or not after
// each, with and without biases, leading dims, empty batches and no input features, the fused
// CUDA kernels' edges (ragged row blocks, odd widths, the widest layer they take) and the shapes
// they refuse (a layer past kMlpMaxWidth, dx of an input past it, a hidden output's own gradient:
// the composite runs).
#include <algorithm>
#include <cmath>

#include "kernels/functional.h"
#include "kernels/ops/mlp.h"
#include "tests/op_samples/sample_inputs.h"

namespace ember {

namespace {

// A stack: the input's shape, each layer's width, which layers apply relu, whether they have biases.
struct StackSpec {
  Shape x;
  std::vector<int64_t> widths;
  int64_t relu_mask;
  bool bias = true;
};

// x, then W and b per layer (f64, CPU), drawn as Linear initialises them (within 1/sqrt(in)): a
// stack's activations stay near 1 in magnitude, as in a model. With weights in [-1, 1] they grow
// by sqrt(in) a layer, and the 784-wide layer's one-ulp differences between sum orders came out
// of the third layer as several ulps of its larger outputs.
std::vector<Tensor> forward_inputs(const StackSpec& s, uint64_t& seed) {
  std::vector<Tensor> in{samples::uniform(s.x, -1, 1, ++seed)};
  int64_t k = s.x.back();
  for (int64_t n : s.widths) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(std::max<int64_t>(k, 1)));
    in.push_back(samples::uniform({n, k}, -bound, bound, ++seed));
    in.push_back(s.bias ? samples::uniform({n}, -bound, bound, ++seed) : Tensor());
    k = n;
  }
  return in;
}

MlpAttrs attrs_of(const StackSpec& s, bool input_grad) {
  MlpAttrs a;
  a.layers = static_cast<int64_t>(s.widths.size());
  a.relu_mask = s.relu_mask;
  a.input_grad = input_grad ? 1 : 0;
  return a;
}

// The GEMM tolerances of linear's samples where a sum is long enough for its order to show.
void set_tolerances(OpSample& o, const StackSpec& s) {
  int64_t largest = s.x.back();
  for (int64_t d : s.x) largest = std::max(largest, d);
  for (int64_t n : s.widths) largest = std::max(largest, n);
  o.dtypes = {DType::f32, DType::f64, DType::f16, DType::bf16};
  if (largest <= 64) return;
  o.tol = {{DType::f32, {1e-5, 1e-4}}, {DType::f16, {1e-3, 1e-4}}, {DType::bf16, {1.6e-2, 1e-4}}};
  o.tol_note = "the fused kernels and the layers' GEMMs sum the products in another order than the CPU reference";
}

}  // namespace

std::vector<OpSample> samples_mlp() {
  std::vector<OpSample> out;
  uint64_t seed = 1300;
  auto mk = [&](std::string name, StackSpec s) {
    OpSample o;
    o.name = std::move(name);
    o.inputs = forward_inputs(s, seed);
    o.attrs = attrs_of(s, false);
    set_tolerances(o, s);
    // relu's kink: gradcheck perturbations must not flip a sign (as linear's relu samples)
    o.gradcheck = s.relu_mask == 0;
    out.push_back(std::move(o));
  };
  mk("[4, 3] -> 5 -> 2", {{4, 3}, {5, 2}, 0});
  mk("[4, 3] -> 5 relu -> 2", {{4, 3}, {5, 2}, 1});
  mk("[6, 7] -> 5 relu -> 4 relu -> 3 relu", {{6, 7}, {5, 4, 3}, 7});
  mk("[2, 3, 8] -> 6 -> 4 (leading dims)", {{2, 3, 8}, {6, 4}, 0});
  mk("[5, 9] -> 3 relu -> 2 no biases", {{5, 9}, {3, 2}, 1, false});
  mk("[9] -> 4 -> 2 (vector)", {{9}, {4, 2}, 0});
  mk("[3, 4] -> 5 relu (one layer)", {{3, 4}, {5}, 1});
  mk("[0, 5] -> 3 relu -> 2 (empty batch)", {{0, 5}, {3, 2}, 1});
  mk("[4, 0] -> 3 relu -> 2 (no input features)", {{4, 0}, {3, 2}, 1});
  mk("[64, 784] -> 128 relu -> 64 relu -> 10 (MNIST MLP)", {{64, 784}, {128, 64, 10}, 3});
  mk("[19, 130] -> 128 relu -> 7 (ragged rows, odd width)", {{19, 130}, {128, 7}, 1});
  mk("[10, 20] -> 129 relu -> 5 (past kMlpMaxWidth: composite)", {{10, 20}, {129, 5}, 1});
  return out;
}

// mlp_backward's inputs from a reference forward run: g, x, the hidden outputs, y, the weights,
// and the hidden outputs' own gradients (absent unless `hidden_grad`).
std::vector<OpSample> samples_mlp_backward() {
  std::vector<OpSample> out;
  uint64_t seed = 1400;
  auto mk = [&](std::string name, StackSpec s, bool input_grad, bool hidden_grad = false) {
    OpSample o;
    o.name = std::move(name);
    std::vector<Tensor> f = forward_inputs(s, seed);
    const MlpAttrs fa = attrs_of(s, false);
    std::vector<Tensor> y = call_variant(op_info(OpId::mlp).variants.at(0), OpId::mlp, f, fa);
    const int L = static_cast<int>(s.widths.size());
    o.inputs = {samples::uniform(y[0].shape(), -1, 1, ++seed), f[0]};
    for (int l = 1; l < L; ++l) o.inputs.push_back(y[static_cast<size_t>(l)]);
    o.inputs.push_back(y[0]);
    for (int l = 0; l < L; ++l) o.inputs.push_back(f[static_cast<size_t>(1 + 2 * l)]);
    for (int l = 1; l < L; ++l)
      o.inputs.push_back(hidden_grad ? samples::uniform(y[static_cast<size_t>(l)].shape(), -1, 1, ++seed) : Tensor());
    o.attrs = attrs_of(s, input_grad);
    set_tolerances(o, s);
    out.push_back(std::move(o));
  };
  mk("[4, 3] -> 5 relu -> 2, dx", {{4, 3}, {5, 2}, 1}, true);
  mk("[7, 9] -> 6 relu -> 5 relu -> 3 relu", {{7, 9}, {6, 5, 3}, 7}, false);
  mk("[2, 3, 8] -> 6 -> 4 (leading dims), dx", {{2, 3, 8}, {6, 4}, 0}, true);
  mk("[3, 4] -> 5 relu (one layer), dx", {{3, 4}, {5}, 1}, true);
  mk("[5, 6] -> 4 relu -> 3 with a hidden gradient (composite), dx", {{5, 6}, {4, 3}, 1}, true, true);
  mk("[0, 5] -> 3 relu -> 2 (no rows: zeros), dx", {{0, 5}, {3, 2}, 1}, true);
  mk("[4, 0] -> 3 relu -> 2 (no input features), dx", {{4, 0}, {3, 2}, 1}, true);
  mk("[64, 784] -> 128 relu -> 64 relu -> 10 (MNIST MLP)", {{64, 784}, {128, 64, 10}, 3}, false);
  mk("[33, 120] -> 128 relu -> 7 (ragged rows, odd width), dx", {{33, 120}, {128, 7}, 1}, true);
  mk("[9, 130] -> 16 relu -> 3, dx (x past kMlpMaxWidth: composite)", {{9, 130}, {16, 3}, 1}, true);
  mk("[70, 20] -> 129 relu -> 3 (past kMlpMaxWidth: composite), dx", {{70, 20}, {129, 3}, 1}, true);
  return out;
}

}  // namespace ember
