// Every LR schedule over a full cycle against its closed-form formula (computed here), plus the
// momentum / beta1 cycling of OneCycleLR and CyclicLR, chaining, and state_dict round trips; and
// ScheduleAhead's staged rows against steps that upload their own values.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <functional>
#include <numbers>

#include "kernels/functional.h"
#include "optim/optim.h"

using namespace ember;
using std::numbers::pi;

namespace {

Tensor a_param() {
  Tensor t = zeros({3});
  t.requires_grad_(true);
  return t;
}

double lr_of(const optim::Optimizer& o, size_t g = 0) { return o.param_groups()[g].options().get_lr(); }
double momentum_of(const optim::Optimizer& o, size_t g = 0) { return o.param_groups()[g].options().get_momentum(); }

void check_seq(optim::Optimizer& opt, optim::LRScheduler& s, int64_t epochs, const std::function<double(int64_t)>& want,
               const std::string& what, size_t group = 0) {
  for (int64_t e = 0; e <= epochs; ++e) {
    if (e > 0) s.step();
    INFO(what << " epoch " << e << ": got " << lr_of(opt, group) << " want " << want(e));
    CHECK(s.last_epoch() == e);
    CHECK(lr_of(opt, group) == Approx(want(e)).epsilon(1e-12).margin(1e-15));
    CHECK(s.get_last_lr()[group] == lr_of(opt, group));
  }
}

}  // namespace

TEST_CASE("lr StepLR, MultiStepLR, ExponentialLR follow their closed forms", "[lr]") {
  {
    Tensor p = a_param();
    optim::SGD opt({p}, optim::SGDOptions(0.1));
    optim::StepLR s(opt, 3, 0.5);
    check_seq(
        opt, s, 12, [](int64_t e) { return 0.1 * std::pow(0.5, e / 3); }, "StepLR");
  }
  {
    Tensor p = a_param();
    optim::SGD opt({p}, optim::SGDOptions(0.1));
    optim::MultiStepLR s(opt, {8, 2, 5, 5}, 0.1);  // unsorted, 5 twice: decays twice there
    check_seq(
        opt, s, 10, [](int64_t e) { return 0.1 * std::pow(0.1, (e >= 2) + 2 * (e >= 5) + (e >= 8)); }, "MultiStepLR");
  }
  {
    Tensor p = a_param();
    optim::SGD opt({p}, optim::SGDOptions(0.2));
    optim::ExponentialLR s(opt, 0.9);
    check_seq(
        opt, s, 20, [](int64_t e) { return 0.2 * std::pow(0.9, static_cast<double>(e)); }, "ExponentialLR");
  }
}

TEST_CASE("lr CosineAnnealingLR follows the cosine over a full period and beyond", "[lr]") {
  Tensor p = a_param();
  optim::SGD opt({p}, optim::SGDOptions(0.1));
  const int64_t T = 10;
  const double eta_min = 0.001;
  optim::CosineAnnealingLR s(opt, T, eta_min);
  // PyTorch's recursive form equals the closed form (up to rounding) for 2 T epochs: down, then up.
  check_seq(
      opt, s, 2 * T,
      [&](int64_t e) { return eta_min + (0.1 - eta_min) * (1 + std::cos(pi * static_cast<double>(e) / T)) / 2; },
      "CosineAnnealingLR");
}

