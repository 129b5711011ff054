#include "core/storage.h"

#include <malloc.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <new>

#include "core/error.h"

namespace ember {

namespace {

std::atomic<size_t> g_host_bytes{0};
std::atomic<size_t> g_host_peak{0};

class CpuAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes) override {
    if (nbytes == 0) return nullptr;
    size_t rounded = (nbytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded);
    EMBER_CHECK(p != nullptr, "out of host memory: could not allocate ", nbytes, " bytes");
    size_t now = g_host_bytes.fetch_add(malloc_usable_size(p), std::memory_order_relaxed) + malloc_usable_size(p);
    size_t peak = g_host_peak.load(std::memory_order_relaxed);
    while (now > peak && !g_host_peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
    }
    return p;
  }
  void deallocate(void* p) override {
    if (p != nullptr) g_host_bytes.fetch_sub(malloc_usable_size(p), std::memory_order_relaxed);
    std::free(p);
  }
  Device device() const override { return kCPU; }
};

}  // namespace

HostAllocatorStats cpu_allocator_stats() {
  return {g_host_bytes.load(std::memory_order_relaxed), g_host_peak.load(std::memory_order_relaxed)};
}

void reset_cpu_peak_stats() { g_host_peak.store(g_host_bytes.load(std::memory_order_relaxed), std::memory_order_relaxed); }

Allocator* cpu_allocator() {
  static CpuAllocator a;
  return &a;
}

Allocator* allocator_for(Device d, bool pinned) {
  if (d.is_cuda()) return cuda_allocator(d.index);
  return pinned ? pinned_allocator() : cpu_allocator();
}

Storage::Storage(size_t nbytes, Allocator* alloc)
    : data_(alloc->allocate(nbytes)), nbytes_(nbytes), device_(alloc->device()), alloc_(alloc) {}

Storage::Storage(void* data, size_t nbytes, Device device, std::function<void(void*)> deleter)
    : data_(data), nbytes_(nbytes), device_(device), deleter_(std::move(deleter)) {}

// Note [no throwing destructors]: a free can fail after an earlier error (a sticky CUDA fault such
// as an illegal address, an invalidated graph capture): the allocator's CUDA calls then return
// that error. A destructor that throws ends the process in std::terminate and hides the error the
// user must see, so ~Storage swallows it: the block is leaked (the device is unusable by then
// anyway) and one line on stderr, for the first such failure only, says what happened.
namespace {
std::atomic<uint64_t> g_failed_frees{0};
void report_failed_free(const char* what) noexcept {
  if (g_failed_frees.fetch_add(1) != 0) return;
  std::fprintf(stderr,
               "ember: warning: freeing memory failed (%s); the memory is leaked. This follows an earlier "
               "error (e.g. a CUDA fault), which is the one to look at; further failed frees are not reported\n",
               what);
}
}  // namespace

uint64_t failed_frees() { return g_failed_frees.load(); }

Storage::~Storage() {
  try {
    if (alloc_ != nullptr) {
      if (data_ != nullptr) alloc_->deallocate(data_);
    } else if (deleter_) {
      deleter_(data_);
    }
  } catch (const std::exception& e) {
    report_failed_free(e.what());
  } catch (...) {
    report_failed_free("unknown exception");
  }
}

}  // namespace ember
