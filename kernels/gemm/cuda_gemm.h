// The CUDA GEMMs behind matmul's and linear's CUDA variants (CUDA translation units only).
//
//   C[z] = act(A[z] B[z] + bias)   A [M, K], B [K, N], C [M, N] row-major (unit column stride), per
//                                  batch z; bias [N] contiguous or none; act none / relu / gelu (erf)
//
// Kernels (napkin math: docs/perf.md, "Napkin math behind the kernels"):
//   run_naive   v1: one thread per output, any strides, acc_t accumulation (the oracle)
//   run_simt    v2: f32/f64 SIMT, shared-memory tiles, register blocking (gemm_simt.cu);
//               run_simt_fused (f32) also applies a relu mask to A and sums A's rows, as outer's
//   run_small   the tiny and skinny layers in one launch: 4 x 4 output tiles, K across the block's
//               256 threads, a fixed in-block reduction (gemm_small.cu, Note [small GEMM])
//   run_outer   the short reductions of a small layer's backward (dz^T x, dz W) in one launch: a
//               thread per column of C, 4 rows, K in order (gemm_small.cu, Note [outer-product
//               GEMM]); run_outer_fused also applies a relu mask to A and sums A's rows
//   run_mma     v3: f16/bf16 tensor cores, mma.sync m16n8k16 + ldmatrix + cp.async (gemm_mma.cu);
//               run_mma_fused (64x64 tiles) also applies a relu mask to A and sums A's rows
//   run_mma_cluster  the same warps on 64x64 tiles for the MNIST layers at batch 128-512: K split
//               over a thread-block cluster, summed in distributed shared memory (Note [cluster split-K])
//   run_wgmma   v4: f16/bf16 (and f32 as TF32 when asked) on Hopper (sm_90a), TMA + mbarrier ring
//               + wgmma, warp-specialised, persistent (gemm_wgmma_sm90a.cu, Note [warp-specialised GEMM])
//   run_cublas, run_cublaslt: the vendor libraries (gemm_vendor.cu)
//
// Operand layouts: v2, v3 and the vendor paths read an operand in place when one of its two
// matrix strides is 1 (row-major, or a transposed view); prepare() copies any other layout with
// contiguous() first. Batch dims broadcast (stride 0) and are collapsed where they are contiguous.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace ember::gemm {

inline constexpr int kMaxBatchDims = kMaxDims - 2;

struct Problem {
  DType dtype = DType::f32;
  Device device;
  int64_t M = 0, N = 0, K = 0;
  const void* a = nullptr;
  int64_t a_rs = 0, a_cs = 0;  // element strides of A's rows (m) and columns (k)
  const void* b = nullptr;
  int64_t b_rs = 0, b_cs = 0;  // element strides of B's rows (k) and columns (n)
  void* c = nullptr;
  int64_t c_rs = 0, c_bs = 0;  // C's row stride and batch stride (its column stride is 1)
  // batch dims (outermost first): sizes and the element strides of A and B (0: broadcast)
  int nb = 0;
  int64_t bsize[kMaxBatchDims] = {}, a_bs[kMaxBatchDims] = {}, b_bs[kMaxBatchDims] = {};
  const void* bias = nullptr;  // [N], contiguous, dtype as C
  int act = 0;                 // 0 none, 1 relu, 2 gelu (exact erf form)

  int64_t batch() const {
    int64_t n = 1;
    for (int d = 0; d < nb; ++d) n *= bsize[d];
    return n;
  }
  // True when A's k stride is 1 (row-major A), else its m stride is 1 (a transposed view).
  bool a_kmajor() const { return a_cs == 1; }
  // True when B's k stride is 1 (a transposed view, e.g. W^T in linear), else its n stride is 1.
  bool b_kmajor() const { return b_cs != 1; }
};

// What the kernel that will run needs of the operands' layouts.
enum class Layout {
  any,          // v1: any strides
  unit_stride,  // v2/v3: each operand has a unit stride in one of its matrix dims
  vendor,       // cuBLAS/cuBLASLt: unit stride and a leading dimension >= the matrix's extent
};

// A problem with the tensors it points into (copies made by contiguous() are kept alive here).
struct Prepared {
  Problem p;
  std::vector<Tensor> keep;
};

// matmul: a [..., M, K], b [..., K, N], out [broadcast(...), M, N] contiguous.
Prepared prepare_matmul(const Tensor& a, const Tensor& b, const Tensor& out, Layout need);
// linear: x [rows, in] (any leading dims, contiguous), w [out, in], bias [out] or undefined,
// y [rows, out]: C = act(x w^T + bias), i.e. B = w^T read in place (k-major).
Prepared prepare_linear(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y, int act, Layout need);

