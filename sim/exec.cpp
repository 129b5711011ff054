// The simulator's execution engine (Note [simulator execution] in internal.h): grids over host
// threads, blocks as groups of fibers, barriers and warp collectives with their CUDA semantics.
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <sstream>

#include "sim/internal.h"

// AddressSanitizer must be told when the stack changes under it (sanitizer builds only; the weak
// declarations are null otherwise).
extern "C" {
__attribute__((weak)) void __sanitizer_start_switch_fiber(void** fake_stack_save, const void* bottom, size_t size);
__attribute__((weak)) void __sanitizer_finish_switch_fiber(void* fake_stack_save, const void** bottom_old,
                                                           size_t* size_old);
__attribute__((weak)) void __asan_unpoison_memory_region(void const volatile* addr, size_t size);
}

namespace ember::sim {

thread_local constinit Thread* t_current_thread = nullptr;
void thread_exit(Thread& t);
void ptx_collective(Block& b, int w, const Thread& proto);  // ptx.cpp

namespace {

constexpr size_t kArenaBytes = 512 * 1024;  // shared memory of one block: 227 KiB + red zones
constexpr size_t kRedZone = 64;

// What one block of a cluster runs with, reused block after block.
struct Slot {
  // fiber stacks: kMaxThreadsPerBlock slots, each with a guard page at its low end
  char* stacks = nullptr;
  size_t stacks_total = 0;
  // shared memory
  unsigned char* arena = nullptr;
  std::vector<SharedRegion> regions;
  std::vector<BulkCopy> bulk;  // the block's cp.async.bulk copies in flight
  void* shadow = nullptr;
  size_t dirty = kArenaBytes;  // shared memory below this may hold a previous block's data
  std::vector<Thread> threads;
  Block block;

  explicit Slot(size_t stack_bytes) {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    const size_t total = stack_bytes * kMaxThreadsPerBlock;
    void* p = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
      std::fprintf(stderr, "ember simulator: cannot map %zu bytes of fiber stacks\n", total);
      std::abort();
    }
    stacks = static_cast<char*>(p);
    for (int i = 0; i < kMaxThreadsPerBlock; ++i) mprotect(stacks + i * stack_bytes, page, PROT_NONE);
    arena = static_cast<unsigned char*>(std::aligned_alloc(1024, kArenaBytes));
    std::memset(arena, 0xff, kArenaBytes);
    shadow = std::calloc(kArenaBytes, 16);
    threads.resize(kMaxThreadsPerBlock);
    stacks_total = total;
  }
  ~Slot() {
    munmap(stacks, stacks_total);
    std::free(arena);
    std::free(shadow);
  }
  Slot(const Slot&) = delete;
  Slot& operator=(const Slot&) = delete;
};

struct Worker {
  size_t stack_bytes = 0;
  std::vector<std::unique_ptr<Slot>> slots;  // as many as the largest cluster run so far
  Cluster cluster;
  uint32_t epoch = 0;  // racecheck intervals handed out (Note [racecheck] in memcheck.cpp)
  // the scheduler's context while a fiber runs, and its stack (for AddressSanitizer)
  bc::fcontext_t sched = nullptr;
  const void* sched_bottom = nullptr;
  size_t sched_size = 0;

