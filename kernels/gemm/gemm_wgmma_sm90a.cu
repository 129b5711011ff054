// wgmma: the f16/bf16 (and TF32) GEMM for Hopper (sm_90a only: built by its own object library, see the
// top-level CMakeLists.txt, "_sm90a.cu"): TMA brings tiles of A and B into a ring of shared-memory
// stages guarded by mbarriers, a producer warpgroup issues the copies, two consumer warpgroups
// multiply from the stages with wgmma.mma_async, and a persistent grid walks the output tiles.
//
// Note [warp-specialised GEMM]: a block is three warpgroups (384 threads) over one 128 x BN output
// tile at a time (BN 128 or 256), k tiles of 128 bytes (64 f16/bf16, 32 f32: one 128-byte swizzle
// row), kWgStages (4) stages of A's 128-row and B's BN-row k tile, each stage with a "full" and an
// "empty" mbarrier (Note [mbarrier phases] in kernels/common/mbarrier.cuh).
//   producer (warpgroup 0, setmaxnreg.dec to 40 registers; one thread works): for each of the
//     block's tiles and each k tile, waits for the stage's "empty" phase, arms "full" with the
//     stage's bytes (arrive.expect_tx), issues the stage's TMA tile loads, which complete on "full".
//   consumers (warpgroups 1 and 2, setmaxnreg.inc to 232): each owns 64 rows of the tile. Per k
//     tile: wait for "full", four wgmma m64nBNk16 (k8 for tf32; one per 32-byte step: operand_desc
//     moves the descriptors' start to it), commit, wait until only this k tile's group is in flight,
//     then release the previous stage (lane 0 of every consumer warp arrives on its "empty" once the
//     warp's lanes have waited: 8 arrivals).
//   The stage index and the phase parity run on across tiles: the ring never drains, so the
//   producer fills the next tile's first stages while the consumers store this one.
// TMA's 128-byte swizzle and wgmma's read the same layout (8-row atoms of 1024 bytes, the 16-byte
// chunk index XORed with the row), so the stages are used as they land; they are 1024-byte aligned.
// Ragged M, N and K need nothing: box elements outside the tensors land as zeros, and the
// epilogue skips rows past M and columns past N. Epilogue: bias, activation and rounding from the
// accumulator fragments (Note [wgmma operand layouts] in sim/wgmma.cpp), stored by TMA where C
// allows it (Note [TMA-store epilogue]), else straight from the registers as pairs where aligned. Tiles in the grouped
// order of the other GEMMs (tile_coords).
//
// Operands K-major (A row-major; B^T row-major, linear's x W^T) or MN-major (A^T; B row-major), each
// as its own TMA boxes and wgmma transpose bit (operand_desc, load_operand).
// What it needs (wgmma_refusal says what is missing; otherwise the caller takes the next variant):
// a GPU of compute capability 9.0, a unit stride in each operand, row pitches of a multiple of 16
// bytes, 16-byte aligned bases, one batch, sizes in int32.
// Its variants (linear's and matmul's wgmma_128x128, wgmma_128x256, wgmma_128x256_direct,
// wgmma_c2_128x128, wgmma_c2_128x256 and wgmma_tf32_128x128, wgmma_tf32_128x256; conv2d's
// wgmma_1x1 and wgmma_tf32_1x1) are in the lab (bench/lab/linear_lab.cu, matmul_lab.cu,
// conv2d_lab.cu) until a GPU run records where they win (Note [library rule] in
// bench/lab/library_rule.h).
// Not yet: split-K for the small layers.
//
// Note [multicast GEMM]: with WgmmaConfig::cluster 2 the blocks run in clusters of two
// (kernels/common/cluster.cuh) over pairs of output tiles one above the other: the same columns of
// B, rows of A 128 apart. Each block brings its own A, and half of the stage's B (BN / 2 rows of a
// K-major B, half the boxes of an MN-major one) multicast into both blocks' stages, so each B tile
// crosses from L2 once per pair instead of twice; each block's "full" barrier still waits for the
// whole stage. A block refills a stage of both blocks, so a stage is free only when the consumers of
// both have released it: each consumer warp arrives on its own block's "empty" barrier and on the
// other block's (16 arrivals a phase). The pairs are walked in the grouped order, the two
// blocks in step (when M has an odd number of tiles, the second block's last tile lies below M: its
// A loads as zeros and its stores are skipped). The barriers are initialised before a cluster
// barrier (the other block multicasts into them and arrives on them), and the blocks end with one,
// so that neither exits while the other may still arrive on its barriers.
//
// Note [TMA-store epilogue]: each consumer warp owns 16 rows of the tile and a 4 KiB staging
// buffer of its own: two boxes of 16 rows x 128 bytes (64 f16/bf16 or 32 f32 columns), 128-byte
// swizzled as TMA reads them. Per two boxes of columns the warp writes its rounded pairs into them
// (the swizzle puts the 8 rows of one store in 8 different 16-byte chunks: no bank conflict), every lane fences the
// writes to the async proxy, __syncwarp, and lane 0 stores the boxes with cp.async.bulk.tensor,
// which drops the elements past M and N. Before the warp writes the buffer again lane 0 waits until
// its stores have read it (wait_group.read), and before the block ends until they are done. So
// the warps need no barrier among themselves (a named barrier over the warpgroup would let one
// thread store 64 rows at once, at the price of a wait for the slowest warp), the stores of one
// tile overlap the next tile's main loop, and the global writes are whole 128-byte rows. C needs a
// 16-byte aligned base and a row pitch of a multiple of 16 bytes (wgmma_tma_store_ok).
//
// Note [TF32 through wgmma]: f32 stays exact by default; a caller that asks for TF32 (run_wgmma's
// tf32, as PyTorch's allow_tf32; the lab's wgmma_tf32_* variants) gets wgmma m64nNk8.f32.tf32.tf32
// on the same ring: a k tile is 32 f32 (the same 128-byte rows, so the stages, swizzle and
// descriptors are unchanged), and the MMA reads each f32 with its low 13 mantissa bits ignored
// (truncation, as the simulator reads the ISA: no cvt.rna.tf32 on the way, since TMA lands the
// operands straight in the stages). tf32 has no transposed operands, so A must be row-major and B
// a transposed view (linear's x W^T); the output and the epilogue are f32.
#include <cuda.h>

