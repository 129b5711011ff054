// softmax / log_softmax / cross_entropy / nll_loss / mse_loss / dropout beyond the generic op
// driver: values against PyTorch's definition (numbers computed independently from the formulas of
// PyTorch's LossNLL.cpp), special values, bad input, and dropout's mask contract.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include "core/autograd/node.h"
#include "core/rng.h"
#include "kernels/functional.h"
#include "kernels/ops/random.h"

using namespace ember;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

Tensor f64(const std::vector<double>& v, const Shape& s) { return tensor(v, s, TensorOptions(DType::f64)); }

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// The 3 x 4 logits the reference numbers below were computed for (a plain-Python transcription of
// PyTorch's cross_entropy: log_softmax, nll_loss with total weight, and the label-smoothing term
// reduced separately, then (1 - eps) nll + eps / C smooth). Gradients by central differences.
Tensor ref_logits() { return f64({1.0, 2.0, 0.5, -1.0, 0.3, -0.2, 2.2, 1.1, -1.5, 0.0, 0.7, 3.0}, {3, 4}); }
Tensor ref_weights() { return f64({0.5, 2.0, 1.0, 1.5}, {4}); }

void check_close(const Tensor& got, const std::vector<double>& want, double tol) {
  std::vector<double> g = got.to_vector<double>();
  REQUIRE(g.size() == want.size());
  for (size_t i = 0; i < g.size(); ++i) {
    INFO("element " << i);
    CHECK(g[i] == Approx(want[i]).margin(tol));
  }
}

// cross_entropy(x, target, o): its value, then d loss / d x.
void check_cross_entropy(const Tensor& x, const Tensor& target, const CrossEntropyOptions& o, double want_loss,
                         const std::vector<double>& want_grad) {
  Tensor xl = x.detach().requires_grad_(true);
  Tensor loss = cross_entropy(xl, target, o);
  check_close(loss, {want_loss}, 1e-12);
  loss.backward();
  check_close(xl.grad(), want_grad, 1e-8);
}

// The reference class weights with label smoothing 0.1.
CrossEntropyOptions smoothed(Reduction r) {
  CrossEntropyOptions o;
  o.weight = ref_weights();
  o.label_smoothing = 0.1;
  o.reduction = r;
  return o;
}

}  // namespace

TEST_CASE("cross_entropy matches PyTorch's definition", "[loss]") {
  Tensor x = ref_logits();
  SECTION("plain mean, value and gradient") {
    check_cross_entropy(x, tensor_i64({1, 0, 3}, {3}), {}, 0.999227288101948,
                        {0.0747359394, -0.1301799875, 0.0453296385, 0.0101144095, -0.3016415279, 0.0192220517,
                         0.2118880661, 0.0705314101, 0.0031890653, 0.0142923992, 0.0287813575, -0.046262822});
  }
  SECTION("weights, ignore_index and label smoothing: the mean divides both parts by the target weights") {
    check_cross_entropy(x, tensor_i64({1, -100, 3}, {3}), smoothed(Reduction::mean), 0.4571035591050376,
                        {0.1197428713, -0.1933684078, 0.0676510465, 0.00597449, 0, 0, 0, 0, 0.0004604612, 0.0037839618,
                         0.029245002, -0.033489425});
  }
  SECTION("weights, ignore_index and label smoothing, sum") {
    check_cross_entropy(x, tensor_i64({1, -100, 3}, {3}), smoothed(Reduction::sum), 1.5998624568676316,
                        {0.4191000497, -0.6767894274, 0.236778663, 0.0209107149, 0, 0, 0, 0, 0.0016116141, 0.0132438663,
                         0.102357507, -0.1172129874});
  }
  SECTION("weights and label smoothing, none") {
    check_close(cross_entropy(x, tensor_i64({1, 2, 3}, {3}), smoothed(Reduction::none)),
                {1.1157251538152728, 0.6494119666441875, 0.48413730305235864}, 1e-12);
  }
  SECTION("weighted mean, i32 targets") {
    CrossEntropyOptions o;
    o.weight = ref_weights();
    check_cross_entropy(x, tensor_i64({1, 2, 3}, {3}).to(DType::i32), o, 0.370571405055207,
                        {0.0996479191, -0.1735733166, 0.0604395181, 0.0134858793, 0.0211278703, 0.0128147012,
                         -0.0809635116, 0.0470209401, 0.0031890653, 0.0142923992, 0.0287813575, -0.046262822});
  }
  SECTION("nll_loss of log_softmax equals cross_entropy (weights, ignore_index)") {
    CrossEntropyOptions o;
    o.weight = ref_weights();
    Tensor t = tensor_i64({1, -100, 3}, {3});
    check_close(nll_loss(log_softmax(x, 1), t, o), cross_entropy(x, t, o).to_vector<double>(), 1e-12);
  }
}