  Worker() {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    stack_bytes = (config().stack_bytes + page - 1) / page * page;
    // the host thread's own stack, where the scheduler runs (AddressSanitizer needs its bounds)
    pthread_attr_t attr;
    if (pthread_getattr_np(pthread_self(), &attr) == 0) {
      void* lo = nullptr;
      size_t size = 0;
      pthread_attr_getstack(&attr, &lo, &size);
      sched_bottom = lo;
      sched_size = size;
      pthread_attr_destroy(&attr);
    }
  }
  Slot& slot(int i) {
    while (slots.size() <= static_cast<size_t>(i)) slots.push_back(std::make_unique<Slot>(stack_bytes));
    return *slots[static_cast<size_t>(i)];
  }
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;
};

thread_local std::unique_ptr<Worker> t_worker_owner;  // freed when its host thread ends
thread_local Worker* t_worker = nullptr;

Worker& worker() {
  if (t_worker == nullptr) {
    t_worker_owner = std::make_unique<Worker>();
    t_worker = t_worker_owner.get();
  }
  return *t_worker;
}

// Reports a fault of the running thread. Then the caller ends it (EMBER_SIM_FAULT): in a separate
// statement, once the message's temporaries are gone (the fiber's stack is abandoned, not unwound).
void report(cudaError_t code, const std::string& what) {
  record_fault(code, where_am_i(*t_current_thread) + ": " + what);
}
#define EMBER_SIM_FAULT(...)             \
  do {                                   \
    report(__VA_ARGS__);                 \
    ::ember::sim::kill_current_thread(); \
  } while (0)

const char* collective_name(const Thread& t) {
  switch (t.kind) {
    case Collective::syncwarp: return "__syncwarp";
    case Collective::shfl: return "__shfl_sync";
    case Collective::shfl_up: return "__shfl_up_sync";
    case Collective::shfl_down: return "__shfl_down_sync";
    case Collective::shfl_xor: return "__shfl_xor_sync";
    case Collective::ballot: return "__ballot_sync";
    case Collective::any: return "__any_sync";
    case Collective::all: return "__all_sync";
    case Collective::match: return (t.op & kLdmatrixOp) ? "ldmatrix.sync" : "mma.sync.m16n8k16";
  }
  return "?";
}

// ---- switching ----
//
// A fiber that must wait hands the host thread directly to the next runnable thread of the block
// after it (one switch instead of two through the scheduler); the last one of a round returns to
// the scheduler, which starts the next round from thread 0. Each jump passes the address where the
// jumper's own context is to be saved, and whoever lands stores it there.

// The next runnable thread of the cluster after `me` (a thread of b) in this round, or nullptr (the
// scheduler): the round goes through the blocks of the cluster in rank order.
Thread* next_runnable(Block& b, const Thread* me) {
  if (b.launch->aborted.load(std::memory_order_relaxed)) return nullptr;
  const Cluster& c = *b.cluster;
  int from = me == nullptr ? 0 : me->linear + 1;
  for (int r = b.rank; r < c.size; ++r, from = 0) {
    Block& x = *c.blocks[r];
    for (int i = from; i < x.nthreads; ++i)
      if (x.threads[i].state == ThreadState::runnable) return &x.threads[i];
  }
  return nullptr;
}

// From the running context (fiber `me`, or the scheduler when null) to `to` (a fiber, or the
// scheduler when null). `final`: `me` never runs again.
void switch_context(Worker& w, Thread* me, Thread* to, bool final) {
  bc::fcontext_t target = to != nullptr ? to->ctx : w.sched;
  bc::fcontext_t* my_slot = me != nullptr ? &me->ctx : &w.sched;
  void* fake = nullptr;
  if (__sanitizer_start_switch_fiber) {
    __sanitizer_start_switch_fiber(final ? nullptr : &fake, to != nullptr ? to->stack_lo : w.sched_bottom,
                                   to != nullptr ? w.stack_bytes : w.sched_size);
  }
  t_current_thread = to;
  bc::transfer_t r = bc::jump_fcontext(target, my_slot);
  // resumed: save the context of whoever switched here
  *static_cast<bc::fcontext_t*>(r.data) = r.fctx;
  if (__sanitizer_finish_switch_fiber) __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
  t_current_thread = me;
}

// A fiber waits (at a barrier or collective, its state already set) or ends (`final`).
void switch_to_scheduler(bool final) {
  Worker& w = *t_worker;
  Thread* me = t_current_thread;
  switch_context(w, me, next_runnable(*me->block, me), final);
}

void fiber_entry(bc::transfer_t from) {
  Worker& w = *t_worker;
  *static_cast<bc::fcontext_t*>(from.data) = from.fctx;
  if (__sanitizer_finish_switch_fiber) __sanitizer_finish_switch_fiber(nullptr, nullptr, nullptr);
  Thread& me = *t_current_thread;
  Launch& L = *me.block->launch;
  if (!L.aborted.load(std::memory_order_relaxed)) L.body.invoke(L.body.params.get());
  thread_exit(me);
  static_cast<void>(w);
  switch_to_scheduler(true);
  __builtin_unreachable();
}

// ---- barriers ----

// All live threads have reached a barrier: check they agree, then let them go.
void resolve_barrier(Block& b, int reduce_op) {
  if (b.exited > 0) {
    EMBER_SIM_FAULT(cudaErrorLaunchFailure, "barrier divergence: " + std::to_string(b.exited) +
                                                " thread(s) of the block have exited while " +
                                                std::to_string(b.at_barrier) + " wait at __syncthreads() (" +
                                                source_text(current_thread()->where) +
                                                "); every thread of a block must reach the same barriers");
  }
  const Thread& first = b.threads[0];
  for (int i = 1; i < b.nthreads; ++i) {
    const Thread& o = b.threads[i];
    if (o.where.line() != first.where.line() || std::strcmp(o.where.file_name(), first.where.file_name()) != 0) {
      EMBER_SIM_FAULT(cudaErrorLaunchFailure,
                      "barrier divergence: thread (" + std::to_string(first.idx.x) + "," + std::to_string(first.idx.y) +
                          "," + std::to_string(first.idx.z) + ") waits at __syncthreads() " + source_text(first.where) +
                          " but thread (" + std::to_string(o.idx.x) + "," + std::to_string(o.idx.y) + "," +
                          std::to_string(o.idx.z) + ") at " + source_text(o.where));
    }
  }
  int acc = reduce_op == 1 ? 1 : 0;
  for (int i = 0; i < b.nthreads; ++i) {
    const int p = b.threads[i].arg != 0;
    if (reduce_op == 0) acc += p;
    else if (reduce_op == 1) acc &= p;
    else acc |= p;
  }
  for (int i = 0; i < b.nthreads; ++i) {
    Thread& o = b.threads[i];
    std::memcpy(o.out, &acc, sizeof acc);
    o.state = ThreadState::runnable;
  }
  b.at_barrier = 0;
  b.epoch = next_epoch();
  if (b.counting) counters_barrier(b);
}

void check_abort() {
  Thread* t = t_current_thread;
  if (t != nullptr && t->block->launch->aborted.load(std::memory_order_relaxed)) kill_current_thread();
}

// ---- warp collectives ----

bool same_collective(const Thread& a, const Thread& b) { return a.kind == b.kind && a.mask == b.mask && a.op == b.op; }

// The lanes of warp `w` named in `mask` that exist and have not exited.
unsigned live_lanes(const Block& b, int w, unsigned mask) {
  unsigned live = 0;
  for (int l = 0; l < 32; ++l) {
    if (!((mask >> l) & 1u)) continue;
    const int tid = w * 32 + l;
    if (tid >= b.nthreads || b.threads[tid].state == ThreadState::exited) continue;
    live |= 1u << l;
  }
  return live;
}

void compute_collective(Block& b, int w, unsigned lanes, const Thread& proto);

void complete_group(Block& b, int w, unsigned lanes, const Thread& proto) {
  compute_collective(b, w, lanes, proto);
  for (int l = 0; l < 32; ++l)
    if ((lanes >> l) & 1u) b.threads[w * 32 + l].state = ThreadState::runnable;
  ++b.warp_epoch[w];
  if (b.counting) counters_warp_collective(b, w, lanes == (b.warps[w].exists & ~b.warps[w].exited));
}

// The warp's pending collective (WarpState) is complete once every live lane it names has arrived.
bool try_complete_pending(Block& b, int w) {
  WarpState& ws = b.warps[w];
  if (!ws.pending) return false;
  const unsigned live = ws.mask & ws.exists & ~ws.exited;
  if ((ws.arrived & live) != live || live == 0) return false;
  const unsigned lanes = ws.arrived & live;
  const Thread& proto = b.threads[w * 32 + __builtin_ctz(lanes)];
  ws.pending = false;
  ws.arrived = 0;
  complete_group(b, w, lanes, proto);
  return true;
}

// The rare case of two different collectives pending in one warp at once (disjoint masks): if
// every live lane named by `proto`'s mask waits at the same collective as `proto`, completes it.
bool try_complete_other(Block& b, const Thread& proto) {
  const int w = proto.warp;
  const unsigned live = live_lanes(b, w, proto.mask);
  for (int l = 0; l < 32; ++l) {
    if (!((live >> l) & 1u)) continue;
    const Thread& o = b.threads[w * 32 + l];
    if (o.state != ThreadState::at_warp || !same_collective(o, proto)) return false;
  }
  complete_group(b, w, live, proto);
  return true;
}

// A lane has arrived (its state, signature and inputs set): completes its collective if it was the
// last lane missing.
bool lane_arrived(Block& b, Thread& me) {
  WarpState& ws = b.warps[me.warp];
  if (!ws.pending) {
    ws.pending = true;
    ws.kind = me.kind;
    ws.op = me.op;
    ws.mask = me.mask;
    ws.arrived = 0;
  }
  if (ws.kind == me.kind && ws.op == me.op && ws.mask == me.mask) {
    ws.arrived |= 1u << me.lane;
    return try_complete_pending(b, me.warp);
  }
  return try_complete_other(b, me);
}

// Bytes of lane l's value (poison when the source lane is not taking part: undefined in CUDA).
const unsigned char* lane_value(const Block& b, int w, unsigned lanes, int l) {
  static const unsigned char poison[16] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                                           0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
  if (l < 0 || l > 31 || !((lanes >> l) & 1u)) return poison;
  return b.threads[w * 32 + l].in;
}

void compute_collective(Block& b, int w, unsigned lanes, const Thread& proto) {
  Thread* lane_t[32] = {};
  for (int l = 0; l < 32; ++l)
    if ((lanes >> l) & 1u) lane_t[l] = &b.threads[w * 32 + l];
  switch (proto.kind) {
    case Collective::syncwarp: return;
    case Collective::ballot:
    case Collective::any:
    case Collective::all: {
      unsigned ballot = 0;
      for (int l = 0; l < 32; ++l)
        if (lane_t[l] != nullptr && lane_t[l]->arg != 0) ballot |= 1u << l;
      unsigned r = proto.kind == Collective::ballot ? ballot
                   : proto.kind == Collective::any  ? (ballot != 0 ? 1u : 0u)
                                                    : (ballot == lanes ? 1u : 0u);
      for (int l = 0; l < 32; ++l)
        if (lane_t[l] != nullptr) std::memcpy(lane_t[l]->out, &r, sizeof r);
      return;
    }
    case Collective::shfl:
    case Collective::shfl_up:
    case Collective::shfl_down:
    case Collective::shfl_xor: {
      const size_t bytes = proto.op;
      for (int l = 0; l < 32; ++l) {
        Thread* t = lane_t[l];
        if (t == nullptr) continue;
        const int width = t->width, seg = l & ~(width - 1), end = seg + width;
        int src = l;
        switch (proto.kind) {
          case Collective::shfl: src = seg + (t->arg & (width - 1)); break;
          case Collective::shfl_up: src = l - t->arg >= seg ? l - t->arg : l; break;
          case Collective::shfl_down: src = l + t->arg < end ? l + t->arg : l; break;
          default: src = (l ^ t->arg) < end ? (l ^ t->arg) : l; break;
        }
        std::memcpy(t->out, lane_value(b, w, lanes, src), bytes);
      }
      return;
    }
    case Collective::match: ptx_collective(b, w, proto); return;
  }
}

}  // namespace

