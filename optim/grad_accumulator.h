// Gradient accumulation over N micro-batches.
//
// backward() adds into .grad, so running backward on N micro-batches before one optimizer step
// sums their gradients. Scaling each micro-batch loss by 1/N makes the sum the gradient of the
// MEAN loss over the N micro-batches - for equal-sized micro-batches and a mean-reduced loss,
// exactly the gradient one step on the N-times larger batch would see (up to float rounding), so
// the learning rate needs no change:
//
//   optim::GradAccumulator acc(4);
//   for (auto& [x, y] : micro_batches) {
//     Tensor loss = acc.scale(loss_fn(model(x), y));   // loss / 4
//     loss.backward();
//     if (acc.ready()) { opt.step(); opt.zero_grad(); sched.step(); }   // every 4th micro-batch
//   }
//
// With unequal micro-batches (e.g. the last one of an epoch), weight each loss by its share of
// the samples instead (loss_i * n_i / sum n) or use a sum-reduced loss divided by the total count.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace ember::optim {

class GradAccumulator {
 public:
  explicit GradAccumulator(int64_t micro_batches);
  // loss / N.
  Tensor scale(const Tensor& loss) const;
  // Counts one micro-batch; true on every N-th (time to step and zero the grads).
  bool ready();
  int64_t micro_batches() const { return n_; }
  // Micro-batches counted since the last step.
  int64_t pending() const { return count_; }

 private:
  int64_t n_;
  int64_t count_ = 0;
};

}  // namespace ember::optim
