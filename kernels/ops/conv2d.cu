// conv2d on CUDA: every library variant of the three convolution ops is registered here.
//
// Variants (per op, in the order the default picks from):
//   direct      f32/f16/bf16, the small MNIST-style convolutions (NCHW, 3x3 or 5x5, stride 1, no
//               dilation or groups, planes <= 32x32): one block per (image, slice of 8-32 output
//               channels); input-channel chunks of the zero-padded planes and of the weight slice are
//               staged in shared memory (fp32, <= 48 KB, so several blocks share an SM); each thread
//               owns 8 output channels (1 where there are fewer than 8) x TP pixels of one output
//               row (TP = 7 when the width is a multiple of 7 - 28 and 14 - else 4) in registers
//               and slides the kernel along the row: per (c, r) it loads TP + S - 1 inputs and S x 2
//               float4 weights for 8 x TP x S FMAs (TP = 7, S = 3: 15 shared loads for 168 FMAs, far
//               below the shared-memory limit).
//               backward_input is the same kernel on grad_output with the weight flipped and
//               transposed (padding R - 1 - pad): a stride-1 transposed convolution is a convolution.
//               Its few, long threads per image (56 for MNIST conv2) split the input channels
//               over groups of whole warps, summed in shared memory (Note [direct channel split]).
//               backward_weight: blocks over (image split, k slice, c slice); each thread owns
//               (4 output channels, one input channel, every tap) for a share of the output rows and
//               walks them with a sliding window (7 shared loads per 36 FMAs for 3x3); the row shares
//               are summed in shared memory, the image splits by a second, ordered pass. A biased
//               layer's db comes from the same loads and the same two launches (Note [conv bias
//               gradient] in conv2d.h); every other variant adds it with the sum op.
//               conv2d_max_pool2d: the same forward kernel pools its output in 2x2 windows through
//               shared memory before it stores (Note [conv and max pooling in one launch]).
//               On a pooled gradient (conv2d_max_pool2d's backward, windows that do not overlap)
//               both gradient kernels unpool it as they stage their grad_output planes (Note [max
//               pooling in the conv backward] in conv2d.h); every other variant runs
//               max_pool2d_backward first (unpool_apart).
//               Why a direct kernel: MNIST conv2 (32->64, 14x14) is compute bound, and cuDNN's FMA
//               implicit GEMM pays the im2col gather and tile waste at K = 64; conv1 (1->32, 28x28)
//               is memory and launch bound, and the implicit GEMM would waste 31/32 of each 32-deep
//               reduction tile on C = 1.
//   igemm_mma   f16/bf16 implicit GEMM on tensor cores (conv2d_igemm.cu)
//   igemm_simt  f32/f64 implicit GEMM on FMA units (conv2d_igemm.cu)
//   cudnn       (kVendor) cuDNN's legacy API, algorithm cached per shape (conv2d_cudnn.cu);
//               backward_weight also has cudnn_nondet (kVendor | kNondeterministic)
//   naive       (kReference) one thread per output element, int64 indexing, any shape: the
//               kernel-level oracle, a lab variant (bench/lab/conv2d_lab.cu, Note [lab variants]
//               in kernels/lab_variants.h), registered where the tests and benchmarks run
// ember_gpu_tests checks each variant against the CPU reference on every sample (and
// tests/test_cnn_ops_gpu.cpp at MNIST batch 64), in the simulator build and on a GPU; what has run
// where is recorded in docs/gpu-validation.md.
// Napkin math: docs/perf.md ("Napkin math behind the kernels").
#include <algorithm>
#include <array>
#include <map>
#include <mutex>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "core/cuda/device_guard.h"
#include "core/cuda/kernel.cuh"
#include "kernels/common/aligned_vec.cuh"
#include "kernels/common/block_phases.cuh"
#include "kernels/common/current_stream.cuh"
#include "kernels/common/grid_size.cuh"
#include "kernels/common/memory_format.h"
#include "kernels/gemm/cuda_gemm.h"
#include "kernels/ops/conv2d_cuda.h"

