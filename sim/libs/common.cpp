// The vendor emulations' shared state (sim/libs/common.h).
#include "sim/libs/common.h"

#include "sim/internal.h"

namespace ember::sim::libs {

namespace {
thread_local std::string t_last_error;
}

void set_last_error(std::string what) { t_last_error = std::move(what); }
std::string last_error() { return t_last_error; }

bool device_span_ok(const void* p, size_t bytes) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  const Allocation* al = find_allocation(a);
  if (al == nullptr || al->kind != MemKind::device || al->device != current_device()) return false;
  // the whole allocation: a caching allocator's bound for the tensor takes effect in stream order,
  // later than this call; the emulated kernels check that bound when they run
  return bytes <= al->size && a - al->base <= al->size - bytes;
}

}  // namespace ember::sim::libs
