// The PTX instructions ember's kernels use that have no CUDA C++ spelling: tensor-core mma.sync,
// ldmatrix, cp.async, and set.gt on pairs of halves. Every kernel uses these wrappers and no inline
// `asm` of its own, so the SIMT simulator (-DEMBER_CUDA_SIM=ON) can run each instruction with the
// semantics the PTX ISA documents: mma.sync and ldmatrix as warp collectives over the documented
// fragment layouts, cp.async as a copy that lands when its group is waited for.
// tests/test_ptx_gpu.cu checks every fragment position against a scalar reference.
//
// Fragment layouts (PTX ISA, "Matrix fragments for mma.m16n8k16" and "ldmatrix"), lane = 4 g + t:
//   A (16x16, row-major) a[0] = (g, 2t..2t+1)  a[1] = (g+8, 2t..2t+1)  a[2] = (g, 2t+8..2t+9)  a[3] = (g+8, 2t+8..2t+9)
//   B (16x8, "col")      b0 = (k 2t..2t+1, n g)   b1 = (k 2t+8..2t+9, n g)
//   C/D (16x8, f32)      d[0..1] = (g, 2t..2t+1)  d[2..3] = (g+8, 2t..2t+1)
//   ldmatrix .m8n8 .b16: lanes 8i..8i+7 give the row addresses of matrix i; lane 4g+t receives
//   elements (g, 2t) and (g, 2t+1) of each matrix (with .trans: (2t, g) and (2t+1, g)), the lower
//   column in the low 16 bits.
#pragma once

#include <cstdint>

#include "core/cuda/kernel.cuh"

namespace ember::ptx {

#if EMBER_CUDA_SIM

// The simulator's implementations (sim/ptx.cpp); `loc` names the calling line in reports.
using SourceLocation = std::source_location;
__device__ inline void cp_async_16(void* smem_dst, const void* gmem_src, bool valid,
                                   SourceLocation loc = SourceLocation::current()) {
  ::ember::sim::cp_async(smem_dst, gmem_src, 16, valid ? 16 : 0, loc);
}
__device__ inline void cp_async_commit() { ::ember::sim::cp_async_commit(); }
template <int N>
__device__ inline void cp_async_wait() {
  ::ember::sim::cp_async_wait(N);
}
#define EMBER_SIM_LDMATRIX(name, count, trans)                                                                        \
  __device__ inline void name(uint32_t(&r)[count], const void* row, SourceLocation loc = SourceLocation::current()) { \
    ::ember::sim::ldmatrix(r, count, row, trans, loc);                                                                \
  }
EMBER_SIM_LDMATRIX(ldmatrix_x1, 1, false)
EMBER_SIM_LDMATRIX(ldmatrix_x2, 2, false)
EMBER_SIM_LDMATRIX(ldmatrix_x4, 4, false)
EMBER_SIM_LDMATRIX(ldmatrix_x1_trans, 1, true)
EMBER_SIM_LDMATRIX(ldmatrix_x2_trans, 2, true)
EMBER_SIM_LDMATRIX(ldmatrix_x4_trans, 4, true)
#undef EMBER_SIM_LDMATRIX
// d += a b on one m16n8k16 tile, f32 accumulators; bf16 = false: f16 operands.
__device__ inline void mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1, bool bf16,
                                    SourceLocation loc = SourceLocation::current()) {
  ::ember::sim::mma_m16n8k16(d, a, b0, b1, bf16, loc);
}

#else

__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared, asynchronously (cp.async.cg: cached in L2 only); zero-filled, and the
// source not read, when !valid.
__device__ __forceinline__ void cp_async_16(void* smem_dst, const void* gmem_src, bool valid) {
  const int bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared_address(smem_dst)), "l"(gmem_src),
               "r"(bytes)
               : "memory");
}
// Closes the group of cp.async requests issued by this thread since the last commit.
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void ldmatrix_x1(uint32_t (&r)[1], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n"
               : "=r"(r[0])
               : "r"(shared_address(row))
               : "memory");
}
__device__ __forceinline__ void ldmatrix_x2(uint32_t (&r)[2], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(shared_address(row))
               : "memory");
}
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(row))
               : "memory");
}
__device__ __forceinline__ void ldmatrix_x1_trans(uint32_t (&r)[1], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\n"
               : "=r"(r[0])
               : "r"(shared_address(row))
               : "memory");
}
__device__ __forceinline__ void ldmatrix_x2_trans(uint32_t (&r)[2], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(shared_address(row))
               : "memory");
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(row))
               : "memory");
}

// d += a b on one m16n8k16 tile, f32 accumulators; bf16 = false: f16 operands.
__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1,
                                             bool bf16) {
  if (bf16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

#endif

// 0xffff in each 16-bit half of the result whose element of x (two f16, or two bf16 with bf16 set)
// is > 0, else 0 (a NaN is not > 0): relu_backward's rule on a pair of fragment elements (Note
// [fused mma backward] in kernels/gemm/gemm_mma.cu). One set.gt.u32.{f16x2,bf16x2} on sm_90.
__device__ __forceinline__ uint32_t gt_zero_mask_x2(uint32_t x, bool bf16) {
#if !EMBER_CUDA_SIM && EMBER_DEVICE_ARCH >= 900
  uint32_t r;
  if (bf16) asm("set.gt.u32.bf16x2 %0, %1, %2;\n" : "=r"(r) : "r"(x), "r"(0u));
  else asm("set.gt.u32.f16x2 %0, %1, %2;\n" : "=r"(r) : "r"(x), "r"(0u));
  return r;
#else
  // the same in integer steps (the simulator; bf16x2 compares need sm_90): an element is > 0 when
  // its sign bit is clear and its bits are 1 (the least subnormal) to +inf's, NaNs being above
  const uint32_t inf = bf16 ? 0x7f80u : 0x7c00u;
  uint32_t r = 0;
  for (int h = 0; h < 2; ++h)
    if (((x >> (16 * h)) & 0xffffu) - 1u < inf) r |= 0xffffu << (16 * h);
  return r;
#endif
}

}  // namespace ember::ptx
