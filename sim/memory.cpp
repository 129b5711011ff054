// Simulated device memory and pinned host memory.
//
// Each lives in one reserved address range (mmap, MAP_NORESERVE: pages become real when touched),
// so "is this device memory?" is one comparison, and allocations are carved from it first-fit with
// a 256-byte gap between neighbours (cudaMalloc's alignment). New device memory is filled with
// 0xff bytes, a NaN in every floating type, so a kernel that reads memory nobody wrote produces
// NaN and fails its parity test. In AddressSanitizer builds device memory is also poisoned for the
// host: sanitized host code that reads it without a copy is reported by ASan (the simulator's own
// copies use raw_copy, which ASan does not intercept).
#include <sys/mman.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <vector>

#include "sim/internal.h"

extern "C" {
__attribute__((weak)) void __asan_poison_memory_region(void const volatile* addr, size_t size);
__attribute__((weak)) void __asan_unpoison_memory_region(void const volatile* addr, size_t size);
}

namespace ember::sim {

uintptr_t g_device_lo = 0, g_device_hi = 0, g_pinned_lo = 0, g_pinned_hi = 0;

namespace {

constexpr size_t kAlign = 256;
constexpr size_t kGap = 256;
constexpr size_t kFreedHistory = 4096;

struct Arena {
  uintptr_t lo = 0, hi = 0;
  std::map<uintptr_t, size_t> free;  // start -> bytes, coalesced

  void init(uintptr_t l, uintptr_t h) {
    lo = l;
    hi = h;
    free[l] = h - l;
  }
  uintptr_t take(size_t bytes) {
    for (auto it = free.begin(); it != free.end(); ++it) {
      if (it->second < bytes) continue;
      const uintptr_t p = it->first;
      const size_t rest = it->second - bytes;
      free.erase(it);
      if (rest > 0) free[p + bytes] = rest;
      return p;
    }
    return 0;
  }
  void give(uintptr_t p, size_t bytes) {
    auto next = free.lower_bound(p);
    if (next != free.end() && p + bytes == next->first) {
      bytes += next->second;
      free.erase(next);
    }
    auto prev = free.lower_bound(p);
    if (prev != free.begin()) {
      --prev;
      if (prev->first + prev->second == p) {
        prev->second += bytes;
        return;
      }
    }
    free[p] = bytes;
  }
};

struct Freed {
  uintptr_t base;
  size_t size;
};

struct Memory {
  std::shared_mutex mu;
  Arena device, pinned;
  std::map<uintptr_t, Allocation*> live;  // base -> allocation (device and pinned)
  std::vector<Allocation*> spare;         // records of freed allocations, for reuse
  std::map<uintptr_t, Freed> freed;       // recently freed, for reports
  std::vector<size_t> used;               // device bytes in use, per device

