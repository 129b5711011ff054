// Bad input gives an error that names the problem: both operands' shapes, dtypes, devices.
#include <catch2/catch.hpp>

#include "ember.h"
#include "kernels/ops/linear.h"  // LinearAttrs
#include "kernels/registry.h"

using namespace ember;

TEST_CASE("shape mismatches name both shapes", "[bad-input]") {
  CHECK_THROWS_WITH(add(zeros({2, 3}), zeros({4})),
                    Catch::Contains("[2, 3]") && Catch::Contains("[4]") && Catch::Contains("cannot be broadcast"));
  CHECK_THROWS_WITH(matmul(zeros({2, 3}), zeros({4, 5})), Catch::Contains("inner dimensions differ") &&
                                                              Catch::Contains("[2, 3]") && Catch::Contains("[4, 5]"));
  CHECK_THROWS_WITH(linear(zeros({2, 3}), zeros({4, 5})),
                    Catch::Contains("has 3 features but weight [4, 5] expects 5"));
  CHECK_THROWS_WITH(cat({zeros({2, 3}), zeros({2, 4})}, 0), Catch::Contains("sizes must match except in dim 0"));
  CHECK_THROWS_WITH(where(zeros({2}, DType::boolean), zeros({3}), zeros({2})), Catch::Contains("cannot be broadcast"));
  CHECK_THROWS_WITH(sum(zeros({2, 3}), {2}), Catch::Contains("out of range for a tensor with 2 dimensions"));
  CHECK_THROWS_WITH(gather(zeros({4, 5}), 1, zeros({4}, DType::i64)), Catch::Contains("must have as many dims"));
}

TEST_CASE("linear's backward ops name what does not fit", "[bad-input]") {
  const Attrs none = LinearAttrs{0}, relu = LinearAttrs{1}, gelu = LinearAttrs{2};
  const Tensor g = zeros({4, 5}), w = zeros({5, 3}), x = zeros({4, 3});
  CHECK_THROWS_WITH(call1(OpId::linear_backward_input, {g, Tensor(), zeros({6, 3})}, none),
                    Catch::Contains("grad_output [4, 5] has 5 features but weight [6, 3] has 6 outputs"));
  CHECK_THROWS_WITH(call1(OpId::linear_backward_input, {g, Tensor(), w}, relu),
                    Catch::Contains("relu needs the layer's output y for its mask"));
  CHECK_THROWS_WITH(call1(OpId::linear_backward_input, {g, zeros({4, 6}), w}, relu),
                    Catch::Contains("must have grad_output's shape and dtype"));
  CHECK_THROWS_WITH(call1(OpId::linear_backward_input, {g, Tensor(), w}, gelu),
                    Catch::Contains("the activation must be none (0) or relu (1), got 2"));
  CHECK_THROWS_WITH(call(OpId::linear_backward_weight, {g, Tensor(), zeros({3, 3})}, none),
                    Catch::Contains("input [3, 3] and grad_output [4, 5] must have the same leading dims"));
  CHECK_THROWS_WITH(call(OpId::linear_backward_weight, {g, Tensor(), x.to(DType::f64)}, none),
                    Catch::Contains("must have grad_output's dtype f32"));
}

TEST_CASE("dtype problems name the dtype", "[bad-input]") {
  CHECK_THROWS_WITH(add(zeros({2}, DType::boolean), zeros({2}, DType::boolean)),
                    Catch::Contains("bool tensors are not supported"));
  CHECK_THROWS_WITH(index_select(zeros({4}), 0, zeros({2}, DType::f32)), Catch::Contains("index must be i32 or i64"));
  CHECK_THROWS_WITH(zeros({2}).data<double>(), Catch::Contains("data<f64>() called on a tensor of dtype f32"));
  CHECK_THROWS_WITH(pow(arange(3), -1.0), Catch::Contains("negative integer powers"));
}

TEST_CASE("index values out of range name the value and the size", "[bad-input]") {
  CHECK_THROWS_WITH(index_select(zeros({4, 2}), 0, tensor_i64({1, 4}, {2})),
                    Catch::Contains("index 4 is out of range for dim 0 of size 4"));
  CHECK_THROWS_WITH(gather(zeros({2, 3}), 1, tensor_i64({0, -1, 0, 0}, {2, 2})),
                    Catch::Contains("index -1 is out of range for dim 1 of size 3"));
  CHECK_THROWS_WITH(scatter_add(zeros({2, 3}), 0, tensor_i64({5}, {1, 1}), ones({1, 1})),
                    Catch::Contains("index 5 is out of range for dim 0 of size 2"));
}

TEST_CASE("device strings are validated", "[bad-input]") {
  CHECK(Device::parse("cuda:1") == Device(DeviceType::cuda, 1));
  CHECK(Device::parse("cpu") == kCPU);
  CHECK_THROWS_WITH(Device::parse("gpu"), Catch::Contains("bad device 'gpu'"));
  CHECK_THROWS_WITH(Device::parse("cuda:x"), Catch::Contains("bad device 'cuda:x'"));
}

TEST_CASE("an error leaves the operands intact", "[bad-input]") {
  Tensor a = ones({2, 3});
  Tensor b = ones({3, 2});
  CHECK_THROWS(add(a, b));
  CHECK(a.to_vector<float>() == std::vector<float>(6, 1.0f));
  Tensor c = a.clone();
  CHECK_THROWS(c.copy_(ones({4})));
  CHECK(c.to_vector<float>() == std::vector<float>(6, 1.0f));
}
