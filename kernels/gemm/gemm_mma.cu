// mma_sync: the f16/bf16 tensor-core GEMM (sm_80+): mma.sync.m16n8k16 with f32 accumulation,
// ldmatrix fragments from swizzled shared memory, a 3-stage cp.async pipeline.
//
// Tiles: 128x128 per block, BK = 64, 4 warps (2x2), 64x64 per warp = 4 (m16) x 8 (n8) mma tiles:
// 128 f32 accumulators per thread. Per k16 step a warp issues 8 ldmatrix.x4 (4 for A, 4 for B,
// each B one covering two n8 tiles) and 32 mma.
// Shared memory: per stage an A tile and a B tile of 16 KiB each, stored with the operand's
// contiguous dim innermost: [128 rows][64 k] (128-byte rows) when k is contiguous, [64 k][128]
// (256-byte rows) when m (or n) is. The 16-byte chunk c of row r is stored at chunk c ^ (r & 7):
// the 8 rows an ldmatrix phase reads (and the 8 chunks a cp.async phase writes) fall in 8
// different bank groups, so neither conflicts. ldmatrix (k contiguous) or ldmatrix.trans (m/n
// contiguous) turns either layout into the row.col fragments mma wants, so row-major operands and
// transposed views (x W^T in linear) are read in place.
// Pipeline: the shared main loop (kernels/gemm/mainloop.cuh, Note [gemm main loop]) with an
// asynchronous operand iterator, MmaTiles: 3 stages x 32 KiB = 96 KiB of dynamic shared memory,
// 2 blocks per SM (8 warps). The tile for k step kt+2 is requested (cp.async.cg, 16 bytes per
// request, zero-filled outside the matrix) before the warps compute on tile kt. Operands whose
// base, leading dim, batch strides or contiguous extent are not multiples of 8 elements are
// loaded with guarded scalar loads into the same layout instead (same pipeline, loads not async).
// Epilogue: bias, activation and rounding in registers; pairs of outputs stored as one 32-bit
// store where aligned; GELU's code apart from relu's and none's, n8 tiles past N skipped
// (Note [compact epilogues]). Split-K (Note [split-K] in gemm_common.cuh) when the tiles fill
// less than half the SMs (the MNIST layers).
//
// mma_cluster (run_mma_cluster, sm_90): the same iterator and warps on 64x64 tiles, K split over a
// thread-block cluster whose blocks add their partials through distributed shared memory (Note
// [cluster split-K]), for the layers too small to fill the GPU with 128x128 tiles.
// mma_fused_kernel (run_mma_fused): the same iterator on 64x64 tiles with a relu mask applied to
// A's fragments and the bias gradient's row sums beside it, a relu layer's backward in one launch
// per GEMM (Note [fused mma backward]).
// Limits: mma.sync cannot feed Hopper's tensor cores at full rate (wgmma's asynchronous,
// shared-memory-sourced operands can), so this kernel stays below cuBLAS's sm_90 kernels (wgmma +
// TMA); shared-memory and global bandwidth are not the limit. Closing the gap needs v4 (wgmma +
// TMA), which is not written yet.
// Napkin math: docs/perf.md ("Napkin math behind the kernels").
#include <algorithm>
#include <array>
#include <mutex>
#include <type_traits>

#include "core/cuda/device_guard.h"
#include "core/cuda/kernel.cuh"
#include "kernels/common/cluster.cuh"
#include "kernels/common/current_stream.cuh"
#include "kernels/common/grid_size.cuh"
#include "kernels/common/ptx.cuh"
#include "kernels/gemm/gemm_common.cuh"
#include "kernels/gemm/mainloop.cuh"

