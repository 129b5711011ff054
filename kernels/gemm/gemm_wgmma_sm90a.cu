// wgmma: the f16/bf16 GEMM for Hopper (sm_90a only: built by its own object library, see the
// top-level CMakeLists.txt, "_sm90a.cu"): TMA brings tiles of A and B into a ring of shared-memory
// stages guarded by mbarriers, a producer warpgroup issues the copies, two consumer warpgroups
// multiply from the stages with wgmma.mma_async, and a persistent grid walks the output tiles.
//
// Note [warp-specialised GEMM]: a block is three warpgroups (384 threads) over one 128 x BN output
// tile at a time (BN 128 or 256), k tiles of 64 (128 bytes of f16/bf16: one 128-byte swizzle row),
// kWgStages (4) stages of A's 128 x 64 tile and B's BN x 64 tile, each stage with a "full" and an
// "empty" mbarrier (Note [mbarrier phases] in kernels/common/mbarrier.cuh).
//   producer (warpgroup 0, setmaxnreg.dec to 40 registers; one thread works): for each of the
//     block's tiles and each k tile, waits for the stage's "empty" phase, arms "full" with the
//     stage's bytes (arrive.expect_tx), issues the stage's TMA tile loads, which complete on "full".
//   consumers (warpgroups 1 and 2, setmaxnreg.inc to 232): each owns 64 rows of the tile. Per k
//     tile: wait for "full", four wgmma m64nBNk16 (one per k16 step: operand_desc moves the
//     descriptors' start to it), commit, wait until only this k tile's group is in flight,
//     then release the previous stage (every consumer thread arrives on its "empty": 256 arrivals).
//   The stage index and the phase parity run on across tiles: the ring never drains, so the
//   producer fills the next tile's first stages while the consumers store this one.
// TMA's 128-byte swizzle and wgmma's read the same layout (8-row atoms of 1024 bytes, the 16-byte
// chunk index XORed with the row), so the stages are used as they land; they are 1024-byte aligned.
// Ragged M, N and K need nothing: box elements outside the tensors land as zeros, and the
// epilogue skips rows past M and columns past N. Epilogue: bias, activation and rounding from the
// accumulator fragments (Note [wgmma operand layouts] in sim/wgmma.cpp), stored as 32-bit pairs
// where aligned. Tiles in the grouped order of the other GEMMs (tile_coords).
//
// Operands K-major (A row-major; B^T row-major, linear's x W^T) or MN-major (A^T; B row-major), each
// as its own TMA boxes and wgmma transpose bit (operand_desc, load_operand).
// What it needs (wgmma_refusal says what is missing; otherwise the caller takes the next variant):
// a GPU of compute capability 9.0, a unit stride in each operand, row pitches of a multiple of 8
// elements, 16-byte aligned bases, one batch, sizes in int32.
// Its variants (linear's and matmul's wgmma_128x128 and wgmma_128x256) are in the lab
// (bench/lab/linear_lab.cu, matmul_lab.cu) until a GPU run records where they win
// (Note [library rule] in bench/lab/library_rule.h).
// Not yet: clusters with TMA multicast, a TMA-store epilogue, split-K for the small layers.
#include <cuda.h>

#include <algorithm>
#include <array>
#include <mutex>

#include "core/cuda/device_guard.h"
#include "core/cuda/kernel.cuh"
#include "core/cuda/tensor_map.h"
#include "kernels/common/current_stream.cuh"
#include "kernels/common/grid_size.cuh"
#include "kernels/common/mbarrier.cuh"
#include "kernels/common/tma.cuh"
#include "kernels/common/wgmma.cuh"
#include "kernels/gemm/gemm_common.cuh"

