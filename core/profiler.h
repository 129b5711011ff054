// Profiler hooks. The op runner opens a Range around every kernel and every backward; a Range
// always emits an NVTX range (in a CUDA build) so Nsight shows op names, and forwards to the
// active Listener, if any (the Chrome-trace profiler installs one).
#pragma once

#include "core/device.h"

namespace ember::profiler {

class Listener {
 public:
  virtual ~Listener() = default;
  // `name`: the op or range name; `detail`: the kernel variant or "backward"; both outlive the call.
  virtual void on_begin(const char* name, const char* detail, Device device) = 0;
  virtual void on_end(const char* name, const char* detail, Device device) = 0;
};

// Installs (or with nullptr removes) the process-wide listener.
void set_listener(Listener* listener);
Listener* listener();

class Range {
 public:
  Range(const char* name, const char* detail, Device device);
  ~Range();
  Range(const Range&) = delete;
  Range& operator=(const Range&) = delete;

 private:
  const char* name_;
  const char* detail_;
  Device device_;
  Listener* listener_;
};

}  // namespace ember::profiler
