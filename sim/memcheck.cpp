// Memory checks of simulated kernels (Note [simulator memory checks] in internal.h): the
// instrumentation hooks, bounds of global, shared, local and parameter memory, and racecheck.
//
// Note [racecheck]: each byte of a block's shared memory has a shadow entry holding the last
// write (thread, barrier interval, warp-sync count) and the last read (the same, plus whether
// several threads read it in the interval). Two accesses by different threads to the same byte,
// at least one a write, race unless a __syncthreads() separates them (different intervals) or they
// are lanes of one warp with a warp collective (__syncwarp, shuffles, votes, mma, ldmatrix) between
// them. Atomics never race with atomics. Intervals come from a per-host-thread counter, so a new
// block starts with every old entry already stale: the shadow is never cleared per block. In a
// cluster (Note [simulated clusters] in cluster.cpp) the shadow names threads by their cluster-wide
// id, and an access by a thread of another block is ordered only by a barrier.cluster since.
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <string>

#include "sim/internal.h"

extern "C" {
__attribute__((weak)) void* __asan_region_is_poisoned(void* beg, size_t size);
__attribute__((weak)) void __asan_report_load_n(uintptr_t addr, size_t size);
__attribute__((weak)) void __asan_report_store_n(uintptr_t addr, size_t size);
}

