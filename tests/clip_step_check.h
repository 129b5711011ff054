// Clipping folded into the optimizer step (optim::clip_grad_norm_into_step, Note [clipping folded
// into the step] in kernels/ops/optim.h) against clip_grad_norm_ followed by step(): the same norm,
// parameters and optimizer state, bit for bit, over steps that clip and steps that do not, with the
// gradients left as they were. Shared by the CPU suite (test_optim.cpp) and the CUDA one
// (test_optim_gpu.cpp).
#pragma once

#include <catch2/catch.hpp>

#include <memory>
#include <string>
#include <vector>

#include "core/rng.h"
#include "kernels/functional.h"
#include "optim/optim.h"

namespace ember::test {

// 0: SGD with momentum, nesterov and weight decay; 1: AdamW; 2: Adam with amsgrad.
inline std::unique_ptr<optim::Optimizer> clip_check_optimizer(int which, std::vector<Tensor> ps) {
  switch (which) {
    case 0:
      return std::make_unique<optim::SGD>(ps, optim::SGDOptions(0.1).momentum(0.9).nesterov(true).weight_decay(1e-3));
    case 1: return std::make_unique<optim::AdamW>(ps, optim::AdamOptions(1e-2).weight_decay(0.05));
    default: return std::make_unique<optim::Adam>(ps, optim::AdamOptions(1e-2).amsgrad(true));
  }
}

// Everything of a tensor's bytes, as float values (exact for f32, bf16 and f16; f64 compared as such).
inline std::vector<double> exact_values(const Tensor& t) { return t.detach().to(DType::f64).to_vector<double>(); }

inline void check_clip_into_step(Device d, DType dt, int which) {
  const std::vector<int64_t> sizes{5, 300, 1, 4097};
  std::vector<Tensor> a, b;
  manual_seed(11);
  for (int64_t n : sizes) {
    Tensor v = uniform({n}, -1, 1, TensorOptions().device(d)).to(dt);
    a.push_back(v.clone().requires_grad_(true));
    b.push_back(v.clone().requires_grad_(true));
  }
  auto opt_a = clip_check_optimizer(which, a), opt_b = clip_check_optimizer(which, b);
  for (int step = 0; step < 4; ++step) {
    INFO("optimizer " << which << ", " << dt << " on " << d << ", step " << step);
    const double scale = step % 2 == 0 ? 5.0 : 0.005;  // the norm is ~ 37 * scale: clipped, then not
    std::vector<Tensor> grads;
    for (int64_t n : sizes) grads.push_back(mul(uniform({n}, -1, 1, TensorOptions().device(d)), scale).to(dt));
    for (size_t i = 0; i < sizes.size(); ++i) {
      a[i].set_grad(grads[i].clone());
      b[i].set_grad(grads[i].clone());
    }
    Tensor norm_a = optim::clip_grad_norm_(a, 1.0);
    opt_a->step();
    optim::GradScaling clip;
    Tensor norm_b = optim::clip_grad_norm_into_step(b, 1.0, clip);
    opt_b->step(clip);
    CHECK(exact_values(norm_a) == exact_values(norm_b));
    CHECK((norm_b.item() > 1.0) == (step % 2 == 0));
    for (size_t i = 0; i < sizes.size(); ++i) {
      CHECK(exact_values(a[i]) == exact_values(b[i]));
      CHECK(exact_values(b[i].grad()) == exact_values(grads[i]));  // left unclipped
      for (const auto& [name, sa] : opt_a->state(a[i]))
        CHECK(exact_values(sa) == exact_values(opt_b->state(b[i]).at(name)));
    }
  }
}

}  // namespace ember::test
