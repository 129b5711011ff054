// Thread-block clusters in the simulator (sm_90): the cluster's special registers, barrier.cluster,
// distributed shared memory (mapa and the accesses through it) and remote mbarrier arrivals, for
// the wrappers of kernels/common/cluster.cuh (tests/test_cluster_sm90a_gpu.cu checks them on a GPU too).
//
// Note [simulated clusters]: the blocks of a cluster run together on one host thread (exec.cpp's
// run_cluster), each with its own shared memory, race shadow and fibers; a scheduler round goes
// through the threads of every block in rank order, so a thread waiting for another block (a
// barrier.cluster, an mbarrier a remote block arrives on) lets that block run, and a cluster where
// nothing can run is reported as stuck, naming each block's waits. Blocks are ranked x fastest
// within the cluster (%cluster_ctarank), as on a GPU. A generic address into another block's
// shared memory (from mapa) is checked as that block's own (bounds, bulk copies in flight,
// racecheck in its shadow); once all of a block's threads have exited, an access to its shared
// memory, a remote arrival on its barriers or a multicast into it is reported (a block must not
// exit while the others may still use its shared memory).
//
// Racecheck across blocks: the shadow names threads by a cluster-wide id, and two accesses by
// threads of different blocks are ordered only when a barrier.cluster completed between them.
// Completing one starts a new interval in every block of the cluster (it also orders each block's
// own threads, as __syncthreads() does), and remembers it (Cluster::sync_epoch): an access of
// another block recorded in an interval before that one is ordered before every later access. Not
// modelled: the ordering mbarriers give to ordinary loads and stores (as within a block, they order
// the async proxy's copies, not generic accesses), and .relaxed arrivals (treated as release).
// The efficiency counters count each block's own accesses: a multicast copy as a store into the
// issuer's shared memory only, accesses of another block's shared memory not at all. A completed
// barrier.cluster counts as a barrier in each block that has threads left (a serial step in the
// time model, as a __syncthreads is).
#include <string>

#include "sim/cluster_api.h"
#include "sim/internal.h"