namespace ember::sim {

namespace {

struct ShadowEntry {
  uint32_t w_epoch, r_epoch;
  uint16_t w_tid, r_tid;
  uint8_t w_wsync, r_wsync;
  uint8_t flags;    // kMultiRead, kAtomicWrite
  uint8_t w_fence;  // the writer's fence.proxy.async count at the write (Note [async proxy] in tma.cpp)
};
static_assert(sizeof(ShadowEntry) == 16);
constexpr uint8_t kMultiRead = 1, kAtomicWrite = 2;

// Reports a fault of thread t. EMBER_SIM_FAULT then ends the thread in a separate statement, once
// the message's temporaries are destroyed (the fiber's stack is abandoned, not unwound).
__attribute__((noinline, cold)) void report(Thread& t, cudaError_t code, const std::string& what, const void* pc) {
  std::string msg = where_am_i(t) + ": " + what;
  if (pc != nullptr) msg += " [at " + code_location(pc) + "]";
  record_fault(code, msg);
}
#define EMBER_SIM_FAULT(...)             \
  do {                                   \
    report(__VA_ARGS__);                 \
    ::ember::sim::kill_current_thread(); \
  } while (0)

std::string hex(uintptr_t a) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%" PRIxPTR, a);
  return buf;
}

const char* verb(Access k) { return k == Access::read ? "read" : k == Access::write ? "write" : "atomic"; }

// A thread by its cluster-wide id (Thread::sid), as seen from block b: "(x,y,z)", and "of the
// block of rank r" when it is in another block of b's cluster.
std::string tid_str(const Block& b, int sid) {
  const dim3& d = b.launch->block;
  const unsigned u = static_cast<unsigned>(sid) & ((1u << kSidRankShift) - 1);
  const int rank = sid >> kSidRankShift;
  return "(" + std::to_string(u % d.x) + "," + std::to_string((u / d.x) % d.y) + "," + std::to_string(u / (d.x * d.y)) +
         ")" + (rank != b.rank ? " of the cluster's block of rank " + std::to_string(rank) : "");
}

// Ordered by warp synchronisation: the other access is by a lane of the same warp, before the
// warp's latest collective.
bool warp_ordered(const Block& b, const Thread& t, int other, uint8_t other_wsync) {
  return other / 32 == t.sid / 32 && other_wsync != b.warp_epoch[t.warp];
}

// Whether thread `other` (a cluster-wide id) is of another block of t's cluster.
inline bool other_block(const Thread& t, int other) { return (other >> kSidRankShift) != (t.sid >> kSidRankShift); }

// Whether an earlier access by another thread `other`, in interval `epoch` of its block (warp sync
// count `wsync`), is unordered with t's access now: by another block, with no barrier.cluster
// completed since; by a thread of t's block b, in the current interval and not ordered by a warp
// collective.
inline bool unordered(const Block& b, const Thread& t, int other, uint32_t epoch, uint8_t wsync) {
  if (other_block(t, other)) return epoch >= b.cluster->sync_epoch;
  return epoch == b.epoch && !warp_ordered(b, t, other, wsync);
}

[[noreturn]] __attribute__((noinline, cold)) void shared_out_of_bounds(Thread& t, const Block& b, size_t off, size_t n,
                                                                       Access k, const void* pc) {
  {
    // name the nearest region below the address
    const SharedRegion* near = nullptr;
    for (const SharedRegion& r : *b.regions)
      if (r.offset <= off && (near == nullptr || r.offset > near->offset)) near = &r;
    std::string what = "out-of-bounds shared-memory " + std::string(verb(k)) + " of " + std::to_string(n) +
                       " bytes at offset " + std::to_string(off) +
                       (&b != t.block ? " of the cluster's block of rank " + std::to_string(b.rank) : "");
    if (near != nullptr) {
      what += ": " + std::to_string(off - near->offset) + " bytes into `" + near->name + "` (" +
              std::to_string(near->bytes) + " bytes)";
    } else {
      what += ": before any shared declaration";
    }
    if (b.regions->empty() || (near != nullptr && near->site == nullptr && b.launch->dynamic_smem == 0))
      what += " (the launch has no dynamic shared memory)";
    if (&b != t.block && b.cluster->phase == 0)
      what +=
          " (before the cluster's first barrier.cluster another block may not have started: a barrier.cluster "
          "orders its initialisation before other blocks' use; the simulator places a block's static "
          "__shared__ declarations as its threads first reach them)";
    report(t, cudaErrorIllegalAddress, what, pc);
  }  // `what` is gone before the thread ends
  kill_current_thread();
}

// The declared region holding [off, off + n), or nullptr. Most accesses hit the region the last
// one did.
inline const SharedRegion* find_region(const Block& b, size_t off, size_t n) {
  const std::vector<SharedRegion>& regs = *b.regions;
  if (b.last_region < regs.size()) {
    const SharedRegion& r = regs[b.last_region];
    if (off - r.offset < r.bytes && off + n <= r.offset + r.bytes) return &r;
  }
  for (size_t i = 0; i < regs.size(); ++i) {
    const SharedRegion& r = regs[i];
    if (off - r.offset < r.bytes) {
      if (off + n > r.offset + r.bytes) return nullptr;
      b.last_region = i;
      return &r;
    }
  }
  return nullptr;
}

// An access by t of bytes [off, off + n) of the shared memory of `owner`: t's block, or another
// block of its cluster (distributed shared memory).
__attribute__((noinline)) void shared_access(Thread& t, Block& owner, size_t off, size_t n, Access k, const void* pc) {
  const SharedRegion* reg = find_region(owner, off, n);
  if (reg == nullptr) shared_out_of_bounds(t, owner, off, n, k, pc);
  if (!owner.bulk->empty()) [[unlikely]]
    check_bulk_in_flight(t, owner, off, n, k, pc);
  if (!owner.racecheck) return;
  const Block& b = *t.block;
  auto* sh = static_cast<ShadowEntry*>(owner.shadow) + off;
  const uint32_t ep = b.epoch;
  const uint16_t me = t.sid;
  const uint8_t ws = b.warp_epoch[t.warp];
  // " in the same barrier interval (<race>no __syncthreads() between <between>)"
  const auto where = [&](int other, const char* race, const char* between) {
    if (other_block(t, other))
      return std::string(" since the last barrier.cluster (") + race + "no barrier.cluster between " + between +
             ", threads of different blocks of the cluster)";
    return std::string(" in the same barrier interval (") + race + "no __syncthreads() between " + between +
           (other / 32 == t.sid / 32 ? ", and no __syncwarp() between these lanes of one warp)" : ")");
  };
  for (size_t i = 0; i < n; ++i) {
    ShadowEntry& e = sh[i];
    // the last write, by another thread, not ordered before this access
    const bool wrote_now = e.w_tid != me && unordered(b, t, e.w_tid, e.w_epoch, e.w_wsync);
    if (k == Access::read) {
      if (wrote_now) {
        EMBER_SIM_FAULT(t, cudaErrorLaunchFailure,
                        "racecheck: shared-memory read of `" + std::string(reg->name) + "` [byte " +
                            std::to_string(off + i - reg->offset) + "] written by thread " + tid_str(b, e.w_tid) +
                            where(e.w_tid, "", "the write and this read"),
                        pc);
      }
      if (e.r_epoch == ep) {
        if (e.r_tid != me) e.flags |= kMultiRead;
      } else {
        e.flags &= static_cast<uint8_t>(~kMultiRead);
      }
      e.r_epoch = ep;
      e.r_tid = me;
      e.r_wsync = ws;
    } else {
      const bool atomic = k == Access::atomic;
      if (wrote_now && !(atomic && (e.flags & kAtomicWrite))) {
        EMBER_SIM_FAULT(t, cudaErrorLaunchFailure,
                        "racecheck: shared-memory " + std::string(verb(k)) + " of `" + reg->name + "` [byte " +
                            std::to_string(off + i - reg->offset) + "] also written by thread " + tid_str(b, e.w_tid) +
                            where(e.w_tid, "write-write race: ", "them"),
                        pc);
      }
      const bool read_now = (e.r_tid != me || (e.flags & kMultiRead)) && unordered(b, t, e.r_tid, e.r_epoch, e.r_wsync);
      if (read_now) {
        const int other = e.r_tid != me ? e.r_tid : -1;
        EMBER_SIM_FAULT(t, cudaErrorLaunchFailure,
                        "racecheck: shared-memory " + std::string(verb(k)) + " of `" + reg->name + "` [byte " +
                            std::to_string(off + i - reg->offset) + "] read by " +
                            (other >= 0 ? "thread " + tid_str(b, other) : std::string("other threads")) +
                            where(other >= 0 ? other : me, "write-after-read race: ", "the read and this write"),
                        pc);
      }
      e.w_epoch = ep;
      e.w_tid = me;
      e.w_wsync = ws;
      e.w_fence = t.proxy_fences;
      e.flags = static_cast<uint8_t>((e.flags & kMultiRead) | (atomic ? kAtomicWrite : 0));
    }
  }
}

// Per host thread: the last few device or pinned allocations accesses hit (a kernel reads a few
// tensors in turn), valid while no allocation has been freed since. The records are pooled, so
// bounds read through them are current.
struct AllocCache {
  static constexpr int kWays = 8;
  const Allocation* a[kWays] = {};
  uint64_t generation = ~uint64_t{0};
  int next = 0;