TEST_CASE("lr LinearLR warmup, then chained into cosine with SequentialLR", "[lr]") {
  {
    Tensor p = a_param();
    optim::SGD opt({p}, optim::SGDOptions(0.5));
    optim::LinearLR s(opt, 0.25, 1.0, 4);
    check_seq(
        opt, s, 8, [](int64_t e) { return 0.5 * (0.25 + 0.75 * static_cast<double>(std::min<int64_t>(e, 4)) / 4); },
        "LinearLR");
  }
  {
    Tensor p = a_param();
    optim::SGD opt({p}, optim::SGDOptions(1.0));
    const int64_t warm = 5, T = 20;
    auto w = std::make_shared<optim::LinearLR>(opt, 0.1, 1.0, warm);
    auto c = std::make_shared<optim::CosineAnnealingLR>(opt, T);
    optim::SequentialLR s(opt, {w, c}, {warm});
    check_seq(
        opt, s, warm + T,
        [&](int64_t e) {
          if (e < warm) return 1.0 * (0.1 + 0.9 * static_cast<double>(e) / warm);
          return (1 + std::cos(pi * static_cast<double>(e - warm) / T)) / 2;
        },
        "warmup + cosine");
  }
  {
    // ChainedScheduler: the recursive factors multiply.
    Tensor p = a_param();
    optim::SGD opt({p}, optim::SGDOptions(1.0));
    auto w = std::make_shared<optim::LinearLR>(opt, 0.5, 1.0, 4);
    auto x = std::make_shared<optim::ExponentialLR>(opt, 0.9);
    optim::ChainedScheduler s({w, x});
    for (int64_t e = 0; e <= 10; ++e) {
      if (e > 0) s.step();
      double want =
          std::pow(0.9, static_cast<double>(e)) * (0.5 + 0.5 * static_cast<double>(std::min<int64_t>(e, 4)) / 4);
      INFO("chained epoch " << e);
      CHECK(lr_of(opt) == Approx(want).epsilon(1e-12));
    }
  }
}

TEST_CASE("lr OneCycleLR: cos and linear annealing, pct_start, div factors, momentum and beta1 cycling", "[lr]") {
  for (auto strategy : {optim::AnnealStrategy::cos, optim::AnnealStrategy::linear}) {
    for (bool adam : {false, true}) {
      Tensor p = a_param();
      std::unique_ptr<optim::Optimizer> opt;
      if (adam) opt = std::make_unique<optim::AdamW>(std::vector<Tensor>{p});
      else opt = std::make_unique<optim::SGD>(std::vector<Tensor>{p}, optim::SGDOptions(0.1).momentum(0.9));
      const int64_t total = 100;
      const double max_lr = 0.4, pct = 0.25, div = 20, final_div = 1e3, base_m = 0.8, max_m = 0.95;
      optim::OneCycleLR s(*opt, optim::OneCycleLROptions(max_lr, total)
                                    .pct_start(pct)
                                    .anneal_strategy(strategy)
                                    .div_factor(div)
                                    .final_div_factor(final_div)
                                    .base_momentum(base_m)
                                    .max_momentum(max_m));
      auto anneal = [&](double a, double b, double t) {
        return strategy == optim::AnnealStrategy::cos ? b + (a - b) / 2 * (1 + std::cos(pi * t)) : a + (b - a) * t;
      };
      const double initial = max_lr / div, min_lr = initial / final_div, up_end = pct * total - 1;
      for (int64_t e = 0; e < total; ++e) {
        if (e > 0) s.step();
        double x = static_cast<double>(e), lr, m;
        if (x <= up_end) {
          lr = anneal(initial, max_lr, x / up_end);
          m = anneal(max_m, base_m, x / up_end);
        } else {
          double t = (x - up_end) / (total - 1 - up_end);
          lr = anneal(max_lr, min_lr, t);
          m = anneal(base_m, max_m, t);
        }
        INFO((adam ? "AdamW" : "SGD") << (strategy == optim::AnnealStrategy::cos ? " cos" : " linear") << " step "
                                      << e);
        CHECK(lr_of(*opt) == Approx(lr).epsilon(1e-12).margin(1e-16));
        CHECK(momentum_of(*opt) == Approx(m).epsilon(1e-12));
      }
      CHECK(lr_of(*opt) == Approx(min_lr).epsilon(1e-12));  // ends at initial_lr / final_div_factor
      s.step();                                             // step total: allowed (PyTorch errors past it)
      CHECK_THROWS_WITH(s.step(), Catch::Contains("total steps is 100"));
    }
  }
  // three phases: up, back down to initial, then to min
  Tensor p = a_param();
  optim::SGD opt({p}, optim::SGDOptions(0.1).momentum(0.9));
  optim::OneCycleLR s(opt, optim::OneCycleLROptions(1.0, 40).pct_start(0.25).three_phase(true).anneal_strategy(
                               optim::AnnealStrategy::linear));
  std::vector<double> got{lr_of(opt)};
  for (int i = 1; i < 40; ++i) {
    s.step();
    got.push_back(lr_of(opt));
  }
  CHECK(got[0] == Approx(0.04));
  CHECK(got[9] == Approx(1.0));    // end of phase 1: 0.25 * 40 - 1
  CHECK(got[18] == Approx(0.04));  // end of phase 2: 2 * 0.25 * 40 - 2
  CHECK(got[39] == Approx(0.04 / 1e4));
  CHECK(momentum_of(opt) == Approx(0.95));
}

