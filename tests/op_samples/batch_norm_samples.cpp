// Test samples of batch_norm, batch_norm_backward, batch_norm_max_pool2d and
// batch_norm_global_avg_pool2d (kernels/ops/batch_norm.*): training and eval, with and without affine
// parameters and running statistics (training ones counting into num_batches_tracked), 2-D to 4-D,
// channels-last, MNIST-sized activations, an empty batch; the max pooled forms (Note [max pooling
// in the batch norm backward]) with disjoint and overlapping windows, relu or not; the averaged
// forms (Note [global average pooling in the batch norm backward]) with planes above and below the
// 16 values where CUDA's sum order changes.
#include <string>

#include "kernels/common/memory_format.h"
#include "kernels/functional.h"
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
  if (!(bc.training && bc.running)) return {x, w, b, rm, rv};
  // what nn::BatchNorm passes while training (Note [batch norm counts its batches])
  return {x, w, b, rm, rv, full({}, 41.0, TensorOptions(DType::i64))};
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

// batch_norm_global_avg_pool2d's cases: relu or not.
struct BnAvgCase {
  BnCase bn;
  bool relu = true;
};

std::vector<BnAvgCase> bn_avg_cases() {
  return {
      {{"MNIST fast model's last block + relu [4,16,7,7]", {4, 16, 7, 7}}},
      {{"3x3 planes (summed serially on CUDA) + relu [5,3,3,3]", {5, 3, 3, 3}}},
      {{"4x4 planes, no relu [3,5,4,4]", {3, 5, 4, 4}}, false},
      {{"eval + relu [2,4,5,5]", {2, 4, 5, 5}, false}},
      {{"channels-last + relu [2,6,4,4]", {2, 6, 4, 4}, true, true, true, true}},
      {{"no affine, no running stats, relu [3,2,6,5]", {3, 2, 6, 5}, true, false, false}},
      {{"1x1 planes + relu [6,4,1,1]", {6, 4, 1, 1}}},
  };
}

BatchNormAttrs bn_avg_attrs(const BnAvgCase& ac) {
  BatchNormAttrs a = bn_attrs(ac.bn);
  a.avg_pool = 1;
  a.relu = ac.relu ? 1 : 0;
  return a;
}

BatchNormAttrs bn_pool_attrs(const BnPoolCase& pc, bool with_size) {
  BatchNormAttrs a = bn_attrs(pc.bn);
  a.max_pool = 1;
  a.pool = with_size ? with_input_size(pc.pool, pc.bn.x[2], pc.bn.x[3]) : pc.pool;
  return a;
}

// A forward sample of a batch norm op on bc's inputs, gradchecked through x and the affine
// parameters.
OpSample forward_sample(const BnCase& bc, uint64_t& seed, const BatchNormAttrs& a) {
  OpSample s;
  s.name = bc.name;
  s.inputs = bn_inputs(bc, seed);
  s.attrs = a;
  s.grad_inputs = bc.affine ? std::vector<int>{0, 1, 2} : std::vector<int>{0};
  s.tol = {{DType::f32, {1e-5, 1e-5}}};
  s.tol_note = "CUDA merges per-block Welford statistics in fp32; the reference sums in double";
  return s;
}

// A batch_norm_backward sample (a gradient op: no gradcheck of its own).
OpSample backward_sample(std::string name, std::vector<Tensor> inputs, const BatchNormAttrs& a) {
  OpSample s;
  s.name = std::move(name);
  s.inputs = std::move(inputs);
  s.attrs = a;
  s.gradcheck = false;
  s.tol = {{DType::f32, {1e-5, 1e-4}}};
  s.tol_note = "per-channel sums over M values: fp32 partial sums in another order than the double reference";
  return s;
}

// A gradient of fwd's first output's shape in x's layout.
Tensor output_grad(const Tensor& fwd, bool channels_last, uint64_t& seed) {
  Tensor g = samples::uniform(fwd.shape(), -1, 1, ++seed);
  return channels_last ? contiguous_as(g, true) : g;
}

}  // namespace

std::vector<OpSample> samples_batch_norm() {
  std::vector<OpSample> out;
  uint64_t seed = 6000;
  for (const BnCase& bc : bn_cases()) out.push_back(forward_sample(bc, seed, bn_attrs(bc)));
  return out;
}

std::vector<OpSample> samples_batch_norm_max_pool2d() {
  std::vector<OpSample> out;
  uint64_t seed = 6800;
  for (const BnPoolCase& pc : bn_pool_cases()) {
    OpSample s = forward_sample(pc.bn, seed, bn_pool_attrs(pc, false));
    // continuous values: a tie or a relu at 0 is improbable, so every device picks the same
    // maximum; in f16/bf16 the normalised values round to few enough that ties do happen, and CUDA's
    // f32 statistics round some of them differently from the reference's double ones
    s.dtypes = {DType::f32};
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<OpSample> samples_batch_norm_global_avg_pool2d() {
  std::vector<OpSample> out;
  uint64_t seed = 7000;
  for (const BnAvgCase& ac : bn_avg_cases()) out.push_back(forward_sample(ac.bn, seed, bn_avg_attrs(ac)));
  return out;
}

// grad_output with x and the saved statistics; the pooled gradient of batch_norm_max_pool2d's
// cases with its indices; the averaged gradient of batch_norm_global_avg_pool2d's with the bias
// (every device recomputes the relu's mask from it).
std::vector<OpSample> samples_batch_norm_backward() {
  std::vector<OpSample> out;
  uint64_t seed = 6500;
  for (const BnCase& bc : bn_cases()) {
    std::vector<Tensor> in = bn_inputs(bc, seed);
    std::vector<Tensor> fwd = call(OpId::batch_norm, in, bn_attrs(bc));
    Tensor gy = output_grad(fwd[0], bc.channels_last, seed);
    out.push_back(backward_sample(bc.name, {gy, in[0], in[1], fwd[1], fwd[2]}, bn_attrs(bc)));
  }
  seed = 6900;
  for (const BnPoolCase& pc : bn_pool_cases()) {
    std::vector<Tensor> in = bn_inputs(pc.bn, seed);
    std::vector<Tensor> fwd = call(OpId::batch_norm_max_pool2d, in, bn_pool_attrs(pc, false));
    Tensor gp = output_grad(fwd[0], pc.bn.channels_last, seed);
    out.push_back(backward_sample(pc.bn.name + ", pooled gradient", {gp, in[0], in[1], fwd[2], fwd[3], fwd[1]},
                                  bn_pool_attrs(pc, true)));
  }
  seed = 7100;
  for (const BnAvgCase& ac : bn_avg_cases()) {
    std::vector<Tensor> in = bn_inputs(ac.bn, seed);
    std::vector<Tensor> fwd = call(OpId::batch_norm_global_avg_pool2d, in, bn_avg_attrs(ac));
    Tensor gp = output_grad(fwd[0], false, seed);
    out.push_back(backward_sample(ac.bn.name + ", averaged gradient", {gp, in[0], in[1], fwd[1], fwd[2], in[2]},
                                  bn_avg_attrs(ac)));
  }
  return out;
}

}  // namespace ember