  const Allocation* find(uintptr_t address) {
    const uint64_t gen = g_free_generation.load(std::memory_order_acquire);
    if (gen != generation) {
      for (const Allocation*& e : a) e = nullptr;
      generation = gen;
    }
    for (const Allocation* e : a)
      if (e != nullptr && address - e->base < e->size) return e;
    const Allocation* found = find_allocation(address);
    if (found != nullptr) {
      a[next] = found;
      next = (next + 1) % kWays;
    }
    return found;
  }
};
thread_local constinit AllocCache t_cache;

}  // namespace

std::atomic<uint64_t> g_free_generation{0};

namespace {

// ---- the faults of check_other, out of line so the hot path stays small ----

[[noreturn]] __attribute__((noinline, cold)) void fault_local(Thread& t, uintptr_t a, size_t n, Access k,
                                                              const void* pc) {
  const Block& b = *t.block;
  const int owner = static_cast<int>((a - reinterpret_cast<uintptr_t>(b.stacks_lo)) / b.stack_bytes);
  EMBER_SIM_FAULT(t, cudaErrorIllegalAddress,
                  std::string(verb(k)) + " of " + std::to_string(n) + " bytes at " + hex(a) +
                      " in the local memory of thread " + tid_str(b, owner) +
                      " (local memory is private to its thread)",
                  pc);
}

[[noreturn]] __attribute__((noinline, cold)) void fault_param(Thread& t, Access k, const void* pc) {
  EMBER_SIM_FAULT(t, cudaErrorIllegalAddress,
                  std::string(verb(k)) + " of the kernel's parameter memory (it is read-only)", pc);
}

[[noreturn]] __attribute__((noinline, cold)) void fault_unallocated(Thread& t, uintptr_t a, size_t n, Access k,
                                                                    bool device, const void* pc) {
  EMBER_SIM_FAULT(t, cudaErrorIllegalAddress,
                  "out-of-bounds " + std::string(device ? "global" : "pinned host") + " " + verb(k) + " of " +
                      std::to_string(n) + " bytes at " + hex(a) + ": " + describe_address(a),
                  pc);
}

[[noreturn]] __attribute__((noinline, cold)) void fault_past_end(Thread& t, uintptr_t a, size_t n, Access k,
                                                                 bool device, const Allocation& al, const void* pc) {
  const size_t bound = al.bound();
  const bool freed = al.in_use.load() == 0;
  EMBER_SIM_FAULT(
      t, cudaErrorIllegalAddress,
      (freed ? "use after free: " : "out-of-bounds ") + std::string(device ? "global" : "pinned host") + " " + verb(k) +
          " of " + std::to_string(n) + " bytes at " + hex(a) + ": " +
          (freed || a >= al.base + bound ? describe_address(a)
                                         : "it runs " + std::to_string(a + n - (al.base + bound)) +
                                               " bytes past the end of the " + std::to_string(bound) + "-byte " +
                                               (bound < al.size ? "tensor" : "allocation") + " at " + hex(al.base)),
      pc);
}

[[noreturn]] __attribute__((noinline, cold)) void fault_other_device(Thread& t, uintptr_t a, Access k, int device,
                                                                     const void* pc) {
  EMBER_SIM_FAULT(t, cudaErrorIllegalAddress,
                  std::string(verb(k)) + " at " + hex(a) + " of memory of cuda:" + std::to_string(device) +
                      " by a kernel running on cuda:" + std::to_string(t.block->launch->device) +
                      " (no peer access in ember)",
                  pc);
}

[[noreturn]] __attribute__((noinline, cold)) void fault_host(Thread& t, uintptr_t a, size_t n, Access k,
                                                             const void* pc) {
  EMBER_SIM_FAULT(t, cudaErrorIllegalAddress,
                  std::string(verb(k)) + " of " + std::to_string(n) + " bytes at " + hex(a) + ": " +
                      (a < 4096 ? std::string("a null pointer")
                                : "host memory, not device memory (a host pointer passed to a kernel?)"),
                  pc);
}

// Everything that is neither the block's shared memory nor the thread's own stack. True when it
// is global memory (device or pinned), which the efficiency counters count.
__attribute__((noinline)) bool check_other(Thread& t, uintptr_t a, size_t n, Access k, const void* pc) {
  const Block& b = *t.block;
  if (a - reinterpret_cast<uintptr_t>(b.stacks_lo) < b.stack_bytes * static_cast<size_t>(b.stack_slots))
    fault_local(t, a, n, k, pc);
  const Launch& L = *b.launch;
  if (a - reinterpret_cast<uintptr_t>(L.params) < L.param_bytes) {
    if (k != Access::read) fault_param(t, k, pc);
    return false;
  }
  const bool device = in_device_region(a);
  if (device || in_pinned_region(a)) {
    const Allocation* al = t_cache.find(a);
    if (al == nullptr) fault_unallocated(t, a, n, k, device, pc);
    if (a + n > al->base + al->bound()) fault_past_end(t, a, n, k, device, *al, pc);
    if (device && al->device != L.device) fault_other_device(t, a, k, al->device, pc);
    return true;
  }
  if (is_static_data(a, n)) return false;  // the program's constant tables
  if (b.cluster->size > 1)
    if (Block* owner = cluster_block_at(t, a)) {
      remote_shared_access(t, *owner, a - reinterpret_cast<uintptr_t>(owner->smem), n, k, pc);
      return false;
    }
  fault_host(t, a, n, k, pc);
}

CountKind count_kind(Access k, bool shared) {
  if (k == Access::atomic) return CountKind::atomic;
  if (shared) return k == Access::read ? CountKind::shared_load : CountKind::shared_store;
  return k == Access::read ? CountKind::global_load : CountKind::global_store;
}

}  // namespace

