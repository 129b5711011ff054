// Optimizers against the published update rules, computed independently here in f64; parameter
// groups, skipped parameters, zero_grad, loss-scaling hooks, state_dict round trips,
// clip_grad_norm_ and gradient accumulation.
#include <catch2/catch.hpp>

#include <cmath>
#include <map>

#include "core/autograd/node.h"
#include "core/rng.h"
#include "kernels/functional.h"
#include "kernels/registry.h"
#include "nn/linear.h"
#include "optim/optim.h"
#include "tests/clip_step_check.h"

using namespace ember;

namespace {

// Deterministic values in [lo, hi).
std::vector<double> values(size_t n, uint64_t seed, double lo = -1, double hi = 1) {
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = lo + (hi - lo) * philox_uniform(seed, 0, static_cast<int64_t>(i));
  return v;
}

Tensor param(const std::vector<double>& v, DType dt) {
  Tensor t = tensor(v, {static_cast<int64_t>(v.size())}, TensorOptions(dt));
  t.requires_grad_(true);
  return t;
}

void set_grad(Tensor& p, const std::vector<double>& g) { p.set_grad(tensor(g, p.shape(), TensorOptions(p.dtype()))); }

// ---- reference implementations (PyTorch's documented algorithms, plain doubles) ----

struct RefSGD {
  double lr, momentum = 0, dampening = 0, wd = 0;
  bool nesterov = false, maximize = false;
  std::vector<double> buf;
  int t = 0;
  void step(std::vector<double>& p, const std::vector<double>& grad) {
    ++t;
    if (buf.empty()) buf.assign(p.size(), 0);
    for (size_t i = 0; i < p.size(); ++i) {
      double g = maximize ? -grad[i] : grad[i];
      if (wd != 0) g += wd * p[i];
      if (momentum != 0) {
        buf[i] = t > 1 ? momentum * buf[i] + (1 - dampening) * g : g;
        g = nesterov ? g + momentum * buf[i] : buf[i];
      }
      p[i] -= lr * g;
    }
  }
};

struct RefAdam {
  double lr = 1e-3, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0;
  bool amsgrad = false, maximize = false, decoupled = false;
  std::vector<double> m, v, vmax;
  int t = 0;
  void step(std::vector<double>& p, const std::vector<double>& grad) {
    ++t;
    if (m.empty()) m.assign(p.size(), 0), v.assign(p.size(), 0), vmax.assign(p.size(), 0);
    for (size_t i = 0; i < p.size(); ++i) {
      double g = maximize ? -grad[i] : grad[i];
      if (wd != 0) {
        if (decoupled) p[i] *= 1 - lr * wd;
        else g += wd * p[i];
      }
      m[i] = b1 * m[i] + (1 - b1) * g;
      v[i] = b2 * v[i] + (1 - b2) * g * g;
      double mhat = m[i] / (1 - std::pow(b1, t));
      double vv = v[i];
      if (amsgrad) {
        vmax[i] = std::max(vmax[i], v[i]);
        vv = vmax[i];
      }
      double vhat = vv / (1 - std::pow(b2, t));
      p[i] -= lr * mhat / (std::sqrt(vhat) + eps);
    }
  }
};

void check_close(const Tensor& got, const std::vector<double>& want, double rtol, double atol,
                 const std::string& what) {
  std::vector<double> g = got.to_vector<double>();
  REQUIRE(g.size() == want.size());
  for (size_t i = 0; i < g.size(); ++i) {
    INFO(what << " element " << i << ": got " << g[i] << " want " << want[i]);
    CHECK(std::fabs(g[i] - want[i]) <= atol + rtol * std::fabs(want[i]));
  }
}

constexpr int kSteps = 6;
constexpr size_t kN = 37;

template <class Opt, class Options, class Ref>
void run_against_reference(const Options& options, Ref ref, DType dt, double rtol, double atol,
                           const std::string& what) {
  std::vector<double> p_ref = values(kN, 11);
  Tensor p = param(p_ref, dt);
  Opt opt(std::vector<Tensor>{p}, options);
  for (int s = 0; s < kSteps; ++s) {
    std::vector<double> g = values(kN, 100 + static_cast<uint64_t>(s));
    // the gradient of the f64 model; round it like the parameter dtype does
    Tensor gt = tensor(g, {static_cast<int64_t>(kN)}, TensorOptions(dt));
    p.set_grad(gt);
    std::vector<double> g_used = gt.to_vector<double>();
    opt.step();
    ref.step(p_ref, g_used);
    check_close(p, p_ref, rtol, atol, what + " step " + std::to_string(s + 1));
  }
}

}  // namespace

