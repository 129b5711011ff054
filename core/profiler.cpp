#include "core/profiler.h"

#include <atomic>

#if EMBER_WITH_CUDA
#include <nvtx3/nvToolsExt.h>
#endif

namespace ember::profiler {

namespace {
std::atomic<Listener*> g_listener{nullptr};
}

void set_listener(Listener* l) { g_listener.store(l); }
Listener* listener() { return g_listener.load(std::memory_order_acquire); }

Range::Range(const char* name, const char* detail, Device device)
    : name_(name), detail_(detail), device_(device), listener_(listener()) {
#if EMBER_WITH_CUDA
  nvtxRangePushA(name);
#endif
  if (listener_ != nullptr) listener_->on_begin(name_, detail_, device_);
}

Range::~Range() {
  if (listener_ != nullptr) listener_->on_end(name_, detail_, device_);
#if EMBER_WITH_CUDA
  nvtxRangePop();
#endif
}

}  // namespace ember::profiler
