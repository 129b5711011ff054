// The GPU's busy and idle time between training steps, from CUDA events recorded before and after
// each step (a ring reused every log interval) and read at the interval, when the host has synced
// for the loss anyway. Nothing on the CPU.
#pragma once

#include <vector>

#include "core/cuda/runtime.h"
#include "core/device.h"

namespace mnist {

class StepTimer {
 public:
  explicit StepTimer(ember::Device device) : device_(device) {}

  // Before and after each step.
  void mark();
  // A new epoch: the gap across the evaluation is not idle time between steps.
  void restart() { used_ = 0; }
  // Adds the completed events' times (call after the interval's host read).
  void collect();
  // Share of the GPU's step time spent idle between steps; -1 when nothing was timed.
  double idle_fraction() const;

 private:
  ember::Device device_;
  std::vector<ember::cuda::Event> events_;
  size_t used_ = 0;
  double busy_ms_ = 0, idle_ms_ = 0;
};

}  // namespace mnist