namespace ember::gemm {

namespace dev {

constexpr int kMmaBM = 128, kMmaBN = 128, kMmaBK = 64, kMmaStages = 3, kMmaThreads = 128;
constexpr int kMmaSmem = kMmaStages * (kMmaBM + kMmaBN) * kMmaBK * 2;  // 96 KiB

// Byte offset of 16-byte chunk `chunk` of row `row` in a tile with `row_bytes`-byte rows.
__device__ __forceinline__ int swz(int row, int chunk, int row_bytes) {
  return row * row_bytes + ((chunk ^ (row & 7)) << 4);
}

// One 16-byte chunk (8 elements along the operand's contiguous dim, starting at index `start` of
// that dim, `extent` long) into shared memory. `row_ok`: the other index is inside the matrix.
__device__ __forceinline__ void load_chunk(unsigned char* dst, const uint16_t* src, const uint16_t* safe, bool row_ok,
                                           int start, int extent, bool vec) {
  if (vec) {
    const bool ok = row_ok && start < extent;  // extent % 8 == 0: the chunk is all in or all out
    ptx::cp_async_16(dst, ok ? src : safe, ok);
  } else {
    uint16_t v[8];
    EMBER_UNROLL
    for (int i = 0; i < 8; ++i) v[i] = (row_ok && start + i < extent) ? src[i] : uint16_t(0);
    Vec<uint32_t, 4> packed;  // one 16-byte store, as cp.async's (Note [whole vector accesses])
    EMBER_UNROLL
    for (int i = 0; i < 4; ++i) packed.v[i] = v[2 * i] | (uint32_t(v[2 * i + 1]) << 16);
    *reinterpret_cast<Vec<uint32_t, 4>*>(dst) = packed;
  }
}

// The operand iterator of the tensor-core GEMM (Note [gemm main loop]): cp.async straight into
// swizzled shared stages; ldmatrix (k contiguous) or ldmatrix.trans (m or n contiguous) fragments.
// A block tile of BM x BN (64 or 128 each) in 2 x 2 warps, each warp BM/2 x BN/2; 64 k per stage;
// Threads (128 or 256: two groups of 2 x 2 warps, mma_gemm's G) share the copies. MaskT (Half or
// BFloat16; void: none): a relu mask at A's offsets (Mask, when set) rides in each stage beside A
// and zeroes A's fragments where it is not > 0 (Note [fused mma backward]).
template <bool A_K, bool B_K, int BM = kMmaBM, int BN = kMmaBN, int Stages = kMmaStages, int Threads = kMmaThreads,
          class MaskT = void>
struct MmaTiles {
  static_assert((BM == 64 || BM == 128) && (BN == 64 || BN == 128), "MmaTiles: 64 or 128 rows and columns");
  static constexpr bool kMasked = !std::is_void_v<MaskT>;
  static constexpr int kStages = Stages;
  static constexpr int kATileBytes = BM * kMmaBK * 2, kBTileBytes = BN * kMmaBK * 2;
  static constexpr int kStageBytes = kATileBytes * (kMasked ? 2 : 1) + kBTileBytes;  // A, B, then the mask
  static constexpr int kSmem = kStages * kStageBytes;
  static constexpr int kMT = BM / 32, kNT8 = BN / 16;  // a warp's m16 and n8 tiles
  unsigned char* smem;
  const Args& p;
  const uint16_t* A;
  const uint16_t* B;
  int M, N, K, m0, n0;
  int tid, lane, wm, wn;           // wm, wn: the warp's sub-tile
  const uint16_t* Mask = nullptr;  // kMasked: A's mask, at A's offsets (null: none)

  // Requests tile kt of A and B into `stage` (BM x 8 and BN x 8 chunks, 16 bytes each).
  __device__ __forceinline__ void fetch(int kt, int stage) {
    unsigned char* sa = smem + stage * kStageBytes;
    unsigned char* sb = sa + kATileBytes;
    const int k0 = kt * kMmaBK;
    constexpr int kAChunks = BM * 8 / Threads, kBChunks = BN * 8 / Threads;
    constexpr int kAShift = BM == 128 ? 4 : 3, kBShift = BN == 128 ? 4 : 3;  // log2(chunks per [k] row)
    EMBER_UNROLL
    for (int i = 0; i < (kAChunks > kBChunks ? kAChunks : kBChunks); ++i) {
      const int c = tid + i * Threads;
      if (i < kAChunks) {
        int dst, start, extent;
        int64_t src;
        bool row_ok;
        if constexpr (A_K) {  // [BM m][64 k]: A[m, k] at A + m * a_rs + k
          const int r = c >> 3, ch = c & 7;
          const int gm = m0 + r, gk = k0 + ch * 8;
          dst = swz(r, ch, 128), src = static_cast<int64_t>(gm) * p.a_rs + gk;
          row_ok = gm < M, start = gk, extent = K;
        } else {  // [64 k][BM m]: A[m, k] at A + m + k * a_cs
          const int r = c >> kAShift, ch = c & ((1 << kAShift) - 1);
          const int gk = k0 + r, gm = m0 + ch * 8;
          dst = swz(r, ch, BM * 2), src = static_cast<int64_t>(gk) * p.a_cs + gm;
          row_ok = gk < K, start = gm, extent = M;
        }
        load_chunk(sa + dst, A + src, A, row_ok, start, extent, p.a_vec);
        if constexpr (kMasked) {
          if (Mask != nullptr) load_chunk(sb + kBTileBytes + dst, Mask + src, Mask, row_ok, start, extent, p.a_vec);
        }
      }
      if (i < kBChunks) {
        if constexpr (B_K) {  // [BN n][64 k]: B[k, n] at B + k + n * b_cs
          const int r = c >> 3, ch = c & 7;
          const int gn = n0 + r, gk = k0 + ch * 8;
          load_chunk(sb + swz(r, ch, 128), B + static_cast<int64_t>(gn) * p.b_cs + gk, B, gn < N, gk, K, p.b_vec);
        } else {  // [64 k][BN n]: B[k, n] at B + k * b_rs + n
          const int r = c >> kBShift, ch = c & ((1 << kBShift) - 1);
          const int gk = k0 + r, gn = n0 + ch * 8;
          load_chunk(sb + swz(r, ch, BN * 2), B + static_cast<int64_t>(gk) * p.b_rs + gn, B, gk < K, gn, N, p.b_vec);
        }
      }
    }
  }
  __device__ __forceinline__ void commit(int, bool) { ptx::cp_async_commit(); }
  __device__ __forceinline__ void wait() { ptx::cp_async_wait<kStages - 2>(); }  // the oldest stage landed
  __device__ __forceinline__ void drain() { ptx::cp_async_wait<0>(); }