namespace ember::gemm {

namespace dev {

constexpr int kWgBM = 128, kWgBK = 64, kWgStages = 4, kWgThreads = 384;

template <int BN>
struct WgmmaShape {
  static constexpr int kABytes = kWgBM * kWgBK * 2, kBBytes = BN * kWgBK * 2;
  static constexpr int kStageBytes = kABytes + kBBytes;
  // the stages, 1024 bytes of room to align them, the 2 kWgStages barriers
  static constexpr int kSmem = kWgStages * kStageBytes + 1024 + 2 * kWgStages * 8;
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

// The TMA loads of one operand's part of a stage: k tile kt of rows [r0, r0 + rows).
template <bool kK, int Rows>
__device__ __forceinline__ void load_operand(unsigned char* dst, const CUtensorMap* map, int kt, int r0,
                                             uint64_t* bar) {
  if constexpr (kK) {
    ptx::tma_load_2d(dst, map, kt * kWgBK, r0, bar);
  } else {
    EMBER_UNROLL
    for (int j = 0; j < Rows / 64; ++j) ptx::tma_load_2d(dst + 8192 * j, map, r0 + 64 * j, kt * kWgBK, bar);
  }
}

template <int BN, bool AK, bool BK>
__device__ __forceinline__ void wgmma_producer(const CUtensorMap* map_a, const CUtensorMap* map_b,
                                               unsigned char* stages, uint64_t* full, uint64_t* empty, int64_t tiles_m,
                                               int64_t tiles_n, int ktiles) {
  using S = WgmmaShape<BN>;
  int stage = 0;
  uint32_t phase = 0;
  for (int64_t tile = blockIdx.x; tile < tiles_m * tiles_n; tile += gridDim.x) {
    int64_t tm, tn;
    tile_coords(tile, tiles_m, tiles_n, tm, tn);
    const int m0 = static_cast<int>(tm) * kWgBM, n0 = static_cast<int>(tn) * BN;
    for (int kt = 0; kt < ktiles; ++kt) {
      ptx::mbarrier_wait_parity(&empty[stage], phase ^ 1);  // the first pass finds every stage free
      unsigned char* a = stages + stage * S::kStageBytes;
      ptx::mbarrier_arrive_expect_tx(&full[stage], S::kStageBytes);
      load_operand<AK, kWgBM>(a, map_a, kt, m0, &full[stage]);
      load_operand<BK, BN>(a + S::kABytes, map_b, kt, n0, &full[stage]);
      if (++stage == kWgStages) {
        stage = 0;
        phase ^= 1;
      }
    }
  }
}

template <class T, int BN, bool AK, bool BK>
__device__ __forceinline__ void wgmma_consumer(const Args& p, unsigned char* stages, uint64_t* full, uint64_t* empty,
                                               int64_t tiles_m, int64_t tiles_n, int ktiles, int half) {
  using S = WgmmaShape<BN>;
  constexpr bool kBf16 = std::is_same_v<T, BFloat16>;
  const int wt = static_cast<int>(threadIdx.x) % 128, w = wt / 32, g = (wt % 32) / 4, q = wt % 4;
  const int M = static_cast<int>(p.M), N = static_cast<int>(p.N);
  T* C = static_cast<T*>(p.c);
  int stage = 0;
  uint32_t phase = 0;
  for (int64_t tile = blockIdx.x; tile < tiles_m * tiles_n; tile += gridDim.x) {
    int64_t tm, tn;
    tile_coords(tile, tiles_m, tiles_n, tm, tn);
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
      for (int ks = 0; ks < kWgBK / 16; ++ks)
        ptx::wgmma_m64k16<BN, AK ? 0 : 1, BK ? 0 : 1>(acc, operand_desc<AK>(a, ks), operand_desc<BK>(b, ks),
                                                      kt > 0 || ks > 0, kBf16);
      ptx::wgmma_commit_group();
      ptx::wgmma_wait_group<1>();  // the previous k tile's MMAs are done with their stage
      if (prev >= 0) ptx::mbarrier_arrive(&empty[prev]);
      prev = stage;
      if (++stage == kWgStages) {
        stage = 0;
        phase ^= 1;
      }
    }
    ptx::wgmma_wait_group<0>();
    ptx::mbarrier_arrive(&empty[prev]);

    // acc[4j + i] is D[16 w + g + 8 (i / 2)][8 j + 2 q + i % 2] (Note [wgmma operand layouts])
    with_activation(p.act, [&](auto act) {
      EMBER_UNROLL
      for (int h = 0; h < 2; ++h) {
        const int gm = m0 + 16 * w + g + 8 * h;
        if (gm >= M) continue;
        T* crow = C + static_cast<int64_t>(gm) * p.c_rs;
        EMBER_UNROLL
        for (int j = 0; j < BN / 8; ++j) {
          const int gn = n0 + 8 * j + 2 * q;
          if (n0 + 8 * j >= N) break;  // this n8 column block and the next ones are past N
          store_half_pair<decltype(act)::value>(p, crow, gn, N, acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
        }
      }
    });
  }
}

template <class T, int BN, bool AK, bool BK>
__global__ void __launch_bounds__(kWgThreads, 1)
    wgmma_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b, Args p) {
  using S = WgmmaShape<BN>;
  EMBER_DYNAMIC_SHARED(unsigned char, smem);
  const uint32_t base = ptx::smem_address(smem);
  unsigned char* stages = smem + (((base + 1023) & ~1023u) - base);
  uint64_t* full = reinterpret_cast<uint64_t*>(stages + kWgStages * S::kStageBytes);
  uint64_t* empty = full + kWgStages;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kWgStages; ++s) {
      ptx::mbarrier_init(&full[s], 1);                  // the producer's arrive.expect_tx
      ptx::mbarrier_init(&empty[s], kWgThreads - 128);  // every consumer thread
    }
    ptx::fence_mbarrier_init();
  }
  __syncthreads();
  const int64_t tiles_m = (p.M + kWgBM - 1) / kWgBM, tiles_n = (p.N + BN - 1) / BN;
  const int ktiles = static_cast<int>((p.K + kWgBK - 1) / kWgBK);
  const int wg = static_cast<int>(threadIdx.x) / 128;
  if (wg == 0) {
    ptx::setmaxnreg_dec<40>();
    if (threadIdx.x == 0) wgmma_producer<BN, AK, BK>(&map_a, &map_b, stages, full, empty, tiles_m, tiles_n, ktiles);
  } else {
    ptx::setmaxnreg_inc<232>();
    wgmma_consumer<T, BN, AK, BK>(p, stages, full, empty, tiles_m, tiles_n, ktiles, wg - 1);
  }
}