// The hot path: the block's shared memory, then the thread's own stack (registers and local
// memory), which is most of what a kernel touches; the rest out of line. With the efficiency
// counters off, counting costs one well-predicted branch on a flag of the block.
__attribute__((always_inline)) inline void check(Thread& t, uintptr_t a, size_t n, Access k, const void* pc,
                                                 bool count = true) {
  const Block& b = *t.block;
  if (a - reinterpret_cast<uintptr_t>(b.smem) < b.smem_capacity) {
    shared_access(t, *t.block, a - reinterpret_cast<uintptr_t>(b.smem), n, k, pc);
    if (b.counting && count) [[unlikely]]
      count_access(t, a, n, count_kind(k, true), pc);
    return;
  }
  if (a - reinterpret_cast<uintptr_t>(t.stack_lo) < b.stack_bytes) return;
  if (check_other(t, a, n, k, pc) && b.counting && count) [[unlikely]]
    count_access(t, a, n, count_kind(k, false), pc);
}

void check_access(Thread& t, uintptr_t a, size_t n, Access k, const void* pc, bool count) {
  check(t, a, n, k, pc, count);
}

// Bytes a bulk copy in flight will write (Note [bulk copies land late] in mbarrier.cpp).
__attribute__((noinline)) void check_bulk_in_flight(Thread& t, Block& b, size_t off, size_t n, Access k,
                                                    const void* pc) {
  for (const BulkCopy& c : *b.bulk) {
    const size_t c_off = static_cast<size_t>(c.dst - b.smem);
    if (off >= c_off + c.bytes || c_off >= off + n) continue;
    if (c.store && k == Access::read) continue;  // a store's source may be read, not overwritten
    if (c.store) {
      {
        const SharedRegion* reg = find_region(b, off, n);
        report(t, cudaErrorLaunchFailure,
               "shared-memory " + std::string(verb(k)) + " of `" + reg->name + "` [byte " +
                   std::to_string(std::max(off, c_off) - reg->offset) +
                   "], the source of a cp.async.bulk.tensor store not yet read (issued by thread " +
                   tid_str(*t.block, c.issuer) + " at " + source_text(c.where) +
                   "): cp.async.bulk.wait_group.read must come first",
               pc);
      }
      kill_current_thread();
    }
    {
      const SharedRegion* reg = find_region(b, off, n);
      const size_t byte = std::max(off, c_off) - reg->offset;
      const std::string issued = "issued by thread " + tid_str(*t.block, c.issuer) + " at " + c.where.file_name() +
                                 ":" + std::to_string(c.where.line());
      report(t, cudaErrorLaunchFailure,
             k == Access::read
                 ? "shared-memory read of `" + std::string(reg->name) + "` [byte " + std::to_string(byte) +
                       "] before the cp.async.bulk that writes it has landed (" + issued +
                       "): wait for its mbarrier phase first (mbarrier.try_wait.parity)"
                 : "shared-memory " + std::string(verb(k)) + " of `" + reg->name + "` [byte " + std::to_string(byte) +
                       "] while a cp.async.bulk into it is in flight (" + issued + ")",
             pc);
    }
    kill_current_thread();
  }
}

