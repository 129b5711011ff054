// amp::autocast: the user-facing autocast scope (torch.autocast). While it lives, ops on `device`
// run in the precision their autocast policy asks for (kernels/registry.h AutocastPolicy): matmul,
// linear and conv in `dtype`, softmax, losses, reductions and exp/log/pow in f32, binary ops and
// cat in the widest input type; views, activations and copies as they come.
//
//   { amp::autocast ac(DeviceType::cuda, DType::f16); loss = model_and_loss(x, y); }
//   { amp::autocast ac(DeviceType::cpu); logits = model(x); }  // the device's default: bf16 on the CPU
//
// Scopes nest: an inner scope (enabled=false turns autocast off, e.g. around a part that must run
// in f32) restores the outer state when it ends. Weights (leaves that require grad) are cast once
// per outermost scope and the casts reused (core/autocast_cache.h); run backward after the scope
// ends, as in PyTorch. Autocast state is per thread and per device type: a CUDA scope leaves CPU
// ops alone.
//
// This is a thin wrapper over ember::autocast::Scope (core/autocast.h), which the op runner reads.
#pragma once

#include "core/autocast.h"
#include "core/device.h"
#include "core/dtype.h"

namespace ember::amp {

class autocast {
 public:
  // The lower-precision dtype a device's autocast uses by default (PyTorch's): f16 on CUDA, bf16
  // on the CPU (the only one the CPU supports).
  static constexpr DType default_dtype(DeviceType device) {
    return device == DeviceType::cuda ? DType::f16 : DType::bf16;
  }

  explicit autocast(DeviceType device, bool enabled = true) : autocast(device, default_dtype(device), enabled) {}
  autocast(DeviceType device, DType dtype, bool enabled = true)
      : scope_(device, dtype, enabled), device_(device), dtype_(dtype), enabled_(enabled) {}
  autocast(const autocast&) = delete;
  autocast& operator=(const autocast&) = delete;

  DeviceType device() const { return device_; }
  DType dtype() const { return dtype_; }
  // What this scope asked for (the state inside it).
  bool enabled() const { return enabled_; }

  // The current state of this thread (whichever scope set it).
  static bool is_enabled(DeviceType device) { return ::ember::autocast::is_enabled(device); }
  static DType current_dtype(DeviceType device) { return ::ember::autocast::lower_dtype(device); }

 private:
  ::ember::autocast::Scope scope_;
  DeviceType device_;
  DType dtype_;
  bool enabled_;
};

}  // namespace ember::amp
