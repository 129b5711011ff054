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
// Note [allocator during capture]: while a capture is under way on a device (Graph tells the
// allocator: allocator_capture_begin/end), work queued on the capturing streams does not run now
// but at every replay, so three things change:
// - A block that record_stream marks as used by a capturing stream is read by the graph's
//   replays: after its tensor is freed it is held until that graph's pool is destroyed (the graph
//   with it), then freed as usual. An event recorded now on that stream would stand for a point of
//   the graph, not for work that finishes.
// - A freed block with uses on other streams needs an event recorded on each of them; while any
//   capture is under way on its device, one of them may be capturing, so the block is deferred and
//   its events are recorded when the last capture on the device ends.
// - The cache is not released, not even to retry an allocation that ran out of memory: cudaFree
//   (and cudaFreeHost) is potentially unsafe during a capture, and a global-mode capture (PyTorch's
//   default, CaptureMode::global here) is invalidated by such a call from any thread that is not in
//   relaxed mode. (A thread-local capture is not: an H200 ends one fine after another thread's
//   cudaMalloc and cudaFree, tests/test_graph_capture_gpu.cu.)
//
// EMBER_CUDA_ALLOC=passthrough: every allocation is a cudaMalloc and every free a cudaFree, so
// compute-sanitizer sees each buffer's true bounds. The SIMT simulator needs no such mode: the
// allocator tells it, in stream order, how much of each block a tensor uses and when the block goes
// back to the free list (annotate below), so it catches reads past a tensor's end and uses after
// free inside cached blocks.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
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
  uint64_t held_by = 0;            // a graph's pool whose captured work used it (kHeldForever: no pool)
};

// A block used by captured work that no graph pool owns (a capture outside cuda::Graph): its
// replays may come at any time, so it is never reused.
constexpr uint64_t kHeldForever = UINT64_MAX;

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