TEST_CASE("cross_entropy shapes, reductions and empty batches", "[loss]") {
  Tensor x = uniform({2, 4, 3}, -2, 2, TensorOptions(DType::f64));
  Tensor t = tensor_i64({0, 3, 1, 2, -100, 1}, {2, 3});
  CrossEntropyOptions none;
  none.reduction = Reduction::none;
  Tensor per = cross_entropy(x, t, none);
  CHECK(per.shape() == Shape{2, 3});
  // class dim 1 of [N, C, d]: the same as moving the classes last and flattening
  Tensor flat = cross_entropy(x.permute({0, 2, 1}).reshape({6, 4}), t.reshape({6}), none);
  check_close(per, flat.to_vector<double>(), 1e-12);
  CHECK(per.to_vector<double>()[4] == 0.0);  // ignored
  CHECK(cross_entropy(x, t).item() == Approx(sum(per).item() / 5));
  CrossEntropyOptions s;
  s.reduction = Reduction::sum;
  CHECK(cross_entropy(x, t, s).item() == Approx(sum(per).item()));
  // one sample: [C] logits and a 0-d target
  Tensor one = cross_entropy(f64({1, 2, 3}, {3}), tensor_i64({0}, Shape{}));
  CHECK(one.dim() == 0);
  CHECK(one.item() == Approx(std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0)) - 1.0));
  // empty batch: mean is NaN (0/0) like PyTorch, sum is 0
  Tensor ex = zeros({0, 5}, DType::f64), et = zeros({0}, DType::i64);
  CHECK(std::isnan(cross_entropy(ex, et).item()));
  CHECK(cross_entropy(ex, et, s).item() == 0.0);
  CHECK(cross_entropy(ex, et, none).shape() == Shape{0});
  // every target ignored: NaN mean, zero gradient
  Tensor xl = uniform({3, 4}, -1, 1, TensorOptions(DType::f64)).requires_grad_(true);
  Tensor all_ignored = cross_entropy(xl, tensor_i64({-100, -100, -100}, {3}));
  CHECK(std::isnan(all_ignored.item()));
  all_ignored.backward();
  for (double g : xl.grad().to_vector<double>()) CHECK(g == 0.0);
}

TEST_CASE("cross_entropy_with_grad: backward(grad) gets the forward's dx and any other gradient is exact too",
          "[loss]") {
  CrossEntropyOptions o;
  o.weight = ref_weights();
  o.label_smoothing = 0.1;
  const Tensor t = tensor_i64({1, 3, 0}, {3});
  const Tensor g = full({}, 0.7, TensorOptions(DType::f64));
  auto leaf = [] { return ref_logits().requires_grad_(true); };
  // the reference: cross_entropy, then backward with the same gradient
  Tensor xr = leaf(), lr = cross_entropy(xr, t, o);
  lr.backward(g);
  const std::vector<double> want = xr.grad().to_vector<double>();
  {  // the announced gradient: the forward's dx, the same numbers
    Tensor x = leaf(), loss = cross_entropy_with_grad(x, t, g, o);
    CHECK(loss.to_vector<double>() == lr.to_vector<double>());
    loss.backward(g);
    CHECK(x.grad().to_vector<double>() == want);
  }
  {  // another tensor holding the same value: the backward op, the same numbers
    Tensor x = leaf();
    cross_entropy_with_grad(x, t, g, o).backward(full({}, 0.7, TensorOptions(DType::f64)));
    CHECK(x.grad().to_vector<double>() == want);
  }
  {  // the loss used twice and scaled: 2 g reaches it, not g
    Tensor x = leaf(), loss = cross_entropy_with_grad(x, t, g, o);
    add(loss, loss).backward(g);
    check_close(x.grad(),
                std::vector<double>{2 * want[0], 2 * want[1], 2 * want[2], 2 * want[3], 2 * want[4], 2 * want[5],
                                    2 * want[6], 2 * want[7], 2 * want[8], 2 * want[9], 2 * want[10], 2 * want[11]},
                1e-15);
    // the leaf's gradient is its own buffer: clipping it in place leaves the saved dx alone
    Tensor x2 = leaf(), loss2 = cross_entropy_with_grad(x2, t, g, o);
    loss2.backward(g, true);
    x2.grad().mul_(0.0);
    loss2.backward(g);
    CHECK(x2.grad().to_vector<double>() == want);
  }
  {  // without grad mode, or logits that need no gradient: plain cross_entropy
    autograd::NoGradGuard ng;
    CHECK(cross_entropy_with_grad(ref_logits(), t, g, o).to_vector<double>() == lr.to_vector<double>());
  }
  // the announced gradient has the loss's shape and dtype and is a constant
  Tensor x = leaf();
  CHECK_THROWS_WITH(cross_entropy_with_grad(x, t, full({1}, 1.0, TensorOptions(DType::f64)), o),
                    Catch::Contains("cross_entropy_with_grad: grad (the gradient the loss's backward will get) must "
                                    "be f64[] on cpu for reduction mean, got f64[1]"));
  CHECK_THROWS_WITH(cross_entropy_with_grad(x, t, full({}, 1.0, TensorOptions(DType::f32)), o),
                    Catch::Contains("must be f64[]"));
  CHECK_THROWS_WITH(cross_entropy_with_grad(x, t, full({}, 1.0, TensorOptions(DType::f64)).requires_grad_(true), o),
                    Catch::Contains("requires grad; the announced gradient is a constant of the backward"));
}

