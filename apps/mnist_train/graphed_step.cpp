#include "apps/mnist_train/graphed_step.h"

#include <cstdio>

#include "core/cuda/runtime.h"
#include "core/runtime.h"
#include "kernels/functional.h"

namespace mnist {

using namespace ember;

GraphedStep::Outcome GraphedStep::run(const Tensor& x, const Tensor& y, int64_t steps_here, const Hooks& hooks) {
  if (graph_) {
    replay(x, y, hooks);
    return Outcome::replayed;
  }
  if (!wanted_ || failed_ || steps_here < kWarmup) {
    hooks.step(x, y);
    return Outcome::eager;
  }
  if (capture(x, y, hooks)) {
    replay(x, y, hooks);  // the capture recorded the step without running it: run it for this batch
    return Outcome::captured;
  }
  hooks.step(x, y);  // the batch the capture did not train
  return Outcome::capture_failed;
}

bool GraphedStep::capture(const Tensor& x, const Tensor& y, const Hooks& hooks) {
  static_x_ = empty(x.shape(), TensorOptions(x.dtype()).device(device_));
  static_y_ = empty(y.shape(), TensorOptions(y.dtype()).device(device_));
  if (hooks.before_capture) hooks.before_capture();
  {
    runtime::AllowSyncScope allow;
    cuda::device_synchronize(device_.index);
  }
  graph_ = std::make_unique<cuda::Graph>();
  try {
    graph_->capture_begin(cuda::current_stream(device_.index));
    if (hooks.capture_start) hooks.capture_start();
    capturing_ = true;
    hooks.step(static_x_, static_y_);
    capturing_ = false;
    graph_->capture_end();
  } catch (const std::exception& e) {
    capturing_ = false;
    graph_.reset();
    failed_ = true;
    if (hooks.after_failure) hooks.after_failure();
    std::fprintf(stderr, "mnist_train: --graph: the training step cannot be captured (%s); continuing eagerly\n",
                 e.what());
    return false;
  }
  return true;
}

void GraphedStep::replay(const Tensor& x, const Tensor& y, const Hooks& hooks) {
  copy_(static_x_, x, true);
  copy_(static_y_, y, true);
  if (hooks.launch) hooks.launch(*graph_);
  else graph_->replay();
}

}  // namespace mnist