  __device__ __forceinline__ void fragments(int stage, int ks, uint32_t (&af)[kMT][4], uint32_t (&bf)[kNT8][2]) {
    const unsigned char* sa = smem + stage * kStageBytes;
    const unsigned char* sb = sa + kATileBytes;
    const int li = lane >> 3, lr = lane & 7;  // which 8x8 matrix this lane addresses, and its row
    EMBER_UNROLL
    for (int mt = 0; mt < kMT; ++mt) {
      const int mb = wm + mt * 16;
      int at;
      if constexpr (A_K) {  // matrices (m 0-7, k 0-7), (m 8-15, k 0-7), (m 0-7, k 8-15), (m 8-15, k 8-15)
        const int r = mb + lr + (li & 1) * 8, ch = ks * 2 + (li >> 1);
        at = swz(r, ch, 128);
        ptx::ldmatrix_x4(af[mt], sa + at);
      } else {  // the same four, stored [k][m]: transposed on the way out
        const int r = ks * 16 + lr + (li >> 1) * 8, ch = (mb >> 3) + (li & 1);
        at = swz(r, ch, BM * 2);
        ptx::ldmatrix_x4_trans(af[mt], sa + at);
      }
      if constexpr (kMasked) {
        if (Mask != nullptr) {  // the mask's tile has A's layout: the same load gives its elements in A's places
          uint32_t mk[4];
          if constexpr (A_K) ptx::ldmatrix_x4(mk, sb + kBTileBytes + at);
          else ptx::ldmatrix_x4_trans(mk, sb + kBTileBytes + at);
          EMBER_UNROLL
          for (int e = 0; e < 4; ++e) af[mt][e] &= ptx::gt_zero_mask_x2(mk[e], std::is_same_v<MaskT, BFloat16>);
        }
      }
    }
    EMBER_UNROLL
    for (int np = 0; np < kNT8 / 2; ++np) {
      const int nb = wn + np * 16;
      uint32_t r4[4];
      if constexpr (B_K) {  // matrices (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, k 0-7), (n 8-15, k 8-15)
        const int r = nb + lr + (li >> 1) * 8, ch = ks * 2 + (li & 1);
        ptx::ldmatrix_x4(r4, sb + swz(r, ch, 128));
      } else {  // the same four, stored [k][n]
        const int r = ks * 16 + lr + (li & 1) * 8, ch = (nb >> 3) + (li >> 1);
        ptx::ldmatrix_x4_trans(r4, sb + swz(r, ch, BN * 2));
      }
      bf[2 * np][0] = r4[0];
      bf[2 * np][1] = r4[1];
      bf[2 * np + 1][0] = r4[2];
      bf[2 * np + 1][1] = r4[3];
    }
  }
};

// The outputs of the warp's sub-tile at (m0, n0) that this thread holds in acc: thread (g, t4) of
// the warp holds rows g and g + 8, columns 2 t4 and 2 t4 + 1 of each m16n8 tile. For each of its
// rows gm < M, r = row(gm) once, then f(r, gn, v0, v1) per pair (gm, gn), (gm, gn + 1) of the n8
// tiles that start before N (Note [compact epilogues] in gemm_common.cuh).
template <int MT, int NT8, class Row, class F>
__device__ __forceinline__ void for_each_acc_pair(const float (&acc)[MT][NT8][4], int m0, int n0, int g, int t4, int M,
                                                  int N, const Row& row, const F& f) {
  EMBER_UNROLL
  for (int mt = 0; mt < MT; ++mt) {
    EMBER_UNROLL
    for (int h = 0; h < 2; ++h) {
      const int gm = m0 + mt * 16 + g + h * 8;
      if (gm >= M) continue;
      const auto r = row(gm);
      EMBER_UNROLL
      for (int nt = 0; nt < NT8; ++nt) {
        if (n0 + nt * 8 >= N) break;  // this n8 tile and the next ones are past N
        f(r, n0 + nt * 8 + t4 * 2, acc[mt][nt][2 * h], acc[mt][nt][2 * h + 1]);
      }
    }
  }
}

// Split-K (Note [split-K]): the warp's sub-tile at (m0, n0) of batch z as raw f32 partial sums, in
// the workspace of this block's split; the tile's last block adds them (finish_split_tile).
template <int MT, int NT8>
__device__ __forceinline__ void store_split_partials(const float (&acc)[MT][NT8][4], const Args& p, int64_t z, int m0,
                                                     int n0, int g, int t4) {
  const int M = static_cast<int>(p.M), N = static_cast<int>(p.N);
  float* W = static_cast<float*>(p.ws) + (static_cast<int64_t>(blockIdx.y) * p.batch + z) * p.M * p.N;
  for_each_acc_pair(
      acc, m0, n0, g, t4, M, N, [&](int gm) { return W + static_cast<int64_t>(gm) * N; },
      [&](float* wrow, int gn, float v0, float v1) {
        if (gn < N) wrow[gn] = v0;
        if (gn + 1 < N) wrow[gn + 1] = v1;
      });
}

template <class T, bool A_K, bool B_K>
__global__ void __launch_bounds__(kMmaThreads, 2) mma_kernel(Args p) {
#if EMBER_DEVICE_ARCH >= 800
  EMBER_DYNAMIC_SHARED(unsigned char, smem);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int M = static_cast<int>(p.M), N = static_cast<int>(p.N), K = static_cast<int>(p.K);
  const int64_t tiles_m = (p.M + kMmaBM - 1) / kMmaBM, tiles_n = (p.N + kMmaBN - 1) / kMmaBN;
  int64_t tmi, tni;
  tile_coords(blockIdx.x, tiles_m, tiles_n, tmi, tni);
  const int m0 = static_cast<int>(tmi) * kMmaBM, n0 = static_cast<int>(tni) * kMmaBN;
  const int wm = (warp >> 1) * 64, wn = (warp & 1) * 64;  // the warp's 64x64 sub-tile
  const int ktiles = (K + kMmaBK - 1) / kMmaBK;
  const int kt_begin = static_cast<int>(min64(ktiles, blockIdx.y * p.kt_per_split));
  const int kt_end = static_cast<int>(min64(ktiles, kt_begin + p.kt_per_split));
  MmaTiles<A_K, B_K> tiles{smem, p, nullptr, nullptr, M, N, K, m0, n0, tid, lane, wm, wn};

  for (int64_t z = blockIdx.z; z < p.batch; z += gridDim.z) {
    int64_t ao, bo;
    batch_offsets(p, z, ao, bo);
    tiles.A = static_cast<const uint16_t*>(p.a) + ao;
    tiles.B = static_cast<const uint16_t*>(p.b) + bo;
    float acc[4][8][4];
    mma_gemm<kMmaBK / 16, std::is_same_v<T, BFloat16>>(tiles, kt_begin, kt_end, acc);

    const int g = lane >> 2, t4 = lane & 3;
    if (p.ws != nullptr) {  // split-K: raw f32 partial sums, reduced by the tile's last block
      store_split_partials(acc, p, z, m0 + wm, n0 + wn, g, t4);
      finish_split_tile<T, kMmaBM, kMmaBN>(p, z, m0, n0);
      continue;
    }
    T* Cz = static_cast<T*>(p.c) + z * p.c_bs;
    with_activation(p.act, [&](auto act) {
      for_each_acc_pair(
          acc, m0 + wm, n0 + wn, g, t4, M, N, [&](int gm) { return Cz + static_cast<int64_t>(gm) * p.c_rs; },
          [&](T* crow, int gn, float v0, float v1) { store_half_pair<decltype(act)::value>(p, crow, gn, N, v0, v1); });
    });
    __syncthreads();  // the next batch reuses the stages
  }
#else
  __trap();  // never launched: run_mma checks the device is sm_80+
#endif
}

// Note [cluster split-K]: the MNIST layers at batch 128 to 512 ([M, 784 or 3136] -> 128) are 1 to
// 4 of mma_sync's 128x128 tiles. Its split-K (Note [split-K]) spreads their k tiles over blocks of a
// few k tiles each, and then the last block of each tile adds every partial alone: at [512, 3136]
// -> 128, 17 partial tiles of 64 KiB read by one SM per tile after the other blocks have left.
// mma_cluster cuts the work finer and shares the sum:
// - Tiles of 64x64 and a 4-stage cp.async ring of 16 KiB stages (the same iterator, MmaTiles).
// - The k tiles of each output tile split over the blocks of one thread-block cluster (sm_90, at
//   most 8 blocks: the grid's y). [512, 3136] -> 128 is 16 tiles x 7 splits, 112 blocks.
// - A grid that small is one block per SM, so each block runs 8 warps: two groups of 2 x 2 warps
//   of 32x32, each group taking two of a k tile's four k16 steps (mma_gemm's G). Twice the warps of
//   one 2 x 2 block for the same shared-memory traffic: the time model's issue rate, and the
//   latency a tensor-core loop needs hidden, both ask for them.
// Each group leaves its f32 partial in its block's shared memory; after a cluster barrier, block r
// of the cluster adds rows r, r + splits, ... of every partial through distributed shared memory,
// in a fixed order (split, then group: deterministic), then applies bias, activation and rounding
// and stores them; a second cluster barrier keeps each partial alive until every block has read
// it. No workspace, no tickets, one launch. A call with one split runs the same steps in a
// cluster of one block.
constexpr int kClusterBM = 64, kClusterBN = 64, kClusterStages = 4, kClusterMaxSplits = 8;
constexpr int kClusterGroups = 2, kClusterThreads = kClusterGroups * kMmaThreads;
constexpr int kPartPitch = kClusterBN + 8;  // floats per partial row: a half warp's 64-bit stores hit 32 banks
constexpr int kPartFloats = kClusterBM * kPartPitch;  // one group's partial
template <bool A_K, bool B_K>
using ClusterTiles = MmaTiles<A_K, B_K, kClusterBM, kClusterBN, kClusterStages, kClusterThreads>;
static_assert(kClusterGroups * kPartFloats * 4 <= ClusterTiles<true, true>::kSmem, "the partials fit in the stages");

template <class T, bool A_K, bool B_K>
__global__ void __launch_bounds__(kClusterThreads) mma_cluster_kernel(Args p) {
#if EMBER_DEVICE_ARCH >= 900
  EMBER_DYNAMIC_SHARED(unsigned char, smem);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int group = warp >> 2, gw = warp & 3;  // the warp's group and its place in the group's 2 x 2
  const int M = static_cast<int>(p.M), N = static_cast<int>(p.N), K = static_cast<int>(p.K);
  const int64_t tiles_m = (p.M + kClusterBM - 1) / kClusterBM, tiles_n = (p.N + kClusterBN - 1) / kClusterBN;
  int64_t tmi, tni;
  tile_coords(blockIdx.x, tiles_m, tiles_n, tmi, tni);
  const int m0 = static_cast<int>(tmi) * kClusterBM, n0 = static_cast<int>(tni) * kClusterBN;
  const int wm = (gw >> 1) * (kClusterBM / 2), wn = (gw & 1) * (kClusterBN / 2);
  const int ktiles = (K + kMmaBK - 1) / kMmaBK;
  const int kt_begin = static_cast<int>(min64(ktiles, blockIdx.y * p.kt_per_split));
  const int kt_end = static_cast<int>(min64(ktiles, kt_begin + p.kt_per_split));
  const int splits = static_cast<int>(gridDim.y), rank = static_cast<int>(blockIdx.y);  // the cluster: y
  ClusterTiles<A_K, B_K> tiles{smem, p, nullptr, nullptr, M, N, K, m0, n0, tid, lane, wm, wn};
  float* part = reinterpret_cast<float*>(smem);
  const float* parts[kClusterMaxSplits];
  EMBER_UNROLL
  for (int s = 0; s < kClusterMaxSplits; ++s) parts[s] = s < splits ? ptx::map_shared_rank(part, s) : part;
  const int rows = M - m0 < kClusterBM ? M - m0 : kClusterBM;
  const int g = lane >> 2, t4 = lane & 3;

  for (int64_t z = blockIdx.z; z < p.batch; z += gridDim.z) {
    int64_t ao, bo;
    batch_offsets(p, z, ao, bo);
    tiles.A = static_cast<const uint16_t*>(p.a) + ao;
    tiles.B = static_cast<const uint16_t*>(p.b) + bo;
    float acc[kClusterBM / 32][kClusterBN / 16][4];
    mma_gemm<kMmaBK / 16, std::is_same_v<T, BFloat16>, kClusterGroups>(tiles, kt_begin, kt_end, acc, group);
    __syncthreads();  // every warp is done with the stages the partials overwrite
    float* mine = part + group * kPartFloats;
    for_each_acc_pair(
        acc, m0 + wm, n0 + wn, g, t4, M, N, [&](int gm) { return mine + (gm - m0) * kPartPitch - n0; },
        [&](float* prow, int gn, float v0, float v1) {
          Vec<float, 2> v;  // one 64-bit store (Note [whole vector accesses])
          v.v[0] = v0;
          v.v[1] = v1;
          *reinterpret_cast<Vec<float, 2>*>(prow + gn) = v;
        });
    ptx::cluster_sync();  // every partial of the cluster is in place
    T* Cz = static_cast<T*>(p.c) + z * p.c_bs;
    with_activation(p.act, [&](auto act) {
      for (int i = tid;; i += kClusterThreads) {  // a warp per row, a lane per column pair
        const int r = rank + (i >> 5) * splits, c = (i & 31) * 2;
        if (r >= rows) break;
        if (n0 + c >= N) continue;
        float v0 = 0.f, v1 = 0.f;
        EMBER_UNROLL
        for (int s = 0; s < kClusterMaxSplits; ++s) {
          if (s >= splits) break;
          EMBER_UNROLL
          for (int q = 0; q < kClusterGroups; ++q) {
            const Vec<float, 2> v =
                *reinterpret_cast<const Vec<float, 2>*>(parts[s] + q * kPartFloats + r * kPartPitch + c);
            v0 += v.v[0];
            v1 += v.v[1];
          }
        }
        store_half_pair<decltype(act)::value>(p, Cz + static_cast<int64_t>(m0 + r) * p.c_rs, n0 + c, N, v0, v1);
      }
    });
    ptx::cluster_sync();  // no block reuses its stages, or exits, while another reads its partials
  }
#else
  __trap();  // never launched: run_mma_cluster checks the device is sm_90
#endif
}

// Note [fused mma backward]: a relu layer's backward in f16/bf16 where the outer-product kernel
// refuses (the CNN's 3136-wide layer's dW from batch 512, the MLP's 784-wide one's past it; Note
// [fused linear backward] in kernels/ops/linear.cu) was four launches: relu_backward (dz), dz W,
// dz^T x and the sum of dz's rows. Here it is two, one GEMM each, as the SIMT GEMM does in f32 (Note
// [fused simt backward] in gemm_simt.cu):
// - The mask (the layer's output y, at A's offsets) is copied by cp.async into each stage beside
//   A, in A's swizzled layout, so the ldmatrix that reads a fragment of A reads the mask's
//   elements for the same places from the mask's tile; a set.gt per register pair
//   (ptx::gt_zero_mask_x2) zeroes A where y is not > 0 (NaN included). dz is never written, and
//   the mma sees exactly relu_backward's dz.
// - The bias gradient, the sums of A = dz^T's rows, comes from blocks appended to the grid
//   (row_sums_block in gemm_common.cuh), in the same launch.
// Tiles of 64x64 with 4 warps of 32x32: 32 accumulators a thread and, a k16 step, 2 more
// ldmatrix and 8 set.gt + AND beside 8 mma (mma_sync's 128x128 tile, at 243-248 registers, has no
// room for the mask's fragments); 3 stages of 24 KiB, 3 blocks an SM; split-K in the launch (Note
// [split-K]) where the tiles fill less than half the GPU. One batch, B row-major: the two GEMMs of
// the backward (mma_fused_refusal).
constexpr int kFusedBM = 64, kFusedBN = 64, kFusedStages = 3;
template <class T, bool A_K>
using FusedTiles = MmaTiles<A_K, false, kFusedBM, kFusedBN, kFusedStages, kMmaThreads, T>;

template <class T, bool A_K>
__global__ void __launch_bounds__(kMmaThreads) mma_fused_kernel(Args p) {
#if EMBER_DEVICE_ARCH >= 800
  const int64_t tiles_m = (p.M + kFusedBM - 1) / kFusedBM, tiles_n = (p.N + kFusedBN - 1) / kFusedBN;
  if (blockIdx.x >= tiles_m * tiles_n) {  // a row-sum block
    if (blockIdx.y == 0 && p.row_sum != nullptr) row_sums_block<T, kMmaThreads>(p, blockIdx.x - tiles_m * tiles_n);
    return;
  }
  EMBER_DYNAMIC_SHARED(unsigned char, smem);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int M = static_cast<int>(p.M), N = static_cast<int>(p.N), K = static_cast<int>(p.K);
  int64_t tmi, tni;
  tile_coords(blockIdx.x, tiles_m, tiles_n, tmi, tni);
  const int m0 = static_cast<int>(tmi) * kFusedBM, n0 = static_cast<int>(tni) * kFusedBN;
  const int wm = (warp >> 1) * (kFusedBM / 2), wn = (warp & 1) * (kFusedBN / 2);
  const int ktiles = (K + kMmaBK - 1) / kMmaBK;
  const int kt_begin = static_cast<int>(min64(ktiles, blockIdx.y * p.kt_per_split));
  const int kt_end = static_cast<int>(min64(ktiles, kt_begin + p.kt_per_split));
  const auto* A = static_cast<const uint16_t*>(p.a);
  const auto* B = static_cast<const uint16_t*>(p.b);
  const auto* mask = static_cast<const uint16_t*>(p.a_mask);
  FusedTiles<T, A_K> tiles{smem, p, A, B, M, N, K, m0, n0, tid, lane, wm, wn, mask};
  float acc[kFusedBM / 32][kFusedBN / 16][4];
  mma_gemm<kMmaBK / 16, std::is_same_v<T, BFloat16>>(tiles, kt_begin, kt_end, acc);
  const int g = lane >> 2, t4 = lane & 3;
  if (p.ws != nullptr) {
    store_split_partials(acc, p, 0, m0 + wm, n0 + wn, g, t4);
    finish_split_tile<T, kFusedBM, kFusedBN>(p, 0, m0, n0);
    return;
  }
  T* C = static_cast<T*>(p.c);
  for_each_acc_pair(
      acc, m0 + wm, n0 + wn, g, t4, M, N, [&](int gm) { return C + static_cast<int64_t>(gm) * p.c_rs; },
      [&](T* crow, int gn, float v0, float v1) { store_half_pair<-1>(p, crow, gn, N, v0, v1); });
#else
  __trap();  // never launched: run_mma_fused checks the device is sm_80+
#endif
}

// Allows Kernel `bytes` of dynamic shared memory (past the default 48 KiB), once per device.
template <auto Kernel>
void allow_smem_once(int bytes, int device, const char* name) {
  static std::array<std::once_flag, 64> once;
  EMBER_CHECK(device >= 0 && device < 64, "gemm ", name, ": bad device ", device);
  std::call_once(once[static_cast<size_t>(device)], [bytes] {
    EMBER_CUDA_CHECK(cudaFuncSetAttribute(reinterpret_cast<const void*>(Kernel),
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  });
}

// Calls f(A_K, B_K) with std::bool_constant arguments for the problem's operand layouts.
template <class F>
void with_layouts(const Problem& p, const F& f) {
  const bool ak = p.a_kmajor(), bk = p.b_kmajor();
  using Y = std::true_type;
  using N = std::false_type;
  if (ak && bk) f(Y{}, Y{});
  else if (ak) f(Y{}, N{});
  else if (bk) f(N{}, Y{});
  else f(N{}, N{});
}

template <class T, bool A_K, bool B_K>
void launch_mma_cluster(const Args& args, int splits, int device, cudaStream_t stream) {
  constexpr int kSmem = ClusterTiles<A_K, B_K>::kSmem;  // 64 KiB
  allow_smem_once<&mma_cluster_kernel<T, A_K, B_K>>(kSmem, device, "mma_cluster");
  const int64_t tiles = ((args.M + kClusterBM - 1) / kClusterBM) * ((args.N + kClusterBN - 1) / kClusterBN);
  EMBER_CHECK(tiles < (int64_t{1} << 31), "gemm mma_cluster: too many tiles (", tiles, ")");
  dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(splits), grid_z(args.batch));
  cuda::launch_cluster(mma_cluster_kernel<T, A_K, B_K>, grid, dim3(kClusterThreads),
                       dim3(1, static_cast<unsigned>(splits), 1), kSmem, stream, args);
}

template <class T>
void dispatch_mma_cluster(const Problem& p, cudaStream_t stream) {
  Args args = make_args(p, 16);
  const int64_t tiles = ((p.M + kClusterBM - 1) / kClusterBM) * ((p.N + kClusterBN - 1) / kClusterBN) * args.batch;
  const int64_t ktiles = (p.K + kMmaBK - 1) / kMmaBK;
  int splits = std::min(choose_splits(tiles, ktiles, 2, p.device.index), kClusterMaxSplits);  // >= 128 k per split
  if (splits > 1) {
    args.kt_per_split = (ktiles + splits - 1) / splits;
    splits = static_cast<int>((ktiles + args.kt_per_split - 1) / args.kt_per_split);  // none without k tiles
  }
  with_layouts(p, [&](auto ak, auto bk) {
    launch_mma_cluster<T, decltype(ak)::value, decltype(bk)::value>(args, splits, p.device.index, stream);
  });
}

template <class T, bool A_K, bool B_K>
void launch_mma(const Args& args, int splits, int device, cudaStream_t stream) {
  allow_smem_once<&mma_kernel<T, A_K, B_K>>(kMmaSmem, device, "mma_sync");  // 96 KiB
  const int64_t tiles = ((args.M + kMmaBM - 1) / kMmaBM) * ((args.N + kMmaBN - 1) / kMmaBN);
  EMBER_CHECK(tiles < (int64_t{1} << 31), "gemm mma_sync: too many tiles (", tiles, ")");
  dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(splits), grid_z(args.batch));
  cuda::launch(mma_kernel<T, A_K, B_K>, grid, kMmaThreads, kMmaSmem, stream, args);
}

template <class T>
void dispatch_mma(const Problem& p, cudaStream_t stream) {
  Args args = make_args(p, 16);
  const int64_t tiles = ((p.M + kMmaBM - 1) / kMmaBM) * ((p.N + kMmaBN - 1) / kMmaBN) * args.batch;
  const int64_t ktiles = (p.K + kMmaBK - 1) / kMmaBK;
  Tensor ws;
  int splits = choose_splits(tiles, ktiles, 2, p.device.index);  // >= 128 k per split
  if (splits > 1) splits = plan_splits(args, p, ktiles, splits, 4, tiles, ws, stream);
  with_layouts(p, [&](auto ak, auto bk) {
    launch_mma<T, decltype(ak)::value, decltype(bk)::value>(args, splits, p.device.index, stream);
  });
  if (splits > 1) finish_splits(args, p, splits, stream);
}

template <class T, bool A_K>
void launch_mma_fused(const Args& args, int splits, int device, cudaStream_t stream) {
  constexpr int kSmem = FusedTiles<T, A_K>::kSmem;  // 72 KiB
  allow_smem_once<&mma_fused_kernel<T, A_K>>(kSmem, device, "mma fused");
  const int64_t tiles = ((args.M + kFusedBM - 1) / kFusedBM) * ((args.N + kFusedBN - 1) / kFusedBN);
  // the row sums' blocks after the tiles' (Note [fused mma backward])
  const int64_t sums = args.row_sum != nullptr ? (args.M + kRowSumRows - 1) / kRowSumRows : 0;
  EMBER_CHECK(tiles + sums < (int64_t{1} << 31), "gemm mma fused: too many tiles (", tiles, ")");
  dim3 grid(static_cast<unsigned>(tiles + sums), static_cast<unsigned>(splits), 1);
  cuda::launch(mma_fused_kernel<T, A_K>, grid, kMmaThreads, kSmem, stream, args);
}

template <class T>
void dispatch_mma_fused(const Problem& p, const OuterFusion& fuse, cudaStream_t stream) {
  Args args = make_args(p, 16);
  args.a_mask = fuse.a_mask;
  args.row_sum = fuse.row_sum;
  // the mask's chunks load as A's: 16-byte copies only where both are aligned (same strides)
  if (reinterpret_cast<uintptr_t>(fuse.a_mask) % 16 != 0) args.a_vec = false;
  const int64_t tiles = ((p.M + kFusedBM - 1) / kFusedBM) * ((p.N + kFusedBN - 1) / kFusedBN);
  const int64_t ktiles = (p.K + kMmaBK - 1) / kMmaBK;
  Tensor ws;
  int splits = choose_splits(tiles, ktiles, 2, p.device.index);  // >= 128 k per split
  if (splits > 1) splits = plan_splits(args, p, ktiles, splits, 4, tiles, ws, stream);
  if (p.a_kmajor()) launch_mma_fused<T, true>(args, splits, p.device.index, stream);
  else launch_mma_fused<T, false>(args, splits, p.device.index, stream);
  if (splits > 1) finish_splits(args, p, splits, stream);
}

}  // namespace dev

bool mma_supported(int device) { return device >= 0 && device < 16 && cuda::compute_capability(device) >= 80; }

bool mma_cluster_supported(int device) { return device >= 0 && device < 16 && cuda::compute_capability(device) >= 90; }

namespace {

// What both tensor-core kernels ask of a problem (`name`: the kernel, for the messages).
void check_mma_problem(const Problem& p, const char* name) {
  constexpr int64_t kIntMax = (int64_t{1} << 31) - 1;
  EMBER_CHECK(p.M <= kIntMax && p.N <= kIntMax && p.K <= kIntMax, "gemm ", name, ": M, N, K must fit in int32, got ",
              p.M, ", ", p.N, ", ", p.K);
  EMBER_CHECK((p.a_cs == 1 || p.a_rs == 1) && (p.b_cs == 1 || p.b_rs == 1), "gemm ", name,
              ": each operand needs a unit stride (prepare with Layout::unit_stride)");
  EMBER_CHECK(p.dtype == DType::f16 || p.dtype == DType::bf16, "gemm ", name, ": dtype ", p.dtype,
              " is not supported (f16, bf16)");
}

}  // namespace

void run_mma(const Problem& p) {
  if (p.M == 0 || p.N == 0 || p.batch() == 0) return;
  check_mma_problem(p, "mma_sync");
  EMBER_CHECK(mma_supported(p.device.index), "gemm mma_sync: needs a GPU of compute capability 8.0 or newer");
  cuda::DeviceGuard guard(p.device.index);
  cudaStream_t stream = cuda::stream_for(p.device);
  if (p.dtype == DType::f16) dev::dispatch_mma<Half>(p, stream);
  else dev::dispatch_mma<BFloat16>(p, stream);
}

const char* mma_fused_refusal(const Problem& p) {
  return p.dtype != DType::f16 && p.dtype != DType::bf16 ? "not f16 or bf16" : dev::fused_shape_refusal(p);
}

void run_mma_fused(const Problem& p, const OuterFusion& fuse) {
  dev::check_fused_call(p, fuse, mma_fused_refusal(p), "mma fused");
  if (p.M == 0 || p.N == 0) return;
  check_mma_problem(p, "mma fused");
  EMBER_CHECK(mma_supported(p.device.index), "gemm mma fused: needs a GPU of compute capability 8.0 or newer");
  cuda::DeviceGuard guard(p.device.index);
  cudaStream_t stream = cuda::stream_for(p.device);
  if (p.dtype == DType::f16) dev::dispatch_mma_fused<Half>(p, fuse, stream);
  else dev::dispatch_mma_fused<BFloat16>(p, fuse, stream);
}

void run_mma_cluster(const Problem& p) {
  if (p.M == 0 || p.N == 0 || p.batch() == 0) return;
  check_mma_problem(p, "mma_cluster");
  EMBER_CHECK(mma_cluster_supported(p.device.index),
              "gemm mma_cluster: needs a GPU of compute capability 9.0 or newer (thread-block clusters)");
  cuda::DeviceGuard guard(p.device.index);
  cudaStream_t stream = cuda::stream_for(p.device);
  if (p.dtype == DType::f16) dev::dispatch_mma_cluster<Half>(p, stream);
  else dev::dispatch_mma_cluster<BFloat16>(p, stream);
}

}  // namespace ember::gemm