TEST_CASE("cross_entropy and nll_loss reject bad input clearly", "[loss][bad_input]") {
  Tensor x = uniform({4, 10}, -1, 1);
  std::string e = error_of([&] { cross_entropy(x, tensor_i64({1, 12, 3, 0}, {4})); });
  CHECK_THAT(e, Catch::Contains("target 12") && Catch::Contains("10 classes"));
  e = error_of([&] { cross_entropy(x, tensor_i64({1, -1, 3, 0}, {4})); });
  CHECK_THAT(e, Catch::Contains("target -1") && Catch::Contains("ignore_index (-100)"));
  e = error_of([&] { nll_loss(x, tensor_i64({10, 0, 0, 0}, {4})); });
  CHECK_THAT(e, Catch::Contains("nll_loss") && Catch::Contains("target 10"));
  e = error_of([&] { cross_entropy(x, uniform({4}, 0, 1)); });
  CHECK_THAT(e, Catch::Contains("i64 or i32"));
  e = error_of([&] { cross_entropy(x, tensor_i64({1, 2, 3}, {3})); });
  CHECK_THAT(e, Catch::Contains("needs target shape [4]"));
  CrossEntropyOptions o;
  o.weight = ones({9});
  e = error_of([&] { cross_entropy(x, tensor_i64({1, 2, 3, 4}, {4}), o); });
  CHECK_THAT(e, Catch::Contains("weight must be [10]"));
  o = {};
  o.label_smoothing = 1.5;
  e = error_of([&] { cross_entropy(x, tensor_i64({1, 2, 3, 4}, {4}), o); });
  CHECK_THAT(e, Catch::Contains("label_smoothing"));
  o.label_smoothing = 0.1;
  e = error_of([&] { nll_loss(x, tensor_i64({1, 2, 3, 4}, {4}), o); });
  CHECK_THAT(e, Catch::Contains("label_smoothing must be 0"));
  e = error_of([&] { cross_entropy(zeros({}), tensor_i64({0}, Shape{})); });
  CHECK_THAT(e, Catch::Contains("class dim"));
  e = error_of([&] { mse_loss(zeros({3}), zeros({4})); });
  CHECK_THAT(e, Catch::Contains("[3]") && Catch::Contains("[4]"));
  e = error_of([&] { softmax(zeros({3, 4}), 2); });
  CHECK_THAT(e, Catch::Contains("dim 2 is out of range"));
  e = error_of([&] { dropout(zeros({3}), 1.5); });
  CHECK_THAT(e, Catch::Contains("p must be in [0, 1]"));
}

