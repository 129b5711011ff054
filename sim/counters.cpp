// Efficiency counters of the SIMT simulator (counters.h; docs/simulator.md, "Efficiency counters").
//
// Note [counting warp requests]: the simulator runs the lanes of a warp one after another, each
// until it blocks (a barrier, a warp collective) or exits, so lane 0 may run a whole loop before
// lane 1 starts it. A lane's accesses are therefore matched by instruction: each lane keeps, per
// code address (and kind: one cp.async is a global read and a shared write at the same address),
// how often it has executed it, and the k-th execution of an address by each lane of a warp is one
// warp-wide request, gathered in the warp's table of open requests. A request is closed (its
// sectors or wavefronts computed, added to the block's sums) as soon as every live lane of the
// warp has joined it; otherwise when the warp's lanes are next known to be at one point: a
// barrier releasing the block, a warp collective that all live lanes of the warp took part in,
// or the end of the block. Those points also restart the per-lane execution counts, so lanes that
// diverged before them (one lane ran a loop once more) are aligned again after them, as a GPU's
// reconvergence would. Each block sums into its own counters, merged into the launch's under a
// lock when it ends (blocks run in parallel on the host threads).
//
// Note [ldmatrix wavefronts]: ldmatrix.x{1,2,4} reads one 8x8 matrix of b16 per group of 8 lanes,
// each lane giving one row address of 16 bytes, and shared memory serves it matrix by matrix: the
// 8 rows of a matrix are 128 bytes, one wavefront when they fall in distinct banks (which is what
// padding or swizzling a tile arranges), more when rows share a bank. So an ldmatrix request takes
// the sum over its matrices of the largest number of distinct words one bank holds among that
// matrix's rows, which is what Nsight Compute reports for it. Counting it over the whole warp as
// an ordinary load would hide a conflict inside one matrix behind the other matrices' banks (x4
// reads 512 bytes: 4 words per bank even when each matrix is 2-way conflicted in half the banks).
// It counts as one shared load request of 16 bytes per row, and as a warp collective.
//
// Atomics (global or shared) count only in `atomics`, one per warp-wide atomic instruction; they
// are not load or store requests (a GPU does them in the L2 or the shared-memory unit, with
// traffic of their own that these counters do not model).
#include <algorithm>
#include <bit>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "sim/counters.h"
#include "sim/internal.h"

