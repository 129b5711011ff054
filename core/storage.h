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

// The plain host allocator (64-byte aligned).
Allocator* cpu_allocator();
// Bytes held by cpu_allocator() now and at the peak since the last reset (as malloc_usable_size
// reports them), for memory tests (e.g. activation checkpointing lowers the peak).
struct HostAllocatorStats {
  size_t allocated_bytes = 0;
  size_t peak_allocated_bytes = 0;
};
HostAllocatorStats cpu_allocator_stats();
void reset_cpu_peak_stats();
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
