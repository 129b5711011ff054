// Mixed precision on the CPU: amp::GradScaler against an unscaled f32 run that skips the same
// iteration (PyTorch's recipe), its state errors and state_dict, the output dtype of every
// registered op under a bf16 autocast scope against the op's declared policy, the cast cache,
// nested scopes, f32 gradients and optimizer state under autocast, recovery from overflow, NaN
// batches, a scaler used with bf16, and an end-to-end bf16 training run.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "amp/autocast.h"
#include "amp/grad_scaler.h"
#include "core/autocast.h"
#include "core/autocast_cache.h"
#include "core/autograd/node.h"
#include "core/rng.h"
#include "kernels/functional.h"
#include "kernels/registry.h"
#include "nn/nn.h"
#include "optim/optim.h"
#include "tests/amp_test_util.h"
#include "tests/op_driver.h"

using namespace ember;
using namespace ember::amp_testing;

namespace {

constexpr DeviceType kCpuType = DeviceType::cpu;

// Expects f() to throw ember::Error whose message contains `needle`.
template <class F>
void expect_error(F&& f, const std::string& needle) {
  try {
    f();
    FAIL_CHECK("no ember::Error thrown; expected one containing \"" << needle << "\"");
  } catch (const Error& e) {
    CHECK_THAT(std::string(e.what()), Catch::Contains(needle));
  }
}

bool all_finite(const std::vector<Tensor>& ts) {
  for (const Tensor& t : ts)
    for (float v : t.to_vector<float>())
      if (!std::isfinite(v)) return false;
  return true;
}

enum class OptKind { sgd, sgd_momentum, adam };

std::unique_ptr<optim::Optimizer> make_opt(OptKind k, const std::vector<Tensor>& ps) {
  switch (k) {
    case OptKind::sgd: return std::make_unique<optim::SGD>(ps, optim::SGDOptions(1.0));
    case OptKind::sgd_momentum: return std::make_unique<optim::SGD>(ps, optim::SGDOptions(1.0).momentum(0.9));
    default: return std::make_unique<optim::Adam>(ps, optim::AdamOptions(1e-2));
  }
}

const char* opt_name(OptKind k) {
  return k == OptKind::sgd ? "SGD lr 1" : k == OptKind::sgd_momentum ? "SGD lr 1 momentum 0.9" : "Adam lr 1e-2";
}

std::vector<std::string> opt_state_names(const optim::Optimizer& opt, const std::vector<Tensor>& ps) {
  std::vector<std::string> out;
  for (const Tensor& p : ps)
    for (const auto& [name, t] : opt.state(p)) out.push_back(name);
  return out;
}

// Sets one element of the first parameter's gradient to inf (what an fp16 overflow leaves).
void poison_grad(const std::vector<Tensor>& ps) {
  Tensor g = ps[0].grad();
  REQUIRE(g.defined());
  g.data<float>()[5] = std::numeric_limits<float>::infinity();
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// GradScaler
// ---------------------------------------------------------------------------------------------

TEST_CASE("GradScaler recipe matches an unscaled f32 run that skips the bad iteration", "[amp][scaler]") {
  constexpr int kIters = 4, kBad = 2;
  const double kInit = 128, kGrowth = 2, kBackoff = 0.5;
  std::vector<Batch> data = make_batches(kIters, 6, 8, 8, 21);
  for (OptKind kind : {OptKind::sgd, OptKind::sgd_momentum, OptKind::adam}) {
    for (bool inject_into_input : {true, false}) {
      INFO(opt_name(kind) << (inject_into_input ? ", inf in the input" : ", inf in a gradient"));
      manual_seed(5);
      TwoLayer scaled, ref;
      copy_values(ref.params(), scaled.params());
      std::vector<Tensor> ps = scaled.params(), qs = ref.params();
      auto opt = make_opt(kind, ps), ref_opt = make_opt(kind, qs);
      amp::GradScaler scaler(
          amp::GradScalerOptions().init_scale(kInit).growth_factor(kGrowth).backoff_factor(kBackoff).growth_interval(
              1));

      int skipped = 0;
      for (int it = 0; it < kIters; ++it) {
        const bool bad = it == kBad;
        opt->zero_grad();
        Tensor x = bad && inject_into_input ? poisoned(data[it].x, INFINITY) : data[it].x;
        Tensor loss = cross_entropy(scaled(x), data[it].y);
        scaler.scale(loss).backward();
        if (bad && !inject_into_input) poison_grad(ps);
        auto before = bits(ps);
        auto state_before = bits(opt_state(*opt, ps));
        scaler.step(*opt);
        scaler.update();
        if (bad) {
          ++skipped;
          CHECK(bits(ps) == before);  // skipped on the device: untouched, bit for bit
          CHECK(bits(opt_state(*opt, ps)) == state_before);
        } else {
          CHECK(bits(ps) != before);
        }

        // the f32 reference simply leaves the bad iteration out
        if (!bad) {
          ref_opt->zero_grad();
          cross_entropy(ref(data[it].x), data[it].y).backward();
          ref_opt->step();
        }
      }
      const int unskipped = kIters - skipped;
      CHECK(scaler.scale_value() == kInit * std::pow(kGrowth, unskipped) * std::pow(kBackoff, skipped));
      CHECK(scaler.skipped_steps() == skipped);
      const Tol tol{1e-5, 1e-7};
      check_close(ps, qs, tol, "parameter");
      REQUIRE(opt_state_names(*opt, ps) == opt_state_names(*ref_opt, qs));
      check_close(opt_state(*opt, ps), opt_state(*ref_opt, qs), tol, "optimizer state");
      if (kind != OptKind::sgd) CHECK(!opt_state(*opt, ps).empty());
    }
  }
}

TEST_CASE("GradScaler state errors name the misuse", "[amp][scaler]") {
  manual_seed(3);
  nn::Linear fc(8, 4);
  optim::SGD opt(fc->parameters(), optim::SGDOptions(0.1));
  amp::GradScaler scaler(amp::GradScalerOptions().init_scale(64));
  Batch b = make_batches(1, 5, 8, 4, 4)[0];

  // nothing was scaled yet
  expect_error([&] { scaler.unscale_(opt); }, "scale() was never called");
  expect_error([&] { scaler.step(opt); }, "scale() was never called");

  scaler.scale(cross_entropy(fc(b.x), b.y)).backward();
  scaler.unscale_(opt);
  expect_error([&] { scaler.unscale_(opt); }, "unscale_() has already been called");
  scaler.step(opt);  // after an explicit unscale_, step does not unscale again
  expect_error([&] { scaler.step(opt); }, "step() has already been called");
  expect_error([&] { scaler.unscale_(opt); }, "after step()");
  scaler.update();

  // clipping folded into the step: the norm must be of unscaled gradients, and the scaler owns
  // found_inf and inv_scale
  opt.zero_grad();
  scaler.scale(cross_entropy(fc(b.x), b.y)).backward();
  optim::GradScaling clip;
  optim::clip_grad_norm_into_step(fc->parameters(), 1.0, clip);
  expect_error([&] { scaler.step(opt, clip); }, "call unscale_(optimizer) before clip_grad_norm_into_step");
  optim::GradScaling own{ones({1}), ones({1})};
  expect_error([&] { scaler.step(opt, own); }, "pass only clipping");
  scaler.unscale_(opt);
  optim::clip_grad_norm_into_step(fc->parameters(), 1.0, clip);
  scaler.step(opt, clip);
  scaler.update();

  // after update() the cycle is open again (and step alone unscales)
  opt.zero_grad();
  scaler.scale(cross_entropy(fc(b.x), b.y)).backward();
  auto before = bits(fc->parameters());
  scaler.step(opt);
  CHECK(bits(fc->parameters()) != before);
  scaler.update();
  CHECK(scaler.skipped_steps() == 0);

  // bad options
  expect_error(
      [] {
        amp::GradScaler s(amp::GradScalerOptions().init_scale(0));
        (void)s;
      },
      "init_scale");
  expect_error(
      [] {
        amp::GradScaler s(amp::GradScalerOptions().growth_factor(1));
        (void)s;
      },
      "growth_factor");
  expect_error(
      [] {
        amp::GradScaler s(amp::GradScalerOptions().backoff_factor(1));
        (void)s;
      },
      "backoff_factor");
  expect_error(
      [] {
        amp::GradScaler s(amp::GradScalerOptions().growth_interval(0));
        (void)s;
      },
      "growth_interval");
}

TEST_CASE("GradScaler unscale_ then step: one unscale, clipping sees true gradients", "[amp][scaler]") {
  // The grads after unscale_ equal the unscaled run's grads (a power-of-two scale is exact).
  manual_seed(8);
  nn::Linear a(8, 4), b(8, 4);
  copy_values(b->parameters(), a->parameters());
  optim::SGD oa(a->parameters(), optim::SGDOptions(0.5)), ob(b->parameters(), optim::SGDOptions(0.5));
  amp::GradScaler scaler(amp::GradScalerOptions().init_scale(1024));
  Batch d = make_batches(1, 7, 8, 4, 9)[0];
  scaler.scale(cross_entropy(a(d.x), d.y)).backward();
  cross_entropy(b(d.x), d.y).backward();
  scaler.unscale_(oa);
  std::vector<Tensor> ga, gb;
  for (const Tensor& p : a->parameters()) ga.push_back(p.grad());
  for (const Tensor& p : b->parameters()) gb.push_back(p.grad());
  check_close(ga, gb, {1e-6, 1e-9}, "unscaled gradient");
  scaler.step(oa);
  ob.step();
  scaler.update();
  check_close(a->parameters(), b->parameters(), {1e-6, 1e-9}, "parameter");
}

TEST_CASE("GradScaler state_dict round trip: scale, growth tracker, skipped count", "[amp][scaler]") {
  manual_seed(13);
  nn::Linear fc(8, 4);
  optim::SGD opt(fc->parameters(), optim::SGDOptions(0.1));
  amp::GradScaler scaler(amp::GradScalerOptions().init_scale(256).growth_interval(3));
  std::vector<Batch> data = make_batches(3, 5, 8, 4, 14);
  // bad, clean, clean: scale 256 -> 128, tracker 2, one skipped
  for (int it = 0; it < 3; ++it) {
    opt.zero_grad();
    Tensor x = it == 0 ? poisoned(data[it].x, NAN) : data[it].x;
    scaler.scale(cross_entropy(fc(x), data[it].y)).backward();
    scaler.step(opt);
    scaler.update();
  }
  REQUIRE(scaler.scale_value() == 128);
  REQUIRE(scaler.skipped_steps() == 1);
  StateDict sd = scaler.state_dict();

  amp::GradScaler loaded;  // defaults: 65536, interval 2000
  loaded.load_state_dict(sd);
  CHECK(loaded.scale_value() == 128);
  CHECK(loaded.skipped_steps() == 1);
  CHECK(loaded.state_dict().metadata == sd.metadata);

  // The growth tracker came along: one more clean step reaches the interval (3) and doubles the
  // scale in both; a scaler that lost the tracker would still be at 128.
  optim::SGD opt2(fc->parameters(), optim::SGDOptions(0.1));
  for (auto* s : {&scaler, &loaded}) {
    optim::Optimizer& o = s == &scaler ? static_cast<optim::Optimizer&>(opt) : opt2;
    o.zero_grad();
    s->scale(cross_entropy(fc(data[1].x), data[1].y)).backward();
    s->step(o);
    s->update();
  }
  CHECK(scaler.scale_value() == 256);
  CHECK(loaded.scale_value() == 256);

  // Loading into a scaler in use overwrites its device values in place.
  Tensor scale_before = scaler.scale_tensor();
  scaler.load_state_dict(sd);
  CHECK(scaler.scale_tensor().is_same(scale_before));
  CHECK(scaler.scale_value() == 128);
  CHECK(scaler.state_dict().metadata == sd.metadata);

  // A state without the entry, or with a bad value, is refused with the reason.
  expect_error([&] { loaded.load_state_dict(StateDict{}); }, "grad_scaler");
  StateDict bad = sd;
  bad.metadata["grad_scaler"] =
      "{\"scale\": -1, \"growth_factor\": 2, \"backoff_factor\": 0.5, "
      "\"growth_interval\": 3, \"growth_tracker\": 0, \"skipped_steps\": 0}";
  expect_error([&] { loaded.load_state_dict(bad); }, "bad scale");
  bad.metadata["grad_scaler"] = "{\"scale\": 4}";
  expect_error([&] { loaded.load_state_dict(bad); }, "growth_factor");
  bad.metadata["grad_scaler"] = "not json";
  expect_error([&] { loaded.load_state_dict(bad); }, "malformed");
}

TEST_CASE("GradScaler backs off from an overflowing scale, skips, and training recovers", "[amp][scaler]") {
  // Targets near 100 make the first MSE gradients ~2e2; at a scale of 2^127 the scaled gradient
  // of the output already overflows f32, so the first steps must be skipped until the scale has
  // backed off enough. Afterwards the model trains normally.
  manual_seed(17);
  nn::Linear fc(4, 1);
  optim::SGD opt(fc->parameters(), optim::SGDOptions(0.05));
  const double kInit = std::ldexp(1.0, 127);
  amp::GradScaler scaler(amp::GradScalerOptions().init_scale(kInit).growth_interval(1000));
  manual_seed(18);
  Tensor x = uniform({16, 4}, -1, 1);
  Tensor w_true = tensor({0.5, -1.0, 2.0, 0.25}, {4, 1});
  Tensor y = add(matmul(x, w_true), 100.0);

  std::vector<double> losses;
  std::vector<bool> stepped;
  for (int it = 0; it < 60; ++it) {
    opt.zero_grad();
    Tensor loss = mse_loss(fc(x), y);
    losses.push_back(loss.item());
    scaler.scale(loss).backward();
    auto before = bits(fc->parameters());
    scaler.step(opt);
    scaler.update();
    stepped.push_back(bits(fc->parameters()) != before);
  }
  const int64_t skipped = scaler.skipped_steps();
  CHECK(!stepped[0]);  // the first step overflowed
  CHECK(skipped >= 1);
  CHECK(skipped < 20);
  // skips are the first `skipped` steps, then every step updates
  for (int it = 0; it < 60; ++it) {
    INFO("iteration " << it);
    CHECK(stepped[static_cast<size_t>(it)] == (it >= skipped));
  }
  // no growth within the interval: every skip halved the scale, exactly
  CHECK(scaler.scale_value() == std::ldexp(kInit, -static_cast<int>(skipped)));
  CHECK(all_finite(fc->parameters()));
  REQUIRE(static_cast<size_t>(skipped) < losses.size());
  const double first_trained = losses[static_cast<size_t>(skipped)];
  CHECK(losses.back() < 1e-2 * first_trained);
  for (size_t i = static_cast<size_t>(skipped) + 1; i < losses.size(); ++i) CHECK(losses[i] <= losses[i - 1] * 1.0001);
}

TEST_CASE("GradScaler skips a batch with NaN: parameters and state bit for bit, then trains on", "[amp][scaler]") {
  manual_seed(23);
  TwoLayer net;
  std::vector<Tensor> ps = net.params();
  optim::SGD opt(ps, optim::SGDOptions(0.1).momentum(0.9));
  amp::GradScaler scaler(amp::GradScalerOptions().init_scale(1024).growth_interval(100));
  std::vector<Batch> data = make_batches(3, 6, 8, 8, 24);

  auto run = [&](const Tensor& x, const Tensor& y) {
    opt.zero_grad();
    scaler.scale(cross_entropy(net(x), y)).backward();
    scaler.step(opt);
    scaler.update();
  };
  run(data[0].x, data[0].y);
  auto params0 = bits(ps);
  auto state0 = bits(opt_state(opt, ps));
  CHECK(state0.size() == 2 * ps.size());  // momentum buffer and step counter
  CHECK(scaler.skipped_steps() == 0);

  run(poisoned(data[1].x, NAN), data[1].y);
  CHECK(bits(ps) == params0);
  CHECK(bits(opt_state(opt, ps)) == state0);
  CHECK(scaler.skipped_steps() == 1);
  CHECK(scaler.scale_value() == 512);

  run(data[2].x, data[2].y);
  CHECK(bits(ps) != params0);
  CHECK(all_finite(ps));
  CHECK(scaler.skipped_steps() == 1);
  // the step counter advanced once per applied step: the NaN batch did not count
  for (const Tensor& p : ps) CHECK(opt.state(p).at("step").item() == 2);
}

TEST_CASE("GradScaler disabled is a pass-through", "[amp][scaler]") {
  manual_seed(29);
  nn::Linear a(8, 4), b(8, 4);
  copy_values(b->parameters(), a->parameters());
  optim::SGD oa(a->parameters(), optim::SGDOptions(0.5)), ob(b->parameters(), optim::SGDOptions(0.5));
  amp::GradScaler scaler(amp::GradScalerOptions().enabled(false));
  Batch d = make_batches(1, 7, 8, 4, 30)[0];
  Tensor loss = cross_entropy(a(d.x), d.y);
  CHECK(scaler.scale(loss).is_same(loss));
  loss.backward();
  scaler.step(oa);
  scaler.update();
  cross_entropy(b(d.x), d.y).backward();
  ob.step();
  CHECK(bits(a->parameters()) == bits(b->parameters()));
}

// ---------------------------------------------------------------------------------------------
// autocast
// ---------------------------------------------------------------------------------------------

namespace {

std::vector<DType> out_dtypes(const std::vector<Tensor>& out) {
  std::vector<DType> d;
  for (const Tensor& t : out) d.push_back(t.defined() ? t.dtype() : DType::boolean);
  return d;
}

std::string dtypes_str(const std::vector<DType>& ds) {
  std::string s = "(";
  for (size_t i = 0; i < ds.size(); ++i) s += (i ? ", " : "") + str(ds[i]);
  return s + ")";
}

// A fresh copy of a sample's inputs in `dtype` (floating ones; masks and indices keep theirs).
// Each call gets its own tensors: some ops write into their inputs.
std::vector<Tensor> fresh_inputs(const OpSample& s, DType dtype) {
  std::vector<Tensor> in = testing::inputs_as(s, dtype);
  for (Tensor& t : in)
    if (t.defined()) t = t.clone();
  return in;
}

// Index of the first input the driver casts (a floating input not in keep_dtype), or -1.
int first_cast_input(const OpSample& s, const std::vector<Tensor>& in) {
  for (size_t i = 0; i < in.size(); ++i) {
    bool kept = std::find(s.keep_dtype.begin(), s.keep_dtype.end(), static_cast<int>(i)) != s.keep_dtype.end();
    if (!kept && in[i].defined() && is_floating(in[i].dtype())) return static_cast<int>(i);
  }
  return -1;
}

std::vector<Tensor> run_op(const OpInfo& info, std::vector<Tensor> in, const Attrs& attrs, bool autocast_on) {
  autograd::NoGradGuard ng;
  if (!autocast_on) return call(info.id, std::move(in), attrs);
  amp::autocast ac(kCpuType, DType::bf16);
  return call(info.id, std::move(in), attrs);
}

// The dtypes a lower (bf16) or fp32 policy promises, given the dtypes of the same op run without
// autocast: floating outputs (other than f64, which autocast leaves alone) in the policy's dtype.
std::vector<DType> expected(AutocastPolicy p, const std::vector<DType>& ref) {
  std::vector<DType> e = ref;
  for (DType& d : e) {
    if (!is_floating(d) || d == DType::f64) continue;
    if (p == AutocastPolicy::lower) d = DType::bf16;
    if (p == AutocastPolicy::fp32) d = DType::f32;
  }
  return e;
}

}  // namespace

TEST_CASE("autocast: every op with CPU samples gives the dtypes its policy declares", "[amp][autocast]") {
  // Three runs of every sample of every op:
  //   f32 inputs:   lower -> bf16 floating outputs; fp32, promote, none -> as without autocast
  //   bf16 inputs:  fp32 -> f32 floating outputs; lower, promote, none -> as without autocast
  //   one bf16 input among f32 ones: lower -> bf16; fp32 and promote (f32 is the widest) -> f32
  // "as without autocast" compares with the same op run outside any scope.
  int checked[4] = {0, 0, 0, 0}, ops_checked = 0;
  for (const OpInfo& info : all_ops()) {
    if (op_samples(info.id) == nullptr) continue;
    bool has_cpu = info.view != nullptr;
    for (const Variant& v : info.variants) has_cpu = has_cpu || v.device == DeviceType::cpu;
    if (!has_cpu) continue;
    bool op_checked = false;
    const AutocastPolicy pol = info.autocast;
    for (const OpSample& s : op_samples(info.id)()) {
      INFO(info.name << " [" << s.name << "] policy " << static_cast<int>(pol));
      int64_t elements = 0;
      for (const Tensor& t : s.inputs)
        if (t.defined()) elements += t.numel();
      if (elements > (int64_t{1} << 18)) continue;  // dtypes do not depend on size; keep it quick

      // f32 inputs
      std::vector<DType> ref32;
      try {
        ref32 = out_dtypes(run_op(info, fresh_inputs(s, DType::f32), s.attrs, false));
      } catch (const Error&) {
        continue;  // not a valid f32 call without autocast: nothing to compare with
      }
      std::vector<DType> got;
      try {
        got = out_dtypes(run_op(info, fresh_inputs(s, DType::f32), s.attrs, true));
      } catch (const Error& e) {
        FAIL_CHECK("f32 inputs under autocast threw: " << e.what());
        continue;
      }
      std::vector<DType> want = pol == AutocastPolicy::lower ? expected(pol, ref32) : ref32;
      INFO("f32 inputs: got " << dtypes_str(got) << ", want " << dtypes_str(want));
      CHECK(got == want);
      op_checked = true;

      // bf16 inputs (where the op takes them without autocast)
      std::vector<Tensor> in16 = fresh_inputs(s, DType::bf16);
      if (first_cast_input(s, in16) >= 0) {
        std::vector<DType> ref16;
        bool ok = true;
        try {
          ref16 = out_dtypes(run_op(info, fresh_inputs(s, DType::bf16), s.attrs, false));
        } catch (const Error&) {
          ok = false;
        }
        if (ok) {
          try {
            got = out_dtypes(run_op(info, fresh_inputs(s, DType::bf16), s.attrs, true));
            want = pol == AutocastPolicy::fp32 ? expected(pol, ref16) : ref16;
            INFO("bf16 inputs: got " << dtypes_str(got) << ", want " << dtypes_str(want));
            CHECK(got == want);
          } catch (const Error& e) {
            FAIL_CHECK("bf16 inputs under autocast threw: " << e.what());
          }
        }
      }

      // one bf16 input among f32 ones: the policy must reconcile them
      if (pol != AutocastPolicy::none) {
        std::vector<Tensor> mixed = fresh_inputs(s, DType::f32);
        int k = first_cast_input(s, mixed);
        bool two_floats = false;
        for (size_t i = 0; i < mixed.size(); ++i)
          if (static_cast<int>(i) != k && mixed[i].defined() && is_floating(mixed[i].dtype())) two_floats = true;
        if (k >= 0 && two_floats) {
          mixed[static_cast<size_t>(k)] = mixed[static_cast<size_t>(k)].to(DType::bf16);
          try {
            got = out_dtypes(run_op(info, mixed, s.attrs, true));
            want = pol == AutocastPolicy::lower ? expected(pol, ref32) : ref32;
            INFO("mixed inputs: got " << dtypes_str(got) << ", want " << dtypes_str(want));
            CHECK(got == want);
          } catch (const Error& e) {
            FAIL_CHECK("mixed bf16/f32 inputs under autocast threw: " << e.what());
          }
        }
      }
      ++checked[static_cast<int>(pol)];
    }
    if (op_checked) ++ops_checked;
  }
  // every policy is exercised by real samples
  CHECK(checked[static_cast<int>(AutocastPolicy::none)] > 0);
  CHECK(checked[static_cast<int>(AutocastPolicy::lower)] > 0);
  CHECK(checked[static_cast<int>(AutocastPolicy::fp32)] > 0);
  CHECK(checked[static_cast<int>(AutocastPolicy::promote)] > 0);
  CHECK(ops_checked > kNumOps / 2);
  WARN("autocast dtypes checked on " << ops_checked
                                     << " ops (samples per policy none/lower/fp32/promote: " << checked[0] << "/"
                                     << checked[1] << "/" << checked[2] << "/" << checked[3] << ")");
}

TEST_CASE("autocast: declared policies follow PyTorch's autocast op lists", "[amp][autocast]") {
  using P = AutocastPolicy;
  const std::vector<std::pair<OpId, P>> table{
      {OpId::matmul, P::lower},  {OpId::linear, P::lower},     {OpId::conv2d, P::lower},
      {OpId::softmax, P::fp32},  {OpId::log_softmax, P::fp32}, {OpId::cross_entropy, P::fp32},
      {OpId::nll_loss, P::fp32}, {OpId::mse_loss, P::fp32},    {OpId::sum, P::fp32},
      {OpId::mean, P::fp32},     {OpId::exp, P::fp32},         {OpId::log, P::fp32},
      {OpId::pow, P::fp32},      {OpId::add, P::promote},      {OpId::mul, P::promote},
      {OpId::cat, P::promote},   {OpId::where, P::promote},    {OpId::relu, P::none},
      {OpId::view, P::none},     {OpId::cast, P::none},        {OpId::copy, P::none},
      {OpId::argmax, P::none},   {OpId::amp_unscale, P::none}, {OpId::sgd_step, P::none}};
  for (auto [id, p] : table) {
    INFO(op_info(id).name);
    CHECK(static_cast<int>(op_info(id).autocast) == static_cast<int>(p));
  }
}

TEST_CASE("autocast: the real ops under a CPU bf16 scope", "[amp][autocast]") {
  manual_seed(31);
  Tensor a = uniform({4, 6}, -1, 1), w = uniform({5, 6}, -1, 1), bias = uniform({5}, -1, 1);
  Tensor img = uniform({2, 3, 6, 6}, -1, 1), k = uniform({4, 3, 3, 3}, -1, 1);
  Tensor target = tensor_i64({0, 1, 4, 2}, {4});
  Tensor pos = add(abs(a), 0.5);
  Tensor h = a.to(DType::bf16);
  amp::autocast ac(kCpuType);
  CHECK(ac.dtype() == DType::bf16);
  CHECK(matmul(a, w.t()).dtype() == DType::bf16);
  Tensor lin = linear(a, w, bias);
  CHECK(lin.dtype() == DType::bf16);
  CHECK(conv2d(img, k).dtype() == DType::bf16);
  CHECK(softmax(lin, 1).dtype() == DType::f32);
  CHECK(log_softmax(lin, 1).dtype() == DType::f32);
  CHECK(cross_entropy(lin, target).dtype() == DType::f32);
  CHECK(sum(lin).dtype() == DType::f32);
  CHECK(mean(lin).dtype() == DType::f32);
  CHECK(exp(h).dtype() == DType::f32);
  CHECK(log(pos.to(DType::bf16)).dtype() == DType::f32);
  CHECK(pow(h, h).dtype() == DType::f32);
  CHECK(pow(h, 2.0).dtype() == DType::f32);
  CHECK(add(h, a).dtype() == DType::f32);
  CHECK(mul(a, h).dtype() == DType::f32);
  CHECK(add(h, h).dtype() == DType::bf16);
  CHECK(cat({h, a}, 0).dtype() == DType::f32);
  CHECK(where(gt(a, 0.0), h, a).dtype() == DType::f32);
  CHECK(relu(lin).dtype() == DType::bf16);
  CHECK(relu(a).dtype() == DType::f32);
  // f64 is left alone by the lower policy (PyTorch casts only f32)
  CHECK(matmul(a.to(DType::f64), w.t().to(DType::f64)).dtype() == DType::f64);
  // and the bf16 results are close to the f32 ones (bf16 has 8 mantissa bits)
  Tensor lin32;
  {
    amp::autocast off(kCpuType, false);
    lin32 = linear(a, w, bias);
  }
  CHECK(lin32.dtype() == DType::f32);
  CHECK(testing::compare(lin.to(DType::f32), lin32, {2e-2, 2e-2}) == "");
}

TEST_CASE("autocast cast cache: weights cast once per outermost scope, activations every time", "[amp][autocast]") {
  manual_seed(37);
  nn::Linear fc(8, 8);
  Tensor x = uniform({3, 8}, -1, 1).to(DType::bf16);  // already bf16: only the weights need casts
  autocast::reset_cache_stats();
  {
    amp::autocast ac(kCpuType);
    Tensor y = fc(x);
    y = fc(y);
    y = fc(y);
    CHECK(y.dtype() == DType::bf16);
    // weight and bias: one cast each, two hits each
    CHECK(autocast::cache_stats().casts == 2);
    CHECK(autocast::cache_stats().hits == 4);
    CHECK(autocast::thread_cache().size() == 2);
    // an inner scope does not clear the outer scope's cache
    {
      amp::autocast inner(kCpuType);
      fc(x);
    }
    CHECK(autocast::thread_cache().size() == 2);
    fc(x);
    CHECK(autocast::cache_stats().casts == 2);
    CHECK(autocast::cache_stats().hits == 8);
  }
  // leaving the outermost scope clears it
  CHECK(autocast::thread_cache().size() == 0);

  // a new scope casts again
  autocast::reset_cache_stats();
  {
    amp::autocast ac(kCpuType);
    fc(x);
    fc(x);
    CHECK(autocast::cache_stats().casts == 2);
    CHECK(autocast::cache_stats().hits == 2);
  }

  // non-leaf f32 activations (and leaves that do not require grad) are cast at every use
  autocast::reset_cache_stats();
  {
    Tensor leaf = uniform({3, 8}, -1, 1);
    leaf.requires_grad_(true);
    Tensor w = uniform({8, 8}, -1, 1);  // a plain tensor, no grad
    amp::autocast ac(kCpuType);
    Tensor act = mul(leaf, 2.0);  // f32, non-leaf
    REQUIRE(act.dtype() == DType::f32);
    REQUIRE(!act.is_leaf());
    for (int i = 0; i < 3; ++i) linear(act, w);
    CHECK(autocast::cache_stats().casts == 6);  // act and w, three times each
    CHECK(autocast::cache_stats().hits == 0);
    CHECK(autocast::thread_cache().size() == 0);
  }
  // gradients reach the weights through the cached casts: three uses accumulate
  fc->zero_grad();
  Tensor loss;
  {
    amp::autocast ac(kCpuType);
    loss = sum(add(add(fc(x), fc(x)), fc(x)));
  }
  loss.backward();
  Tensor g = fc->bias.grad();
  REQUIRE(g.defined());
  CHECK(g.dtype() == DType::f32);
  for (float v : g.to_vector<float>()) CHECK(v == Approx(9.0));  // 3 rows x 3 uses
}

TEST_CASE("autocast cast cache: a no_grad forward does not strip the history of later uses", "[amp][autocast]") {
  // An evaluation pass under no_grad and a training pass in the same autocast scope: the weight's
  // cast made under no_grad must not be served to the training pass without its autograd history
  // (the weights would silently get no gradient).
  manual_seed(59);
  nn::Linear fc(8, 4);
  Tensor x = uniform({3, 8}, -1, 1);
  Tensor loss;
  {
    amp::autocast ac(kCpuType);
    {
      autograd::NoGradGuard ng;
      Tensor y = fc(x);
      CHECK(!y.requires_grad());
    }
    loss = sum(fc(x));
  }
  REQUIRE(loss.requires_grad());
  loss.backward();
  REQUIRE(fc->weight.grad().defined());
  REQUIRE(fc->bias.grad().defined());
  for (float v : fc->bias.grad().to_vector<float>()) CHECK(v == Approx(3.0));
}

TEST_CASE("autocast scopes nest and restore, a CUDA scope leaves CPU ops alone", "[amp][autocast]") {
  manual_seed(41);
  Tensor a = uniform({3, 4}, -1, 1), w = uniform({2, 4}, -1, 1);
  auto lin_dtype = [&] { return linear(a, w).dtype(); };
  REQUIRE(!amp::autocast::is_enabled(kCpuType));
  CHECK(lin_dtype() == DType::f32);
  {
    amp::autocast on(kCpuType);
    CHECK(amp::autocast::is_enabled(kCpuType));
    CHECK(lin_dtype() == DType::bf16);
    {
      amp::autocast off(kCpuType, false);
      CHECK(!off.enabled());
      CHECK(!amp::autocast::is_enabled(kCpuType));
      CHECK(lin_dtype() == DType::f32);
      CHECK(matmul(a, w.t()).dtype() == DType::f32);
      {
        amp::autocast again(kCpuType, DType::bf16);
        CHECK(lin_dtype() == DType::bf16);
      }
      CHECK(!amp::autocast::is_enabled(kCpuType));
      CHECK(lin_dtype() == DType::f32);
    }
    CHECK(amp::autocast::is_enabled(kCpuType));
    CHECK(lin_dtype() == DType::bf16);
  }
  CHECK(!amp::autocast::is_enabled(kCpuType));
  CHECK(lin_dtype() == DType::f32);

  // A CUDA scope changes the CUDA state only (no device is needed to hold the state).
  {
    amp::autocast cuda_ac(DeviceType::cuda);
    CHECK(cuda_ac.dtype() == DType::f16);
    CHECK(amp::autocast::is_enabled(DeviceType::cuda));
    CHECK(amp::autocast::current_dtype(DeviceType::cuda) == DType::f16);
    CHECK(!amp::autocast::is_enabled(kCpuType));
    CHECK(lin_dtype() == DType::f32);
    {
      amp::autocast inner(DeviceType::cuda, DType::bf16);
      CHECK(amp::autocast::current_dtype(DeviceType::cuda) == DType::bf16);
    }
    CHECK(amp::autocast::current_dtype(DeviceType::cuda) == DType::f16);
  }
  CHECK(!amp::autocast::is_enabled(DeviceType::cuda));

  // Unsupported requests are refused and leave the state as it was.
  expect_error(
      [] {
        amp::autocast bad(kCpuType, DType::f16);
        (void)bad;
      },
      "bf16 only");
  expect_error(
      [] {
        amp::autocast bad(DeviceType::cuda, DType::f32);
        (void)bad;
      },
      "f16 or bf16");
  CHECK(!amp::autocast::is_enabled(kCpuType));
  CHECK(lin_dtype() == DType::f32);
}

TEST_CASE("autocast: parameter gradients and optimizer state stay f32", "[amp][autocast]") {
  manual_seed(43);
  nn::Linear fc(8, 4), ref(8, 4);
  copy_values(ref->parameters(), fc->parameters());
  Batch d = make_batches(1, 16, 8, 4, 44)[0];
  Tensor x = d.x.clone(), xr = d.x.clone();
  x.requires_grad_(true);
  xr.requires_grad_(true);
  Tensor loss;
  {
    amp::autocast ac(kCpuType);
    Tensor logits = fc(x);
    REQUIRE(logits.dtype() == DType::bf16);
    loss = cross_entropy(logits, d.y);
  }
  CHECK(loss.dtype() == DType::f32);
  loss.backward();
  cross_entropy(ref(xr), d.y).backward();
  for (const Tensor& p : fc->parameters()) {
    REQUIRE(p.grad().defined());
    CHECK(p.grad().dtype() == DType::f32);
    CHECK(p.dtype() == DType::f32);
  }
  CHECK(x.grad().dtype() == DType::f32);
  // close to the f32 gradients (bf16 forward and backward: PyTorch's bf16 tolerance, looser in
  // atol because the grads are sums of bf16 products)
  std::vector<Tensor> g, gr;
  for (const Tensor& p : fc->parameters()) g.push_back(p.grad());
  for (const Tensor& p : ref->parameters()) gr.push_back(p.grad());
  g.push_back(x.grad());
  gr.push_back(xr.grad());
  check_close(g, gr, {1.6e-2, 2e-3}, "gradient");

  optim::SGD sgd(fc->parameters(), optim::SGDOptions(0.1).momentum(0.9));
  sgd.step();
  optim::Adam adam(fc->parameters(), optim::AdamOptions(1e-3).amsgrad(true));
  adam.step();
  for (const Tensor& p : fc->parameters()) {
    CHECK(p.dtype() == DType::f32);
    for (const auto& [name, t] : sgd.state(p)) {
      INFO("SGD state " << name);
      CHECK(t.dtype() == DType::f32);
    }
  }
  for (const Tensor& p : fc->parameters())
    for (const auto& [name, t] : adam.state(p)) {
      INFO("Adam state " << name);
      CHECK(t.dtype() == DType::f32);
    }
}

TEST_CASE("autocast: cross_entropy_with_grad reads bf16 logits as they are, the f32 loss's values",
          "[amp][autocast][loss]") {
  manual_seed(53);
  check_loss_on_low_logits(kCPU, DType::bf16, 64, 10);
  check_loss_on_low_logits(kCPU, DType::bf16, 7, 130);
}

TEST_CASE("autocast cast plan: a scope casts the last scope's weights ahead in one launch, same bits",
          "[amp][autocast]") {
  manual_seed(71);
  check_cast_plan(kCPU);
}

TEST_CASE("GradScaler with bf16 autocast is harmless: same training as without it", "[amp][scaler][autocast]") {
  manual_seed(47);
  TwoLayer plain, scaled;
  copy_values(scaled.params(), plain.params());
  std::vector<Tensor> ps = plain.params(), qs = scaled.params();
  optim::SGD op(ps, optim::SGDOptions(0.2).momentum(0.9)), oq(qs, optim::SGDOptions(0.2).momentum(0.9));
  amp::GradScaler scaler(amp::GradScalerOptions().growth_interval(1));
  std::vector<Batch> data = make_batches(8, 16, 8, 8, 48);
  for (const Batch& b : data) {
    op.zero_grad();
    oq.zero_grad();
    Tensor lp, lq;
    {
      amp::autocast ac(kCpuType);
      lp = cross_entropy(plain(b.x), b.y);
      lq = cross_entropy(scaled(b.x), b.y);
    }
    lp.backward();
    op.step();
    scaler.scale(lq).backward();
    scaler.step(oq);
    scaler.update();
  }
  CHECK(scaler.skipped_steps() == 0);
  CHECK(scaler.scale_value() == 65536.0 * std::pow(2.0, static_cast<double>(data.size())));
  // A power-of-two scale is exact in bf16 too; allow for rounding order all the same.
  check_close(qs, ps, {1e-5, 1e-6}, "parameter");
  check_close(opt_state(oq, qs), opt_state(op, ps), {1e-5, 1e-6}, "optimizer state");
}

TEST_CASE("bf16 autocast trains an MLP on separable data to high accuracy", "[amp][autocast][train]") {
  // Two classes split by a random hyperplane, with a margin; 8 -> 32 -> 2 MLP, SGD with momentum,
  // forward under CPU bf16 autocast and a GradScaler (the full AMP step).
  manual_seed(53);
  const int64_t n = 512, f = 8;
  Tensor normal_w = uniform({f, 1}, -1, 1);
  Tensor x = uniform({4 * n, f}, -1, 1);
  Tensor score = matmul(x, normal_w).reshape({4 * n});
  // keep points at least 0.1 away from the hyperplane
  std::vector<float> sv = score.to_vector<float>();
  std::vector<int64_t> keep;
  for (size_t i = 0; i < sv.size() && static_cast<int64_t>(keep.size()) < n; ++i)
    if (std::fabs(sv[i]) > 0.1f) keep.push_back(static_cast<int64_t>(i));
  REQUIRE(static_cast<int64_t>(keep.size()) == n);
  Tensor idx = tensor_i64(keep, {n});
  Tensor xs = index_select(x, 0, idx);
  Tensor ys = gt(index_select(score, 0, idx), 0.0).to(DType::i64);

  nn::Sequential net;
  net->push_back(nn::Linear(f, 32));
  net->push_back(nn::ReLU());
  net->push_back(nn::Linear(32, 2));
  optim::SGD opt(net->parameters(), optim::SGDOptions(0.1).momentum(0.9));
  amp::GradScaler scaler;
  auto accuracy = [&] {
    autograd::NoGradGuard ng;
    amp::autocast ac(kCpuType);
    Tensor pred = argmax(net(xs), 1);
    return mean(eq(pred, ys).to(DType::f32)).item();
  };
  const double acc0 = accuracy();
  const int64_t bs = 64;
  for (int epoch = 0; epoch < 15; ++epoch)
    for (int64_t s = 0; s < n; s += bs) {
      Tensor xb = xs.slice(0, s, s + bs), yb = ys.slice(0, s, s + bs);
      opt.zero_grad();
      Tensor loss;
      {
        amp::autocast ac(kCpuType);
        Tensor logits = net(xb);
        REQUIRE(logits.dtype() == DType::bf16);
        loss = cross_entropy(logits, yb);
      }
      scaler.scale(loss).backward();
      scaler.step(opt);
      scaler.update();
    }
  const double acc = accuracy();
  INFO("accuracy before " << acc0 << ", after " << acc);
  CHECK(acc >= 0.95);
  CHECK(scaler.skipped_steps() == 0);
  for (const Tensor& p : net->parameters()) CHECK(p.dtype() == DType::f32);
}
