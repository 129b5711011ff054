// Convolution, pooling and batch norm on the CPU: known answers (PyTorch's definitions computed by
// hand), layouts, running statistics, autograd plumbing, and a small CNN that trains.
// (Every op is also covered by the generic driver: gradcheck and variant parity from its samples.)
#include <catch2/catch.hpp>

#include <cmath>

#include "ember.h"
#include "kernels/common/memory_format.h"
#include "kernels/registry.h"
#include "tests/bn_count_check.h"

using namespace ember;

namespace {

std::vector<double> vals(const Tensor& t) { return t.to_vector<double>(); }

Tensor iota(const Shape& s, double start = 1) {
  std::vector<double> v(static_cast<size_t>(s.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = start + static_cast<double>(i);
  return tensor(v, s);
}

}  // namespace

TEST_CASE("conv2d known answers", "[conv]") {
  Tensor x = iota({1, 1, 3, 3});  // 1..9
  Tensor w = ones({1, 1, 2, 2});
  Tensor y = conv2d(x, w);
  CHECK(y.shape() == Shape{1, 1, 2, 2});
  CHECK(vals(y) == std::vector<double>{12, 16, 24, 28});
  // bias, stride 2, padding 1: windows at rows/cols {-1, 0} and {1, 2}
  Tensor y2 = conv2d(x, w, ones({1}), Conv2dFuncOptions().set_stride(2).set_padding(1));
  CHECK(vals(y2) == std::vector<double>{2, 6, 12, 29});
  // dilation 2 on a 5x5 input with a 2x2 kernel: taps (0,0), (0,2), (2,0), (2,2)
  Tensor x5 = iota({1, 1, 5, 5}, 0);
  Tensor y3 = conv2d(x5, w, Tensor(), Conv2dFuncOptions().set_dilation(2));
  CHECK(y3.shape() == Shape{1, 1, 3, 3});
  CHECK(vals(y3)[0] == 0 + 2 + 10 + 12);
  // groups: two channels convolved separately
  Tensor xg = cat({iota({1, 1, 3, 3}), mul(iota({1, 1, 3, 3}), 10.0)}, 1);
  Tensor wg = ones({2, 1, 2, 2});
  Tensor yg = conv2d(xg, wg, Tensor(), Conv2dFuncOptions().set_groups(2));
  CHECK(vals(yg) == std::vector<double>{12, 16, 24, 28, 120, 160, 240, 280});
}

TEST_CASE("conv2d: a channels-last input gives a channels-last output with the same values", "[conv]") {
  Tensor x = uniform({2, 6, 7, 5}, -1, 1);
  Tensor w = uniform({4, 3, 3, 3}, -1, 1);
  Tensor b = uniform({4}, -1, 1);
  Conv2dFuncOptions o = Conv2dFuncOptions().set_stride(2).set_padding(1).set_groups(2);
  Tensor y = conv2d(x, w, b, o);
  Tensor ycl = conv2d(contiguous_as(x, true), w, b, o);
  CHECK(ycl.is_channels_last());
  CHECK_FALSE(ycl.is_contiguous());
  CHECK(y.is_contiguous());
  std::vector<double> a = vals(y), c = vals(ycl);
  REQUIRE(a.size() == c.size());
  for (size_t i = 0; i < a.size(); ++i) CHECK(a[i] == Approx(c[i]).margin(1e-5));
}

TEST_CASE("conv2d: gradients reach input, weight and bias, the bias gradient is the sum of the output gradient",
          "[conv][autograd]") {
  Tensor x = uniform({2, 3, 6, 6}, -1, 1).requires_grad_();
  Tensor w = uniform({5, 3, 3, 3}, -1, 1).requires_grad_();
  Tensor b = zeros({5}).requires_grad_();
  Tensor y = conv2d(x, w, b, Conv2dFuncOptions().set_padding(1));
  sum(y).backward();
  REQUIRE(x.grad().defined());
  REQUIRE(w.grad().defined());
  CHECK(x.grad().shape() == x.shape());
  CHECK(w.grad().shape() == w.shape());
  CHECK(vals(b.grad()) == std::vector<double>(5, 2.0 * 36));
}

TEST_CASE("max_pool2d: windows, padding never wins, first maximum on ties, indices", "[pool]") {
  // 4x4 with ties: kernel 2, stride 2
  Tensor x = tensor({1, 1, 0, 0, 1, 1, 0, 2, -1, -1, 2, 2, -1, -1, 2, 2}, {1, 1, 4, 4});
  std::vector<Tensor> r = max_pool2d_with_indices(x, {2, 2});
  CHECK(vals(r[0]) == std::vector<double>{1, 2, -1, 2});
  CHECK(vals(r[1]) == std::vector<double>{0, 7, 8, 10});
  // padding 1 on all-negative input: the maximum comes from the input, never from the padding
  Tensor neg = mul(ones({1, 1, 2, 2}), -5.0);
  Tensor p = max_pool2d(neg, {2, 2}, {1, 1}, {1, 1});
  CHECK(p.shape() == Shape{1, 1, 3, 3});
  CHECK(vals(p) == std::vector<double>(9, -5.0));
  // stride defaults to the kernel size
  CHECK(max_pool2d(zeros({1, 1, 6, 6}), {3, 3}).shape() == Shape{1, 1, 2, 2});
  // unbatched (C, H, W)
  CHECK(max_pool2d(zeros({2, 6, 6}), {2, 2}).shape() == Shape{2, 3, 3});
}

TEST_CASE("max_pool2d backward routes each gradient to its argmax (overlapping windows add)", "[pool][autograd]") {
  Tensor x = tensor({0, 1, 2, 9, 3, 5, 6, 7, 8}, {1, 1, 3, 3}).requires_grad_();
  Tensor y = max_pool2d(x, {2, 2}, {1, 1});  // the 9 at (1, 0) wins two windows, 5 and 8 one each
  sum(y).backward();
  CHECK(vals(x.grad()) == std::vector<double>{0, 0, 0, 2, 0, 1, 0, 0, 1});
}

TEST_CASE("avg_pool2d count_include_pad", "[pool]") {
  Tensor x = ones({1, 1, 3, 3});
  Tensor with = avg_pool2d(x, {3, 3}, {1, 1}, {1, 1}, true);
  Tensor without = avg_pool2d(x, {3, 3}, {1, 1}, {1, 1}, false);
  std::vector<double> w = vals(with);
  CHECK(w[0] == Approx(4.0 / 9));
  CHECK(w[1] == Approx(6.0 / 9));
  CHECK(w[4] == Approx(1.0));
  CHECK(vals(without) == std::vector<double>(9, 1.0));
}

TEST_CASE("adaptive_avg_pool2d uses PyTorch's bins", "[pool]") {
  Tensor x = iota({1, 1, 1, 5}, 0);           // 0 1 2 3 4
  Tensor y = adaptive_avg_pool2d(x, {1, 3});  // bins [0,2) [1,4) [3,5)
  std::vector<double> v = vals(y);
  CHECK(v[0] == Approx(0.5));
  CHECK(v[1] == Approx(2.0));
  CHECK(v[2] == Approx(3.5));
  Tensor g = adaptive_avg_pool2d(iota({2, 3, 4, 4}), {1, 1});
  CHECK(g.shape() == Shape{2, 3, 1, 1});
  CHECK(vals(g)[0] == Approx(8.5));
}

TEST_CASE("batch_norm training: batch statistics, running stats with the unbiased variance", "[bn]") {
  // channel 0: 1, 2, 3, 4 (mean 2.5, biased var 1.25, unbiased 5/3); channel 1: all 10
  Tensor x = tensor({1, 10, 2, 10, 3, 10, 4, 10}, {4, 2});
  Tensor rm = zeros({2}), rv = ones({2});
  const uint64_t v0 = rm.version();
  Tensor y = batch_norm(x, Tensor(), Tensor(), rm, rv, true, 0.1, 1e-5);
  std::vector<double> yv = vals(y);
  const double inv = 1.0 / std::sqrt(1.25 + 1e-5);
  CHECK(yv[0] == Approx(-1.5 * inv));
  CHECK(yv[6] == Approx(1.5 * inv));
  CHECK(yv[1] == Approx(0.0).margin(1e-12));
  std::vector<double> m = vals(rm), v = vals(rv);
  CHECK(m[0] == Approx(0.25));
  CHECK(m[1] == Approx(1.0));
  CHECK(v[0] == Approx(0.9 + 0.1 * 5.0 / 3.0));
  CHECK(v[1] == Approx(0.9));
  CHECK(rm.version() > v0);
  CHECK_FALSE(rm.requires_grad());
  CHECK(rm.grad_fn() == nullptr);
}

TEST_CASE("batch_norm counts its batches in the op: every CPU variant, training only", "[bn]") {
  // num_batches_tracked, the forward ops' sixth input (Note [batch norm counts its batches])
  CHECK(test::check_bn_counts(kCPU) >= 10);
  Tensor x = uniform({4, 3, 2, 2}, -1, 1), rm = zeros({3}), rv = ones({3});
  CHECK_THROWS_WITH(batch_norm(x, {}, {}, rm, rv, true, 0.1, 1e-5, zeros({2}, DType::i64)),
                    Catch::Contains("num_batches_tracked must be one contiguous i64"));
  CHECK_THROWS_WITH(batch_norm(x, {}, {}, rm, rv, true, 0.1, 1e-5, zeros({})),
                    Catch::Contains("num_batches_tracked must be one contiguous i64"));
}

TEST_CASE("batch_norm eval uses the running statistics, affine parameters", "[bn]") {
  Tensor x = tensor({1, 2, 3, 4}, {2, 2});
  Tensor rm = tensor({1, 2}, {2}), rv = tensor({4, 9}, {2});
  Tensor w = tensor({2, 3}, {2}), b = tensor({1, -1}, {2});
  Tensor y = batch_norm(x, w, b, rm, rv, false, 0.1, 0.0);
  std::vector<double> yv = vals(y);
  CHECK(yv[0] == Approx((1 - 1) / 2.0 * 2 + 1));
  CHECK(yv[1] == Approx((2 - 2) / 3.0 * 3 - 1));
  CHECK(yv[2] == Approx((3 - 1) / 2.0 * 2 + 1));
  CHECK(yv[3] == Approx((4 - 2) / 3.0 * 3 - 1));
  CHECK(vals(rm) == std::vector<double>{1, 2});  // eval leaves them alone
}

TEST_CASE("batch_norm: one module applied twice before backward (running stats are not saved)", "[bn][autograd]") {
  Tensor w = ones({3}).requires_grad_(), b = zeros({3}).requires_grad_();
  Tensor rm = zeros({3}), rv = ones({3});
  Tensor x1 = uniform({4, 3, 2, 2}, -1, 1).requires_grad_();
  Tensor x2 = uniform({4, 3, 2, 2}, -1, 1).requires_grad_();
  Tensor y1 = batch_norm(x1, w, b, rm, rv, true);
  Tensor y2 = batch_norm(x2, w, b, rm, rv, true);
  Tensor loss = add(sum(mul(y1, y1)), sum(mul(y2, x2)));
  REQUIRE_NOTHROW(loss.backward());
  CHECK(x1.grad().defined());
  CHECK(w.grad().defined());
  CHECK(rm.grad_fn() == nullptr);
}

TEST_CASE("batch_norm: f16 input with f32 parameters and running stats (mixed, as AMP)", "[bn]") {
  Tensor x = uniform({8, 4, 3, 3}, -2, 2);
  Tensor rm = zeros({4}), rv = ones({4}), w = uniform({4}, 0.5, 1.5), b = uniform({4}, -1, 1);
  Tensor rm2 = rm.clone(), rv2 = rv.clone();
  Tensor y16 = batch_norm(x.to(DType::f16), w, b, rm, rv, true);
  Tensor y32 = batch_norm(x.to(DType::f16).to(DType::f32), w, b, rm2, rv2, true);
  CHECK(y16.dtype() == DType::f16);
  CHECK(rm.dtype() == DType::f32);
  std::vector<double> a = vals(y16), c = vals(y32);
  for (size_t i = 0; i < a.size(); ++i) CHECK(a[i] == Approx(c[i]).margin(4e-3));
  std::vector<double> m1 = vals(rm), m2 = vals(rm2);
  for (size_t i = 0; i < m1.size(); ++i) CHECK(m1[i] == Approx(m2[i]).margin(1e-6));
}

TEST_CASE("batch_norm channels-last keeps the layout", "[bn]") {
  Tensor x = contiguous_as(uniform({3, 5, 4, 2}, -1, 1), true);
  Tensor y = batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), true);
  CHECK(y.is_channels_last());
  CHECK_FALSE(y.is_contiguous());
  Tensor yc = batch_norm(x.contiguous(), Tensor(), Tensor(), Tensor(), Tensor(), true);
  std::vector<double> a = vals(y), c = vals(yc);
  for (size_t i = 0; i < a.size(); ++i) CHECK(a[i] == Approx(c[i]).margin(1e-5));
}

