// Multi-tensor launches: one kernel launch works on a whole list of tensors.
//
// Every tensor is cut into chunks; each CUDA block handles one chunk of one tensor. The pointers,
// sizes and where each tensor's chunks start travel in a Table passed BY VALUE as a kernel
// parameter (__grid_constant__, read in place from the parameter bank): nothing is uploaded with a
// host-to-device copy, so a launch never syncs and can be captured into a CUDA graph. A table holds
// up to kMaxTensors tensors (2 KB for Depth 5, under the classic 4 KB parameter limit) and any
// number of chunks; a longer list takes one launch per kMaxTensors tensors.
//
// The chunk size is chosen per call from all of its elements (Note [multi-tensor chunks]): small
// models get small chunks, so the update of a 421K-parameter CNN runs on ~200 blocks, not on the
// 7 that 64K-element chunks gave it (each thread then walked 128 elements one after another).
//
// Napkin math: docs/perf.md ("Napkin math behind the kernels").
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "core/cuda/kernel.cuh"

namespace ember::mt {

// Note [multi-tensor chunks]: a call's chunk is the smallest power of two in [kMinChunk,
// kMaxChunk] that cuts its elements into at most kTargetBlocks chunks: about two blocks per SM of
// an H100/H200 while the model is small, then 64K elements per block (128 per thread) once a
// launch has enough blocks to fill the GPU anyway. It depends on the sizes only, so total_norm's
// partials, and with them its rounding, are the same on every GPU.
inline constexpr int64_t kMinChunk = 2048;
inline constexpr int64_t kMaxChunk = 65536;
inline constexpr int64_t kTargetBlocks = 256;
inline constexpr int kMaxTensors = 32;
inline constexpr int kThreads = 512;

template <int Depth>
struct Table {
  void* ptr[Depth][kMaxTensors];
  float* step[kMaxTensors];  // per-tensor step counter (optimizers), or null
  int64_t numel[kMaxTensors];
  int32_t first_block[kMaxTensors + 1];  // tensor t's chunks are blocks first_block[t] .. first_block[t + 1] - 1
  int32_t n;                             // tensors in the table
  int32_t chunk;                         // elements per chunk
};
static_assert(sizeof(Table<5>) <= 2048, "multi-tensor table must stay well under the 4 KB kernel parameter limit");

// One tensor of a multi-tensor call: its Depth pointers (param, grad, state...), numel, step.
template <int Depth>
struct Entry {
  std::array<void*, Depth> ptr{};
  int64_t numel = 0;
  float* step = nullptr;
};

// The chunk size of a call over `entries` (Note [multi-tensor chunks]).
template <int Depth>
int64_t chunk_for(const std::vector<Entry<Depth>>& entries) {
  int64_t total = 0;
  for (const auto& e : entries) total += e.numel;
  int64_t chunk = kMinChunk;
  while (chunk < kMaxChunk && chunk * kTargetBlocks < total) chunk *= 2;
  return chunk;
}

// Number of chunks (= blocks) the entries need in all.
template <int Depth>
int64_t total_chunks(const std::vector<Entry<Depth>>& entries) {
  const int64_t chunk = chunk_for(entries);
  int64_t n = 0;
  for (const auto& e : entries) n += (e.numel + chunk - 1) / chunk;
  return n;
}

// Fills tables from `entries` (empty tensors are skipped) and calls launch(table, nblocks,
// first_block) for each, where first_block is the global index of the table's first chunk.
template <int Depth, class Launch>
void for_each_table(const std::vector<Entry<Depth>>& entries, Launch&& launch) {
  const int64_t chunk = chunk_for(entries);
  Table<Depth> tab;
  tab.chunk = static_cast<int32_t>(chunk);
  tab.n = 0;
  tab.first_block[0] = 0;
  int64_t done = 0;  // blocks launched before this table
  auto flush = [&] {
    if (tab.n == 0) return;
    const int nblocks = tab.first_block[tab.n];
    launch(tab, nblocks, done);
    done += nblocks;
    tab.n = 0;
  };
  for (const auto& e : entries) {
    if (e.numel == 0) continue;
    const int t = tab.n;
    for (int d = 0; d < Depth; ++d) tab.ptr[d][t] = e.ptr[static_cast<size_t>(d)];
    tab.step[t] = e.step;
    tab.numel[t] = e.numel;
    tab.first_block[t + 1] = tab.first_block[t] + static_cast<int32_t>((e.numel + chunk - 1) / chunk);
    if (++tab.n == kMaxTensors) flush();
  }
  flush();
}

// The chunk a block works on: elements [begin, end) of tensor t.
struct BlockWork {
  int t;
  int64_t begin, end;
};
template <int Depth>
__device__ __forceinline__ BlockWork block_work(const Table<Depth>& tab) {
  const int b = static_cast<int>(blockIdx.x);
  int lo = 0, hi = tab.n - 1;  // the last tensor whose first block is <= b
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (tab.first_block[mid] <= b) lo = mid;
    else hi = mid - 1;
  }
  BlockWork w;
  w.t = lo;
  w.begin = static_cast<int64_t>(b - tab.first_block[lo]) * tab.chunk;
  const int64_t n = tab.numel[w.t];
  w.end = w.begin + tab.chunk < n ? w.begin + tab.chunk : n;
  return w;
}

// Step counters: one thread per counter, up to kMaxSteps per launch.
inline constexpr int kMaxSteps = 448;
struct StepTable {
  float* step[kMaxSteps];
  int n;
};

}  // namespace ember::mt