// ---- what the rest of the simulator uses ----

void kill_current_thread() {
  Thread* t = t_current_thread;
  Worker& w = *t_worker;
  if (__asan_unpoison_memory_region) __asan_unpoison_memory_region(t->stack_lo, w.stack_bytes);
  if (t->state == ThreadState::at_barrier) --t->block->at_barrier;
  if (t->state != ThreadState::exited) ++t->block->exited;
  t->block->warps[t->warp].exited |= 1u << t->lane;
  t->state = ThreadState::exited;
  t->block->launch->aborted.store(true);
  switch_to_scheduler(true);
  __builtin_unreachable();
}

std::string source_text(const std::source_location& loc) {
  const char* f = loc.file_name();
  for (const char* dir : {"/kernels/", "/core/", "/tests/", "/bench/"})
    if (const char* p = std::strstr(f, dir)) {
      f = p + 1;
      break;
    }
  return std::string(f) + ":" + std::to_string(loc.line());
}

void report_fault_at(cudaError_t code, const std::string& what, std::source_location loc) {
  record_fault(code, where_am_i(*t_current_thread) + ": " + what + " (" + source_text(loc) + ")");
}

void wait_current_thread() {
  switch_to_scheduler(false);
  check_abort();
}

std::string where_am_i(const Thread& t) {
  const Block& b = *t.block;
  std::ostringstream os;
  os << "kernel " << b.launch->name() << " block (" << b.idx.x << "," << b.idx.y << "," << b.idx.z << ") thread ("
     << t.idx.x << "," << t.idx.y << "," << t.idx.z << ")";
  return os.str();
}

