// The stream-aware caching device allocator.
//
// Note [caching allocator]: cudaMalloc and cudaFree synchronise the device and cost tens of
// microseconds, so a training loop must not call them per step. Requests are rounded to a size
// class (512-byte steps up to 1 MiB, then eight steps per power of two, so at most 12.5% waste) and
// freed blocks are kept in free lists keyed by (pool, stream, size class). A block freed on stream S
// is reused at once by the next request on S: work on S is ordered, so the new user cannot run
// before the old one finished. A block that was also used on other streams (record_stream) is
// parked until an event recorded on each of those streams at free time has completed.
// Steady state: after the first step every request is a cache hit and no cudaMalloc happens.
//
// On cudaMalloc failure the cache is released (cudaFree of every unused block) and the
// allocation retried once; a second failure raises OutOfMemoryError with the request, the bytes in
// use, cached, and the driver's free/total.
//
// Private pools (MemPool/PoolScope) give CUDA graph capture its own blocks: what a graph allocates
// and frees during capture never returns to the shared cache, so eager code cannot take a buffer
// the graph's replays still write. Device allocations under an active capture switch the thread to
// relaxed capture mode (cudaMalloc is not a stream operation and is legal then).
//
// EMBER_CUDA_ALLOC=passthrough: every allocation is a cudaMalloc and every free a cudaFree, so
// compute-sanitizer sees each buffer's true bounds. The SIMT simulator needs no such mode: the
// allocator tells it, in stream order, how much of each block a tensor uses and when the block goes
// back to the free list (annotate below), so it catches reads past a tensor's end and uses after
// free inside cached blocks.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <deque>
#include <map>
#include <mutex>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "core/cuda/check.h"
#include "core/cuda/device_guard.h"
#include "core/cuda/runtime.h"
#include "core/runtime.h"
#include "core/storage.h"
#if EMBER_CUDA_SIM
#include "sim/sim.h"
#endif

namespace ember::cuda {

namespace {

constexpr int kMaxDevices = 16;
constexpr size_t kSmallLimit = size_t{1} << 20;

struct Block {
  void* ptr = nullptr;
  size_t size = 0;
  cudaStream_t stream = nullptr;
  uint64_t pool = 0;
  std::vector<cudaStream_t> uses;  // other streams that used the block (record_stream)
};

struct Pending {
  Block* block;
  std::vector<cudaEvent_t> events;
};

using FreeKey = std::tuple<uint64_t, cudaStream_t, size_t>;

thread_local std::array<uint64_t, kMaxDevices> t_pool{};  // active private pool per device (0 = shared)
std::atomic<uint64_t> g_next_pool{1};

// The part of block `p` a tensor now uses (0: back in the free list), in `s` order; nothing on a GPU.
inline void annotate(void* p, size_t bytes, cudaStream_t s) {
#if EMBER_CUDA_SIM
  sim::annotate_block(p, bytes, s);
#else
  static_cast<void>(p);
  static_cast<void>(bytes);
  static_cast<void>(s);
#endif
}

bool is_capturing(cudaStream_t s) {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(s, &st) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return st == cudaStreamCaptureStatusActive;
}

class DeviceAllocator {
 public:
  explicit DeviceAllocator(int device) : device_(device) {}

  void* allocate(size_t nbytes) {
    if (nbytes == 0) return nullptr;
    int prev = -1;
    EMBER_CUDA_CHECK(cudaGetDevice(&prev));
    if (prev != device_) EMBER_CUDA_CHECK(cudaSetDevice(device_));
    struct Restore {
      int d;
      ~Restore() {
        if (d >= 0) cudaSetDevice(d);
      }
    } restore{prev != device_ ? prev : -1};

    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.num_allocs;
    cudaStream_t stream = static_cast<cudaStream_t>(current_stream(device_).handle());
    if (allocator_passthrough()) {
      void* p = device_malloc(nbytes, nbytes, stream);
      auto* b = new Block{p, nbytes, stream, 0, {}};
      live_[p] = b;
      add_allocated(nbytes);
      annotate(p, nbytes, stream);
      return p;
    }
    size_t size = allocator_round_size(nbytes);
    uint64_t pool = t_pool[device_];
    process_pending();
    auto it = free_.find(FreeKey{pool, stream, size});
    if (it != free_.end() && !it->second.empty()) {
      Block* b = it->second.back();
      it->second.pop_back();
      ++stats_.num_cache_hits;
      live_[b->ptr] = b;
      add_allocated(b->size);
      annotate(b->ptr, nbytes, stream);
      return b->ptr;
    }
    void* p = device_malloc(size, nbytes, stream);
    auto* b = new Block{p, size, stream, pool, {}};
    live_[p] = b;
    add_allocated(size);
    annotate(p, nbytes, stream);
    return p;
  }

