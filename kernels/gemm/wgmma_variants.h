// The Hopper GEMM's library variants (kernels/gemm/gemm_wgmma_sm90a.cu), which linear and matmul
// register alike: its two tile widths with the TMA-store epilogue, f16/bf16. Its other
// configurations (registers' epilogue, clusters, TF32) are lab variants (bench/lab/wgmma_lab.h).
//
// They are flagged kSimOnly: the kernel has run only in the simulator, so it is never a default,
// and the autotuner times it only where it agrees with the default variant on the call (Note
// [simulator-only candidates] in kernels/autotune.cpp). Once a GPU run records it in bench/results/,
// the flag goes and it stays where it wins (Note [library rule] in bench/lab/library_rule.h).
#pragma once

#include "kernels/gemm/cuda_gemm.h"
#include "kernels/registry.h"

namespace ember {

// Adds wgmma_128x128 and wgmma_128x256 to `info`: Run<C>::call runs the op's call through
// gemm::run_wgmma with configuration C; `ok` says where the kernel takes the call.
template <template <gemm::WgmmaConfig> class Run>
void add_wgmma_variants(OpInfo& info, bool (*ok)(const KernelCall&)) {
  using C = gemm::WgmmaConfig;
  const auto add = [&](const char* name, KernelFn fn, const char* note) {
    info.add_variant({.name = name,
                      .device = DeviceType::cuda,
                      .fn = fn,
                      .dtypes = DTypeSet{DType::f16, DType::bf16},
                      .flags = kSimOnly,
                      .supports = ok,
                      .note = note});
  };
  add("wgmma_128x128", Run<C{.bn = 128}>::call,
      "Hopper: TMA + 4-stage mbarrier ring + wgmma m64n128k16, 128x128x64, persistent, TMA stores");
  add("wgmma_128x256", Run<C{.bn = 256}>::call,
      "Hopper: TMA + 4-stage mbarrier ring + wgmma m64n256k16, 128x256x64, persistent, TMA stores");
}

}  // namespace ember