void run_naive(const Problem& p);
void run_simt(const Problem& p);  // f32, f64; needs Layout::unit_stride
void run_mma(const Problem& p);   // f16, bf16 on sm_80+; needs Layout::unit_stride
// f16, bf16 on sm_90: 64x64 tiles, K split over a thread-block cluster, the partials added
// through distributed shared memory (gemm_mma.cu, Note [cluster split-K]); Layout::unit_stride
void run_mma_cluster(const Problem& p);
// The small-problem GEMM (every float dtype): both operands K-major, one batch, and A's and B's
// re-reads (each 4-row tile of A is read once per 4 columns of C, and each 4 columns of B once per
// 4 rows) at most kSmallMaxRereadBytes. small_refusal says why a problem is not taken (nullptr when
// it is; a fixed message, so the variants' supports, asked on every call, build no string).
inline constexpr double kSmallMaxRereadBytes = 16.0 * (1 << 20);
const char* small_refusal(const Problem& p);
void run_small(const Problem& p);
// The short-reduction GEMM of a small layer's backward (every float dtype): B row-major, one
// batch, K at most kOuterMaxK, and B's re-reads (once per 4 or 16 rows of C) at most
// kSmallMaxRereadBytes; A in any layout (outer_refusal: nullptr when taken, as small_refusal).
// outer_rows: the rows of C a thread owns, 4 or 16 (the fewest that keep the re-reads within the
// bound; 16 only for K <= kOuterMaxK / 2; Note [outer-product GEMM] in gemm_small.cu), 0 when
// neither does.
inline constexpr int64_t kOuterMaxK = 1024;
int outer_rows(const Problem& p);
// outer_splits: how many runs of K a block walks at once (1, or 4; 2 for f64 at 16 rows; Note
// [outer K split] in gemm_small.cu): more than 1 where the grid is smaller than the GPU and K is long.
int outer_splits(const Problem& p);
const char* outer_refusal(const Problem& p);
void run_outer(const Problem& p);
// What a relu layer's backward fuses into run_outer (Note [fused linear backward] in
// kernels/ops/linear.cu): A's elements are read as 0 where a_mask's are not > 0 (a_mask has A's
// dtype and strides: the layer's output y, so that A becomes dz = g * relu'(z)), and the sums
// over k of A's rows, after the mask, are written to row_sum [M] (C's dtype; needs N > 0): the
// bias gradient as a by-product of dW = dz^T x. Either may be null.
struct OuterFusion {
  const void* a_mask = nullptr;
  void* row_sum = nullptr;
};
void run_outer_fused(const Problem& p, const OuterFusion& fuse);
// The same fusion in the SIMT GEMM (f32), for the layers outer refuses (Note [fused simt backward]
// in gemm_simt.cu): one batch, B row-major, M, N, K within int32 (simt_fused_refusal: nullptr when
// taken). The row sums run in blocks of their own beside the GEMM's, same launch.
const char* simt_fused_refusal(const Problem& p);
void run_simt_fused(const Problem& p, const OuterFusion& fuse);
// The same fusion on the tensor cores (f16, bf16 on sm_80+; Note [fused mma backward] in
// gemm_mma.cu): 64x64 tiles, the mask copied beside A into each stage and applied to A's
// fragments; one batch, B row-major, M, N, K within int32 (mma_fused_refusal: nullptr when taken).
const char* mma_fused_refusal(const Problem& p);
void run_mma_fused(const Problem& p, const OuterFusion& fuse);
bool mma_supported(int device);          // compute capability >= 8.0
bool mma_cluster_supported(int device);  // compute capability >= 9.0 (clusters)
// v4: each operand K-major or MN-major with a pitch of a multiple of 16 bytes, one batch
// (wgmma_refusal says why a problem is not taken: "" when it is). WgmmaConfig: tiles of 128 x bn
// (128 or 256); at most max_blocks resident blocks (0: one per SM); the epilogue stores through
// TMA where C allows it (wgmma_tma_store_ok: 16-byte aligned, a row pitch of a multiple of 16
// bytes), else, or when asked for `direct`, from the registers; f32 only with tf32 set (as
// PyTorch's allow_tf32: the operands read as TF32, Note [TF32 through wgmma]), both operands
// K-major; cluster 2: pairs of blocks sharing B by TMA multicast (Note [multicast GEMM]).
bool wgmma_supported(int device);  // compute capability 9.0 (its code is sm_90a)
std::string wgmma_refusal(const Problem& p, bool tf32 = false);
enum class WgmmaEpilogue : uint8_t { tma_store, direct };
bool wgmma_tma_store_ok(const Problem& p);
struct WgmmaConfig {
  int bn = 128;
  int max_blocks = 0;
  WgmmaEpilogue epilogue = WgmmaEpilogue::tma_store;
  bool tf32 = false;
  int cluster = 1;
};
void run_wgmma(const Problem& p, const WgmmaConfig& config);
// Whether the Hopper GEMM takes the problem of linear's x W^T (x [.., K] and W [N, K], both
// contiguous: both operands K-major) or of matmul's a b (2-d, each operand read in place), on
// the operands' device; f32 only as TF32, when tf32 is set.
bool wgmma_takes_linear(const Tensor& x, const Tensor& w, bool tf32);
bool wgmma_takes_matmul(const Tensor& a, const Tensor& b, bool tf32);
// cuBLAS (cublasGemmStridedBatchedEx, pure FP32/FP64 compute, fp32 accumulation for f16/bf16).
// The bias is added by cuBLAS itself (C prefilled with it, beta = 1); relu runs in place after;
// gelu is not offered (act must be 0 or 1). Needs Layout::vendor.
void run_cublas(const Problem& p);
// The same reading f32 operands as TF32 (CUBLAS_COMPUTE_32F_FAST_TF32): the lab's peer of the TF32
// wgmma GEMM, never used by the ops.
void run_cublas_tf32(const Problem& p);
// cuBLASLt with its BIAS / RELU / RELU_BIAS epilogues (gelu not offered: cuBLASLt's GELU is the
// tanh approximation). Needs Layout::vendor.
void run_cublaslt(const Problem& p);
// Whether cuBLASLt is offered for the problem (as PyTorch: both output dims > 1 and every dim
// below 65535 * 32, and no gelu).
bool cublaslt_accepts(int64_t M, int64_t N, int64_t K, int act);

// The split-K reduction of every tiled GEMM and convolution (Note [split-K] in gemm_common.cuh):
// out[i] = the sum over s = 0 .. splits-1, in that order, of ws[s n + i], accumulated in
// acc_t<dtype> (ws holds that type) and rounded once to dtype; deterministic, no atomics. Queued
// on `stream` of `device`.
void sum_splits(DType dtype, const void* ws, int splits, int64_t n, void* out, cudaStream_t stream, int device);

}  // namespace ember::gemm
