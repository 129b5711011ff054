// wgmma (sm_90a): the warpgroup's tensor-core MMA reading both operands from shared memory through
// matrix descriptors, with f32 accumulators in registers, as wrappers with no inline `asm`
// elsewhere, so the simulator runs it (sim/wgmma.cpp; Note [wgmma operand layouts] gives the
// descriptor fields, the K-major operand layouts it reads, and which accumulator is which). A
// warpgroup is 128 threads (4 warps) that all issue the same wgmma:
//   ptx::wgmma_fence();                                       // before the first, after writing d
//   ptx::wgmma_m64k16<N>(d, desc_a, desc_b, true, bf16);       // d += A (64 x 16) B^T (N x 16)
//   ptx::wgmma_commit_group();
//   ptx::wgmma_wait_group<0>();                               // then d may be read
// The nvcc build emits the instructions only for the arch-specific target sm_90a
// (__CUDA_ARCH_FEAT_SM90_ALL); for plain sm_90 each call traps, and wgmma_available() says so.
// Operand bytes written by threads need fence_proxy_async_shared() before the wgmma reads them.
// N is 8, 16, 32 or 64 here (more are a matter of listing the registers).
#pragma once

#include <cstdint>

#include "core/cuda/kernel.cuh"
#include "kernels/common/mbarrier.cuh"

namespace ember::ptx {

enum class WgmmaSwizzle : uint64_t { none = 0, b128 = 1, b64 = 2, b32 = 3 };

// A shared-memory matrix descriptor: the operand's shared address, LBO and SBO in bytes (multiples
// of 16), and its swizzle (Note [wgmma operand layouts]).
EMBER_HD inline uint64_t wgmma_desc(uint32_t smem_address, uint32_t lbo, uint32_t sbo, WgmmaSwizzle swizzle) {
  return static_cast<uint64_t>((smem_address >> 4) & 0x3fff) | (static_cast<uint64_t>((lbo >> 4) & 0x3fff) << 16) |
         (static_cast<uint64_t>((sbo >> 4) & 0x3fff) << 32) | (static_cast<uint64_t>(swizzle) << 62);
}

#if EMBER_CUDA_SIM

__device__ inline uint32_t smem_address(const void* p, MbarLocation loc = MbarLocation::current()) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p, loc));
}
__device__ inline bool wgmma_available() { return true; }
__device__ inline void wgmma_fence() { ::ember::sim::wgmma_fence(); }
__device__ inline void wgmma_commit_group() { ::ember::sim::wgmma_commit_group(); }
template <int N>
__device__ inline void wgmma_wait_group() {
  ::ember::sim::wgmma_wait_group(N);
}
template <int N>
__device__ inline void wgmma_m64k16(float (&d)[N / 2], uint64_t desc_a, uint64_t desc_b, bool scale_d, bool bf16,
                                    MbarLocation loc = MbarLocation::current()) {
  ::ember::sim::wgmma(d, N, desc_a, desc_b, scale_d, bf16, loc);
}

#else

__device__ __forceinline__ uint32_t smem_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
__device__ __forceinline__ bool wgmma_available() { return true; }
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit_group() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void wgmma_wait_group() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// One m64nNk16 MMA for operand type T (bf16 or f16): the N / 2 accumulators, then desc_a, desc_b
// and scale_d (a predicate: 0 replaces d, 1 accumulates), scale-a and scale-b 1, no transposes.
#define EMBER_WGMMA_N8(T)                                    \
  asm volatile(                                              \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"            \
      "wgmma.mma_async.sync.aligned.m64n8k16.f32." #T "." #T \
      " {"                                                   \
      "%0, %1, %2, %3"                                       \
      "}, %4, %5, p, 1, 1, 0, 0;\n}\n"                       \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])       \
      : "l"(desc_a), "l"(desc_b), "r"(scale_d ? 1 : 0))
#define EMBER_WGMMA_N16(T)                                                                             \
  asm volatile(                                                                                        \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"                                                     \
      "wgmma.mma_async.sync.aligned.m64n16k16.f32." #T "." #T                                          \
      " {"                                                                                             \
      "%0, %1, %2, %3, %4, %5, %6, %7"                                                                 \
      "}, %8, %9, p, 1, 1, 0, 0;\n}\n"                                                                 \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]) \
      : "l"(desc_a), "l"(desc_b), "r"(scale_d ? 1 : 0))
#define EMBER_WGMMA_N32(T)                                                                                          \
  asm volatile(                                                                                                     \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"                                                                  \
      "wgmma.mma_async.sync.aligned.m64n32k16.f32." #T "." #T                                                       \
      " {"                                                                                                          \
      "%0, %1, %2, %3, %4, %5, %6, %7, "                                                                            \
      "%8, %9, %10, %11, %12, %13, %14, %15"                                                                        \
      "}, %16, %17, p, 1, 1, 0, 0;\n}\n"                                                                            \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), \
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])                    \
      : "l"(desc_a), "l"(desc_b), "r"(scale_d ? 1 : 0))
#define EMBER_WGMMA_N64(T)                                                                                          \
  asm volatile(                                                                                                     \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                                                  \
      "wgmma.mma_async.sync.aligned.m64n64k16.f32." #T "." #T                                                       \
      " {"                                                                                                          \
      "%0, %1, %2, %3, %4, %5, %6, %7, "                                                                            \
      "%8, %9, %10, %11, %12, %13, %14, %15, "                                                                      \
      "%16, %17, %18, %19, %20, %21, %22, %23, "                                                                    \
      "%24, %25, %26, %27, %28, %29, %30, %31"                                                                      \
      "}, %32, %33, p, 1, 1, 0, 0;\n}\n"                                                                            \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), \
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),      \
        "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),     \
        "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])                   \
      : "l"(desc_a), "l"(desc_b), "r"(scale_d ? 1 : 0))
template <int N>
__device__ __forceinline__ void wgmma_m64k16(float (&d)[N / 2], uint64_t desc_a, uint64_t desc_b, bool scale_d,
                                             bool bf16) {
  static_assert(N == 8 || N == 16 || N == 32 || N == 64, "wgmma_m64k16: N is 8, 16, 32 or 64");
  if constexpr (N == 8) {
    if (bf16) EMBER_WGMMA_N8(bf16);
    else EMBER_WGMMA_N8(f16);
  } else if constexpr (N == 16) {
    if (bf16) EMBER_WGMMA_N16(bf16);
    else EMBER_WGMMA_N16(f16);
  } else if constexpr (N == 32) {
    if (bf16) EMBER_WGMMA_N32(bf16);
    else EMBER_WGMMA_N32(f16);
  } else {
    if (bf16) EMBER_WGMMA_N64(bf16);
    else EMBER_WGMMA_N64(f16);
  }
}
#undef EMBER_WGMMA_N8
#undef EMBER_WGMMA_N16
#undef EMBER_WGMMA_N32
#undef EMBER_WGMMA_N64
#else
// Built for plain sm_90: wgmma needs sm_90a.
__device__ __forceinline__ bool wgmma_available() { return false; }
__device__ __forceinline__ void wgmma_fence() { __trap(); }
__device__ __forceinline__ void wgmma_commit_group() { __trap(); }
template <int N>
__device__ __forceinline__ void wgmma_wait_group() {
  __trap();
}
template <int N>
__device__ __forceinline__ void wgmma_m64k16(float (&)[N / 2], uint64_t, uint64_t, bool, bool) {
  __trap();
}
#endif

#endif

}  // namespace ember::ptx
