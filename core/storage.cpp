#include "core/storage.h"

#include <malloc.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <new>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/env.h"
#include "core/error.h"
#include "core/runtime.h"

#if defined(__SANITIZE_ADDRESS__)
#define EMBER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EMBER_ASAN 1
#endif
#endif
#if EMBER_ASAN
#include <sanitizer/asan_interface.h>
#endif

namespace ember {

// Note [host caching allocator]: a CPU training step allocates and frees the same large buffers
// (activations, gradients, im2col and GEMM workspaces) every step. glibc serves blocks above its
// mmap threshold with mmap and gives them back with munmap on free (and trims the heap top above
// trim_threshold), so each step faults every page of those buffers in again: measured, raising
// glibc's thresholds (GLIBC_TUNABLES=glibc.malloc.mmap_threshold/trim_threshold) made CPU CNN
// training about 20% faster. So blocks of at least kCacheMinBytes (64 KiB) are rounded up to a
// size class and, when freed, kept in a free list per class; the next request of that class takes
// one back (a cache hit) instead of asking malloc. Smaller blocks go straight to malloc, whose own
// bins already reuse them without a system call.
//
// - Size classes: four steps per power of two (64, 80, 96, 112, 128, 160, ... KiB; cpu_alloc_round_size).
//   A request n in [2^k, 2^(k+1)) is rounded up to a multiple of 2^k / 4, so the padding is less
//   than a quarter of the request (< 25% waste, about 12% on average) and every class is a
//   multiple of 16 KiB (whole pages). Only the same class is reused: a block is never split or
//   handed to a smaller request.
// - Bound: the cache (freed, unused blocks) holds at most cpu_cache_limit bytes; a block freed
//   while it would not fit is returned to malloc. Default: 1 GiB, but no more than 1/8 of the
//   physical memory. One CPU training step of the models ember trains on the host frees a few
//   hundred MB at most (the cache needs to hold what one step frees, once), while several
//   processes (ember_run ranks) each keep their own cache, hence the cap by physical memory.
//   EMBER_CPU_ALLOC_CACHE=0 turns the cache off (every block goes back to malloc at once);
//   EMBER_CPU_ALLOC_CACHE=<bytes>[K|M|G] sets another bound (at most 1 TiB; another value is an
//   error at the first allocation); set_cpu_cache_limit() changes it.
// - Out of memory: when aligned_alloc fails, the cache is emptied and the allocation retried once
//   before the error.
// - Newly handed-out memory was never promised zeroed (fresh mmap pages happen to be; a reused
//   block holds its previous tensor's values): zeros()/zeros_like() fill explicitly.
// - Threads: one mutex around the free lists, taken only for blocks >= 64 KiB (each of which costs
//   far more to fill than to lock); small blocks take no lock. fork() is safe (pthread_atfork
//   holds the lock across it, as glibc does for malloc's).
// - AddressSanitizer: a cached block is poisoned, and a reused one is unpoisoned only for the
//   request (rounded to 64 bytes, as aligned_alloc was always asked for), so a use after free of
//   a tensor buffer, or a read past its end into the class padding, is still reported.
// - Stats: allocated_bytes counts what tensors hold (the size class for cached-size blocks,
//   malloc_usable_size for small ones); cached_bytes (not part of it) what the cache keeps.

namespace {

std::atomic<size_t> g_host_bytes{0};
std::atomic<size_t> g_host_peak{0};

constexpr size_t kCacheMinBytes = size_t{64} << 10;
constexpr size_t kAlign = 64;

void add_host_bytes(size_t n) {
  size_t now = g_host_bytes.fetch_add(n, std::memory_order_relaxed) + n;
  size_t peak = g_host_peak.load(std::memory_order_relaxed);
  while (now > peak && !g_host_peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

#if EMBER_ASAN
void poison(void* p, size_t n) { ASAN_POISON_MEMORY_REGION(p, n); }
void unpoison(void* p, size_t n) { ASAN_UNPOISON_MEMORY_REGION(p, n); }
#else
void poison(void*, size_t) {}
void unpoison(void*, size_t) {}
#endif

size_t default_cache_limit() {
  size_t limit = size_t{1} << 30;
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0) limit = std::min(limit, static_cast<size_t>(pages) * static_cast<size_t>(page) / 8);
  return limit;
}

// EMBER_CPU_ALLOC_CACHE: unset or "1": the default bound; "0": off; "<n>[K|M|G][B]": n bytes (KiB, ...),
// at most 1 TiB. Anything else is an error, not the default (Note [environment numbers] in core/env.h).
size_t cache_limit_from_env() {
  const std::string v = runtime::env("EMBER_CPU_ALLOC_CACHE");
  if (v.empty() || v == "1") return default_cache_limit();
  std::string digits = v;
  if (digits.size() >= 2 && std::toupper(static_cast<unsigned char>(digits.back())) == 'B' &&
      std::isalpha(static_cast<unsigned char>(digits[digits.size() - 2])))
    digits.pop_back();
  int shift = 0;
  if (!digits.empty()) {
    switch (std::toupper(static_cast<unsigned char>(digits.back()))) {
      case 'K': shift = 10; break;
      case 'M': shift = 20; break;
      case 'G': shift = 30; break;
      default: break;
    }
    if (shift != 0) digits.pop_back();
  }
  constexpr int64_t kMaxBytes = int64_t{1} << 40;
  try {
    return static_cast<size_t>(env::parse_integer("EMBER_CPU_ALLOC_CACHE", digits, 0, kMaxBytes >> shift)) << shift;
  } catch (const Error&) {
    throw Error("EMBER_CPU_ALLOC_CACHE='" + v +
                "': expected 0 (no cache), 1 (the default bound) or a size such as 512M (bytes, or with a K, M or G "
                "suffix), at most 1024G");
  }
}

// The cache: free lists per size class, the size class of every live cached-size block.
// Never destroyed: tensors held by other static objects may be freed after main returns.
struct HostCache {
  std::mutex mu;
  std::unordered_map<size_t, std::vector<void*>> free_lists;  // size class -> unused blocks
  std::unordered_map<void*, size_t> live;                     // handed out -> size class
  size_t cached_bytes = 0;
  std::atomic<size_t> limit{0};
  uint64_t hits = 0, misses = 0;

  HostCache() : limit(cache_limit_from_env()) {}

  // Takes every cached block out (or those beyond `keep` bytes); the caller frees them unlocked.
  std::vector<std::pair<void*, size_t>> take_locked(size_t keep) {
    std::vector<std::pair<void*, size_t>> out;
    for (auto& [size, list] : free_lists) {
      while (cached_bytes > keep && !list.empty()) {
        out.emplace_back(list.back(), size);
        list.pop_back();
        cached_bytes -= size;
      }
    }
    return out;
  }
  static void release(const std::vector<std::pair<void*, size_t>>& blocks) {
    for (auto [p, size] : blocks) {
      unpoison(p, size);
      std::free(p);
    }
  }
};

HostCache& host_cache() {
  static HostCache* c = [] {
    auto* cache = new HostCache;
    pthread_atfork([] { host_cache().mu.lock(); }, [] { host_cache().mu.unlock(); }, [] { host_cache().mu.unlock(); });
    return cache;
  }();
  return *c;
}

void* host_malloc(size_t bytes, size_t requested) {
  void* p = std::aligned_alloc(kAlign, bytes);
  if (p == nullptr) {
    empty_cpu_cache();
    p = std::aligned_alloc(kAlign, bytes);
  }
  EMBER_CHECK(p != nullptr, "out of host memory: could not allocate ", requested,
              " bytes (the CPU allocator's cache was released and the allocation retried once)");
  return p;
}

class CpuAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes) override {
    if (nbytes == 0) return nullptr;
    size_t rounded = (nbytes + kAlign - 1) / kAlign * kAlign;
    HostCache& c = host_cache();
    if (nbytes < kCacheMinBytes || c.limit.load(std::memory_order_relaxed) == 0) {
      void* p = host_malloc(rounded, nbytes);
      add_host_bytes(malloc_usable_size(p));
      return p;
    }
    size_t size = cpu_alloc_round_size(nbytes);
    void* p = nullptr;
    {
      std::lock_guard<std::mutex> lock(c.mu);
      auto it = c.free_lists.find(size);
      if (it != c.free_lists.end() && !it->second.empty()) {
        p = it->second.back();
        it->second.pop_back();
        c.cached_bytes -= size;
        ++c.hits;
        c.live.emplace(p, size);
      } else {
        ++c.misses;
      }
    }
    if (p != nullptr) {
      unpoison(p, rounded);
    } else {
      p = host_malloc(size, nbytes);
      poison(static_cast<char*>(p) + rounded, size - rounded);
      std::lock_guard<std::mutex> lock(c.mu);
      c.live.emplace(p, size);
    }
    add_host_bytes(size);
    return p;
  }