// Captures under way per device (Note [allocator during capture]).
std::array<std::atomic<int>, kMaxDevices> g_captures{};

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
    release_freed(b);
  }

  void record_stream(void* p, cudaStream_t s) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = live_.find(p);
    EMBER_CHECK(it != live_.end(), "record_stream: pointer ", p, " is not the start of a live device block");
    Block* b = it->second;
    if (is_capturing(s)) {  // used by a graph's replays (Note [allocator during capture])
      if (b->held_by == 0) b->held_by = t_pool[device_] != 0 ? t_pool[device_] : kHeldForever;
      return;
    }
    if (s == b->stream) return;
    if (std::find(b->uses.begin(), b->uses.end(), s) == b->uses.end()) b->uses.push_back(s);
  }

  void capture_begin() {
    std::lock_guard<std::mutex> lock(mu_);
    ++g_captures[device_];
  }
  void capture_end() {
    std::lock_guard<std::mutex> lock(mu_);
    if (--g_captures[device_] > 0) return;
    std::vector<Block*> deferred;
    deferred.swap(deferred_);
    for (size_t i = 0; i < deferred.size(); ++i) {
      try {
        release_freed(deferred[i]);
      } catch (...) {  // the rest stay owned, never reused, and the first error goes to the caller
        for (size_t j = i + 1; j < deferred.size(); ++j) unusable_.push_back(deferred[j]);
        throw;
      }
    }
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
    for (auto& [ptr, b] : live_) {
      if (b->pool == id) b->pool = 0;
      if (b->held_by == id) b->held_by = 0;
    }
    // the graph that used these blocks is gone (Note [allocator during capture])
    auto held = held_.extract(id);
    if (held.empty()) return;
    for (Block* b : held.mapped()) {
      b->held_by = 0;
      release_freed(b);
    }
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

  // A freed block on its way back: held for a graph, deferred past a capture, pending on other
  // streams' events, or free at once (Note [allocator during capture]). mu_ held.
  void release_freed(Block* b) {
    if (b->held_by == kHeldForever) {
      unusable_.push_back(b);
      return;
    }
    if (b->held_by != 0) {
      held_[b->held_by].push_back(b);
      return;
    }
    if (!pools_alive_.count(b->pool) && b->pool != 0) b->pool = 0;  // its pool is gone: share it
    if (!b->uses.empty() && g_captures[device_] > 0) {
      deferred_.push_back(b);
      return;
    }
    if (!b->uses.empty()) {
      DeviceGuard on_device(device_,
                            DeviceGuard::kNoThrow);  // the events: created and recorded on this allocator's device
      Pending pend{b, {}};
      for (cudaStream_t s : b->uses) {
        cudaEvent_t e = get_event();
        cudaError_t err = cudaEventRecord(e, s);
        if (err != cudaSuccess) {
          // The other streams' use of the block cannot be ordered any more (a sticky error): the
          // block is never reused, but stays owned here (not leaked), and the error goes to the
          // caller (~Storage reports it once and goes on).
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
    annotate(b->ptr, 0, b->stream);
    free_[FreeKey{b->pool, b->stream, b->size}].push_back(b);
  }

  void* device_malloc(size_t size, size_t requested, cudaStream_t stream) {
    void* p = nullptr;
    cudaError_t err;
    {
      RelaxedCapture relaxed;
      err = cudaMalloc(&p, size);
    }
    if (err == cudaErrorMemoryAllocation && g_captures[device_] == 0) {
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
      throw OutOfMemoryError(
          str("CUDA out of memory on cuda:", device_, ": tried to allocate ", format_bytes(requested), " (rounded to ",
              format_bytes(size), "); ember has ", format_bytes(stats_.allocated_bytes), " in use and ",
              format_bytes(stats_.reserved_bytes - stats_.allocated_bytes), " cached; the device has ",
              format_bytes(free_b), " free of ", format_bytes(total),
              g_captures[device_] == 0 ? " (the cache was released and the allocation retried once)"
                                       : " (a CUDA graph capture is under way, so the cache was not released)"));
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
    if (g_captures[device_] > 0) return;  // cudaFree would end a capture (Note [allocator during capture])
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
    // is underway (global mode: on any thread) and invalidates the capture: an H200 lost --graph
    // captures with the host loader this way, whose batches leave blocks pending on the copy
    // stream's events. These events are never a capture's: they are recorded only while no capture
    // is under way on the device, and never on a stream a graph used (Note [allocator during
    // capture] defers and holds those blocks), so relaxed mode is the honest setting.
    if (pending_.empty()) return;  // the common case: no mode switch on every allocation
    RelaxedCapture relaxed;
    cudaError_t failure = cudaSuccess;
    for (auto it = pending_.begin(); it != pending_.end();) {
      bool done = true, failed = false;
      for (cudaEvent_t e : it->events) {
        const cudaError_t q = cudaEventQuery(e);
        if (q == cudaSuccess) continue;
        cudaGetLastError();  // answered here: not to be blamed on the next kernel
        done = false;
        if (q != cudaErrorNotReady) {
          failed = true;
          if (failure == cudaSuccess) failure = q;
        }
        break;
      }
      if (failed) {
        // whether the other streams are done with the block cannot be known (a sticky error):
        // never hand it out again, but keep it owned here
        unusable_.push_back(it->block);
        it = pending_.erase(it);
        continue;
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
    if (failure != cudaSuccess)
      throw CudaError(str("CUDA caching allocator on cuda:", device_,
                          ": whether another stream still uses a freed block cannot be known (",
                          cudaGetErrorName(failure), ": ", cudaGetErrorString(failure), "); the block is not reused"),
                      static_cast<int>(failure));
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
  std::vector<Block*> unusable_;                  // blocks whose free failed: never handed out again
  std::map<uint64_t, std::vector<Block*>> held_;  // freed blocks a graph of that pool still uses
  std::vector<Block*> deferred_;                  // freed during a capture, their uses still to order
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

void allocator_capture_begin(int device) { device_allocator(device).capture_begin(); }
void allocator_capture_end(int device) { device_allocator(device).capture_end(); }
int captures_underway(int device) {
  if (device >= 0) return device < kMaxDevices ? g_captures[device].load() : 0;
  int n = 0;
  for (const auto& c : g_captures) n += c.load();
  return n;
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
