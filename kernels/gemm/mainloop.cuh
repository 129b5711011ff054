// The main loop of every tiled GEMM kernel in ember: the SIMT and tensor-core GEMMs of matmul and
// linear (gemm_simt.cu, gemm_mma.cu) and the implicit-GEMM convolutions, forward, data gradient
// and weight gradient (kernels/ops/conv2d_igemm.cu). Each kernel brings an operand iterator; the
// pipeline over k tiles and the multiply of one tile are written here, once.
//
// Note [gemm main loop]: a GEMM kernel is this loop plus two problem-specific parts: an operand
// iterator ("tiles") that knows where a k tile's elements of A and B are in global memory (a
// strided matrix, an im2col gather over an image, a gather over (n, p, q) for the weight gradient),
// how they reach shared memory (staged through registers, or cp.async) and the shared layout the
// fragments are read back from (padding or swizzle against bank conflicts); and an epilogue. The
// loop keeps kStages k tiles in flight with one __syncthreads per k tile:
//   prologue  fetch tiles 0 .. S-2 into stages 0 .. S-2, committing each
//   tile i    wait until tile i has landed; __syncthreads (tile i is visible to every thread and
//             stage (i - 1) % S, read by the previous multiply, is free); fetch tile i + S - 1 into
//             that stage; multiply stage i % S; commit the fetch
// A register-staged iterator (kStages = 2) holds the fetched tile in registers during the multiply
// and stores it to shared memory at commit, so the global loads' latency hides behind the math; an
// asynchronous one (cp.async) writes shared memory directly, and commit closes the copy group. So
// one bug fix or pipeline change here reaches every GEMM and convolution.
//
// An operand iterator is checked against the concepts below (OperandIterator, and SimtOperands or
// MmaOperands for the multiply) wherever a kernel hands one to mainloop, simt_gemm or mma_gemm:
// a missing or misspelt member fails there, with the concept's name, not deep inside the loop.
#pragma once

#include <cstdint>

#include "core/cuda/kernel.cuh"
#include "kernels/common/ptx.cuh"

namespace ember::gemm::dev {

// What the pipeline asks of every operand iterator (Note [gemm main loop]): kStages k tiles in
// flight; fetch starts reading k tile t for a stage, commit makes it land there (fetched: fetch
// ran), wait returns when the oldest stage not yet multiplied has landed, drain when nothing of
// this thread is in flight any more.
template <class I>
concept OperandIterator = requires(I it, int t, int stage, bool fetched) {
  requires I::kStages >= 2;
  it.fetch(t, stage);
  it.commit(stage, fetched);
  it.wait();
  it.drain();
};

// The SIMT multiply's fragments: column kk of A's tile and row kk of B's, this thread's values.
template <class I, class T, int TM, int TN>
concept SimtOperands = OperandIterator<I> && requires(I it, int stage, int kk, T (&a)[TM], T (&b)[TN]) {
  it.fragments(stage, kk, a, b);
};

// The tensor-core multiply's fragments (mma.sync m16n8k16): k16 step ks of the stage, A as MT
// m16 x k16 tiles of four registers, B as NT8 k16 x n8 tiles of two.
template <class I, int MT, int NT8>
concept MmaOperands = OperandIterator<I> &&
    requires(I it, int stage, int ks, uint32_t (&a)[MT][4], uint32_t (&b)[NT8][2]) {
  it.fragments(stage, ks, a, b);
};

// Runs `multiply(stage)` once per k tile t in [t_begin, t_end), tiles fetched by `tiles`
// (Note [gemm main loop]).
template <OperandIterator Tiles, class Multiply>
__device__ __forceinline__ void mainloop(Tiles& tiles, int t_begin, int t_end, Multiply&& multiply) {
  constexpr int S = Tiles::kStages;
  const int n = t_end - t_begin;
  EMBER_UNROLL
  for (int s = 0; s < S - 1; ++s) {
    if (s < n) tiles.fetch(t_begin + s, s);
    tiles.commit(s, s < n);
  }
  for (int i = 0; i < n; ++i) {
    tiles.wait();
    __syncthreads();
    const int next = i + S - 1;
    const bool fetch = next < n;
    if (fetch) tiles.fetch(t_begin + next, next % S);
    multiply(i % S);
    tiles.commit(next % S, fetch);
  }
  tiles.drain();
}

// Register-staged iterators: nothing is asynchronous, so waiting and draining are no-ops.
struct RegisterStaged {
  static constexpr int kStages = 2;
  __device__ __forceinline__ void wait() {}
  __device__ __forceinline__ void drain() {}
};

// SIMT (CUDA cores): acc = sum over the k tiles of the outer products of the thread's fragments.
template <int BK, class Tiles, class T, int TM, int TN>
requires SimtOperands<Tiles, T, TM, TN> __device__ __forceinline__ void simt_gemm(Tiles& tiles, int t_begin, int t_end,
                                                                                  T (&acc)[TM][TN]) {
  EMBER_UNROLL
  for (int i = 0; i < TM; ++i) {
    EMBER_UNROLL
    for (int j = 0; j < TN; ++j) acc[i][j] = T(0);
  }
  mainloop(tiles, t_begin, t_end, [&](int stage) {
    EMBER_UNROLL
    for (int kk = 0; kk < BK; ++kk) {
      T a[TM], b[TN];
      tiles.fragments(stage, kk, a, b);
      EMBER_UNROLL
      for (int i = 0; i < TM; ++i) {
        EMBER_UNROLL
        for (int j = 0; j < TN; ++j) acc[i][j] = fma(a[i], b[j], acc[i][j]);
      }
    }
  });
}

// Tensor cores: f32 accumulators of an MT x NT8 grid of m16n8 tiles per warp, K16 k16 steps per
// k tile; BF16 picks the mma's input type (else f16). With G groups of warps, the warps of `group`
// take k16 steps [group K16 / G, (group + 1) K16 / G) of each k tile: each group sums its share of
// K, and the caller adds the groups' sums.
template <int K16, bool BF16, int G = 1, class Tiles, int MT, int NT8>
requires MmaOperands<Tiles, MT, NT8> __device__ __forceinline__ void mma_gemm(Tiles& tiles, int t_begin, int t_end,
                                                                              float (&acc)[MT][NT8][4], int group = 0) {
  static_assert(K16 % G == 0, "mma_gemm: the groups split the k16 steps evenly");
  EMBER_UNROLL
  for (int i = 0; i < MT; ++i) {
    EMBER_UNROLL
    for (int j = 0; j < NT8; ++j) {
      EMBER_UNROLL
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;
    }
  }
  mainloop(tiles, t_begin, t_end, [&](int stage) {
    EMBER_UNROLL
    for (int j = 0; j < K16 / G; ++j) {
      const int ks = group * (K16 / G) + j;
      uint32_t a[MT][4], b[NT8][2];
      tiles.fragments(stage, ks, a, b);
      EMBER_UNROLL
      for (int i = 0; i < MT; ++i) {
        EMBER_UNROLL
        for (int j = 0; j < NT8; ++j) ptx::mma_m16n8k16(acc[i][j], a[i], b[j][0], b[j][1], BF16);
      }
    }
  });
}

}  // namespace ember::gemm::dev
