// The simulator's internal structures, shared by sim/*.cpp. Not for other code.
//
// Note [simulator execution]: a launch is queued on its stream like any other work. When the
// stream's worker thread reaches it, the grid's blocks are spread over host threads (ember's
// thread pool); a host thread runs one block at a time, each CUDA thread of the block as a fiber
// (Boost.Context fcontext) on a pooled stack. Fibers switch only inside the simulator: at a
// barrier, a warp collective, or the end of the thread. The block's scheduler resumes runnable
// threads in order until all have exited; when none is runnable but some have not exited, the
// block is stuck (divergent barriers or collectives), which is reported as a fault. The blocks of
// a cluster run together on one host thread (Note [simulated clusters] in cluster.cpp).
//
// Note [simulator memory checks]: kernel code is compiled with the compiler's kernel-address
// instrumentation in call mode, so every load and store in a .cu file calls
// __asan_{load,store}N_noabort (memcheck.cpp). While a simulated thread runs, the address must be
// the block's shared memory (bounds per declared array, racecheck), the thread's own stack
// (registers and local memory), the launch's parameter buffer, device memory inside a live
// allocation, pinned host memory, or the program's static data; anything else is a fault. Outside
// kernels the same hooks keep AddressSanitizer's checks (sanitizer builds) and catch host code
// touching device memory.
#pragma once

#include <boost/context/detail/fcontext.hpp>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <source_location>
#include <string>
#include <thread>
#include <vector>

#include "sim/device_api.h"
#include "sim/mbarrier_api.h"

