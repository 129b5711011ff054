// The autograd engine: diamond graphs, accumulation, no_grad, retain_graph, freed-graph and
// in-place errors, non-scalar roots, detach, leaf rules, autograd::grad.
#include <catch2/catch.hpp>

#include "ember.h"

using namespace ember;

namespace {
std::vector<double> v(const Tensor& t) { return t.to_vector<double>(); }
}  // namespace

TEST_CASE("diamond graph sums both paths", "[autograd]") {
  Tensor x = tensor({1, 2, 3}, TensorOptions(DType::f64)).requires_grad_();
  Tensor a = mul(x, 2.0);  // da/dx = 2
  Tensor b = mul(x, x);    // db/dx = 2x
  Tensor y = sum(add(a, b));
  y.backward();
  CHECK(v(x.grad()) == std::vector<double>{4, 6, 8});
  CHECK(x.is_leaf());
  CHECK_FALSE(y.is_leaf());
  CHECK(y.grad_fn()->name() == "sumBackward");
}

TEST_CASE("gradients accumulate across backward calls until reset", "[autograd]") {
  Tensor x = tensor({1, -1}, TensorOptions(DType::f64)).requires_grad_();
  sum(mul(x, 3.0)).backward();
  sum(mul(x, 3.0)).backward();
  CHECK(v(x.grad()) == std::vector<double>{6, 6});
  x.reset_grad();  // what zero_grad() does: grads set to none
  CHECK_FALSE(x.grad().defined());
  sum(x).backward();
  CHECK(v(x.grad()) == std::vector<double>{1, 1});
}

TEST_CASE("a leaf used twice gets one accumulator", "[autograd]") {
  Tensor w = ones({2, 2}, DType::f64).requires_grad_();
  Tensor x = tensor({1, 2}, {1, 2}, TensorOptions(DType::f64));
  Tensor y = sum(add(matmul(x, w), matmul(x, w)));
  y.backward();
  CHECK(v(w.grad()) == std::vector<double>{2, 2, 4, 4});
}

TEST_CASE("no_grad records nothing", "[autograd]") {
  Tensor x = ones({3}).requires_grad_();
  Tensor y;
  {
    autograd::NoGradGuard g;
    y = mul(x, 2.0);
  }
  CHECK_FALSE(y.requires_grad());
  CHECK_FALSE(y.grad_fn());
  CHECK_THROWS_WITH(y.backward(ones({3})), Catch::Contains("does not require grad"));
  Tensor z = mul(x, 2.0);
  CHECK(z.requires_grad());
}

TEST_CASE("backward through a freed graph is an error, retain_graph keeps it", "[autograd]") {
  Tensor x = tensor({2}, TensorOptions(DType::f64)).requires_grad_();
  Tensor y = sum(mul(x, x));
  y.backward(Tensor(), true);
  y.backward();
  CHECK(v(x.grad()) == std::vector<double>{8});
  CHECK_THROWS_WITH(y.backward(), Catch::Contains("backward through the graph a second time"));
}

TEST_CASE("a non-scalar root needs a gradient", "[autograd]") {
  Tensor x = ones({2, 2}).requires_grad_();
  Tensor y = mul(x, 2.0);
  CHECK_THROWS_WITH(y.backward(), Catch::Contains("only for one-element outputs"));
  CHECK_THROWS_WITH(y.backward(ones({3})), Catch::Contains("does not match the output shape"));
  y.backward(full({2, 2}, 0.5));
  CHECK(x.grad().to_vector<float>() == std::vector<float>{1, 1, 1, 1});
}

TEST_CASE("modifying a saved tensor in place is caught", "[autograd]") {
  Tensor x = tensor({1, 2}, TensorOptions(DType::f64)).requires_grad_();
  Tensor h = mul(x, 1.0);     // a non-leaf
  Tensor y = sum(mul(h, h));  // saves h
  {
    autograd::NoGradGuard g;
    h.add_(ones({2}, DType::f64));  // bumps h's version
  }
  CHECK_THROWS_WITH(y.backward(), Catch::Contains("modified in place"));
}

TEST_CASE("in-place ops on tensors that require grad are refused in grad mode", "[autograd]") {
  Tensor x = ones({2}).requires_grad_();
  CHECK_THROWS_WITH(x.add_(ones({2})), Catch::Contains("requires grad"));
  CHECK_THROWS_WITH(x.fill_(0), Catch::Contains("requires grad"));
  CHECK_THROWS_WITH(x.add_(1.0), Catch::Contains("requires grad"));
  autograd::NoGradGuard g;
  x.mul_(3.0);  // fine: what optimizers do
  CHECK(x.to_vector<float>() == std::vector<float>{3, 3});
  x.add_(0.5);
  CHECK(x.to_vector<float>() == std::vector<float>{3.5, 3.5});
  Tensor count = zeros({}, DType::i64);  // a step counter (BatchNorm's num_batches_tracked)
  const uint64_t v = count.version();
  count.add_(1.0).add_(1.0);
  CHECK(count.item() == 2);
  CHECK(count.version() == v + 2);
}