TEST_CASE("lr CyclicLR triangular, triangular2, exp_range with momentum cycling", "[lr]") {
  struct Mode {
    optim::CyclicMode mode;
    const char* name;
  };
  for (Mode md :
       {Mode{optim::CyclicMode::triangular, "triangular"}, Mode{optim::CyclicMode::triangular2, "triangular2"},
        Mode{optim::CyclicMode::exp_range, "exp_range"}}) {
    Tensor p = a_param();
    optim::SGD opt({p}, optim::SGDOptions(0.5));
    const double base = 0.01, mx = 0.1, gamma = 0.97, bm = 0.8, mm = 0.9;
    const int64_t up = 4, down = 6;
    optim::CyclicLR s(
        opt, optim::CyclicLROptions(base, mx).step_size_up(up).step_size_down(down).mode(md.mode).gamma(gamma));
    for (int64_t it = 0; it <= 3 * (up + down); ++it) {
      if (it > 0) s.step();
      double cycle = std::floor(1 + static_cast<double>(it) / (up + down));
      double x = 1 + static_cast<double>(it) / (up + down) - cycle;
      double r = static_cast<double>(up) / (up + down);
      double sc = x <= r ? x / r : (x - 1) / (r - 1);
      double f = md.mode == optim::CyclicMode::triangular    ? 1.0
                 : md.mode == optim::CyclicMode::triangular2 ? 1.0 / std::pow(2.0, cycle - 1)
                                                             : std::pow(gamma, static_cast<double>(it));
      INFO(md.name << " iteration " << it);
      CHECK(lr_of(opt) == Approx(base + (mx - base) * sc * f).epsilon(1e-12));
      CHECK(momentum_of(opt) == Approx(mm - (mm - bm) * sc * f).epsilon(1e-12));
    }
  }
  // beta1 of Adam is what cycles there
  Tensor p = a_param();
  optim::Adam opt({p});
  optim::CyclicLR s(opt, optim::CyclicLROptions(0.001, 0.01).step_size_up(2));
  CHECK(momentum_of(opt) == 0.9);
  s.step();
  CHECK(momentum_of(opt) == Approx(0.85));
  CHECK(std::get<0>(static_cast<const optim::AdamOptions&>(opt.param_groups()[0].options()).betas()) == Approx(0.85));
}

