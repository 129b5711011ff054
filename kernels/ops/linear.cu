// linear on CUDA: y = act(x W^T + b) with the epilogue (bias, relu, exact gelu, rounding) fused
// into the GEMM's output tile. B = W^T is read in place (k-major). Kernels in kernels/gemm/:
//   naive     (kReference) one thread per output (the oracle), a lab variant
//             (bench/lab/linear_lab.cu, Note [lab variants] in kernels/lab_variants.h)
//   small     every float dtype, the tiny and skinny layers (MNIST's at batch 64, the -> 10 heads)
//             in one launch where the tiled kernels would split K over two (gemm_small.cu, Note
//             [small GEMM]); registered first, so it is the default wherever it accepts a call
//   rows      every float dtype, 32 to kMlpMaxWidth outputs, relu or none: the fused MLP's
//             forward kernel with one layer (Note [one-layer MLP] below); the default where
//             `small` refuses ([128..512, 784] -> 128)
//   simt      f32/f64 on the CUDA cores (gemm_simt.cu)
//   mma_sync  f16/bf16 tensor cores, sm_80+ (gemm_mma.cu)
//   mma_cluster  (kSimOnly) f16/bf16 on sm_90: 64x64 tiles, K split over a thread-block cluster
//             and summed in distributed shared memory (Note [cluster split-K] in gemm_mma.cu), for
//             [128..512, 784 or 3136] -> 128; run only in the simulator so far: an autotune candidate
//   wgmma_128x128, wgmma_128x256  (kSimOnly) f16/bf16 on Hopper with x and W contiguous: TMA, an
//             mbarrier ring, wgmma, warp-specialised and persistent (gemm_wgmma_sm90a.cu); run
//             only in the simulator so far, so an autotune candidate and never a default
//             (kernels/gemm/wgmma_variants.h)
//   cublas    (kVendor) bias added by cuBLAS (C prefilled, beta = 1), relu in place after; no gelu;
//             f16/bf16 only without a bias (see cublas_ok)
//   cublaslt  (kVendor) cuBLASLt's BIAS / RELU / RELU_BIAS epilogues; no gelu, because
//             cuBLASLt's GELU epilogue is the tanh approximation and linear promises the erf form
// The backward ops (linear.cpp says what they compute; Note [fused linear backward] below):
//   outer     the mask and, for the weight, the bias gradient fused into the outer-product GEMM
//             (gemm_small.cu): one launch each; registered first, the default where it is taken
//   simt      f32: the same fusion in the SIMT GEMM (gemm_simt.cu, Note [fused simt
//             backward]), one launch each, the default where outer refuses
//   mma       f16/bf16: the same fusion on the tensor cores (gemm_mma.cu, Note [fused mma
//             backward]), one launch each, the default where outer refuses
//   composite relu_backward, matmul and sum (their own defaults), for every other shape
//   cublas    (kVendor) relu_backward, cuBLAS's GEMM and sum: what PyTorch's eager backward runs
#include "kernels/functional.h"
#include "kernels/gemm/cuda_gemm.h"
#include "kernels/gemm/wgmma_variants.h"
#include "kernels/ops/linear.h"
#include "kernels/ops/mlp.h"
#include "kernels/ops/reduce.h"  // ReduceAttrs
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
  p.M = linear_rows(x);
  p.a_rs = p.K;
  p.a_cs = 1;
  p.b_rs = 1;
  p.b_cs = p.K;
  return gemm::small_refusal(p) == nullptr;
}
bool mma_ok(const KernelCall& c) { return sizes_fit(c) && gemm::mma_supported(c.in[0].device().index); }
bool mma_cluster_ok(const KernelCall& c) { return sizes_fit(c) && gemm::mma_cluster_supported(c.in[0].device().index); }

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
  // the bias epilogue reads the bias with vector loads
  const bool bias_aligned = !b.defined() || reinterpret_cast<uintptr_t>(b.data_ptr()) % 16 == 0;
  return bias_aligned && gemm::cublaslt_accepts(linear_rows(x), out_f, in_f, act_of(c));
}