// The tensor map of an operand stored as `rows` rows of `extent` contiguous elements, `pitch`
// elements apart: boxes of 64 x box_rows, 128-byte swizzle. (One row: any pitch reads the same,
// and TMA wants a multiple of 16 bytes.)
CUtensorMap operand_map(DType dtype, const void* base, int64_t extent, int64_t rows, int64_t pitch, int box_rows) {
  cuda::TensorMapSpec spec;
  spec.dtype = dtype;
  spec.base = base;
  spec.dims = {static_cast<uint64_t>(extent), static_cast<uint64_t>(rows)};
  spec.strides_bytes = {static_cast<uint64_t>(rows > 1 ? pitch : (extent + 7) / 8 * 8) * 2};
  spec.box = {64, static_cast<uint32_t>(box_rows)};
  spec.swizzle = cuda::TensorMapSwizzle::b128;
  return cuda::make_tensor_map(spec);
}

template <class T, int BN, bool AK, bool BK>
void launch_wgmma(const Problem& p, int max_blocks, cudaStream_t stream) {
  using S = WgmmaShape<BN>;
  const int device = p.device.index;
  static std::array<std::once_flag, 64> once;
  EMBER_CHECK(device >= 0 && device < 64, "gemm wgmma: bad device ", device);
  std::call_once(once[static_cast<size_t>(device)], [] {
    EMBER_CUDA_CHECK(cudaFuncSetAttribute(reinterpret_cast<const void*>(&wgmma_kernel<T, BN, AK, BK>),
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, S::kSmem));
  });
  // K-major: rows of k (boxes 64 k x the tile's rows); MN-major: rows of m or n (boxes 64 x 64 k)
  const CUtensorMap map_a =
      AK ? operand_map(p.dtype, p.a, p.K, p.M, p.a_rs, kWgBM) : operand_map(p.dtype, p.a, p.M, p.K, p.a_cs, kWgBK);
  const CUtensorMap map_b =
      BK ? operand_map(p.dtype, p.b, p.K, p.N, p.b_cs, BN) : operand_map(p.dtype, p.b, p.N, p.K, p.b_rs, kWgBK);
  const int64_t tiles = ((p.M + kWgBM - 1) / kWgBM) * ((p.N + BN - 1) / BN);
  int64_t blocks = std::min<int64_t>(tiles, cuda::sm_count(device));
  if (max_blocks > 0) blocks = std::min<int64_t>(blocks, max_blocks);
  cuda::launch(wgmma_kernel<T, BN, AK, BK>, dim3(static_cast<unsigned>(blocks)), kWgThreads, S::kSmem, stream, map_a,
               map_b, make_args(p, 16));
}