namespace ember {

namespace convcuda {

bool fits_int32(const ConvGeom& g) {
  const int64_t lim = INT32_MAX;
  return g.N * g.C * g.H * g.W < lim && g.N * g.K * g.P * g.Q < lim && g.K * g.Cg * g.R * g.S < lim &&
         g.N * g.P * g.Q < lim && g.G <= 65535;
}

ConvArgs forward_args(const KernelCall& c) {
  ConvArgs a;
  a.g = conv_geometry("conv2d", c.in[0].shape(), c.in[1].shape(), c.attr<Conv2dAttrs>());
  a.g.channels_last = runs_channels_last(c.in[0]);
  a.x = contiguous_as(c.in[0], a.g.channels_last);
  a.w = contiguous_as(c.in[1], a.g.channels_last);
  a.b = c.in[2].defined() ? c.in[2].contiguous() : Tensor();
  a.y = c.out[0];
  return a;
}

ConvArgs backward_input_args(const KernelCall& c) {
  ConvArgs a;
  a.g = conv_geometry("conv2d_backward_input", c.out[0].shape(), c.in[1].shape(), c.attr<Conv2dAttrs>());
  a.g.channels_last = runs_channels_last(c.in[0]);
  a.y = contiguous_as(c.in[0], a.g.channels_last);
  a.w = contiguous_as(c.in[1], a.g.channels_last);
  a.x = c.out[0];
  return a;
}

ConvArgs backward_weight_args(const KernelCall& c) {
  ConvArgs a;
  a.g = conv_geometry("conv2d_backward_weight", c.in[1].shape(), c.out[0].shape(), c.attr<Conv2dAttrs>());
  a.g.channels_last = runs_channels_last(c.in[1]);
  a.y = contiguous_as(c.in[0], a.g.channels_last);
  a.x = contiguous_as(c.in[1], a.g.channels_last);
  a.w = c.out[0];
  return a;
}

}  // namespace convcuda

namespace {

using convcuda::ConvArgs;
using convcuda::cp;
using convcuda::mp;

// ---- implicit GEMM entry points ----

bool igemm_supports(const KernelCall& c, ConvGeom (*geom)(const KernelCall&)) { return convcuda::fits_int32(geom(c)); }
ConvGeom fwd_geom(const KernelCall& c) {
  return conv_geometry("conv2d", c.in[0].shape(), c.in[1].shape(), c.attr<Conv2dAttrs>());
}
// (from the inputs and attributes: `supports` may see placeholder outputs)
ConvGeom bwi_geom(const KernelCall& c) {
  const auto& a = c.attr<Conv2dAttrs>();
  const Shape &gy = c.in[0].shape(), &w = c.in[1].shape();
  return conv_geometry("conv2d_backward_input", {gy[0], w[1] * a.conv.groups, a.size[0], a.size[1]}, w, a);
}
ConvGeom bww_geom(const KernelCall& c) {
  const auto& a = c.attr<Conv2dAttrs>();
  const Shape &gy = c.in[0].shape(), &x = c.in[1].shape();
  return conv_geometry("conv2d_backward_weight", x, {gy[1], x[1] / a.conv.groups, a.size[0], a.size[1]}, a);
}

void simt_forward(const KernelCall& c) { convcuda::igemm_simt_forward(convcuda::forward_args(c)); }
void simt_backward_input(const KernelCall& c) { convcuda::igemm_simt_backward_input(convcuda::backward_input_args(c)); }
void simt_backward_weight(const KernelCall& c) {
  conv_bias_grad_apart(c);  // Note [conv bias gradient]
  convcuda::igemm_simt_backward_weight(convcuda::backward_weight_args(c));
}
void mma_forward(const KernelCall& c) { convcuda::igemm_mma_forward(convcuda::forward_args(c)); }
void mma_backward_input(const KernelCall& c) { convcuda::igemm_mma_backward_input(convcuda::backward_input_args(c)); }
void mma_backward_weight(const KernelCall& c) {
  conv_bias_grad_apart(c);  // Note [conv bias gradient]
  convcuda::igemm_mma_backward_weight(convcuda::backward_weight_args(c));
}

// ---- direct kernels (MNIST-sized convolutions) ----

constexpr int kDirectSmemFloats = 12288;  // 48 KB: the default limit, several blocks per SM
constexpr int kDirectThreads = 256;       // the most threads in a block (__launch_bounds__)
constexpr int kDirectWarpsPerSm = 16;     // the channel split stops once this many warps per SM are resident

struct DirectGeom {
  int N, Ci, H, W;  // input planes (x for forward, grad_output for backward_input)
  int Co, P, Q;     // output planes
  int pad;          // padding applied to the input planes
  int TK;           // output channels per thread: 8 (two float4 weight loads per tap), 1 when Co < 8
  int KB;           // output channels per block (multiple of TK)
  int QG;           // pixel groups per output row
  int Hp, Wpa;      // shared plane: Hp = P + KS - 1 rows, Wpa >= QG TP + KS - 1 columns (zero filled;
                    // Note [direct plane pitch])
  int CB;           // input channels per shared-memory chunk
  int items;        // (KB / TK) P QG: one per thread of a split
  int CS;           // channel splits (Note [direct channel split]): CS groups of IW threads
  int IW;           // threads per split: items rounded up to whole warps
};

// Note [batched staging]: a staging loop that loads one element and stores it to shared memory per
// iteration waits a whole global-memory round trip (~0.3-0.5 us from L2 or HBM) per iteration,
// because the store needs the value before the next load issues; nvcc did not unroll the direct
// kernel's loops (one ld.global each in the PTX). With one block of 112 threads per image, the
// MNIST conv1 input gradient's 32 padded 30x30 planes and their weights were about 290 such iterations
// a thread, ~100 us by themselves (the H200 measured 161 us for that call). So each
// thread issues kStageBatch independent loads into registers, then makes the kStageBatch stores:
// one round trip per batch. The simulator's counters see the same accesses either way, so the time
// model (which counts barriers, not a loop's serial loads) does not see this difference.
constexpr int kStageBatch = 8;

// dst(i) = load(i) for i in [0, total), the block's threads striding over i, kStageBatch at a time.
template <class Load, class Store>
__device__ __forceinline__ void stage_batched(int total, const Load& load, const Store& store) {
  const int tid = threadIdx.x, nt = blockDim.x;
  for (int base = tid; base < total; base += kStageBatch * nt) {
    float v[kStageBatch];
    EMBER_UNROLL
    for (int u = 0; u < kStageBatch; ++u) {
      const int i = base + u * nt;
      v[u] = i < total ? load(i) : 0.f;
    }
    EMBER_UNROLL
    for (int u = 0; u < kStageBatch; ++u) {
      const int i = base + u * nt;
      if (i < total) store(i, v[u]);
    }
  }
}

// The pooled gradient a direct kernel reads its grad_output planes from (Note [max pooling in the
// conv backward] in conv2d.h): disjoint kh x kw windows, pooled planes PH x PW, their indices;
// ind = nullptr: the planes are grad_output itself.
struct PooledGrad {
  const int64_t* ind = nullptr;
  int kh = 1, kw = 1, PH = 0, PW = 0;
};

// Image n's C planes of H x W: their values and, where they come pooled (u.ind), the pooled
// values and their indices.
template <class T>
struct ImagePlanes {
  const T* v;
  const int64_t* ind;
  __device__ ImagePlanes(const T* in, const PooledGrad& u, int n, int C, int H, int W) {
    const int64_t plane = u.ind != nullptr ? static_cast<int64_t>(u.PH) * u.PW : static_cast<int64_t>(H) * W;
    v = in + n * C * plane;
    ind = u.ind != nullptr ? u.ind + n * C * plane : nullptr;
  }
  // Element (c, h, w) of the planes.
  __device__ __forceinline__ float at(const PooledGrad& u, int c, int h, int w, int H, int W) const {
    if (ind == nullptr) return static_cast<float>(v[(c * H + h) * W + w]);
    return pool::unpooled_at<float>(v, ind, c * u.PH * u.PW, h, w, W, u.kh, u.kw, u.PH, u.PW);
  }
};

// One input-channel chunk [c0, c0 + cb) of image n into shared memory: the weights of the block's
// KB output channels and the zero-padded input planes (Note [batched staging]).
template <class T, int KS, bool FLIP>
__device__ __forceinline__ void direct_stage_chunk(const ImagePlanes<T>& xn, const PooledGrad& u,
                                                   const T* __restrict__ w, const DirectGeom& g, int c0, int cb, int k0,
                                                   float* ws, float* xs) {
  const int plane = g.Hp * g.Wpa;
  // weights: ws[((c KS + r) KS + s) KB + kk]
  stage_batched(
      cb * KS * KS * g.KB,
      [&](int i) {
        const int kk = i % g.KB;
        int t = i / g.KB;
        const int s = t % KS;
        t /= KS;
        const int r = t % KS;
        const int c = c0 + t / KS;
        const int k = k0 + kk;
        if (k >= g.Co) return 0.f;
        // forward: w[k][c][r][s] ([Co, Ci, KS, KS]); backward_input: w[c][k][KS-1-r][KS-1-s] ([Ci, Co, KS, KS])
        return FLIP ? static_cast<float>(w[((c * g.Co + k) * KS + (KS - 1 - r)) * KS + (KS - 1 - s)])
                    : static_cast<float>(w[((k * g.Ci + c) * KS + r) * KS + s]);
      },
      [&](int i, float v) { ws[i] = v; });
  // zero-padded input planes
  stage_batched(
      cb * plane,
      [&](int i) {
        const int c = i / plane;
        const int rem = i - c * plane;
        const int hh = rem / g.Wpa, ww = rem - hh * g.Wpa;
        const int h = hh - g.pad, wi = ww - g.pad;
        if (h < 0 || h >= g.H || wi < 0 || wi >= g.W) return 0.f;
        return xn.at(u, c0 + c, h, wi, g.H, g.W);
      },
      [&](int i, float v) { xs[i] = v; });
}

// Note [direct channel split]: a thread of direct_kernel owns TK channels x TP pixels of one output
// row, so an image's work is (KB / TK) P QG threads: 56 for the MNIST conv2's input gradient
// (32 channels of 14x14 from 64, KB 16), 112 for conv1's (1 channel of 28x28 from 32). With one
// block per image that leaves 2-4 warps per SM on an H200 at batch 128, too few to hide the
// shared-memory and FMA latencies, while each thread walks all 64 (or 32) input channels. So the
// backward_input geometry splits the input channels over CS groups of IW threads (IW = the items
// rounded up to whole warps, so every warp belongs to one split and reads one channel's plane): split
// s takes channels c0 + s, c0 + s + CS, ... of each staged chunk, and at the end the CS - 1 other
// splits' accumulators go through shared memory to split 0, which adds them in split order (the
// result does not depend on the schedule). CS doubles while the block stays within 256 threads,
// every split has a channel, the partials fit the 48 KB, and the grid holds fewer than 16 warps per
// SM. The forward keeps CS = 1: its geometry is the one the H200 measured ahead of cuDNN (docs/perf.md),
// and a split there waits for a GPU to time it.

// The CS - 1 other splits' accumulators through shared memory to split 0, which adds them in split
// order (Note [direct channel split]); returns whether this thread holds sums to store (an active
// thread of split 0).
template <int TK, int TP>
__device__ __forceinline__ bool direct_sum_splits(float (&acc)[TK][TP], float* smem, int split, int item, bool active,
                                                  const DirectGeom& g) {
  __syncthreads();  // the last chunk is no longer read
  float* part = smem + item;
  if (split > 0 && active) {
    EMBER_UNROLL
    for (int k = 0; k < TK; ++k) EMBER_UNROLL
    for (int i = 0; i < TP; ++i) part[(((split - 1) * TK + k) * TP + i) * g.IW] = acc[k][i];
  }
  __syncthreads();
  if (split > 0 || !active) return false;  // the rows past the items hold no partials
  for (int s = 1; s < g.CS; ++s) EMBER_UNROLL
  for (int k = 0; k < TK; ++k) EMBER_UNROLL
  for (int i = 0; i < TP; ++i) acc[k][i] += part[(((s - 1) * TK + k) * TP + i) * g.IW];
  return true;
}

// The forward's output max pooled in 2x2 windows, stride 2, no padding (conv2d_max_pool2d, Note
// [conv and max pooling in one launch]) into y and ind ([N, Co, PH, PW]), relu(max) where relu;
// y = nullptr: the output is not pooled.
template <class T>
struct PoolOut {
  T* y = nullptr;
  int64_t* ind = nullptr;
  int PH = 0, PW = 0;
  int relu = 0;
};

// Note [conv and max pooling in one launch]: the direct forward's threads own TP pixels of one
// output row, and a 2x2 window spans two rows (and, with TP = 7, two threads of a row). So the
// pooled epilogue goes through shared memory, one of the TK channels of every thread at a time:
// the threads put their outputs (each rounded to T first, as the unfused conv stores them, so the
// same maximum wins) window by window into a staging plane, 4 floats per window, then a thread per
// pooled output reads its window as one float4 (consecutive lanes, consecutive windows: no bank
// conflicts) and picks the maximum as max_pool2d does (the first maximum, NaN wins; the relu and
// its index -1 after). Rows and columns in no window are never stored. The conv's output never
// reaches memory: one launch and the output's write and read fewer than conv2d + max_pool2d.
template <class T, int TK, int TP>
__device__ __forceinline__ void direct_pool_epilogue(const float (&acc)[TK][TP], const T* __restrict__ bias,
                                                     float* stage, bool active, int kg, int p, int q0, int k0, int n,
                                                     const DirectGeom& g, const PoolOut<T>& po) {
  const int groups = g.KB / TK, pooled = po.PH * po.PW;
  EMBER_UNROLL
  for (int k = 0; k < TK; ++k) {
    __syncthreads();  // the main loop's or the last channel's reads are done
    const int kk = k0 + kg * TK + k;
    if (active && p < 2 * po.PH) {
      const float bv = bias != nullptr && kk < g.Co ? static_cast<float>(bias[kk]) : 0.f;
      float* row = stage + ((kg * po.PH + p / 2) * po.PW) * 4 + (p % 2) * 2;
      EMBER_UNROLL
      for (int i = 0; i < TP; ++i) {
        const int q = q0 + i;
        if (q < 2 * po.PW) row[(q / 2) * 4 + q % 2] = static_cast<float>(static_cast<T>(acc[k][i] + bv));
      }
    }
    __syncthreads();
    for (int o = threadIdx.x; o < groups * pooled; o += blockDim.x) {
      const int og = o / pooled, rem = o - og * pooled;
      const int ko = k0 + og * TK + k;
      if (ko >= g.Co) continue;
      // one 16-byte access (Note [whole vector accesses] in kernels/common/aligned_vec.cuh)
      const detail::AlignedVec<float, 4> win = reinterpret_cast<const detail::AlignedVec<float, 4>*>(stage)[o];
      const float* v = win.v;
      const int ph = rem / po.PW, pw = rem - ph * po.PW;
      float best = -INFINITY;
      int64_t idx = static_cast<int64_t>(2 * ph) * g.Q + 2 * pw;
      EMBER_UNROLL
      for (int j = 0; j < 4; ++j)
        if (v[j] > best || v[j] != v[j]) {
          best = v[j];
          idx = static_cast<int64_t>(2 * ph + j / 2) * g.Q + 2 * pw + j % 2;
        }
      if (po.relu) pool::relu_max(best, idx);
      const int64_t at = (static_cast<int64_t>(n) * g.Co + ko) * pooled + rem;
      po.y[at] = static_cast<T>(best);
      po.ind[at] = idx;
    }
  }
}

// y[n, k0 + kk, p, q] for one image and KB output channels; thread = one item (TK channels x TP
// pixels of a row) of one channel split, accumulated over input-channel chunks staged in shared
// memory. FLIP: the weight is read as the transposed, flipped kernel of a [Co, Ci] convolution
// (backward_input), whose input planes may come pooled (u). The forward's output may be max pooled
// instead of stored (po).
template <class T, int KS, int TP, int TK, bool FLIP>
__global__ void __launch_bounds__(kDirectThreads)
    direct_kernel(const T* __restrict__ in, const T* __restrict__ w, const T* __restrict__ bias, T* __restrict__ out,
                  DirectGeom g, PooledGrad u, PoolOut<T> po) {
  static_assert(TK == 1 || TK == 8, "TK: one scalar or two float4 weight loads per tap");
  EMBER_SHARED(float4[kDirectSmemFloats / 4], smem4);
  float* smem = reinterpret_cast<float*>(smem4);
  const int plane = g.Hp * g.Wpa;
  float* ws = smem;                          // [CB][KS][KS][KB]
  float* xs = smem + g.CB * KS * KS * g.KB;  // [CB][Hp][Wpa]
  const int n = blockIdx.x;
  const int k0 = blockIdx.y * g.KB;
  const int split = threadIdx.x / g.IW;
  const int item = threadIdx.x - split * g.IW;
  const bool active = item < g.items;
  const int qg = item % g.QG;
  const int p = (item / g.QG) % g.P;
  const int kg = item / (g.QG * g.P);
  const int q0 = qg * TP;
  float acc[TK][TP];
  EMBER_UNROLL
  for (int k = 0; k < TK; ++k) EMBER_UNROLL
  for (int i = 0; i < TP; ++i) acc[k][i] = 0.f;

  const ImagePlanes<T> xn(in, u, n, g.Ci, g.H, g.W);
  for (int c0 = 0; c0 < g.Ci; c0 += g.CB) {
    const int cb = ::min(g.CB, g.Ci - c0);
    __syncthreads();  // the previous chunk is no longer read
    direct_stage_chunk<T, KS, FLIP>(xn, u, w, g, c0, cb, k0, ws, xs);
    __syncthreads();
    if (active) {
      for (int c = split; c < cb; c += g.CS) {
        const float* xc = xs + c * plane + p * g.Wpa + q0;
        const float* wc = ws + c * KS * KS * g.KB + kg * TK;
        EMBER_UNROLL
        for (int r = 0; r < KS; ++r) {
          float row[TP + KS - 1];
          EMBER_UNROLL
          for (int i = 0; i < TP + KS - 1; ++i) row[i] = xc[r * g.Wpa + i];
          EMBER_UNROLL
          for (int s = 0; s < KS; ++s) {
            float wv[TK];
            if constexpr (TK == 8) {
              const float4* wp = reinterpret_cast<const float4*>(wc + (r * KS + s) * g.KB);
              const float4 w0 = wp[0], w1 = wp[1];
              wv[0] = w0.x, wv[1] = w0.y, wv[2] = w0.z, wv[3] = w0.w;
              wv[4] = w1.x, wv[5] = w1.y, wv[6] = w1.z, wv[7] = w1.w;
            } else {
              wv[0] = wc[(r * KS + s) * g.KB];
            }
            EMBER_UNROLL
            for (int k = 0; k < TK; ++k) EMBER_UNROLL
            for (int i = 0; i < TP; ++i) acc[k][i] = fmaf(wv[k], row[i + s], acc[k][i]);
          }
        }
      }
    }
  }
  // split 0 goes on with the block's sums
  if (g.CS > 1 && !direct_sum_splits<TK, TP>(acc, smem, split, item, active, g)) return;
  if (po.y != nullptr) {  // the forward only (CS = 1): every thread takes part
    direct_pool_epilogue<T, TK, TP>(acc, bias, smem, active, kg, p, q0, k0, n, g, po);
    return;
  }
  if (!active) return;
  T* yn = out + static_cast<int64_t>(n) * g.Co * g.P * g.Q;
  EMBER_UNROLL
  for (int k = 0; k < TK; ++k) {
    const int kk = k0 + kg * TK + k;
    if (kk >= g.Co) continue;
    const float bv = bias != nullptr ? static_cast<float>(bias[kk]) : 0.f;
    T* yrow = yn + (static_cast<int64_t>(kk) * g.P + p) * g.Q;
    EMBER_UNROLL
    for (int i = 0; i < TP; ++i)
      if (q0 + i < g.Q) yrow[q0 + i] = static_cast<T>(acc[k][i] + bv);
  }
}

int direct_tp(int64_t Q) { return Q % 7 == 0 ? 7 : 4; }

// Note [direct plane pitch]: the direct kernels read their shared planes with lanes that differ in
// row (and plane or channel group), all at the same column. At the natural pitch those rows and
// planes can start on the same bank: the 28x28 MNIST plane with a 5x5 kernel has Wpa = 32, so the
// 8 rows a warp of direct_kernel reads all start at bank 0 and every load is an 8-way conflict;
// direct_wgrad_kernel's grad_output planes (784 words, a multiple of 32) put its channel groups on
// one bank, 16-way. The simulator's counters showed both (2.64 and 4.08 over the whole kernels).
// So the host picks each pitch: the smallest of the 32 from the natural one up whose worst warp
// has the fewest distinct words in one bank (lanes reading one word share it). The extra columns
// are zero-filled or never read.

// The most distinct words one of the 32 banks serves for these lanes' word addresses.
int bank_ways(const int* words, int n) {
  int distinct[32];
  int nd = 0;
  for (int i = 0; i < n; ++i)
    if (std::find(distinct, distinct + nd, words[i]) == distinct + nd) distinct[nd++] = words[i];
  int per_bank[32] = {};
  int ways = 0;
  for (int i = 0; i < nd; ++i) ways = std::max(ways, ++per_bank[((distinct[i] % 32) + 32) % 32]);
  return ways;
}

// addr(tid, pitch): the word thread tid (< threads) reads.
template <class F>
int pick_pitch(int natural, int threads, const F& addr) {
  int best = natural, best_cost = 1 << 30;
  for (int pitch = natural; pitch < natural + 32; ++pitch) {
    int cost = 0;
    for (int w0 = 0; w0 < threads; w0 += 32) {
      int words[32];
      const int n = std::min(32, threads - w0);
      for (int l = 0; l < n; ++l) words[l] = addr(w0 + l, pitch);
      cost = std::max(cost, bank_ways(words, n));
    }
    if (cost < best_cost) {
      best = pitch;
      best_cost = cost;
    }
  }
  return best;
}

// Note [direct geometry cache]: the pitch searches cost about 0.2 ms of host time for a forward and
// a weight-gradient geometry (measured on the dev VM), and every training step asks for the same
// few geometries, in supports() and again at the launch. So each geometry is computed once per
// process and key (its arguments); the cache is dropped if it ever holds 4096 of them.
template <class Geom, size_t N, class Make>
Geom cached_geom(const std::array<int64_t, N>& key, const Make& make) {
  static std::mutex mu;
  static std::map<std::array<int64_t, N>, Geom> cache;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;
  }
  const Geom g = make();
  std::lock_guard<std::mutex> lock(mu);
  if (cache.size() >= 4096) cache.clear();
  cache.emplace(key, g);
  return g;
}

// TK: 8 output channels per thread, or 1 when there are fewer than 8 (a transposed convolution
// back to a 1-channel image would leave 7 of 8 accumulators idle). KB: the largest of 32/16/8 (4/2/1)
// TK-multiples with one item per thread (<= 256), halved while there are fewer blocks than SMs;
// CS: Note [direct channel split], only where `split`; CB: as many input channels as fit the 48 KB
// of shared memory, balanced over the chunks when split. KB = 0: no fit.
DirectGeom compute_direct_geom(int N, int Ci, int H, int W, int Co, int P, int Q, int pad, int KS, int sms,
                               bool split) {
  DirectGeom d{.N = N, .Ci = Ci, .H = H, .W = W, .Co = Co, .P = P, .Q = Q, .pad = pad};
  const int tp = direct_tp(Q);
  d.TK = Co < 8 ? 1 : 8;
  d.QG = (Q + tp - 1) / tp;
  d.Hp = P + KS - 1;
  d.Wpa = d.QG * tp + KS - 1;
  auto items = [&](int kb) { return (kb / d.TK) * P * d.QG; };
  d.KB = 0;
  for (int kb : {4 * d.TK, 2 * d.TK, d.TK})
    if (items(kb) <= kDirectThreads) {
      d.KB = kb;
      break;
    }
  if (d.KB == 0) return d;
  while (d.KB > d.TK && int64_t{N} * ((Co + d.KB - 1) / d.KB) < sms) d.KB /= 2;
  d.KB = std::min(d.KB, (Co + d.TK - 1) / d.TK * d.TK);
  d.items = items(d.KB);
  d.IW = (d.items + 31) / 32 * 32;
  d.CS = 1;
  const int64_t blocks = int64_t{N} * ((Co + d.KB - 1) / d.KB);
  while (split && 2 * d.CS * d.IW <= kDirectThreads && 2 * d.CS <= Ci &&
         (2 * d.CS - 1) * d.TK * tp * d.IW <= kDirectSmemFloats &&
         blocks * d.CS * d.IW / 32 < int64_t{sms} * kDirectWarpsPerSm)
    d.CS *= 2;
  const int natural = d.Wpa;
  d.Wpa =
      pick_pitch(natural, d.items, [&](int tid, int pitch) { return ((tid / d.QG) % P) * pitch + (tid % d.QG) * tp; });
  if (KS * KS * d.KB + d.Hp * d.Wpa > kDirectSmemFloats) d.Wpa = natural;  // a channel must fit
  const int per_channel = KS * KS * d.KB + d.Hp * d.Wpa;
  d.CB = std::min(Ci, kDirectSmemFloats / per_channel);
  if (d.CB < 1) {
    d.KB = 0;
    return d;
  }
  if (d.CS > 1) {
    const int chunks = (Ci + d.CB - 1) / d.CB;
    d.CB = (Ci + chunks - 1) / chunks;
  }
  return d;
}

DirectGeom direct_geom(int N, int Ci, int H, int W, int Co, int P, int Q, int pad, int KS, int sms, bool split) {
  return cached_geom<DirectGeom>(std::array<int64_t, 11>{N, Ci, H, W, Co, P, Q, pad, KS, sms, split},
                                 [&] { return compute_direct_geom(N, Ci, H, W, Co, P, Q, pad, KS, sms, split); });
}

// A direct kernel's operands: its input planes (pooled: u), weight, bias and output (pooled: po).
template <class T>
struct DirectArgs {
  const T* in;
  PooledGrad u;
  const T* w;
  const T* b;
  T* out;
  PoolOut<T> po;
};

template <class T, int KS, int TP, int TK, bool FLIP>
void launch_direct_t(const DirectGeom& d, const DirectArgs<T>& a, cudaStream_t st) {
  dim3 grid(d.N, (d.Co + d.KB - 1) / d.KB);
  cuda::launch(direct_kernel<T, KS, TP, TK, FLIP>, grid, d.CS * d.IW, 0, st, a.in, a.w, a.b, a.out, d, a.u, a.po);
}

template <class T, int KS, int TP, bool FLIP>
void launch_direct_tk(const DirectGeom& d, const DirectArgs<T>& a, cudaStream_t st) {
  if (d.TK == 8) launch_direct_t<T, KS, TP, 8, FLIP>(d, a, st);
  else launch_direct_t<T, KS, TP, 1, FLIP>(d, a, st);
}

template <class T, bool FLIP>
void launch_direct(const DirectGeom& d, int KS, const DirectArgs<T>& a, cudaStream_t st) {
  const bool tp7 = d.Q % 7 == 0;
  if (KS == 3) {
    if (tp7) launch_direct_tk<T, 3, 7, FLIP>(d, a, st);
    else launch_direct_tk<T, 3, 4, FLIP>(d, a, st);
  } else {
    if (tp7) launch_direct_tk<T, 5, 7, FLIP>(d, a, st);
    else launch_direct_tk<T, 5, 4, FLIP>(d, a, st);
  }
}

template <class F>
void dispatch_half_float(DType t, const char* op, const F& f) {
  switch (t) {
    case DType::f32: f(float{}); break;
    case DType::f16: f(Half{}); break;
    case DType::bf16: f(BFloat16{}); break;
    default: EMBER_FAIL(op, ": the direct kernels take f32, f16 or bf16, got ", t);
  }
}

// The direct kernels' domain: MNIST-like convolutions.
bool direct_shape_ok(const ConvGeom& g) {
  return !g.channels_last && g.G == 1 && g.sh == 1 && g.sw == 1 && g.dh == 1 && g.dw == 1 && g.R == g.S &&
         (g.R == 3 || g.R == 5) && g.ph == g.pw && g.ph <= g.R - 1 && g.H <= 32 && g.W <= 32 && g.C <= 64 &&
         g.K <= 256 && g.N <= 65535 && convcuda::fits_int32(g);
}

DirectGeom forward_direct_geom(const ConvGeom& g, int sms) {
  return direct_geom(static_cast<int>(g.N), static_cast<int>(g.C), static_cast<int>(g.H), static_cast<int>(g.W),
                     static_cast<int>(g.K), static_cast<int>(g.P), static_cast<int>(g.Q), static_cast<int>(g.ph),
                     static_cast<int>(g.R), sms, false);
}
// dx = conv(grad_output, flip(w)^T) with padding R - 1 - pad: the input planes are [K, P, Q]
DirectGeom backward_input_direct_geom(const ConvGeom& g, int sms) {
  return direct_geom(static_cast<int>(g.N), static_cast<int>(g.K), static_cast<int>(g.P), static_cast<int>(g.Q),
                     static_cast<int>(g.C), static_cast<int>(g.H), static_cast<int>(g.W),
                     static_cast<int>(g.R - 1 - g.ph), static_cast<int>(g.R), sms, true);
}

bool direct_forward_supports(const KernelCall& c) {
  ConvGeom g = fwd_geom(c);
  g.channels_last = runs_channels_last(c.in[0]);
  return direct_shape_ok(g) && forward_direct_geom(g, 1).KB > 0;
}
bool direct_backward_input_supports(const KernelCall& c) {
  ConvGeom g = bwi_geom(c);
  g.channels_last = runs_channels_last(c.in[0]);
  return direct_shape_ok(g) && backward_input_direct_geom(g, 1).KB > 0;
}

void direct_forward(const KernelCall& c) {
  ConvArgs a = convcuda::forward_args(c);
  if (a.y.numel() == 0) return;
  const ConvGeom& g = a.g;
  cuda::DeviceGuard scope(a.y.device().index);
  const DirectGeom d = forward_direct_geom(g, cuda::sm_count(a.y.device().index));
  EMBER_CHECK(d.KB > 0, "conv2d direct: the shape does not fit the kernel");
  dispatch_half_float(a.y.dtype(), "conv2d", [&](auto tag) {
    using T = decltype(tag);
    launch_direct<T, false>(d, static_cast<int>(g.R), {cp<T>(a.x), {}, cp<T>(a.w), cp<T>(a.b), mp<T>(a.y), {}},
                            cuda::stream_for(a.y));
  });
}

// conv2d_max_pool2d in one launch (Note [conv and max pooling in one launch]): the direct forward
// where it runs, with 2x2 windows, stride 2, no padding.
bool direct_conv_pool_supports(const KernelCall& c) {
  const Conv2dAttrs& a = c.attr<Conv2dAttrs>();
  return a.pool.kernel[0] == 2 && a.pool.kernel[1] == 2 && pool::disjoint_windows(a.pool) && direct_forward_supports(c);
}

void direct_conv_pool(const KernelCall& c) {
  ConvArgs a = convcuda::forward_args(c);
  const Tensor &y = c.out[0], &ind = c.out[1];
  if (y.numel() == 0) return;
  const ConvGeom& g = a.g;
  cuda::DeviceGuard scope(y.device().index);
  const DirectGeom d = forward_direct_geom(g, cuda::sm_count(y.device().index));
  EMBER_CHECK(d.KB > 0, "conv2d_max_pool2d direct: the shape does not fit the kernel");
  dispatch_half_float(y.dtype(), "conv2d_max_pool2d", [&](auto tag) {
    using T = decltype(tag);
    const PoolOut<T> po{.y = mp<T>(y),
                        .ind = mp<int64_t>(ind),
                        .PH = static_cast<int>(y.shape()[2]),
                        .PW = static_cast<int>(y.shape()[3]),
                        .relu = static_cast<int>(c.attr<Conv2dAttrs>().pool.relu)};
    launch_direct<T, false>(d, static_cast<int>(g.R), {cp<T>(a.x), {}, cp<T>(a.w), cp<T>(a.b), nullptr, po},
                            cuda::stream_for(y));
  });
}

// The call's pooled gradient as the direct kernels read it (Note [max pooling in the conv backward]),
// its indices made contiguous into `ind`; none where the call has no pooling.
PooledGrad pooled_grad(const KernelCall& c, Tensor& ind) {
  const auto& a = c.attr<Conv2dAttrs>();
  if (a.max_pool == 0) return {};
  ind = c.in[2].contiguous();
  return {.ind = cp<int64_t>(ind),
          .kh = static_cast<int>(a.pool.kernel[0]),
          .kw = static_cast<int>(a.pool.kernel[1]),
          .PH = static_cast<int>(ind.shape()[2]),
          .PW = static_cast<int>(ind.shape()[3])};
}

// Whether a direct kernel reads the call's grad_output itself or from the pooled gradient; else
// the pooling's backward runs first (overlapping windows).
bool direct_pooling_ok(const KernelCall& c) {
  const auto& a = c.attr<Conv2dAttrs>();
  return a.max_pool == 0 || pool::disjoint_windows(a.pool);
}

void direct_backward_input(const KernelCall& c) {
  if (!direct_pooling_ok(c)) return conv_unpooled_apart(c, direct_backward_input);
  ConvArgs a = convcuda::backward_input_args(c);
  if (a.x.numel() == 0) return;
  const ConvGeom& g = a.g;
  cuda::DeviceGuard scope(a.x.device().index);
  const DirectGeom d = backward_input_direct_geom(g, cuda::sm_count(a.x.device().index));
  EMBER_CHECK(d.KB > 0, "conv2d_backward_input direct: the shape does not fit the kernel");
  Tensor ind;
  const PooledGrad u = pooled_grad(c, ind);
  dispatch_half_float(a.x.dtype(), "conv2d_backward_input", [&](auto tag) {
    using T = decltype(tag);
    launch_direct<T, true>(d, static_cast<int>(g.R), {cp<T>(a.y), u, cp<T>(a.w), nullptr, mp<T>(a.x), {}},
                           cuda::stream_for(a.x));
  });
}

// ---- direct weight gradient ----

constexpr size_t kDirectSmemLimit = 160 * 1024;  // opt-in dynamic shared memory

constexpr int kWgTK3 = 4, kWgTK5 = 2;  // output channels per thread for 3x3 / 5x5

struct DirectWgradGeom {
  int N, C, H, W, K, P, Q, pad;
  int KB, CB;       // output / input channels per block
  int PS;           // output-row shares per (k group, c)
  int splits, ipb;  // image splits and images per split
  int Hp, Wp;       // padded input plane in shared memory: Hp rows of Wp >= Q + KS - 1 floats
  int xpitch;       // floats per input plane in shared memory (>= Hp Wp; Note [direct plane pitch])
  int gq;           // floats per grad_output row in shared memory (>= Q)
  int gpitch;       // floats per grad_output plane in shared memory (>= P gq)
  int rpitch;       // floats per unit in the final reduction (TK KS KS rounded up to odd)
  int bias;         // per call, not part of the cached geometry: 1 = also db (Note [conv bias gradient])
};

// Image n's input planes (channels c0 ..) and grad_output planes (channels k0 ..) into shared
// memory, zero-padded (Note [batched staging]).
template <class T>
__device__ __forceinline__ void wgrad_stage_image(const T* __restrict__ gy, const PooledGrad& u,
                                                  const T* __restrict__ x, const DirectWgradGeom& g, int n, int k0,
                                                  int c0, float* xs, float* gs) {
  const int xplane = g.Hp * g.Wp, gplane = g.P * g.Q;
  const T* xn = x + static_cast<int64_t>(n) * g.C * g.H * g.W;
  stage_batched(
      g.CB * xplane,
      [&](int i) {
        const int c = i / xplane;
        const int rem = i - c * xplane;
        const int hh = rem / g.Wp, w = rem - hh * g.Wp;
        const int h = hh - g.pad, wi = w - g.pad;
        if (c0 + c >= g.C || h < 0 || h >= g.H || wi < 0 || wi >= g.W) return 0.f;
        return static_cast<float>(xn[((c0 + c) * g.H + h) * g.W + wi]);
      },
      [&](int i, float v) {
        const int c = i / xplane;
        xs[c * g.xpitch + (i - c * xplane)] = v;
      });
  const ImagePlanes<T> gn(gy, u, n, g.K, g.P, g.Q);
  stage_batched(
      g.KB * gplane,
      [&](int i) {
        const int k = k0 + i / gplane;
        if (k >= g.K) return 0.f;
        if (gn.ind == nullptr) return static_cast<float>(gn.v[k0 * gplane + i]);
        const int rem = i - (k - k0) * gplane;
        return gn.at(u, k, rem / g.Q, rem - rem / g.Q * g.Q, g.P, g.Q);
      },
      [&](int i, float v) {
        const int k = i / gplane, rem = i - k * gplane;
        const int p = rem / g.Q, q = rem - p * g.Q;
        gs[k * g.gpitch + p * g.gq + q] = v;
      });
}

// The block's partial dW (and db) into ws[blk.x]: the row shares' sums added in shared memory in a
// fixed order. blk: the block's (image split, k slice, c slice).
template <int KS, int TK>
__device__ __forceinline__ void wgrad_block_partials(const float (&acc)[TK][KS][KS], const float (&bsum)[TK],
                                                     bool active, float* smem, float* __restrict__ ws,
                                                     const DirectWgradGeom& g, uint3 blk) {
  constexpr int V = TK * KS * KS;
  const int tid = threadIdx.x, nt = blockDim.x;
  const int k0 = static_cast<int>(blk.y) * g.KB, c0 = static_cast<int>(blk.z) * g.CB;
  const int kgroups = g.KB / TK, units = kgroups * g.CB * g.PS;
  const int kg = tid % kgroups, cc = (tid / kgroups) % g.CB, ps = tid / (kgroups * g.CB);
  float* red = smem;                      // [units][rpitch]: an odd pitch puts the lanes' stores on 32 banks
  float* bred = smem + units * g.rpitch;  // [TK kgroups][PS | 1]: the row shares' db, an odd pitch as red's
  const int bpitch = g.PS | 1;
  if (active) {
    EMBER_UNROLL
    for (int t = 0; t < TK; ++t) EMBER_UNROLL
    for (int r = 0; r < KS; ++r) EMBER_UNROLL
    for (int s = 0; s < KS; ++s) red[tid * g.rpitch + (t * KS + r) * KS + s] = acc[t][r][s];
    if (cc == 0) {
      EMBER_UNROLL
      for (int t = 0; t < TK; ++t) bred[(t * kgroups + kg) * bpitch + ps] = bsum[t];
    }
  }
  __syncthreads();
  const int per_share = kgroups * g.CB;  // units with ps = 0
  const int64_t nw = static_cast<int64_t>(g.K) * g.C * KS * KS;
  float* wsp = ws + static_cast<int64_t>(blk.x) * (nw + (g.bias ? g.K : 0));
  if (g.bias && blk.z == 0) {
    for (int i = tid; i < g.KB; i += nt) {  // i = t kgroups + k group
      float s = 0.f;
      for (int p = 0; p < g.PS; ++p) s += bred[i * bpitch + p];
      const int k = k0 + (i % kgroups) * TK + i / kgroups;
      if (k < g.K) wsp[nw + k] = s;
    }
  }
  for (int i = tid; i < per_share * V; i += nt) {
    const int u = i / V, v = i - u * V;
    float s = 0.f;
    for (int p = 0; p < g.PS; ++p) s += red[(p * per_share + u) * g.rpitch + v];
    const int ukg = u % kgroups, uc = u / kgroups;
    const int t = v / (KS * KS), rs = v - t * KS * KS;
    const int k = k0 + ukg * TK + t, c = c0 + uc;
    if (k < g.K && c < g.C) wsp[(k * g.C + c) * KS * KS + rs] = s;
  }
}

// Partial dW for images [split ipb, (split + 1) ipb) and a (k, c) slice, into ws[split][K][C][KS][KS];
// with g.bias, the blocks of the first c slice also write partial db into ws[split][K C KS KS + k]:
// the threads of input channel 0 add the grad_output values they load anyway, so every row of
// every k is added exactly once (Note [conv bias gradient]). The grid is sized for 2 blocks an SM
// (compute_wgrad_geom), which the launch bounds say: left to itself, ptxas spilled the 3x3 kernel
// once db's TK sums joined the loop (docs/perf.md has the registers).
template <class T, int KS, int TK>
__device__ __forceinline__ void direct_wgrad_at(uint3 blk, const T* __restrict__ gy, const T* __restrict__ x,
                                                float* __restrict__ ws, const DirectWgradGeom& g, const PooledGrad& u) {
  EMBER_DYNAMIC_SHARED(float4, smem4);
  float* smem = reinterpret_cast<float*>(smem4);
  float* xs = smem;                    // [CB][xpitch >= Hp Wp]
  float* gs = smem + g.CB * g.xpitch;  // [KB][gpitch >= P gq]
  const int split = static_cast<int>(blk.x);
  const int k0 = static_cast<int>(blk.y) * g.KB, c0 = static_cast<int>(blk.z) * g.CB;
  const int tid = threadIdx.x;
  const int kgroups = g.KB / TK;
  const int units = kgroups * g.CB * g.PS;
  // unit u = (ps, c, kg) with kg fastest
  const bool active = tid < units;
  const int kg = tid % kgroups;
  const int cc = (tid / kgroups) % g.CB;
  const int ps = tid / (kgroups * g.CB);

  float acc[TK][KS][KS];
  float bsum[TK];  // this thread's rows of grad_output summed: db where cc == 0
  EMBER_UNROLL
  for (int t = 0; t < TK; ++t) {
    bsum[t] = 0.f;
    EMBER_UNROLL
    for (int r = 0; r < KS; ++r) EMBER_UNROLL
    for (int s = 0; s < KS; ++s) acc[t][r][s] = 0.f;
  }

  const int n_begin = split * g.ipb, n_end = ::min(g.N, n_begin + g.ipb);
  for (int n = n_begin; n < n_end; ++n) {
    __syncthreads();  // the previous image's planes are no longer read
    wgrad_stage_image(gy, u, x, g, n, k0, c0, xs, gs);
    __syncthreads();
    if (active) {
      const float* xc = xs + cc * g.xpitch;
      const float* gk = gs + kg * TK * g.gpitch;
      for (int p = ps; p < g.P; p += g.PS) {
        float win[KS][KS];
        EMBER_UNROLL
        for (int r = 0; r < KS; ++r) EMBER_UNROLL
        for (int s = 0; s < KS - 1; ++s) win[r][s + 1] = xc[(p + r) * g.Wp + s];
        for (int q = 0; q < g.Q; ++q) {
          EMBER_UNROLL
          for (int r = 0; r < KS; ++r) {
            EMBER_UNROLL
            for (int s = 0; s < KS - 1; ++s) win[r][s] = win[r][s + 1];
            win[r][KS - 1] = xc[(p + r) * g.Wp + q + KS - 1];
          }
          float gv[TK];
          EMBER_UNROLL
          for (int t = 0; t < TK; ++t) gv[t] = gk[t * g.gpitch + p * g.gq + q];
          EMBER_UNROLL
          for (int t = 0; t < TK; ++t) bsum[t] += gv[t];
          EMBER_UNROLL
          for (int t = 0; t < TK; ++t) EMBER_UNROLL
          for (int r = 0; r < KS; ++r) EMBER_UNROLL
          for (int s = 0; s < KS; ++s) acc[t][r][s] = fmaf(gv[t], win[r][s], acc[t][r][s]);
        }
      }
    }
  }
  __syncthreads();  // the planes are read: the row shares' sums take their shared memory
  wgrad_block_partials<KS, TK>(acc, bsum, active, smem, ws, g, blk);
}

template <class T, int KS, int TK>
__global__ void __launch_bounds__(256, 2) direct_wgrad_kernel(const T* __restrict__ gy, const T* __restrict__ x,
                                                              float* __restrict__ ws, DirectWgradGeom g, PooledGrad u) {
  direct_wgrad_at<T, KS, TK>(uint3{blockIdx.x, blockIdx.y, blockIdx.z}, gy, x, ws, g, u);
}

// dW, and db where the call asks for it, from the image splits' partials ws[split][nw + nb] (nb = 0
// or K), the splits added in order: gemm::sum_splits with a second destination, so db costs no
// launch of its own (Note [conv bias gradient]). Block `block` of `blocks`, a grid-stride loop.
template <class T>
__device__ __forceinline__ void wgrad_sum_splits_at(int64_t block, int64_t blocks, const float* __restrict__ ws,
                                                    int splits, int64_t nw, int64_t nb, T* __restrict__ w,
                                                    T* __restrict__ b) {
  const int64_t n = nw + nb;
  for (int64_t i = block * blockDim.x + threadIdx.x; i < n; i += blocks * blockDim.x) {
    float v = 0.f;
    for (int s = 0; s < splits; ++s) v += ws[s * n + i];
    if (i < nw) w[i] = static_cast<T>(v);
    else b[i - nw] = static_cast<T>(v);
  }
}

template <class T>
__global__ void wgrad_sum_splits_kernel(const float* __restrict__ ws, int splits, int64_t nw, int64_t nb,
                                        T* __restrict__ w, T* __restrict__ b) {
  wgrad_sum_splits_at<T>(blockIdx.x, gridDim.x, ws, splits, nw, nb, w, b);
}

// Note [conv weight gradient in one launch]: the image splits' partials and their sum were two
// launches, the sum waiting for every split. Now they are the two phases of one grid (Note
// [two-phase launch] in kernels/common/block_phases.cuh): the direct kernel's blocks, each at the
// (split, k slice, c slice) it had as blockIdx, then `sum_blocks` blocks of the same size adding
// the splits in order, as wgrad_sum_splits_kernel did (the same bits). Unlike one last block per
// tile (Note [split-K]), the sum is spread over many blocks: as many as the separate kernel had, up
// to one wave. Those blocks reserve the direct kernel's shared memory, which they do not use; but a
// block becomes a sum block only after every split's block has started, so it never keeps one
// from starting. A capture on a stream without tickets yet takes the two launches.
template <class T, int KS, int TK>
__global__ void __launch_bounds__(256, 2)
    direct_wgrad_one_launch_kernel(const T* __restrict__ gy, const T* __restrict__ x, float* __restrict__ ws,
                                   DirectWgradGeom g, PooledGrad u, T* __restrict__ w, T* __restrict__ b,
                                   int sum_blocks, cuda::TwoPhaseGrid pg) {
  const cuda::PhaseBlock at = cuda::begin_phase_block(pg);
  const int64_t nw = static_cast<int64_t>(g.K) * g.C * KS * KS, nb = g.bias ? g.K : 0;
  const int kslices = (g.K + g.KB - 1) / g.KB;  // the splits' grid: (splits, kslices, cslices)
  if (at.first)
    direct_wgrad_at<T, KS, TK>(uint3{static_cast<unsigned>(at.x), static_cast<unsigned>(at.y % kslices),
                                     static_cast<unsigned>(at.y / kslices)},
                               gy, x, ws, g, u);
  else wgrad_sum_splits_at<T>(static_cast<int64_t>(at.y) * g.splits + at.x, sum_blocks, ws, g.splits, nw, nb, w, b);
  cuda::end_phase_block(pg, at);
}

int wgrad_tk(int KS) { return KS == 3 ? kWgTK3 : kWgTK5; }

size_t wgrad_smem(const DirectWgradGeom& d, int KS) {
  const int TK = wgrad_tk(KS);
  const size_t planes = sizeof(float) * (static_cast<size_t>(d.CB) * d.xpitch + static_cast<size_t>(d.KB) * d.gpitch);
  const size_t units = static_cast<size_t>(d.KB / TK) * d.CB * d.PS;
  const size_t reduction = units * d.rpitch + static_cast<size_t>(d.PS | 1) * d.KB;  // dW's and db's row shares
  return std::max(planes, sizeof(float) * reduction);
}

// The shared-memory pitches for the geometry's thread mapping (Note [direct plane pitch]); the
// natural ones where the padded planes would not fit.
void wgrad_pitches(DirectWgradGeom& d, int KS) {
  const int TK = wgrad_tk(KS), kgroups = d.KB / TK;
  const int units = kgroups * d.CB * d.PS;
  const int V = TK * KS * KS;
  const DirectWgradGeom natural = d;
  // lanes: k group tid % kgroups, input channel (tid / kgroups) % CB, row share tid / (kgroups CB);
  // first the row pitches (planes at their natural size), then the plane pitches
  auto cc = [&](int tid) { return (tid / kgroups) % d.CB; };
  auto ps = [&](int tid) { return tid / (kgroups * d.CB); };
  auto kg = [&](int tid) { return tid % kgroups; };
  d.rpitch = V | 1;
  d.Wp = pick_pitch(d.Wp, units, [&](int tid, int pitch) { return cc(tid) * d.Hp * pitch + ps(tid) * pitch; });
  d.xpitch = pick_pitch(d.Hp * d.Wp, units, [&](int tid, int pitch) { return cc(tid) * pitch + ps(tid) * d.Wp; });
  d.gq = pick_pitch(d.Q, units, [&](int tid, int pitch) { return kg(tid) * TK * d.P * pitch + ps(tid) * pitch; });
  d.gpitch = pick_pitch(d.P * d.gq, units, [&](int tid, int pitch) { return kg(tid) * TK * pitch + ps(tid) * d.gq; });
  if (wgrad_smem(d, KS) > kDirectSmemLimit) d = natural;
}

// Slices: up to 64 output and 8 input channels per block (halved until the planes fit shared
// memory); row shares fill up to 256 threads; image splits give ~2 blocks per SM.
DirectWgradGeom compute_wgrad_geom(const ConvGeom& g, int sms) {
  const int KS = static_cast<int>(g.R), TK = wgrad_tk(KS);
  DirectWgradGeom d{};
  d.N = static_cast<int>(g.N);
  d.C = static_cast<int>(g.C);
  d.H = static_cast<int>(g.H);
  d.W = static_cast<int>(g.W);
  d.K = static_cast<int>(g.K);
  d.P = static_cast<int>(g.P);
  d.Q = static_cast<int>(g.Q);
  d.pad = static_cast<int>(g.ph);
  d.Hp = d.P + KS - 1;
  d.Wp = d.Q + KS - 1;
  d.xpitch = d.Hp * d.Wp;  // natural pitches while the slices are sized
  d.gq = d.Q;
  d.gpitch = d.P * d.Q;
  d.rpitch = TK * KS * KS;
  d.KB = std::min(64, (d.K + TK - 1) / TK * TK);
  d.CB = std::min(8, d.C);
  d.PS = 1;
  while (wgrad_smem(d, KS) > kDirectSmemLimit && d.KB > TK) d.KB = std::max(TK, d.KB / 2 / TK * TK);
  while (wgrad_smem(d, KS) > kDirectSmemLimit && d.CB > 1) d.CB /= 2;
  const int pairs = (d.KB / TK) * d.CB;  // <= 32 x 8 = 256
  d.PS = std::max(1, std::min(d.P, 256 / pairs));
  while (d.PS > 1 && wgrad_smem(d, KS) > kDirectSmemLimit) --d.PS;
  wgrad_pitches(d, KS);
  const int slices = ((d.K + d.KB - 1) / d.KB) * ((d.C + d.CB - 1) / d.CB);
  d.splits = std::max(1, std::min(d.N, (2 * sms + slices - 1) / slices));
  d.ipb = std::max(1, (d.N + d.splits - 1) / d.splits);
  d.splits = std::max(1, (d.N + d.ipb - 1) / d.ipb);
  return d;
}

DirectWgradGeom wgrad_geom(const ConvGeom& g, int sms) {
  return cached_geom<DirectWgradGeom>(std::array<int64_t, 10>{g.N, g.C, g.H, g.W, g.K, g.P, g.Q, g.ph, g.R, sms},
                                      [&] { return compute_wgrad_geom(g, sms); });
}

bool direct_wgrad_supports(const KernelCall& c) {
  ConvGeom g = bww_geom(c);
  g.channels_last = runs_channels_last(c.in[1]);
  return direct_shape_ok(g) && wgrad_smem(wgrad_geom(g, 1), static_cast<int>(g.R)) <= kDirectSmemLimit;
}

void direct_backward_weight(const KernelCall& c) {
  if (!direct_pooling_ok(c)) return conv_unpooled_apart(c, direct_backward_weight);
  ConvArgs a = convcuda::backward_weight_args(c);
  const ConvGeom& g = a.g;
  cuda::DeviceGuard scope(a.w.device().index);
  Tensor db = c.out.size() > 1 ? c.out[1] : Tensor();  // Note [conv bias gradient]
  if (g.N == 0) {
    Tensor w = a.w;
    w.zero_();
    if (db.defined()) db.zero_();
    return;
  }
  const int KS = static_cast<int>(g.R);
  DirectWgradGeom d = wgrad_geom(g, cuda::sm_count(a.w.device().index));
  d.bias = db.defined() ? 1 : 0;
  const size_t smem = wgrad_smem(d, KS);
  EMBER_CHECK(smem <= kDirectSmemLimit, "conv2d_backward_weight direct: shared memory ", smem, " bytes over the limit");
  const int units = (d.KB / wgrad_tk(KS)) * d.CB * d.PS;
  const int64_t nw = g.K * g.C * KS * KS, nb = d.bias ? g.K : 0;
  Tensor ws = empty({d.splits * (nw + nb)}, TensorOptions().dtype(DType::f32).device(a.w.device()));
  cudaStream_t st = cuda::stream_for(a.w);
  Tensor ind;
  const PooledGrad u = pooled_grad(c, ind);
  const int threads = (units + 31) / 32 * 32;
  dim3 grid(d.splits, (d.K + d.KB - 1) / d.KB, (d.C + d.CB - 1) / d.CB);
  unsigned* tickets = cuda::stream_tickets(a.w.device().index, st);
  dispatch_half_float(a.w.dtype(), "conv2d_backward_weight", [&](auto tag) {
    using T = decltype(tag);
    T* bp = d.bias ? mp<T>(db) : static_cast<T*>(nullptr);
    if (tickets != nullptr) {  // Note [conv weight gradient in one launch]
      auto kern = KS == 3 ? direct_wgrad_one_launch_kernel<T, 3, kWgTK3> : direct_wgrad_one_launch_kernel<T, 5, kWgTK5>;
      EMBER_CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
      const unsigned first = grid.x * grid.y * grid.z;
      // one wave of sum blocks, a grid-stride loop each: each holds the direct kernel's shared
      // memory, so an SM keeps 2 (the launch bounds), where the separate sum kernel kept 8
      const int dev = a.w.device().index;
      const unsigned sums = std::min(cuda::grid_for(nw + nb, threads, dev), 2u * cuda::sm_count(dev));
      cuda::launch(kern, first + sums, threads, smem, st, cp<T>(a.y), cp<T>(a.x), mp<float>(ws), d, u, mp<T>(a.w), bp,
                   static_cast<int>(sums), cuda::TwoPhaseGrid{tickets, first, grid.x});
      return;
    }
    auto kern = KS == 3 ? direct_wgrad_kernel<T, 3, kWgTK3> : direct_wgrad_kernel<T, 5, kWgTK5>;
    EMBER_CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    cuda::launch(kern, grid, threads, smem, st, cp<T>(a.y), cp<T>(a.x), mp<float>(ws), d, u);
    cuda::launch(wgrad_sum_splits_kernel<T>, cuda::grid_for(nw + nb, 256, a.w.device().index), 256, 0, st,
                 cp<float>(ws), d.splits, nw, nb, mp<T>(a.w), bp);
  });
}

}  // namespace