// Note [one-layer MLP]: where `small` refuses a layer of the MNIST models ([128..512, 784] -> 128:
// its 4 x 4 tiles would re-read the operands past their bound), the tiled kernels split K over
// blocks and pay a second launch for the sum. The fused MLP's forward kernel (mlp.cu, Note [fused
// MLP]) with one layer is one launch for any K: a block carries R rows of x through the layer, its
// warps reading each W row once per block, coalesced, and the epilogue (bias, relu, one rounding)
// is linear's. It multiplies on the CUDA cores, R rows by all of K a block, so past kRowsMaxWork
// (rows x K) the math outweighs the tiled kernels' second launch: the time model put the CNN's
// [512, 3136] -> 128 layer at 21.6 us here against 17.8 on the tensor cores in bf16, a tie in f32
// (docs/perf.md, "One launch for the first layer"). Layers narrower than kRowsMinOut (the -> 10
// heads) are `small`'s: it takes every one of them that this would, and here a block's stores
// (R rows of 10) would leave their 32-byte sectors partly filled.
constexpr int64_t kRowsMaxWork = int64_t{1} << 19;
constexpr int64_t kRowsMinOut = 32;

bool rows_ok(const KernelCall& c) {
  const Tensor& w = c.in[1];
  return no_gelu(c) && sizes_fit(c) && w.shape()[0] >= kRowsMinOut && w.shape()[0] <= kMlpMaxWidth &&
         linear_rows(c.in[0]) * w.shape()[1] <= kRowsMaxWork;
}

// The inputs are linear's, already checked and made contiguous by its runner, so the mlp kernel
// runs on them directly (no second pass through the runner).
void linear_rows_fused(const KernelCall& c) {
  const Attrs attrs = MlpAttrs{.layers = 1, .relu_mask = act_of(c) == static_cast<int>(Activation::relu) ? 1 : 0};
  const KernelCall mlp{OpId::mlp, c.in.first(3), c.out.first(1), attrs};
  select_variant(op_info(OpId::mlp), mlp, DeviceType::cuda, "fused").fn(mlp);
}

void linear_small(const KernelCall& c) { linear_cuda(c, Layout::unit_stride, gemm::run_small); }
void linear_simt(const KernelCall& c) { linear_cuda(c, Layout::unit_stride, gemm::run_simt); }
void linear_mma_sync(const KernelCall& c) { linear_cuda(c, Layout::unit_stride, gemm::run_mma); }
void linear_mma_cluster(const KernelCall& c) { linear_cuda(c, Layout::unit_stride, gemm::run_mma_cluster); }
void linear_cublas(const KernelCall& c) { linear_cuda(c, Layout::vendor, gemm::run_cublas); }
void linear_cublaslt(const KernelCall& c) { linear_cuda(c, Layout::vendor, gemm::run_cublaslt); }

bool wgmma_ok(const KernelCall& c) { return gemm::wgmma_takes_linear(c.in[0], c.in[1], false); }
template <gemm::WgmmaConfig C>
struct LinearWgmma {
  static void call(const KernelCall& c) {
    linear_cuda(c, Layout::unit_stride, [](const gemm::Problem& p) { gemm::run_wgmma(p, C); });
  }
};

// ---- linear_backward_input, linear_backward_weight ----

// Note [fused linear backward]: a linear layer's backward was four launches: relu_backward
// (dz = g relu'(z)), dz W, dz^T x, and the sum of dz over the rows for the bias. At the MNIST
// MLP's sizes each is well under a microsecond of math and memory behind a launch of about 4.8 us
// (the time model's fit to the H200, docs/perf.md). Here it is two, each one launch of the
// outer-product kernel (gemm_small.cu, Note [outer-product GEMM]), whose A may have any layout:
//   - linear_backward_input reads g as A and zeroes an element where the saved output y is not > 0
//     as it loads it (one more broadcast load per element of A; dz is never written);
//   - linear_backward_weight reads g transposed in place as A = dz^T, masked the same way, and
//     the blocks of the first column tile also add up each row of A from the loads they make
//     anyway: the bias gradient, in k order (deterministic), written by one thread per row.
// Where the outer-product kernel refuses (a reduction longer than kOuterMaxK, B's re-reads past
// their bound even at 16 rows a thread: the CNN's 3136-wide layer's dW from batch 256, the
// 784-wide one's past batch 512) f32 takes the same fusion in the SIMT GEMM (Note [fused simt
// backward] in gemm_simt.cu), f16 and bf16 in the tensor-core GEMM (Note [fused mma backward] in
// gemm_mma.cu), and f64 the composite variant's four ops.