  void deallocate(void* p) override {
    if (p == nullptr) return;
    size_t usable = malloc_usable_size(p);
    if (usable >= kCacheMinBytes) {
      HostCache& c = host_cache();
      std::unique_lock<std::mutex> lock(c.mu);
      auto it = c.live.find(p);
      if (it != c.live.end()) {
        size_t size = it->second;
        c.live.erase(it);
        g_host_bytes.fetch_sub(size, std::memory_order_relaxed);
        if (c.cached_bytes + size <= c.limit.load(std::memory_order_relaxed)) {
          poison(p, size);  // before another thread can take it
          c.free_lists[size].push_back(p);
          c.cached_bytes += size;
          return;
        }
        lock.unlock();
        unpoison(p, size);
        std::free(p);
        return;
      }
    }
    g_host_bytes.fetch_sub(usable, std::memory_order_relaxed);
    std::free(p);
  }
  Device device() const override { return kCPU; }
};

}  // namespace

size_t cpu_alloc_round_size(size_t n) {
  if (n < kCacheMinBytes) return (n + kAlign - 1) / kAlign * kAlign;
  size_t p = size_t{1} << (63 - __builtin_clzll(n));  // largest power of two <= n
  size_t step = p / 4;
  return (n + step - 1) / step * step;
}