void thread_exit(Thread& t) {
  Block& b = *t.block;
  t.copies.clear();  // cp.async requests never waited for are lost
  if (!t.wgmma.empty()) {
    record_fault(cudaErrorLaunchFailure, where_am_i(t) + ": exited with " + std::to_string(t.wgmma.size()) +
                                             " wgmma.mma_async not waited for (wgmma.wait_group): its accumulators "
                                             "were never complete");
    t.wgmma.clear();
  }
  t.state = ThreadState::exited;
  ++b.exited;
  cluster_thread_exited(t);
  if (b.at_barrier > 0 && b.at_barrier + b.exited == b.nthreads) {
    const Thread* waiter = nullptr;
    for (int i = 0; i < b.nthreads && waiter == nullptr; ++i)
      if (b.threads[i].state == ThreadState::at_barrier) waiter = &b.threads[i];
    record_fault(cudaErrorLaunchFailure,
                 where_am_i(t) + ": barrier divergence: this thread exited while " + std::to_string(b.at_barrier) +
                     " thread(s) of its block wait at __syncthreads() (" + source_text(waiter->where) +
                     "); every thread of a block must reach the same barriers");
    return;
  }
  // Lanes of this warp waiting for a collective that named this lane may now be complete.
  WarpState& ws = b.warps[t.warp];
  ws.exited |= 1u << t.lane;
  try_complete_pending(b, t.warp);
  for (int l = 0; l < 32; ++l) {
    const int tid = t.warp * 32 + l;
    if (tid >= b.nthreads) break;
    Thread& o = b.threads[tid];
    if (o.state == ThreadState::at_warp && ((o.mask >> t.lane) & 1u) && !((ws.arrived >> l) & 1u))
      try_complete_other(b, o);
  }
}

