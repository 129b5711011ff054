// wgmma (sm_90a): the warpgroup's tensor-core MMA reading both operands from shared memory through
// matrix descriptors, with f32 accumulators in registers, as wrappers with no inline `asm`
// elsewhere, so the simulator runs it (sim/wgmma.cpp; Note [wgmma operand layouts] gives the
// descriptor fields, the K-major and MN-major operand layouts it reads, and which accumulator is which). A
// warpgroup is 128 threads (4 warps) that all issue the same wgmma:
//   ptx::wgmma_fence();                                       // before the first, after writing d
//   ptx::wgmma_m64k16<N>(d, desc_a, desc_b, true, bf16);       // d += A (64 x 16) B^T (N x 16)
// wgmma_m64k16<N, TA, TB>: TA / TB 1 reads A / B MN-major (m or n contiguous: the ISA's transposed
// operands) instead of K-major. wgmma_m64k8_tf32<N>(d, desc_a, desc_b, scale_d): the same for f32
// operands read as tf32 (64 x 8 and N x 8, K-major only; the low 13 mantissa bits are ignored).
//   ptx::wgmma_commit_group();
//   ptx::wgmma_wait_group<0>();                               // then d may be read
// The nvcc build emits the instructions only for the arch-specific target sm_90a
// (__CUDA_ARCH_FEAT_SM90_ALL); for plain sm_90 each call traps, and wgmma_available() says so.
// Operand bytes written by threads need fence_proxy_async_shared() before the wgmma reads them.
// N is 8, 16, 32, 64, 128 or 256 here. setmaxnreg_inc<R>() / setmaxnreg_dec<R>() move registers
// between warpgroups (a producer gives its registers to the consumers; sm_90a too).
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
template <int N, int TA = 0, int TB = 0>
__device__ inline void wgmma_m64k16(float (&d)[N / 2], uint64_t desc_a, uint64_t desc_b, bool scale_d, bool bf16,
                                    MbarLocation loc = MbarLocation::current()) {
  ::ember::sim::wgmma(d, N, desc_a, desc_b, scale_d,
                      bf16 ? ::ember::sim::WgmmaType::bf16 : ::ember::sim::WgmmaType::f16, TA != 0, TB != 0, loc);
}
template <int N>
__device__ inline void wgmma_m64k8_tf32(float (&d)[N / 2], uint64_t desc_a, uint64_t desc_b, bool scale_d,
                                        MbarLocation loc = MbarLocation::current()) {
  ::ember::sim::wgmma(d, N, desc_a, desc_b, scale_d, ::ember::sim::WgmmaType::tf32, false, false, loc);
}
template <int R>
__device__ inline void setmaxnreg_inc(MbarLocation loc = MbarLocation::current()) {
  ::ember::sim::setmaxnreg(R, true, loc);
}
template <int R>
__device__ inline void setmaxnreg_dec(MbarLocation loc = MbarLocation::current()) {
  ::ember::sim::setmaxnreg(R, false, loc);
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
// and scale_d (a predicate: 0 replaces d, 1 accumulates), scale-a and scale-b 1, and the
// transposes TA and TB (immediates: 1 reads that operand MN-major).
#define EMBER_WGMMA_N8(TYPES, TRANS)                   \
  asm volatile(                                        \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"      \
      "wgmma.mma_async.sync.aligned.m64n8" TYPES       \
      " {"                                             \
      "%0, %1, %2, %3"                                 \
      "}, %4, %5, p, 1, 1" TRANS ";\n}\n"              \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]) \
      : "l"(desc_a), "l"(desc_b), "r"(scale_d ? 1 : 0), "n"(TA), "n"(TB))
#define EMBER_WGMMA_N16(TYPES, TRANS)                                                                  \
  asm volatile(                                                                                        \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"                                                     \
      "wgmma.mma_async.sync.aligned.m64n16" TYPES                                                      \
      " {"                                                                                             \
      "%0, %1, %2, %3, %4, %5, %6, %7"                                                                 \
      "}, %8, %9, p, 1, 1" TRANS ";\n}\n"                                                              \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]) \
      : "l"(desc_a), "l"(desc_b), "r"(scale_d ? 1 : 0), "n"(TA), "n"(TB))
#define EMBER_WGMMA_N32(TYPES, TRANS)                                                                               \
  asm volatile(                                                                                                     \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"                                                                  \
      "wgmma.mma_async.sync.aligned.m64n32" TYPES                                                                   \
      " {"                                                                                                          \
      "%0, %1, %2, %3, %4, %5, %6, %7, "                                                                            \
      "%8, %9, %10, %11, %12, %13, %14, %15"                                                                        \
      "}, %16, %17, p, 1, 1" TRANS ";\n}\n"                                                                         \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), \
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])                    \
      : "l"(desc_a), "l"(desc_b), "r"(scale_d ? 1 : 0), "n"(TA), "n"(TB))
#define EMBER_WGMMA_N64(TYPES, TRANS)                                                                               \
  asm volatile(                                                                                                     \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                                                  \
      "wgmma.mma_async.sync.aligned.m64n64" TYPES                                                                   \
      " {"                                                                                                          \
      "%0, %1, %2, %3, %4, %5, %6, %7, "                                                                            \
      "%8, %9, %10, %11, %12, %13, %14, %15, "                                                                      \
      "%16, %17, %18, %19, %20, %21, %22, %23, "                                                                    \
      "%24, %25, %26, %27, %28, %29, %30, %31"                                                                      \
      "}, %32, %33, p, 1, 1" TRANS ";\n}\n"                                                                         \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), \
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),      \
        "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),     \
        "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])                   \
      : "l"(desc_a), "l"(desc_b), "r"(scale_d ? 1 : 0), "n"(TA), "n"(TB))
