// linear's CUDA lab variants (Note [lab variants] in kernels/lab_variants.h), registered only where
// the lab is linked:
//   naive     the oracle: one thread per output with the epilogue (bias, activation, one
//             rounding), gemm::run_naive. The kernel stays in kernels/gemm/cuda_gemm.cu, because
//             the cuBLAS variants run it for the empty sums (K = 0) that cuBLAS does not compute.
//   wgmma_128x128, wgmma_128x256  the Hopper GEMM (kernels/gemm/gemm_wgmma_sm90a.cu, Note
//             [warp-specialised GEMM]) for f16/bf16 with x and W contiguous and in_features % 8 ==
//             0. Here until a GPU run records where it wins (Note [library rule] in
//             bench/lab/library_rule.h); then it moves to kernels/ops/linear.cu, where the
//             autotuner can choose it.
#include "bench/lab/lab.h"

#include "kernels/gemm/cuda_gemm.h"
#include "kernels/ops/linear.h"
#include "kernels/lab_variants.h"
#include "kernels/registry.h"

namespace ember {

namespace {

void linear_naive(const KernelCall& c) {
  const Tensor &x = c.in[0], &w = c.in[1], &b = c.in[2];
  const int act = static_cast<int>(c.attr<LinearAttrs>().activation);
  gemm::Prepared pr = gemm::prepare_linear(x, w, b, c.out[0], act, gemm::Layout::any);
  gemm::run_naive(pr.p);
}

// What the Hopper kernel needs (gemm::wgmma_refusal on the problem prepare_linear makes): x and W
// contiguous, so that both are read in place K-major, rows of a multiple of 16 bytes, aligned bases.
bool wgmma_ok(const KernelCall& c) {
  const Tensor &x = c.in[0], &w = c.in[1];
  constexpr int64_t kMax = (int64_t{1} << 31) - 1;
  const int64_t in_f = w.shape()[1], out_f = w.shape()[0];
  const auto aligned = [](const Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0; };
  return gemm::wgmma_supported(x.device().index) && x.is_contiguous() && w.is_contiguous() && in_f > 0 &&
         in_f % 8 == 0 && out_f <= kMax && x.numel() / in_f <= kMax && aligned(x) && aligned(w);
}

void linear_wgmma(const KernelCall& c, int bn) {
  const Tensor &x = c.in[0], &w = c.in[1], &b = c.in[2];
  const int act = static_cast<int>(c.attr<LinearAttrs>().activation);
  gemm::Prepared pr = gemm::prepare_linear(x, w, b, c.out[0], act, gemm::Layout::unit_stride);
  gemm::run_wgmma(pr.p, bn);
}

}  // namespace

void register_lab_linear() {
  add_lab_variant(OpId::linear, {.name = "naive",
                                 .device = DeviceType::cuda,
                                 .fn = linear_naive,
                                 .dtypes = kFloatTypes,
                                 .flags = kReference,
                                 .note = "one thread per output with the epilogue (the oracle)"});
  add_lab_variant(OpId::linear,
                  {.name = "wgmma_128x128",
                   .device = DeviceType::cuda,
                   .fn = [](const KernelCall& c) { linear_wgmma(c, 128); },
                   .dtypes = DTypeSet{DType::f16, DType::bf16},
                   .flags = kReference,
                   .supports = wgmma_ok,
                   .note = "Hopper: TMA + 4-stage mbarrier ring + wgmma m64n128k16, 128x128x64, persistent"});
  add_lab_variant(OpId::linear,
                  {.name = "wgmma_128x256",
                   .device = DeviceType::cuda,
                   .fn = [](const KernelCall& c) { linear_wgmma(c, 256); },
                   .dtypes = DTypeSet{DType::f16, DType::bf16},
                   .flags = kReference,
                   .supports = wgmma_ok,
                   .note = "Hopper: TMA + 4-stage mbarrier ring + wgmma m64n256k16, 128x256x64, persistent"});
}

}  // namespace ember
