// matmul's CUDA lab variants (Note [lab variants] in kernels/lab_variants.h), registered only where
// the lab is linked:
//   naive     the oracle: one thread per output, any strides, acc_t accumulation
//             (gemm::run_naive). The kernel stays in kernels/gemm/cuda_gemm.cu, because the cuBLAS
//             variants run it for the empty sums (K = 0) that cuBLAS does not compute.
//   wgmma_128x256_direct  the Hopper GEMM (kernels/gemm/gemm_wgmma_sm90a.cu) storing C from the
//             registers rather than through TMA as the library's wgmma_128x256 does
//             (kernels/gemm/wgmma_variants.h), so a GPU run times both epilogues.
//   wgmma_c2_128x128, wgmma_c2_128x256  the same in clusters of 2 blocks sharing B by TMA multicast
//             (Note [multicast GEMM]). The table of all of them: bench/lab/wgmma_lab.h.
//   wgmma_tf32_128x128, wgmma_tf32_128x256  f32 read as TF32 (Note [TF32 through wgmma]), A
//             row-major and B a transposed view; asked for by name only, as PyTorch's allow_tf32.
//   cublas_tf32  cuBLAS with CUBLAS_COMPUTE_32F_FAST_TF32: the TF32 rows' vendor peer (not kVendor,
//             so the exact f32 rows keep exact cuBLAS as theirs).
//             Here until a GPU run records where they win (Note [library rule] in
//             bench/lab/library_rule.h).
#include "bench/lab/lab.h"
#include "bench/lab/wgmma_lab.h"

#include "kernels/functional.h"
#include "kernels/gemm/cuda_gemm.h"
#include "kernels/lab_variants.h"
#include "kernels/registry.h"

namespace ember {

namespace {

// matmul through a GEMM of kernels/gemm/, with the operand handling of kernels/ops/matmul.cu: the
// layouts `layout` allows read in place, a strided output written through a copy.
void matmul_with(const KernelCall& c, gemm::Layout layout, void (*run)(const gemm::Problem&)) {
  const Tensor &a = c.in[0], &b = c.in[1];
  const Tensor& out = c.out[0];
  Tensor o = out.is_contiguous() ? out : empty(out.shape(), TensorOptions(out.dtype()).device(out.device()));
  gemm::Prepared pr = gemm::prepare_matmul(a, b, o, layout);
  run(pr.p);
  if (!o.is_same(out)) {
    Tensor dst = out;
    copy_(dst, o);
  }
}

void matmul_naive(const KernelCall& c) { matmul_with(c, gemm::Layout::any, gemm::run_naive); }

template <bool TF32>
bool wgmma_ok(const KernelCall& c) {
  return gemm::wgmma_takes_matmul(c.in[0], c.in[1], TF32);
}

template <gemm::WgmmaConfig C>
struct MatmulWgmma {
  static void call(const KernelCall& c) {
    matmul_with(c, gemm::Layout::unit_stride, [](const gemm::Problem& p) { gemm::run_wgmma(p, C); });
  }
};

}  // namespace

void register_lab_matmul() {
  add_lab_variant(OpId::matmul, {.name = "naive",
                                 .device = DeviceType::cuda,
                                 .fn = matmul_naive,
                                 .dtypes = kFloatTypes,
                                 .flags = kReference,
                                 .note = "one thread per output, any strides (the oracle)"});
  add_wgmma_lab_variants<MatmulWgmma>(OpId::matmul, wgmma_ok<false>, wgmma_ok<true>);
  // its peer: cuBLAS reading f32 as TF32 (the exact f32 of ops' cublas variant is no fair ratio)
  add_lab_variant(OpId::matmul,
                  {.name = "cublas_tf32",
                   .device = DeviceType::cuda,
                   .fn = [](const KernelCall& c) { matmul_with(c, gemm::Layout::vendor, gemm::run_cublas_tf32); },
                   .dtypes = DTypeSet{DType::f32},
                   .flags = kReference | kTf32,
                   .note = "cublasGemmStridedBatchedEx with CUBLAS_COMPUTE_32F_FAST_TF32 (the TF32 rows' peer)"});
}

}  // namespace ember