namespace ember::sim {

struct CounterRecord {
  std::mutex mu;
  LaunchCounters c;
  bool done = false;  // the launch has finished (take_counters only hands out finished ones)
};

namespace {

std::atomic<bool> g_counters_on{false};
std::mutex g_records_mu;
std::vector<std::shared_ptr<CounterRecord>> g_records;  // in the order the launches started

// One lane's part of an open request.
struct LaneAccess {
  uintptr_t address;
  uint32_t bytes;
  uint8_t lane;
};

struct Request {
  CountKind kind;
  uint8_t n = 0;
  uint32_t lanes = 0;
  LaneAccess a[32];
};

struct RequestKey {
  uint64_t site;  // code address * 8 + kind
  uint32_t occurrence;
  bool operator==(const RequestKey&) const = default;
};
struct RequestKeyHash {
  size_t operator()(const RequestKey& k) const {
    return static_cast<size_t>((k.site ^ (k.site >> 29)) * 0x9e3779b97f4a7c15ull + k.occurrence);
  }
};

// What one host thread keeps for a block it runs, one per block of the cluster it runs (Note
// [simulated clusters] in cluster.cpp), by rank.
struct BlockState {
  LaunchCounters sums;  // the numeric fields only
  std::vector<Request> pool;
  std::vector<uint32_t> free_slots;
  std::unordered_map<RequestKey, uint32_t, RequestKeyHash> open[32];  // per warp: key -> pool slot
  std::vector<std::unordered_map<uint64_t, uint32_t>> executed;       // per thread: site -> count
};
thread_local BlockState t_block[kMaxClusterBlocks];

uint64_t div_up(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

// The byte ranges of a request, sorted and merged: (distinct bytes, 32-byte sectors touched).
std::pair<uint64_t, uint64_t> merged_extent(const Request& r) {
  std::pair<uintptr_t, uintptr_t> iv[32];
  for (int i = 0; i < r.n; ++i) iv[i] = {r.a[i].address, r.a[i].address + r.a[i].bytes};
  std::sort(iv, iv + r.n);
  uint64_t bytes = 0, sectors = 0;
  uintptr_t lo = iv[0].first, hi = iv[0].second;
  uintptr_t last_sector = ~uintptr_t{0};
  auto close = [&](uintptr_t l, uintptr_t h) {
    bytes += h - l;
    uintptr_t s0 = l / 32;
    const uintptr_t s1 = (h - 1) / 32;
    if (s0 == last_sector) ++s0;
    if (s1 >= s0) sectors += s1 - s0 + 1;
    last_sector = s1;
  };
  for (int i = 1; i < r.n; ++i) {
    if (iv[i].first <= hi) {
      hi = std::max(hi, iv[i].second);
    } else {
      close(lo, hi);
      lo = iv[i].first;
      hi = iv[i].second;
    }
  }
  close(lo, hi);
  return {bytes, sectors};
}

// The largest number of distinct 4-byte words one of the 32 banks holds among the accesses
// [from, to) of a request.
uint64_t max_words_per_bank(const Request& r, int from, int to) {
  std::vector<uintptr_t> words;
  for (int i = from; i < to; ++i)
    for (uintptr_t w = r.a[i].address / 4; w <= (r.a[i].address + r.a[i].bytes - 1) / 4; ++w) words.push_back(w);
  std::sort(words.begin(), words.end());
  words.erase(std::unique(words.begin(), words.end()), words.end());
  unsigned per_bank[32] = {};
  unsigned most = 0;
  for (uintptr_t w : words) most = std::max(most, ++per_bank[w % 32]);
  return most;
}

void close_request(BlockState& s, const Block& b, int warp, const Request& r) {
  LaunchCounters& c = s.sums;
  if (r.kind == CountKind::atomic) {
    ++c.atomics;
    return;
  }
  if (r.kind != CountKind::ldmatrix && std::popcount(r.lanes) < std::popcount(b.warps[warp].exists))
    ++c.partial_requests;
  uint64_t asked = 0;
  for (int i = 0; i < r.n; ++i) asked += r.a[i].bytes;
  const auto [distinct, sectors] = merged_extent(r);
  if (r.kind == CountKind::global_load || r.kind == CountKind::global_store) {
    GlobalCounters& g = r.kind == CountKind::global_load ? c.global_load : c.global_store;
    ++g.requests;
    g.sectors += sectors;
    g.ideal_sectors += div_up(distinct, 32);
    g.bytes += asked;
    return;
  }
  SharedCounters& sh = r.kind == CountKind::shared_store ? c.shared_store : c.shared_load;
  const uint64_t ideal = std::max<uint64_t>(1, div_up(distinct, 128));
  uint64_t wavefronts = 0;
  if (r.kind == CountKind::ldmatrix) {  // matrix by matrix (Note [ldmatrix wavefronts])
    Request sorted = r;
    std::sort(sorted.a, sorted.a + sorted.n, [](const LaneAccess& x, const LaneAccess& y) { return x.lane < y.lane; });
    int i = 0;
    while (i < sorted.n) {
      int j = i;
      while (j < sorted.n && sorted.a[j].lane / 8 == sorted.a[i].lane / 8) ++j;
      wavefronts += max_words_per_bank(sorted, i, j);
      i = j;
    }
  } else {
    wavefronts = max_words_per_bank(r, 0, r.n);
  }
  ++sh.requests;
  sh.wavefronts += std::max(wavefronts, ideal);
  sh.ideal_wavefronts += ideal;
  sh.bytes += asked;
}

// Closes every open request of warp w and restarts its lanes' execution counts (the lanes are all
// at one point: Note [counting warp requests]).
void flush_warp(BlockState& s, const Block& b, int w) {
  for (auto& [key, slot] : s.open[w]) {
    close_request(s, b, w, s.pool[slot]);
    s.free_slots.push_back(slot);
  }
  s.open[w].clear();
  const int end = std::min(b.nthreads, w * 32 + 32);
  for (int t = w * 32; t < end; ++t) s.executed[static_cast<size_t>(t)].clear();
}

}  // namespace

void set_counters_enabled(bool on) { g_counters_on.store(on, std::memory_order_relaxed); }
bool counters_enabled() { return g_counters_on.load(std::memory_order_relaxed); }

std::vector<LaunchCounters> take_counters() {
  wait_all_streams();
  std::lock_guard<std::mutex> lock(g_records_mu);
  std::vector<LaunchCounters> out;
  std::vector<std::shared_ptr<CounterRecord>> running;  // launched after the wait: kept for later
  for (auto& r : g_records) {
    std::lock_guard<std::mutex> rl(r->mu);
    if (r->done) out.push_back(std::move(r->c));
    else running.push_back(r);
  }
  g_records = std::move(running);
  return out;
}

// A launch is recorded when the counters are on as it is queued (so what a program launches
// between set_counters_enabled(true) and (false) is what gets recorded, however late its stream
// runs it); a graph's kernels, when the replay runs them.
void counters_launch_queued(Launch& L) {
  if (!g_counters_on.load(std::memory_order_relaxed)) return;
  auto r = std::make_shared<CounterRecord>();
  r->c.kernel = L.name();
  r->c.grid[0] = L.grid.x;
  r->c.grid[1] = L.grid.y;
  r->c.grid[2] = L.grid.z;
  r->c.block[0] = L.block.x;
  r->c.block[1] = L.block.y;
  r->c.block[2] = L.block.z;
  r->c.dynamic_shared_bytes = L.dynamic_smem;
  L.counters = r;
  std::lock_guard<std::mutex> lock(g_records_mu);
  g_records.push_back(std::move(r));
}

void counters_launch_begin(Launch& L) {
  if (L.counters == nullptr) counters_launch_queued(L);  // a graph replay
}

void counters_launch_end(Launch& L) {
  if (L.counters == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(L.counters->mu);
    L.counters->done = true;
  }
  L.counters.reset();
}

void counters_block_begin(Block& b) {
  b.counting = b.launch->counters != nullptr;
  if (!b.counting) return;
  BlockState& s = t_block[b.rank];
  s.sums = LaunchCounters{};
  if (s.executed.size() < static_cast<size_t>(b.nthreads)) s.executed.resize(static_cast<size_t>(b.nthreads));
  for (int t = 0; t < b.nthreads; ++t) s.executed[static_cast<size_t>(t)].clear();
  for (auto& o : s.open) o.clear();
  s.pool.clear();
  s.free_slots.clear();
}

void counters_block_end(Block& b) {
  BlockState& s = t_block[b.rank];
  for (int w = 0; w < b.nwarps; ++w) flush_warp(s, b, w);
  CounterRecord& r = *b.launch->counters;
  const LaunchCounters& x = s.sums;
  std::lock_guard<std::mutex> lock(r.mu);
  LaunchCounters& c = r.c;
  c.static_shared_bytes = std::max(c.static_shared_bytes, b.static_bytes);
  auto add_g = [](GlobalCounters& to, const GlobalCounters& from) {
    to.requests += from.requests;
    to.sectors += from.sectors;
    to.ideal_sectors += from.ideal_sectors;
    to.bytes += from.bytes;
  };
  auto add_s = [](SharedCounters& to, const SharedCounters& from) {
    to.requests += from.requests;
    to.wavefronts += from.wavefronts;
    to.ideal_wavefronts += from.ideal_wavefronts;
    to.bytes += from.bytes;
  };
  add_g(c.global_load, x.global_load);
  add_g(c.global_store, x.global_store);
  add_s(c.shared_load, x.shared_load);
  add_s(c.shared_store, x.shared_store);
  c.atomics += x.atomics;
  c.barriers += x.barriers;
  c.mbarrier_phases += x.mbarrier_phases;
  c.warp_collectives += x.warp_collectives;
  c.partial_requests += x.partial_requests;
}

void count_access(Thread& t, uintptr_t address, size_t bytes, CountKind kind, const void* pc) {
  const Block& b = *t.block;
  BlockState& s = t_block[b.rank];
  const uint64_t site = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(pc)) * 8 + static_cast<uint64_t>(kind);
  const uint32_t occurrence = s.executed[static_cast<size_t>(t.linear)][site]++;
  auto [it, fresh] = s.open[t.warp].try_emplace(RequestKey{site, occurrence}, 0u);
  if (fresh) {
    if (s.free_slots.empty()) {
      s.pool.emplace_back();
      it->second = static_cast<uint32_t>(s.pool.size() - 1);
    } else {
      it->second = s.free_slots.back();
      s.free_slots.pop_back();
    }
    Request& r = s.pool[it->second];
    r.kind = kind;
    r.n = 0;
    r.lanes = 0;
  }
  Request& r = s.pool[it->second];
  r.a[r.n++] = LaneAccess{address, static_cast<uint32_t>(bytes), static_cast<uint8_t>(t.lane)};
  r.lanes |= 1u << t.lane;
  const WarpState& ws = b.warps[t.warp];
  if ((r.lanes & (ws.exists & ~ws.exited)) == (ws.exists & ~ws.exited)) {  // every live lane is in
    close_request(s, b, t.warp, r);
    s.free_slots.push_back(it->second);
    s.open[t.warp].erase(it);
  }
}

void counters_barrier(Block& b) {
  BlockState& s = t_block[b.rank];
  ++s.sums.barriers;
  for (int w = 0; w < b.nwarps; ++w) flush_warp(s, b, w);
}

void counters_mbarrier_phase(Block& b) { ++t_block[b.rank].sums.mbarrier_phases; }

void counters_warp_collective(Block& b, int warp, bool whole_warp) {
  BlockState& s = t_block[b.rank];
  ++s.sums.warp_collectives;
  if (whole_warp) flush_warp(s, b, warp);
}

}  // namespace ember::sim