void register_cuda_conv2d(OpInfo& info) {
  info.add_variant({.name = "direct",
                    .device = DeviceType::cuda,
                    .fn = direct_forward,
                    .dtypes = {DType::f32, DType::f16, DType::bf16},
                    .supports = direct_forward_supports,
                    .note = "MNIST-sized: planes and weights in shared memory, 8 ch (1 if fewer) x 7 px per thread"});
  info.add_variant({.name = "igemm_mma",
                    .device = DeviceType::cuda,
                    .fn = mma_forward,
                    .dtypes = {DType::f16, DType::bf16},
                    .supports = [](const KernelCall& c) { return igemm_supports(c, fwd_geom); },
                    .note = "implicit GEMM, mma.sync m16n8k16 tensor cores, fp32 accumulation"});
  info.add_variant({.name = "igemm_simt",
                    .device = DeviceType::cuda,
                    .fn = simt_forward,
                    .dtypes = {DType::f32, DType::f64},
                    .supports = [](const KernelCall& c) { return igemm_supports(c, fwd_geom); },
                    .note = "implicit GEMM on FMA units, 128x128 / 64x64 tiles, register-staged double buffering"});
#if EMBER_WITH_CUDNN
  convcuda::register_cudnn_forward(info);
#endif
}

void register_cuda_conv2d_backward_input(OpInfo& info) {
  info.add_variant({.name = "direct",
                    .device = DeviceType::cuda,
                    .fn = direct_backward_input,
                    .dtypes = {DType::f32, DType::f16, DType::bf16},
                    .supports = direct_backward_input_supports,
                    .note = "the direct kernel on grad_output, flipped weight, channels split over warps"});
  info.add_variant({.name = "igemm_mma",
                    .device = DeviceType::cuda,
                    .fn = unpool_apart<mma_backward_input>,
                    .dtypes = {DType::f16, DType::bf16},
                    .supports = [](const KernelCall& c) { return igemm_supports(c, bwi_geom); },
                    .note = "implicit GEMM (dgrad), tensor cores"});
  info.add_variant({.name = "igemm_simt",
                    .device = DeviceType::cuda,
                    .fn = unpool_apart<simt_backward_input>,
                    .dtypes = {DType::f32, DType::f64},
                    .supports = [](const KernelCall& c) { return igemm_supports(c, bwi_geom); },
                    .note = "implicit GEMM (dgrad), FMA units"});
#if EMBER_WITH_CUDNN
  convcuda::register_cudnn_backward_input(info);
#endif
}

