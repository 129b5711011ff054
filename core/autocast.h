// Autocast state: a thread-local, nestable scope that lowers the precision of the ops whose
// policy allows it (see AutocastPolicy in kernels/autocast_policy.h). The op runner reads this
// state and applies the op's policy to its inputs (autocast::apply_policy, declared with the
// policies in kernels/); amp/ builds the user-facing pieces on top.
#pragma once

#include "core/device.h"
#include "core/dtype.h"

namespace ember::autocast {

bool is_enabled(DeviceType device);
DType lower_dtype(DeviceType device);

// Enables (or with enabled=false, disables) autocast for one device type in this scope.
// Nested scopes restore the outer state on exit; leaving the outermost enabled scope clears the
// cast cache.
class Scope {
 public:
  Scope(DeviceType device, DType dtype, bool enabled = true);
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  DeviceType device_;
  bool prev_enabled_;
  DType prev_dtype_;
};

// Turns autocast off for every device type while it lives, without opening a scope (the cast
// cache is kept). The op runner holds one around a kernel: a kernel built from other ops (the CPU
// convolutions call the matmul op) works on the dtypes it was given, as PyTorch's autocast
// excludes itself below an autocast op.
class Suspend {
 public:
  Suspend();
  ~Suspend();
  Suspend(const Suspend&) = delete;
  Suspend& operator=(const Suspend&) = delete;

 private:
  bool prev_[kNumDeviceTypes];
};

// Number of casts the cast cache performed / served since the last reset (for tests and logs).
struct CacheStats {
  uint64_t casts = 0;
  uint64_t hits = 0;
};
CacheStats cache_stats();
void reset_cache_stats();
void clear_cache();

}  // namespace ember::autocast
