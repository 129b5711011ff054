// linear's CUDA lab variants (Note [lab variants] in kernels/lab_variants.h), registered only where
// the lab is linked:
//   naive     the oracle: one thread per output with the epilogue (bias, activation, one
//             rounding), gemm::run_naive. The kernel stays in kernels/gemm/cuda_gemm.cu, because
//             the cuBLAS variants run it for the empty sums (K = 0) that cuBLAS does not compute.
//   wgmma_128x256_direct  the Hopper GEMM (kernels/gemm/gemm_wgmma_sm90a.cu, Note
//             [warp-specialised GEMM]) storing C from the registers rather than through TMA as
//             the library's wgmma_128x256 does (kernels/gemm/wgmma_variants.h), so a GPU run times
//             both epilogues.
//   wgmma_c2_128x128, wgmma_c2_128x256  the same in clusters of 2 blocks sharing B by TMA multicast
//             (Note [multicast GEMM]). The table of all of them: bench/lab/wgmma_lab.h.
//   wgmma_tf32_128x128, wgmma_tf32_128x256  f32 read as TF32 by the same kernel (Note [TF32 through
//             wgmma]): asked for by name only, as PyTorch's allow_tf32; f32 stays exact elsewhere.
//             Here until a GPU run records where they win (Note [library rule] in
//             bench/lab/library_rule.h); then they move to kernels/ops/linear.cu.
#include "bench/lab/lab.h"
#include "bench/lab/wgmma_lab.h"

#include "kernels/gemm/cuda_gemm.h"
#include "kernels/ops/linear.h"
#include "kernels/lab_variants.h"
#include "kernels/registry.h"

namespace ember {

namespace {

// linear through a GEMM of kernels/gemm/ on the problem prepare_linear makes.
void linear_with(const KernelCall& c, gemm::Layout layout, void (*run)(const gemm::Problem&)) {
  const Tensor &x = c.in[0], &w = c.in[1], &b = c.in[2];
  const int act = static_cast<int>(c.attr<LinearAttrs>().activation);
  gemm::Prepared pr = gemm::prepare_linear(x, w, b, c.out[0], act, layout);
  run(pr.p);
}

void linear_naive(const KernelCall& c) { linear_with(c, gemm::Layout::any, gemm::run_naive); }

template <bool TF32>
bool wgmma_ok(const KernelCall& c) {
  return gemm::wgmma_takes_linear(c.in[0], c.in[1], TF32);
}

template <gemm::WgmmaConfig C>
struct LinearWgmma {
  static void call(const KernelCall& c) {
    linear_with(c, gemm::Layout::unit_stride, [](const gemm::Problem& p) { gemm::run_wgmma(p, C); });
  }
};

}  // namespace

void register_lab_linear() {
  add_lab_variant(OpId::linear, {.name = "naive",
                                 .device = DeviceType::cuda,
                                 .fn = linear_naive,
                                 .dtypes = kFloatTypes,
                                 .flags = kReference,
                                 .note = "one thread per output with the epilogue (the oracle)"});
  add_wgmma_lab_variants<LinearWgmma>(OpId::linear, wgmma_ok<false>, wgmma_ok<true>);
}

}  // namespace ember
