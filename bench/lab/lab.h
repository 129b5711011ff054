// The benchmark lab: kernel variants that exist only to be compared with (the CUDA oracles, and the
// variants that are neither a default nor a recorded winner: Note [library rule] in
// bench/lab/library_rule.h), kept out of the library (Note [lab variants] in
// kernels/lab_variants.h). The tests and the benchmarks link ember_lab and call
// register_lab_variants() at the start of main().
#pragma once

#include "kernels/registry.h"

namespace ember {

// Adds every lab variant to its op through add_lab_variant; a second call does nothing. Call it
// before any op runs. In a build without CUDA there is nothing to add.
void register_lab_variants();

// One per bench/lab/<op>_lab.cu (CUDA and simulator builds).
void register_lab_index();
void register_lab_matmul();
void register_lab_linear();
void register_lab_softmax();
void register_lab_loss();
void register_lab_conv2d();

// The Hopper GEMM's lab variants of one op (linear, matmul; kernels/gemm/gemm_wgmma_sm90a.cu): the
// op's kernels running gemm::run_wgmma at each tile, epilogue, cluster and TF32 choice, and its checks of
// where the kernel applies (f16/bf16, and f32 as TF32). Registered by add_wgmma_lab_variants.
struct WgmmaLabOp {
  OpId op;
  KernelFn tile_128, tile_256, tile_256_direct, cluster_128, cluster_256, tf32_128, tf32_256;
  bool (*ok)(const KernelCall&);
  bool (*ok_tf32)(const KernelCall&);
};
void add_wgmma_lab_variants(const WgmmaLabOp& o);
// Whether the Hopper GEMM takes linear's x W^T for x [.., K] and W [N, K] (linear_lab.cu): both
// contiguous, and what gemm::wgmma_refusal asks of them (f32 only as TF32, when tf32 is set).
bool wgmma_takes_linear(const Tensor& x, const Tensor& w, bool tf32);

}  // namespace ember
