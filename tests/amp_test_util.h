// Helpers shared by the mixed-precision suites (tests/test_amp.cpp on the CPU, tests/test_amp_gpu.cpp):
// the two-layer model of PyTorch's GradScaler recipe, deterministic learnable batches, bitwise
// snapshots, and comparisons that read device tensors back (allowed syncs: these are checks).
#pragma once

#include <catch2/catch.hpp>

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "amp/autocast.h"
#include "core/autograd/node.h"
#include "core/rng.h"
#include "core/runtime.h"
#include "kernels/functional.h"
#include "kernels/registry.h"
#include "nn/nn.h"
#include "optim/optim.h"
#include "tests/op_driver.h"

namespace ember::amp_testing {

// Two Linear(8, 8) layers with a ReLU between them.
struct TwoLayer {
  nn::Linear l1{8, 8}, l2{8, 8};
  Tensor operator()(const Tensor& x) { return l2(relu(l1(x))); }
  std::vector<Tensor> params() const { return {l1->weight, l1->bias, l2->weight, l2->bias}; }
  void to(Device d) {
    l1->to(d);
    l2->to(d);
  }
};

struct Batch {
  Tensor x, y;
};

// Deterministic batches; the class of a row is the argmax of its first `classes` features, so the
// data is learnable.
inline std::vector<Batch> make_batches(int n, int64_t rows, int64_t features, int64_t classes, uint64_t seed,
                                       Device d = kCPU) {
  manual_seed(seed);
  std::vector<Batch> out;
  for (int i = 0; i < n; ++i) {
    Tensor x = uniform({rows, features}, -1, 1, TensorOptions().device(d));
    out.push_back({x, argmax(x.slice(1, 0, classes), 1)});
  }
  return out;
}

// The batch with one input element replaced by `value` (a copy: the clean batch stays clean).
inline Tensor poisoned(const Tensor& x, double value) {
  Tensor c = x.cpu().clone();
  c.data<float>()[3] = static_cast<float>(value);
  return c.to(x.device());
}

inline void copy_values(const std::vector<Tensor>& dst, const std::vector<Tensor>& src) {
  autograd::NoGradGuard ng;
  REQUIRE(dst.size() == src.size());
  for (size_t i = 0; i < dst.size(); ++i) {
    Tensor d = dst[i];
    d.copy_(src[i]);
  }
}

// `b` takes `a`'s values, then both move to `d`: a run and its reference from the same start.
inline void same_start_on(Device d, TwoLayer& a, TwoLayer& b) {
  copy_values(b.params(), a.params());
  a.to(d);
  b.to(d);
}

// Bitwise snapshot of f32 tensors' values (raw bits, so -0/+0 and NaN payloads count).
inline std::vector<std::vector<uint32_t>> bits(const std::vector<Tensor>& ts) {
  runtime::AllowSyncScope allow;
  std::vector<std::vector<uint32_t>> out;
  for (const Tensor& t : ts) {
    std::vector<float> v = t.to_vector<float>();
    std::vector<uint32_t> b(v.size());
    if (!v.empty()) std::memcpy(b.data(), v.data(), v.size() * sizeof(float));
    out.push_back(std::move(b));
  }
  return out;
}

inline void check_close(const std::vector<Tensor>& got, const std::vector<Tensor>& want, Tol tol,
                        const std::string& what) {
  runtime::AllowSyncScope allow;
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO(what << " " << i);
    CHECK(testing::compare(got[i].cpu(), want[i].cpu(), tol) == "");
  }
}

// Every state tensor of every parameter, in a fixed order.
inline std::vector<Tensor> opt_state(const optim::Optimizer& opt, const std::vector<Tensor>& ps) {
  std::vector<Tensor> out;
  for (const Tensor& p : ps)
    for (const auto& [name, t] : opt.state(p)) out.push_back(t);
  return out;
}

