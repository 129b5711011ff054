#include "optim/grad_accumulator.h"

#include "kernels/functional.h"

namespace ember::optim {

GradAccumulator::GradAccumulator(int64_t micro_batches) : n_(micro_batches) {
  EMBER_CHECK(micro_batches >= 1, "GradAccumulator: the number of micro-batches must be >= 1, got ", micro_batches);
}

Tensor GradAccumulator::scale(const Tensor& loss) const { return n_ == 1 ? loss : div(loss, static_cast<double>(n_)); }

bool GradAccumulator::ready() {
  if (++count_ < n_) return false;
  count_ = 0;
  return true;
}

}  // namespace ember::optim
