// The CUDA runtime layer as the rest of ember sees it: device queries, streams, events, the
// caching allocators' controls. This header includes no CUDA header, so every part of ember
// (and a CPU-only build) can use it; in a build without CUDA the queries report no device and the
// stream/event calls throw "ember was built without CUDA".
//
// Note [current stream]: each thread has a current stream per device. By default it is the
// device's compute stream, a non-blocking stream ember creates (not the legacy default stream, so
// CUDA graphs can capture it and copy streams overlap with it). ember never calls the synchronous
// cudaMemcpy: every copy is cudaMemcpyAsync on the current stream, followed by a stream sync only
// where the host needs the bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/device.h"

namespace ember::cuda {

// True when ember was compiled with CUDA support.
bool compiled_with_cuda();
// Number of usable CUDA devices; 0 when built without CUDA, without a driver or without a GPU.
// Never throws.
int device_count();
inline bool is_available() { return device_count() > 0; }
// Why there is no CUDA device ("no CUDA device", "built without CUDA", the driver's message).
std::string unavailable_reason();
// "driver 12080 runtime 13000": the CUDA driver's and runtime's versions ("" without CUDA).
std::string software_versions();

struct DeviceProperties {
  std::string name;
  int major = 0, minor = 0;
  int sm_count = 0;
  size_t total_memory = 0;
  size_t l2_cache_bytes = 0;
  int max_shared_per_block_optin = 0;
};
DeviceProperties properties(int device);

int current_device();
void set_device(int device);
// Blocks the host until all work on `device` is done (counts as a host sync).
void device_synchronize(int device);
// (free, total) bytes as the driver reports them.
std::pair<size_t, size_t> mem_get_info(int device);

class Stream {
 public:
  Stream() = default;
  // A new non-blocking stream on the device (kept alive for the life of the process).
  static Stream create(int device, bool high_priority = false);
  // The device's compute stream (the default current stream).
  static Stream compute(int device);
  // Wraps a stream created elsewhere (not owned).
  static Stream wrap(void* handle, int device) { return Stream(handle, device); }

  void* handle() const { return handle_; }  // cudaStream_t
  int device() const { return device_; }
  bool valid() const { return handle_ != nullptr; }
  // Blocks the host until the stream's work is done (counts as a host sync).
  void synchronize() const;
  // True when all work on the stream has completed (no sync).
  bool query() const;
  // True while the stream is capturing a CUDA graph (work queued now is recorded, not run).
  bool is_capturing() const;
  // Makes this stream wait, on the device, for the work queued on `other` so far (PyTorch's
  // wait_stream): what another stream produced is safe to read here afterwards. No host sync.
  void wait_stream(const Stream& other) const;

  friend bool operator==(const Stream& a, const Stream& b) { return a.handle_ == b.handle_; }
  friend bool operator!=(const Stream& a, const Stream& b) { return a.handle_ != b.handle_; }

 private:
  Stream(void* h, int dev) : handle_(h), device_(dev) {}
  void* handle_ = nullptr;
  int device_ = 0;
};

Stream current_stream(int device = -1);
void set_current_stream(Stream s);

// Makes `s` current for its device in this scope, and restores the previous one after.
class StreamGuard {
 public:
  explicit StreamGuard(Stream s);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  Stream prev_;
};

class Event {
 public:
  explicit Event(bool enable_timing = false) : timing_(enable_timing) {}
  ~Event();
  Event(Event&& o) noexcept;
  Event& operator=(Event&& o) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  void record(const Stream& s);
  void record() { record(current_stream()); }
  // Makes `s` wait (on the device) for the work recorded before this event.
  void block(const Stream& s) const;
  // True when recorded work is done (or nothing was recorded).
  bool query() const;
  // Blocks the host until the recorded work is done (counts as a host sync).
  void synchronize() const;
  // Milliseconds between this event and `end` (both recorded with timing enabled).
  float elapsed_ms(const Event& end) const;
  bool recorded() const { return handle_ != nullptr && recorded_; }
  void* handle() const { return handle_; }