// cross_entropy_with_grad under autocast with logits in `low` (Note [the loss reads the logits as
// they are] in kernels/ops/loss.cpp): an f32 loss and dx in `low`, with the values of the f32 op on
// the same logits (dx rounded once), for the announced gradient and for any other, in every
// reduction, with class weights, label smoothing and an ignored target. n x c logits on `dev`.
inline void check_loss_on_low_logits(Device dev, DType low, int64_t n, int64_t c) {
  runtime::AllowSyncScope allow;
  const TensorOptions on = TensorOptions().device(dev);
  std::vector<int64_t> tv(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) tv[static_cast<size_t>(i)] = i == 1 ? -100 : (i * 7 + 3) % c;
  const Tensor t = tensor_i64(tv, {n}).to(dev);
  const Tensor logits = uniform({n, c}, -3, 3, on).to(low);
  auto bits = [](const Tensor& x) { return x.to(DType::f32).cpu().to_vector<float>(); };
  for (Reduction r : {Reduction::mean, Reduction::sum, Reduction::none}) {
    INFO(dtype_name(low) << " [" << n << ", " << c << "], reduction " << static_cast<int>(r));
    CrossEntropyOptions o;
    o.weight = uniform({c}, 0.5, 2, on);
    o.label_smoothing = 0.1;
    o.reduction = r;
    const Tensor g = r == Reduction::none ? full({n}, 0.75, on) : full({}, 0.75, on);
    Tensor xr = logits.to(DType::f32).requires_grad_(true), want = cross_entropy_with_grad(xr, t, g, o);
    want.backward(g);
    const std::vector<float> want_dx = bits(xr.grad().to(low));
    for (bool announced : {true, false}) {
      INFO((announced ? "backward(the announced gradient)" : "backward(another tensor)"));
      Tensor x = logits.clone().requires_grad_(true), loss;
      {
        amp::autocast ac(dev.type, low);
        loss = cross_entropy_with_grad(x, t, g, o);
      }
      CHECK(loss.dtype() == DType::f32);
      CHECK(bits(loss) == bits(want));
      loss.backward(announced ? g : g.clone());
      CHECK(x.grad().dtype() == low);
      CHECK(bits(x.grad()) == want_dx);
    }
  }
}

// Autocast's cast plan (Note [autocast's cast plan] in kernels/autocast_policy.cpp) on `dev`, with
// three Linear layers: the second scope casts all six weights in one cast_many, with the first
// scope's values and gradients bit for bit; a weight written in place after the casts ahead is cast
// again at its op; a planned weight the scope does not use gets no gradient and leaves the plan.
inline void check_cast_plan(Device dev) {
  runtime::AllowSyncScope allow;
  nn::Linear l1(8, 16), l2(16, 16), l3(16, 4);
  for (nn::Linear* l : {&l1, &l2, &l3}) (*l)->to(dev);
  std::vector<Tensor> params;
  for (nn::Linear* l : {&l1, &l2, &l3})
    for (const Tensor& p : (*l)->parameters()) params.push_back(p);
  const Tensor x = uniform({5, 8}, -1, 1).to(DType::bf16).to(dev);  // needs no cast
  auto cast_many_runs = [] {
    uint64_t n = 0;
    for (const Variant& v : op_info(OpId::cast_many).variants) n += variant_runs(v, DType::f32);
    return n;
  };
  struct Step {
    std::vector<float> y;
    std::vector<std::vector<float>> grads;  // empty: no gradient
    uint64_t cast_many = 0;                 // cast_many launches in the forward
  };
  // A forward in a scope (l3 optional; `between` runs after l1), then the f32 sum's backward.
  auto step = [&](
                  bool use_l3, const std::function<void()>& between = [] {}) {
    for (Tensor& p : params) p.reset_grad();
    Step s;
    Tensor y;
    {
      amp::autocast ac(dev.type, DType::bf16);
      const uint64_t before = cast_many_runs();
      Tensor h = relu(l1(x));
      between();
      h = relu(l2(h));
      y = use_l3 ? l3(h) : h;
      s.cast_many = cast_many_runs() - before;
    }
    sum(y.to(DType::f32)).backward();
    s.y = y.to(DType::f32).cpu().to_vector<float>();
    for (const Tensor& p : params)
      s.grads.push_back(p.grad().defined() ? p.grad().cpu().to_vector<float>() : std::vector<float>{});
    return s;
  };
  const Step first = step(true);
  CHECK(first.cast_many == 3);  // each layer's weight and bias
  const Step planned = step(true);
  CHECK(planned.cast_many == 1);  // all six, ahead
  CHECK(planned.y == first.y);
  CHECK(planned.grads == first.grads);
  // l3's weight halved after this scope cast it ahead: its op casts it again
  const Step written = step(true, [&] {
    autograd::NoGradGuard ng;
    l3->weight.mul_(0.5);
  });
  const Step after = step(true);  // cast ahead from the halved weight
  CHECK(after.cast_many == 1);
  CHECK(written.y == after.y);
  CHECK(written.grads == after.grads);
  CHECK(written.y != planned.y);
  // a scope without l3: no gradient for it, and it leaves the plan
  const Step without = step(false);
  CHECK(without.grads[4].empty());
  CHECK(without.grads[5].empty());
  const Step back = step(true);
  CHECK(back.cast_many == 2);  // l1's and l2's ahead, l3's at its op
  CHECK(back.y == after.y);
  CHECK(back.grads == after.grads);
}

}  // namespace ember::amp_testing
