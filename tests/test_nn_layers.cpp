// nn layers over the convolution, pooling and batch-norm ops: names, shapes, initialisation,
// NCHW and channels-last, BatchNorm's train/eval behaviour and running statistics.
#include <catch2/catch.hpp>

#include <cmath>
#include <sstream>

#include "core/autograd/node.h"
#include "core/rng.h"
#include "kernels/functional.h"
#include "nn/nn.h"
#include "optim/optim.h"

using namespace ember;

namespace {
double var_of(const std::vector<double>& v) {
  double m = 0, s = 0;
  for (double x : v) m += x;
  m /= static_cast<double>(v.size());
  for (double x : v) s += (x - m) * (x - m);
  return s / static_cast<double>(v.size());
}
}  // namespace

TEST_CASE("nn Conv2d: parameters, PyTorch initialisation, groups, options, errors", "[nn][conv]") {
  manual_seed(2);
  nn::Conv2d conv(nn::Conv2dOptions(16, 64, 3).stride(2).padding(1).groups(4));
  CHECK(conv->named_parameters().keys() == std::vector<std::string>{"weight", "bias"});
  CHECK(conv->weight.shape() == Shape{64, 4, 3, 3});
  CHECK(conv->bias.shape() == Shape{64});
  const double bound = 1.0 / std::sqrt(4.0 * 9);  // fan_in = in / groups * kh * kw
  std::vector<double> w = conv->weight.to_vector<double>();
  for (double x : w) REQUIRE(std::fabs(x) <= bound);
  CHECK(var_of(w) == Approx(bound * bound / 3).epsilon(0.08));
  for (double x : conv->bias.to_vector<double>()) CHECK(std::fabs(x) <= bound);
  Tensor x = randn({2, 16, 9, 9});
  Tensor y = conv(x);
  CHECK(y.shape() == Shape{2, 64, 5, 5});
  const auto o = Conv2dFuncOptions().set_stride(2).set_padding(1).set_groups(4);
  CHECK(y.to_vector<float>() == conv2d(x, conv->weight, conv->bias, o).to_vector<float>());
  std::ostringstream os;
  os << *conv;
  CHECK(os.str() == "Conv2d(16, 64, kernel_size=(3, 3), stride=(2, 2), padding=(1, 1), groups=4)");
  nn::Conv2d nb(nn::Conv2dOptions(3, 8, {5, 3}).bias(false).dilation(2));
  CHECK(!nb->bias.defined());
  CHECK(nb(randn({1, 3, 12, 12})).shape() == Shape{1, 8, 4, 8});
  CHECK_THROWS_WITH(nn::Conv2d(nn::Conv2dOptions(6, 8, 3).groups(4)), Catch::Contains("divisible by groups"));
  CHECK_THROWS_WITH(conv(randn({2, 8, 9, 9})), Catch::Contains("has 8 channels but the layer expects 16"));
  CHECK_THROWS_WITH(conv(randn({16, 9, 9})), Catch::Contains("4-D input"));
}

TEST_CASE("nn Conv2d runs channels-last input and keeps the layout, gradients match NCHW", "[nn][conv]") {
  manual_seed(3);
  nn::Conv2d conv(nn::Conv2dOptions(8, 12, 3).padding(1));
  Tensor x = randn({2, 8, 6, 7});
  Tensor xcl = x.permute({0, 2, 3, 1}).contiguous().permute({0, 3, 1, 2});  // NHWC memory
  REQUIRE(xcl.is_channels_last());
  Tensor a = x.detach(), b = xcl.detach();
  a.requires_grad_(true);
  b.requires_grad_(true);
  Tensor ya = conv(a), yb = conv(b);
  CHECK(yb.is_channels_last());
  std::vector<float> va = ya.to_vector<float>(), vb = yb.to_vector<float>();
  for (size_t i = 0; i < va.size(); ++i) REQUIRE(vb[i] == Approx(va[i]).epsilon(1e-5).margin(1e-6));
  sum(mul(ya, ya)).backward();
  Tensor gw = conv->weight.grad().clone();
  conv->zero_grad();
  sum(mul(yb, yb)).backward();
  std::vector<float> g1 = gw.contiguous().to_vector<float>(), g2 = conv->weight.grad().contiguous().to_vector<float>();
  for (size_t i = 0; i < g1.size(); ++i) REQUIRE(g2[i] == Approx(g1[i]).epsilon(1e-4).margin(1e-5));
  std::vector<float> d1 = a.grad().contiguous().to_vector<float>(), d2 = b.grad().contiguous().to_vector<float>();
  for (size_t i = 0; i < d1.size(); ++i) REQUIRE(d2[i] == Approx(d1[i]).epsilon(1e-4).margin(1e-5));
}

