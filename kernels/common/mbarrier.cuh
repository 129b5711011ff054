// mbarriers and bulk asynchronous copies (sm_90): the PTX a Hopper pipeline is built from (a
// producer bringing tiles into a ring of shared-memory stages, consumers waiting for each stage),
// as wrappers with no inline `asm` elsewhere, so the simulator runs them with the semantics the
// PTX ISA documents (sim/mbarrier.cpp; tests/test_mbarrier_gpu.cu checks them on both).
//
// Note [mbarrier phases]: an mbarrier (8 bytes of shared memory, 8-byte aligned) counts the
// arrivals and the transaction bytes of its current phase. mbarrier_init(bar, count) starts phase
// 0 expecting `count` arrivals; each mbarrier_arrive counts one; mbarrier_arrive_expect_tx(bar, n)
// also adds n bytes the phase must receive; a bulk copy naming the barrier subtracts its size once
// its data has landed. When both the pending arrivals and the transaction count are 0, the phase
// completes: the barrier moves to the next phase, expecting `count` arrivals again.
// Waits name a phase by its parity: mbarrier_try_wait_parity(bar, p) is true once the phase of
// parity p has completed, that is while the current phase's parity is not p. So on a new barrier
// (phase 0 running) a wait for parity 1 returns at once. In a ring of stages, consumers wait on a
// stage's "full" barrier with parity 0 on their first pass and flip it on each pass; a producer
// waiting on the stage's "empty" barrier starts at parity 1, so its first pass does not wait.
// A barrier's phase parity is all a wait sees: a waiter more than one phase behind is not told.
#pragma once

#include <cstdint>

#include "core/cuda/kernel.cuh"

#if EMBER_CUDA_SIM
#include "sim/mbarrier_api.h"
#endif

namespace ember::ptx {

#if EMBER_CUDA_SIM

using MbarLocation = std::source_location;
__device__ inline void mbarrier_init(uint64_t* bar, uint32_t count, MbarLocation loc = MbarLocation::current()) {
  ::ember::sim::mbarrier_init(bar, count, loc);
}
// Makes the initialisation visible to the async proxy and the cluster (nothing to do in the simulator).
__device__ inline void fence_mbarrier_init() {}
__device__ inline uint64_t mbarrier_arrive(uint64_t* bar, MbarLocation loc = MbarLocation::current()) {
  return ::ember::sim::mbarrier_arrive(bar, 0, loc);
}
__device__ inline uint64_t mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes,
                                                     MbarLocation loc = MbarLocation::current()) {
  return ::ember::sim::mbarrier_arrive(bar, bytes, loc);
}
__device__ inline void mbarrier_expect_tx(uint64_t* bar, uint32_t bytes, MbarLocation loc = MbarLocation::current()) {
  ::ember::sim::mbarrier_expect_tx(bar, bytes, loc);
}
__device__ inline bool mbarrier_try_wait_parity(uint64_t* bar, uint32_t parity,
                                                MbarLocation loc = MbarLocation::current()) {
  return ::ember::sim::mbarrier_try_wait_parity(bar, parity, loc);
}
// Waits until the phase of parity `parity` of `bar` has completed (Note [mbarrier phases]).
__device__ inline void mbarrier_wait_parity(uint64_t* bar, uint32_t parity,
                                            MbarLocation loc = MbarLocation::current()) {
  while (!mbarrier_try_wait_parity(bar, parity, loc)) {
  }
}
__device__ inline void mbarrier_inval(uint64_t* bar, MbarLocation loc = MbarLocation::current()) {
  ::ember::sim::mbarrier_inval(bar, loc);
}
__device__ inline void bulk_copy_g2s(void* smem_dst, const void* gmem_src, uint32_t bytes, uint64_t* bar,
                                     MbarLocation loc = MbarLocation::current()) {
  ::ember::sim::bulk_copy_g2s(smem_dst, gmem_src, bytes, bar, loc);
}
// Orders this thread's generic-proxy shared-memory accesses before its later async-proxy ones (a
// tensor store reading what the thread wrote needs it: the simulator checks, Note [async proxy]).
__device__ inline void fence_proxy_async_shared() { ::ember::sim::fence_proxy_async(); }

#else

__device__ __forceinline__ uint32_t mbar_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbarrier_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(mbar_address(bar)), "r"(count) : "memory");
}
// Makes the initialisation visible to the async proxy (bulk copies) and the cluster.
__device__ __forceinline__ void fence_mbarrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ uint64_t mbarrier_arrive(uint64_t* bar) {
  uint64_t state;
  asm volatile("mbarrier.arrive.shared::cta.b64 %0, [%1];\n" : "=l"(state) : "r"(mbar_address(bar)) : "memory");
  return state;
}
__device__ __forceinline__ uint64_t mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  uint64_t state;
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 %0, [%1], %2;\n"
               : "=l"(state)
               : "r"(mbar_address(bar)), "r"(bytes)
               : "memory");
  return state;
}
__device__ __forceinline__ void mbarrier_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(mbar_address(bar)), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ bool mbarrier_try_wait_parity(uint64_t* bar, uint32_t parity) {
  uint32_t done;
  asm volatile(
      "{\n"
      "  .reg .pred p;\n"
      "  mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      "  selp.u32 %0, 1, 0, p;\n"
      "}\n"
      : "=r"(done)
      : "r"(mbar_address(bar)), "r"(parity)
      : "memory");
  return done != 0;
}
__device__ __forceinline__ void mbarrier_inval(uint64_t* bar) {
  asm volatile("mbarrier.inval.shared::cta.b64 [%0];\n" ::"r"(mbar_address(bar)) : "memory");
}
// `bytes` (a multiple of 16) from global to shared memory, both 16-byte aligned, by the async proxy;
// when they have landed, `bytes` transactions complete on `bar`.
__device__ __forceinline__ void bulk_copy_g2s(void* smem_dst, const void* gmem_src, uint32_t bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                   mbar_address(smem_dst)),
               "l"(gmem_src), "r"(bytes), "r"(mbar_address(bar))
               : "memory");
}
// Orders this thread's generic-proxy shared-memory accesses before its later async-proxy ones.
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// Waits until the phase of parity `parity` of `bar` has completed (Note [mbarrier phases]).
__device__ __forceinline__ void mbarrier_wait_parity(uint64_t* bar, uint32_t parity) {
  while (!mbarrier_try_wait_parity(bar, parity)) {
  }
}

#endif

}  // namespace ember::ptx
