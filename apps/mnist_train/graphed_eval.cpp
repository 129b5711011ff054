#include "apps/mnist_train/graphed_eval.h"

#include "core/cuda/runtime.h"
#include "core/runtime.h"

namespace mnist {

using namespace ember;

Tensor GraphedEval::counts(const void* key, Device device, const std::function<Tensor()>& pass) {
  Split& s = splits_[key];
  if (s.graph) {
    s.graph->replay();
    ++replays_;
    return s.counts;
  }
  if (s.failed || s.passes++ == 0) return pass();  // the first pass warms up
  {
    runtime::AllowSyncScope allow;  // the eager work queued so far must not be captured
    cuda::device_synchronize(device.index);
  }
  s.graph = std::make_unique<cuda::Graph>();
  try {
    s.graph->capture_begin(cuda::current_stream(device.index));
    s.counts = pass();
    s.graph->capture_end();
  } catch (const std::exception& e) {
    s.graph.reset();
    s.counts = Tensor();
    s.failed = true;
    notes_.push_back(std::string("--graph: an evaluation pass cannot be captured (") + e.what() +
                     "); evaluated eagerly");
    return pass();
  }
  s.graph->replay();  // the capture recorded the pass without running it
  ++replays_;
  return s.counts;
}

}  // namespace mnist