  void deallocate(void* p) {
    if (p == nullptr) return;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.find(p);
    EMBER_CHECK(it != live_.end(), "CUDA caching allocator: free of unknown pointer ", p);
    Block* b = it->second;
    live_.erase(it);
    stats_.allocated_bytes -= b->size;
    if (allocator_passthrough()) {
      runtime::note_host_sync("cudaFree (EMBER_CUDA_ALLOC=passthrough)");
      cudaFree(b->ptr);
      ++stats_.num_device_frees;
      stats_.reserved_bytes -= b->size;
      delete b;
      return;
    }
    if (!pools_alive_.count(b->pool) && b->pool != 0) b->pool = 0;  // its pool is gone: share it
    if (!b->uses.empty() && !is_capturing(b->stream)) {
      DeviceGuard on_device(device_,
                            DeviceGuard::kNoThrow);  // the events: created and recorded on this allocator's device
      Pending pend{b, {}};
      for (cudaStream_t s : b->uses) {
        cudaEvent_t e = get_event();
        cudaError_t err = cudaEventRecord(e, s);
        if (err != cudaSuccess) {
          // The other streams' use of the block cannot be ordered any more (a sticky error or an
          // invalidated capture): the block is never reused, but stays owned here (not leaked),
          // and the error goes to the caller (~Storage reports it once and goes on).
          events_.push_back(e);
          for (cudaEvent_t x : pend.events) events_.push_back(x);
          b->uses.clear();
          unusable_.push_back(b);
          EMBER_CUDA_CHECK(err);
        }
        pend.events.push_back(e);
      }
      b->uses.clear();
      pending_.push_back(std::move(pend));
      return;
    }
    b->uses.clear();
    annotate(b->ptr, 0, b->stream);
    free_[FreeKey{b->pool, b->stream, b->size}].push_back(b);
  }

  void record_stream(void* p, cudaStream_t s) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.find(p);
    EMBER_CHECK(it != live_.end(), "record_stream: pointer ", p, " is not the start of a live device block");
    Block* b = it->second;
    if (s == b->stream) return;
    if (std::find(b->uses.begin(), b->uses.end(), s) == b->uses.end()) b->uses.push_back(s);
  }

  // Releases unused blocks of `pool` (UINT64_MAX: the shared pool 0 only, as empty_cache does).
  void release_cached(uint64_t pool) {
    std::lock_guard<std::mutex> lock(mu_);
    release_locked(pool);
  }

  void pool_created(uint64_t id) {
    std::lock_guard<std::mutex> lock(mu_);
    pools_alive_.insert({id, true});
  }

  void pool_destroyed(uint64_t id) {
    std::lock_guard<std::mutex> lock(mu_);
    pools_alive_.erase(id);
    release_locked(id);
    for (auto& [ptr, b] : live_)
      if (b->pool == id) b->pool = 0;
  }

  AllocatorStats stats() {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }
  void reset_peaks() {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.peak_allocated_bytes = stats_.allocated_bytes;
    stats_.peak_reserved_bytes = stats_.reserved_bytes;
  }

 private:
  void add_allocated(size_t n) {
    stats_.allocated_bytes += n;
    stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
  }

  void* device_malloc(size_t size, size_t requested, cudaStream_t stream) {
    void* p = nullptr;
    cudaError_t err;
    {
      RelaxedCapture relaxed;
      err = cudaMalloc(&p, size);
    }
    if (err == cudaErrorMemoryAllocation && !is_capturing(stream)) {
      cudaGetLastError();
      ++stats_.num_oom_retries;
      release_locked(0);
      err = cudaMalloc(&p, size);
    }
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      ++stats_.num_ooms;
      size_t free_b = 0, total = 0;
      cudaMemGetInfo(&free_b, &total);
      cudaGetLastError();
      throw OutOfMemoryError(str("CUDA out of memory on cuda:", device_, ": tried to allocate ",
                                 format_bytes(requested), " (rounded to ", format_bytes(size), "); ember has ",
                                 format_bytes(stats_.allocated_bytes), " in use and ",
                                 format_bytes(stats_.reserved_bytes - stats_.allocated_bytes),
                                 " cached; the device has ", format_bytes(free_b), " free of ", format_bytes(total),
                                 " (the cache was released and the allocation retried once)"));
    }
    EMBER_CUDA_CHECK(err);
    ++stats_.num_device_mallocs;
    stats_.reserved_bytes += size;
    stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
    return p;
  }

  void release_locked(uint64_t pool) {
    DeviceGuard on_device(device_,
                          DeviceGuard::kNoThrow);  // cudaFree on the blocks' own device (empty_cache loops devices)
    process_pending();
    bool synced = false;
    for (auto it = free_.begin(); it != free_.end();) {
      if (std::get<0>(it->first) != pool) {
        ++it;
        continue;
      }
      for (Block* b : it->second) {
        if (!synced) {
          runtime::note_host_sync("releasing the CUDA cache (cudaFree)");
          synced = true;
        }
        cudaFree(b->ptr);
        cudaGetLastError();
        ++stats_.num_device_frees;
        stats_.reserved_bytes -= b->size;
        delete b;
      }
      it = free_.erase(it);
    }
  }