// A tensor store's read of its shared box (Note [async proxy] in tma.cpp).
void check_async_proxy_read(Thread& t, size_t off, size_t n, std::source_location loc) {
  Block& b = *t.block;
  const SharedRegion* reg = find_region(b, off, n);
  if (reg == nullptr) shared_out_of_bounds(t, b, off, n, Access::read, nullptr);
  if (!b.racecheck) return;
  const auto* sh = static_cast<const ShadowEntry*>(b.shadow) + off;
  for (size_t i = 0; i < n; ++i) {
    const ShadowEntry& e = sh[i];
    if (e.w_epoch == 0 || e.w_epoch < b.first_epoch) continue;  // not this cluster's
    const bool racing = e.w_tid != t.sid && unordered(b, t, e.w_tid, e.w_epoch, e.w_wsync);
    const bool unfenced = thread_by_sid(b, e.w_tid).proxy_fences == e.w_fence;
    if (!racing && !unfenced) continue;
    {
      const std::string what =
          "racecheck: a cp.async.bulk.tensor store (" + source_text(loc) + ") reads `" + reg->name + "` [byte " +
          std::to_string(off + i - reg->offset) + "] written by thread " + tid_str(b, e.w_tid) +
          (racing ? " in the same barrier interval (no __syncthreads(), or __syncwarp() within a warp, between "
                    "the write and the store)"
                  : " with no fence.proxy.async after the write (the async proxy does not see generic-proxy "
                    "writes without one)");
      report(t, cudaErrorLaunchFailure, what, nullptr);
    }
    kill_current_thread();
  }
}

void check_shared_destination(Thread& t, const Block& dst, size_t off, size_t n, const void* pc) {
  if (find_region(dst, off, n) == nullptr) shared_out_of_bounds(t, dst, off, n, Access::write, pc);
}

// (Note [simulated clusters] in cluster.cpp) Another block's shared memory is checked as the
// block's own (bounds, copies in flight, racecheck in its shadow); a block whose threads have all
// exited has none.
void remote_shared_access(Thread& t, Block& owner, size_t off, size_t n, Access k, const void* pc) {
  if (owner.done())
    EMBER_SIM_FAULT(
        t, cudaErrorIllegalAddress,
        std::string(verb(k)) + " of " + std::to_string(n) + " bytes of the shared memory of " + exited_block(owner),
        pc);
  shared_access(t, owner, off, n, k, pc);
}