namespace ember::sim {

namespace {

Cluster& cluster_of(const char* what) { return *thread_in_kernel(what).block->cluster; }

// Threads of the cluster that have not exited.
int live_threads(const Cluster& c) {
  int n = 0;
  for (int r = 0; r < c.size; ++r) n += c.blocks[r]->nthreads - c.blocks[r]->exited;
  return n;
}

// Every live thread has arrived: the phase completes, its waiters go on, and a new racecheck
// interval begins in every block.
void complete_if_all_arrived(Cluster& c) {
  if (c.arrived == 0 || c.arrived < live_threads(c)) return;
  const uint32_t phase = c.phase++;
  c.arrived = 0;
  const uint32_t epoch = next_epoch();
  c.sync_epoch = epoch;
  for (int r = 0; r < c.size; ++r) {
    Block& b = *c.blocks[r];
    b.epoch = epoch;
    if (b.counting && b.exited < b.nthreads) counters_barrier(b);  // a serial step of each live block
    for (int i = 0; i < b.nthreads; ++i) {
      Thread& t = b.threads[i];
      if (t.state == ThreadState::at_cluster && t.cluster_phase == phase) t.state = ThreadState::runnable;
    }
  }
}

// The block of rank `rank` of t's cluster, for instruction `op`.
Block& rank_block(Thread& t, unsigned rank, const char* op, std::source_location loc) {
  const Cluster& c = *t.block->cluster;
  if (rank >= static_cast<unsigned>(c.size))
    EMBER_SIM_FAULT_AT(cudaErrorLaunchFailure,
                       std::string(op) + " names the block of rank " + std::to_string(rank) + " in a cluster of " +
                           std::to_string(c.size) + " block(s)",
                       loc);
  return *c.blocks[rank];
}

// The offset of `p` in the running thread's shared memory.
size_t own_shared_offset(Thread& t, const void* p, const char* op, std::source_location loc) {
  const Block& b = *t.block;
  const auto off = static_cast<size_t>(static_cast<const unsigned char*>(p) - b.smem);
  if (static_cast<const unsigned char*>(p) < b.smem || off >= b.smem_capacity)
    EMBER_SIM_FAULT_AT(cudaErrorIllegalAddress,
                       std::string(op) + " of an address that is not the block's own shared memory", loc);
  return off;
}

}  // namespace

Block* cluster_block_at(const Thread& t, uintptr_t a) {
  const Cluster& c = *t.block->cluster;
  for (int r = 0; r < c.size; ++r) {
    Block* b = c.blocks[r];
    if (b != t.block && a - reinterpret_cast<uintptr_t>(b->smem) < b->smem_capacity) return b;
  }
  return nullptr;
}

std::string exited_block(const Block& b) {
  return "the cluster's block of rank " + std::to_string(b.rank) +
         ", whose threads have all exited (a block must not exit while others of its cluster may still use its "
         "shared memory or barriers: end with a barrier.cluster)";
}

Thread& thread_by_sid(const Block& b, int sid) {
  return b.cluster->blocks[sid >> kSidRankShift]->threads[sid & ((1 << kSidRankShift) - 1)];
}

void cluster_thread_exited(Thread& t) {
  Cluster& c = *t.block->cluster;
  if (t.cluster_arrived && t.cluster_phase == c.phase) --c.arrived;
  t.cluster_arrived = false;
  complete_if_all_arrived(c);
}

unsigned cluster_ctarank() { return static_cast<unsigned>(thread_in_kernel("%cluster_ctarank").block->rank); }
unsigned cluster_nctarank() { return static_cast<unsigned>(cluster_of("%cluster_nctarank").size); }
uint3 cluster_ctaid() {
  const Block& b = *thread_in_kernel("%cluster_ctaid").block;
  const dim3 d = b.launch->cluster;
  const auto r = static_cast<unsigned>(b.rank);
  return uint3{r % d.x, (r / d.x) % d.y, r / (d.x * d.y)};
}
dim3 cluster_nctaid() { return thread_in_kernel("%cluster_nctaid").block->launch->cluster; }
uint3 cluster_id() { return cluster_of("%clusterid").idx; }

void cluster_arrive(bool relaxed, std::source_location loc) {
  Thread& t = thread_in_kernel(relaxed ? "barrier.cluster.arrive.relaxed" : "barrier.cluster.arrive");
  Cluster& c = *t.block->cluster;
  if (t.cluster_arrived)
    EMBER_SIM_FAULT_AT(cudaErrorLaunchFailure,
                       "barrier.cluster.arrive by a thread that arrived before and has not waited since "
                       "(barrier.cluster.wait comes between two arrivals)",
                       loc);
  t.cluster_arrived = true;
  t.cluster_phase = c.phase;
  ++c.arrived;
  complete_if_all_arrived(c);
}

void cluster_wait(std::source_location loc) {
  Thread& t = thread_in_kernel("barrier.cluster.wait");
  if (!t.cluster_arrived)
    EMBER_SIM_FAULT_AT(cudaErrorLaunchFailure,
                       "barrier.cluster.wait by a thread that has not arrived (barrier.cluster.arrive first)", loc);
  if (t.cluster_phase == t.block->cluster->phase) {
    t.state = ThreadState::at_cluster;
    t.where = loc;
    wait_current_thread();  // until the last arrival (complete_if_all_arrived), or the cluster is stuck
  }
  t.cluster_arrived = false;
}

void* map_shared_rank(const void* p, unsigned rank, std::source_location loc) {
  Thread& t = thread_in_kernel("mapa");
  const size_t off = own_shared_offset(t, p, "mapa", loc);
  return rank_block(t, rank, "mapa", loc).smem + off;
}

void mbarrier_arrive_cluster(uint64_t* bar, unsigned rank, std::source_location loc) {
  Thread& t = thread_in_kernel("mbarrier.arrive.shared::cluster");
  const size_t off = own_shared_offset(t, bar, "mbarrier.arrive.shared::cluster", loc);
  Block& owner = rank_block(t, rank, "mbarrier.arrive.shared::cluster", loc);
  if (owner.done())
    EMBER_SIM_FAULT_AT(cudaErrorLaunchFailure, "mbarrier.arrive.shared::cluster on a barrier of " + exited_block(owner),
                       loc);
  mbarrier_arrive_in(t, owner, reinterpret_cast<uint64_t*>(owner.smem + off), 0, loc);
}

}  // namespace ember::sim