TEST_CASE("optim SGD matches the published update rule (f64 exact, f32 close)", "[optim]") {
  struct Case {
    const char* name;
    optim::SGDOptions o;
    RefSGD r;
  };
  std::vector<Case> cases;
  cases.push_back({"plain", optim::SGDOptions(0.1), RefSGD{0.1}});
  cases.push_back({"momentum", optim::SGDOptions(0.05).momentum(0.9), RefSGD{0.05, 0.9}});
  cases.push_back({"momentum+dampening+wd", optim::SGDOptions(0.05).momentum(0.9).dampening(0.3).weight_decay(0.01),
                   RefSGD{0.05, 0.9, 0.3, 0.01}});
  cases.push_back({"nesterov+wd", optim::SGDOptions(0.02).momentum(0.8).nesterov(true).weight_decay(1e-3),
                   RefSGD{0.02, 0.8, 0, 1e-3, true}});
  cases.push_back(
      {"maximize+wd", optim::SGDOptions(0.1).weight_decay(0.1).maximize(true), RefSGD{0.1, 0, 0, 0.1, false, true}});
  for (const Case& c : cases) {
    run_against_reference<optim::SGD>(c.o, c.r, DType::f64, 1e-13, 1e-15, std::string("SGD ") + c.name + " f64");
    run_against_reference<optim::SGD>(c.o, c.r, DType::f32, 2e-6, 1e-6, std::string("SGD ") + c.name + " f32");
  }
}

TEST_CASE("optim Adam and AdamW match the published update rules", "[optim]") {
  auto adam = [](double lr) {
    RefAdam r;
    r.lr = lr;
    return r;
  };
  {
    RefAdam r = adam(1e-2);
    run_against_reference<optim::Adam>(optim::AdamOptions(1e-2), r, DType::f64, 1e-12, 1e-15, "Adam f64");
    run_against_reference<optim::Adam>(optim::AdamOptions(1e-2), r, DType::f32, 1e-5, 1e-6, "Adam f32");
  }
  {
    RefAdam r = adam(1e-2);
    r.wd = 0.1;
    r.b1 = 0.8;
    r.b2 = 0.99;
    r.eps = 1e-6;
    auto o = optim::AdamOptions(1e-2).weight_decay(0.1).betas({0.8, 0.99}).eps(1e-6);
    run_against_reference<optim::Adam>(o, r, DType::f64, 1e-12, 1e-15, "Adam L2 weight decay f64");
  }
  {
    RefAdam r = adam(3e-3);
    r.amsgrad = true;
    r.maximize = true;
    run_against_reference<optim::Adam>(optim::AdamOptions(3e-3).amsgrad(true).maximize(true), r, DType::f64, 1e-12,
                                       1e-15, "Adam amsgrad maximize f64");
  }
  {
    RefAdam r = adam(1e-2);
    r.decoupled = true;
    r.wd = 1e-2;  // AdamW's default
    run_against_reference<optim::AdamW>(optim::AdamWOptions(1e-2), r, DType::f64, 1e-12, 1e-15, "AdamW f64");
    run_against_reference<optim::AdamW>(optim::AdamWOptions(1e-2), r, DType::f32, 1e-5, 1e-6, "AdamW f32");
  }
  {
    RefAdam r = adam(1e-2);
    r.decoupled = true;
    r.wd = 0.05;
    r.amsgrad = true;
    run_against_reference<optim::AdamW>(optim::AdamWOptions(1e-2).weight_decay(0.05).amsgrad(true), r, DType::f64,
                                        1e-12, 1e-15, "AdamW amsgrad f64");
  }
}