// The outer-product problem of each op, from the inputs alone (pointers and outputs left unset).
gemm::Problem outer_problem(DType dt, int64_t M, int64_t N, int64_t K, int64_t b_rs) {
  gemm::Problem p;
  p.dtype = dt;
  p.M = M;
  p.N = N;
  p.K = K;
  p.b_rs = b_rs;
  p.b_cs = 1;
  return p;
}
// input: dx [rows, in] = dz [rows, out] W [out, in]
bool input_outer_takes(DType dt, int64_t rows, int64_t in_f, int64_t out_f) {
  return gemm::outer_refusal(outer_problem(dt, rows, in_f, out_f, in_f)) == nullptr;
}
// weight: dW [out, in] = dz^T [out, rows] x [rows, in]; db needs a column of C to ride on
bool weight_outer_takes(DType dt, int64_t rows, int64_t in_f, int64_t out_f) {
  return in_f > 0 && gemm::outer_refusal(outer_problem(dt, out_f, in_f, rows, in_f)) == nullptr;
}
bool input_simt_takes(DType dt, int64_t rows, int64_t in_f, int64_t out_f) {
  return gemm::simt_fused_refusal(outer_problem(dt, rows, in_f, out_f, in_f)) == nullptr;
}
bool weight_simt_takes(DType dt, int64_t rows, int64_t in_f, int64_t out_f) {
  return in_f > 0 && gemm::simt_fused_refusal(outer_problem(dt, out_f, in_f, rows, in_f)) == nullptr;
}
// f16/bf16 (Note [fused mma backward] in gemm_mma.cu): the tensor cores of the device
bool input_mma_takes(DType dt, int64_t rows, int64_t in_f, int64_t out_f, int device) {
  return gemm::mma_fused_refusal(outer_problem(dt, rows, in_f, out_f, in_f)) == nullptr && gemm::mma_supported(device);
}
bool weight_mma_takes(DType dt, int64_t rows, int64_t in_f, int64_t out_f, int device) {
  return in_f > 0 && gemm::mma_fused_refusal(outer_problem(dt, out_f, in_f, rows, in_f)) == nullptr &&
         gemm::mma_supported(device);
}
bool input_mma_ok(const KernelCall& c) {
  const Tensor &g = c.in[0], &w = c.in[2];
  return input_mma_takes(g.dtype(), linear_rows(g), w.shape()[1], w.shape()[0], g.device().index);
}
bool weight_mma_ok(const KernelCall& c) {
  const Tensor &g = c.in[0], &x = c.in[2];
  return weight_mma_takes(g.dtype(), linear_rows(g), x.shape().back(), g.shape().back(), g.device().index);
}
bool input_simt_ok(const KernelCall& c) {
  const Tensor &g = c.in[0], &w = c.in[2];
  return input_simt_takes(g.dtype(), linear_rows(g), w.shape()[1], w.shape()[0]);
}
bool weight_simt_ok(const KernelCall& c) {
  const Tensor &g = c.in[0], &x = c.in[2];
  return weight_simt_takes(g.dtype(), linear_rows(g), x.shape().back(), g.shape().back());
}
bool input_outer_ok(const KernelCall& c) {
  const Tensor &g = c.in[0], &w = c.in[2];
  return input_outer_takes(g.dtype(), linear_rows(g), w.shape()[1], w.shape()[0]);
}
bool weight_outer_ok(const KernelCall& c) {
  const Tensor &g = c.in[0], &x = c.in[2];
  return weight_outer_takes(g.dtype(), linear_rows(g), x.shape().back(), g.shape().back());
}

