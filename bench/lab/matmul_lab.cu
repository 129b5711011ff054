// matmul's CUDA oracle, "naive": one thread per output, any strides, acc_t accumulation
// (gemm::run_naive). A lab variant (Note [lab variants] in kernels/lab_variants.h): registered only
// where the lab is linked. The kernel itself stays in kernels/gemm/cuda_gemm.cu, because the
// cuBLAS variants run it for the empty sums (K = 0) that cuBLAS does not compute.
#include "bench/lab/lab.h"

#include "kernels/functional.h"
#include "kernels/gemm/cuda_gemm.h"
#include "kernels/lab_variants.h"
#include "kernels/registry.h"

namespace ember {

namespace {

// The same operand handling as kernels/ops/matmul.cu: any layout read in place, a strided output
// written through a copy.
void matmul_naive(const KernelCall& c) {
  const Tensor &a = c.in[0], &b = c.in[1];
  const Tensor& out = c.out[0];
  Tensor o = out.is_contiguous() ? out : empty(out.shape(), TensorOptions(out.dtype()).device(out.device()));
  gemm::Prepared pr = gemm::prepare_matmul(a, b, o, gemm::Layout::any);
  gemm::run_naive(pr.p);
  if (!o.is_same(out)) {
    Tensor dst = out;
    copy_(dst, o);
  }
}

}  // namespace

void register_lab_matmul() {
  add_lab_variant(OpId::matmul, {.name = "naive",
                                 .device = DeviceType::cuda,
                                 .fn = matmul_naive,
                                 .dtypes = kFloatTypes,
                                 .flags = kReference,
                                 .note = "one thread per output, any strides (the oracle)"});
}

}  // namespace ember