TEST_CASE("optim AdamW differs from Adam with L2 exactly by the decoupled decay", "[optim]") {
  // One step from zero state: Adam's first step is lr * sign-ish(g + wd p); AdamW's is p(1 - lr wd) - lr * g/|g|.
  Tensor p1 = param({1.0, -2.0}, DType::f64), p2 = param({1.0, -2.0}, DType::f64);
  optim::Adam a({p1}, optim::AdamOptions(0.1).weight_decay(0.5).eps(0));
  optim::AdamW w({p2}, optim::AdamWOptions(0.1).weight_decay(0.5).eps(0));
  set_grad(p1, {0.25, 0.25});
  set_grad(p2, {0.25, 0.25});
  a.step();
  w.step();
  // Adam: g' = g + 0.5 p = (0.75, -0.75) -> step -lr * sign = (-0.1, +0.1)
  check_close(p1, {0.9, -1.9}, 1e-14, 0, "Adam L2");
  // AdamW: p (1 - 0.05) - 0.1 * sign(g)
  check_close(p2, {0.95 - 0.1, -1.9 - 0.1}, 1e-14, 0, "AdamW decoupled");
}

TEST_CASE("optim parameter groups take their own lr and weight decay, params without grad are skipped", "[optim]") {
  Tensor a = param({1, 2, 3}, DType::f64), b = param({4, 5}, DType::f64), c = param({7}, DType::f64);
  std::vector<optim::ParamGroup> groups;
  groups.emplace_back(std::vector<Tensor>{a, c});  // defaults
  groups.emplace_back(std::vector<Tensor>{b},
                      std::make_unique<optim::SGDOptions>(optim::SGDOptions(0.5).weight_decay(0.1)));
  optim::SGD opt(groups, optim::SGDOptions(0.1));
  set_grad(a, {1, 1, 1});
  set_grad(b, {1, 1});
  // c has no grad
  opt.step();
  check_close(a, {0.9, 1.9, 2.9}, 1e-15, 0, "group 0 lr 0.1");
  check_close(b, {4 - 0.5 * (1 + 0.4), 5 - 0.5 * (1 + 0.5)}, 1e-15, 0, "group 1 lr 0.5 wd 0.1");
  check_close(c, {7}, 0, 0, "no grad: untouched");
  CHECK(opt.param_groups()[1].options().get_lr() == 0.5);
  CHECK(opt.size() == 3);

  opt.zero_grad();
  CHECK(!a.grad().defined());
  CHECK(!b.grad().defined());
  set_grad(a, {1, 1, 1});
  opt.zero_grad(/*set_to_none=*/false);
  REQUIRE(a.grad().defined());
  CHECK(a.grad().to_vector<double>() == std::vector<double>{0, 0, 0});

  CHECK_THROWS_WITH(optim::SGD(std::vector<optim::ParamGroup>{optim::ParamGroup({a}), optim::ParamGroup({a})},
                               optim::SGDOptions(0.1)),
                    Catch::Contains("more than one parameter group"));
  CHECK_THROWS_WITH(optim::SGD({a}, optim::SGDOptions(-1)), Catch::Contains("invalid learning rate"));
  CHECK_THROWS_WITH(optim::SGD({a}, optim::SGDOptions(0.1).nesterov(true)), Catch::Contains("Nesterov"));
  CHECK_THROWS_WITH(optim::Adam({a}, optim::AdamOptions(0.1).betas({1.0, 0.9})), Catch::Contains("beta1"));
}

