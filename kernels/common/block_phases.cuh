// One launch in two phases, for work whose second part needs every block of the first part done
// (a grid-wide dependency) without a second kernel or a cooperative launch (Note [two-phase
// launch]); and the simpler last-block form, where whichever block of a group finishes last does
// the group's final step (last_block_to_arrive). The counters are a stream's tickets
// (cuda::stream_tickets, core/cuda/runtime.h).
#pragma once

#include "core/cuda/kernel.cuh"

namespace ember::cuda {

// Note [two-phase launch]: a grid of P + Q blocks where each of the Q needs all of the P done. A
// block must not wait for a block that may never run: the hardware starts blocks as others leave,
// in no promised order, so a waiting block could hold the SM a first-phase block needs. So a block
// does not take its part from blockIdx but from a ticket it draws when it starts (its place in
// start order, begin_phase_block): places 0..P-1 are the first phase, P.. the second. A block that
// draws place P + j has started after every first-phase block drew its place, so each of those is
// running or done, and waiting for them always ends (the same argument as a single-pass scan's
// look-back). A first-phase block counts itself done once its writes are fenced
// (end_phase_block); a second-phase block waits for the count and fences after. The last block to
// leave puts the three counters back to 0, as every user of a stream's tickets must (Note [stream
// tickets]). The grid is 1-D: gridDim.x = P + Q.
// The simulator runs a started block to its end on one host thread, so the same argument holds
// there with any number of threads.
inline constexpr int kPhaseCounters = 3;  // start order, first-phase blocks done, blocks left

// A two-phase launch's grid: 1-D, `first` blocks of the first phase, then the second's. Each
// phase's blocks are numbered from 0 and laid out as a 2-D grid `width` blocks wide (x = i %
// width, y = i / width), the blockIdx a launch of that phase alone would give them.
struct TwoPhaseGrid {
  unsigned* tickets;  // the launch's stream's (cuda::stream_tickets), kPhaseCounters of them
  unsigned first;
  unsigned width;
};

// Which part a block takes: its phase and its (x, y) in that phase's grid.
struct PhaseBlock {
  bool first;
  int x, y;
};

// Every thread of the block calls this first: the block draws its place in start order, and a
// second-phase block waits for the whole first phase, whose writes it then sees.
__device__ __forceinline__ PhaseBlock begin_phase_block(const TwoPhaseGrid& g) {
  EMBER_SHARED(unsigned, place);
  if (threadIdx.x == 0 && threadIdx.y == 0) {
    place = atomicAdd(&g.tickets[0], 1u);
    if (place >= gridDim.x) __trap();  // the counters were not at rest: a fault, not a wait that never ends
  }
  __syncthreads();
  const unsigned at = place;
  const bool first = at < g.first;
  const unsigned i = first ? at : at - g.first;
  if (!first && threadIdx.x == 0 && threadIdx.y == 0) {
    while (*static_cast<const volatile unsigned*>(&g.tickets[1]) < g.first) {
#if !EMBER_CUDA_SIM
      __nanosleep(128);  // fewer polls of the one L2 line the first phase counts on
#endif
    }
    __threadfence();
  }
  __syncthreads();
  return {first, static_cast<int>(i % g.width), static_cast<int>(i / g.width)};
}

// Every thread of the block calls this last: a first-phase block's writes reach every block before
// it is counted done, and the last block out puts the counters back to 0.
__device__ __forceinline__ void end_phase_block(const TwoPhaseGrid& g, const PhaseBlock& b) {
  __threadfence();
  __syncthreads();
  if (threadIdx.x != 0 || threadIdx.y != 0) return;
  if (b.first) atomicAdd(&g.tickets[1], 1u);
  if (atomicAdd(&g.tickets[2], 1u) == gridDim.x - 1) {
    g.tickets[0] = 0u;
    g.tickets[1] = 0u;
    g.tickets[2] = 0u;
  }
}

// The last-block form (Note [stream tickets]): every thread of a 1-D block calls this once its
// part of a group's work is written; it returns true in the one block of the group's `count` that
// takes the ticket's last count, which then sees every other block's writes. That block does the
// group's final step and puts *ticket back to 0 (split-K's tiles: Note [split-K] in
// kernels/gemm/gemm_common.cuh; the conv weight gradient's: Note [wgrad split-K in one launch]).
__device__ __forceinline__ bool last_block_to_arrive(unsigned* ticket, unsigned count) {
  EMBER_SHARED(int, last);
  __threadfence();  // this thread's writes reach every block before its block takes the ticket
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(ticket, 1u) == count - 1 ? 1 : 0;
  __syncthreads();
  if (last == 0) return false;
  __threadfence();
  return true;
}

}  // namespace ember::cuda
