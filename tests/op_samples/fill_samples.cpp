// Test samples of fill, zero_many and arange (kernels/ops/fill.*).
#include "kernels/functional.h"
#include "kernels/ops/fill.h"
#include "tests/op_samples/sample_inputs.h"

namespace ember {

std::vector<OpSample> samples_fill() {
  std::vector<OpSample> out;
  for (double v : {0.0, 1.5, -3.0, 1e4}) {
    OpSample s;
    s.name = "[1023] = " + std::to_string(v);
    s.inputs = {samples::uniform({1023}, -1, 1, 1)};
    s.attrs = ScalarAttrs{v};
    s.gradcheck = false;
    out.push_back(std::move(s));
  }
  OpSample tr;
  tr.name = "transposed view";
  tr.inputs = {samples::uniform({5, 6}, -1, 1, 2).transpose(0, 1)};
  tr.attrs = ScalarAttrs{2.0};
  tr.gradcheck = false;
  out.push_back(std::move(tr));
  OpSample e;
  e.name = "empty";
  e.inputs = {samples::uniform({0}, -1, 1, 3)};
  e.attrs = ScalarAttrs{2.0};
  e.gradcheck = false;
  out.push_back(std::move(e));
  return out;
}

std::vector<OpSample> samples_zero_many() {
  std::vector<OpSample> out;
  auto mk = [&](const char* name, std::vector<Tensor> inputs) {
    OpSample s;
    s.name = name;
    s.inputs = std::move(inputs);
    s.gradcheck = false;  // in place, no autograd
    out.push_back(std::move(s));
    return &out.back();
  };
  uint64_t seed = 300;
  auto u = [&](Shape shape) { return samples::uniform(std::move(shape), -3, 3, ++seed); };
  // the MNIST CNN's gradients: conv1, conv2, fc1, fc2 (weights and biases)
  mk("8 gradients",
     {u({32, 1, 3, 3}), u({32}), u({64, 32, 3, 3}), u({64}), u({128, 3136}), u({128}), u({10, 128}), u({10})});
  mk("[2^20+3] and [1]", {u({(1 << 20) + 3}), u({1})});
  // a channels-last gradient (dense, not contiguous) and a sliced view
  mk("channels-last [4,3,5,5], a sliced view", {u({4, 5, 5, 3}).permute({0, 3, 1, 2}), u({41}).slice(0, 1, 41)});
  mk("an empty tensor among others", {u({0, 4}), u({3}), u({2, 0})});
  std::vector<Tensor> many;  // past one kernel table (mt::kMaxTensors)
  for (int i = 0; i < 40; ++i) many.push_back(u({i % 5 + 1, 7}));
  mk("40 tensors", many);
  // integer tensors keep their dtype: every dtype's zero is all bits clear
  OpSample* ints = mk("an i64 and an i32 tensor beside a floating one",
                      {u({6}), full({5}, 7, DType::i64), full({3, 3}, -2, DType::i32)});
  ints->keep_dtype = {1, 2};
  return out;
}

std::vector<OpSample> samples_arange() {
  OpSample s;
  s.name = "[1000] from -3 step 0.25";
  s.inputs = {samples::uniform({1000}, -1, 1, 1)};
  s.attrs = ArangeAttrs{-3, 0.25};
  s.gradcheck = false;
  s.dtypes = {DType::f32, DType::f16, DType::bf16};
  return {s};
}

}  // namespace ember
