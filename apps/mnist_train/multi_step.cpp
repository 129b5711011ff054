#include "apps/mnist_train/multi_step.h"

#include <cstdio>

#include "core/cuda/runtime.h"
#include "core/runtime.h"
#include "kernels/functional.h"

namespace mnist {

using namespace ember;

MultiStepGraphs::MultiStepGraphs(Device device, int64_t max_steps) : device_(device), max_steps_(max_steps) {}

// The K steps one after another, step j reading hyperparameter row j.
void MultiStepGraphs::steps_of(int64_t k, const Hooks& hooks) {
  for (int64_t j = 0; j < k; ++j) {
    hooks.use_row(j);
    hooks.step(j);
  }
  hooks.use_row(-1);
}

bool MultiStepGraphs::capture(int64_t k, const Hooks& hooks) {
  {
    runtime::AllowSyncScope allow;  // the eager work queued so far must not be captured
    cuda::device_synchronize(device_.index);
  }
  auto graph = std::make_unique<cuda::Graph>();
  try {
    graph->capture_begin(cuda::current_stream(device_.index));
    hooks.capture_start();
    steps_of(k, hooks);
    graph->capture_end();
  } catch (const std::exception& e) {
    hooks.use_row(-1);
    hooks.after_failure();
    failed_ = true;
    notes_.push_back("--graph: a graph of " + std::to_string(k) + " steps cannot be captured (" + e.what() +
                     "); ran one step per launch");
    std::fprintf(stderr,
                 "mnist_train: --graph: a graph of %lld steps cannot be captured (%s); continuing with one "
                 "step per launch\n",
                 static_cast<long long>(k), e.what());
    return false;
  }
  graphs_[k] = std::move(graph);
  return true;
}

void MultiStepGraphs::run(int64_t k, const Hooks& hooks) {
  EMBER_CHECK(!failed_, "MultiStepGraphs::run after a failed capture");
  if (graphs_.count(k) == 0 && !capture(k, hooks)) {
    steps_of(k, hooks);  // the steps the capture did not train, eagerly
    return;
  }
  graphs_.at(k)->replay();
  steps_ += k;
  ++launches_;
}

}  // namespace mnist