namespace {

// The slot's block made block `bidx` of launch L, rank `rank` of cluster `cl`, its shared memory
// poisoned; its first barrier interval is `epoch` (the cluster's first).
Block& begin_block(Worker& w, Slot& sl, Launch& L, uint3 bidx, Cluster& cl, int rank, uint32_t epoch) {
  Block& b = sl.block;
  b = Block{};
  b.launch = &L;
  b.cluster = &cl;
  b.rank = rank;
  b.idx = bidx;
  b.nthreads = static_cast<int>(L.block.x * L.block.y * L.block.z);
  b.nwarps = (b.nthreads + 31) / 32;
  b.threads = sl.threads.data();
  b.smem = sl.arena;
  b.smem_capacity = kArenaBytes;
  sl.regions.clear();
  b.regions = &sl.regions;
  sl.bulk.clear();
  b.bulk = &sl.bulk;
  b.shadow = sl.shadow;
  b.racecheck = config().racecheck;
  b.stacks_lo = sl.stacks;
  b.stack_bytes = w.stack_bytes;
  b.stack_slots = kMaxThreadsPerBlock;
  // Shared memory starts out as garbage on a GPU: poison it so reads of unwritten shared memory
  // give NaN rather than a stale but plausible value.
  const size_t dyn = L.dynamic_smem;
  std::memset(sl.arena, 0xff, std::min(kArenaBytes, std::max(sl.dirty, dyn + kRedZone)));
  if (dyn > 0) sl.regions.push_back(SharedRegion{nullptr, "dynamic shared memory", 0, dyn});
  b.smem_used = dyn == 0 ? 0 : (dyn + kRedZone + 127) / 128 * 128;
  b.epoch = epoch;
  b.first_epoch = epoch;
  cl.blocks[rank] = &b;
  return b;
}

// The block's warps and its threads, each a fiber on its own stack, ready to run from the kernel's entry.
void create_threads(const Worker& w, Slot& sl, Block& b) {
  const dim3& dim = b.launch->block;
  for (int wi = 0; wi < b.nwarps; ++wi) {
    const int lanes = std::min(32, b.nthreads - wi * 32);
    b.warps[wi] = WarpState{};
    b.warps[wi].exists = lanes == 32 ? 0xffffffffu : (1u << lanes) - 1u;
  }
  for (int i = 0; i < b.nthreads; ++i) {
    Thread& t = sl.threads[i];
    t.block = &b;
    t.linear = i;
    t.sid = static_cast<uint16_t>(b.rank << kSidRankShift | i);
    t.idx = uint3{static_cast<unsigned>(i) % dim.x, (static_cast<unsigned>(i) / dim.x) % dim.y,
                  static_cast<unsigned>(i) / (dim.x * dim.y)};
    t.lane = i & 31;
    t.warp = i >> 5;
    t.state = ThreadState::runnable;
    t.copies.clear();
    t.groups_committed = 0;
    t.proxy_fences = 0;
    t.bulk_groups_committed = 0;
    t.wgmma.clear();
    t.wgmma_groups_committed = 0;
    t.cluster_arrived = false;
    t.cluster_phase = 0;
    t.stack_lo = sl.stacks + static_cast<size_t>(i) * w.stack_bytes;
    // The stacks are equally spaced, so their tops would all fall into the same cache sets: start
    // each one a little lower (colouring), or switching between fibers thrashes the cache.
    const size_t colour = (static_cast<size_t>(i) * 1088) % 32768;
    t.ctx = bc::make_fcontext(t.stack_lo + w.stack_bytes - colour,
                              w.stack_bytes - colour - static_cast<size_t>(sysconf(_SC_PAGESIZE)), fiber_entry);
  }
}

// What a thread that cannot run waits for, for a stuck report.
std::string waits_for(const Block& b, const Thread& t) {
  if (t.state == ThreadState::exited) return "have exited";
  if (t.state == ThreadState::at_barrier) return "wait at __syncthreads() (" + source_text(t.where) + ")";
  if (t.state == ThreadState::at_mbarrier) return describe_mbarrier_wait(b, t) + " (" + source_text(t.where) + ")";
  if (t.state == ThreadState::at_cluster)
    return "wait at barrier.cluster.wait (" + source_text(t.where) + "; " + std::to_string(b.cluster->arrived) +
           " thread(s) of the cluster have arrived in its phase)";
  char m[16];
  std::snprintf(m, sizeof m, "0x%08x", t.mask);
  return std::string("wait at ") + collective_name(t) + " with mask " + m + " (" + source_text(t.where) + ")";
}

// Nobody can run and not all have exited: the block (or cluster) is stuck. Records the fault,
// saying who waits for what.
void report_stuck(const Cluster& c) {
  const Block& b0 = *c.blocks[0];
  std::ostringstream os;
  os << "kernel " << b0.launch->name();
  if (c.size == 1) os << " block (" << b0.idx.x << "," << b0.idx.y << "," << b0.idx.z << ")";
  else os << " cluster (" << c.idx.x << "," << c.idx.y << "," << c.idx.z << ")";
  os << " is stuck (barrier, mbarrier or warp-collective divergence; on a GPU: a hang or undefined behaviour):";
  bool first = true;
  for (int r = 0; r < c.size; ++r) {
    const Block& b = *c.blocks[r];
    if (c.size > 1) {
      if (b.done()) continue;
      os << (first ? " " : "; ") << "block (" << b.idx.x << "," << b.idx.y << "," << b.idx.z << "), rank " << r << ":";
      first = true;
    }
    std::map<std::string, std::vector<int>> groups;
    for (int i = 0; i < b.nthreads; ++i) groups[waits_for(b, b.threads[i])].push_back(i);
    for (auto& [what, ids] : groups) {
      os << (first ? " " : "; ") << ids.size() << " thread(s) [linear ids " << ids.front();
      if (ids.size() > 1) os << ".." << ids.back();
      os << "] " << what;
      first = false;
    }
  }
  record_fault(cudaErrorLaunchFailure, os.str());
}

// Every thread exited with bulk copies still in flight: nothing waited for their phase.
void report_unwaited_bulk_copies(Block& b) {
  const BulkCopy& c = b.bulk->front();
  const Thread& t = thread_by_sid(b, c.issuer);
  record_fault(cudaErrorLaunchFailure,
               "kernel " + b.launch->name() + " block (" + std::to_string(b.idx.x) + "," + std::to_string(b.idx.y) +
                   "," + std::to_string(b.idx.z) + ") ended with " + std::to_string(b.bulk->size()) +
                   " cp.async.bulk cop" + (b.bulk->size() == 1 ? "y" : "ies") +
                   " in flight (the first issued by thread (" + std::to_string(t.idx.x) + "," +
                   std::to_string(t.idx.y) + "," + std::to_string(t.idx.z) + ")" +
                   (t.block != &b ? " of the cluster's block of rank " + std::to_string(t.block->rank) : "") + " at " +
                   source_text(c.where) +
                   (c.store ? "): a tensor store its thread never waited for (cp.async.bulk.wait_group), so its "
                              "shared source may be gone before it is read"
                            : "): no thread waited for its mbarrier phase, so its data was never read (a phase "
                              "completes without waiting for a copy whose bytes it was not told to expect: "
                              "mbarrier.expect_tx)"));
  b.bulk->clear();
  b.launch->aborted.store(true);
}

}  // namespace