namespace ember::sim {

namespace bc = boost::context::detail;

// ---- configuration (sim.h lists the environment variables) ----
struct Config {
  int devices = 1;
  size_t memory_per_device = size_t{8} << 30;
  bool racecheck = true;
  bool abort_on_fault = false;
  int block_threads = 0;  // EMBER_SIM_THREADS; 0: EMBER_NUM_THREADS, else one per core
  size_t stack_bytes = 256 * 1024;
  int fail_captures = 0;  // EMBER_SIM_FAIL_CAPTURES
};
const Config& config();

// H100 SXM limits the checks use.
inline constexpr int kMaxThreadsPerBlock = 1024;
inline constexpr unsigned kMaxBlockDimZ = 64;
inline constexpr unsigned kMaxGridDimYZ = 65535;
inline constexpr size_t kDefaultSharedPerBlock = 48 * 1024;
inline constexpr size_t kMaxSharedPerBlockOptin = 232448;  // 227 KiB
inline constexpr int kSmCount = 132;

// ---- kernel names (symbols.cpp): the demangled symbol at an address, "" if unknown ----
std::string symbol_name(const void* address);
// "function+0x1a4" for a code address (the PC of an access), or the hex address.
std::string code_location(const void* pc);
// Ranges of the program's loaded segments (static data a kernel may read).
bool is_static_data(uintptr_t address, size_t bytes);

// ---- memory (memory.cpp) ----
enum class MemKind : uint8_t { device, pinned };
struct Allocation {
  uintptr_t base = 0;
  size_t size = 0;
  MemKind kind = MemKind::device;
  int device = 0;
  // What a caching allocator says is in use of the block (annotate_block): SIZE_MAX when it never
  // said, 0 when the block sits in its free list. Changes while the allocation lives.
  std::atomic<size_t> in_use{SIZE_MAX};
  size_t bound() const { return std::min(size, in_use.load(std::memory_order_relaxed)); }
};
// The live allocation holding `address`, or nullptr. Records are pooled and never deleted (a
// stale pointer still points at a record); a free bumps g_free_generation, so a caller that keeps
// one checks that counter. Thread-safe.
const Allocation* find_allocation(uintptr_t address);
// What an address is, for reports ("12 bytes past the end of the 4096-byte allocation at 0x...",
// "inside an allocation freed earlier", ...).
std::string describe_address(uintptr_t address);
// Bumped whenever an allocation is freed (invalidates kept lookups).
extern std::atomic<uint64_t> g_free_generation;
// Device memory and pinned host memory each live in one reserved address range.
extern uintptr_t g_device_lo, g_device_hi, g_pinned_lo, g_pinned_hi;
inline bool in_device_region(uintptr_t a) { return a - g_device_lo < g_device_hi - g_device_lo; }
inline bool in_pinned_region(uintptr_t a) { return a - g_pinned_lo < g_pinned_hi - g_pinned_lo; }
cudaError_t device_malloc(int device, size_t bytes, void** out);
cudaError_t device_free(void* p);
// Sets Allocation::in_use of the device allocation starting at `base` (false if there is none).
bool set_in_use(uintptr_t base, size_t bytes);
cudaError_t host_alloc(size_t bytes, void** out);
cudaError_t host_free(void* p);
std::pair<size_t, size_t> device_memory_info(int device);  // (free, total)
// Copies and fills that may touch device memory (no sanitizer interception).
void raw_copy(void* dst, const void* src, size_t bytes);
void raw_fill(void* dst, unsigned char value, size_t bytes);
// Runs `op` in `stream` order as a kernel would run (while the stream is capturing: a host node
// that every replay runs again). The simulator's NCCL (nccl.cpp) enqueues its collectives so.
cudaError_t enqueue_host_op(cudaStream_t stream, std::function<void()> op);
// Makes device memory unreadable to sanitized host code (ASan builds) and readable again.
void poison_for_host(void* p, size_t bytes);
void unpoison_for_host(void* p, size_t bytes);

// ---- faults ----
// What a fault is reported as to the program.
struct FaultInfo {
  cudaError_t code = cudaSuccess;
  std::string message;
};
// Records a fault of the running kernel (first one wins), marks the launch aborted, prints it.
void record_fault(cudaError_t code, const std::string& message);
// The sticky error of the device (cudaSuccess if none) and its message.
cudaError_t sticky_error();
std::string sticky_message();
void clear_sticky();

// ---- execution (exec.cpp) ----
struct Launch;
struct Block;
struct Thread;
struct CounterRecord;  // counters.cpp

enum class ThreadState : uint8_t { runnable, at_barrier, at_warp, at_mbarrier, at_cluster, exited };

// Clusters (Note [simulated clusters] in cluster.cpp): at most 8 blocks (the portable limit); a
// thread's cluster-wide id (racecheck's shadow, bulk copies) is its block's rank << 10 | linear.
inline constexpr int kMaxClusterBlocks = 8;
inline constexpr int kSidRankShift = 10;

// A wgmma.mma_async of one thread, computed when a wgmma.wait_group covers its group (wgmma.cpp):
// d (the thread's n / 2 accumulators) += A B from the shared-memory descriptors.
struct WgmmaOp {
  float* d;
  int n;
  uint64_t desc_a, desc_b;
  bool scale_d;
  WgmmaType type;
  bool trans_a, trans_b;  // MN-major operands
  uint64_t group;
  size_t lo[2], hi[2];  // the shared bytes A (0) and B (1) span, [lo, hi): what it still reads
};

// A pending cp.async request of one thread.
struct AsyncCopy {
  void* dst;
  const void* src;
  int bytes;
  int src_bytes;
  uint64_t group;
};

struct Thread {
  Block* block = nullptr;
  uint3 idx{};
  int linear = 0;    // x + y Dx + z Dx Dy
  uint16_t sid = 0;  // rank << kSidRankShift | linear
  int lane = 0, warp = 0;
  bc::fcontext_t ctx = nullptr;
  char* stack_lo = nullptr;  // the fiber's stack: [stack_lo, stack_lo + stack_bytes)
  ThreadState state = ThreadState::runnable;
  std::source_location where;  // the barrier or collective it waits at
  // A warp collective in flight: what this lane brings, and what it gets back.
  Collective kind = Collective::syncwarp;
  uint8_t op = 0;  // collective sub-kind (ldmatrix count, mma dtype, ...)
  unsigned mask = 0;
  int arg = 0, width = 32;
  alignas(16) unsigned char in[64];
  alignas(16) unsigned char out[64];
  // cp.async
  std::vector<AsyncCopy> copies;
  uint64_t groups_committed = 0;
  // at_mbarrier: the mbarrier it waits on and the parity of the phase it waits to complete
  uint64_t* wait_bar = nullptr;
  unsigned wait_parity = 0;
  // fence.proxy.async instructions it ran (mod 256; Note [async proxy] in sim/tma.cpp) and its
  // committed groups of bulk stores (cp.async.bulk.commit_group)
  uint8_t proxy_fences = 0;
  uint64_t bulk_groups_committed = 0;
  // wgmma.mma_async operations issued and not yet waited for (wgmma.cpp), and its committed groups
  std::vector<WgmmaOp> wgmma;
  uint64_t wgmma_groups_committed = 0;
  // barrier.cluster: arrived and not yet waited, and the barrier's phase it arrived in
  bool cluster_arrived = false;
  uint32_t cluster_phase = 0;
};

// A tensor copy's box (tma.cpp): the tensor map's fields and the box's coordinates.
struct TmaBox {
  uintptr_t base = 0;
  int rank = 0, elem = 0, swizzle = 0;  // swizzle: 0 or its span in bytes
  bool float_type = false, nan_fill = false;
  uint64_t dims[5] = {}, strides[5] = {};  // strides in bytes, strides[0] = elem
  uint32_t box[5] = {}, estride[5] = {};
  int32_t coord[5] = {};
  // elements loaded along dimension i
  uint32_t count(int i) const { return (box[i] + estride[i] - 1) / estride[i]; }
  uint32_t bytes() const {
    uint32_t n = static_cast<uint32_t>(elem);
    for (int i = 0; i < rank; ++i) n *= count(i);
    return n;
  }
};
// A bulk copy issued and not performed yet (Note [bulk copies land late] in sim/mbarrier.cpp):
// a load into shared memory at `dst` (`bytes` bytes from `src`, or with has_box a tensor copy's
// box) completing on `bar`; or, with `store`, a tensor store of `box` from the shared memory at
// `dst`, in its issuer's bulk group `group` (cp.async.bulk.wait_group performs it). Trivially
// destructible, so a fault that ends the issuing thread (its stack abandoned) leaks nothing.
struct BulkCopy {
  unsigned char* dst;  // shared memory: the load's destination, the store's source
  const void* src;
  uint32_t bytes;
  uint64_t* bar;  // the mbarrier a load completes `bytes` transactions on
  int issuer;     // the thread that issued it (cluster-wide id, Thread::sid)
  std::source_location where;
  TmaBox box{};
  bool has_box = false, store = false;
  uint64_t group = 0;
};
// mbarrier.cpp: records a bulk copy the running thread issued at kernel address `pc` (its global
// source already checked), after checking its barrier, its shared destination and that no copy in
// flight writes the same bytes.
void issue_bulk_copy(Thread& t, const BulkCopy& c, const void* pc);
// ... the same, into the shared memory of `dst` (t's block or, multicast, another of its cluster;
// c.dst and c.bar point into dst's shared memory).
void issue_bulk_copy(Thread& t, Block& dst, const BulkCopy& c, const void* pc);
// wgmma.cpp: an asynchronous write of shared bytes [off, off + n) (a bulk or tensor copy issued by
// `t`) that a wgmma.mma_async of the block still reads (issued, its group not yet waited for) is a
// fault: the write-after-read of a stage refilled too early.
void check_wgmma_operands_free(Thread& t, const Block& b, size_t off, size_t n, std::source_location loc);
// tma.cpp: lands a tensor copy's box at `dst` in b's shared memory (swizzled, out-of-bounds
// elements filled, as the map says); stores the box at `src` to global memory (elements outside
// the tensor are not written).
void land_tma_box(Block& b, unsigned char* dst, const TmaBox& box);
void store_tma_box(Block& b, const unsigned char* src, const TmaBox& box);
// memcheck.cpp: the async proxy reads shared bytes [off, off + n) for the running thread (a tensor
// store's source): each byte's last write must be ordered before it (Note [async proxy] in tma.cpp).
void check_async_proxy_read(Thread& t, size_t off, size_t n, std::source_location loc);

// What a block's threads see of its shared memory: the dynamic part first, then each static
// declaration in the order a thread first reached it, each followed by a red zone.
struct SharedRegion {
  const void* site;  // the declaration (nullptr: dynamic shared memory)
  const char* name;
  size_t offset, bytes;
};

struct Launch {
  const void* kernel = nullptr;
  dim3 grid{}, block{};
  size_t dynamic_smem = 0;
  // cudaFuncAttributeMaxDynamicSharedMemorySize of the kernel, 0 if never set. Note [shared memory
  // limits] in runtime_api.cpp.
  size_t dynamic_smem_attr = 0;
  KernelBody body;
  const void* params = nullptr;  // the argument copies every thread reads (parameter space)
  size_t param_bytes = 0;
  dim3 cluster{1, 1, 1};  // blocks per cluster in each dimension
  int device = 0;
  std::atomic<bool> aborted{false};
  // The efficiency counters of this launch, or null when they were off when it started.
  std::shared_ptr<CounterRecord> counters;
  std::string name() const;
};

// A warp's collective in progress (exec.cpp), so that the last lane to arrive completes it without
// scanning the warp: its signature and the lanes that have arrived; and which lanes exist and which
// have exited.
struct WarpState {
  unsigned exists = 0, exited = 0;
  bool pending = false;
  Collective kind = Collective::syncwarp;
  uint8_t op = 0;
  unsigned mask = 0, arrived = 0;
};

// The blocks of one cluster, run together by one host thread (Note [simulated clusters] in
// cluster.cpp); a launch without clusters runs clusters of one block.
struct Cluster {
  int size = 1;
  Block* blocks[kMaxClusterBlocks] = {};
  uint3 idx{};  // %clusterid
  // racecheck: the interval the last barrier.cluster began; accesses by another block of the
  // cluster in an interval before it are ordered before every access now
  uint32_t sync_epoch = 0;
  // barrier.cluster: its phase, and the threads that have arrived in it
  uint32_t phase = 0;
  int arrived = 0;
};

// One block being run by a host thread (the thread's Worker owns the stacks, the shared-memory
// arena and its race shadow, reused block after block).
struct Block {
  Launch* launch = nullptr;
  Cluster* cluster = nullptr;
  int rank = 0;  // %cluster_ctarank
  uint3 idx{};
  int nthreads = 0, nwarps = 0;
  Thread* threads = nullptr;
  int exited = 0, at_barrier = 0;
  uint32_t epoch = 0;           // racecheck: the current barrier interval
  uint32_t first_epoch = 0;     // racecheck: the block's first interval (older shadow entries are stale)
  uint8_t warp_epoch[32] = {};  // racecheck: per warp, bumped by every completed warp collective
  WarpState warps[32];
  // shared memory: [smem, smem + smem_capacity); the regions handed out so far
  unsigned char* smem = nullptr;
  size_t smem_capacity = 0, smem_used = 0, static_bytes = 0;
  std::vector<SharedRegion>* regions = nullptr;
  mutable size_t last_region = 0;         // memcheck.cpp: the region the last shared access hit
  std::vector<BulkCopy>* bulk = nullptr;  // cp.async.bulk copies in flight, in issue order
  bool racecheck = true;                  // config().racecheck, read once per block
  bool counting = false;                  // the launch records efficiency counters (counters.cpp)
  uint16_t maxnreg[8] = {};               // per warpgroup, its last setmaxnreg (0: none; wgmma.cpp)
  void* shadow = nullptr;                 // memcheck.cpp's race shadow, one entry per shared byte
  bool done() const { return exited == nthreads; }
  // every fiber stack of this block: [stacks_lo, stacks_lo + stack_slots * stack_bytes)
  char* stacks_lo = nullptr;
  size_t stack_bytes = 0;
  int stack_slots = 0;
};

// The simulated thread running on this host thread, or nullptr.
extern thread_local constinit Thread* t_current_thread;
inline Thread* current_thread() { return t_current_thread; }
// Warp-wide matrix instructions (ptx.cpp) go through the collective machinery as
// Collective::match with op = kMmaOp | bf16, or kLdmatrixOp | count | (trans ? 8 : 0).
inline constexpr uint8_t kMmaOp = 0x20, kLdmatrixOp = 0x10;
void warp_matrix_op(Thread& me, uint8_t op, std::source_location loc);
// Ends the current simulated thread at once (after a fault): control returns to the block's
// scheduler, which abandons the block. Never returns.
[[noreturn]] void kill_current_thread();
// The running simulated thread; aborts the process when `what` (a built-in) is used outside a kernel.
Thread& thread_in_kernel(const char* what);
// "kernels/ops/x.cu:12": a source location from kernels/, core/, tests/ or bench/ on.
std::string source_text(const std::source_location& loc);
// Records a fault of the running thread: "<kernel, block, thread>: <what> (<file:line>)".
void report_fault_at(cudaError_t code, const std::string& what, std::source_location loc);
// ... and ends the thread, in a statement of its own, so the message's temporaries are gone first
// (the fiber's stack is abandoned, not unwound).
#define EMBER_SIM_FAULT_AT(code, what, loc)               \
  do {                                                    \
    ::ember::sim::report_fault_at((code), (what), (loc)); \
    ::ember::sim::kill_current_thread();                  \
  } while (0)
// The running thread (its state already set to a waiting one) lets the block's other threads run;
// returns when something made it runnable again (ends it if the launch was aborted meanwhile).
void wait_current_thread();
// mbarrier.cpp: mbarrier.arrive[.expect_tx] by t on the barrier at `bar` in owner's shared memory
// (t's block, or another of its cluster); returns the state token.
uint64_t mbarrier_arrive_in(Thread& t, Block& owner, uint64_t* bar, uint32_t tx, std::source_location loc);
// mbarrier.cpp: the block's bulk copies in flight on `bar` land (all of them when null), in issue
// order, each completing its transactions; returns how many landed.
int land_bulk_copies(Block& b, const uint64_t* bar);
// mbarrier.cpp: "waits on the mbarrier at shared offset ... (phase ..., ...)" for a stuck report.
std::string describe_mbarrier_wait(const Block& b, const Thread& t);
// cluster.cpp: the block of t's cluster whose shared memory holds `a`, other than t's own (nullptr if
// none); the thread of a cluster-wide id; a thread exits (it no longer counts for barrier.cluster).
Block* cluster_block_at(const Thread& t, uintptr_t a);
Thread& thread_by_sid(const Block& b, int sid);
// "the cluster's block of rank r, whose threads have all exited (...)": why b's shared memory may
// not be used any more, for reports.
std::string exited_block(const Block& b);
void cluster_thread_exited(Thread& t);
// "kernel K block (x,y,z) thread (x,y,z)" for reports.
std::string where_am_i(const Thread& t);
// Runs a whole grid (called on the stream's worker thread); returns when every block is done.
void run_grid(Launch& launch);
// Calls body(i) for i in [0, blocks) on the simulator's block threads (block_pool.cpp).
void run_blocks(int64_t blocks, const std::function<void(int64_t)>& body);
// The block's shared memory.
struct SharedView {
  unsigned char* base;
  size_t capacity;
};

// A thread's wait for its asynchronous requests (cp.async, wgmma): of the groups 1..committed, all
// but the newest n must be complete. Hands each request of those groups to `done`, in issue order,
// and keeps the rest.
template <class T, class F>
void complete_groups(std::vector<T>& pending, uint64_t committed, int n, F&& done) {
  const uint64_t upto = committed > static_cast<uint64_t>(n) ? committed - static_cast<uint64_t>(n) : 0;
  size_t keep = 0;
  for (size_t i = 0; i < pending.size(); ++i) {
    if (pending[i].group > upto) pending[keep++] = pending[i];
    else done(pending[i]);
  }
  pending.resize(keep);
}

// ---- memory checks (memcheck.cpp) ----
enum class Access : uint8_t { read, write, atomic };
// Checks one access by the running simulated thread; faults (and never returns) when it is bad.
// `count`: the access goes into the efficiency counters (when they are on) as what it is.
void check_access(Thread& t, uintptr_t address, size_t bytes, Access kind, const void* pc, bool count = true);
// The shared-memory race shadow: a new barrier interval begins (block start or barrier).
uint32_t next_epoch();
// An access of the shared memory of `owner`, another block of t's cluster, at offset `off`
// (distributed shared memory): bounds, bulk copies in flight and racecheck as for t's own.
void remote_shared_access(Thread& t, Block& owner, size_t off, size_t n, Access k, const void* pc);
// An access of shared bytes [off, off + n) of `owner` that a bulk copy in flight writes: a fault (the thread
// did not wait for the copy's mbarrier). Called by the shared-memory checks while copies are in
// flight (mbarrier.cpp).
void check_bulk_in_flight(Thread& t, Block& owner, size_t off, size_t n, Access k, const void* pc);
// Shared bytes an asynchronous copy wrote: bounds-checked against the block's declarations
// (faults `t` when outside them) and, for racecheck, written before every access of this interval.
void check_shared_destination(Thread& t, const Block& dst, size_t off, size_t n, const void* pc);
void async_wrote_shared(Block& b, size_t off, size_t n);
// Checks done by the simulator's own device functions (atomics, ptx.cpp) on behalf of the
// running thread; `pc` is the kernel code that called them.
void atomic_access(const void* p, size_t bytes, const void* pc);
void checked_access(const void* p, size_t bytes, Access kind, const void* pc);

// ---- efficiency counters (counters.cpp; counters.h is the API) ----
// What one lane's access counts as. Only global (device, pinned) and shared memory are counted.
enum class CountKind : uint8_t { global_load, global_store, shared_load, shared_store, ldmatrix, atomic };
// Called as a launch is queued on a stream (sets L.counters when the counters are on) ...
void counters_launch_queued(Launch& L);
// ... by run_grid around a launch (for graph replays, decides then) ...
void counters_launch_begin(Launch& L);
void counters_launch_end(Launch& L);
// ... by run_cluster around a block (sets b.counting) ...
void counters_block_begin(Block& b);
void counters_block_end(Block& b);
// ... for each counted access of a lane (only while b.counting) ...
void count_access(Thread& t, uintptr_t address, size_t bytes, CountKind kind, const void* pc);
// ... when a barrier releases the block, and when a warp collective completes (`whole_warp`: every
// live lane of the warp took part, so the warp's lanes are all at the same point).
void counters_barrier(Block& b);
// ... when one of the block's mbarriers completes a phase ...
void counters_mbarrier_phase(Block& b);
void counters_warp_collective(Block& b, int warp, bool whole_warp);

// ---- streams and launches (runtime_api.cpp) ----
int current_device();
// Waits until every stream of every device has run all its queued work.
void wait_all_streams();
// Called at the start of every launch: checks configuration limits; returns the error to report.
cudaError_t check_launch_config(const Launch& l);
size_t kernel_smem_attribute(const void* kernel);
// The shared-memory limits a launch breaks with `static_bytes` of static shared memory ("" if
// none): Note [shared memory limits] in runtime_api.cpp.
std::string shared_memory_problem(const Launch& l, size_t static_bytes);
// Remembers the static shared memory a kernel declared (learnt when it runs), so later launches
// are checked against the limit when they are made.
void note_static_smem(const void* kernel, size_t bytes);

}  // namespace ember::sim