// run: gemm::run_outer_fused, gemm::run_simt_fused or gemm::run_mma_fused
void input_fused(const KernelCall& c, void (*run)(const gemm::Problem&, const gemm::OuterFusion&)) {
  const Tensor &g = c.in[0], &y = c.in[1], &w = c.in[2];
  const int64_t rows = linear_rows(g);
  gemm::Prepared pr =
      gemm::prepare_matmul(g.view({rows, w.shape()[0]}), w, c.out[0].view({rows, w.shape()[1]}), Layout::unit_stride);
  EMBER_CHECK(pr.p.a == g.data_ptr(), "linear_backward_input: the mask needs g read in place");
  gemm::OuterFusion f;
  if (linear_masks(c)) f.a_mask = y.data_ptr();  // y has g's shape and (contiguous) strides
  run(pr.p, f);
}

void weight_fused(const KernelCall& c, void (*run)(const gemm::Problem&, const gemm::OuterFusion&)) {
  const Tensor &g = c.in[0], &y = c.in[1], &x = c.in[2];
  const int64_t rows = linear_rows(g), out_f = g.shape().back();
  Tensor gt = g.view({rows, out_f}).t();  // A = dz^T, read in place
  gemm::Prepared pr = gemm::prepare_matmul(gt, x.view({rows, x.shape().back()}), c.out[0], Layout::unit_stride);
  EMBER_CHECK(pr.p.a == g.data_ptr(), "linear_backward_weight: the mask needs g read in place");
  gemm::OuterFusion f;
  if (linear_masks(c)) f.a_mask = y.data_ptr();
  f.row_sum = c.out[1].data_ptr();
  run(pr.p, f);
}

void input_outer(const KernelCall& c) { input_fused(c, gemm::run_outer_fused); }
void weight_outer(const KernelCall& c) { weight_fused(c, gemm::run_outer_fused); }
void input_simt(const KernelCall& c) { input_fused(c, gemm::run_simt_fused); }
void weight_simt(const KernelCall& c) { weight_fused(c, gemm::run_simt_fused); }
void input_mma(const KernelCall& c) { input_fused(c, gemm::run_mma_fused); }
void weight_mma(const KernelCall& c) { weight_fused(c, gemm::run_mma_fused); }

void input_cublas(const KernelCall& c) {
  const Tensor& w = c.in[2];
  Tensor dz = linear_dz(c, c.in[0].dtype());
  gemm::Prepared pr = gemm::prepare_matmul(dz, w, c.out[0].view({dz.shape()[0], w.shape()[1]}), Layout::vendor);
  gemm::run_cublas(pr.p);
}

void weight_cublas(const KernelCall& c) {
  const Tensor& x = c.in[2];
  Tensor dz = linear_dz(c, c.in[0].dtype());
  gemm::Prepared pr = gemm::prepare_matmul(dz.t(), x.view({dz.shape()[0], x.shape().back()}), c.out[0], Layout::vendor);
  gemm::run_cublas(pr.p);
  call_into(OpId::sum, {dz}, {c.out[1]}, ReduceAttrs{1, 0, 1});
}

}  // namespace

bool cuda_linear_backward_masks_on_load(const Tensor& g, int64_t in_f) {
  const int64_t rows = linear_rows(g), out_f = g.shape().back();
  const DType dt = g.dtype();
  const int d = g.device().index;
  return (input_outer_takes(dt, rows, in_f, out_f) || input_simt_takes(dt, rows, in_f, out_f) ||
          input_mma_takes(dt, rows, in_f, out_f, d)) &&
         (weight_outer_takes(dt, rows, in_f, out_f) || weight_simt_takes(dt, rows, in_f, out_f) ||
          weight_mma_takes(dt, rows, in_f, out_f, d));
}