TEST_CASE("zero_many_ clears dense tensors in one call, strided views on their own, and names what it refuses",
          "[optim]") {
  Tensor a = full({3, 4}, 2.0, DType::f64), b = full({5}, -1.0, DType::i64), big = full({6, 6}, 5.0, DType::f32);
  Tensor strided = big.slice(1, 0, 6, 2);  // every other column: not dense
  zero_many_({a, b, strided, a});          // a twice: cleared twice, harmlessly
  CHECK(a.to_vector<double>() == std::vector<double>(12, 0.0));
  CHECK(b.to_vector<double>() == std::vector<double>(5, 0.0));
  CHECK(strided.to_vector<double>() == std::vector<double>(18, 0.0));
  CHECK(sum(big).item() == 5.0 * 18);  // the other columns kept
  zero_many_({});                      // nothing to do
  Tensor view = big.slice(1, 0, 6, 2);
  CHECK_THROWS_WITH(call_into(OpId::zero_many, {a, view}, {a, view}),
                    Catch::Contains("zero_many: tensor 1 is") && Catch::Contains("must be dense"));
  CHECK_THROWS_WITH(call_into(OpId::zero_many, {a, Tensor()}, {a, Tensor()}),
                    Catch::Contains("zero_many: tensor 1 is undefined"));
}

TEST_CASE("optim momentum buffers start at the first step the param has a grad", "[optim]") {
  Tensor a = param({1, 1}, DType::f64), b = param({1, 1}, DType::f64);
  optim::SGD opt({a, b}, optim::SGDOptions(0.1).momentum(0.9).dampening(0.5));
  set_grad(a, {1, 1});
  opt.step();  // a: buf = g = 1 (first step ignores dampening)
  CHECK(opt.state(a).at("step").item() == 1);
  CHECK(opt.state(b).empty());
  set_grad(b, {1, 1});
  opt.step();  // a: buf = 0.9 + 0.5 = 1.4; b: first step buf = 1
  check_close(a, {1 - 0.1 - 0.14, 1 - 0.1 - 0.14}, 1e-15, 0, "a");
  check_close(b, {0.9, 0.9}, 1e-15, 0, "b");
  check_close(opt.state(b).at("momentum_buffer"), {1, 1}, 0, 0, "b buffer");
}

TEST_CASE("optim loss-scaling hooks: found_inf skips the step, inv_scale unscales the grads", "[optim]") {
  for (int which = 0; which < 2; ++which) {
    Tensor p = param(values(kN, 3), DType::f32), q = param(values(kN, 3), DType::f32);
    std::unique_ptr<optim::Optimizer> o1, o2;
    if (which == 0) {
      o1 = std::make_unique<optim::SGD>(std::vector<Tensor>{p}, optim::SGDOptions(0.1).momentum(0.9));
      o2 = std::make_unique<optim::SGD>(std::vector<Tensor>{q}, optim::SGDOptions(0.1).momentum(0.9));
    } else {
      o1 = std::make_unique<optim::AdamW>(std::vector<Tensor>{p}, optim::AdamWOptions(0.01));
      o2 = std::make_unique<optim::AdamW>(std::vector<Tensor>{q}, optim::AdamWOptions(0.01));
    }
    INFO((which == 0 ? "SGD" : "AdamW"));
    std::vector<double> g = values(kN, 9);
    std::vector<double> g_scaled;
    for (double x : g) g_scaled.push_back(x * 1024);
    // skipped step: nothing changes, state and step counters included
    set_grad(p, g_scaled);
    std::vector<double> before = p.to_vector<double>();
    optim::GradScaling skip{full({1}, 1.0), full({1}, 1.0 / 1024)};
    o1->step(skip);
    CHECK(p.to_vector<double>() == before);
    CHECK(o1->state(p).at("step").item() == 0);
    // unscaled step == plain step on the true gradient
    optim::GradScaling ok{full({1}, 0.0), full({1}, 1.0 / 1024)};
    o1->step(ok);
    set_grad(q, g);
    o2->step();
    check_close(p, q.to_vector<double>(), 1e-6, 1e-7, "scaled vs unscaled");
    CHECK(o1->state(p).at("step").item() == 1);
  }
}