 private:
  void* handle_ = nullptr;
  int device_ = 0;
  bool timing_ = false;
  bool recorded_ = false;
};

// ---- errors found by kernels ----
//
// Note [device errors]: a kernel that meets bad input it cannot report by throwing (an index out
// of range in index_select or gather) stores a code (the op's id + 1) into a word of mapped pinned
// memory, keeping the first one. No host sync is added for this: the word is checked after every
// synchronisation ember does (stream/event/device synchronize, item(), device-to-host copies),
// which then throws an Error naming the op.

// Device pointer to the error word of `device` (write it with atomicCAS(p, 0, code)).
int* device_error_word(int device);
// Throws if a kernel reported an error since the last check (and clears it).
void check_device_errors();
// Turns an error code into a message (installed by the op registry).
void set_device_error_describer(std::string (*describe)(int code));

// ---- counters for kernels whose last block finishes the work ----
//
// Note [stream tickets]: a kernel split across blocks can finish within its own launch: each block
// takes a ticket (atomicAdd) once its part is written, and the block that takes the last one does
// the rest, then puts the ticket back to 0 (split-K GEMMs sum their partial tiles so, Note
// [split-K] in kernels/gemm/gemm_common.cuh). The counters belong to a stream: kernels on one
// stream run one after another, so no two in flight share a counter. They are zeroed once, when
// made, and are 0 again whenever no kernel using them runs. A graph captured on a stream uses that
// stream's counters, so it is replayed on that stream (as cuda::Graph does), never beside it.
inline constexpr size_t kStreamTickets = 1024;
// The kStreamTickets counters of `stream` (a cudaStream_t) on `device`, 0 at rest; nullptr when
// they do not exist yet and a graph capture is underway (they cannot be made then: the caller
// takes another way).
unsigned* stream_tickets(int device, void* stream);

// ---- the caching device allocator ----

struct AllocatorStats {
  size_t allocated_bytes = 0;  // handed out to tensors now
  size_t peak_allocated_bytes = 0;
  size_t reserved_bytes = 0;  // obtained from cudaMalloc (in use + cached)
  size_t peak_reserved_bytes = 0;
  uint64_t num_allocs = 0;          // allocate() calls
  uint64_t num_cache_hits = 0;      // served from the cache
  uint64_t num_device_mallocs = 0;  // cudaMalloc calls
  uint64_t num_device_frees = 0;    // cudaFree calls
  uint64_t num_oom_retries = 0;     // cache released and cudaMalloc retried
  uint64_t num_ooms = 0;            // failures after the retry
};

AllocatorStats allocator_stats(int device);
void reset_peak_stats(int device);
// Releases every cached (unused) block back to the driver.
void empty_cache();
// True when EMBER_CUDA_ALLOC=passthrough: every allocation is a cudaMalloc and every free a cudaFree
// (slow; lets compute-sanitizer see each buffer).
bool allocator_passthrough();
// Size class a request is rounded to (exposed for tests).
size_t allocator_round_size(size_t nbytes);
// Marks that `ptr` (a block of the caching allocator) is used by `s`, a stream other than the one it
// was allocated on: its memory is reused only after the work queued on `s` so far completes.
void record_stream(void* ptr, Stream s);

// A capture begins and ends on `device` (cuda::Graph calls these; Note [allocator during capture]
// in caching_allocator.cpp): while one is under way there, freed blocks whose other-stream uses
// cannot be ordered wait, and cached memory is not released.
void allocator_capture_begin(int device);
void allocator_capture_end(int device);
// Captures under way on `device` (-1: on any device).
int captures_underway(int device = -1);

// A private pool: while a PoolScope is active on this thread, device allocations on `device` come
// from the pool and freed blocks go back to it, never to the shared cache. CUDA graph capture uses
// one so the graph's buffers stay reserved for its replays.
class MemPool {
 public:
  explicit MemPool(int device);
  ~MemPool();  // returns the pool's free blocks to the driver (call after the graph is destroyed)
  MemPool(const MemPool&) = delete;
  MemPool& operator=(const MemPool&) = delete;
  int device() const { return device_; }
  uint64_t id() const { return id_; }

 private:
  int device_;
  uint64_t id_;
};

class PoolScope {
 public:
  explicit PoolScope(MemPool& pool);
  ~PoolScope();
  PoolScope(const PoolScope&) = delete;
  PoolScope& operator=(const PoolScope&) = delete;

 private:
  uint64_t prev_;
  int device_;
};

// ---- the caching pinned host allocator ----

struct PinnedStats {
  size_t allocated_bytes = 0;
  size_t cached_bytes = 0;
  uint64_t num_host_allocs = 0;  // cudaHostAlloc calls
  uint64_t num_cache_hits = 0;
  uint64_t num_waiting_blocks = 0;  // freed, but an event recorded on them has not completed
};
PinnedStats pinned_stats();
// Records an event on `s` for the pinned block that holds `ptr`; after the block is freed it is
// reused only once every such event has completed.
void record_pinned_use(const void* ptr, Stream s);
bool is_pinned_pointer(const void* ptr);
void pinned_empty_cache();

}  // namespace ember::cuda
