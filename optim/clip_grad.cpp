#include "optim/clip_grad.h"

#include <cmath>

#include "kernels/functional.h"
#include "optim/optimizer.h"

namespace ember::optim {

namespace {
// The parameters' gradients (those that have one), checked.
std::vector<Tensor> grads_of(const char* fn, const std::vector<Tensor>& parameters, double max_norm) {
  EMBER_CHECK(!std::isnan(max_norm), fn, ": max_norm is NaN");
  std::vector<Tensor> grads;
  for (const Tensor& p : parameters) {
    EMBER_CHECK(p.defined(), fn, ": undefined parameter");
    Tensor g = p.grad();
    if (!g.defined()) continue;
    EMBER_CHECK(g.is_contiguous(), fn, ": the grad of ", p.describe(),
                " is not contiguous; clipping writes gradients in place");
    grads.push_back(g);
  }
  return grads;
}
}  // namespace

Tensor clip_grad_norm_(const std::vector<Tensor>& parameters, double max_norm, double norm_type) {
  std::vector<Tensor> grads = grads_of("clip_grad_norm_", parameters, max_norm);
  if (grads.empty()) return zeros({});
  Tensor norm = total_norm(grads, norm_type);
  clip_by_total_norm_(grads, norm, max_norm);
  return norm;
}

Tensor clip_grad_norm_into_step(const std::vector<Tensor>& parameters, double max_norm, GradScaling& scaling,
                                double norm_type) {
  std::vector<Tensor> grads = grads_of("clip_grad_norm_into_step", parameters, max_norm);
  scaling.clip_norm = Tensor();
  if (grads.empty()) return zeros({});
  scaling.clip_norm = total_norm(grads, norm_type);
  scaling.max_norm = max_norm;
  return scaling.clip_norm;
}

}  // namespace ember::optim
