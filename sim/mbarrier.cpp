// mbarriers and cp.async.bulk in the simulator, for the wrappers of kernels/common/mbarrier.cuh,
// with the semantics the PTX ISA documents (Note [mbarrier phases] there).
//
// The barrier's 8 bytes of shared memory hold the simulator's own encoding of its state (the
// hardware's is opaque to kernels): bits 0-19 the pending arrivals of the current phase, 20-39 the
// expected arrivals (init's count), 40-60 the transaction count (21-bit two's complement, as the
// ISA bounds it to +-(2^20 - 1)), 61-62 the value 01 once initialised (shared memory starts as
// 0xff.., which reads as not initialised), 63 the current phase's parity.
//
// Note [bulk copies land late]: a bulk copy is checked when it is issued (its global source read in
// bounds, its shared destination inside one declaration, 16-byte alignment, an initialised
// barrier) and performed later, when a thread would otherwise wait for the phase it belongs to:
// try_wait on its barrier first lands the barrier's copies in issue order, each counting its bytes
// off the transaction count, and a block with nothing runnable lands all of them before it is called
// stuck. Until then its destination reads as the poison shared memory starts with, and any access of
// those bytes is reported (a read before the wait for the copy's barrier, or a write racing the
// copy). A block that ends with copies in flight is reported too: no one waited for them. A
// multicast copy (cluster.cpp) is one such copy in each block it names. Not modelled yet: the
// write-after-read race of a copy issued into a buffer other threads still read with generic
// loads (the producer not waiting for the consumers' "empty" barrier; wgmma's reads are checked).
#include <cstring>
#include <string>

#include "sim/internal.h"
#include "sim/mbarrier_api.h"