// The async proxy's writes are ordered by the mbarrier, not by __syncthreads(): racecheck treats
// the bytes as written before this interval (interval 0 is never current), so the threads that
// waited for the barrier read them freely. (A write-after-read race between a bulk copy and the
// threads still reading the old data is not detected: Note [bulk copies land late].)
void async_wrote_shared(Block& b, size_t off, size_t n) {
  auto* sh = static_cast<ShadowEntry*>(b.shadow) + off;
  for (size_t i = 0; i < n; ++i) sh[i] = ShadowEntry{};
}

namespace {

[[noreturn]] __attribute__((noinline, cold)) void host_touches_device(uintptr_t a, size_t n, Access k, const void* pc) {
  std::fprintf(stderr,
               "ember simulator: host code %s %zu bytes of device memory at %s without a copy [at %s]: %s\n"
               "(device memory is not host memory: copy it with cudaMemcpyAsync / Tensor::to(kCPU) first)\n",
               k == Access::read ? "reads" : "writes", n, hex(a).c_str(), code_location(pc).c_str(),
               describe_address(a).c_str());
  std::abort();
}

inline void on_access(uintptr_t a, size_t n, Access k, const void* pc) {
  Thread* t = current_thread();
  if (t != nullptr) [[likely]] {
    check(*t, a, n, k, pc);
    return;
  }
  // host code of a .cu file
  if (in_device_region(a)) host_touches_device(a, n, k, pc);
  if (__asan_region_is_poisoned != nullptr && __asan_region_is_poisoned(reinterpret_cast<void*>(a), n) != nullptr) {
    if (k == Access::read) __asan_report_load_n(a, n);
    else __asan_report_store_n(a, n);
  }
}

}  // namespace

void atomic_access(const void* p, size_t bytes, const void* pc) {
  Thread* t = current_thread();
  if (t == nullptr) {
    std::fprintf(stderr, "ember simulator: an atomic device function called outside a kernel [at %s]\n",
                 code_location(pc).c_str());
    std::abort();
  }
  check_access(*t, reinterpret_cast<uintptr_t>(p), bytes, Access::atomic, pc);
}

__attribute__((noinline)) void vector_copy(void* dst, const void* src, size_t bytes) {
  const void* pc = __builtin_return_address(0);
  on_access(reinterpret_cast<uintptr_t>(src), bytes, Access::read, pc);
  on_access(reinterpret_cast<uintptr_t>(dst), bytes, Access::write, pc);
  raw_copy(dst, src,
           bytes);  // (not memmove: AddressSanitizer intercepts it, and device memory is poisoned for host code)
}

void checked_access(const void* p, size_t bytes, Access kind, const void* pc) {
  Thread* t = current_thread();
  if (t != nullptr) check_access(*t, reinterpret_cast<uintptr_t>(p), bytes, kind, pc);
}

}  // namespace ember::sim

// The hooks the kernel-address instrumentation calls (call mode, recoverable variants), and the
// aborting variants in case a build asks for them.
#define EMBER_SIM_HOOK(n)                                                                \
  extern "C" void __asan_load##n##_noabort(uintptr_t a) {                                \
    ember::sim::on_access(a, n, ember::sim::Access::read, __builtin_return_address(0));  \
  }                                                                                      \
  extern "C" void __asan_store##n##_noabort(uintptr_t a) {                               \
    ember::sim::on_access(a, n, ember::sim::Access::write, __builtin_return_address(0)); \
  }
EMBER_SIM_HOOK(1)
EMBER_SIM_HOOK(2)
EMBER_SIM_HOOK(4)
EMBER_SIM_HOOK(8)
EMBER_SIM_HOOK(16)
#undef EMBER_SIM_HOOK

// The instrumentation also calls these before a noreturn call (a throw) and around the dynamic
// initialisation of globals. AddressSanitizer builds get AddressSanitizer's own; elsewhere there is
// nothing to do.
#if !EMBER_SIM_WITH_ASAN
extern "C" void __asan_handle_no_return() {}
extern "C" void __asan_before_dynamic_init(const char*) {}
extern "C" void __asan_after_dynamic_init() {}
#endif

extern "C" void __asan_loadN_noabort(uintptr_t a, size_t n) {
  ember::sim::on_access(a, n, ember::sim::Access::read, __builtin_return_address(0));
}
extern "C" void __asan_storeN_noabort(uintptr_t a, size_t n) {
  ember::sim::on_access(a, n, ember::sim::Access::write, __builtin_return_address(0));
}
