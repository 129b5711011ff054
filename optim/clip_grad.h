// Gradient clipping by the total norm, as torch.nn.utils.clip_grad_norm_ (foreach form):
//   total = ||(||g_1||, ..., ||g_n||)||_p       (p = norm_type; inf for the max norm)
//   g_i *= min(1, max_norm / (total + 1e-6))
// One fused pass computes the norm (total_norm op: multi-tensor, f64 accumulation) and one scales
// every gradient (clip_by_total_norm op); the coefficient is computed on the device, so nothing
// waits for the host. Returns the total norm as a device scalar (f32; f64 for f64 grads) - read
// it with item() when you log, not every step. Parameters without a grad are skipped; with none
// at all the result is 0.
#pragma once

#include <vector>

#include "core/tensor.h"

namespace ember::optim {

Tensor clip_grad_norm_(const std::vector<Tensor>& parameters, double max_norm, double norm_type = 2.0);

// The same clipping folded into the next optimizer step: computes and returns the total norm and
// puts it into `scaling`; opt.step(scaling) (or GradScaler::step(opt, scaling)) then multiplies
// each gradient by the coefficient as it reads it. The parameters end up exactly as after
// clip_grad_norm_ and step(), one pass over the gradients and one launch cheaper, but the
// gradients themselves are left unclipped (Note [clipping folded into the step] in
// kernels/ops/optim.h): use clip_grad_norm_ when something else reads them.
//   optim::GradScaling clip;
//   optim::clip_grad_norm_into_step(model->parameters(), 1.0, clip);
//   opt.step(clip);
struct GradScaling;
Tensor clip_grad_norm_into_step(const std::vector<Tensor>& parameters, double max_norm, GradScaling& scaling,
                                double norm_type = 2.0);

}  // namespace ember::optim

namespace ember::nn::utils {
using ember::optim::clip_grad_norm_;  // libtorch spells it torch::nn::utils::clip_grad_norm_
}  // namespace ember::nn::utils