void register_cuda_conv2d_backward_weight(OpInfo& info) {
  info.add_variant({.name = "direct",
                    .device = DeviceType::cuda,
                    .fn = direct_backward_weight,
                    .dtypes = {DType::f32, DType::f16, DType::bf16},
                    .supports = direct_wgrad_supports,
                    .note = "MNIST-sized: sliding windows over shared planes, image splits summed in order"});
  info.add_variant({.name = "igemm_mma",
                    .device = DeviceType::cuda,
                    .fn = unpool_apart<mma_backward_weight>,
                    .dtypes = {DType::f16, DType::bf16},
                    .supports = [](const KernelCall& c) { return igemm_supports(c, bww_geom); },
                    .note = "implicit GEMM (wgrad), tensor cores, deterministic split-K"});
  info.add_variant({.name = "igemm_simt",
                    .device = DeviceType::cuda,
                    .fn = unpool_apart<simt_backward_weight>,
                    .dtypes = {DType::f32, DType::f64},
                    .supports = [](const KernelCall& c) { return igemm_supports(c, bww_geom); },
                    .note = "implicit GEMM (wgrad), FMA units, deterministic split-K"});
#if EMBER_WITH_CUDNN
  convcuda::register_cudnn_backward_weight(info);
#endif
}

void register_cuda_conv2d_max_pool2d(OpInfo& info) {
  info.add_variant({.name = "direct",
                    .device = DeviceType::cuda,
                    .fn = direct_conv_pool,
                    .dtypes = {DType::f32, DType::f16, DType::bf16},
                    .supports = direct_conv_pool_supports,
                    .note = "conv2d's direct forward pooling 2x2 windows through shared memory: one launch"});
  info.add_variant({.name = "ops",
                    .device = DeviceType::cuda,
                    .fn = conv_then_pool_ops,
                    .dtypes = kFloatTypes,
                    .note = "conv2d, then max_pool2d, each through the registry"});
}

}  // namespace ember
