// linear on CUDA: y = act(x W^T + b) with the epilogue (bias, relu, exact gelu, rounding) fused
// into the GEMM's output tile. B = W^T is read in place (k-major). Kernels in kernels/gemm/:
//   naive     (kReference) one thread per output (the oracle), a lab variant
//             (bench/lab/linear_lab.cu, Note [lab variants] in kernels/lab_variants.h)
//   small     every float dtype, the tiny and skinny layers (MNIST's at batch 64, the -> 10 heads)
//             in one launch where the tiled kernels would split K over two (gemm_small.cu, Note
//             [small GEMM]); registered first, so it is the default wherever it accepts a call
//   simt      f32/f64 on the CUDA cores (gemm_simt.cu)
//   mma_sync  f16/bf16 tensor cores, sm_80+ (gemm_mma.cu)
//   cublas    (kVendor) bias added by cuBLAS (C prefilled, beta = 1), relu in place after; no gelu;
//             f16/bf16 only without a bias (see cublas_ok)
//   cublaslt  (kVendor) cuBLASLt's BIAS / RELU / RELU_BIAS epilogues; no gelu, because
//             cuBLASLt's GELU epilogue is the tanh approximation and linear promises the erf form
// Backward stays composite (linear.cpp): matmul, sum and relu_backward / gelu_backward.
#include "kernels/functional.h"
#include "kernels/gemm/cuda_gemm.h"
#include "kernels/ops/linear.h"
#include "kernels/registry.h"

namespace ember {

namespace {

using gemm::Layout;

void linear_cuda(const KernelCall& c, Layout L, void (*run)(const gemm::Problem&)) {
  const Tensor &x = c.in[0], &w = c.in[1], &b = c.in[2];
  const int act = static_cast<int>(c.attr<LinearAttrs>().activation);
  gemm::Prepared pr = gemm::prepare_linear(x, w, b, c.out[0], act, L);
  run(pr.p);
}

int act_of(const KernelCall& c) { return static_cast<int>(c.attr<LinearAttrs>().activation); }

// The tiled kernels index with int32 inside a matrix.
bool sizes_fit(const KernelCall& c) {
  constexpr int64_t kMax = (int64_t{1} << 31) - 1;
  const Tensor &x = c.in[0], &w = c.in[1];
  return w.shape()[0] <= kMax && w.shape()[1] <= kMax && (w.shape()[1] == 0 || x.numel() / w.shape()[1] <= kMax);
}
bool simt_ok(const KernelCall& c) { return sizes_fit(c); }
// Decided from the inputs alone (the registry's probes pass empty outputs): contiguous x and w make
// both operands K-major.
bool small_ok(const KernelCall& c) {
  const Tensor &x = c.in[0], &w = c.in[1], &b = c.in[2];
  if (!sizes_fit(c) || !x.is_contiguous() || !w.is_contiguous() || (b.defined() && !b.is_contiguous())) return false;
  gemm::Problem p;
  p.dtype = x.dtype();
  p.N = w.shape()[0];
  p.K = w.shape()[1];
  p.M = 1;
  for (int d = 0; d + 1 < x.dim(); ++d) p.M *= x.shape()[d];
  p.a_rs = p.K;
  p.a_cs = 1;
  p.b_rs = 1;
  p.b_cs = p.K;
  return gemm::small_refusal(p) == nullptr;
}
bool mma_ok(const KernelCall& c) { return sizes_fit(c) && gemm::mma_supported(c.in[0].device().index); }

bool no_gelu(const KernelCall& c) { return act_of(c) != static_cast<int>(Activation::gelu); }

// On an H200 (cuBLAS 13.1) a f16/bf16 GEMM with the bias as C and beta = 1 came out on the grid of
// the output dtype at the magnitude of x W^T, not of the sum: with x W^T ~ -0.5 and b ~ 0.5 the
// result was 0 or 2^-8 where the f32 sum is 0.0017 (docs/gpu-validation.md, first run). cuBLAS
// adds beta * C after a rounding; ember's linear rounds once. So the halves go to cuBLASLt's BIAS
// epilogue (in f32) or ember's kernels when there is a bias.
bool cublas_ok(const KernelCall& c) {
  const DType dt = c.in[0].dtype();
  return no_gelu(c) && (!c.in[2].defined() || dt == DType::f32 || dt == DType::f64);
}

bool lt_ok(const KernelCall& c) {
  const Tensor &x = c.in[0], &w = c.in[1], &b = c.in[2];
  const int64_t in_f = w.shape()[1], out_f = w.shape()[0];
  int64_t rows = 1;
  for (int d = 0; d + 1 < x.dim(); ++d) rows *= x.shape()[d];
  // the bias epilogue reads the bias with vector loads
  const bool bias_aligned = !b.defined() || reinterpret_cast<uintptr_t>(b.data_ptr()) % 16 == 0;
  return bias_aligned && gemm::cublaslt_accepts(rows, out_f, in_f, act_of(c));
}

void linear_small(const KernelCall& c) { linear_cuda(c, Layout::unit_stride, gemm::run_small); }
void linear_simt(const KernelCall& c) { linear_cuda(c, Layout::unit_stride, gemm::run_simt); }
void linear_mma_sync(const KernelCall& c) { linear_cuda(c, Layout::unit_stride, gemm::run_mma); }
void linear_cublas(const KernelCall& c) { linear_cuda(c, Layout::vendor, gemm::run_cublas); }
void linear_cublaslt(const KernelCall& c) { linear_cuda(c, Layout::vendor, gemm::run_cublaslt); }

}  // namespace

void register_cuda_linear(OpInfo& info) {
  info.add_variant({.name = "small",
                    .device = DeviceType::cuda,
                    .fn = linear_small,
                    .dtypes = kFloatTypes,
                    .supports = small_ok,
                    .note = "4x4 output tiles, K across the block, one launch (small layers)"});
  info.add_variant({.name = "simt",
                    .device = DeviceType::cuda,
                    .fn = linear_simt,
                    .dtypes = DTypeSet{DType::f32, DType::f64},
                    .supports = simt_ok,
                    .note = "SIMT tiles with the epilogue fused"});
  info.add_variant({.name = "mma_sync",
                    .device = DeviceType::cuda,
                    .fn = linear_mma_sync,
                    .dtypes = DTypeSet{DType::f16, DType::bf16},
                    .supports = mma_ok,
                    .note = "tensor cores (mma.sync) with the epilogue fused"});
  info.add_variant({.name = "cublas",
                    .device = DeviceType::cuda,
                    .fn = linear_cublas,
                    .dtypes = kFloatTypes,
                    .flags = kVendor,
                    .supports = cublas_ok,
                    .note = "cuBLAS with the bias as C (beta = 1), relu in place; no gelu; halves without bias only"});
  info.add_variant({.name = "cublaslt",
                    .device = DeviceType::cuda,
                    .fn = linear_cublaslt,
                    .dtypes = DTypeSet{DType::f32, DType::f16, DType::bf16},
                    .flags = kVendor,
                    .supports = lt_ok,
                    .note = "cuBLASLt with its BIAS/RELU epilogues; no gelu (its GELU is the tanh form)"});
}

}  // namespace ember
