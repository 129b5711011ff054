// Storage: a ref-counted, allocator-owned block of bytes on one device.
//
// Tensors are views onto a Storage (shape, strides, offset). The storage also carries the version
// counter that autograd uses to detect a saved tensor modified in place.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "core/device.h"

namespace ember {

class Allocator {
 public:
  virtual ~Allocator() = default;
  // Returns memory for nbytes (nbytes may be 0: a unique non-null pointer or nullptr are both fine).
  virtual void* allocate(size_t nbytes) = 0;
  virtual void deallocate(void* p) = 0;
  virtual Device device() const = 0;
  virtual bool pinned() const { return false; }
};

// The plain host allocator (64-byte aligned). Blocks of 64 KiB and more are rounded to a size
// class and cached when freed (Note [host caching allocator] in storage.cpp);
// EMBER_CPU_ALLOC_CACHE=0 turns the cache off.
Allocator* cpu_allocator();
// Bytes held by tensors from cpu_allocator() now and at the peak since the last reset (the size
// class for blocks of 64 KiB and more, what malloc_usable_size reports for smaller ones), for
// memory tests (e.g. activation checkpointing lowers the peak). Blocks the cache keeps are not
// in them: they are cached_bytes.
struct HostAllocatorStats {
  size_t allocated_bytes = 0;
  size_t peak_allocated_bytes = 0;
  size_t cached_bytes = 0;        // freed blocks kept for reuse (not returned to malloc)
  size_t cache_limit_bytes = 0;   // the bound on cached_bytes (0: the cache is off)
  uint64_t num_cache_hits = 0;    // requests >= 64 KiB served from the cache
  uint64_t num_cache_misses = 0;  // requests >= 64 KiB that went to malloc while the cache was on
};
HostAllocatorStats cpu_allocator_stats();
void reset_cpu_peak_stats();
// Returns every cached block to malloc (the allocator does so itself before failing for lack of
// memory).
void empty_cpu_cache();
// Sets the bound on the cache's bytes (0 turns caching off) and frees what is cached beyond it.
// The default is min(1 GiB, physical memory / 8), or what EMBER_CPU_ALLOC_CACHE says.
void set_cpu_cache_limit(size_t bytes);
// Bytes cpu_allocator() reserves for a request of n bytes (its size class; exposed for tests).
size_t cpu_alloc_round_size(size_t n);
// Page-locked host memory (cudaHostAlloc) from a caching allocator; falls back to plain host memory
// when there is no CUDA device (pinned() then reports false).
Allocator* pinned_allocator();
// The stream-aware caching allocator of CUDA device `index`.
Allocator* cuda_allocator(int index);
// The allocator for a device (pinned only applies to the CPU).
Allocator* allocator_for(Device d, bool pinned = false);

// Frees that failed inside ~Storage (after an earlier CUDA error) and were swallowed: a
// destructor never throws; the first failure prints one line on stderr (Note [no throwing
// destructors] in storage.cpp).
uint64_t failed_frees();

class Storage {
 public:
  Storage(size_t nbytes, Allocator* alloc);
  // Wraps memory owned by someone else; `deleter` (may be empty) runs when the storage dies.
  Storage(void* data, size_t nbytes, Device device, std::function<void(void*)> deleter);
  ~Storage();  // never throws (see failed_frees)
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  bool pinned() const { return alloc_ != nullptr && alloc_->pinned(); }
  Allocator* allocator() const { return alloc_; }

  uint64_t version() const { return version_.load(std::memory_order_relaxed); }
  void bump_version() { version_.fetch_add(1, std::memory_order_relaxed); }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  Allocator* alloc_ = nullptr;
  std::function<void(void*)> deleter_;
  std::atomic<uint64_t> version_{0};
};

}  // namespace ember