TEST_CASE("a small CNN trains on the CPU (conv, batch norm, relu, pools, backward of each)", "[conv][train]") {
  // two 8x8 classes: a bright square top-left vs bottom-right, with noise; regress a one-hot target
  const int64_t n = 32;
  Tensor x = uniform({n, 1, 8, 8}, 0, 0.3);
  Tensor target = zeros({n, 2});
  {
    float* xp = x.data<float>();
    float* tp = target.data<float>();
    for (int64_t i = 0; i < n; ++i) {
      const bool cls = i % 2 == 1;
      for (int h = 0; h < 4; ++h)
        for (int w = 0; w < 4; ++w) xp[i * 64 + (h + (cls ? 4 : 0)) * 8 + w + (cls ? 4 : 0)] += 1.0f;
      tp[i * 2 + (cls ? 1 : 0)] = 1.0f;
    }
  }
  Tensor w1 = uniform({8, 1, 3, 3}, -0.5, 0.5).requires_grad_(), b1 = zeros({8}).requires_grad_();
  Tensor g1 = ones({8}).requires_grad_(), be1 = zeros({8}).requires_grad_();
  Tensor rm = zeros({8}), rv = ones({8});
  Tensor w2 = uniform({16, 8, 3, 3}, -0.2, 0.2).requires_grad_(), b2 = zeros({16}).requires_grad_();
  Tensor wf = uniform({2, 16}, -0.3, 0.3).requires_grad_(), bf = zeros({2}).requires_grad_();
  std::vector<Tensor> params{w1, b1, g1, be1, w2, b2, wf, bf};
  auto forward = [&](const Tensor& in) {
    Tensor h = relu(batch_norm(conv2d(in, w1, b1, Conv2dFuncOptions().set_padding(1)), g1, be1, rm, rv, true));
    h = max_pool2d(h, {2, 2});  // 4x4
    h = relu(conv2d(h, w2, b2, Conv2dFuncOptions().set_padding(1)));
    h = avg_pool2d(h, {2, 2});                            // 2x2
    h = adaptive_avg_pool2d(h, {1, 1}).reshape({n, 16});  // global average
    return linear(h, wf, bf);
  };
  auto loss_of = [&](const Tensor& out) { return mean(mul(sub(out, target), sub(out, target))); };
  double first = 0, last = 0;
  for (int step = 0; step < 60; ++step) {
    for (Tensor& p : params) p.reset_grad();
    Tensor loss = loss_of(forward(x));
    if (step == 0) first = loss.item();
    last = loss.item();
    loss.backward();
    autograd::NoGradGuard ng;
    for (Tensor& p : params) p.add_(p.grad(), -0.5);
  }
  INFO("loss " << first << " -> " << last);
  CHECK(last < 0.25 * first);
  CHECK(vals(rm) != std::vector<double>(8, 0.0));  // running statistics moved
}