TEST_CASE("optim state_dict round trip continues bit-identically", "[optim]") {
  for (int which = 0; which < 3; ++which) {
    INFO("optimizer " << which);
    auto make = [&](Tensor& p) -> std::unique_ptr<optim::Optimizer> {
      if (which == 0)
        return std::make_unique<optim::SGD>(std::vector<Tensor>{p},
                                            optim::SGDOptions(0.1).momentum(0.9).nesterov(true));
      if (which == 1)
        return std::make_unique<optim::Adam>(std::vector<Tensor>{p}, optim::AdamOptions(0.01).amsgrad(true));
      return std::make_unique<optim::AdamW>(std::vector<Tensor>{p}, optim::AdamWOptions(0.02));
    };
    Tensor p = param(values(kN, 5), DType::f32);
    auto opt = make(p);
    for (int s = 0; s < 3; ++s) {
      set_grad(p, values(kN, 50 + static_cast<uint64_t>(s)));
      opt->step();
    }
    StateDict live = opt->state_dict();  // references to the live state (as PyTorch's): copy it
    StateDict sd;
    sd.metadata = live.metadata;
    for (const auto& [k, t] : live.tensors) sd.tensors.insert(k, t.clone());
    CHECK(sd.metadata.at("optimizer") == opt->name());
    CHECK(sd.tensors.contains("state.0.step"));
    std::vector<double> saved_p = p.to_vector<double>();
    // continue the original
    for (int s = 3; s < 6; ++s) {
      set_grad(p, values(kN, 50 + static_cast<uint64_t>(s)));
      opt->step();
    }
    // a fresh optimizer on a copy of the saved parameters, loaded from the state
    Tensor q = param(saved_p, DType::f32);
    auto opt2 = make(q);
    opt2->load_state_dict(sd);
    for (int s = 3; s < 6; ++s) {
      set_grad(q, values(kN, 50 + static_cast<uint64_t>(s)));
      opt2->step();
    }
    CHECK(q.to_vector<float>() == p.to_vector<float>());
  }
  // wrong optimizer, wrong shapes
  Tensor p = param({1, 2}, DType::f32), r = param({1, 2, 3}, DType::f32);
  optim::Adam a({p});
  set_grad(p, {1, 1});
  a.step();
  optim::SGD s({p}, optim::SGDOptions(0.1));
  CHECK_THROWS_WITH(s.load_state_dict(a.state_dict()), Catch::Contains("from a Adam optimizer"));
  optim::Adam a2({r});
  CHECK_THROWS_WITH(a2.load_state_dict(a.state_dict()), Catch::Contains("is [2] but the parameter is [3]"));
}

TEST_CASE("optim lr changes between steps reach the kernel (hyperparameter tensor)", "[optim]") {
  Tensor p = param({1.0}, DType::f64);
  optim::SGD opt({p}, optim::SGDOptions(0.1));
  set_grad(p, {1.0});
  opt.step();
  opt.param_groups()[0].options().set_lr(0.25);
  opt.step();
  check_close(p, {1.0 - 0.1 - 0.25}, 1e-15, 0, "lr 0.1 then 0.25");
  Tensor h = opt.hyperparameter_tensor(0, kCPU);
  CHECK(h.to_vector<double>() == std::vector<double>{0.25, 0, 0, 0});
}

