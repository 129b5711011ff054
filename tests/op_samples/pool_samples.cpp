// Test samples of the pooling ops and their gradients (kernels/ops/pool.*): overlapping and
// non-square windows, padding counted or not, windows as large as the input, channels-last, ties,
// NaN and -inf, upsampling adaptive bins, empty batches, a view whose size-1 dims keep a batch's
// strides; max pooling with the relu fused (Note [relu after max pooling]).
#include <cmath>
#include <string>

#include "kernels/common/memory_format.h"
#include "kernels/functional.h"
#include "kernels/ops/pool.h"
#include "tests/op_samples/sample_inputs.h"

namespace ember {

namespace {

struct PoolCase {
  std::string name;
  Shape x;
  PoolAttrs a;
  bool channels_last = false;
};

std::vector<PoolCase> pool_cases() {
  return {
      {"2x2 stride 2 [2,3,6,6]", {2, 3, 6, 6}, pool_attrs(2, 2, 2, 2, 0, 0)},
      {"3x3 stride 2 pad 1 (overlapping) [2,2,7,5]", {2, 2, 7, 5}, pool_attrs(3, 3, 2, 2, 1, 1)},
      {"3x3 stride 1 pad 1 [1,2,5,5]", {1, 2, 5, 5}, pool_attrs(3, 3, 1, 1, 1, 1)},
      {"3x3 stride 2 no pad, rows left over [2,2,8,8]", {2, 2, 8, 8}, pool_attrs(3, 3, 2, 2, 0, 0)},
      {"non-square 2x3 stride (1,2) pad (1,1) [1,3,5,7]", {1, 3, 5, 7}, pool_attrs(2, 3, 1, 2, 1, 1)},
      {"count_include_pad=false 3x3 pad 1 [2,2,5,6]", {2, 2, 5, 6}, pool_attrs(3, 3, 2, 2, 1, 1, false)},
      {"kernel = input [2,3,4,4]", {2, 3, 4, 4}, pool_attrs(4, 4, 4, 4, 0, 0)},
      {"channels-last 3x3 stride 2 pad 1 [2,5,7,6]", {2, 5, 7, 6}, pool_attrs(3, 3, 2, 2, 1, 1), true},
      {"channels-last 2x2 [2,8,4,4]", {2, 8, 4, 4}, pool_attrs(2, 2, 2, 2, 0, 0), true},
      {"MNIST 2x2 after conv1 [4,32,28,28]", {4, 32, 28, 28}, pool_attrs(2, 2, 2, 2, 0, 0)},
      {"MNIST 2x2 after conv2 [4,64,14,14]", {4, 64, 14, 14}, pool_attrs(2, 2, 2, 2, 0, 0)},
      {"empty batch [0,2,4,4]", {0, 2, 4, 4}, pool_attrs(2, 2, 2, 2, 0, 0)},
  };
}

Tensor pool_input(const PoolCase& pc, uint64_t seed, bool distinct) {
  Tensor x = distinct ? samples::distinct(pc.x, -2, 2, seed) : samples::uniform(pc.x, -2, 2, seed);
  return pc.channels_last ? contiguous_as(x, true) : x;
}

// Max pooling with the relu fused: the generic loop, channels-last, the 2x2 fast path (inputs in
// [-2, 2], so some windows are all negative and their index is -1).
std::vector<PoolCase> relu_pool_cases() {
  std::vector<PoolCase> out;
  for (PoolCase pc : {pool_cases()[1], pool_cases()[7], pool_cases()[9]}) {
    pc.name = "relu: " + pc.name;
    pc.a.relu = 1;
    out.push_back(pc);
  }
  return out;
}

std::vector<OpSample> max_pool2d_samples() {
  std::vector<OpSample> out;
  uint64_t seed = 5000;
  for (const PoolCase& pc : pool_cases()) {
    OpSample s;
    s.name = pc.name;
    s.inputs = {pool_input(pc, ++seed, true)};  // distinct: no ties within the gradcheck step
    s.attrs = pc.a;
    out.push_back(std::move(s));
  }
  // ties: the first maximum wins (exactly representable values, equal in every dtype)
  {
    OpSample s;
    s.name = "ties: first maximum wins [1,1,4,4] 2x2 stride 1";
    s.inputs = {tensor({1, 1, 0, 0, 1, 1, 0, 2, -1, -1, 2, 2, -1, -1, 2, 2}, {1, 1, 4, 4}, DType::f64)};
    s.attrs = pool_attrs(2, 2, 1, 1, 0, 0);
    s.gradcheck = false;  // a kink at every tie
    out.push_back(std::move(s));
  }
  {
    OpSample s;
    s.name = "NaN and -inf inputs [1,1,3,4] 2x2";
    s.inputs = {
        tensor({NAN, 1, -INFINITY, -INFINITY, 2, NAN, -INFINITY, -INFINITY, 0, 0, 0, 0}, {1, 1, 3, 4}, DType::f64)};
    s.attrs = pool_attrs(2, 2, 2, 2, 0, 0);
    s.gradcheck = false;
    out.push_back(std::move(s));
  }
  for (const PoolCase& pc : relu_pool_cases()) {
    OpSample s;
    s.name = pc.name;
    s.inputs = {pool_input(pc, ++seed, true)};
    s.attrs = pc.a;
    out.push_back(std::move(s));
  }
  {
    // windows: a NaN maximum (NaN, index -1), all -inf, all negative, a maximum of 0 (each 0 and -1),
    // and 3 at its first place
    OpSample s;
    s.name = "relu: NaN, -inf, negative, zero and positive windows [1,1,4,6] 2x2";
    s.inputs = {tensor({NAN, 1,  -INFINITY, -INFINITY, 0.5, 3,  2,  NAN,   -INFINITY, -INFINITY, 3,  -1,
                        -1,  -3, 0,         -0.5,      -1,  -2, -2, -0.25, -1,        0,         -1, -1},
                       {1, 1, 4, 6}, DType::f64)};
    PoolAttrs a = pool_attrs(2, 2, 2, 2, 0, 0);
    a.relu = 1;
    s.attrs = a;
    s.gradcheck = false;
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<OpSample> max_pool2d_backward_samples() {
  std::vector<OpSample> out;
  uint64_t seed = 5100;
  // then the relu cases: their indices of -1 (windows the fused relu zeroed) route nothing
  std::vector<PoolCase> cases = pool_cases();
  for (const PoolCase& pc : relu_pool_cases()) cases.push_back(pc);
  for (const PoolCase& pc : cases) {
    Tensor x = pool_input(pc, ++seed, true);
    std::vector<Tensor> fwd = call(OpId::max_pool2d, {x}, pc.a);
    OpSample s;
    s.name = pc.name;
    Tensor gy = samples::uniform(fwd[0].shape(), -1, 1, ++seed);
    s.inputs = {pc.channels_last ? contiguous_as(gy, true) : gy, fwd[1]};
    s.attrs = with_input_size(pc.a, pc.x[2], pc.x[3]);
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<OpSample> avg_pool2d_samples() {
  std::vector<OpSample> out;
  uint64_t seed = 5200;
  for (const PoolCase& pc : pool_cases()) {
    for (bool include_pad : {true, false}) {
      if (!include_pad && pc.a.padding[0] == 0 && pc.a.padding[1] == 0) continue;  // the same result
      OpSample s;
      s.name = pc.name + (include_pad ? "" : " count_include_pad=false");
      s.inputs = {pool_input(pc, ++seed, false)};
      PoolAttrs a = pc.a;
      a.count_include_pad = include_pad ? 1 : 0;
      s.attrs = a;
      out.push_back(std::move(s));
    }
  }
  {
    // contiguous, yet its size-1 batch and channel dims keep the batch's strides (144, 36): the
    // cuDNN variant must describe it packed (Note [cuDNN layouts from strides])
    OpSample s;
    s.name = "one image's channel of a batch [1,1,6,6] 3x3 stride 1";
    s.inputs = {samples::uniform({3, 4, 6, 6}, -2, 2, ++seed).narrow(0, 1, 1).narrow(1, 2, 1)};
    s.attrs = pool_attrs(3, 3, 1, 1, 0, 0);
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<OpSample> avg_pool2d_backward_samples() {
  std::vector<OpSample> out;
  uint64_t seed = 5300;
  for (const PoolCase& pc : pool_cases()) {
    PoolGeom g = pool_geometry("avg_pool2d", pc.x, pc.a);
    OpSample s;
    s.name = pc.name;
    Tensor gy = samples::uniform({g.N, g.C, g.P, g.Q}, -1, 1, ++seed);
    s.inputs = {pc.channels_last ? contiguous_as(gy, true) : gy};
    s.attrs = with_input_size(pc.a, pc.x[2], pc.x[3]);
    out.push_back(std::move(s));
  }
  return out;
}

struct AdaptiveCase {
  std::string name;
  Shape x;
  int64_t oh, ow;
  bool channels_last = false;
};

std::vector<AdaptiveCase> adaptive_cases() {
  return {
      {"1x1 (global average) [2,3,5,5]", {2, 3, 5, 5}, 1, 1},
      {"1x1 channels-last [2,6,7,7]", {2, 6, 7, 7}, 1, 1, true},
      {"1x1 ResNet head [2,16,7,7]", {2, 16, 7, 7}, 1, 1},
      {"divisible 6x6 -> 3x2 [2,2,6,6]", {2, 2, 6, 6}, 3, 2},
      {"overlapping bins 7x5 -> 3x3 [1,2,7,5]", {1, 2, 7, 5}, 3, 3},
      {"upsampling 3x2 -> 5x4 [1,2,3,2]", {1, 2, 3, 2}, 5, 4},
      {"channels-last 10x9 -> 4x3 [2,4,10,9]", {2, 4, 10, 9}, 4, 3, true},
      {"same size 4x4 -> 4x4 [1,2,4,4]", {1, 2, 4, 4}, 4, 4},
      {"empty batch [0,2,4,4]", {0, 2, 4, 4}, 2, 2},
  };
}

std::vector<OpSample> adaptive_samples() {
  std::vector<OpSample> out;
  uint64_t seed = 5400;
  for (const AdaptiveCase& ac : adaptive_cases()) {
    OpSample s;
    s.name = ac.name;
    Tensor x = samples::uniform(ac.x, -2, 2, ++seed);
    s.inputs = {ac.channels_last ? contiguous_as(x, true) : x};
    s.attrs = adaptive_pool_attrs(ac.oh, ac.ow);
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<OpSample> adaptive_backward_samples() {
  std::vector<OpSample> out;
  uint64_t seed = 5500;
  for (const AdaptiveCase& ac : adaptive_cases()) {
    OpSample s;
    s.name = ac.name;
    Tensor gy = samples::uniform({ac.x[0], ac.x[1], ac.oh, ac.ow}, -1, 1, ++seed);
    s.inputs = {ac.channels_last ? contiguous_as(gy, true) : gy};
    s.attrs = adaptive_pool_attrs(ac.oh, ac.ow, ac.x[2], ac.x[3]);
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace

std::vector<OpSample> samples_max_pool2d() { return max_pool2d_samples(); }
std::vector<OpSample> samples_max_pool2d_backward() { return max_pool2d_backward_samples(); }
std::vector<OpSample> samples_avg_pool2d() { return avg_pool2d_samples(); }
std::vector<OpSample> samples_avg_pool2d_backward() { return avg_pool2d_backward_samples(); }
std::vector<OpSample> samples_adaptive_avg_pool2d() { return adaptive_samples(); }
std::vector<OpSample> samples_adaptive_avg_pool2d_backward() { return adaptive_backward_samples(); }

}  // namespace ember