TEST_CASE("detach cuts the graph and shares storage", "[autograd]") {
  Tensor x = ones({2}).requires_grad_();
  Tensor y = mul(x, 2.0);
  Tensor d = y.detach();
  CHECK_FALSE(d.requires_grad());
  CHECK(d.storage() == y.storage());
  Tensor z = sum(add(mul(d, x), y));
  z.backward();
  CHECK(x.grad().to_vector<float>() == std::vector<float>{4, 4});  // d contributes as a constant
}

TEST_CASE("only floating leaves can require grad, integer outputs carry none", "[autograd]") {
  CHECK_THROWS_WITH(arange(3).requires_grad_(), Catch::Contains("only floating point tensors"));
  Tensor x = tensor({1, 5, 2}).requires_grad_();
  Tensor i = argmax(x);
  CHECK_FALSE(i.requires_grad());
  Tensor m = gt(x, 1.5);
  CHECK_FALSE(m.requires_grad());
}

TEST_CASE("retain_grad keeps a non-leaf gradient", "[autograd]") {
  Tensor x = tensor({1, 2}, TensorOptions(DType::f64)).requires_grad_();
  Tensor h = mul(x, 3.0);
  h.retain_grad();
  sum(mul(h, h)).backward();
  CHECK(v(h.grad()) == std::vector<double>{6, 12});
  CHECK(v(x.grad()) == std::vector<double>{18, 36});
}

TEST_CASE("autograd::grad returns gradients without touching .grad", "[autograd]") {
  Tensor x = tensor({1, 2}, TensorOptions(DType::f64)).requires_grad_();
  Tensor y = sum(mul(x, x));
  std::vector<Tensor> g = autograd::grad({y}, {x});
  CHECK(v(g[0]) == std::vector<double>{2, 4});
  CHECK_FALSE(x.grad().defined());
}

TEST_CASE("gradient through views: slice, transpose, expand, select", "[autograd]") {
  Tensor x = arange(6, DType::f64).reshape({2, 3}).detach().requires_grad_();
  Tensor y = sum(mul(x.t().slice(0, 1, 3), tensor({1, 2}, {1, 2}, TensorOptions(DType::f64))));
  y.backward();
  CHECK(v(x.grad()) == std::vector<double>{0, 1, 1, 0, 2, 2});
  Tensor b = tensor({1, 2, 3}, TensorOptions(DType::f64)).requires_grad_();
  sum(b.unsqueeze(0).expand({4, 3})).backward();
  CHECK(v(b.grad()) == std::vector<double>{4, 4, 4});
  Tensor c = zeros({3, 2}, DType::f64).requires_grad_();
  sum(mul(c.select(0, 1), 5.0)).backward();
  CHECK(v(c.grad()) == std::vector<double>{0, 0, 5, 5, 0, 0});
}

TEST_CASE("broadcast gradients are summed back to each input's shape", "[autograd]") {
  Tensor a = ones({3, 1}, DType::f64).requires_grad_();
  Tensor b = ones({4}, DType::f64).requires_grad_();
  sum(mul(a, b)).backward();
  CHECK(a.grad().shape() == Shape{3, 1});
  CHECK(v(a.grad()) == std::vector<double>{4, 4, 4});
  CHECK(v(b.grad()) == std::vector<double>{3, 3, 3, 3});
}

TEST_CASE("a linear model learns through the autograd core", "[autograd]") {
  // y = 3 x0 - 2 x1 + 1, plain gradient descent on MSE
  manual_seed(7);
  Tensor X = randn({256, 2});
  Tensor y = add(matmul(X, tensor({3, -2}, {2, 1})), 1.0);
  Tensor w = zeros({2, 1}).requires_grad_();
  Tensor b = zeros({1}).requires_grad_();
  for (int step = 0; step < 200; ++step) {
    Tensor err = sub(add(matmul(X, w), b), y);
    Tensor loss = mean(mul(err, err));
    w.reset_grad();
    b.reset_grad();
    loss.backward();
    autograd::NoGradGuard g;
    w.add_(w.grad(), -0.1);
    b.add_(b.grad(), -0.1);
  }
  std::vector<float> wv = w.to_vector<float>();
  CHECK(wv[0] == Approx(3).margin(1e-3));
  CHECK(wv[1] == Approx(-2).margin(1e-3));
  CHECK(b.item() == Approx(1).margin(1e-3));
}