// The kernel for the operands' layouts: K-major or MN-major each.
template <class T, int BN>
void dispatch_wgmma(const Problem& p, int max_blocks, cudaStream_t stream) {
  const bool ak = p.a_kmajor(), bk = p.b_kmajor();
  if (ak && bk) launch_wgmma<T, BN, true, true>(p, max_blocks, stream);
  else if (ak) launch_wgmma<T, BN, true, false>(p, max_blocks, stream);
  else if (bk) launch_wgmma<T, BN, false, true>(p, max_blocks, stream);
  else launch_wgmma<T, BN, false, false>(p, max_blocks, stream);
}

}  // namespace dev

// sm_90a code runs on compute capability 9.0 only
bool wgmma_supported(int device) { return device >= 0 && device < 16 && cuda::compute_capability(device) == 90; }

std::string wgmma_refusal(const Problem& p) {
  constexpr int64_t kIntMax = (int64_t{1} << 31) - 1;
  if (p.dtype != DType::f16 && p.dtype != DType::bf16) return "dtype is not f16 or bf16";
  if (p.M > kIntMax || p.N > kIntMax || p.K > kIntMax) return "M, N or K does not fit in int32";
  if (p.K == 0) return "K is 0";
  if (p.batch() != 1) return "batched (one matrix product only)";
  if (p.a_cs != 1 && p.a_rs != 1) return "A has no unit stride";
  if (p.b_cs != 1 && p.b_rs != 1) return "B has no unit stride";
  const auto aligned = [](const void* q) { return reinterpret_cast<uintptr_t>(q) % 16 == 0; };
  if (!aligned(p.a) || !aligned(p.b)) return "an operand's base is not 16-byte aligned";
  // TMA reads rows of the contiguous dim whose pitch is a multiple of 16 bytes (one row: any)
  const auto pitch_ok = [](int64_t rows, int64_t pitch, int64_t extent) {
    return rows <= 1 || (pitch % 8 == 0 && pitch >= extent);
  };
  const bool a_ok = p.a_kmajor() ? pitch_ok(p.M, p.a_rs, p.K) : pitch_ok(p.K, p.a_cs, p.M);
  const bool b_ok = p.b_kmajor() ? pitch_ok(p.N, p.b_cs, p.K) : pitch_ok(p.K, p.b_rs, p.N);
  if (!a_ok || !b_ok) return "an operand's row pitch is not a multiple of 8 elements";
  return "";
}

void run_wgmma(const Problem& p, int bn, int max_blocks) {
  if (p.M == 0 || p.N == 0) return;
  const std::string why = wgmma_refusal(p);
  EMBER_CHECK(why.empty(), "gemm wgmma: ", why, " (M ", p.M, ", N ", p.N, ", K ", p.K, ")");
  EMBER_CHECK(wgmma_supported(p.device.index), "gemm wgmma: needs a GPU of compute capability 9.0 (sm_90a)");
  EMBER_CHECK(bn == 128 || bn == 256, "gemm wgmma: the tile is 128 x 128 or 128 x 256, not 128 x ", bn);
  cuda::DeviceGuard guard(p.device.index);
  cudaStream_t stream = cuda::stream_for(p.device);
  const bool bf16 = p.dtype == DType::bf16;
  if (bn == 128) {
    if (bf16) dev::dispatch_wgmma<BFloat16, 128>(p, max_blocks, stream);
    else dev::dispatch_wgmma<Half, 128>(p, max_blocks, stream);
  } else {
    if (bf16) dev::dispatch_wgmma<BFloat16, 256>(p, max_blocks, stream);
    else dev::dispatch_wgmma<Half, 256>(p, max_blocks, stream);
  }
}

}  // namespace ember::gemm
