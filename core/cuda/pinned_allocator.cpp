// The caching pinned (page-locked) host allocator.
//
// Note [pinned reuse]: a pinned buffer handed to cudaMemcpyAsync is read by the copy engine after
// the host call returns. Freeing the tensor must not let the next batch overwrite bytes that are
// still being copied, so every stream that reads a block records an event on it
// (record_pinned_use, which Tensor::to(non_blocking) calls), and a freed block goes back to the
// free list only once all those events have completed. cudaHostAlloc is slow (it maps pages for
// the device), so freed blocks are cached by size class and reused. A copy queued on a stream that
// is capturing a CUDA graph reads the block at every replay of that graph: such a block is never
// reused (the allocator cannot tell when the graph is gone), and no event is recorded for it (it
// would be the capture's). While any capture is under way, the cache is not released (cudaFreeHost
// synchronises the device: Note [allocator during capture] in caching_allocator.cpp).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <vector>

#include "core/cuda/check.h"
#include "core/cuda/device_guard.h"
#include "core/cuda/runtime.h"
#include "core/storage.h"

namespace ember::cuda {

namespace {

// An event recorded on a stream of `device`. Several GPUs in one process: one pinned block can be
// copied to or from every device, and an event can only be recorded on a stream of the device it
// was created on, so each event remembers its device and is reused only for that device.
struct UseEvent {
  cudaEvent_t event;
  int device;
};

struct HostBlock {
  void* ptr = nullptr;
  size_t size = 0;
  bool in_use = false;
  bool captured = false;         // a graph's replays read or write it: never reused
  bool broken = false;           // an event of its uses failed (a sticky error): never reused
  std::vector<UseEvent> events;  // recorded by streams that read or wrote the block
};

class PinnedAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes) override {
    if (nbytes == 0) return nullptr;
    size_t size = allocator_round_size(nbytes);
    std::lock_guard<std::mutex> lock(mu_);
    process_events();
    auto& list = free_[size];
    if (!list.empty()) {
      HostBlock* b = list.back();
      list.pop_back();
      b->in_use = true;
      ++stats_.num_cache_hits;
      stats_.allocated_bytes += b->size;
      stats_.cached_bytes -= b->size;
      return b->ptr;
    }
    void* p = nullptr;
    RelaxedCapture relaxed;  // host memory is not stream work; a loader worker may allocate while a step captures
    cudaError_t err = cudaHostAlloc(&p, size, cudaHostAllocPortable);
    if (err == cudaErrorMemoryAllocation && captures_underway() == 0) {
      cudaGetLastError();
      release_free_locked();
      err = cudaHostAlloc(&p, size, cudaHostAllocPortable);
    }
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      throw OutOfMemoryError(str("out of pinned host memory: tried to allocate ", nbytes, " bytes (",
                                 stats_.allocated_bytes, " in use, ", stats_.cached_bytes, " cached)"));
    }
    EMBER_CUDA_CHECK(err);
    ++stats_.num_host_allocs;
    auto* b = new HostBlock{p, size, true, {}};
    blocks_[reinterpret_cast<uintptr_t>(p)] = b;
    stats_.allocated_bytes += size;
    return p;
  }

  void deallocate(void* p) override {
    if (p == nullptr) return;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = blocks_.find(reinterpret_cast<uintptr_t>(p));
    EMBER_CHECK(it != blocks_.end(), "pinned allocator: free of unknown pointer ", p);
    HostBlock* b = it->second;
    b->in_use = false;
    stats_.allocated_bytes -= b->size;
    if (b->captured || b->broken) return;  // kept, never handed out again
    stats_.cached_bytes += b->size;
    if (b->events.empty()) free_[b->size].push_back(b);
    else waiting_.push_back(b);
  }

  Device device() const override { return kCPU; }
  bool pinned() const override { return true; }

  void record(const void* ptr, Stream s) {
    std::lock_guard<std::mutex> lock(mu_);
    HostBlock* b = find_locked(ptr);
    EMBER_CHECK(b != nullptr, "record_pinned_use: ", ptr, " is not in a pinned block");
    // A long-lived block (a loader's staging buffer) is copied from many times without being
    // freed: drop its completed events here, or they would pile up until the next allocation.
    throw_if_failed(drop_completed(*b));
    if (s.is_capturing()) {
      b->captured = true;
      return;
    }
    DeviceGuard on_device(s.device());  // create and record the event on the stream's device
    auto& spare = spare_events_[s.device()];
    cudaEvent_t e = nullptr;
    if (!spare.empty()) {
      e = spare.back();
      spare.pop_back();
    } else {
      EMBER_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    }
    EMBER_CUDA_CHECK(cudaEventRecord(e, static_cast<cudaStream_t>(s.handle())));
    b->events.push_back({e, s.device()});
  }

  bool contains(const void* ptr) {
    std::lock_guard<std::mutex> lock(mu_);
    return find_locked(ptr) != nullptr;
  }

  PinnedStats stats() {
    std::lock_guard<std::mutex> lock(mu_);
    PinnedStats s = stats_;
    s.num_waiting_blocks = waiting_.size();
    return s;
  }

  void empty_cache() {
    std::lock_guard<std::mutex> lock(mu_);
    process_events();
    if (captures_underway() == 0) release_free_locked();
  }

 private:
  HostBlock* find_locked(const void* ptr) {
    auto key = reinterpret_cast<uintptr_t>(ptr);
    auto it = blocks_.upper_bound(key);
    if (it == blocks_.begin()) return nullptr;
    --it;
    HostBlock* b = it->second;
    return key < it->first + b->size ? b : nullptr;
  }

  // Moves the completed events of a block to the spare list. Relaxed capture mode: the events are
  // copies' (never a capture's), and a query would otherwise break a global-mode capture on any
  // thread (Note [event queries during capture] in caching_allocator.cpp).
  // An event that fails (a sticky error) tells nothing: its block is never reused, and the error
  // is returned here, cleared from cudaGetLastError (not to be blamed on the next kernel).
  cudaError_t drop_completed(HostBlock& b) {
    RelaxedCapture relaxed;
    auto& ev = b.events;
    cudaError_t failure = cudaSuccess;
    for (size_t i = 0; i < ev.size();) {
      const cudaError_t q = cudaEventQuery(ev[i].event);
      if (q != cudaSuccess) {
        cudaGetLastError();
        if (q != cudaErrorNotReady) {
          b.broken = true;
          if (failure == cudaSuccess) failure = q;
        }
        ++i;
        continue;
      }
      spare_events_[ev[i].device].push_back(ev[i].event);
      ev[i] = ev.back();
      ev.pop_back();
    }
    return failure;
  }
  static void throw_if_failed(cudaError_t failure) {
    if (failure != cudaSuccess)
      throw CudaError(str("pinned allocator: whether a copy still uses a freed pinned block cannot be known (",
                          cudaGetErrorName(failure), ": ", cudaGetErrorString(failure), "); the block is not reused"),
                      static_cast<int>(failure));
  }

  // Drops completed events of every block; waiting blocks whose events are all done become free.
  void process_events() {
    cudaError_t failure = cudaSuccess;
    for (auto& [addr, b] : blocks_)
      if (cudaError_t f = drop_completed(*b); failure == cudaSuccess) failure = f;
    for (auto it = waiting_.begin(); it != waiting_.end();) {
      if ((*it)->broken) {
        stats_.cached_bytes -= (*it)->size;
        it = waiting_.erase(it);
      } else if ((*it)->events.empty()) {
        free_[(*it)->size].push_back(*it);
        it = waiting_.erase(it);
      } else {
        ++it;
      }
    }
    throw_if_failed(failure);
  }

  void release_free_locked() {
    for (auto& [size, list] : free_) {
      for (HostBlock* b : list) {
        cudaFreeHost(b->ptr);
        cudaGetLastError();
        stats_.cached_bytes -= b->size;
        blocks_.erase(reinterpret_cast<uintptr_t>(b->ptr));
        delete b;
      }
      list.clear();
    }
  }

  std::mutex mu_;
  std::map<uintptr_t, HostBlock*> blocks_;
  std::map<size_t, std::vector<HostBlock*>> free_;
  std::vector<HostBlock*> waiting_;
  std::map<int, std::vector<cudaEvent_t>> spare_events_;  // per device
  PinnedStats stats_;
};

PinnedAllocator& pinned() {
  static auto* a = new PinnedAllocator();  // never destroyed: pinned tensors may outlive main
  return *a;
}

}  // namespace

PinnedStats pinned_stats() { return device_count() > 0 ? pinned().stats() : PinnedStats{}; }

void record_pinned_use(const void* ptr, Stream s) { pinned().record(ptr, s); }

bool is_pinned_pointer(const void* ptr) { return device_count() > 0 && pinned().contains(ptr); }

void pinned_empty_cache() {
  if (device_count() > 0) pinned().empty_cache();
}

}  // namespace ember::cuda

namespace ember {
Allocator* pinned_allocator() {
  if (cuda::device_count() == 0) return cpu_allocator();
  return &cuda::pinned();
}
}  // namespace ember