#define EMBER_WGMMA_N128(TYPES, TRANS)                                                                              \
  asm volatile(                                                                                                     \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                                                  \
      "wgmma.mma_async.sync.aligned.m64n128" TYPES                                                                  \
      " {"                                                                                                          \
      "%0, %1, %2, %3, %4, %5, %6, %7, "                                                                            \
      "%8, %9, %10, %11, %12, %13, %14, %15, "                                                                      \
      "%16, %17, %18, %19, %20, %21, %22, %23, "                                                                    \
      "%24, %25, %26, %27, %28, %29, %30, %31, "                                                                    \
      "%32, %33, %34, %35, %36, %37, %38, %39, "                                                                    \
      "%40, %41, %42, %43, %44, %45, %46, %47, "                                                                    \
      "%48, %49, %50, %51, %52, %53, %54, %55, "                                                                    \
      "%56, %57, %58, %59, %60, %61, %62, %63"                                                                      \
      "}, %64, %65, p, 1, 1" TRANS ";\n}\n"                                                                         \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), \
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),      \
        "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),     \
        "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]),     \
        "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]),     \
        "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),     \
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),     \
        "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])                   \
      : "l"(desc_a), "l"(desc_b), "r"(scale_d ? 1 : 0), "n"(TA), "n"(TB))
#define EMBER_WGMMA_N256(TYPES, TRANS)                                                                               \
  asm volatile(                                                                                                      \
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"                                                                  \
      "wgmma.mma_async.sync.aligned.m64n256" TYPES                                                                   \
      " {"                                                                                                           \
      "%0, %1, %2, %3, %4, %5, %6, %7, "                                                                             \
      "%8, %9, %10, %11, %12, %13, %14, %15, "                                                                       \
      "%16, %17, %18, %19, %20, %21, %22, %23, "                                                                     \
      "%24, %25, %26, %27, %28, %29, %30, %31, "                                                                     \
      "%32, %33, %34, %35, %36, %37, %38, %39, "                                                                     \
      "%40, %41, %42, %43, %44, %45, %46, %47, "                                                                     \
      "%48, %49, %50, %51, %52, %53, %54, %55, "                                                                     \
      "%56, %57, %58, %59, %60, %61, %62, %63, "                                                                     \
      "%64, %65, %66, %67, %68, %69, %70, %71, "                                                                     \
      "%72, %73, %74, %75, %76, %77, %78, %79, "                                                                     \
      "%80, %81, %82, %83, %84, %85, %86, %87, "                                                                     \
      "%88, %89, %90, %91, %92, %93, %94, %95, "                                                                     \
      "%96, %97, %98, %99, %100, %101, %102, %103, "                                                                 \
      "%104, %105, %106, %107, %108, %109, %110, %111, "                                                             \
      "%112, %113, %114, %115, %116, %117, %118, %119, "                                                             \
      "%120, %121, %122, %123, %124, %125, %126, %127"                                                               \
      "}, %128, %129, p, 1, 1" TRANS ";\n}\n"                                                                        \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),  \
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),       \
        "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),      \
        "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]),      \
        "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]),      \
        "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),      \
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),      \
        "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]),      \
        "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]),      \
        "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]),      \
        "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]),      \
        "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]),      \
        "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), \
        "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),            \
        "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]),            \
        "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]),            \
        "+f"(d[126]), "+f"(d[127])                                                                                   \
      : "l"(desc_a), "l"(desc_b), "r"(scale_d ? 1 : 0), "n"(TA), "n"(TB))
