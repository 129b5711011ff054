// linear's CUDA lab variants (Note [lab variants] in kernels/lab_variants.h), registered only where
// the lab is linked:
//   naive     the oracle: one thread per output with the epilogue (bias, activation, one
//             rounding), gemm::run_naive. The kernel stays in kernels/gemm/cuda_gemm.cu, because
//             the cuBLAS variants run it for the empty sums (K = 0) that cuBLAS does not compute.
//   wgmma_128x128, wgmma_128x256  the Hopper GEMM (kernels/gemm/gemm_wgmma_sm90a.cu, Note
//             [warp-specialised GEMM]) for f16/bf16 with x and W contiguous, where
//             gemm::wgmma_refusal accepts the problem. Here until a GPU run records where it wins (Note [library rule]
//             in bench/lab/library_rule.h); then it moves to kernels/ops/linear.cu, where the autotuner can choose it.
#include "bench/lab/lab.h"

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

// The Hopper kernel takes what gemm::wgmma_refusal accepts of the problem prepare_linear would make
// from contiguous x and W: x [rows, in] K-major, B = W^T read in place K-major.
bool wgmma_ok(const KernelCall& c) {
  const Tensor &x = c.in[0], &w = c.in[1];
  if (!x.is_contiguous() || !w.is_contiguous() || !gemm::wgmma_supported(x.device().index)) return false;
  gemm::Problem p;
  p.dtype = x.dtype();
  p.K = w.shape()[1];
  p.N = w.shape()[0];
  p.M = p.K > 0 ? x.numel() / p.K : 0;
  p.a = x.data_ptr();
  p.a_rs = p.K;
  p.a_cs = 1;
  p.b = w.data_ptr();
  p.b_rs = 1;
  p.b_cs = p.K;
  return gemm::wgmma_refusal(p).empty();
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
                   .fn =
                       [](const KernelCall& c) {
                         linear_with(c, gemm::Layout::unit_stride,
                                     [](const gemm::Problem& p) { gemm::run_wgmma(p, 128); });
                       },
                   .dtypes = DTypeSet{DType::f16, DType::bf16},
                   .flags = kReference,
                   .supports = wgmma_ok,
                   .note = "Hopper: TMA + 4-stage mbarrier ring + wgmma m64n128k16, 128x128x64, persistent"});
  add_lab_variant(OpId::linear,
                  {.name = "wgmma_128x256",
                   .device = DeviceType::cuda,
                   .fn =
                       [](const KernelCall& c) {
                         linear_with(c, gemm::Layout::unit_stride,
                                     [](const gemm::Problem& p) { gemm::run_wgmma(p, 256); });
                       },
                   .dtypes = DTypeSet{DType::f16, DType::bf16},
                   .flags = kReference,
                   .supports = wgmma_ok,
                   .note = "Hopper: TMA + 4-stage mbarrier ring + wgmma m64n256k16, 128x256x64, persistent"});
}

}  // namespace ember
