// Test samples of linear and its backward ops (kernels/ops/linear.*): every epilogue, with and
// without bias, leading dims, empty batches and no input features, the CUDA kernels' tile edges,
// and the fused backward kernel's bounds (a reduction past kOuterMaxK goes to the composite).
#include <algorithm>

#include "kernels/functional.h"
#include "kernels/ops/linear.h"
#include "tests/op_samples/sample_inputs.h"

namespace ember {

std::vector<OpSample> samples_linear() {
  std::vector<OpSample> out;
  uint64_t seed = 900;
  auto mk = [&](std::string name, Shape xs, int64_t out_f, bool bias, Activation act) {
    OpSample s;
    s.name = std::move(name);
    int64_t in_f = xs.back();
    Tensor x = samples::uniform(xs, -1, 1, ++seed);
    Tensor w = samples::uniform({out_f, in_f}, -1, 1, ++seed);
    Tensor b = bias ? samples::uniform({out_f}, -1, 1, ++seed) : Tensor();
    s.inputs = {x, w, b};
    s.attrs = LinearAttrs{static_cast<int64_t>(act)};
    s.dtypes = {DType::f32, DType::f64, DType::f16, DType::bf16};
    int64_t rows = 1;
    for (int d = 0; d + 1 < static_cast<int>(xs.size()); ++d) rows *= xs[d];
    if (std::max({rows, in_f, out_f}) > 64) {  // forward sums over in_f, backward over rows and out_f
      s.tol = {{DType::f32, {1e-5, 1e-4}}, {DType::f16, {1e-3, 1e-4}}, {DType::bf16, {1.6e-2, 1e-4}}};
      s.tol_note =
          "GEMM kernels (tiles, tensor cores, cuBLAS) sum the products in another order than the CPU reference";
      if (act == Activation::gelu) {
        // The backward recomputes z = x W^T + b in f16, rounded after a differently ordered sum on
        // each device, and sums gelu'(z) g over the rows: one f16 ulp of z moves dW by ~1e-4.
        s.tol[1] = {DType::f16, {1e-3, 5e-4}};
        s.tol_note +=
            "; with gelu the backward also sums gelu' of an f16 pre-activation rounded differently per device";
      }
    }
    if (act == Activation::relu) {
      // keep pre-activations away from the kink at 0: gradcheck perturbations must not flip signs
      s.gradcheck = false;
    }
    out.push_back(std::move(s));
  };
  mk("[4, 3] -> 5 with bias", {4, 3}, 5, true, Activation::none);
  mk("[7, 17] -> 13 no bias", {7, 17}, 13, false, Activation::none);
  mk("[2, 3, 8] -> 6 (leading dims)", {2, 3, 8}, 6, true, Activation::none);
  mk("[1, 1] -> 1", {1, 1}, 1, true, Activation::none);
  mk("[64, 129] -> 33", {64, 129}, 33, true, Activation::none);
  mk("[9] -> 4 (vector)", {9}, 4, true, Activation::none);
  mk("[0, 5] -> 3 (empty batch)", {0, 5}, 3, true, Activation::none);
  mk("[5, 6] -> 4 gelu", {5, 6}, 4, true, Activation::gelu);
  mk("[5, 6] -> 4 relu", {5, 6}, 4, true, Activation::relu);
  mk("[64, 784] -> 128 relu (MNIST)", {64, 784}, 128, true, Activation::relu);
  // the CUDA kernels' paths: several tiles with ragged edges, aligned (16-byte) and unaligned
  // operands, vectors, no input features
  mk("[130, 264] -> 136 gelu", {130, 264}, 136, true, Activation::gelu);
  mk("[130, 264] -> 136 relu no bias", {130, 264}, 136, false, Activation::relu);
  mk("[130, 264] -> 136 no bias", {130, 264}, 136, false, Activation::none);
  mk("[33, 17] -> 19 gelu", {33, 17}, 19, true, Activation::gelu);
  mk("[2, 65, 64] -> 72 (leading dims, aligned)", {2, 65, 64}, 72, true, Activation::none);
  mk("[1, 300] -> 200 relu (one row)", {1, 300}, 200, true, Activation::relu);
  mk("[5, 0] -> 3 relu (no input features)", {5, 0}, 3, true, Activation::relu);
  return out;
}

namespace {

// A backward op's sample: g [lead..., out], y = relu of a draw of g's shape (a relu layer's output,
// a quarter to a half of it exactly 0) or none, and `other` (W [out, in] for the input gradient,
// x [lead..., in] for the weight's). y is not gradchecked: its gradient is zero where defined,
// and it has exact zeros on the kink.
OpSample backward_sample(std::string name, const Shape& gs, Shape other, bool relu, uint64_t seed) {
  OpSample s;
  s.name = std::move(name);
  Tensor g = samples::uniform(gs, -1, 1, seed);
  Tensor y = relu ? ember::relu(samples::uniform(gs, -1, 1, seed + 1)) : Tensor();
  s.inputs = {g, y, samples::uniform(other, -1, 1, seed + 2)};
  s.attrs = LinearAttrs{static_cast<int64_t>(relu ? Activation::relu : Activation::none)};
  s.grad_inputs = {0, 2};
  s.dtypes = {DType::f32, DType::f64, DType::f16, DType::bf16};
  int64_t largest = 1;
  for (int64_t d : gs) largest = std::max(largest, d);
  for (int64_t d : other) largest = std::max(largest, d);
  if (largest > 64) {
    s.tol = {{DType::f32, {1e-5, 1e-4}}, {DType::f16, {1e-3, 1e-4}}, {DType::bf16, {1.6e-2, 1e-4}}};
    s.tol_note = "GEMM kernels (and cuBLAS) sum the products in another order than the CPU reference";
  }
  return s;
}

}  // namespace

// dx = (g relu'(y)) W: g [rows..., out], W [out, in].
std::vector<OpSample> samples_linear_backward_input() {
  std::vector<OpSample> out;
  uint64_t seed = 950;
  auto mk = [&](std::string name, Shape gs, int64_t in_f, bool relu) {
    const int64_t out_f = gs.back();
    out.push_back(backward_sample(std::move(name), gs, {out_f, in_f}, relu, seed += 3));
  };
  mk("[4, 5] x [5, 3]", {4, 5}, 3, false);
  mk("[7, 13] relu x [13, 17]", {7, 13}, 17, true);
  mk("[2, 3, 6] relu x [6, 8] (leading dims)", {2, 3, 6}, 8, true);
  mk("[5] relu x [5, 4] (vector)", {5}, 4, true);
  mk("[64, 10] x [10, 64] (MLP head)", {64, 10}, 64, false);
  mk("[64, 64] relu x [64, 128] (MLP hidden)", {64, 64}, 128, true);
  mk("[9, 33] relu x [33, 130] (ragged rows and column tiles)", {9, 33}, 130, true);
  mk("[3, 1100] relu x [1100, 7] (past kOuterMaxK: composite)", {3, 1100}, 7, true);
  mk("[0, 5] relu x [5, 3] (no rows)", {0, 5}, 3, true);
  mk("[4, 0] x [0, 3] (no outputs)", {4, 0}, 3, false);
  mk("[4, 5] relu x [5, 0] (no inputs)", {4, 5}, 0, true);
  return out;
}

// (dW, db) = (dz^T x, sum(dz)): g [rows..., out], x [rows..., in].
std::vector<OpSample> samples_linear_backward_weight() {
  std::vector<OpSample> out;
  uint64_t seed = 990;
  auto mk = [&](std::string name, Shape gs, int64_t in_f, bool relu) {
    Shape xs = gs;
    xs[xs.size() - 1] = in_f;
    out.push_back(backward_sample(std::move(name), gs, xs, relu, seed += 3));
  };
  mk("[4, 5] with [4, 3]", {4, 5}, 3, false);
  mk("[7, 13] relu with [7, 17]", {7, 13}, 17, true);
  mk("[2, 3, 6] relu with [2, 3, 8] (leading dims)", {2, 3, 6}, 8, true);
  mk("[5] relu with [4] (vector)", {5}, 4, true);
  mk("[64, 10] with [64, 64] (MLP head)", {64, 10}, 64, false);
  mk("[64, 128] relu with [64, 784] (MLP first layer)", {64, 128}, 784, true);
  mk("[9, 33] relu with [9, 130] (ragged rows and column tiles)", {9, 33}, 130, true);
  mk("[1100, 3] relu with [1100, 5] (past kOuterMaxK: composite)", {1100, 3}, 5, true);
  mk("[0, 5] relu with [0, 3] (no rows: zeros)", {0, 5}, 3, true);
  mk("[4, 0] with [4, 3] (no outputs)", {4, 0}, 3, false);
  mk("[4, 5] relu with [4, 0] (no inputs: db only)", {4, 5}, 0, true);
  return out;
}

}  // namespace ember