// Runs cluster `ci` of launch L (its blocks, each a whole block when L has no clusters) to
// completion on this host thread.
void run_cluster(Launch& L, int64_t ci) {
  Worker& w = worker();
  Cluster& cl = w.cluster;
  cl = Cluster{};
  const dim3 cd = L.cluster;
  cl.size = static_cast<int>(cd.x * cd.y * cd.z);
  const int64_t ncx = L.grid.x / cd.x, ncy = L.grid.y / cd.y;
  cl.idx = uint3{static_cast<unsigned>(ci % ncx), static_cast<unsigned>((ci / ncx) % ncy),
                 static_cast<unsigned>(ci / (ncx * ncy))};
  const uint32_t first_epoch = next_epoch();
  cl.sync_epoch = first_epoch;
  for (int r = 0; r < cl.size; ++r) {
    const unsigned ur = static_cast<unsigned>(r);
    const uint3 bidx{cl.idx.x * cd.x + ur % cd.x, cl.idx.y * cd.y + (ur / cd.x) % cd.y,
                     cl.idx.z * cd.z + ur / (cd.x * cd.y)};
    Slot& sl = w.slot(r);
    Block& b = begin_block(w, sl, L, bidx, cl, r, first_epoch);
    counters_block_begin(b);
    create_threads(w, sl, b);
  }
  const auto all_blocks = [&](auto&& f) {
    for (int r = 0; r < cl.size; ++r) f(*cl.blocks[r], *w.slots[static_cast<size_t>(r)]);
  };
  for (;;) {
    // a round: the first runnable thread runs, and each hands on to the next (switch_context)
    Thread* first = next_runnable(*cl.blocks[0], nullptr);
    if (first != nullptr) switch_context(w, nullptr, first, false);
    if (L.aborted.load(std::memory_order_relaxed)) {  // abandon the cluster's other fibers
      all_blocks([](Block& b, Slot& sl) {
        sl.dirty = kArenaBytes;
        if (b.counting) counters_block_end(b);
      });
      return;
    }
    bool done = true;
    all_blocks([&](Block& b, Slot&) { done = done && b.done(); });
    if (done) {
      all_blocks([](Block& b, Slot&) {
        if (!b.bulk->empty()) report_unwaited_bulk_copies(b);
      });
      break;
    }
    if (first == nullptr) {
      int landed = 0;  // they may complete a phase someone waits for
      all_blocks([&](Block& b, Slot&) { landed += land_bulk_copies(b, nullptr); });
      if (landed > 0) continue;
      report_stuck(cl);
      L.aborted.store(true);
      break;
    }
  }
  all_blocks([&](Block& b, Slot& sl) {
    sl.dirty = b.smem_used;
    if (b.static_bytes > 0) note_static_smem(L.kernel, b.static_bytes);
    if (b.counting) counters_block_end(b);
  });
}

