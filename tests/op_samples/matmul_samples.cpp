// Test samples of matmul (kernels/ops/matmul.*).
#include <algorithm>
#include <tuple>

#include "tests/op_samples/sample_inputs.h"

namespace ember {

// Shapes cover the CUDA kernels' paths: single tiles and several with ragged edges (M, N > 128),
// K across several k tiles, every operand layout (row-major, transposed views, layouts that need
// a copy), 16-byte aligned operands (K, M or N multiples of 8) and unaligned ones, broadcast and
// multi-dim batches (one cuBLAS call per outer batch), vectors (M = 1, N = 1) and empty dims.
std::vector<OpSample> samples_matmul() {
  std::vector<OpSample> out;
  uint64_t seed = 700;
  auto mk = [&](std::string name, Tensor a, Tensor b) {
    OpSample& s = samples::add_sample(out, std::move(name));
    const int64_t M = a.shape()[a.dim() - 2], K = a.shape()[a.dim() - 1], N = b.shape()[b.dim() - 1];
    s.inputs = {std::move(a), std::move(b)};
    s.dtypes = {DType::f32, DType::f64, DType::f16, DType::bf16};
    if (std::max({M, N, K}) > 64) {
      // products are exact in f32 for f16/bf16 inputs; only the order of the sums differs, so
      // the outputs agree to a few f32 ulps of the partial sums (atol) plus one output rounding (rtol)
      s.tol = {{DType::f32, {1e-5, 1e-4}}, {DType::f16, {1e-3, 1e-4}}, {DType::bf16, {1.6e-2, 1e-4}}};
      s.tol_note = "GEMM kernels (tiles, tensor cores, cuBLAS) sum the products in another order than the CPU loop";
      const std::vector<int64_t> ab(s.inputs[0].shape().begin(), s.inputs[0].shape().end() - 2);
      const std::vector<int64_t> bb(s.inputs[1].shape().begin(), s.inputs[1].shape().end() - 2);
      if (ab != bb) {
        // the gradient of a broadcast operand sums per-batch products already rounded to the dtype:
        // two roundings (an H200: 2 f16 ulps in one element of 5184)
        s.tol = {{DType::f32, {1e-5, 1e-4}}, {DType::f16, {2e-3, 1e-4}}, {DType::bf16, {3.2e-2, 1e-4}}};
        s.tol_note += "; a broadcast operand's gradient is a sum of rounded per-batch products";
      }
    }
  };
  auto u = [&](Shape s) { return samples::uniform(s, -1, 1, ++seed); };
  for (auto [m, k, n] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{{1, 1, 1},
                                                                           {3, 4, 5},
                                                                           {17, 9, 13},
                                                                           {64, 129, 33},
                                                                           {7, 1000, 3},
                                                                           {130, 264, 136},
                                                                           {33, 2000, 17},
                                                                           {1, 300, 200},
                                                                           {200, 300, 1}}) {
    mk(str("[", m, ",", k, "] x [", k, ",", n, "]"), u({m, k}), u({k, n}));
  }
  mk("a transposed", u({4, 6}).t(), u({4, 5}));
  mk("b transposed", u({6, 4}), u({5, 4}).t());
  mk("a transposed, aligned [136,264] x [264,72]", u({264, 136}).t(), u({264, 72}));
  mk("b transposed, aligned [72,136] x [136,200]", u({72, 136}), u({200, 136}).t());
  mk("both transposed [40,264] x [264,48]", u({264, 40}).t(), u({48, 264}).t());
  mk("a sliced (column stride 2) [20,35] x [35,9]", u({20, 70}).slice(1, 0, 70, 2), u({35, 9}));
  mk("a rows expanded (row stride 0) [16,24] x [24,8]", u({1, 24}).expand({16, 24}), u({24, 8}));
  mk("batched [2,3,4,5] x [2,3,5,2]", u({2, 3, 4, 5}), u({2, 3, 5, 2}));
  mk("batched aligned [3,72,136] x [3,136,80]", u({3, 72, 136}), u({3, 136, 80}));
  mk("broadcast batch [3,4,5] x [5,2]", u({3, 4, 5}), u({5, 2}));
  mk("broadcast transposed b [4,33,64] x [64,48]", u({4, 33, 64}), u({48, 64}).t());
  mk("broadcast batch [2,1,4,5] x [3,5,2]", u({2, 1, 4, 5}), u({3, 5, 2}));
  mk("broadcast batch [2,1,40,72] x [3,72,24]", u({2, 1, 40, 72}), u({3, 72, 24}));
  mk("K = 0", u({3, 0}), u({0, 4}));
  mk("M = 0", u({0, 3}), u({3, 4}));
  return out;
}

}  // namespace ember