#include <algorithm>
#include <array>
#include <mutex>

#include "core/cuda/device_guard.h"
#include "core/cuda/kernel.cuh"
#include "core/cuda/tensor_map.h"
#include "kernels/common/cluster.cuh"
#include "kernels/common/current_stream.cuh"
#include "kernels/common/grid_size.cuh"
#include "kernels/common/mbarrier.cuh"
#include "kernels/common/tma.cuh"
#include "kernels/common/wgmma.cuh"
#include "kernels/gemm/gemm_common.cuh"

namespace ember::gemm {

namespace dev {

constexpr int kWgBM = 128, kWgStages = 4, kWgThreads = 384;
// A k tile is one 128-byte swizzle row of k: 64 f16/bf16, or 32 f32 read as tf32 (Note [TF32
// through wgmma]); its 4 MMA steps (k16, or k8 for tf32) are 32 bytes each.
template <class T>
constexpr int kWgBK = 128 / static_cast<int>(sizeof(T));
constexpr int kWgSteps = 4;

template <int BN>
struct WgmmaShape {
  static constexpr int kABytes = kWgBM * 128, kBBytes = BN * 128;
  static constexpr int kStageBytes = kABytes + kBBytes;
  // the consumers' 8 warps' staging buffers for the TMA-store epilogue (Note [TMA-store epilogue])
  static constexpr int kStagingBytes = 8 * 4096;
  // the stages, the staging buffers, 1024 bytes of room to align them, the 2 kWgStages barriers
  static constexpr int kSmem = kWgStages * kStageBytes + kStagingBytes + 1024 + 2 * kWgStages * 8;
  static_assert(kSmem <= 227 * 1024, "a block has at most 227 KiB of shared memory on sm_90");
};

// An operand's part of a stage, 128-byte swizzled (Note [wgmma operand layouts] in sim/wgmma.cpp):
//   K-major (kK): one TMA box of 64 k x `rows`: rows of 128 bytes in 8-row atoms of 1024 bytes
//     (SBO); k16 step s starts 32 s bytes into the rows.
//   MN-major: rows / 64 boxes of 64 (m or n) x 64 k, 8 KiB apart (LBO): k rows of 128 bytes in
//     8-row atoms (SBO 1024); k16 step s starts at k row 16 s, 2048 s bytes in.
template <bool kK>
__device__ __forceinline__ uint64_t operand_desc(uint32_t address, int ks) {
  if constexpr (kK) return ptx::wgmma_desc(address + 32 * ks, 16, 1024, ptx::WgmmaSwizzle::b128);
  else return ptx::wgmma_desc(address + 2048 * ks, 8192, 1024, ptx::WgmmaSwizzle::b128);
}

// The TMA loads of one operand's part of a stage: k tile kt of rows [r0, r0 + rows). (MN-major:
// 16-bit types only.)
template <class T, bool kK, int Rows>
__device__ __forceinline__ void load_operand(unsigned char* dst, const CUtensorMap* map, int kt, int r0,
                                             uint64_t* bar) {
  if constexpr (kK) {
    ptx::tma_load_2d(dst, map, kt * kWgBK<T>, r0, bar);
  } else {
    EMBER_UNROLL
    for (int j = 0; j < Rows / 64; ++j) ptx::tma_load_2d(dst + 8192 * j, map, r0 + 64 * j, kt * kWgBK<T>, bar);
  }
}

// This block's half of B's part of a stage, multicast into both blocks of its cluster (Note
// [multicast GEMM]): K-major, BN / 2 rows from row n0 + rank BN / 2 (a box of BN / 2 rows); MN-major,
// the boxes [rank, rank + 1) x BN / 128 of the BN / 64.
template <class T, bool kK, int BN>
__device__ __forceinline__ void load_b_half(unsigned char* dst, const CUtensorMap* map, int kt, int n0, uint64_t* bar,
                                            unsigned rank) {
  constexpr int kHalf = BN / 2;
  if constexpr (kK) {
    ptx::tma_load_2d_multicast(dst + 128 * kHalf * rank, map, kt * kWgBK<T>, n0 + kHalf * static_cast<int>(rank), bar,
                               0x3);
  } else {
    EMBER_UNROLL
    for (int j = 0; j < kHalf / 64; ++j) {
      const int box = kHalf / 64 * static_cast<int>(rank) + j;
      ptx::tma_load_2d_multicast(dst + 8192 * box, map, n0 + 64 * box, kt * kWgBK<T>, bar, 0x3);
    }
  }
}

// The output tiles of a block: its cluster's units (pairs of tiles one above the other with
// kCl = 2, single tiles with 1) in the grouped order, this block's tile of each.
template <int kCl>
struct TileWalk {
  int64_t tiles_n, units_m;
  unsigned rank;
  __device__ TileWalk(int64_t tiles_m, int64_t tn)
      : tiles_n(tn), units_m((tiles_m + kCl - 1) / kCl), rank(kCl > 1 ? ptx::cluster_ctarank() : 0) {}
  __device__ int64_t first() const { return blockIdx.x / kCl; }
  __device__ int64_t step() const { return gridDim.x / kCl; }
  __device__ int64_t units() const { return units_m * tiles_n; }
  __device__ void coords(int64_t unit, int64_t& tm, int64_t& tn) const {
    tile_coords(unit, units_m, tiles_n, tm, tn);
    tm = tm * kCl + rank;
  }
};

template <class T, int BN, bool AK, bool BK, int kCl>
__device__ __forceinline__ void wgmma_producer(const CUtensorMap* map_a, const CUtensorMap* map_b,
                                               unsigned char* stages, uint64_t* full, uint64_t* empty,
                                               const TileWalk<kCl>& walk, int ktiles) {
  using S = WgmmaShape<BN>;
  int stage = 0;
  uint32_t phase = 0;
  for (int64_t unit = walk.first(); unit < walk.units(); unit += walk.step()) {
    int64_t tm, tn;
    walk.coords(unit, tm, tn);
    const int m0 = static_cast<int>(tm) * kWgBM, n0 = static_cast<int>(tn) * BN;
    for (int kt = 0; kt < ktiles; ++kt) {
      // the first pass finds every stage free; with kCl 2, free in both blocks (Note [multicast GEMM])
      ptx::mbarrier_wait_parity(&empty[stage], phase ^ 1);
      unsigned char* a = stages + stage * S::kStageBytes;
      ptx::mbarrier_arrive_expect_tx(&full[stage], S::kStageBytes);
      load_operand<T, AK, kWgBM>(a, map_a, kt, m0, &full[stage]);
      if constexpr (kCl == 1) load_operand<T, BK, BN>(a + S::kABytes, map_b, kt, n0, &full[stage]);
      else load_b_half<T, BK, BN>(a + S::kABytes, map_b, kt, n0, &full[stage], walk.rank);
      if (++stage == kWgStages) {
        stage = 0;
        phase ^= 1;
      }
    }
  }
}

// One pair of outputs, columns gn and gn + 1, after bias, activation kAct and rounding to T, stored
// to `dst`: 4 bytes for f16/bf16, 8 for f32 (both columns inside N: the caller checks).
template <int kAct, class T>
__device__ __forceinline__ void put_pair(const Args& p, void* dst, int gn, int N, float v0, float v1) {
  if constexpr (std::is_same_v<T, float>) {
    bias_act_pair<kAct, float>(p, gn, N, v0, v1);
    Vec<float, 2> o;  // one 8-byte store (Note [whole vector accesses])
    o.v[0] = v0;
    o.v[1] = v1;
    *static_cast<Vec<float, 2>*>(dst) = o;
  } else {
    *static_cast<uint32_t*>(dst) = epilogue_half_pair<kAct, T>(p, gn, N, v0, v1);
  }
}

// The registers' epilogue of one pair: 2-element stores where c_pair allows, else one per column
// inside N.
template <int kAct, class T>
__device__ __forceinline__ void store_pair(const Args& p, T* crow, int gn, int N, float v0, float v1) {
  if constexpr (std::is_same_v<T, float>) {
    if (p.c_pair && gn + 1 < N) {
      put_pair<kAct, T>(p, crow + gn, gn, N, v0, v1);
    } else {
      Vec<float, 2> o;
      put_pair<kAct, T>(p, &o, gn, N, v0, v1);
      if (gn < N) crow[gn] = o.v[0];
      if (gn + 1 < N) crow[gn + 1] = o.v[1];
    }
  } else {
    store_half_pair<kAct>(p, crow, gn, N, v0, v1);
  }
}

// A consumer warp's 16 rows [m0w, m0w + 16) of the tile at column n0 through its staging buffer
// `wbuf` (Note [TMA-store epilogue]). acc as in wgmma_consumer. A box row is 128 bytes: kE columns
// (64 f16/bf16, 32 f32); a round fills both boxes, 2 kE columns, kJ n8 blocks.
template <int kAct, class T, int BN>
__device__ __forceinline__ void store_rows_tma(const Args& p, const CUtensorMap* map_c, unsigned char* wbuf,
                                               const float* acc, int m0w, int n0, int g, int q, int lane) {
  constexpr int kEs = static_cast<int>(sizeof(T)), kE = 128 / kEs, kJ = 2 * kE / 8;
  const int N = static_cast<int>(p.N);
  if (m0w >= p.M) return;  // the whole warp: its rows are past M
  EMBER_UNROLL
  for (int r = 0; r < BN / (2 * kE); ++r) {
    const int c0 = n0 + 2 * kE * r;
    if (c0 >= N) break;
    if (lane == 0) ptx::bulk_wait_group_read<0>();  // the last stores have read the buffer
    __syncwarp();
    EMBER_UNROLL
    for (int jj = 0; jj < kJ; ++jj) {
      const int j = kJ * r + jj;                             // the n8 column block
      const int byte = (8 * (jj % (kJ / 2)) + 2 * q) * kEs;  // of the pair in its box row
      unsigned char* box = wbuf + 2048 * (jj / (kJ / 2));
      EMBER_UNROLL
      for (int h = 0; h < 2; ++h) {
        // box row g + 8 h; the 128-byte swizzle XORs the 16-byte chunk with the row mod 8, which is g
        put_pair<kAct, T>(p, box + 128 * (g + 8 * h) + 16 * ((byte / 16) ^ g) + byte % 16, n0 + 8 * j + 2 * q, N,
                          acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
      }
    }
    ptx::fence_proxy_async_shared();
    __syncwarp();
    if (lane == 0) {
      ptx::tma_store_2d(map_c, c0, m0w, wbuf);
      if (c0 + kE < N) ptx::tma_store_2d(map_c, c0 + kE, m0w, wbuf + 2048);
      ptx::bulk_commit_group();
    }
  }
}

// A consumer warp releases a stage once all its lanes have waited for their MMAs on it: lane 0
// arrives in its own block and, with kCl 2, in the other block of the cluster, whose producer
// refills this block's stage too (Note [multicast GEMM]).
template <int kCl>
__device__ __forceinline__ void release_stage(uint64_t* empty, unsigned rank, int lane) {
  __syncwarp();
  if (lane != 0) return;
  ptx::mbarrier_arrive(empty);
  if constexpr (kCl > 1) ptx::mbarrier_arrive_cluster(empty, rank ^ 1u);
}

template <class T, int BN, bool AK, bool BK, int kCl>
__device__ __forceinline__ void wgmma_consumer(const Args& p, const CUtensorMap* map_c, bool tma_store,
                                               unsigned char* stages, unsigned char* staging, uint64_t* full,
                                               uint64_t* empty, const TileWalk<kCl>& walk, int ktiles, int half) {
  using S = WgmmaShape<BN>;
  constexpr bool kBf16 = std::is_same_v<T, BFloat16>;
  const int wt = static_cast<int>(threadIdx.x) % 128, w = wt / 32, lane = wt % 32, g = lane / 4, q = wt % 4;
  unsigned char* wbuf = staging + 4096 * (4 * half + w);
  const int M = static_cast<int>(p.M), N = static_cast<int>(p.N);
  T* C = static_cast<T*>(p.c);
  int stage = 0;
  uint32_t phase = 0;
  for (int64_t unit = walk.first(); unit < walk.units(); unit += walk.step()) {
    int64_t tm, tn;
    walk.coords(unit, tm, tn);
    const int m0 = static_cast<int>(tm) * kWgBM + 64 * half, n0 = static_cast<int>(tn) * BN;
    float acc[BN / 2] = {};
    int prev = -1;
    for (int kt = 0; kt < ktiles; ++kt) {
      ptx::mbarrier_wait_parity(&full[stage], phase);
      // this consumer's 64 rows of A: 64 rows of 128 bytes (K-major) or the second box (MN-major)
      const uint32_t a = ptx::smem_address(stages + stage * S::kStageBytes) + 8192 * half;
      const uint32_t b = ptx::smem_address(stages + stage * S::kStageBytes + S::kABytes);
      ptx::wgmma_fence();
      EMBER_UNROLL
      for (int ks = 0; ks < kWgSteps; ++ks) {
        if constexpr (std::is_same_v<T, float>)
          ptx::wgmma_m64k8_tf32<BN>(acc, operand_desc<AK>(a, ks), operand_desc<BK>(b, ks), kt > 0 || ks > 0);
        else
          ptx::wgmma_m64k16<BN, AK ? 0 : 1, BK ? 0 : 1>(acc, operand_desc<AK>(a, ks), operand_desc<BK>(b, ks),
                                                        kt > 0 || ks > 0, kBf16);
      }
      ptx::wgmma_commit_group();
      ptx::wgmma_wait_group<1>();  // the previous k tile's MMAs are done with their stage
      if (prev >= 0) release_stage<kCl>(&empty[prev], walk.rank, lane);
      prev = stage;
      if (++stage == kWgStages) {
        stage = 0;
        phase ^= 1;
      }
    }
    ptx::wgmma_wait_group<0>();
    release_stage<kCl>(&empty[prev], walk.rank, lane);

    // acc[4j + i] is D[16 w + g + 8 (i / 2)][8 j + 2 q + i % 2] (Note [wgmma operand layouts])
    with_activation(p.act, [&](auto act) {
      if (tma_store) {
        store_rows_tma<decltype(act)::value, T, BN>(p, map_c, wbuf, acc, m0 + 16 * w, n0, g, q, lane);
        return;
      }
      EMBER_UNROLL
      for (int h = 0; h < 2; ++h) {
        const int gm = m0 + 16 * w + g + 8 * h;
        if (gm >= M) continue;
        T* crow = C + static_cast<int64_t>(gm) * p.c_rs;
        EMBER_UNROLL
        for (int j = 0; j < BN / 8; ++j) {
          const int gn = n0 + 8 * j + 2 * q;
          if (n0 + 8 * j >= N) break;  // this n8 column block and the next ones are past N
          store_pair<decltype(act)::value, T>(p, crow, gn, N, acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
        }
      }
    });
  }
  if (tma_store && lane == 0) ptx::bulk_wait_group<0>();  // the stores are done before the block ends
}

template <class T, int BN, bool AK, bool BK, int kCl>
__global__ void __launch_bounds__(kWgThreads, 1)
    wgmma_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                 const __grid_constant__ CUtensorMap map_c, Args p, bool tma_store) {
  using S = WgmmaShape<BN>;
  EMBER_DYNAMIC_SHARED(unsigned char, smem);
  const uint32_t base = ptx::smem_address(smem);
  unsigned char* stages = smem + (((base + 1023) & ~1023u) - base);
  unsigned char* staging = stages + kWgStages * S::kStageBytes;  // 1024-byte aligned too
  uint64_t* full = reinterpret_cast<uint64_t*>(staging + S::kStagingBytes);
  uint64_t* empty = full + kWgStages;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kWgStages; ++s) {
      ptx::mbarrier_init(&full[s], 1);         // the producer's arrive.expect_tx
      ptx::mbarrier_init(&empty[s], 8 * kCl);  // every consumer warp of the cluster
    }
    ptx::fence_mbarrier_init();
  }
  if constexpr (kCl > 1) ptx::cluster_sync();  // the other block multicasts into and arrives on them
  else __syncthreads();
  const TileWalk<kCl> walk((p.M + kWgBM - 1) / kWgBM, (p.N + BN - 1) / BN);
  const int ktiles = static_cast<int>((p.K + kWgBK<T> - 1) / kWgBK<T>);
  const int wg = static_cast<int>(threadIdx.x) / 128;
  if (wg == 0) {
    ptx::setmaxnreg_dec<40>();
    if (threadIdx.x == 0) wgmma_producer<T, BN, AK, BK, kCl>(&map_a, &map_b, stages, full, empty, walk, ktiles);
  } else {
    ptx::setmaxnreg_inc<232>();
    wgmma_consumer<T, BN, AK, BK, kCl>(p, &map_c, tma_store, stages, staging, full, empty, walk, ktiles, wg - 1);
  }
  if constexpr (kCl > 1) ptx::cluster_sync();  // no block exits while the other may arrive on its barriers
}

// The tensor map of an operand stored as `rows` rows of `extent` contiguous elements, `pitch`
// elements apart: boxes of 128 bytes x box_rows, 128-byte swizzle. (One row: any pitch reads the
// same, and TMA wants a multiple of 16 bytes.)
CUtensorMap operand_map(DType dtype, const void* base, int64_t extent, int64_t rows, int64_t pitch, int box_rows) {
  const auto es = static_cast<int64_t>(dtype_size(dtype));
  cuda::TensorMapSpec spec;
  spec.dtype = dtype;
  spec.base = base;
  spec.dims = {static_cast<uint64_t>(extent), static_cast<uint64_t>(rows)};
  spec.strides_bytes = {static_cast<uint64_t>(rows > 1 ? pitch * es : (extent * es + 15) / 16 * 16)};
  spec.box = {static_cast<uint32_t>(128 / es), static_cast<uint32_t>(box_rows)};
  spec.swizzle = cuda::TensorMapSwizzle::b128;
  return cuda::make_tensor_map(spec);
}

template <class T, int BN, bool AK, bool BK, int kCl>
void launch_wgmma(const Problem& p, int max_blocks, bool tma_store, cudaStream_t stream) {
  using S = WgmmaShape<BN>;
  const int device = p.device.index;
  static std::array<std::once_flag, 64> once;
  EMBER_CHECK(device >= 0 && device < 64, "gemm wgmma: bad device ", device);
  std::call_once(once[static_cast<size_t>(device)], [] {
    EMBER_CUDA_CHECK(cudaFuncSetAttribute(reinterpret_cast<const void*>(&wgmma_kernel<T, BN, AK, BK, kCl>),
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, S::kSmem));
  });
  // K-major: rows of k (boxes 64 k x the tile's rows); MN-major: rows of m or n (boxes 64 x 64 k)
  const CUtensorMap map_a =
      AK ? operand_map(p.dtype, p.a, p.K, p.M, p.a_rs, kWgBM) : operand_map(p.dtype, p.a, p.M, p.K, p.a_cs, kWgBK<T>);
  // (a block of a cluster brings BN / 2 rows of a K-major B: Note [multicast GEMM])
  const CUtensorMap map_b = BK ? operand_map(p.dtype, p.b, p.K, p.N, p.b_cs, BN / kCl)
                               : operand_map(p.dtype, p.b, p.N, p.K, p.b_rs, kWgBK<T>);
  // C: rows of n, boxes of 128 bytes of n x a warp's 16 rows (unused, and not encoded, with direct stores)
  const CUtensorMap map_c = tma_store ? operand_map(p.dtype, p.c, p.N, p.M, p.c_rs, 16) : CUtensorMap{};
  // one cluster per unit of tiles (Note [multicast GEMM]), at most one block per SM or max_blocks
  const int64_t units = ((p.M + kWgBM * kCl - 1) / (kWgBM * kCl)) * ((p.N + BN - 1) / BN);
  int64_t clusters = std::min<int64_t>(units, cuda::sm_count(device) / kCl);
  if (max_blocks > 0) clusters = std::min<int64_t>(clusters, std::max(max_blocks / kCl, 1));
  const dim3 grid(static_cast<unsigned>(clusters * kCl));
  if constexpr (kCl == 1)
    cuda::launch(wgmma_kernel<T, BN, AK, BK, 1>, grid, kWgThreads, S::kSmem, stream, map_a, map_b, map_c,
                 make_args(p, 16), tma_store);
  else
    cuda::launch_cluster(wgmma_kernel<T, BN, AK, BK, kCl>, grid, kWgThreads, dim3(kCl), S::kSmem, stream, map_a, map_b,
                         map_c, make_args(p, 16), tma_store);
}

// The kernel for the operands' layouts: K-major or MN-major each.
template <class T, int BN, int kCl>
void dispatch_wgmma(const Problem& p, int max_blocks, bool tma_store, cudaStream_t stream) {
  if constexpr (std::is_same_v<T, float>) {
    launch_wgmma<float, BN, true, true, kCl>(p, max_blocks, tma_store, stream);  // tf32: both K-major (wgmma_refusal)
  } else {
    const bool ak = p.a_kmajor(), bk = p.b_kmajor();
    if (ak && bk) launch_wgmma<T, BN, true, true, kCl>(p, max_blocks, tma_store, stream);
    else if (ak) launch_wgmma<T, BN, true, false, kCl>(p, max_blocks, tma_store, stream);
    else if (bk) launch_wgmma<T, BN, false, true, kCl>(p, max_blocks, tma_store, stream);
    else launch_wgmma<T, BN, false, false, kCl>(p, max_blocks, tma_store, stream);
  }
}

}  // namespace dev