void run_grid(Launch& L) {
  const int64_t gx = L.grid.x, gy = L.grid.y, gz = L.grid.z;
  const int64_t n = gx * gy * gz / (int64_t{L.cluster.x} * L.cluster.y * L.cluster.z);
  if (n == 0) return;
  counters_launch_begin(L);
  run_blocks(n, [&](int64_t i) {
    if (L.aborted.load(std::memory_order_relaxed)) return;
    run_cluster(L, i);
  });
  counters_launch_end(L);
}

uint32_t next_epoch() {
  Worker& w = worker();
  if (++w.epoch == 0xfffffff0u) {  // wrapped: forget every recorded access
    for (auto& sl : w.slots) std::memset(sl->shadow, 0, kArenaBytes * 16);
    w.epoch = 1;
  }
  return w.epoch;
}

// ---- device built-ins ----

Thread& thread_in_kernel(const char* what) {
  Thread* t = t_current_thread;
  if (t == nullptr) {
    std::fprintf(stderr, "ember simulator: %s used outside a kernel\n", what);
    std::abort();
  }
  return *t;
}

uint3 thread_idx() { return thread_in_kernel("threadIdx").idx; }
uint3 block_idx() { return thread_in_kernel("blockIdx").block->idx; }
dim3 block_dim() { return thread_in_kernel("blockDim").block->launch->block; }
dim3 grid_dim() { return thread_in_kernel("gridDim").block->launch->grid; }

void* static_shared_raw(const void* site, size_t bytes, size_t align, const char* name) {
  Thread& t = thread_in_kernel("a __shared__ declaration");
  Block& b = *t.block;
  for (const SharedRegion& r : *b.regions)
    if (r.site == site) return b.smem + r.offset;
  // first thread of the block to reach the declaration: allocate it
  size_t off = (b.smem_used + align - 1) / align * align;
  Launch& L = *b.launch;
  bool too_much = false;
  {
    const std::string problem = shared_memory_problem(L, b.static_bytes + bytes);
    if (!problem.empty()) {
      note_static_smem(L.kernel, b.static_bytes + bytes);  // so the next launch is refused up front
      report(cudaErrorLaunchOutOfResources,
             "too much shared memory (found at `" + std::string(name) + "`): " + problem);
      too_much = true;
    }
  }  // (the message is gone before the thread ends)
  if (too_much) kill_current_thread();
  if (off + bytes + kRedZone > b.smem_capacity)
    EMBER_SIM_FAULT(cudaErrorLaunchOutOfResources, "shared memory arena exhausted");
  b.regions->push_back(SharedRegion{site, name, off, bytes});
  b.smem_used = off + bytes + kRedZone;
  b.static_bytes += bytes;
  return b.smem + off;
}

void* dynamic_shared(const char*) {
  Thread& t = thread_in_kernel("dynamic shared memory");
  return t.block->smem;
}