TEST_CASE("nn pooling modules: MaxPool2d, AvgPool2d, AdaptiveAvgPool2d", "[nn][conv]") {
  Tensor x = arange(0, 16, 1, DType::f32).reshape({1, 1, 4, 4});
  nn::MaxPool2d mp(2);
  CHECK(mp(x).to_vector<float>() == std::vector<float>{5, 7, 13, 15});
  nn::AvgPool2d ap(2);
  CHECK(ap(x).to_vector<float>() == std::vector<float>{2.5, 4.5, 10.5, 12.5});
  nn::AvgPool2d app(nn::AvgPool2dOptions(3).stride(1).padding(1).count_include_pad(false));
  CHECK(app(x).shape() == Shape{1, 1, 4, 4});
  CHECK(app(x).to_vector<float>()[0] == Approx((0 + 1 + 4 + 5) / 4.0));
  nn::AdaptiveAvgPool2d gap(1);
  CHECK(gap(x).to_vector<float>() == std::vector<float>{7.5});
  nn::AdaptiveAvgPool2d a2(nn::AdaptiveAvgPool2dOptions({2, 1}));
  CHECK(a2(x).to_vector<float>() == std::vector<float>{3.5, 11.5});
  std::ostringstream os;
  os << *mp << " " << *app << " " << *gap;
  CHECK(os.str() ==
        "MaxPool2d(kernel_size=(2, 2), stride=(2, 2), padding=(0, 0)) AvgPool2d(kernel_size=(3, 3), stride=(1, 1), "
        "padding=(1, 1), count_include_pad=false) AdaptiveAvgPool2d(output_size=(1, 1))");
}

TEST_CASE("nn BatchNorm: train normalises with batch stats and updates running stats, eval uses them",
          "[nn][batchnorm]") {
  manual_seed(4);
  nn::BatchNorm2d bn(nn::BatchNormOptions(3).momentum(0.2));
  CHECK(bn->state_dict().keys() ==
        std::vector<std::string>{"weight", "bias", "running_mean", "running_var", "num_batches_tracked"});
  CHECK(bn->named_parameters().keys() == std::vector<std::string>{"weight", "bias"});
  Tensor x = add(mul(randn({4, 3, 5, 5}), 2.0), 1.0);
  Tensor y = bn(x);
  // per channel: mean 0, biased variance 1 (up to eps)
  Tensor m = mean(y, {0, 2, 3}), v = var(y, {0, 2, 3}, 0);
  for (double e : m.to_vector<double>()) CHECK(std::fabs(e) < 1e-5);
  for (double e : v.to_vector<double>()) CHECK(e == Approx(1.0).epsilon(1e-3));
  // running stats: 0.8 * init + 0.2 * batch (unbiased variance)
  std::vector<double> bm = mean(x, {0, 2, 3}).to_vector<double>(), bv = var(x, {0, 2, 3}, 1).to_vector<double>();
  std::vector<double> rm = bn->running_mean.to_vector<double>(), rv = bn->running_var.to_vector<double>();
  for (int c = 0; c < 3; ++c) {
    CHECK(rm[static_cast<size_t>(c)] == Approx(0.2 * bm[static_cast<size_t>(c)]).epsilon(1e-5));
    CHECK(rv[static_cast<size_t>(c)] == Approx(0.8 + 0.2 * bv[static_cast<size_t>(c)]).epsilon(1e-5));
  }
  CHECK(bn->num_batches_tracked.item() == 1);
  // eval: (x - running_mean) / sqrt(running_var + eps), no update
  bn->eval();
  Tensor ye = bn(x);
  CHECK(bn->num_batches_tracked.item() == 1);
  std::vector<float> xv = x.to_vector<float>(), yv = ye.to_vector<float>();
  for (size_t i = 0; i < xv.size(); ++i) {
    size_t c = (i / 25) % 3;
    REQUIRE(yv[i] == Approx((xv[i] - rm[c]) / std::sqrt(rv[c] + 1e-5)).epsilon(1e-5).margin(1e-6));
  }
  CHECK(bn->running_mean.to_vector<double>() == rm);
  // gradients reach weight and bias
  bn->train();
  sum(mul(bn(x), tensor({1.0, 2.0, 3.0}).reshape({1, 3, 1, 1}))).backward();
  CHECK(bn->weight.grad().defined());
  CHECK(bn->bias.grad().to_vector<double>()[2] == Approx(3.0 * 100));
}

