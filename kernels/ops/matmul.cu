// matmul on CUDA. The kernels live in kernels/gemm/ (cuda_gemm.h lists them; their napkin math is
// in docs/perf.md):
//   naive     (kReference) one thread per output, any strides: the kernel-level oracle, a lab
//             variant (bench/lab/matmul_lab.cu, Note [lab variants] in kernels/lab_variants.h)
//   outer     every float dtype, the short reductions of a small layer's backward (dz^T x, dz W)
//             in one launch: a thread per column of C, 4 rows, K in order; B row-major, any A
//             (gemm_small.cu, Note [outer-product GEMM]); registered first, so it is the default
//             wherever it accepts a call
//   simt      f32/f64 on the CUDA cores: 128x128x8 (f32) / 64x64x8 (f64) block tiles, 8x8 / 4x4 per
//             thread, double-buffered shared memory, 16-byte loads where aligned (gemm_simt.cu)
//   mma_sync  f16/bf16 tensor cores (sm_80+): mma.sync m16n8k16, ldmatrix from swizzled shared
//             memory, 3-stage cp.async pipeline, 128x128x64 tiles (gemm_mma.cu)
//   mma_cluster  (kSimOnly) f16/bf16 on sm_90: mma_sync's warps on 64x64 tiles, K split over a
//             thread-block cluster, the partials summed in distributed shared memory (gemm_mma.cu,
//             Note [cluster split-K]); run only in the simulator so far: an autotune candidate
//   wgmma_128x128, wgmma_128x256  (kSimOnly) f16/bf16 on Hopper: TMA, an mbarrier ring, wgmma,
//             warp-specialised and persistent (gemm_wgmma_sm90a.cu) for one 2-d product read in
//             place; run only in the simulator so far, so an autotune candidate and never a
//             default (kernels/gemm/wgmma_variants.h)
//   cublas    (kVendor) cublasGemmStridedBatchedEx, FP32 compute without TF32 (gemm_vendor.cu)
//   cublaslt  (kVendor) cublasLtMatmul (f32/f16/bf16; M, N, K > 1 as PyTorch requires for it)
// Operands that are row-major or transposed views are read in place; other layouts are copied
// with contiguous() first. Batch dims broadcast as on the CPU.
#include "kernels/functional.h"
#include "kernels/gemm/cuda_gemm.h"
#include "kernels/gemm/wgmma_variants.h"
#include "kernels/registry.h"

