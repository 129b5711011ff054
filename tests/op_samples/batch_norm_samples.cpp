// Test samples of batch_norm, batch_norm_backward and batch_norm_max_pool2d (kernels/ops/batch_norm.*):
// training and eval, with and without affine parameters and running statistics, 2-D to 4-D,
// channels-last, MNIST-sized activations, an empty batch; the pooled forms (Note [max pooling in the
// batch norm backward]) with disjoint and overlapping windows, relu or not.
#include <string>

#include "kernels/common/memory_format.h"
#include "kernels/ops/batch_norm.h"
#include "kernels/ops/pool.h"
#include "tests/op_samples/sample_inputs.h"

namespace ember {

namespace {

struct BnCase {
  std::string name;
  Shape x;
  bool training = true, affine = true, running = true, channels_last = false;
  double momentum = 0.1, eps = 1e-5;
};

std::vector<BnCase> bn_cases() {
  return {
      {"2-D training affine [8,5]", {8, 5}},
      {"2-D training, no affine, no running stats [6,3]", {6, 3}, true, false, false},
      {"2-D eval affine [7,4]", {7, 4}, false},
      {"2-D eval no affine [5,3]", {5, 3}, false, false},
      {"2-D minimal batch 2 [2,1]", {2, 1}},
      {"3-D (N,C,L) training [3,4,7]", {3, 4, 7}},
      {"4-D training affine [4,3,5,5]", {4, 3, 5, 5}},
      {"4-D training no affine momentum 0.3 eps 1e-3 [2,3,4,5]", {2, 3, 4, 5}, true, false, true, false, 0.3, 1e-3},
      {"4-D eval affine [2,3,4,4]", {2, 3, 4, 4}, false},
      {"4-D channels-last training [4,6,3,5]", {4, 6, 3, 5}, true, true, true, true},
      {"4-D channels-last eval [2,6,3,3]", {2, 6, 3, 3}, false, true, true, true},
      {"4-D channels-last training no running stats [3,8,4,4]", {3, 8, 4, 4}, true, true, false, true},
      {"4-D training 1x1 spatial [6,4,1,1]", {6, 4, 1, 1}},
      {"MNIST conv1 activations [8,32,28,28]", {8, 32, 28, 28}},
      {"MNIST conv2 activations [16,64,14,14]", {16, 64, 14, 14}},
      {"MNIST conv2 activations eval [16,64,14,14]", {16, 64, 14, 14}, false},
      {"2-D many rows [4099,7]", {4099, 7}},
      {"large planes [2,3,64,64]", {2, 3, 64, 64}},
      {"channels-last many rows [64,16,9,9]", {64, 16, 9, 9}, true, true, true, true},
      {"empty batch [0,3,2,2] eval", {0, 3, 2, 2}, false},
  };
}

BatchNormAttrs bn_attrs(const BnCase& bc) {
  BatchNormAttrs a{};
  a.training = bc.training ? 1 : 0;
  a.momentum = bc.momentum;
  a.eps = bc.eps;
  return a;
}

std::vector<Tensor> bn_inputs(const BnCase& bc, uint64_t& seed) {
  const int64_t C = bc.x[1];
  Tensor x = samples::uniform(bc.x, -2, 3, ++seed);
  if (bc.channels_last) x = contiguous_as(x, true);
  Tensor w = bc.affine ? samples::uniform({C}, 0.5, 1.5, ++seed) : Tensor();
  Tensor b = bc.affine ? samples::uniform({C}, -1, 1, ++seed) : Tensor();
  Tensor rm = bc.running ? samples::uniform({C}, -0.5, 0.5, ++seed) : Tensor();
  Tensor rv = bc.running ? samples::uniform({C}, 0.5, 2, ++seed) : Tensor();
  return {x, w, b, rm, rv};
}

// batch_norm_max_pool2d's cases: the pooling after the batch norm.
struct BnPoolCase {
  BnCase bn;
  PoolAttrs pool;
};

std::vector<BnPoolCase> bn_pool_cases() {
  PoolAttrs p2 = pool_attrs(2, 2, 2, 2, 0, 0), relu2 = p2;
  relu2.relu = 1;
  PoolAttrs overlapping = pool_attrs(3, 3, 2, 2, 1, 1);
  overlapping.relu = 1;
  PoolAttrs relu21 = pool_attrs(2, 1, 2, 1, 0, 0);
  relu21.relu = 1;
  return {
      {{"MNIST fast model's first block + relu + pool 2 [2,8,28,28]", {2, 8, 28, 28}}, relu2},
      {{"pool 2, 7x7: the last row and column in no window [3,4,7,7]", {3, 4, 7, 7}}, p2},
      {{"overlapping relu + pool 3x3 stride 2 pad 1 [2,3,8,8]", {2, 3, 8, 8}}, overlapping},
      {{"channels-last + relu + pool 2 [2,6,6,6]", {2, 6, 6, 6}, true, true, true, true}, relu2},
      {{"eval + relu + pool 2 [2,4,6,6]", {2, 4, 6, 6}, false}, relu2},
      {{"no affine, no running stats, relu + pool 2x1 [3,2,6,5]", {3, 2, 6, 5}, true, false, false}, relu21},
  };
}

BatchNormAttrs bn_pool_attrs(const BnPoolCase& pc, bool with_size) {
  BatchNormAttrs a = bn_attrs(pc.bn);
  a.max_pool = 1;
  a.pool = with_size ? with_input_size(pc.pool, pc.bn.x[2], pc.bn.x[3]) : pc.pool;
  return a;
}

std::vector<OpSample> plain_backward_samples() {
  std::vector<OpSample> out;
  uint64_t seed = 6500;
  for (const BnCase& bc : bn_cases()) {
    std::vector<Tensor> in = bn_inputs(bc, seed);
    std::vector<Tensor> fwd = call(OpId::batch_norm, in, bn_attrs(bc));
    Tensor gy = samples::uniform(bc.x, -1, 1, ++seed);
    if (bc.channels_last) gy = contiguous_as(gy, true);
    OpSample s;
    s.name = bc.name;
    s.inputs = {gy, in[0], in[1], fwd[1], fwd[2]};
    s.attrs = bn_attrs(bc);
    s.gradcheck = false;
    s.tol = {{DType::f32, {1e-5, 1e-4}}};
    s.tol_note = "per-channel sums over M values: fp32 partial sums in another order than the double reference";
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace

std::vector<OpSample> samples_batch_norm_max_pool2d() {
  std::vector<OpSample> out;
  uint64_t seed = 6800;
  for (const BnPoolCase& pc : bn_pool_cases()) {
    OpSample s;
    s.name = pc.bn.name;
    s.inputs = bn_inputs(pc.bn, seed);
    s.attrs = bn_pool_attrs(pc, false);
    s.grad_inputs = pc.bn.affine ? std::vector<int>{0, 1, 2} : std::vector<int>{0};
    // continuous values: a tie or a relu at 0 is improbable, so every device picks the same
    // maximum; in f16/bf16 the normalised values round to few enough that ties do happen, and CUDA's
    // f32 statistics round some of them differently from the reference's double ones
    s.dtypes = {DType::f32};
    s.tol = {{DType::f32, {1e-5, 1e-5}}};
    s.tol_note = "CUDA merges per-block Welford statistics in fp32; the reference sums in double";
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<OpSample> samples_batch_norm_backward() {
  std::vector<OpSample> out = plain_backward_samples();
  // the pooled gradient of batch_norm_max_pool2d's cases, with its indices and statistics
  uint64_t seed = 6900;
  for (const BnPoolCase& pc : bn_pool_cases()) {
    std::vector<Tensor> in = bn_inputs(pc.bn, seed);
    std::vector<Tensor> fwd = call(OpId::batch_norm_max_pool2d, in, bn_pool_attrs(pc, false));
    Tensor gp = samples::uniform(fwd[0].shape(), -1, 1, ++seed);
    if (pc.bn.channels_last) gp = contiguous_as(gp, true);
    OpSample s;
    s.name = pc.bn.name + ", pooled gradient";
    s.inputs = {gp, in[0], in[1], fwd[2], fwd[3], fwd[1]};
    s.attrs = bn_pool_attrs(pc, true);
    s.gradcheck = false;
    s.tol = {{DType::f32, {1e-5, 1e-4}}};
    s.tol_note = "per-channel sums over M values: fp32 partial sums in another order than the double reference";
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<OpSample> samples_batch_norm() {
  std::vector<OpSample> out;
  uint64_t seed = 6000;
  for (const BnCase& bc : bn_cases()) {
    OpSample s;
    s.name = bc.name;
    s.inputs = bn_inputs(bc, seed);
    s.attrs = bn_attrs(bc);
    s.grad_inputs = bc.affine ? std::vector<int>{0, 1, 2} : std::vector<int>{0};
    s.tol = {{DType::f32, {1e-5, 1e-5}}};
    s.tol_note = "CUDA merges per-block Welford statistics in fp32; the reference sums in double";
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace ember