TEST_CASE("lr schedulers per parameter group, and state_dict round trips", "[lr]") {
  Tensor a = a_param(), b = a_param();
  std::vector<optim::ParamGroup> groups;
  groups.emplace_back(std::vector<Tensor>{a});
  groups.emplace_back(std::vector<Tensor>{b}, std::make_unique<optim::SGDOptions>(optim::SGDOptions(0.01)));
  optim::SGD opt(groups, optim::SGDOptions(0.1));
  optim::StepLR s(opt, 2, 0.5);
  for (int i = 0; i < 5; ++i) s.step();
  CHECK(lr_of(opt, 0) == Approx(0.1 * 0.25));
  CHECK(lr_of(opt, 1) == Approx(0.01 * 0.25));

  // Save optimizer + scheduler mid-schedule; a fresh pair loaded from it continues identically.
  Tensor c = a_param();
  optim::SGD o1({c}, optim::SGDOptions(1.0));
  auto w1 = std::make_shared<optim::LinearLR>(o1, 0.1, 1.0, 3);
  auto k1 = std::make_shared<optim::CosineAnnealingLR>(o1, 7);
  optim::SequentialLR s1(o1, {w1, k1}, {3});
  for (int i = 0; i < 5; ++i) s1.step();
  StateDict so = o1.state_dict(), ss = s1.state_dict();
  CHECK(ss.metadata.at("scheduler") == "SequentialLR");
  Tensor d = a_param();
  optim::SGD o2({d}, optim::SGDOptions(1.0));
  auto w2 = std::make_shared<optim::LinearLR>(o2, 0.1, 1.0, 3);
  auto k2 = std::make_shared<optim::CosineAnnealingLR>(o2, 7);
  optim::SequentialLR s2(o2, {w2, k2}, {3});
  o2.load_state_dict(so);
  s2.load_state_dict(ss);
  for (int i = 0; i < 5; ++i) {
    s1.step();
    s2.step();
    CHECK(lr_of(o2) == lr_of(o1));
  }
  optim::StepLR other(o2, 3);
  CHECK_THROWS_WITH(other.load_state_dict(ss), Catch::Contains("from a SequentialLR"));
  CHECK_THROWS_WITH(optim::StepLR(o2, 0), Catch::Contains("step_size must be > 0"));
  CHECK_THROWS_WITH(optim::SequentialLR(o2, {w2, k2}, {}), Catch::Contains("need 1 milestones"));
}

namespace {

// Two optimizers on equal parameters: `plain` uploads its hyperparameters every step, `ahead`
// reads them from rows staged by optim::ScheduleAhead. make(opt) builds the schedule.
struct AheadPair {
  Tensor p1 = a_param(), p2 = a_param();
  std::unique_ptr<optim::Optimizer> plain, ahead;
  std::unique_ptr<optim::LRScheduler> s1, s2;
};

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.numel() == b.numel() && std::memcmp(a.contiguous().data<float>(), b.contiguous().data<float>(),
                                               static_cast<size_t>(a.numel()) * sizeof(float)) == 0;
}

using MakeOpt = std::function<std::unique_ptr<optim::Optimizer>(Tensor)>;
using MakeSched = std::function<std::unique_ptr<optim::LRScheduler>(optim::Optimizer&)>;

// One step of both with the same gradient (it changes every step, so the moments move).
void step_both(AheadPair& a, optim::ScheduleAhead& ahead, int64_t step, int64_t total) {
  const Tensor g = full({3}, 0.5 + 0.25 * static_cast<double>(step % 5) - 0.1 * static_cast<double>(step));
  a.p1.set_grad(g.clone());
  a.p2.set_grad(g.clone());
  ahead.before_step(total - step);
  a.plain->step();
  a.ahead->step();
  a.s1->step();
  a.s2->step();
}

}  // namespace