uint32_t shared_offset(const void* p, std::source_location loc) {
  Thread& t = thread_in_kernel("__cvta_generic_to_shared");
  const auto* c = static_cast<const unsigned char*>(p);
  if (c < t.block->smem || c >= t.block->smem + t.block->smem_capacity)
    EMBER_SIM_FAULT(cudaErrorIllegalAddress,
                    "__cvta_generic_to_shared of an address that is not shared memory (" + source_text(loc) + ")");
  return static_cast<uint32_t>(c - t.block->smem);
}

void syncthreads(std::source_location loc) { syncthreads_reduce(0, 0, loc); }

int syncthreads_reduce(int op, int pred, std::source_location loc) {
  Thread& me = thread_in_kernel("__syncthreads");
  check_abort();
  Block& b = *me.block;
  me.state = ThreadState::at_barrier;
  me.where = loc;
  me.arg = pred;
  ++b.at_barrier;
  if (b.at_barrier + b.exited == b.nthreads) resolve_barrier(b, op);
  else switch_to_scheduler(false);
  check_abort();
  int r;
  std::memcpy(&r, me.out, sizeof r);
  return r;
}

namespace {
// A lane arrives at a warp collective (its inputs already in me.in / me.arg): completes it if it is
// the last lane, else waits.
void arrive(Thread& me, Collective kind, uint8_t op, unsigned mask, std::source_location loc) {
  check_abort();
  if (!((mask >> me.lane) & 1u)) {
    char m[16];
    std::snprintf(m, sizeof m, "0x%08x", mask);
    EMBER_SIM_FAULT(cudaErrorLaunchFailure, std::string("warp collective at ") + source_text(loc) + " with mask " + m +
                                                " that does not name the calling lane " + std::to_string(me.lane));
  }
  me.kind = kind;
  me.op = op;
  me.mask = mask;
  me.where = loc;
  me.state = ThreadState::at_warp;
  if (!lane_arrived(*me.block, me)) switch_to_scheduler(false);
  check_abort();
}
}  // namespace

void syncwarp(unsigned mask, std::source_location loc) {
  Thread& me = thread_in_kernel("__syncwarp");
  arrive(me, Collective::syncwarp, 0, mask, loc);
}

void shuffle(Collective kind, unsigned mask, const void* in, void* out, size_t bytes, int arg, int width,
             std::source_location loc) {
  Thread& me = thread_in_kernel("a warp shuffle");
  if (width < 1 || width > 32 || (width & (width - 1)) != 0)
    EMBER_SIM_FAULT(cudaErrorLaunchFailure, "warp shuffle at " + source_text(loc) + " with width " +
                                                std::to_string(width) + " (must be a power of two from 1 to 32)");
  std::memcpy(me.in, in, bytes);
  me.arg = arg;
  me.width = width;
  arrive(me, kind, static_cast<uint8_t>(bytes), mask, loc);
  std::memcpy(out, me.out, bytes);
}

unsigned vote(Collective kind, unsigned mask, int pred, std::source_location loc) {
  Thread& me = thread_in_kernel("a warp vote");
  me.arg = pred;
  arrive(me, kind, 0, mask, loc);
  unsigned r;
  std::memcpy(&r, me.out, sizeof r);
  return r;
}

// The tensor-core and ldmatrix collectives (ptx.cpp): all 32 lanes, inputs in me.in.
void warp_matrix_op(Thread& me, uint8_t op, std::source_location loc) {
  const Block& b = *me.block;
  if (me.warp * 32 + 32 > b.nthreads)
    EMBER_SIM_FAULT(cudaErrorLaunchFailure, std::string((op & kLdmatrixOp) ? "ldmatrix.sync" : "mma.sync") + " at " +
                                                source_text(loc) + " in a partial warp (the block has " +
                                                std::to_string(b.nthreads) +
                                                " threads): .aligned instructions need all 32 lanes");
  arrive(me, Collective::match, op, 0xffffffffu, loc);
}

void trap(std::source_location loc) {
  thread_in_kernel("__trap");
  EMBER_SIM_FAULT(cudaErrorLaunchFailure, "__trap() at " + source_text(loc));
}

std::string Launch::name() const {
  std::string n = symbol_name(kernel);
  if (n.empty()) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%p", kernel);
    return buf;
  }
  // "void ns::kern<...>(args)" -> keep the qualified name and template arguments, drop the
  // return type and the parameter list (long, and the same for every launch of the kernel)
  if (n.rfind("void ", 0) == 0) n = n.substr(5);
  const size_t paren = n.rfind('(');
  return paren == std::string::npos ? n : n.substr(0, paren);
}

}  // namespace ember::sim
