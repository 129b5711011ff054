// linear's CUDA oracle, "naive": one thread per output with the epilogue (bias, activation,
// one rounding), gemm::run_naive. A lab variant (Note [lab variants] in kernels/lab_variants.h):
// registered only where the lab is linked. The kernel itself stays in kernels/gemm/cuda_gemm.cu,
// because the cuBLAS variants run it for the empty sums (K = 0) that cuBLAS does not compute.
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

}  // namespace

void register_lab_linear() {
  add_lab_variant(OpId::linear, {.name = "naive",
                                 .device = DeviceType::cuda,
                                 .fn = linear_naive,
                                 .dtypes = kFloatTypes,
                                 .flags = kReference,
                                 .note = "one thread per output with the epilogue (the oracle)"});
}

}  // namespace ember
