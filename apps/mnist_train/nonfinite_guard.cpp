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

void NonFiniteGuard::observe(const Tensor& loss) {
  autograd::NoGradGuard ng;
  // NaN or inf gives l - l != 0
  Tensor run = where(ne(sub(loss, loss), 0.0), add(run_, 1.0), 0.0);
  Tensor at = where(ge(run, static_cast<double>(limit_)), where(lt(diverged_at_, 0.0), add(step_, 1.0), diverged_at_),
                    diverged_at_);
  copy_(run_, run);
  copy_(diverged_at_, at);
}

void NonFiniteGuard::stepped() {
  autograd::NoGradGuard ng;
  copy_(step_, add(step_, 1.0));
}

void NonFiniteGuard::read() {
  if (diverged_step_ >= 0) return;
  runtime::AllowSyncScope allow;
  const double at = diverged_at_.item();
  if (at >= 0) diverged_step_ = static_cast<int64_t>(at);
}

}  // namespace mnist
