// Multi-tensor launches: one kernel launch works on a whole list of tensors.
//
// Every tensor is cut into chunks of kChunk elements; each CUDA block handles one chunk of one
// tensor. The pointers, sizes and the block -> (tensor, chunk) map travel in a Table passed BY VALUE
// as a kernel parameter (__grid_constant__, so it is read in place from the parameter bank):
// nothing is uploaded with a host-to-device copy, so a launch never syncs and can be captured into
// a CUDA graph. A table holds up to kMaxTensors tensors and kMaxBlocks chunks (3.3 KB for Depth 5,
// under the classic 4 KB parameter limit); longer lists take several launches, and a tensor with
// more chunks than fit continues in the next table.
//
// Napkin math: docs/perf.md ("Napkin math behind the kernels").
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "core/cuda/kernel.cuh"

namespace ember::mt {

inline constexpr int64_t kChunk = 65536;
inline constexpr int kMaxTensors = 32;
inline constexpr int kMaxBlocks = 256;
inline constexpr int kThreads = 512;

template <int Depth>
struct Table {
  void* ptr[Depth][kMaxTensors];
  float* step[kMaxTensors];  // per-tensor step counter (optimizers), or null
  int64_t numel[kMaxTensors];
  int16_t block_tensor[kMaxBlocks];
  int32_t block_chunk[kMaxBlocks];
};
static_assert(sizeof(Table<5>) <= 3600, "multi-tensor table must stay well under the 4 KB kernel parameter limit");

// One tensor of a multi-tensor call: its Depth pointers (param, grad, state...), numel, step.
template <int Depth>
struct Entry {
  std::array<void*, Depth> ptr{};
  int64_t numel = 0;
  float* step = nullptr;
};

// Number of chunks (= blocks) the entries need in all.
template <int Depth>
int64_t total_chunks(const std::vector<Entry<Depth>>& entries) {
  int64_t n = 0;
  for (const auto& e : entries) n += (e.numel + kChunk - 1) / kChunk;
  return n;
}

// Fills tables from `entries` (empty tensors are skipped) and calls launch(table, nblocks,
// first_block) for each, where first_block is the global index of the table's first chunk.
template <int Depth, class Launch>
void for_each_table(const std::vector<Entry<Depth>>& entries, Launch&& launch) {
  Table<Depth> tab;
  int nt = 0;        // tensors in the table
  int nb = 0;        // blocks in the table
  int64_t done = 0;  // blocks launched before this table
  for (const auto& e : entries) {
    if (e.numel == 0) continue;
    const int64_t chunks = (e.numel + kChunk - 1) / kChunk;
    for (int d = 0; d < Depth; ++d) tab.ptr[d][nt] = e.ptr[static_cast<size_t>(d)];
    tab.step[nt] = e.step;
    tab.numel[nt] = e.numel;
    for (int64_t c = 0; c < chunks; ++c) {
      tab.block_tensor[nb] = static_cast<int16_t>(nt);
      tab.block_chunk[nb] = static_cast<int32_t>(c);
      ++nb;
      const bool last_chunk = c == chunks - 1;
      if (nb == kMaxBlocks || (last_chunk && nt + 1 == kMaxTensors)) {
        launch(tab, nb, done);
        done += nb;
        nb = 0;
        if (last_chunk) {
          nt = -1;  // the table restarts after this tensor
        } else {    // the tensor continues in slot 0 of the next table
          for (int d = 0; d < Depth; ++d) tab.ptr[d][0] = tab.ptr[d][nt];
          tab.step[0] = tab.step[nt];
          tab.numel[0] = tab.numel[nt];
          nt = 0;
        }
      }
    }
    ++nt;
  }
  if (nb > 0) launch(tab, nb, done);
}

// The chunk a block works on: elements [begin, end) of tensor t.
struct BlockWork {
  int t;
  int64_t begin, end;
};
template <int Depth>
__device__ __forceinline__ BlockWork block_work(const Table<Depth>& tab) {
  BlockWork w;
  w.t = tab.block_tensor[blockIdx.x];
  w.begin = static_cast<int64_t>(tab.block_chunk[blockIdx.x]) * kChunk;
  const int64_t n = tab.numel[w.t];
  w.end = w.begin + kChunk < n ? w.begin + kChunk : n;
  return w;
}

// Step counters: one thread per counter, up to kMaxSteps per launch.
inline constexpr int kMaxSteps = 448;
struct StepTable {
  float* step[kMaxSteps];
  int n;
};

}  // namespace ember::mt