template <int N, int TA = 0, int TB = 0>
__device__ __forceinline__ void wgmma_m64k16(float (&d)[N / 2], uint64_t desc_a, uint64_t desc_b, bool scale_d,
                                             bool bf16) {
  static_assert(N == 8 || N == 16 || N == 32 || N == 64 || N == 128 || N == 256,
                "wgmma_m64k16: N is 8, 16, 32, 64, 128 or 256");
  if constexpr (N == 8) {
    if (bf16) EMBER_WGMMA_N8("k16.f32.bf16.bf16", ", %7, %8");
    else EMBER_WGMMA_N8("k16.f32.f16.f16", ", %7, %8");
  } else if constexpr (N == 16) {
    if (bf16) EMBER_WGMMA_N16("k16.f32.bf16.bf16", ", %11, %12");
    else EMBER_WGMMA_N16("k16.f32.f16.f16", ", %11, %12");
  } else if constexpr (N == 32) {
    if (bf16) EMBER_WGMMA_N32("k16.f32.bf16.bf16", ", %19, %20");
    else EMBER_WGMMA_N32("k16.f32.f16.f16", ", %19, %20");
  } else if constexpr (N == 64) {
    if (bf16) EMBER_WGMMA_N64("k16.f32.bf16.bf16", ", %35, %36");
    else EMBER_WGMMA_N64("k16.f32.f16.f16", ", %35, %36");
  } else if constexpr (N == 128) {
    if (bf16) EMBER_WGMMA_N128("k16.f32.bf16.bf16", ", %67, %68");
    else EMBER_WGMMA_N128("k16.f32.f16.f16", ", %67, %68");
  } else {
    if (bf16) EMBER_WGMMA_N256("k16.f32.bf16.bf16", ", %131, %132");
    else EMBER_WGMMA_N256("k16.f32.f16.f16", ", %131, %132");
  }
}
// One m64nNk8 MMA with tf32 operands: both K-major (the instruction has no transpose for tf32),
// no transpose operands in the instruction (the macros' TA and TB inputs go unused).
template <int N>
__device__ __forceinline__ void wgmma_m64k8_tf32(float (&d)[N / 2], uint64_t desc_a, uint64_t desc_b, bool scale_d) {
  static_assert(N == 8 || N == 16 || N == 32 || N == 64 || N == 128 || N == 256,
                "wgmma_m64k8_tf32: N is 8, 16, 32, 64, 128 or 256");
  constexpr int TA = 0, TB = 0;
  if constexpr (N == 8) EMBER_WGMMA_N8("k8.f32.tf32.tf32", "");
  else if constexpr (N == 16) EMBER_WGMMA_N16("k8.f32.tf32.tf32", "");
  else if constexpr (N == 32) EMBER_WGMMA_N32("k8.f32.tf32.tf32", "");
  else if constexpr (N == 64) EMBER_WGMMA_N64("k8.f32.tf32.tf32", "");
  else if constexpr (N == 128) EMBER_WGMMA_N128("k8.f32.tf32.tf32", "");
  else EMBER_WGMMA_N256("k8.f32.tf32.tf32", "");
}
// setmaxnreg: the warpgroup's threads ask for R registers each (inc: at least, blocking until the
// block's pool has them; dec: at most, releasing the rest). Every thread of the warpgroup runs it.
template <int R>
__device__ __forceinline__ void setmaxnreg_inc() {
  static_assert(R >= 24 && R <= 256 && R % 8 == 0, "setmaxnreg: R is a multiple of 8 in [24, 256]");
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(R));
}
template <int R>
__device__ __forceinline__ void setmaxnreg_dec() {
  static_assert(R >= 24 && R <= 256 && R % 8 == 0, "setmaxnreg: R is a multiple of 8 in [24, 256]");
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(R));
}
#undef EMBER_WGMMA_N8
#undef EMBER_WGMMA_N16
#undef EMBER_WGMMA_N32
#undef EMBER_WGMMA_N64
#undef EMBER_WGMMA_N128
#undef EMBER_WGMMA_N256
#else
// Built for plain sm_90: wgmma needs sm_90a.
__device__ __forceinline__ bool wgmma_available() { return false; }
__device__ __forceinline__ void wgmma_fence() { __trap(); }
__device__ __forceinline__ void wgmma_commit_group() { __trap(); }
template <int N>
__device__ __forceinline__ void wgmma_wait_group() {
  __trap();
}
template <int N, int TA = 0, int TB = 0>
__device__ __forceinline__ void wgmma_m64k16(float (&)[N / 2], uint64_t, uint64_t, bool, bool) {
  __trap();
}
template <int N>
__device__ __forceinline__ void wgmma_m64k8_tf32(float (&)[N / 2], uint64_t, uint64_t, bool) {
  __trap();
}
template <int R>
__device__ __forceinline__ void setmaxnreg_inc() {
  __trap();
}
template <int R>
__device__ __forceinline__ void setmaxnreg_dec() {
  __trap();
}
#endif

#endif

}  // namespace ember::ptx