TEST_CASE("lr ScheduleAhead: eager steps read staged rows, bit for bit, every scheduler", "[lr]") {
  const MakeOpt adamw = [](Tensor p) { return std::make_unique<optim::AdamW>(std::vector<Tensor>{p}); };
  const MakeOpt sgd = [](Tensor p) {
    return std::make_unique<optim::SGD>(std::vector<Tensor>{p}, optim::SGDOptions(0.1).momentum(0.9));
  };
  const int64_t total = 23, rows = 7;
  struct Case {
    const char* name;
    MakeOpt opt;
    MakeSched sched;
  };
  const std::vector<Case> cases{
      {"OneCycleLR (AdamW: lr and beta1)", adamw,
       [&](optim::Optimizer& o) {
         return std::make_unique<optim::OneCycleLR>(o, optim::OneCycleLROptions(0.01, total));
       }},
      {"CyclicLR (SGD: lr and momentum)", sgd,
       [](optim::Optimizer& o) {
         return std::make_unique<optim::CyclicLR>(o, optim::CyclicLROptions(0.01, 0.1).step_size_up(3));
       }},
      {"StepLR", sgd, [](optim::Optimizer& o) { return std::make_unique<optim::StepLR>(o, 4, 0.5); }},
      {"CosineAnnealingLR", adamw,
       [](optim::Optimizer& o) { return std::make_unique<optim::CosineAnnealingLR>(o, 10, 1e-4); }},
      {"SequentialLR (LinearLR, then CosineAnnealingLR)", adamw,
       [](optim::Optimizer& o) {
         auto w = std::make_shared<optim::LinearLR>(o, 0.1, 1.0, 5);
         auto c = std::make_shared<optim::CosineAnnealingLR>(o, 30);
         return std::make_unique<optim::SequentialLR>(o, std::vector<std::shared_ptr<optim::LRScheduler>>{w, c},
                                                      std::vector<int64_t>{5});
       }},
      {"ChainedScheduler (LinearLR, ExponentialLR)", sgd, [](optim::Optimizer& o) {
         auto w = std::make_shared<optim::LinearLR>(o, 0.5, 1.0, 4);
         auto x = std::make_shared<optim::ExponentialLR>(o, 0.9);
         return std::make_unique<optim::ChainedScheduler>(std::vector<std::shared_ptr<optim::LRScheduler>>{w, x});
       }}};
  for (const Case& c : cases) {
    INFO(c.name);
    AheadPair a;
    a.plain = c.opt(a.p1);
    a.ahead = c.opt(a.p2);
    a.s1 = c.sched(*a.plain);
    a.s2 = c.sched(*a.ahead);
    optim::ScheduleAhead ahead(*a.s2, rows);
    for (int64_t step = 0; step < total; ++step) {
      INFO("step " << step);
      step_both(a, ahead, step, total);
      CHECK(same_bits(a.p1, a.p2));
      CHECK(lr_of(*a.ahead) == lr_of(*a.plain));
      CHECK(momentum_of(*a.ahead) == momentum_of(*a.plain));
      CHECK(a.s2->last_epoch() == a.s1->last_epoch());
    }
    ahead.finish();
    // every step read a row; a staging every `rows` steps, the last one cut at the run's end
    CHECK(ahead.active());
    CHECK(ahead.rows_read() == total);
    CHECK(ahead.stagings() == (total + rows - 1) / rows);
    CHECK(a.s2->state_dict().metadata == a.s1->state_dict().metadata);
  }
}

TEST_CASE("lr ScheduleAhead: options moved by hand restage once, every step gives up", "[lr]") {
  const int64_t total = 12;
  AheadPair a;
  a.plain = std::make_unique<optim::AdamW>(std::vector<Tensor>{a.p1});
  a.ahead = std::make_unique<optim::AdamW>(std::vector<Tensor>{a.p2});
  a.s1 = std::make_unique<optim::ExponentialLR>(*a.plain, 0.8);
  a.s2 = std::make_unique<optim::ExponentialLR>(*a.ahead, 0.8);
  optim::ScheduleAhead ahead(*a.s2, 8);
  for (int64_t step = 0; step < 4; ++step) step_both(a, ahead, step, total);
  CHECK(ahead.stagings() == 1);
  // an lr set by hand once (as after a plateau): the staged row misses, one restaging
  for (auto* o : {a.plain.get(), a.ahead.get()}) o->param_groups()[0].options().set_lr(0.5 * lr_of(*o));
  step_both(a, ahead, 4, total);
  CHECK(ahead.stagings() == 2);
  CHECK(ahead.active());
  CHECK(same_bits(a.p1, a.p2));
  // set by hand before every step: the row after a staging misses, and the steps upload their own
  for (int64_t step = 5; step < total; ++step) {
    for (auto* o : {a.plain.get(), a.ahead.get()}) o->param_groups()[0].options().set_lr(1e-3 * (step + 1));
    step_both(a, ahead, step, total);
    CHECK(same_bits(a.p1, a.p2));
  }
  CHECK_FALSE(ahead.active());
  CHECK(ahead.stagings() == 2);
  CHECK_THROWS_WITH(ahead.before_step(0), Catch::Contains("steps_left must be >= 1"));
  CHECK_THROWS_WITH(optim::ScheduleAhead(*a.s1, 0), Catch::Contains("rows must be >= 1"));
}
