// Device-side pieces shared by the GEMM kernels (gemm_*.cu): the kernel arguments, batch offsets,
// the epilogue, the tile order.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "core/dtype.h"
#include "core/half.h"
#include "kernels/common/aligned_vec.cuh"
#include "kernels/common/block_phases.cuh"  // last_block_to_arrive
#include "kernels/gemm/cuda_gemm.h"
#include "kernels/ops/unary.h"

namespace ember::gemm::dev {

// Kernel arguments (passed by value). Sizes are int64 here; the tiled kernels check on the host
// that M, N and K fit in int32.
struct Args {
  int64_t M, N, K;
  const void* a;
  int64_t a_rs, a_cs;
  const void* b;
  int64_t b_rs, b_cs;
  void* c;
  int64_t c_rs, c_bs;
  const void* bias;
  int act;
  int nb;
  int64_t batch;
  int64_t bsize[kMaxBatchDims], a_bs[kMaxBatchDims], b_bs[kMaxBatchDims];
  // Whether 16-byte vectors along each operand's unit-stride dim are aligned and never cross the
  // matrix edge (base pointer, leading dim, batch strides and that dim's extent all multiples of
  // 16 bytes), and whether C rows take 16-byte (c_vec) or 2-element (c_pair) stores.
  bool a_vec, b_vec, c_vec, c_pair;
  // Split-K (Note [split-K]): blockIdx.y picks k tiles [y * kt_per_split, (y + 1) * kt_per_split);
  // with ws set, blocks store their raw accumulators to ws[y][z][m][n] (no epilogue); the last
  // block of a tile to finish sums the splits in order and applies the epilogue
  // (finish_split_tile, with the stream's tickets, one per tile of every batch), or, without
  // tickets, splitk_reduce does after the kernel.
  int64_t kt_per_split;
  void* ws;
  unsigned* tickets;
  // A relu layer's backward fused into simt or mma (run_simt_fused, run_mma_fused, OuterFusion in
  // cuda_gemm.h): A read as 0 where a_mask (A's strides) is not > 0, and A's row sums after the
  // mask into row_sum.
  const void* a_mask;
  void* row_sum;
};

// Element offsets of A and B for flat batch index z.
__device__ __forceinline__ void batch_offsets(const Args& p, int64_t z, int64_t& ao, int64_t& bo) {
  ao = 0;
  bo = 0;
  for (int d = p.nb - 1; d >= 0; --d) {
    const int64_t i = z % p.bsize[d];
    z /= p.bsize[d];
    ao += i * p.a_bs[d];
    bo += i * p.b_bs[d];
  }
}

// act(v): the same functors as the CPU reference and the unary ops.
template <class Acc>
__device__ __forceinline__ Acc activate(Acc v, int act) {
  if (act == 1) return unary::Relu::f(v);
  if (act == 2) return unary::Gelu::f(v);
  return v;
}

// The same with the activation known at compile time (0 none, 1 relu, 2 gelu), or kAct -1: relu
// or none as `act` says, a select with no branch. The tiles' epilogues use it (Note [compact
// epilogues]).
template <int kAct, class Acc>
__device__ __forceinline__ Acc activate(Acc v, int act = 0) {
  if constexpr (kAct == 1) return unary::Relu::f(v);
  if constexpr (kAct == 2) return unary::Gelu::f(v);
  if constexpr (kAct == -1) return act == 1 ? unary::Relu::f(v) : v;
  return v;
}

// Note [compact epilogues]: a tile's epilogue is unrolled over every accumulator of the thread
// (128 in mma_sync, 64 in simt). With the activation chosen per value at run time, each value
// carried GELU's code (erf inlined 128 times): mma_sync's epilogue was about 6,700 of its 11,640
// SASS instructions (186 KB of code, sm_90), all of it walked by a linear layer too small for
// split-K, e.g. [64, 128] -> 10, which measured 50-57 us on an H200 against cuBLASLt's 5-6 us (the
// split-K shapes, which skip it, were not slow). Instruction fetch from a cold cache is the
// suspect, not yet confirmed on a GPU. So the epilogue chooses once between a GELU loop and a
// loop for relu or none (a select per value, activate<-1>), and stops at the thread's first n8
// tile (simt: column half) past N, so a narrow output walks a few KB of code. (One loop per
// activation, three, made mma_sync spill at its 255-register cap.)
//
// with_activation calls f(std::integral_constant<int, 2>{}) for gelu (act 2), else
// f(std::integral_constant<int, -1>{}).
template <class F>
__device__ __forceinline__ void with_activation(int act, const F& f) {
  if (act == 2) f(std::integral_constant<int, 2>{});
  else f(std::integral_constant<int, -1>{});
}

// The tensor-core epilogue's arithmetic on one pair of outputs, columns gn and gn + 1 (T, C's
// dtype: Half, BFloat16, or float for TF32): bias, then activation kAct (activate<kAct>), in f32.
// Columns past N read no bias; what they hold is never stored.
template <int kAct, class T>
__device__ __forceinline__ void bias_act_pair(const Args& p, int gn, int N, float& v0, float& v1) {
  const T* bias = static_cast<const T*>(p.bias);
  if (bias != nullptr) {
    if (gn < N) v0 += static_cast<float>(bias[gn]);
    if (gn + 1 < N) v1 += static_cast<float>(bias[gn + 1]);
  }
  v0 = activate<kAct>(v0, p.act);
  v1 = activate<kAct>(v1, p.act);
}

// ... then one rounding each to T (Half or BFloat16), packed as a 32-bit pair (gn in the low half).
template <int kAct, class T>
__device__ __forceinline__ uint32_t epilogue_half_pair(const Args& p, int gn, int N, float v0, float v1) {
  bias_act_pair<kAct, T>(p, gn, N, v0, v1);
  const T o0(v0), o1(v1);
  return uint32_t(o0.bits) | (uint32_t(o1.bits) << 16);
}

// ... stored to row `crow`: one 32-bit store where c_pair allows it, else a store per column inside N.
template <int kAct, class T>
__device__ __forceinline__ void store_half_pair(const Args& p, T* crow, int gn, int N, float v0, float v1) {
  const uint32_t o = epilogue_half_pair<kAct, T>(p, gn, N, v0, v1);
  if (p.c_pair && gn + 1 < N) {
    *reinterpret_cast<uint32_t*>(crow + gn) = o;
  } else {
    if (gn < N) crow[gn].bits = static_cast<uint16_t>(o);
    if (gn + 1 < N) crow[gn + 1].bits = static_cast<uint16_t>(o >> 16);
  }
}

// Split-K within the launch (Note [split-K]): once a block has stored its partial tile (rows
// [m0, m0 + BM) and columns [n0, n0 + BN) of batch z) to the workspace, it takes the tile's ticket;
// the block that takes the last one adds the tile's partials in split order, as splitk_reduce does
// (the same sums, bit for bit), applies the epilogue, stores C and puts the ticket back to 0 (Note
// [stream tickets] in core/cuda/runtime.h). Without tickets a block only waits for its threads.
template <class T, int BM, int BN>
__device__ __forceinline__ void finish_split_tile(const Args& p, int64_t z, int m0, int n0) {
  if (p.tickets == nullptr) {
    __syncthreads();
    return;
  }
  unsigned* ticket = p.tickets + z * gridDim.x + blockIdx.x;
  if (!cuda::last_block_to_arrive(ticket, gridDim.y)) return;
  using Acc = acc_t<T>;
  const Acc* ws = static_cast<const Acc*>(p.ws);
  const int64_t total = p.batch * p.M * p.N;
  const T* bias = static_cast<const T*>(p.bias);
  T* C = static_cast<T*>(p.c) + z * p.c_bs;
  const int rows = static_cast<int>(p.M - m0 < BM ? p.M - m0 : BM),
            cols = static_cast<int>(p.N - n0 < BN ? p.N - n0 : BN);
  for (int i = static_cast<int>(threadIdx.x); i < rows * cols; i += static_cast<int>(blockDim.x)) {
    const int m = m0 + i / cols, n = n0 + i % cols;
    const int64_t at = (z * p.M + m) * p.N + n;
    Acc v = 0;
    for (unsigned sp = 0; sp < gridDim.y; ++sp) v += ws[sp * total + at];
    if (bias != nullptr) v += static_cast<Acc>(bias[n]);
    C[m * p.c_rs + n] = static_cast<T>(activate(v, p.act));
  }
  if (threadIdx.x == 0) *ticket = 0u;
}

// The bias gradient of a fused relu backward (Note [fused simt backward] in gemm_simt.cu, Note
// [fused mma backward] in gemm_mma.cu): blocks appended to the GEMM's grid, each summing
// kRowSumRows rows of A over k after the mask, into row_sum. A warp's lanes take consecutive rows
// (coalesced when A is dz^T, m-contiguous); the block's warps take every (Threads / 32)-th k and
// add their sums in warp order, so the result does not depend on timing.
constexpr int kRowSumRows = 32;

template <class T, int Threads>
__device__ __forceinline__ void row_sums_block(const Args& p, int64_t blk) {
  using Acc = acc_t<T>;
  constexpr int KG = Threads / kRowSumRows;  // the runs of k: one a warp
  EMBER_SHARED(Acc[KG][kRowSumRows], part);
  const int r = static_cast<int>(threadIdx.x) % kRowSumRows, kg = static_cast<int>(threadIdx.x) / kRowSumRows;
  const int64_t m = blk * kRowSumRows + r;
  const T* A = static_cast<const T*>(p.a);
  const T* mask = static_cast<const T*>(p.a_mask);
  Acc sum = 0;
  for (int64_t k = kg; m < p.M && k < p.K; k += KG) {
    const int64_t at = m * p.a_rs + k * p.a_cs;
    // relu_backward's rule, as the tiles' loads apply it
    if (mask == nullptr || mask[at] > T(0)) sum += static_cast<Acc>(A[at]);
  }
  part[kg][r] = sum;
  __syncthreads();
  if (kg != 0 || m >= p.M) return;
  for (int j = 1; j < KG; ++j) sum += part[j][r];
  static_cast<T*>(p.row_sum)[m] = static_cast<T>(sum);
}

// Grouped tile order: consecutive blocks walk down a group of 8 tile rows before moving right,
// so the tiles of A and B that run at the same time overlap and stay in L2.
__device__ __forceinline__ void tile_coords(int64_t pid, int64_t tiles_m, int64_t tiles_n, int64_t& tm, int64_t& tn) {
  constexpr int64_t G = 8;
  const int64_t in_group = G * tiles_n;
  const int64_t group = pid / in_group;
  const int64_t first_m = group * G;
  const int64_t gsize = tiles_m - first_m < G ? tiles_m - first_m : G;
  const int64_t r = pid % in_group;
  tm = first_m + r % gsize;
  tn = r / gsize;
}

__host__ __device__ __forceinline__ int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

template <class T, int N>
using Vec = ::ember::detail::AlignedVec<T, N>;  // one N-element vector access (kernels/common/aligned_vec.cuh)

// Host: what the fused relu backward GEMMs (run_simt_fused, run_mma_fused) ask of a problem beyond
// its dtype: one batch, B row-major, M, N, K within int32 (nullptr when taken, else why not); and
// the check their run_* make, `name` naming the kernel in the message.
const char* fused_shape_refusal(const Problem& p);
void check_fused_call(const Problem& p, const OuterFusion& fuse, const char* why, const char* name);

// Host: kernel arguments from a problem; `vec_bytes` is the vector width the kernel loads.
// (No split: kt_per_split covers every k tile, ws is null.)
Args make_args(const Problem& p, int vec_bytes);

// Note [split-K]: a problem with few output tiles and a long K (the MNIST layers: 64 x 784 -> 128
// is one 128x128 tile) would run on one or two SMs. Split-K cuts the k tiles into `splits` ranges
// run by separate blocks that write f32 (f64) partial tiles to a workspace from the caching
// allocator. The last block of a tile to finish (a ticket per tile, Note [stream tickets] in
// core/cuda/runtime.h) adds the tile's partials in split order (deterministic) and applies bias,
// activation and rounding, so the GEMM is one launch: at the MNIST layers' sizes the second
// kernel it replaces cost a launch (about 4.8 us on an H200 in the time model) for well under a
// microsecond of work. That kernel, splitk_reduce, remains for a GEMM captured on a stream that
// has no tickets yet, and as the implicit-GEMM weight gradients' fallback (gemm::sum_splits in
// cuda_gemm.h). Chosen when the tiles fill less than half of the SMs and every split keeps at
// least `min_kt` k tiles. Returns the number of splits (1: none).
int choose_splits(int64_t tiles, int64_t ktiles, int64_t min_kt, int device);
// Sets up args for `splits` (allocating the workspace into `ws`, taking the stream's tickets for
// `tiles`, the output tiles of every batch) and, after the GEMM kernel ran, finish_splits() reduces
// when the kernel could not (no tickets). acc_bytes: 4 (f32 accumulators) or 8 (f64).
// Returns the splits actually used (no split left without k tiles).
int plan_splits(Args& args, const Problem& p, int64_t ktiles, int splits, int acc_bytes, int64_t tiles, Tensor& ws,
                cudaStream_t stream);
void finish_splits(const Args& args, const Problem& p, int splits, cudaStream_t stream);

// Host: the grid's batch dimension (gridDim.z is at most 65535; kernels loop over the rest).
inline unsigned grid_z(int64_t batch) { return static_cast<unsigned>(batch < 65535 ? batch : 65535); }

}  // namespace ember::gemm::dev
