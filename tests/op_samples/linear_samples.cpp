// Test samples of linear (kernels/ops/linear.*): every epilogue, with and without bias, leading
// dims, empty batches and no input features, and the CUDA kernels' tile edges.
#include <algorithm>

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

}  // namespace ember
