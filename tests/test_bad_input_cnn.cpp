// Bad input to conv2d, pooling and batch_norm: every error names the shapes and values involved.
#include <catch2/catch.hpp>

#include "ember.h"
#include "kernels/ops/conv2d.h"  // Conv2dAttrs: the gradient ops on a pooled gradient
#include "kernels/registry.h"

using namespace ember;

TEST_CASE("conv2d bad input names the shapes and values", "[bad-input][conv]") {
  CHECK_THROWS_WITH(
      conv2d(zeros({2, 4, 5, 5}), zeros({6, 3, 3, 3})),
      Catch::Contains("input [2, 4, 5, 5] has 4 channels but weight [6, 3, 3, 3] expects 3 * groups = 3"));
  CHECK_THROWS_WITH(conv2d(zeros({2, 4, 5, 5}), zeros({6, 2, 3, 3}), Tensor(), Conv2dFuncOptions().set_groups(3)),
                    Catch::Contains("groups = 3 must divide the input channels C = 4"));
  CHECK_THROWS_WITH(conv2d(zeros({2, 4, 5, 5}), zeros({5, 2, 3, 3}), Tensor(), Conv2dFuncOptions().set_groups(2)),
                    Catch::Contains("groups = 2 must divide the output channels K = 5"));
  CHECK_THROWS_WITH(conv2d(zeros({1, 1, 2, 2}), zeros({1, 1, 5, 5})),
                    Catch::Contains("kernel 5x5") && Catch::Contains("larger than the padded input 2x2"));
  CHECK_THROWS_WITH(conv2d(zeros({3, 28, 28}), zeros({8, 3, 3, 3})),
                    Catch::Contains("expects a 4-D input [N, C, H, W], got [3, 28, 28]"));
  CHECK_THROWS_WITH(conv2d(zeros({2, 3, 5, 5}), zeros({6, 3, 3})), Catch::Contains("expects a 4-D weight"));
  CHECK_THROWS_WITH(conv2d(zeros({2, 3, 5, 5}), zeros({6, 3, 3, 3}), zeros({5})),
                    Catch::Contains("bias must be [6]") && Catch::Contains("got [5]"));
  CHECK_THROWS_WITH(conv2d(zeros({2, 3, 5, 5}), zeros({6, 3, 3, 3}, DType::f64)),
                    Catch::Contains("must have the same dtype"));
  CHECK_THROWS_WITH(conv2d(zeros({2, 3, 5, 5}), zeros({6, 3, 3, 3}), Tensor(), Conv2dFuncOptions().set_stride(0, 1)),
                    Catch::Contains("stride must be positive, got (0, 1)"));
  CHECK_THROWS_WITH(conv2d_backward_input(zeros({2, 6, 4, 4}), zeros({6, 3, 3, 3}), {5, 5}),
                    Catch::Contains("grad_output [2, 6, 4, 4] does not match the output [2, 6, 3, 3]"));
}

TEST_CASE("conv2d_max_pool2d and the gradient ops on a pooled gradient: bad input names the shapes",
          "[bad-input][conv]") {
  const Conv2dFuncOptions pad1 = Conv2dFuncOptions().set_padding(1);
  CHECK_THROWS_WITH(conv2d_max_pool2d(zeros({1, 1, 2, 2}), zeros({2, 1, 3, 3}), Tensor(), pad1, {3, 3}),
                    Catch::Contains("kernel 3x3 is larger than the padded input 2x2"));
  Conv2dAttrs a{pad1, {4, 4}};
  a.max_pool = 1;
  a.pool = with_input_size(pool_attrs(2, 2, 2, 2, 0, 0), 4, 4);
  const Tensor w = zeros({6, 3, 3, 3}), ind = zeros({2, 6, 2, 2}, DType::i64);
  // the pooled gradient of a 4x4 output is 2x2
  CHECK_THROWS_WITH(call1(OpId::conv2d_backward_input, {zeros({2, 6, 4, 4}), w, ind}, a),
                    Catch::Contains("the pooled gradient [2, 6, 4, 4] does not match [2, 6, 2, 2], the max pooling "
                                    "(2x2, stride 2x2, padding 0x0) of the convolution's output [2, 6, 4, 4]"));
  CHECK_THROWS_WITH(call1(OpId::conv2d_backward_input, {zeros({2, 6, 2, 2}), w, zeros({2, 6, 2, 2})}, a),
                    Catch::Contains("the pool's indices must be i64 [2, 6, 2, 2], got f32[2, 6, 2, 2] on cpu"));
  CHECK_THROWS_WITH(call1(OpId::conv2d_backward_input, {zeros({2, 6, 2, 2}), w}, a),
                    Catch::Contains("with max_pool expects (pooled gradient, weight, indices), got 2 inputs"));
  a.max_pool = 0;
  CHECK_THROWS_WITH(call1(OpId::conv2d_backward_input, {zeros({2, 6, 4, 4}), w, ind}, a),
                    Catch::Contains("expects (grad_output, weight), got 3 inputs"));
}

TEST_CASE("pooling bad input", "[bad-input][pool]") {
  CHECK_THROWS_WITH(max_pool2d(zeros({1, 1, 6, 6}), {3, 3}, {1, 1}, {2, 2}),
                    Catch::Contains("padding (2, 2) must be at most half the kernel size (3, 3)"));
  CHECK_THROWS_WITH(avg_pool2d(zeros({1, 1, 2, 2}), {3, 3}),
                    Catch::Contains("kernel 3x3 is larger than the padded input 2x2"));
  CHECK_THROWS_WITH(max_pool2d(zeros({5}), {2, 2}), Catch::Contains("expects a 4-D input"));
  CHECK_THROWS_WITH(adaptive_avg_pool2d(zeros({1, 1, 4, 4}), {0, 2}), Catch::Contains("output size must be positive"));
  CHECK_THROWS_WITH(max_pool2d(zeros({1, 1, 4, 4}), {0, 2}), Catch::Contains("kernel size must be positive"));
}

TEST_CASE("batch_norm bad input", "[bad-input][bn]") {
  CHECK_THROWS_WITH(batch_norm(zeros({4, 3}), zeros({2}), Tensor(), Tensor(), Tensor(), true),
                    Catch::Contains("weight must be [3]") && Catch::Contains("got [2]"));
  CHECK_THROWS_WITH(batch_norm(zeros({1, 3}), Tensor(), Tensor(), zeros({3}), ones({3}), true),
                    Catch::Contains("expected more than 1 value per channel when training, got input [1, 3]"));
  CHECK_THROWS_WITH(batch_norm(zeros({4, 3}), Tensor(), Tensor(), Tensor(), Tensor(), false),
                    Catch::Contains("running_mean and running_var are required in eval mode"));
  CHECK_THROWS_WITH(batch_norm(zeros({4, 3}), Tensor(), Tensor(), zeros({3}), Tensor(), true),
                    Catch::Contains("must both be given or both be undefined"));
  CHECK_THROWS_WITH(batch_norm(zeros({4, 3}), Tensor(), Tensor(), zeros({3}).requires_grad_(), ones({3}), true),
                    Catch::Contains("running statistics must not require grad"));
  CHECK_THROWS_WITH(batch_norm(zeros({4}), Tensor(), Tensor(), Tensor(), Tensor(), true),
                    Catch::Contains("expects an input (N, C) or (N, C, *), got [4]"));
  CHECK_THROWS_WITH(batch_norm(zeros({4, 3}, DType::f16), zeros({3}, DType::f64), Tensor(), Tensor(), Tensor(), true),
                    Catch::Contains("weight f64[3]") && Catch::Contains("must be f16 or f32"));
}
