// Profiling. The op runner opens a Range around every kernel and every backward; a Range always
// emits an NVTX range (in a CUDA build, so Nsight shows op names) and forwards to the active
// Listener, if any. TraceProfiler is the listener that writes a Chrome trace (chrome://tracing,
// Perfetto): CPU ranges per thread, and for ops on a CUDA device the GPU time measured with CUDA
// events on the stream they ran on (one track per stream), plus a top-ops table.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/device.h"

namespace ember::profiler {

class Listener {
 public:
  virtual ~Listener() = default;
  // `name`: the op or range name; `detail`: the kernel variant or "backward"; both outlive the call.
  virtual void on_begin(const char* name, const char* detail, Device device) = 0;
  // Runs in Range's destructor, during the unwinding of an op's error too: what it throws is caught
  // there and reported once on stderr (Note [no abort] in core/error.h). A listener whose end can
  // fail keeps the failure for its owner instead (TraceProfiler does).
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

struct OpStats {
  std::string name;
  int64_t calls = 0;
  double cpu_us = 0;  // host time inside the op (launch overhead for CUDA ops)
  double gpu_us = 0;  // device time between the events around the op's kernels
};

class TraceProfiler final : public Listener {
 public:
  TraceProfiler();
  ~TraceProfiler() override;
  TraceProfiler(const TraceProfiler&) = delete;
  TraceProfiler& operator=(const TraceProfiler&) = delete;

  // Installs this profiler as the listener (and records the GPU time reference).
  void start();
  // Uninstalls it. Collected events stay until clear().
  void stop();
  void clear();
  bool active() const { return active_; }

  void on_begin(const char* name, const char* detail, Device device) override;
  void on_end(const char* name, const char* detail, Device device) override;

  // Resolves GPU times (synchronises the devices: call it outside the measured region) and
  // writes Chrome trace JSON. Returns the number of events written. Throws, writing nothing, when
  // a range's GPU timing failed as it closed (on_end cannot throw: it keeps the first failure).
  size_t write_chrome_trace(const std::string& path);
  // Per-op totals, sorted by GPU time when there is any, else CPU time.
  std::vector<OpStats> op_stats();
  // A printable table of the top `n` ops.
  std::string top_ops_table(size_t n = 15);

  struct Impl;  // (opaque)

 private:
  std::unique_ptr<Impl> impl_;
  bool active_ = false;
};

}  // namespace ember::profiler
