#include "apps/mnist_train/nonfinite_guard.h"

#include "core/autograd/node.h"
#include "core/runtime.h"
#include "kernels/functional.h"

namespace mnist {

using namespace ember;

NonFiniteGuard::NonFiniteGuard(Device device, int limit) : limit_(limit) {
  run_ = zeros({1}, TensorOptions(DType::f32).device(device));
  diverged_at_ = full({1}, -1.0, TensorOptions(DType::f32).device(device));
  step_ = zeros({1}, TensorOptions(DType::f32).device(device));
}

void NonFiniteGuard::start_at(int64_t step) {
  autograd::NoGradGuard ng;
  step_.fill_(static_cast<double>(step));
}

void NonFiniteGuard::observe(const Tensor& loss, const Tensor& logits, const Tensor& labels, Tensor& loss_sum,
                             Tensor& correct, bool stepped) {
  autograd::NoGradGuard ng;
  train_stats_(logits, labels, loss, loss_sum, correct, run_, diverged_at_, step_, limit_, stepped);
}

void NonFiniteGuard::read() {
  if (diverged_step_ >= 0) return;
  runtime::AllowSyncScope allow;
  const double at = diverged_at_.item();
  if (at >= 0) diverged_step_ = static_cast<int64_t>(at);
}

}  // namespace mnist