// sm_90a code runs on compute capability 9.0 only
bool wgmma_supported(int device) { return device >= 0 && device < 16 && cuda::compute_capability(device) == 90; }

std::string wgmma_refusal(const Problem& p, bool tf32) {
  constexpr int64_t kIntMax = (int64_t{1} << 31) - 1;
  if (p.dtype == DType::f32) {
    if (!tf32) return "f32 is exact by default (wgmma reads it as TF32 only when asked)";
    if (!p.a_kmajor() || !p.b_kmajor()) return "TF32 reads both operands K-major only (A row-major, B transposed)";
  } else if (p.dtype != DType::f16 && p.dtype != DType::bf16) {
    return "dtype is not f16, bf16 or f32 (as TF32)";
  }
  if (p.M > kIntMax || p.N > kIntMax || p.K > kIntMax) return "M, N or K does not fit in int32";
  if (p.K == 0) return "K is 0";
  if (p.batch() != 1) return "batched (one matrix product only)";
  if (p.a_cs != 1 && p.a_rs != 1) return "A has no unit stride";
  if (p.b_cs != 1 && p.b_rs != 1) return "B has no unit stride";
  const auto aligned = [](const void* q) { return reinterpret_cast<uintptr_t>(q) % 16 == 0; };
  if (!aligned(p.a) || !aligned(p.b)) return "an operand's base is not 16-byte aligned";
  // TMA reads rows of the contiguous dim whose pitch is a multiple of 16 bytes (one row: any)
  const int64_t unit = 16 / static_cast<int64_t>(dtype_size(p.dtype));
  const auto pitch_ok = [unit](int64_t rows, int64_t pitch, int64_t extent) {
    return rows <= 1 || (pitch % unit == 0 && pitch >= extent);
  };
  const bool a_ok = p.a_kmajor() ? pitch_ok(p.M, p.a_rs, p.K) : pitch_ok(p.K, p.a_cs, p.M);
  const bool b_ok = p.b_kmajor() ? pitch_ok(p.N, p.b_cs, p.K) : pitch_ok(p.K, p.b_rs, p.N);
  if (!a_ok || !b_ok) return "an operand's row pitch is not a multiple of " + std::to_string(unit) + " elements";
  return "";
}

