// matmul's CUDA lab variants (Note [lab variants] in kernels/lab_variants.h), registered only where
// the lab is linked:
//   naive     the oracle: one thread per output, any strides, acc_t accumulation
//             (gemm::run_naive). The kernel stays in kernels/gemm/cuda_gemm.cu, because the cuBLAS
//             variants run it for the empty sums (K = 0) that cuBLAS does not compute.
//   wgmma_128x128, wgmma_128x256  the Hopper GEMM (kernels/gemm/gemm_wgmma_sm90a.cu) for one
//             f16/bf16 product, each operand row-major or a transposed view. Here until a GPU run records where it wins
//             (Note [library rule] in bench/lab/library_rule.h).
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

// What the Hopper kernel needs (gemm::wgmma_refusal): 2-d operands read in place, each with a
// unit stride (K-major or MN-major) and a row pitch of a multiple of 8 elements, aligned bases.
bool wgmma_ok(const KernelCall& c) {
  const Tensor &a = c.in[0], &b = c.in[1];
  if (a.dim() != 2 || b.dim() != 2 || !gemm::wgmma_supported(a.device().index)) return false;
  constexpr int64_t kMax = (int64_t{1} << 31) - 1;
  const int64_t M = a.shape()[0], K = a.shape()[1], N = b.shape()[1];
  const auto aligned = [](const Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0; };
  // rows of `extent` contiguous elements, `pitch` apart (one row: any pitch)
  const auto rows_ok = [](int64_t rows, int64_t pitch, int64_t extent) {
    return rows <= 1 || (pitch % 8 == 0 && pitch >= extent);
  };
  // as prepare_matmul reads them: A K-major when its k stride is 1, B K-major when its n stride is not
  const bool a_ok = a.stride(1) == 1 ? rows_ok(M, a.stride(0), K) : a.stride(0) == 1 && rows_ok(K, a.stride(1), M);
  const bool b_ok = b.stride(1) != 1 ? b.stride(0) == 1 && rows_ok(N, b.stride(1), K) : rows_ok(K, b.stride(0), N);
  return K > 0 && M > 0 && N > 0 && M <= kMax && N <= kMax && K <= kMax && a_ok && b_ok && aligned(a) && aligned(b);
}

// As matmul_naive: a strided output written through a copy.
void matmul_wgmma(const KernelCall& c, int bn) {
  const Tensor& out = c.out[0];
  Tensor o = out.is_contiguous() ? out : empty(out.shape(), TensorOptions(out.dtype()).device(out.device()));
  gemm::Prepared pr = gemm::prepare_matmul(c.in[0], c.in[1], o, gemm::Layout::unit_stride);
  gemm::run_wgmma(pr.p, bn);
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
  add_lab_variant(OpId::matmul,
                  {.name = "wgmma_128x128",
                   .device = DeviceType::cuda,
                   .fn = [](const KernelCall& c) { matmul_wgmma(c, 128); },
                   .dtypes = DTypeSet{DType::f16, DType::bf16},
                   .flags = kReference,
                   .supports = wgmma_ok,
                   .note = "Hopper: TMA + 4-stage mbarrier ring + wgmma m64n128k16, 128x128x64, persistent"});
  add_lab_variant(OpId::matmul,
                  {.name = "wgmma_128x256",
                   .device = DeviceType::cuda,
                   .fn = [](const KernelCall& c) { matmul_wgmma(c, 256); },
                   .dtypes = DTypeSet{DType::f16, DType::bf16},
                   .flags = kReference,
                   .supports = wgmma_ok,
                   .note = "Hopper: TMA + 4-stage mbarrier ring + wgmma m64n256k16, 128x256x64, persistent"});
}

}  // namespace ember
