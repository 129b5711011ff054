#include "core/autocast.h"

#include <array>

#include "core/autocast_cache.h"
#include "core/error.h"

namespace ember::autocast {

namespace {
struct State {
  std::array<bool, kNumDeviceTypes> enabled{};
  std::array<DType, kNumDeviceTypes> dtype{DType::bf16, DType::f16};
  int depth = 0;  // enabled scopes currently open
  CastCache cache;
  CacheStats stats;
};
thread_local State t_state;
}  // namespace

bool is_enabled(DeviceType device) { return t_state.enabled[static_cast<size_t>(device)]; }
DType lower_dtype(DeviceType device) { return t_state.dtype[static_cast<size_t>(device)]; }

Scope::Scope(DeviceType device, DType dtype, bool enabled)
    : device_(device),
      prev_enabled_(t_state.enabled[static_cast<size_t>(device)]),
      prev_dtype_(t_state.dtype[static_cast<size_t>(device)]) {
  EMBER_CHECK(!enabled || dtype == DType::f16 || dtype == DType::bf16, "autocast dtype must be f16 or bf16, got ",
              dtype);
  EMBER_CHECK(!enabled || device != DeviceType::cpu || dtype == DType::bf16,
              "autocast on the CPU supports bf16 only (got ", dtype, ")");
  t_state.enabled[static_cast<size_t>(device)] = enabled;
  if (enabled) t_state.dtype[static_cast<size_t>(device)] = dtype;
  ++t_state.depth;
}

Scope::~Scope() {
  t_state.enabled[static_cast<size_t>(device_)] = prev_enabled_;
  t_state.dtype[static_cast<size_t>(device_)] = prev_dtype_;
  if (--t_state.depth == 0) t_state.cache.end_scope();
}

Suspend::Suspend() {
  for (int i = 0; i < kNumDeviceTypes; ++i) {
    prev_[i] = t_state.enabled[static_cast<size_t>(i)];
    t_state.enabled[static_cast<size_t>(i)] = false;
  }
}

Suspend::~Suspend() {
  for (int i = 0; i < kNumDeviceTypes; ++i) t_state.enabled[static_cast<size_t>(i)] = prev_[i];
}

CacheStats cache_stats() { return t_state.stats; }
void reset_cache_stats() { t_state.stats = {}; }
void clear_cache() { t_state.cache.clear(); }

CastCache& thread_cache() { return t_state.cache; }
CacheStats& thread_cache_stats() { return t_state.stats; }

}  // namespace ember::autocast
