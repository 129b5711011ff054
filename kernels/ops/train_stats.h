// train_stats: a training step's bookkeeping on the device, in place, in one launch: the interval's
// loss sum and correct count, and the divergence guard of --max-nonfinite-steps (the device side of
// mnist_train's Note [no host syncs in the step]).
//
//   train_stats(logits, labels, loss, loss_sum, correct, nonfinite_run, diverged_at, steps)
//     loss_sum      += loss
//     correct       += #{i : argmax_k logits[i, k] == labels[i]}  (argmax's rule: the first maximum,
//                      a NaN counts as the maximum)
//     nonfinite_run  = loss is finite ? 0 : nonfinite_run + 1
//     diverged_at    = steps + 1 when nonfinite_run >= limit and diverged_at < 0 (else unchanged)
//     steps         += 1 when count_step (an optimizer step is taken after this micro-batch)
//   logits [N, K] floating, any strides (first: the op's dtype is theirs); labels i64 [N]; loss f32
//   [1]; loss_sum, nonfinite_run, diverged_at, steps f32 [1]; correct i64 [1]. Outputs: the five
//   updated state tensors (aliases).
// Unfused, the same was 19 launches a step (argmax, eq, sum, two adds, and the guard's twelve
// elementwise ops and copies, its step count's two), each a few microseconds of a launch-bound
// step.
#pragma once

#include <cstdint>

namespace ember {

struct TrainStatsAttrs {
  int64_t limit = 1;       // consecutive non-finite losses that make a divergence (>= 1)
  int64_t count_step = 1;  // 1: steps += 1
};

}  // namespace ember