  void process_pending() {
    // Note [event queries during capture]: querying an event is potentially unsafe while a capture
    // is underway (global mode: on any thread) and invalidates the capture: an H200 lost --graph captures with the host
    // loader this way, whose batches leave blocks pending on the copy stream's events. The events belong to finished or
    // eager work, never to the capture, so relaxed mode is the honest setting.
    if (pending_.empty()) return;  // the common case: no mode switch on every allocation
    RelaxedCapture relaxed;
    for (auto it = pending_.begin(); it != pending_.end();) {
      bool done = true;
      for (cudaEvent_t e : it->events) {
        cudaError_t q = cudaEventQuery(e);
        if (q == cudaErrorNotReady) {
          cudaGetLastError();
          done = false;
          break;
        }
      }
      if (!done) {
        ++it;
        continue;
      }
      for (cudaEvent_t e : it->events) events_.push_back(e);
      Block* b = it->block;
      if (!pools_alive_.count(b->pool) && b->pool != 0) b->pool = 0;
      annotate(b->ptr, 0, b->stream);
      free_[FreeKey{b->pool, b->stream, b->size}].push_back(b);
      it = pending_.erase(it);
    }
  }

  cudaEvent_t get_event() {
    if (!events_.empty()) {
      cudaEvent_t e = events_.back();
      events_.pop_back();
      return e;
    }
    cudaEvent_t e = nullptr;
    RelaxedCapture relaxed;
    EMBER_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return e;
  }

  static std::string format_bytes(size_t b) {
    const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = static_cast<double>(b);
    int u = 0;
    while (v >= 1024 && u < 4) {
      v /= 1024;
      ++u;
    }
    char buf[64];
    std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", v, units[u]);
    return buf;
  }

  int device_;
  std::mutex mu_;
  std::unordered_map<void*, Block*> live_;
  std::map<FreeKey, std::vector<Block*>> free_;
  std::deque<Pending> pending_;
  std::vector<cudaEvent_t> events_;
  std::vector<Block*> unusable_;  // blocks whose free failed: never handed out again
  std::map<uint64_t, bool> pools_alive_;
  AllocatorStats stats_;
};

DeviceAllocator& device_allocator(int device) {
  EMBER_CHECK(device >= 0 && device < device_count(), "CUDA device ", device, " is not available (",
              device_count() == 0 ? unavailable_reason() : std::to_string(device_count()) + " device(s)", ")");
  static std::array<DeviceAllocator*, kMaxDevices> allocs{};
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  // Deliberately never destroyed: tensors in static objects may be freed after main returns.
  if (allocs[device] == nullptr) allocs[device] = new DeviceAllocator(device);
  return *allocs[device];
}

class CudaAllocatorAdapter final : public Allocator {
 public:
  explicit CudaAllocatorAdapter(int device) : device_(device) {}
  void* allocate(size_t nbytes) override { return device_allocator(device_).allocate(nbytes); }
  void deallocate(void* p) override { device_allocator(device_).deallocate(p); }
  Device device() const override { return Device(DeviceType::cuda, device_); }

 private:
  int device_;
};

}  // namespace

bool allocator_passthrough() {
  static const bool on = runtime::env("EMBER_CUDA_ALLOC") == "passthrough";
  return on;
}

size_t allocator_round_size(size_t n) {
  if (n <= kSmallLimit) return std::max<size_t>(512, (n + 511) / 512 * 512);
  size_t p = size_t{1} << (63 - __builtin_clzll(n));  // largest power of two <= n
  size_t step = p / 8;
  return (n + step - 1) / step * step;
}

AllocatorStats allocator_stats(int device) { return device_allocator(device).stats(); }
void reset_peak_stats(int device) { device_allocator(device).reset_peaks(); }

void empty_cache() {
  for (int d = 0; d < device_count(); ++d) device_allocator(d).release_cached(0);
}

void record_stream(void* ptr, Stream s) {
  device_allocator(s.device()).record_stream(ptr, static_cast<cudaStream_t>(s.handle()));
}

MemPool::MemPool(int device) : device_(device), id_(g_next_pool.fetch_add(1)) {
  device_allocator(device).pool_created(id_);
}
MemPool::~MemPool() {
  try {
    device_allocator(device_).pool_destroyed(id_);
  } catch (...) {
  }
}

PoolScope::PoolScope(MemPool& pool) : prev_(t_pool[pool.device()]), device_(pool.device()) {
  t_pool[device_] = pool.id();
}
PoolScope::~PoolScope() { t_pool[device_] = prev_; }

}  // namespace ember::cuda

namespace ember {
Allocator* cuda_allocator(int index) {
  EMBER_CHECK(
      index >= 0 && index < cuda::device_count(), "CUDA device ", index, " is not available (",
      cuda::device_count() == 0 ? cuda::unavailable_reason() : std::to_string(cuda::device_count()) + " device(s)",
      ")");
  static std::array<cuda::CudaAllocatorAdapter*, 16> adapters{};
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  if (adapters[index] == nullptr) adapters[index] = new cuda::CudaAllocatorAdapter(index);
  return adapters[index];
}
}  // namespace ember
