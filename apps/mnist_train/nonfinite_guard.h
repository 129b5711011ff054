// Divergence detection on the device (Note [no host syncs in the step] in trainer.h): after each
// step's loss, the count of consecutive NaN/inf losses and the optimizer step at which that count
// reached --max-nonfinite-steps stay in device tensors; the host reads the verdict once per log
// interval, with the interval's other reads. The update shares one train_stats launch with the
// interval's loss sum and correct count.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace mnist {

class NonFiniteGuard {
 public:
  NonFiniteGuard(ember::Device device, int limit);

  // The optimizer steps taken before the device counter starts (a resumed run's).
  void start_at(int64_t step);
  // A micro-batch's loss (f32, one element), its logits and labels: the interval's loss_sum and
  // correct count grow, the guard counts a non-finite loss, and the step count grows when
  // `stepped` (an optimizer step follows); one train_stats launch, no host read.
  void observe(const ember::Tensor& loss, const ember::Tensor& logits, const ember::Tensor& labels,
               ember::Tensor& loss_sum, ember::Tensor& correct, bool stepped);
  // The step at which the limit was reached, -1 while it was not (the device counter, for the
  // ranks to all_reduce with max before read()).
  ember::Tensor& diverged_at() { return diverged_at_; }
  // Reads the verdict into diverged_step() (a host read: call it at a log interval).
  void read();
  int64_t diverged_step() const { return diverged_step_; }

 private:
  int limit_;
  ember::Tensor run_, diverged_at_, step_;  // consecutive bad losses; the step it diverged at; steps taken
  int64_t diverged_step_ = -1;
};

}  // namespace mnist