bool wgmma_tma_store_ok(const Problem& p) {
  const int64_t unit = 16 / static_cast<int64_t>(dtype_size(p.dtype));
  return reinterpret_cast<uintptr_t>(p.c) % 16 == 0 && (p.M <= 1 || (p.c_rs % unit == 0 && p.c_rs >= p.N));
}

void run_wgmma(const Problem& p, const WgmmaConfig& c) {
  if (p.M == 0 || p.N == 0) return;
  const std::string why = wgmma_refusal(p, c.tf32);
  EMBER_CHECK(why.empty(), "gemm wgmma: ", why, " (M ", p.M, ", N ", p.N, ", K ", p.K, ")");
  EMBER_CHECK(wgmma_supported(p.device.index), "gemm wgmma: needs a GPU of compute capability 9.0 (sm_90a)");
  EMBER_CHECK(c.bn == 128 || c.bn == 256, "gemm wgmma: the tile is 128 x 128 or 128 x 256, not 128 x ", c.bn);
  EMBER_CHECK(c.cluster == 1 || c.cluster == 2, "gemm wgmma: clusters of 1 or 2 blocks, not ", c.cluster);
  cuda::DeviceGuard guard(p.device.index);
  cudaStream_t stream = cuda::stream_for(p.device);
  const bool tma = c.epilogue == WgmmaEpilogue::tma_store && wgmma_tma_store_ok(p);
  const auto run = [&]<class T>(T*) {
    const auto tile = [&]<int BN>() {
      if (c.cluster == 1) dev::dispatch_wgmma<T, BN, 1>(p, c.max_blocks, tma, stream);
      else dev::dispatch_wgmma<T, BN, 2>(p, c.max_blocks, tma, stream);
    };
    if (c.bn == 128) tile.template operator()<128>();
    else tile.template operator()<256>();
  };
  if (p.dtype == DType::bf16) run(static_cast<BFloat16*>(nullptr));
  else if (p.dtype == DType::f16) run(static_cast<Half*>(nullptr));
  else run(static_cast<float*>(nullptr));
}

}  // namespace ember::gemm