TEST_CASE("softmax special values follow PyTorch", "[softmax]") {
  Tensor x = f64({0, -kInf, 1, -kInf, -kInf, -kInf, 1e4, -1e4, 1e4}, {3, 3});
  std::vector<double> y = softmax(x, 1).to_vector<double>();
  CHECK(y[1] == 0.0);  // -inf next to a finite max
  CHECK(y[0] + y[2] == Approx(1.0));
  for (int k = 3; k < 6; ++k) CHECK(std::isnan(y[k]));  // all -inf: NaN
  CHECK(y[6] == Approx(0.5));                           // large magnitudes are stable
  CHECK(y[7] == 0.0);
  std::vector<double> ly = log_softmax(x, 1).to_vector<double>();
  CHECK(ly[1] == -kInf);
  CHECK(ly[6] == Approx(-std::log(2.0)));
  CHECK(std::isnan(ly[4]));
  // scalars and length-1 dims
  CHECK(softmax(scalar_tensor(3.5), 0).item() == 1.0);
  CHECK(log_softmax(scalar_tensor(3.5), -1).item() == 0.0);
  for (double v : softmax(uniform({4, 1}, -5, 5), 1).to_vector<double>()) CHECK(v == 1.0);
  // f32 rows of +-1e4 (exp would overflow without the max shift)
  Tensor big = uniform({8, 100}, -1e4, 1e4);
  for (double v : softmax(big, 1).to_vector<double>()) CHECK(std::isfinite(v));
  // a middle dim of a 4-D tensor sums to one
  Tensor s = sum(softmax(uniform({2, 3, 4, 5}, -3, 3, TensorOptions(DType::f64)), 2), {2});
  for (double v : s.to_vector<double>()) CHECK(v == Approx(1.0));
  // integer inputs are promoted to f32
  CHECK(softmax(arange(4.0), 0).dtype() == DType::f32);
}

TEST_CASE("mse_loss reductions and broadcasting", "[loss]") {
  Tensor a = f64({1, 2, 3, 4}, {2, 2}), b = f64({1, 0, 3, 2}, {2, 2});
  CHECK(mse_loss(a, b).item() == Approx(2.0));
  CHECK(mse_loss(a, b, Reduction::sum).item() == Approx(8.0));
  check_close(mse_loss(a, b, Reduction::none), {0, 4, 0, 4}, 0);
  CHECK(mse_loss(a, f64({1, 2}, {2}), Reduction::sum).item() == Approx(0 + 0 + 4 + 4));
  CHECK(std::isnan(mse_loss(zeros({0}), zeros({0})).item()));
  Tensor x = a.detach().requires_grad_(true), y = b.detach().requires_grad_(true);
  mse_loss(x, y).backward();
  check_close(x.grad(), {0, 1, 0, 1}, 1e-12);
  check_close(y.grad(), {0, -1, 0, -1}, 1e-12);
}

TEST_CASE("dropout: Philox mask, scaling, identity cases, gradient", "[dropout]") {
  const double p = 0.3;
  Tensor x = uniform({10000}, 1, 2);
  SECTION("the mask is philox_uniform(seed, base, i) >= p and kept values are scaled by 1/(1-p)") {
    manual_seed(1234);
    const uint64_t base = default_generator().offset();
    Tensor y = dropout(x, p);
    std::vector<double> xv = x.to_vector<double>(), yv = y.to_vector<double>();
    int64_t kept = 0;
    for (int64_t i = 0; i < x.numel(); ++i) {
      bool keep = static_cast<double>(philox_uniform(1234, base, i)) >= p;
      kept += keep;
      CHECK(yv[i] == (keep ? static_cast<double>(static_cast<float>(xv[i]) * static_cast<float>(1 / (1 - p))) : 0.0));
    }
    CHECK(std::abs(static_cast<double>(kept) / x.numel() - (1 - p)) < 0.02);
    // the generator advanced by the counters used, so the next call draws a new mask
    CHECK(default_generator().offset() == base + uniform_counters(x.numel()));
    CHECK(dropout(x, p).to_vector<double>() != yv);
  }
  SECTION("the same seed gives the same mask") {
    manual_seed(99);
    std::vector<double> a = dropout(x, p).to_vector<double>();
    manual_seed(99);
    std::vector<double> b = dropout(x, p).to_vector<double>();
    CHECK(a == b);
  }
  SECTION("identity when not training or p == 0; zeros for p == 1") {
    CHECK(dropout(x, p, false).is_same(x));
    CHECK(dropout(x, 0.0).is_same(x));
    for (double v : dropout(x, 1.0).to_vector<double>()) CHECK(v == 0.0);
  }
  SECTION("the gradient uses the forward's mask (recomputed from the counters)") {
    Tensor xl = x.detach().requires_grad_(true);
    Tensor y = dropout(xl, p);
    sum(y).backward();
    std::vector<double> g = xl.grad().to_vector<double>(), yv = y.to_vector<double>();
    for (size_t i = 0; i < g.size(); ++i)
      CHECK(g[i] == (yv[i] != 0 ? static_cast<double>(static_cast<float>(1 / (1 - p))) : 0.0));
  }
}