namespace ember::sim {

namespace {

struct BarState {
  uint32_t pending = 0, expected = 0;
  int32_t tx = 0;
  bool init = false;
  unsigned phase = 0;
};

constexpr uint32_t kMaxCount = (1u << 20) - 1;
constexpr int32_t kMaxTx = (1 << 20) - 1;

BarState load(const uint64_t* bar) {
  uint64_t v;
  std::memcpy(&v, bar, sizeof v);
  BarState s;
  s.pending = static_cast<uint32_t>(v & 0xfffff);
  s.expected = static_cast<uint32_t>((v >> 20) & 0xfffff);
  const auto tx = static_cast<uint32_t>((v >> 40) & 0x1fffff);
  s.tx = (tx & 0x100000) != 0 ? static_cast<int32_t>(tx) - (1 << 21) : static_cast<int32_t>(tx);
  s.init = ((v >> 61) & 3) == 1;
  s.phase = static_cast<unsigned>(v >> 63);
  return s;
}

void store(uint64_t* bar, const BarState& s) {
  const uint64_t v = static_cast<uint64_t>(s.pending) | (static_cast<uint64_t>(s.expected) << 20) |
                     ((static_cast<uint64_t>(static_cast<uint32_t>(s.tx)) & 0x1fffff) << 40) |
                     (uint64_t{s.init ? 1u : 0u} << 61) | (static_cast<uint64_t>(s.phase & 1) << 63);
  std::memcpy(bar, &v, sizeof v);
}

size_t shared_off(const Block& b, const void* p) {
  return static_cast<size_t>(static_cast<const unsigned char*>(p) - b.smem);
}

// The barrier at `bar` as instruction `op` sees it: in b's shared memory (the running thread's
// block, or another of its cluster), 8-byte aligned, inside a declaration, and (unless
// `may_be_new`) initialised.
BarState checked_barrier(Thread& t, const Block& b, const uint64_t* bar, const char* op, std::source_location loc,
                         bool may_be_new = false) {
  const size_t off = shared_off(b, bar);
  if (off >= b.smem_capacity)
    EMBER_SIM_FAULT_AT(cudaErrorIllegalAddress, std::string(op) + " on an address that is not shared memory", loc);
  if (off % 8 != 0)
    EMBER_SIM_FAULT_AT(
        cudaErrorMisalignedAddress,
        std::string(op) + " on an mbarrier that is not 8-byte aligned (shared offset " + std::to_string(off) + ")",
        loc);
  check_shared_destination(t, b, off, 8, __builtin_return_address(0));
  const BarState s = load(bar);
  if (!may_be_new && !s.init)
    EMBER_SIM_FAULT_AT(
        cudaErrorLaunchFailure,
        std::string(op) + " on the mbarrier at shared offset " + std::to_string(off) +
            (&b != t.block ? " of the cluster's block of rank " + std::to_string(b.rank) : "") +
            ", which is not initialised (mbarrier.init it first, and not after mbarrier.inval" +
            (&b != t.block ? "; a barrier.cluster between the init and other blocks' use orders them" : "") + ")",
        loc);
  return s;
}
BarState checked_barrier(Thread& t, const uint64_t* bar, const char* op, std::source_location loc,
                         bool may_be_new = false) {
  return checked_barrier(t, *t.block, bar, op, loc, may_be_new);
}

// The phase is over when its arrivals and its transactions are all in: the barrier moves to the
// next phase, and the threads waiting for this one may go on. Returns whether any was waiting.
bool complete_if_done(Block& b, uint64_t* bar, BarState& s) {
  if (s.pending != 0 || s.tx != 0) return false;
  s.phase ^= 1;
  s.pending = s.expected;
  if (b.counting) counters_mbarrier_phase(b);
  bool woke = false;
  for (int i = 0; i < b.nthreads; ++i) {
    Thread& o = b.threads[i];
    if (o.state == ThreadState::at_mbarrier && o.wait_bar == bar && o.wait_parity != s.phase) {
      o.state = ThreadState::runnable;
      woke = true;
    }
  }
  return woke;
}

bool add_tx(BarState& s, int64_t delta) {
  const int64_t v = static_cast<int64_t>(s.tx) + delta;
  if (v > kMaxTx || v < -kMaxTx) return false;
  s.tx = static_cast<int32_t>(v);
  return true;
}

}  // namespace

void mbarrier_init(uint64_t* bar, uint32_t count, std::source_location loc) {
  Thread& t = thread_in_kernel("mbarrier.init");
  const BarState old = checked_barrier(t, bar, "mbarrier.init", loc, true);
  if (old.init)
    EMBER_SIM_FAULT_AT(cudaErrorLaunchFailure,
                       "mbarrier.init of an mbarrier that is already initialised (shared offset " +
                           std::to_string(shared_off(*t.block, bar)) + "; mbarrier.inval it first)",
                       loc);
  if (count < 1 || count > kMaxCount)
    EMBER_SIM_FAULT_AT(cudaErrorLaunchFailure,
                       "mbarrier.init with count " + std::to_string(count) + " (it must be 1 to 2^20 - 1)", loc);
  BarState s;
  s.pending = s.expected = count;
  s.init = true;
  store(bar, s);
}

uint64_t mbarrier_arrive_in(Thread& t, Block& owner, uint64_t* bar, uint32_t tx, std::source_location loc) {
  BarState s = checked_barrier(t, owner, bar, "mbarrier.arrive", loc);
  if (!add_tx(s, tx))
    EMBER_SIM_FAULT_AT(cudaErrorLaunchFailure,
                       "mbarrier.arrive.expect_tx takes the transaction count past 2^20 - 1 (" + std::to_string(s.tx) +
                           " + " + std::to_string(tx) + ")",
                       loc);
  if (s.pending == 0)
    EMBER_SIM_FAULT_AT(cudaErrorLaunchFailure,
                       "mbarrier.arrive on an mbarrier whose phase has no arrivals left to wait for (all " +
                           std::to_string(s.expected) + " arrived; the phase waits for " + std::to_string(s.tx) +
                           " transaction bytes)",
                       loc);
  const uint64_t token = s.phase;
  --s.pending;
  const bool woke = complete_if_done(owner, bar, s);
  store(bar, s);
  // The threads this arrival released run before the arriving thread goes on, the order that
  // shows a stage released too early (e.g. before the MMAs reading it completed: racecheck then
  // sees the refill while they still read it, wgmma.cpp).
  if (woke) wait_current_thread();
  return token;
}

uint64_t mbarrier_arrive(uint64_t* bar, uint32_t tx, std::source_location loc) {
  Thread& t = thread_in_kernel("mbarrier.arrive");
  return mbarrier_arrive_in(t, *t.block, bar, tx, loc);
}

void mbarrier_expect_tx(uint64_t* bar, uint32_t tx, std::source_location loc) {
  Thread& t = thread_in_kernel("mbarrier.expect_tx");
  BarState s = checked_barrier(t, bar, "mbarrier.expect_tx", loc);
  if (!add_tx(s, tx))
    EMBER_SIM_FAULT_AT(cudaErrorLaunchFailure, "mbarrier.expect_tx takes the transaction count past 2^20 - 1", loc);
  store(bar, s);
}

bool mbarrier_try_wait_parity(uint64_t* bar, uint32_t parity, std::source_location loc) {
  Thread& t = thread_in_kernel("mbarrier.try_wait.parity");
  BarState s = checked_barrier(t, bar, "mbarrier.try_wait.parity", loc);
  parity &= 1;
  if (s.phase != parity) return true;  // the phase of that parity is over
  land_bulk_copies(*t.block, bar);
  s = load(bar);
  if (s.phase != parity) return true;
  t.state = ThreadState::at_mbarrier;
  t.wait_bar = bar;
  t.wait_parity = parity;
  t.where = loc;
  wait_current_thread();  // until complete_if_done wakes it (or the block is stuck)
  return true;
}

void mbarrier_inval(uint64_t* bar, std::source_location loc) {
  Thread& t = thread_in_kernel("mbarrier.inval");
  checked_barrier(t, bar, "mbarrier.inval", loc);
  for (const BulkCopy& c : *t.block->bulk)
    if (c.bar == bar)
      EMBER_SIM_FAULT_AT(cudaErrorLaunchFailure, "mbarrier.inval of an mbarrier with a cp.async.bulk still in flight",
                         loc);
  store(bar, BarState{});
}

void bulk_copy_g2s(void* smem_dst, const void* gmem_src, uint32_t bytes, uint64_t* bar, std::source_location loc) {
  Thread& t = thread_in_kernel("cp.async.bulk");
  Block& b = *t.block;
  const size_t off = shared_off(b, smem_dst);
  if (off >= b.smem_capacity)
    EMBER_SIM_FAULT_AT(cudaErrorIllegalAddress, "cp.async.bulk destination is not shared memory", loc);
  const auto src = reinterpret_cast<uintptr_t>(gmem_src);
  if (src - reinterpret_cast<uintptr_t>(b.smem) < b.smem_capacity)
    EMBER_SIM_FAULT_AT(cudaErrorIllegalAddress,
                       "cp.async.bulk source is shared memory (this form copies global memory)", loc);
  if (off % 16 != 0 || src % 16 != 0 || bytes % 16 != 0 || bytes == 0)
    EMBER_SIM_FAULT_AT(cudaErrorMisalignedAddress,
                       "cp.async.bulk of " + std::to_string(bytes) + " bytes from " + std::to_string(src % 16) +
                           " bytes past 16-byte alignment to shared offset " + std::to_string(off) +
                           ": addresses must be 16-byte aligned and the size a positive multiple of 16",
                       loc);
  const void* pc = __builtin_return_address(0);
  check_access(t, src, bytes, Access::read, pc);  // the global read, counted as issued
  issue_bulk_copy(t, BulkCopy{static_cast<unsigned char*>(smem_dst), gmem_src, bytes, bar, t.sid, loc}, pc);
}

void issue_bulk_copy(Thread& t, const BulkCopy& copy, const void* pc) { issue_bulk_copy(t, *t.block, copy, pc); }

void issue_bulk_copy(Thread& t, Block& b, const BulkCopy& copy, const void* pc) {
  if (!copy.store) checked_barrier(t, b, copy.bar, "cp.async.bulk's mbarrier", copy.where);
  check_shared_destination(t, b, shared_off(b, copy.dst), copy.bytes, pc);
  if (!copy.store) check_wgmma_operands_free(t, b, shared_off(b, copy.dst), copy.bytes, copy.where);
  for (const BulkCopy& c : *b.bulk)
    if ((!c.store || !copy.store) && c.dst < copy.dst + copy.bytes && copy.dst < c.dst + c.bytes)
      EMBER_SIM_FAULT_AT(cudaErrorLaunchFailure,
                         std::string(copy.store ? "cp.async.bulk.tensor store of" : "cp.async.bulk into") +
                             " shared memory a cp.async.bulk " + (c.store ? "store still reads" : "still writes") +
                             " (issued at " + source_text(c.where) + ")",
                         copy.where);
  if (b.counting && &b == t.block)
    count_access(t, reinterpret_cast<uintptr_t>(copy.dst), copy.bytes,
                 copy.store ? CountKind::shared_load : CountKind::shared_store, pc);
  b.bulk->push_back(copy);
}

int land_bulk_copies(Block& b, const uint64_t* bar) {
  std::vector<BulkCopy> keep, land;
  for (const BulkCopy& c : *b.bulk) (bar == nullptr || c.bar == bar ? land : keep).push_back(c);
  if (land.empty()) return 0;
  *b.bulk = std::move(keep);
  for (const BulkCopy& c : land) {
    if (c.store) {  // (only when every copy lands: a stuck block)
      store_tma_box(b, c.dst, c.box);
      continue;
    }
    if (c.has_box) land_tma_box(b, c.dst, c.box);
    else raw_copy(c.dst, c.src, c.bytes);
    async_wrote_shared(b, shared_off(b, c.dst), c.bytes);
    BarState s = load(c.bar);
    // (the barrier was checked when the copy was issued, and mbarrier.inval refuses one in flight)
    if (s.init && add_tx(s, -static_cast<int64_t>(c.bytes))) complete_if_done(b, c.bar, s);
    store(c.bar, s);
  }
  return static_cast<int>(land.size());
}

std::string describe_mbarrier_wait(const Block& b, const Thread& t) {
  const BarState s = load(t.wait_bar);
  return "wait on the mbarrier at shared offset " + std::to_string(shared_off(b, t.wait_bar)) +
         " for its phase of parity " + std::to_string(t.wait_parity) + " to complete (it is in that phase with " +
         std::to_string(s.pending) + " of " + std::to_string(s.expected) + " arrivals and " + std::to_string(s.tx) +
         " transaction bytes still to come)";
}

}  // namespace ember::sim