TEST_CASE("optim clip_grad_norm_ returns the total norm and scales like PyTorch", "[optim]") {
  Tensor a = param({3, 4}, DType::f32), b = param({0, 12}, DType::f32), c = param({5}, DType::f32);
  set_grad(a, {3, 4});
  set_grad(b, {0, 12});  // total L2 = 13
  Tensor n = optim::clip_grad_norm_({a, b, c}, 1.0);
  CHECK(n.dim() == 0);
  CHECK(n.item() == Approx(13.0));
  double coef = 1.0 / (13.0 + 1e-6);
  check_close(a.grad(), {3 * coef, 4 * coef}, 1e-6, 0, "a grad");
  check_close(b.grad(), {0, 12 * coef}, 1e-6, 0, "b grad");
  // under the limit: unchanged
  set_grad(a, {0.3, 0.4});
  Tensor n2 = optim::clip_grad_norm_({a}, 1.0);
  CHECK(n2.item() == Approx(0.5));
  check_close(a.grad(), {0.3, 0.4}, 1e-7, 0, "unclipped");
  // inf and 1 norms
  set_grad(a, {3, -4});
  set_grad(b, {-7, 1});
  CHECK(optim::clip_grad_norm_({a, b}, 100.0, INFINITY).item() == 7.0);
  CHECK(optim::clip_grad_norm_({a, b}, 100.0, 1.0).item() == 15.0);
  // mixed dtypes: one norm over both buckets
  Tensor d = param({6, 8}, DType::f64);
  set_grad(a, {0, 0});
  set_grad(d, {6, 8});
  CHECK(optim::clip_grad_norm_({a, d}, 100.0).item() == Approx(10.0));
  // no grads at all
  Tensor e = param({1}, DType::f32);
  CHECK(optim::clip_grad_norm_({e}, 1.0).item() == 0.0);
  CHECK_THROWS_WITH(total_norm({a.grad()}, -1.0), Catch::Contains("norm_type must be >= 0"));
}

TEST_CASE("optim clipping folded into the step equals clip_grad_norm_ then step bit for bit", "[optim]") {
  for (int which : {0, 1, 2})
    for (DType dt : {DType::f32, DType::f64, DType::bf16}) test::check_clip_into_step(kCPU, dt, which);
  // the op's own checks
  Tensor p = param({1, 2}, DType::f32);
  set_grad(p, {3, 4});
  optim::SGD opt({p}, optim::SGDOptions(0.1));
  optim::GradScaling bad;
  bad.clip_norm = full({2}, 1.0);
  CHECK_THROWS_WITH(opt.step(bad), Catch::Contains("clip_norm (the total norm clipping scales by) must be one f32"));
  bad.clip_norm = full({}, 5.0);
  bad.max_norm = std::nan("");
  CHECK_THROWS_WITH(opt.step(bad), Catch::Contains("max_norm is NaN"));
  CHECK_THROWS_WITH(optim::clip_grad_norm_into_step({p}, std::nan(""), bad), Catch::Contains("max_norm is NaN"));
  // no gradients: nothing to clip, and a stale norm is not left behind
  Tensor q = param({1}, DType::f32);
  CHECK(optim::clip_grad_norm_into_step({q}, 1.0, bad).item() == 0.0);
  CHECK_FALSE(bad.clip_norm.defined());
}

TEST_CASE("optim gradient accumulation over N micro-batches equals the large-batch gradient", "[optim]") {
  manual_seed(7);
  nn::Linear big(nn::LinearOptions(6, 3)), small(nn::LinearOptions(6, 3));
  small->load_state_dict(big->state_dict());
  Tensor x = randn({8, 6}), y = randn({8, 3});
  auto mse = [](const Tensor& a, const Tensor& b) { return mean(mul(sub(a, b), sub(a, b))); };
  mse(big(x), y).backward();
  optim::GradAccumulator acc(4);
  int steps = 0;
  for (int i = 0; i < 4; ++i) {
    Tensor xi = x.slice(0, 2 * i, 2 * i + 2), yi = y.slice(0, 2 * i, 2 * i + 2);
    acc.scale(mse(small(xi), yi)).backward();
    if (acc.ready()) ++steps;
  }
  CHECK(steps == 1);
  CHECK(acc.pending() == 0);
  check_close(small->weight.grad(), big->weight.grad().to_vector<double>(), 1e-5, 1e-7, "weight grad");
  check_close(small->bias.grad(), big->bias.grad().to_vector<double>(), 1e-5, 1e-7, "bias grad");
  CHECK_THROWS_WITH(optim::GradAccumulator(0), Catch::Contains(">= 1"));
}