namespace ember {

namespace {

using gemm::Layout;

void matmul_cuda(const KernelCall& c, Layout L, void (*run)(const gemm::Problem&)) {
  const Tensor &a = c.in[0], &b = c.in[1];
  const Tensor& out = c.out[0];
  // the kernels write C with unit column stride: a strided output (call_into) goes through a copy
  Tensor o = out.is_contiguous() ? out : empty(out.shape(), TensorOptions(out.dtype()).device(out.device()));
  gemm::Prepared pr = gemm::prepare_matmul(a, b, o, L);
  run(pr.p);
  if (!o.is_same(out)) {
    Tensor dst = out;
    copy_(dst, o);
  }
}

// The tiled kernels index with int32 inside a matrix.
bool sizes_fit(const KernelCall& c) {
  const Tensor &a = c.in[0], &b = c.in[1];
  constexpr int64_t kMax = (int64_t{1} << 31) - 1;
  return a.shape()[a.dim() - 2] <= kMax && a.shape()[a.dim() - 1] <= kMax && b.shape()[b.dim() - 1] <= kMax;
}
bool simt_ok(const KernelCall& c) { return sizes_fit(c); }
// Decided from the inputs alone (the registry's probes pass empty outputs): two matrices, B
// row-major (read in place by prepare_matmul, so the kernel sees a unit column stride).
bool outer_ok(const KernelCall& c) {
  const Tensor &a = c.in[0], &b = c.in[1];
  if (a.dim() != 2 || b.dim() != 2 || !sizes_fit(c) || b.stride(1) != 1) return false;
  gemm::Problem p;
  p.dtype = a.dtype();
  p.M = a.shape()[0];
  p.K = a.shape()[1];
  p.N = b.shape()[1];
  p.b_rs = b.stride(0);
  p.b_cs = 1;
  return gemm::outer_refusal(p) == nullptr;
}
bool mma_ok(const KernelCall& c) { return sizes_fit(c) && gemm::mma_supported(c.in[0].device().index); }
bool mma_cluster_ok(const KernelCall& c) { return sizes_fit(c) && gemm::mma_cluster_supported(c.in[0].device().index); }

bool lt_ok(const KernelCall& c) {
  const Tensor &a = c.in[0], &b = c.in[1];
  return gemm::cublaslt_accepts(a.shape()[a.dim() - 2], b.shape()[b.dim() - 1], a.shape()[a.dim() - 1], 0);
}

void matmul_outer(const KernelCall& c) { matmul_cuda(c, Layout::unit_stride, gemm::run_outer); }
void matmul_simt(const KernelCall& c) { matmul_cuda(c, Layout::unit_stride, gemm::run_simt); }
void matmul_mma_sync(const KernelCall& c) { matmul_cuda(c, Layout::unit_stride, gemm::run_mma); }
void matmul_mma_cluster(const KernelCall& c) { matmul_cuda(c, Layout::unit_stride, gemm::run_mma_cluster); }
void matmul_cublas(const KernelCall& c) { matmul_cuda(c, Layout::vendor, gemm::run_cublas); }
void matmul_cublaslt(const KernelCall& c) { matmul_cuda(c, Layout::vendor, gemm::run_cublaslt); }

bool wgmma_ok(const KernelCall& c) { return gemm::wgmma_takes_matmul(c.in[0], c.in[1], false); }
template <gemm::WgmmaConfig C>
struct MatmulWgmma {
  static void call(const KernelCall& c) {
    matmul_cuda(c, Layout::unit_stride, [](const gemm::Problem& p) { gemm::run_wgmma(p, C); });
  }
};

}  // namespace

void register_cuda_matmul(OpInfo& info) {
  info.add_variant({.name = "outer",
                    .device = DeviceType::cuda,
                    .fn = matmul_outer,
                    .dtypes = kFloatTypes,
                    .supports = outer_ok,
                    .note = "a thread per column of C, 4 rows, K <= 1024 in order (small layers' backward)"});
  info.add_variant({.name = "simt",
                    .device = DeviceType::cuda,
                    .fn = matmul_simt,
                    .dtypes = DTypeSet{DType::f32, DType::f64},
                    .supports = simt_ok,
                    .note = "SIMT 128x128x8 tiles, 8x8 per thread, double-buffered shared memory"});
  info.add_variant({.name = "mma_sync",
                    .device = DeviceType::cuda,
                    .fn = matmul_mma_sync,
                    .dtypes = DTypeSet{DType::f16, DType::bf16},
                    .supports = mma_ok,
                    .note = "tensor cores: mma.sync m16n8k16, ldmatrix, 3-stage cp.async, 128x128x64 tiles"});
  info.add_variant({.name = "mma_cluster",
                    .device = DeviceType::cuda,
                    .fn = matmul_mma_cluster,
                    .dtypes = DTypeSet{DType::f16, DType::bf16},
                    .flags = kSimOnly,
                    .supports = mma_cluster_ok,
                    .note = "mma.sync on 64x64 tiles, K split over a cluster, summed in distributed shared memory"});
  add_wgmma_variants<MatmulWgmma>(info, wgmma_ok);
  info.add_variant({.name = "cublas",
                    .device = DeviceType::cuda,
                    .fn = matmul_cublas,
                    .dtypes = kFloatTypes,
                    .flags = kVendor,
                    .note = "cublasGemmStridedBatchedEx (FP32 compute, no TF32)"});
  info.add_variant({.name = "cublaslt",
                    .device = DeviceType::cuda,
                    .fn = matmul_cublaslt,
                    .dtypes = DTypeSet{DType::f32, DType::f16, DType::bf16},
                    .flags = kVendor,
                    .supports = lt_ok,
                    .note = "cublasLtMatmul (FP32 compute)"});
}

}  // namespace ember