  Allocation* record(uintptr_t base, size_t size, MemKind kind, int device) {
    Allocation* a;
    if (!spare.empty()) {
      a = spare.back();
      spare.pop_back();
    } else {
      a = new Allocation();  // pooled, never deleted: kept lookups may still read it
    }
    a->base = base;
    a->size = size;
    a->kind = kind;
    a->device = device;
    a->in_use.store(SIZE_MAX);
    return a;
  }
};

Memory& mem() {
  static Memory* m = [] {
    auto* m = new Memory();  // never destroyed: tensors in static objects may be freed after main
    const Config& c = config();
    const size_t dev_bytes =
        std::max<size_t>(size_t{1} << 30, c.memory_per_device * 2) * static_cast<size_t>(c.devices);
    const size_t pin_bytes = size_t{64} << 30;
    void* d = mmap(nullptr, dev_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    void* p = mmap(nullptr, pin_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (d == MAP_FAILED || p == MAP_FAILED) {
      std::fprintf(stderr, "ember simulator: cannot reserve address space for device and pinned memory\n");
      std::abort();
    }
    m->device.init(reinterpret_cast<uintptr_t>(d), reinterpret_cast<uintptr_t>(d) + dev_bytes);
    m->pinned.init(reinterpret_cast<uintptr_t>(p), reinterpret_cast<uintptr_t>(p) + pin_bytes);
    m->used.assign(static_cast<size_t>(c.devices), 0);
    g_device_lo = m->device.lo;
    g_device_hi = m->device.hi;
    g_pinned_lo = m->pinned.lo;
    g_pinned_hi = m->pinned.hi;
    return m;
  }();
  return *m;
}

size_t rounded(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

void release_pages(uintptr_t p, size_t bytes) {
  const uintptr_t page = 4096;
  const uintptr_t lo = (p + page - 1) / page * page, hi = (p + bytes) / page * page;
  if (hi > lo + 16 * page) madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED);
}

std::string hex(uintptr_t a) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%" PRIxPTR, a);
  return buf;
}

// Device memory (kind device) counts against its device's budget and is poisoned for the host;
// pinned memory (device -1) is neither. Both start as 0xff bytes.
cudaError_t allocate(MemKind kind, int device, size_t bytes, void** out) {
  Memory& m = mem();
  *out = nullptr;
  if (bytes == 0) return cudaSuccess;
  const bool on_device = kind == MemKind::device;
  const size_t size = rounded(bytes);
  uintptr_t p;
  {
    std::unique_lock lock(m.mu);
    if (on_device && m.used[static_cast<size_t>(device)] + size > config().memory_per_device)
      return cudaErrorMemoryAllocation;
    p = (on_device ? m.device : m.pinned).take(size + kGap);
    if (p == 0) return cudaErrorMemoryAllocation;
    if (on_device) m.used[static_cast<size_t>(device)] += size;
    m.live[p] = m.record(p, bytes, kind, device);
    m.freed.erase(p);
  }
  raw_fill(reinterpret_cast<void*>(p), 0xff, size);
  if (on_device) poison_for_host(reinterpret_cast<void*>(p), size + kGap);
  *out = reinterpret_cast<void*>(p);
  return cudaSuccess;
}

// A pointer that is not a live allocation of `kind` is cudaErrorInvalidValue.
cudaError_t release(MemKind kind, void* ptr) {
  if (ptr == nullptr) return cudaSuccess;
  Memory& m = mem();
  const auto p = reinterpret_cast<uintptr_t>(ptr);
  std::unique_lock lock(m.mu);
  auto it = m.live.find(p);
  if (it == m.live.end() || it->second->kind != kind) return cudaErrorInvalidValue;
  Allocation* a = it->second;
  m.live.erase(it);
  if (kind == MemKind::device) {
    m.used[static_cast<size_t>(a->device)] -= rounded(a->size);
    m.device.give(p, rounded(a->size) + kGap);
  } else {
    m.pinned.give(p, rounded(a->size) + kGap);
  }
  if (m.freed.size() >= kFreedHistory) m.freed.erase(m.freed.begin());
  m.freed[p] = Freed{p, a->size};
  g_free_generation.fetch_add(1, std::memory_order_acq_rel);
  release_pages(p, rounded(a->size));
  m.spare.push_back(a);
  return cudaSuccess;
}

}  // namespace

cudaError_t device_malloc(int device, size_t bytes, void** out) {
  return allocate(MemKind::device, device, bytes, out);
}

cudaError_t device_free(void* ptr) { return release(MemKind::device, ptr); }

cudaError_t host_alloc(size_t bytes, void** out) { return allocate(MemKind::pinned, -1, bytes, out); }

cudaError_t host_free(void* ptr) { return release(MemKind::pinned, ptr); }

bool set_in_use(uintptr_t base, size_t bytes) {
  Memory& m = mem();
  std::shared_lock lock(m.mu);
  auto it = m.live.find(base);
  if (it == m.live.end()) return false;
  it->second->in_use.store(bytes, std::memory_order_release);
  return true;
}

const Allocation* find_allocation(uintptr_t address) {
  Memory& m = mem();
  std::shared_lock lock(m.mu);
  auto it = m.live.upper_bound(address);
  if (it == m.live.begin()) return nullptr;
  --it;
  if (address - it->first >= it->second->size) return nullptr;
  return it->second;
}

std::string describe_address(uintptr_t a) {
  Memory& m = mem();
  std::shared_lock lock(m.mu);
  const char* what = in_device_region(a) ? "device" : "pinned";
  auto freed_at = [&]() -> std::string {
    auto f = m.freed.upper_bound(a);
    if (f == m.freed.begin()) return "";
    auto fb = std::prev(f);
    if (a - fb->second.base >= fb->second.size) return "";
    return "inside a " + std::to_string(fb->second.size) + "-byte " + what + " allocation at " + hex(fb->first) +
           " that has been freed (use after free)";
  };
  auto it = m.live.upper_bound(a);
  if (it != m.live.begin()) {
    const Allocation& al = *std::prev(it)->second;
    const size_t in_use = al.in_use.load();
    if (a - al.base < al.size) {
      if (in_use == 0)
        return "inside the " + std::to_string(al.size) + "-byte block at " + hex(al.base) +
               ", which ember's caching allocator holds as free: the tensor that used it was freed (use after free)";
      if (in_use != SIZE_MAX && a - al.base >= in_use)
        return std::to_string(a - al.base - in_use) + " bytes past the end of the " + std::to_string(in_use) +
               "-byte tensor at " + hex(al.base) + " (in a " + std::to_string(al.size) + "-byte cached block)";
      return "inside the " + std::to_string(al.size) + "-byte allocation at " + hex(al.base) + " (byte " +
             std::to_string(a - al.base) + ")";
    }
    if (std::string f = freed_at();
        !f.empty() && m.freed.upper_bound(a) != m.freed.begin() && std::prev(m.freed.upper_bound(a))->first > al.base)
      return f;
    return std::to_string(a - (al.base + al.size)) + " bytes past the end of the " + std::to_string(al.size) +
           "-byte " + what + " allocation at " + hex(al.base);
  }
  if (std::string f = freed_at(); !f.empty()) return f;
  return std::string("not inside any ") + what + " allocation";
}

std::pair<size_t, size_t> device_memory_info(int device) {
  Memory& m = mem();
  std::shared_lock lock(m.mu);
  const size_t limit = config().memory_per_device;
  const size_t used = m.used[static_cast<size_t>(device)];
  return {limit - std::min(limit, used), size_t{80} * 1000 * 1000 * 1000};
}

// Plain loops (this file is compiled with -fno-tree-loop-distribute-patterns, so they stay loops
// rather than becoming memcpy/memset calls that a sanitizer would intercept).
void raw_copy(void* dst, const void* src, size_t bytes) {
  auto* d = static_cast<unsigned char*>(dst);
  const auto* s = static_cast<const unsigned char*>(src);
  if (d == s || bytes == 0) return;
  const bool overlap_backward = d > s && d < s + bytes;
  if (overlap_backward) {
    for (size_t i = bytes; i-- > 0;) d[i] = s[i];
    return;
  }
  size_t i = 0;
  if (((reinterpret_cast<uintptr_t>(d) ^ reinterpret_cast<uintptr_t>(s)) & 7) == 0) {
    for (; i < bytes && (reinterpret_cast<uintptr_t>(d + i) & 7) != 0; ++i) d[i] = s[i];
    for (; i + 8 <= bytes; i += 8) *reinterpret_cast<uint64_t*>(d + i) = *reinterpret_cast<const uint64_t*>(s + i);
  }
  for (; i < bytes; ++i) d[i] = s[i];
}

void raw_fill(void* dst, unsigned char value, size_t bytes) {
  auto* d = static_cast<unsigned char*>(dst);
  size_t i = 0;
  for (; i < bytes && (reinterpret_cast<uintptr_t>(d + i) & 7) != 0; ++i) d[i] = value;
  const uint64_t word = 0x0101010101010101ull * value;
  for (; i + 8 <= bytes; i += 8) *reinterpret_cast<uint64_t*>(d + i) = word;
  for (; i < bytes; ++i) d[i] = value;
}

void poison_for_host(void* p, size_t bytes) {
  if (__asan_poison_memory_region != nullptr) __asan_poison_memory_region(p, bytes);
}
void unpoison_for_host(void* p, size_t bytes) {
  if (__asan_unpoison_memory_region != nullptr) __asan_unpoison_memory_region(p, bytes);
}

}  // namespace ember::sim