void register_cuda_linear_backward_input(OpInfo& info) {
  info.add_variant({.name = "outer",
                    .device = DeviceType::cuda,
                    .fn = input_outer,
                    .dtypes = kFloatTypes,
                    .supports = input_outer_ok,
                    .note = "one launch: the relu mask applied to g as the outer-product GEMM loads it"});
  info.add_variant({.name = "simt",
                    .device = DeviceType::cuda,
                    .fn = input_simt,
                    .dtypes = {DType::f32},
                    .supports = input_simt_ok,
                    .note = "one launch: the relu mask applied to g as the SIMT GEMM loads it"});
  info.add_variant({.name = "mma",
                    .device = DeviceType::cuda,
                    .fn = input_mma,
                    .dtypes = DTypeSet{DType::f16, DType::bf16},
                    .supports = input_mma_ok,
                    .note = "one launch: the relu mask applied to g's tensor-core fragments"});
  info.add_variant({.name = "composite",
                    .device = DeviceType::cuda,
                    .fn = linear_backward_input_composite,
                    .dtypes = kFloatTypes,
                    .note = "relu_backward, then matmul"});
  info.add_variant({.name = "cublas",
                    .device = DeviceType::cuda,
                    .fn = input_cublas,
                    .dtypes = kFloatTypes,
                    .flags = kVendor,
                    .note = "relu_backward, then cuBLAS's GEMM (PyTorch's eager backward)"});
}

void register_cuda_linear_backward_weight(OpInfo& info) {
  info.add_variant({.name = "outer",
                    .device = DeviceType::cuda,
                    .fn = weight_outer,
                    .dtypes = kFloatTypes,
                    .supports = weight_outer_ok,
                    .note = "one launch: the mask on dz^T and the bias gradient from the same loads"});
  info.add_variant({.name = "simt",
                    .device = DeviceType::cuda,
                    .fn = weight_simt,
                    .dtypes = {DType::f32},
                    .supports = weight_simt_ok,
                    .note = "one launch: the mask as the SIMT GEMM loads dz^T, the bias gradient in blocks beside it"});
  info.add_variant(
      {.name = "mma",
       .device = DeviceType::cuda,
       .fn = weight_mma,
       .dtypes = DTypeSet{DType::f16, DType::bf16},
       .supports = weight_mma_ok,
       .note = "one launch: the mask on dz^T's tensor-core fragments, the bias gradient in blocks beside it"});
  info.add_variant({.name = "composite",
                    .device = DeviceType::cuda,
                    .fn = linear_backward_weight_composite,
                    .dtypes = kFloatTypes,
                    .note = "relu_backward, then matmul and sum"});
  info.add_variant({.name = "cublas",
                    .device = DeviceType::cuda,
                    .fn = weight_cublas,
                    .dtypes = kFloatTypes,
                    .flags = kVendor,
                    .note = "relu_backward, then cuBLAS's GEMM and sum (PyTorch's eager backward)"});
}

void register_cuda_linear(OpInfo& info) {
  info.add_variant({.name = "small",
                    .device = DeviceType::cuda,
                    .fn = linear_small,
                    .dtypes = kFloatTypes,
                    .supports = small_ok,
                    .note = "4x4 output tiles, K across the block, one launch (small layers)"});
  info.add_variant({.name = "rows",
                    .device = DeviceType::cuda,
                    .fn = linear_rows_fused,
                    .dtypes = kFloatTypes,
                    .supports = rows_ok,
                    .note = "the fused MLP's kernel with one layer: a block's rows, all of K, one launch"});
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
  info.add_variant({.name = "mma_cluster",
                    .device = DeviceType::cuda,
                    .fn = linear_mma_cluster,
                    .dtypes = DTypeSet{DType::f16, DType::bf16},
                    .flags = kSimOnly,
                    .supports = mma_cluster_ok,
                    .note = "mma.sync on 64x64 tiles, K split over a cluster, summed in distributed shared memory"});
  add_wgmma_variants<LinearWgmma>(info, wgmma_ok);
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