HostAllocatorStats cpu_allocator_stats() {
  HostAllocatorStats s;
  s.allocated_bytes = g_host_bytes.load(std::memory_order_relaxed);
  s.peak_allocated_bytes = g_host_peak.load(std::memory_order_relaxed);
  HostCache& c = host_cache();
  std::lock_guard<std::mutex> lock(c.mu);
  s.cached_bytes = c.cached_bytes;
  s.cache_limit_bytes = c.limit.load(std::memory_order_relaxed);
  s.num_cache_hits = c.hits;
  s.num_cache_misses = c.misses;
  return s;
}

void reset_cpu_peak_stats() {
  g_host_peak.store(g_host_bytes.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

void empty_cpu_cache() {
  HostCache& c = host_cache();
  std::vector<std::pair<void*, size_t>> blocks;
  {
    std::lock_guard<std::mutex> lock(c.mu);
    blocks = c.take_locked(0);
  }
  HostCache::release(blocks);
}

void set_cpu_cache_limit(size_t bytes) {
  HostCache& c = host_cache();
  std::vector<std::pair<void*, size_t>> blocks;
  {
    std::lock_guard<std::mutex> lock(c.mu);
    c.limit.store(bytes, std::memory_order_relaxed);
    blocks = c.take_locked(bytes);
  }
  HostCache::release(blocks);
}

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
