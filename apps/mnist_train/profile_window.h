// --profile records a window of 10 optimizer steps after 10 of warm-up, earlier in shorter runs (a
// run of 10 steps or fewer is profiled from its first step). The loop calls before_step() and
// after_step() around each micro-batch with the optimizer step count; write() closes a window the
// run ended inside and saves the trace.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "core/profiler.h"

namespace mnist {

class ProfileWindow {
 public:
  explicit ProfileWindow(int64_t total_steps) : first_(std::min<int64_t>(10, std::max<int64_t>(0, total_steps - 10))) {}

  void before_step(int64_t step);
  void after_step(int64_t step);
  // Saves the trace to `path` (a side output: Note [side outputs] in outputs.h).
  void write(const std::string& path);

 private:
  enum class State { waiting, recording, done };
  ember::profiler::TraceProfiler prof_;
  State state_ = State::waiting;
  int64_t first_, end_ = 0;  // optimizer steps: the window is [first_ or later, end_)
};

}  // namespace mnist
