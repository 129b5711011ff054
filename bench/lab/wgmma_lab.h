// The Hopper GEMM's lab variants (kernels/gemm/gemm_wgmma_sm90a.cu), which linear's and matmul's
// labs share: one table of their names, configurations and notes (CUDA and simulator builds). The
// library's two configurations are in kernels/gemm/wgmma_variants.h.
#pragma once

#include "kernels/gemm/cuda_gemm.h"
#include "kernels/lab_variants.h"
#include "kernels/registry.h"

namespace ember {

// Registers the Hopper GEMM's lab variants of `op`: Run<C>::call runs the op's call through
// gemm::run_wgmma with configuration C; ok and ok_tf32 say where the kernel applies (f16/bf16, and
// f32 read as TF32).
template <template <gemm::WgmmaConfig> class Run>
void add_wgmma_lab_variants(OpId op, bool (*ok)(const KernelCall&), bool (*ok_tf32)(const KernelCall&)) {
  using C = gemm::WgmmaConfig;
  const auto add = [&](const char* name, KernelFn fn, bool tf32, const char* note) {
    add_lab_variant(op, {.name = name,
                         .device = DeviceType::cuda,
                         .fn = fn,
                         .dtypes = tf32 ? DTypeSet{DType::f32} : DTypeSet{DType::f16, DType::bf16},
                         .flags = tf32 ? kReference | kTf32 : kReference,
                         .supports = tf32 ? ok_tf32 : ok,
                         .note = note});
  };
  add("wgmma_128x256_direct", Run<C{.bn = 256, .epilogue = gemm::WgmmaEpilogue::direct}>::call, false,
      "wgmma_128x256 storing C from the registers, not through TMA");
  add("wgmma_c2_128x128", Run<C{.bn = 128, .cluster = 2}>::call, false,
      "wgmma_128x128 in clusters of 2 blocks over tile pairs along M, B shared by TMA multicast");
  add("wgmma_c2_128x256", Run<C{.bn = 256, .cluster = 2}>::call, false,
      "wgmma_128x256 in clusters of 2 blocks over tile pairs along M, B shared by TMA multicast");
  add("wgmma_tf32_128x128", Run<C{.bn = 128, .tf32 = true}>::call, true,
      "f32 read as TF32 (A row-major, B transposed): wgmma m64n128k8.tf32, 128x128x32, persistent");
  add("wgmma_tf32_128x256", Run<C{.bn = 256, .tf32 = true}>::call, true,
      "f32 read as TF32 (A row-major, B transposed): wgmma m64n256k8.tf32, 128x256x32, persistent");
}

}  // namespace ember
