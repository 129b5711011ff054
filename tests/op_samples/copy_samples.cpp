// Test samples of cast and copy (kernels/ops/copy.*): every dtype conversion, strided and broadcast
// sources and destinations.
#include "kernels/ops/copy.h"
#include "tests/op_samples/sample_inputs.h"

namespace ember {

std::vector<OpSample> samples_cast() {
  std::vector<OpSample> out;
  uint64_t seed = 1;
  for (const auto& ns : samples::elementwise_shapes()) {
    OpSample s;
    s.name = ns.name + " to same dtype (a copy)";
    s.inputs = {samples::uniform(ns.shape, -3, 3, ++seed)};
    s.attrs = CastAttrs{static_cast<int64_t>(DType::f64), 0};
    out.push_back(std::move(s));
  }
  // conversions to every dtype (not differentiable into integers)
  for (DType t : {DType::f32, DType::f16, DType::bf16, DType::i32, DType::i64, DType::u8, DType::boolean}) {
    OpSample s;
    s.name = std::string("[257] to ") + std::string(dtype_name(t));
    s.inputs = {samples::uniform({257}, 0, 100, ++seed)};
    s.attrs = CastAttrs{static_cast<int64_t>(t)};
    s.gradcheck = false;  // f64 -> lower precision: central differences drown in rounding
    out.push_back(std::move(s));
  }
  OpSample tr;
  tr.name = "transposed [6, 5]";
  tr.inputs = {samples::uniform({5, 6}, -1, 1, 99).transpose(0, 1)};
  tr.attrs = CastAttrs{static_cast<int64_t>(DType::f64), 1};
  out.push_back(std::move(tr));
  OpSample ex;
  ex.name = "expanded [1, 9] -> [4, 9]";
  ex.inputs = {samples::uniform({1, 9}, -1, 1, 98).expand({4, 9})};
  ex.attrs = CastAttrs{static_cast<int64_t>(DType::f64)};
  out.push_back(std::move(ex));
  return out;
}

std::vector<OpSample> samples_cast_many() {
  std::vector<OpSample> out;
  auto mk = [&](std::string name, std::vector<Tensor> inputs, DType to) {
    OpSample s;
    s.name = std::move(name);
    s.inputs = std::move(inputs);
    s.attrs = CastManyAttrs{static_cast<int64_t>(to)};
    s.gradcheck = to == DType::f64;  // into a lower precision, central differences drown in rounding
    out.push_back(std::move(s));
    return &out.back();
  };
  uint64_t seed = 200;
  auto u = [&](Shape shape) { return samples::uniform(std::move(shape), -3, 3, ++seed); };
  mk("three tensors to f64 (copies)", {u({5, 7}), u({7}), u({3, 1, 4})}, DType::f64);
  // autocast's calls: a layer's weight and bias, or a stack's six parameters
  for (DType t : {DType::f32, DType::f16, DType::bf16})
    mk(std::string("weight [128,64] and bias [128] to ") + std::string(dtype_name(t)), {u({128, 64}), u({128})}, t);
  mk("six parameters to bf16", {u({32, 20}), u({32}), u({16, 32}), u({16}), u({10, 16}), u({10})}, DType::bf16);
  mk("an empty tensor among others", {u({0, 4}), u({3}), u({2, 0})}, DType::f32);
  mk("a transposed input", {samples::uniform({5, 6}, -1, 1, 99).transpose(0, 1), u({4})}, DType::f64);
  std::vector<Tensor> many;  // past one kernel table (mt::kMaxTensors)
  for (int i = 0; i < 40; ++i) many.push_back(u({i % 5 + 1, 3}));
  mk("40 tensors to f32", many, DType::f32);
  // two source dtypes: one launch each
  OpSample* mixed = mk("inputs of two dtypes to f32", {u({9, 4}), u({4}), u({7})}, DType::f32);
  mixed->keep_dtype = {1};
  return out;
}

std::vector<OpSample> samples_copy() {
  std::vector<OpSample> out;
  auto mk = [&](const char* name, Tensor dst, Tensor src) {
    OpSample s;
    s.name = name;
    s.inputs = {std::move(dst), std::move(src)};
    s.attrs = CopyAttrs{};  // the op's attributes, as copy_() passes them (the CUDA kernel reads them)
    s.gradcheck = false;    // copy_ is not differentiable (use cast or clone)
    out.push_back(std::move(s));
  };
  mk("[1023] contiguous", samples::uniform({1023}, -1, 1, 1), samples::uniform({1023}, -1, 1, 2));
  mk("into transposed [6,5]", samples::uniform({5, 6}, -1, 1, 3).transpose(0, 1), samples::uniform({6, 5}, -1, 1, 4));
  mk("broadcast [5] -> [3,5]", samples::uniform({3, 5}, -1, 1, 5), samples::uniform({5}, -1, 1, 6));
  mk("strided source", samples::uniform({4, 3}, -1, 1, 7), samples::uniform({4, 7}, -1, 1, 8).slice(1, 0, 6, 2));
  mk("empty", samples::uniform({0, 4}, -1, 1, 9), samples::uniform({0, 4}, -1, 1, 10));
  return out;
}

}  // namespace ember