TEST_CASE("nn BatchNorm: cumulative average (momentum none), no running stats, no affine, BatchNorm1d",
          "[nn][batchnorm]") {
  manual_seed(5);
  nn::BatchNorm1d cum(nn::BatchNormOptions(2).momentum(std::nullopt));
  Tensor a = randn({8, 2}), b = randn({8, 2});
  cum(a);
  cum(b);
  std::vector<double> want_mean = mean(cat({a, b}, 0), {0}).to_vector<double>();
  std::vector<double> got = cum->running_mean.to_vector<double>();
  for (int c = 0; c < 2; ++c)
    CHECK(got[static_cast<size_t>(c)] == Approx(want_mean[static_cast<size_t>(c)]).epsilon(1e-5));
  CHECK(cum->num_batches_tracked.item() == 2);

  nn::BatchNorm1d plain(nn::BatchNormOptions(2).track_running_stats(false).affine(false));
  CHECK(plain->state_dict().empty());
  plain->eval();  // still normalises with the batch statistics
  Tensor y = plain(a);
  for (double e : mean(y, {0}).to_vector<double>()) CHECK(std::fabs(e) < 1e-5);
  nn::BatchNorm1d seq(nn::BatchNormOptions(4));
  CHECK(seq(randn({3, 4, 7})).shape() == Shape{3, 4, 7});
  CHECK_THROWS_WITH(seq(randn({3, 4, 7, 2})), Catch::Contains("2-D or 3-D input"));
  CHECK_THROWS_WITH(seq(randn({3, 5})), Catch::Contains("expects 4"));
  std::ostringstream os;
  os << *cum;
  CHECK(os.str() == "BatchNorm1d(2, eps=1e-05, momentum=None, affine=true, track_running_stats=true)");
}

TEST_CASE("nn a small CNN trains, and its state_dict round-trips through safetensors names", "[nn][conv]") {
  manual_seed(6);
  nn::Sequential net(nn::Conv2d(nn::Conv2dOptions(1, 8, 3).padding(1)), nn::BatchNorm2d(8), nn::ReLU(),
                     nn::MaxPool2d(2), nn::Conv2d(nn::Conv2dOptions(8, 16, 3).padding(1)), nn::ReLU(),
                     nn::AdaptiveAvgPool2d(1), nn::Flatten(), nn::Linear(16, 3));
  CHECK(net->state_dict().keys() == std::vector<std::string>{"0.weight", "0.bias", "1.weight", "1.bias",
                                                             "1.running_mean", "1.running_var", "1.num_batches_tracked",
                                                             "4.weight", "4.bias", "8.weight", "8.bias"});
  Tensor x = randn({16, 1, 8, 8});
  Tensor y = argmax(sum(x.reshape({16, 64}).slice(1, 0, 63).reshape({16, 3, 21}), {2}), 1);
  optim::SGD opt(net->parameters(), optim::SGDOptions(0.1).momentum(0.9));
  nn::CrossEntropyLoss ce;
  double first = 0, last = 0;
  for (int i = 0; i < 30; ++i) {
    Tensor loss = ce(net(x), y);
    if (i == 0) first = loss.item();
    last = loss.item();
    opt.zero_grad();
    loss.backward();
    opt.step();
  }
  CHECK(last < 0.5 * first);
}
