#include "optim/clip_grad.h"

#include <cmath>

#include "kernels/functional.h"

namespace ember::optim {

Tensor clip_grad_norm_(const std::vector<Tensor>& parameters, double max_norm, double norm_type) {
  EMBER_CHECK(!std::isnan(max_norm), "clip_grad_norm_: max_norm is NaN");
  std::vector<Tensor> grads;
  for (const Tensor& p : parameters) {
    EMBER_CHECK(p.defined(), "clip_grad_norm_: undefined parameter");
    Tensor g = p.grad();
    if (!g.defined()) continue;
    EMBER_CHECK(g.is_contiguous(), "clip_grad_norm_: the grad of ", p.describe(),
                " is not contiguous; clipping writes gradients in place");
    grads.push_back(g);
  }
  if (grads.empty()) return zeros({});
  Tensor norm = total_norm(grads, norm_type);
  clip_by_total_norm_(grads, norm, max_norm);
  return norm;
}

}  // namespace ember::optim
