// batch_norm on CUDA: fused, deterministic (no float atomics), one launch per direction in two
// phases (Note [batch norm in one launch]), or the phases as two kernels.
//
// Layouts (batch_norm.h, BnGeom): "planar" NCHW (each channel is N runs of L contiguous values)
// and "columnar" (channels fastest: channels-last 4-D, or 2-D (N, C)).
//   forward, training
//     1. partial statistics: blocks over (channel, image split) [planar: one warp per image, lanes
//        along the plane] or (32-channel tile, row split) [columnar: 32 x 8 threads, lanes along
//        channels, coalesced]; Welford per thread, merged across the block in a fixed order, one
//        (mean, M2, count) per block into a workspace
//     2. normalise: every block first merges its channel's partials in split order (all blocks get
//        the same bits), block 0 of the channel writes mean / invstd and updates the running stats
//        (momentum, unbiased variance); then y = (x - mean) invstd w + b over the block's share
//   forward, eval: one elementwise launch, each element's affine from the running buffers, its
//     first threads writing mean / invstd
//   backward: 1. partial (sum g, sum g (x - mean)) per block; 2. merge, dweight / dbias from block
//     0, dx = w invstd (g - sum g / M - xhat dweight / M) (training) or w invstd g (eval)
// Statistics and parameters run in f32 (f64 for f64 inputs); f16/bf16 parameters and running stats
// are converted on the way in and out (f32 ones, as AMP keeps them, are used in place).
// batch_norm_max_pool2d (Note [max pooling in the batch norm backward] in batch_norm.h), NCHW and
// windows that do not overlap: the normalise kernel pools (apply_pool_planar) and writes only the
// pooled output and indices; the backward's two planar kernels read g as the pooled gradient
// (BnGrad), in the same order as the dense one, so the sums and dx are the unfused ones bit for bit.
// batch_norm_global_avg_pool2d (Note [global average pooling in the batch norm backward]), NCHW:
// the normalise kernel relus and sums each plane (apply_avg_planar) and writes only the means; the
// backward's kernels, planar and columnar, read g as a plane's gradient / L masked by the relu
// (BnGrad), so neither the normalised activations nor their gradient reach memory.
// Memory bound: the forward reads x twice and writes y; the backward reads g and x twice and writes
// dx. A fused single-pass version would keep x in shared memory between the passes; left for later.
//
// Note [batch norm in one launch]: each direction's second kernel needs every partial of its
// channel, so it ran as a launch of its own after the first. Now the two are one grid of twice the
// blocks: the partial sums' blocks first, then the normalise (dx) blocks, which wait until every
// partial is written (Note [two-phase launch] in kernels/common/block_phases.cuh); each block runs
// the code its kernel alone ran, at the same (x, y), so the results are those of the two launches
// bit for bit. A launch less a direction: two a training step per batch norm layer, six for
// mnist_train's fast model. Each phase is ~4 blocks an SM (bn_dims); every statistics block has
// started before any normalise block draws its place, so those that start early wait on their SMs
// for blocks already running. The counters are the stream's tickets; a capture on a stream
// without them yet keeps two kernels. Eval's statistics are the running ones, so it needs no
// phases: one elementwise kernel reads them per element and also writes mean / invstd.
// Napkin math: docs/perf.md ("Napkin math behind the kernels").
#include <algorithm>
#include <optional>

#include "core/cuda/device_guard.h"
#include "core/cuda/kernel.cuh"
#include "kernels/common/aligned_vec.cuh"
#include "kernels/common/block_phases.cuh"
#include "kernels/common/current_stream.cuh"
#include "kernels/common/grid_size.cuh"
#include "kernels/common/memory_format.h"
#include "kernels/ops/batch_norm.h"
#include "kernels/ops/pool.h"
#include "kernels/registry.h"

#if EMBER_WITH_CUDNN
#include "kernels/common/cudnn_utils.h"
#endif

namespace ember {

namespace {

template <class S>
struct Wf {
  S mean, m2;
  int n;
};

template <class S>
__device__ __forceinline__ Wf<S> wf_push(Wf<S> a, S x) {
  a.n += 1;
  const S d = x - a.mean;
  a.mean += d / static_cast<S>(a.n);
  a.m2 += d * (x - a.mean);
  return a;
}

template <class S>
__device__ __forceinline__ Wf<S> wf_merge(Wf<S> a, Wf<S> b) {
  if (b.n == 0) return a;
  if (a.n == 0) return b;
  const int n = a.n + b.n;
  const S d = b.mean - a.mean;
  const S f = static_cast<S>(b.n) / static_cast<S>(n);
  a.mean += d * f;
  a.m2 += b.m2 + d * d * static_cast<S>(a.n) * f;
  a.n = n;
  return a;
}

template <class S>
__device__ __forceinline__ Wf<S> wf_shfl_down(Wf<S> a, int off) {
  return {__shfl_down_sync(0xffffffffu, a.mean, off), __shfl_down_sync(0xffffffffu, a.m2, off),
          __shfl_down_sync(0xffffffffu, a.n, off)};
}

template <class S>
struct Sums {
  S g, gx;
};

template <class S>
__device__ __forceinline__ Sums<S> sums_merge(Sums<S> a, Sums<S> b) {
  return {a.g + b.g, a.gx + b.gx};
}
template <class S>
__device__ __forceinline__ Sums<S> sums_shfl_down(Sums<S> a, int off) {
  return {__shfl_down_sync(0xffffffffu, a.g, off), __shfl_down_sync(0xffffffffu, a.gx, off)};
}

template <class S>
__device__ __forceinline__ S rsqrt_s(S v) {
  if constexpr (std::is_same_v<S, double>) return 1.0 / sqrt(v);
  else return rsqrtf(v);
}

constexpr int kPlanarThreads = 256;
constexpr int kColTile = 32, kColRows = 8;

// Block-wide merge of per-thread accumulators (planar blocks: 1-D, kPlanarThreads); result in thread 0.
template <class A, class Merge, class Shfl>
__device__ __forceinline__ A block_merge(A a, Merge merge, Shfl shfl) {
  EMBER_SHARED(A[kPlanarThreads / 32], warps);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  EMBER_UNROLL
  for (int off = 16; off > 0; off >>= 1) a = merge(a, shfl(a, off));
  if (lane == 0) warps[warp] = a;
  __syncthreads();
  if (threadIdx.x == 0)
    for (int w = 1; w < static_cast<int>(blockDim.x >> 5); ++w) a = merge(a, warps[w]);
  return a;
}

struct BnDims {
  int N, C, L;  // planar: x[(n C + c) L + l]; columnar: x[m C + c] with m < M = N L
  int64_t M;
  int per_split;  // images (planar) or rows (columnar) per split
  int splits;
};

// The per-channel constants every apply kernel needs, from the merged statistics.
// y = (x - mean) scale + bias (subtracting first keeps precision when |mean| >> std)
template <class S>
struct Affine {
  S mean, scale, bias;
  // Every kernel normalises through this one expression, so a recomputation (the relu's mask in
  // the backward) gets the forward's bits.
  __device__ __forceinline__ S apply(S x) const { return (x - mean) * scale + bias; }
};

// ---- forward ----

template <class T, class S>
__device__ __forceinline__ void stats_planar_at(int bx, int by, const T* __restrict__ x, BnDims d,
                                                Wf<S>* __restrict__ ws) {
  const int c = bx, sp = by;
  const int n0 = sp * d.per_split, n1 = ::min(d.N, n0 + d.per_split);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  Wf<S> a{S(0), S(0), 0};
  for (int n = n0 + warp; n < n1; n += nw) {
    const T* row = x + (static_cast<int64_t>(n) * d.C + c) * d.L;
    for (int l = lane; l < d.L; l += 32) a = wf_push(a, static_cast<S>(row[l]));
  }
  a = block_merge(
      a, [](Wf<S> p, Wf<S> q) { return wf_merge(p, q); }, [](Wf<S> p, int o) { return wf_shfl_down(p, o); });
  if (threadIdx.x == 0) ws[c * d.splits + sp] = a;
}

template <class T, class S>
__global__ void __launch_bounds__(kPlanarThreads)
    stats_planar(const T* __restrict__ x, BnDims d, Wf<S>* __restrict__ ws) {
  stats_planar_at<T, S>(blockIdx.x, blockIdx.y, x, d, ws);
}

template <class T, class S>
__device__ __forceinline__ void stats_columnar_at(int bx, int by, const T* __restrict__ x, BnDims d,
                                                  Wf<S>* __restrict__ ws) {
  EMBER_SHARED(Wf<S>[kColRows][kColTile + 1], sm);
  const int c = bx * kColTile + threadIdx.x, sp = by;
  const int64_t m0 = static_cast<int64_t>(sp) * d.per_split, m1 = ::min(d.M, m0 + d.per_split);
  Wf<S> a{S(0), S(0), 0};
  if (c < d.C)
    for (int64_t m = m0 + threadIdx.y; m < m1; m += kColRows) a = wf_push(a, static_cast<S>(x[m * d.C + c]));
  sm[threadIdx.y][threadIdx.x] = a;
  __syncthreads();
  if (threadIdx.y == 0 && c < d.C) {
    for (int r = 1; r < kColRows; ++r) a = wf_merge(a, sm[r][threadIdx.x]);
    ws[c * d.splits + sp] = a;
  }
}

template <class T, class S>
__global__ void stats_columnar(const T* __restrict__ x, BnDims d, Wf<S>* __restrict__ ws) {
  stats_columnar_at<T, S>(blockIdx.x, blockIdx.y, x, d, ws);
}

struct FwdParams {
  double eps, momentum;
  int update;                // update running stats
  int64_t* count = nullptr;  // num_batches_tracked += 1 (Note [batch norm counts its batches])
};

// Merges channel c's partials; writes the statistics (and running stats) when `owner`.
template <class S>
__device__ __forceinline__ Affine<S> finalize(const Wf<S>* ws, int c, int splits, const S* w, const S* b, S* rm, S* rv,
                                              S* save_mean, S* save_invstd, FwdParams fp, bool owner) {
  Wf<S> a{S(0), S(0), 0};
  for (int s = 0; s < splits; ++s) a = wf_merge(a, ws[c * splits + s]);
  const S var = a.m2 / static_cast<S>(a.n);
  const S inv = rsqrt_s(var + static_cast<S>(fp.eps));
  const S wc = w != nullptr ? w[c] : S(1), bc = b != nullptr ? b[c] : S(0);
  if (owner) {
    save_mean[c] = a.mean;
    save_invstd[c] = inv;
    if (c == 0 && fp.count != nullptr) ++*fp.count;  // one thread of the grid writes channel 0
    if (fp.update) {
      const S mom = static_cast<S>(fp.momentum);
      const S unbiased = a.m2 / static_cast<S>(a.n - 1);
      rm[c] = (S(1) - mom) * rm[c] + mom * a.mean;
      rv[c] = (S(1) - mom) * rv[c] + mom * unbiased;
    }
  }
  return {a.mean, inv * wc, bc};
}

template <class T, class S>
__device__ __forceinline__ void apply_planar_at(int bx, int by, const T* __restrict__ x, T* __restrict__ y, BnDims d,
                                                const Wf<S>* __restrict__ ws, const S* w, const S* b, S* rm, S* rv,
                                                S* save_mean, S* save_invstd, FwdParams fp) {
  EMBER_SHARED(Affine<S>, af);
  const int c = bx, sp = by;
  if (threadIdx.x == 0) af = finalize(ws, c, d.splits, w, b, rm, rv, save_mean, save_invstd, fp, sp == 0);
  __syncthreads();
  const Affine<S> k = af;
  const int n0 = sp * d.per_split, n1 = ::min(d.N, n0 + d.per_split);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  for (int n = n0 + warp; n < n1; n += nw) {
    const int64_t base = (static_cast<int64_t>(n) * d.C + c) * d.L;
    for (int l = lane; l < d.L; l += 32) y[base + l] = static_cast<T>(k.apply(static_cast<S>(x[base + l])));
  }
}

template <class T, class S>
__global__ void __launch_bounds__(kPlanarThreads)
    apply_planar(const T* __restrict__ x, T* __restrict__ y, BnDims d, const Wf<S>* __restrict__ ws, const S* w,
                 const S* b, S* rm, S* rv, S* save_mean, S* save_invstd, FwdParams fp) {
  apply_planar_at<T, S>(blockIdx.x, blockIdx.y, x, y, d, ws, w, b, rm, rv, save_mean, save_invstd, fp);
}

// batch_norm_max_pool2d's output: the pooled y and its indices, of disjoint kh x kw windows over
// H x W planes (NCHW).
template <class T>
struct BnPoolOut {
  T* y;
  int64_t* ind;
  int H, W, kh, kw, PH, PW;
  int relu;
  int pairs;  // kw = 2 and every window row 2-element aligned: read as one vector
};

// eval: the affine constants from the running statistics (batch_norm_max_pool2d's fused kernel).
template <class S>
__device__ __forceinline__ Affine<S> eval_affine(int c, const S* w, const S* b, const S* rm, const S* rv, S* save_mean,
                                                 S* save_invstd, double eps, bool owner) {
  const S inv = rsqrt_s(rv[c] + static_cast<S>(eps));
  if (owner) {
    save_mean[c] = rm[c];
    save_invstd[c] = inv;
  }
  return {rm[c], inv * (w != nullptr ? w[c] : S(1)), b != nullptr ? b[c] : S(0)};
}

// The block's channel constants for a pooling normalise kernel (planar: channel c, split sp): the
// merged statistics (training), or the running ones (eval: ws == nullptr); split 0 writes them.
template <class S>
__device__ __forceinline__ Affine<S> block_affine(int c, int sp, const Wf<S>* ws, const BnDims& d, const S* w,
                                                  const S* b, S* rm, S* rv, S* save_mean, S* save_invstd,
                                                  const FwdParams& fp) {
  EMBER_SHARED(Affine<S>, af);
  const bool owner = sp == 0;
  if (threadIdx.x == 0)
    af = ws != nullptr ? finalize(ws, c, d.splits, w, b, rm, rv, save_mean, save_invstd, fp, owner)
                       : eval_affine(c, w, b, rm, rv, save_mean, save_invstd, fp.eps, owner);
  __syncthreads();
  return af;
}

// apply_planar with the pooling: each lane takes one window of an image's plane, normalises its
// values, rounds them to T as the unfused y would be stored, and keeps the maximum as max_pool2d
// does (first maximum, a NaN wins, then the relu and index -1). ws == nullptr: eval.
template <class T, class S>
__device__ __forceinline__ void apply_pool_planar_at(int bx, int by, const T* __restrict__ x, BnPoolOut<T> po, BnDims d,
                                                     const Wf<S>* __restrict__ ws, const S* w, const S* b, S* rm, S* rv,
                                                     S* save_mean, S* save_invstd, FwdParams fp) {
  const int c = bx, sp = by;
  const Affine<S> k = block_affine(c, sp, ws, d, w, b, rm, rv, save_mean, save_invstd, fp);
  const int n0 = sp * d.per_split, n1 = ::min(d.N, n0 + d.per_split);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  const int pooled = po.PH * po.PW;
  for (int n = n0 + warp; n < n1; n += nw) {
    const int64_t plane = static_cast<int64_t>(n) * d.C + c;
    const T* xp = x + plane * d.L;
    for (int o = lane; o < pooled; o += 32) {
      const int i = o / po.PW, j = o - i * po.PW;
      S best = -INFINITY;
      int64_t idx = static_cast<int64_t>(i * po.kh) * po.W + j * po.kw;
      auto take = [&](T xv, int64_t at) {
        const S v = static_cast<S>(static_cast<T>(k.apply(static_cast<S>(xv))));
        if (v > best || v != v) {
          best = v;
          idx = at;
        }
      };
      for (int r = 0; r < po.kh; ++r) {
        const int64_t row = static_cast<int64_t>(i * po.kh + r) * po.W + j * po.kw;
        if (po.pairs) {  // one access per row of a 2-wide window (Note [whole vector accesses])
          const detail::AlignedVec<T, 2> pair = *reinterpret_cast<const detail::AlignedVec<T, 2>*>(xp + row);
          take(pair.v[0], row);
          take(pair.v[1], row + 1);
        } else {
          for (int q = 0; q < po.kw; ++q) take(xp[row + q], row + q);
        }
      }
      if (po.relu) pool::relu_max(best, idx);
      po.y[plane * pooled + o] = static_cast<T>(best);
      po.ind[plane * pooled + o] = idx;
    }
  }
}

template <class T, class S>
__global__ void __launch_bounds__(kPlanarThreads)
    apply_pool_planar(const T* __restrict__ x, BnPoolOut<T> po, BnDims d, const Wf<S>* __restrict__ ws, const S* w,
                      const S* b, S* rm, S* rv, S* save_mean, S* save_invstd, FwdParams fp) {
  apply_pool_planar_at<T, S>(blockIdx.x, blockIdx.y, x, po, d, ws, w, b, rm, rv, save_mean, save_invstd, fp);
}

// batch_norm_global_avg_pool2d's output: the plane means [N, C] (relu first when `relu`).
template <class T>
struct BnAvgOut {
  T* y;
  int relu;
};

// apply_planar with the global average: a warp per image's plane normalises its values, rounds them
// to T as the unfused y would be stored, applies the relu (NaN propagates, as the relu op) and sums
// them in adaptive_avg_pool2d's order: lanes along the plane, then a shuffle tree, where the plane
// holds pool::kLaneSumMinValues values or more (global_avg_nchw_kernel in pool.cu), else serially
// in lane 0 (its per-output kernel). ws == nullptr: eval.
template <class T, class S>
__device__ __forceinline__ void apply_avg_planar_at(int bx, int by, const T* __restrict__ x, BnAvgOut<T> po, BnDims d,
                                                    const Wf<S>* __restrict__ ws, const S* w, const S* b, S* rm, S* rv,
                                                    S* save_mean, S* save_invstd, FwdParams fp) {
  const int c = bx, sp = by;
  const Affine<S> k = block_affine(c, sp, ws, d, w, b, rm, rv, save_mean, save_invstd, fp);
  const int n0 = sp * d.per_split, n1 = ::min(d.N, n0 + d.per_split);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  const bool lanes = d.L >= pool::kLaneSumMinValues;
  auto value = [&](T xv) {
    const S v = static_cast<S>(static_cast<T>(k.apply(static_cast<S>(xv))));
    return po.relu == 0 || v > S(0) || v != v ? v : S(0);
  };
  for (int n = n0 + warp; n < n1; n += nw) {
    const int64_t plane = static_cast<int64_t>(n) * d.C + c;
    const T* xp = x + plane * d.L;
    S s = 0;
    if (lanes) {
      for (int l = lane; l < d.L; l += 32) s += value(xp[l]);
      EMBER_UNROLL
      for (int off = 16; off > 0; off >>= 1) s += __shfl_down_sync(0xffffffffu, s, off);
    } else if (lane == 0) {
      for (int l = 0; l < d.L; ++l) s += value(xp[l]);
    }
    if (lane == 0) po.y[plane] = static_cast<T>(s / static_cast<S>(d.L));
  }
}

template <class T, class S>
__global__ void __launch_bounds__(kPlanarThreads)
    apply_avg_planar(const T* __restrict__ x, BnAvgOut<T> po, BnDims d, const Wf<S>* __restrict__ ws, const S* w,
                     const S* b, S* rm, S* rv, S* save_mean, S* save_invstd, FwdParams fp) {
  apply_avg_planar_at<T, S>(blockIdx.x, blockIdx.y, x, po, d, ws, w, b, rm, rv, save_mean, save_invstd, fp);
}

template <class T, class S>
__device__ __forceinline__ void apply_columnar_at(int bx, int by, const T* __restrict__ x, T* __restrict__ y, BnDims d,
                                                  const Wf<S>* __restrict__ ws, const S* w, const S* b, S* rm, S* rv,
                                                  S* save_mean, S* save_invstd, FwdParams fp) {
  EMBER_SHARED(Affine<S>[kColTile], af);
  const int c = bx * kColTile + threadIdx.x, sp = by;
  if (threadIdx.y == 0 && c < d.C)
    af[threadIdx.x] = finalize(ws, c, d.splits, w, b, rm, rv, save_mean, save_invstd, fp, sp == 0);
  __syncthreads();
  if (c >= d.C) return;
  const Affine<S> k = af[threadIdx.x];
  const int64_t m0 = static_cast<int64_t>(sp) * d.per_split, m1 = ::min(d.M, m0 + d.per_split);
  for (int64_t m = m0 + threadIdx.y; m < m1; m += kColRows)
    y[m * d.C + c] = static_cast<T>(k.apply(static_cast<S>(x[m * d.C + c])));
}

template <class T, class S>
__global__ void apply_columnar(const T* __restrict__ x, T* __restrict__ y, BnDims d, const Wf<S>* __restrict__ ws,
                               const S* w, const S* b, S* rm, S* rv, S* save_mean, S* save_invstd, FwdParams fp) {
  apply_columnar_at<T, S>(blockIdx.x, blockIdx.y, x, y, d, ws, w, b, rm, rv, save_mean, save_invstd, fp);
}

// eval: statistics from the running buffers
template <class S>
__device__ __forceinline__ void eval_stats_at(int64_t first, int64_t stride, const S* rm, const S* rv, S* save_mean,
                                              S* save_invstd, int C, double eps) {
  for (int64_t c = first; c < C; c += stride) {
    save_mean[c] = rm[c];
    save_invstd[c] = rsqrt_s(rv[c] + static_cast<S>(eps));
  }
}
template <class S>
__global__ void eval_stats_kernel(const S* rm, const S* rv, S* save_mean, S* save_invstd, int C, double eps) {
  eval_stats_at<S>(blockIdx.x * blockDim.x + threadIdx.x, int64_t{gridDim.x} * blockDim.x, rm, rv, save_mean,
                   save_invstd, C, eps);
}

// eval in one launch: y = (x - mean) invstd w + b elementwise, channel = (i / L) % C (planar) or
// i % C (columnar), mean and invstd read from the running buffers and computed per element as
// eval_stats_at writes them (the same expression, so the same bits), which the first C threads
// of the grid also do.
template <class T, class S>
__global__ void eval_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t n, int C, int L, bool columnar,
                            const S* rm, const S* rv, const S* w, const S* b, S* save_mean, S* save_invstd,
                            double eps) {
  const int64_t first = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x,
                stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  eval_stats_at<S>(first, stride, rm, rv, save_mean, save_invstd, C, eps);
  for (int64_t i = first; i < n; i += stride) {
    const int c = columnar ? static_cast<int>(i % C) : static_cast<int>((i / L) % C);
    const S invstd = rsqrt_s(rv[c] + static_cast<S>(eps));
    const Affine<S> k{rm[c], invstd * (w != nullptr ? w[c] : S(1)), b != nullptr ? b[c] : S(0)};
    y[i] = static_cast<T>(k.apply(static_cast<S>(x[i])));
  }
}

// ---- backward ----

// The backward's g: grad_output's; with ind the pooled gradient's where the index of the disjoint
// window holding l names it, else 0 (pool::unpooled_at); with avg the plane's gradient / L, rounded
// to T as adaptive_avg_pool2d_backward stores it, and 0 where relu is set and the relu's input, the
// forward's normalised value of x (k.apply), is not positive.
template <class T>
struct BnGrad {
  const T* g;
  const int64_t* ind;  // nullptr: g is dense, of x's shape (or avg's [N, C])
  int W, kh, kw, PH, PW;
  int avg, relu;

  // With avg: every position's gradient in plane n C + c, before the relu's mask (0 without avg).
  // Once a plane: f64's division is a called routine, which spilled inside the loop.
  template <class S>
  __device__ __forceinline__ S plane_grad(int64_t plane, int64_t L) const {
    return avg != 0 ? static_cast<S>(static_cast<T>(static_cast<S>(g[plane]) / static_cast<S>(L))) : S(0);
  }
  template <class S>
  __device__ __forceinline__ S masked(S pg, S xv, const Affine<S>& k) const {
    return relu != 0 && !(static_cast<S>(static_cast<T>(k.apply(xv))) > S(0)) ? S(0) : pg;
  }
  // planar: position l of plane (n, c); pg = plane_grad(plane, L)
  template <class S>
  __device__ __forceinline__ S at(int64_t plane, int64_t L, int l, S xv, const Affine<S>& k, S pg) const {
    if (avg != 0) return masked(pg, xv, k);
    if (ind == nullptr) return static_cast<S>(g[plane * L + l]);
    const int h = l / W;  // not l % W too: a second division made ptxas call a routine (a stack frame, spills)
    return pool::unpooled_at<S>(g, ind, plane * PH * PW, h, l - h * W, W, kh, kw, PH, PW);
  }
  // columnar: row m (= n L + l) of channel c; no max pooling here (m < 2^31: bn_supports)
  template <class S>
  __device__ __forceinline__ S at_row(int64_t m, int c, int C, int64_t L, S xv, const Affine<S>& k) const {
    if (avg != 0) {
      const int n = static_cast<int>(m) / static_cast<int>(L);
      return masked(plane_grad<S>(static_cast<int64_t>(n) * C + c, L), xv, k);
    }
    return static_cast<S>(g[m * C + c]);
  }
};

// The per-channel parameters the backward's kernels read. The bias only feeds the relu's mask (avg
// and relu), in its own dtype: S, or T (b_t), whose conversion to S is exact, so a 16-bit bias
// costs no conversion launch.
template <class T, class S>
struct BwdParams {
  const S *mean, *invstd, *w, *b;
  const T* b_t;
  // channel c's constants of the forward's normalisation (Affine), for the relu's mask
  __device__ __forceinline__ Affine<S> mask(int c) const {
    const S bias = b != nullptr ? b[c] : b_t != nullptr ? static_cast<S>(b_t[c]) : S(0);
    return {mean[c], invstd[c] * (w != nullptr ? w[c] : S(1)), bias};
  }
};

template <class T, class S>
__device__ __forceinline__ void bwd_sums_planar_at(int bx, int by, BnGrad<T> gy, const T* __restrict__ x,
                                                   BwdParams<T, S> p, BnDims d, Sums<S>* __restrict__ ws) {
  const int c = bx, sp = by;
  const int n0 = sp * d.per_split, n1 = ::min(d.N, n0 + d.per_split);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  const S mu = p.mean[c];
  const Affine<S> km = p.mask(c);
  Sums<S> a{S(0), S(0)};
  for (int n = n0 + warp; n < n1; n += nw) {
    const int64_t plane = static_cast<int64_t>(n) * d.C + c, base = plane * d.L;
    const S pg = gy.template plane_grad<S>(plane, d.L);
    for (int l = lane; l < d.L; l += 32) {
      const S xv = static_cast<S>(x[base + l]);
      const S g = gy.template at<S>(plane, d.L, l, xv, km, pg);
      a.g += g;
      a.gx += g * (xv - mu);
    }
  }
  a = block_merge(
      a, [](Sums<S> p, Sums<S> q) { return sums_merge(p, q); }, [](Sums<S> p, int o) { return sums_shfl_down(p, o); });
  if (threadIdx.x == 0) ws[c * d.splits + sp] = a;
}

template <class T, class S>
__global__ void __launch_bounds__(kPlanarThreads)
    bwd_sums_planar(BnGrad<T> gy, const T* __restrict__ x, BwdParams<T, S> p, BnDims d, Sums<S>* __restrict__ ws) {
  bwd_sums_planar_at<T, S>(blockIdx.x, blockIdx.y, gy, x, p, d, ws);
}

template <class T, class S>
__device__ __forceinline__ void bwd_sums_columnar_at(int bx, int by, BnGrad<T> gy, const T* __restrict__ x,
                                                     BwdParams<T, S> p, BnDims d, Sums<S>* __restrict__ ws) {
  EMBER_SHARED(Sums<S>[kColRows][kColTile + 1], sm);
  const int c = bx * kColTile + threadIdx.x, sp = by;
  const int64_t m0 = static_cast<int64_t>(sp) * d.per_split, m1 = ::min(d.M, m0 + d.per_split);
  Sums<S> a{S(0), S(0)};
  if (c < d.C) {
    const S mu = p.mean[c];
    const Affine<S> km = p.mask(c);
    for (int64_t m = m0 + threadIdx.y; m < m1; m += kColRows) {
      const S xv = static_cast<S>(x[m * d.C + c]);
      const S g = gy.template at_row<S>(m, c, d.C, d.L, xv, km);
      a.g += g;
      a.gx += g * (xv - mu);
    }
  }
  sm[threadIdx.y][threadIdx.x] = a;
  __syncthreads();
  if (threadIdx.y == 0 && c < d.C) {
    for (int r = 1; r < kColRows; ++r) a = sums_merge(a, sm[r][threadIdx.x]);
    ws[c * d.splits + sp] = a;
  }
}

template <class T, class S>
__global__ void bwd_sums_columnar(BnGrad<T> gy, const T* __restrict__ x, BwdParams<T, S> p, BnDims d,
                                  Sums<S>* __restrict__ ws) {
  bwd_sums_columnar_at<T, S>(blockIdx.x, blockIdx.y, gy, x, p, d, ws);
}

// dx = k1 g + k2 (x - mean) + k0
template <class S>
struct BwdCoef {
  S k1, k2, k0, mean;
};

template <class S>
__device__ __forceinline__ BwdCoef<S> bwd_finalize(const Sums<S>* ws, int c, int splits, const S* mean, const S* invstd,
                                                   const S* w, S* dweight, S* dbias, int64_t M, bool training,
                                                   bool owner) {
  Sums<S> a{S(0), S(0)};
  for (int s = 0; s < splits; ++s) a = sums_merge(a, ws[c * splits + s]);
  const S inv = invstd[c];
  const S dw = a.gx * inv, db = a.g;
  if (owner) {
    dweight[c] = dw;
    dbias[c] = db;
  }
  const S k = (w != nullptr ? w[c] : S(1)) * inv;
  const S m = static_cast<S>(M);
  if (!training) return {k, S(0), S(0), mean[c]};
  return {k, -k * inv * dw / m, -k * db / m, mean[c]};
}

template <class T, class S>
__device__ __forceinline__ void bwd_apply_planar_at(int bx, int by, BnGrad<T> gy, const T* __restrict__ x,
                                                    T* __restrict__ dx, BnDims d, const Sums<S>* __restrict__ ws,
                                                    BwdParams<T, S> p, S* dweight, S* dbias, int training) {
  EMBER_SHARED(BwdCoef<S>, co);
  const int c = bx, sp = by;
  if (threadIdx.x == 0)
    co = bwd_finalize(ws, c, d.splits, p.mean, p.invstd, p.w, dweight, dbias, d.M, training != 0, sp == 0);
  __syncthreads();
  const BwdCoef<S> k = co;
  const Affine<S> km = p.mask(c);
  const int n0 = sp * d.per_split, n1 = ::min(d.N, n0 + d.per_split);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  for (int n = n0 + warp; n < n1; n += nw) {
    const int64_t plane = static_cast<int64_t>(n) * d.C + c, base = plane * d.L;
    const S pg = gy.template plane_grad<S>(plane, d.L);
    for (int l = lane; l < d.L; l += 32) {
      const S xv = static_cast<S>(x[base + l]);
      dx[base + l] = static_cast<T>(k.k1 * gy.template at<S>(plane, d.L, l, xv, km, pg) + k.k2 * (xv - k.mean) + k.k0);
    }
  }
}

template <class T, class S>
__global__ void __launch_bounds__(kPlanarThreads)
    bwd_apply_planar(BnGrad<T> gy, const T* __restrict__ x, T* __restrict__ dx, BnDims d,
                     const Sums<S>* __restrict__ ws, BwdParams<T, S> p, S* dweight, S* dbias, int training) {
  bwd_apply_planar_at<T, S>(blockIdx.x, blockIdx.y, gy, x, dx, d, ws, p, dweight, dbias, training);
}

template <class T, class S>
__device__ __forceinline__ void bwd_apply_columnar_at(int bx, int by, BnGrad<T> gy, const T* __restrict__ x,
                                                      T* __restrict__ dx, BnDims d, const Sums<S>* __restrict__ ws,
                                                      BwdParams<T, S> p, S* dweight, S* dbias, int training) {
  EMBER_SHARED(BwdCoef<S>[kColTile], co);
  const int c = bx * kColTile + threadIdx.x, sp = by;
  if (threadIdx.y == 0 && c < d.C)
    co[threadIdx.x] = bwd_finalize(ws, c, d.splits, p.mean, p.invstd, p.w, dweight, dbias, d.M, training != 0, sp == 0);
  __syncthreads();
  if (c >= d.C) return;
  const BwdCoef<S> k = co[threadIdx.x];
  const Affine<S> km = p.mask(c);
  const int64_t m0 = static_cast<int64_t>(sp) * d.per_split, m1 = ::min(d.M, m0 + d.per_split);
  for (int64_t m = m0 + threadIdx.y; m < m1; m += kColRows) {
    const int64_t o = m * d.C + c;
    const S xv = static_cast<S>(x[o]);
    dx[o] = static_cast<T>(k.k1 * gy.template at_row<S>(m, c, d.C, d.L, xv, km) + k.k2 * (xv - k.mean) + k.k0);
  }
}

template <class T, class S>
__global__ void bwd_apply_columnar(BnGrad<T> gy, const T* __restrict__ x, T* __restrict__ dx, BnDims d,
                                   const Sums<S>* __restrict__ ws, BwdParams<T, S> p, S* dweight, S* dbias,
                                   int training) {
  bwd_apply_columnar_at<T, S>(blockIdx.x, blockIdx.y, gy, x, dx, d, ws, p, dweight, dbias, training);
}

// ---- each direction in one launch (Note [batch norm in one launch]) ----
//
// The partial sums' blocks are the first phase, the normalise (or dx) blocks the second, each at
// the (x, y) its kernel alone would have as blockIdx (Note [two-phase launch]). Launch bounds of
// one block an SM at least: with the thread bound alone ptxas held backward_planar at 48
// registers and spilled 24-28 bytes around division's slow-path call, and the pooling forms 8-16;
// so they take 37-64 registers (f64 54-96), none spilled.

template <class T, class S>
__global__ void __launch_bounds__(kPlanarThreads, 1)
    forward_planar(const T* __restrict__ x, T* __restrict__ y, BnDims d, Wf<S>* __restrict__ ws, const S* w, const S* b,
                   S* rm, S* rv, S* save_mean, S* save_invstd, FwdParams fp, cuda::TwoPhaseGrid g) {
  const cuda::PhaseBlock at = cuda::begin_phase_block(g);
  if (at.first) stats_planar_at<T, S>(at.x, at.y, x, d, ws);
  else apply_planar_at<T, S>(at.x, at.y, x, y, d, ws, w, b, rm, rv, save_mean, save_invstd, fp);
  cuda::end_phase_block(g, at);
}

template <class T, class S>
__global__ void __launch_bounds__(kPlanarThreads, 1)
    forward_pool_planar(const T* __restrict__ x, BnPoolOut<T> po, BnDims d, Wf<S>* __restrict__ ws, const S* w,
                        const S* b, S* rm, S* rv, S* save_mean, S* save_invstd, FwdParams fp, cuda::TwoPhaseGrid g) {
  const cuda::PhaseBlock at = cuda::begin_phase_block(g);
  if (at.first) stats_planar_at<T, S>(at.x, at.y, x, d, ws);
  else apply_pool_planar_at<T, S>(at.x, at.y, x, po, d, ws, w, b, rm, rv, save_mean, save_invstd, fp);
  cuda::end_phase_block(g, at);
}

template <class T, class S>
__global__ void __launch_bounds__(kPlanarThreads, 1)
    forward_avg_planar(const T* __restrict__ x, BnAvgOut<T> po, BnDims d, Wf<S>* __restrict__ ws, const S* w,
                       const S* b, S* rm, S* rv, S* save_mean, S* save_invstd, FwdParams fp, cuda::TwoPhaseGrid g) {
  const cuda::PhaseBlock at = cuda::begin_phase_block(g);
  if (at.first) stats_planar_at<T, S>(at.x, at.y, x, d, ws);
  else apply_avg_planar_at<T, S>(at.x, at.y, x, po, d, ws, w, b, rm, rv, save_mean, save_invstd, fp);
  cuda::end_phase_block(g, at);
}

template <class T, class S>
__global__ void __launch_bounds__(kColTile* kColRows, 1)
    forward_columnar(const T* __restrict__ x, T* __restrict__ y, BnDims d, Wf<S>* __restrict__ ws, const S* w,
                     const S* b, S* rm, S* rv, S* save_mean, S* save_invstd, FwdParams fp, cuda::TwoPhaseGrid g) {
  const cuda::PhaseBlock at = cuda::begin_phase_block(g);
  if (at.first) stats_columnar_at<T, S>(at.x, at.y, x, d, ws);
  else apply_columnar_at<T, S>(at.x, at.y, x, y, d, ws, w, b, rm, rv, save_mean, save_invstd, fp);
  cuda::end_phase_block(g, at);
}

template <class T, class S>
__global__ void __launch_bounds__(kPlanarThreads, 1)
    backward_planar(BnGrad<T> gy, const T* __restrict__ x, T* __restrict__ dx, BnDims d, Sums<S>* __restrict__ ws,
                    BwdParams<T, S> p, S* dweight, S* dbias, int training, cuda::TwoPhaseGrid g) {
  const cuda::PhaseBlock at = cuda::begin_phase_block(g);
  if (at.first) bwd_sums_planar_at<T, S>(at.x, at.y, gy, x, p, d, ws);
  else bwd_apply_planar_at<T, S>(at.x, at.y, gy, x, dx, d, ws, p, dweight, dbias, training);
  cuda::end_phase_block(g, at);
}

template <class T, class S>
__global__ void __launch_bounds__(kColTile* kColRows, 1)
    backward_columnar(BnGrad<T> gy, const T* __restrict__ x, T* __restrict__ dx, BnDims d, Sums<S>* __restrict__ ws,
                      BwdParams<T, S> p, S* dweight, S* dbias, int training, cuda::TwoPhaseGrid g) {
  const cuda::PhaseBlock at = cuda::begin_phase_block(g);
  if (at.first) bwd_sums_columnar_at<T, S>(at.x, at.y, gy, x, p, d, ws);
  else bwd_apply_columnar_at<T, S>(at.x, at.y, gy, x, dx, d, ws, p, dweight, dbias, training);
  cuda::end_phase_block(g, at);
}

// ---- host side ----

template <class T>
const T* cp(const Tensor& t) {
  return t.defined() ? static_cast<const T*>(t.data_ptr()) : nullptr;
}
template <class T>
T* mp(const Tensor& t) {
  return t.defined() ? static_cast<T*>(t.data_ptr()) : nullptr;
}

// A [C] parameter in the statistics dtype (converted when it is the input's 16-bit dtype).
Tensor as_stats(const Tensor& t, DType s) {
  if (!t.defined()) return t;
  if (t.dtype() == s) return t.is_contiguous() ? t : t.contiguous();
  return t.to(s).contiguous();
}

// Writes `computed` into `out` when they differ (the statistics-dtype copy of a 16-bit parameter,
// running statistic or gradient).
void write_back(const Tensor& computed, const Tensor& out) {
  if (computed.is_same(out)) return;
  Tensor t = out;
  t.copy_(computed);
}

// Splits of the reduction dim: ~4 blocks per SM in all, each split >= 8 images (planar) or 64 rows.
BnDims bn_dims(const BnGeom& g, int sms) {
  BnDims d{};
  d.N = static_cast<int>(g.N);
  d.C = static_cast<int>(g.C);
  d.L = static_cast<int>(g.L);
  d.M = g.M();
  const int64_t target = 4 * static_cast<int64_t>(sms);
  if (!g.channels_last) {
    const int64_t want = std::max<int64_t>(1, (target + g.C - 1) / g.C);
    const int64_t splits = std::clamp<int64_t>(want, 1, std::max<int64_t>(1, g.N / 8));
    d.per_split = static_cast<int>((g.N + splits - 1) / splits);
    d.splits = static_cast<int>((g.N + d.per_split - 1) / d.per_split);
  } else {
    const int64_t tiles = (g.C + kColTile - 1) / kColTile;
    const int64_t want = std::max<int64_t>(1, (target + tiles - 1) / tiles);
    const int64_t splits = std::clamp<int64_t>(want, 1, std::max<int64_t>(1, d.M / 64));
    d.per_split = static_cast<int>((d.M + splits - 1) / splits);
    d.splits = static_cast<int>((d.M + d.per_split - 1) / d.per_split);
  }
  return d;
}

bool bn_supports(const KernelCall& c) {
  const Tensor& x = c.op == OpId::batch_norm_backward ? c.in[1] : c.in[0];
  return x.numel() < INT32_MAX && x.shape()[1] < 65535 * int64_t{kColTile};
}

// What a fused normalise kernel writes in place of y (planar x): the max pooled output or the
// plane means; neither for batch_norm itself.
template <class T>
struct BnFusedOut {
  const BnPoolOut<T>* pool = nullptr;
  const BnAvgOut<T>* avg = nullptr;
  bool any() const { return pool != nullptr || avg != nullptr; }
};

// The fused normalise kernel of f over grid (channels, splits); ws == nullptr: eval.
template <class T, class S>
void launch_fused_apply(const BnFusedOut<T>& f, dim3 grid, cudaStream_t st, const T* x, const BnDims& d,
                        const Wf<S>* ws, const S* w, const S* b, S* rm, S* rv, S* save_mean, S* save_invstd,
                        FwdParams fp) {
  if (f.pool != nullptr)
    cuda::launch(apply_pool_planar<T, S>, grid, kPlanarThreads, 0, st, x, *f.pool, d, ws, w, b, rm, rv, save_mean,
                 save_invstd, fp);
  else
    cuda::launch(apply_avg_planar<T, S>, grid, kPlanarThreads, 0, st, x, *f.avg, d, ws, w, b, rm, rv, save_mean,
                 save_invstd, fp);
}

// A direction's two kernels, over `grid` each, as one launch of twice the blocks (Note [batch norm
// in one launch]), where the stream has tickets (a capture on a stream without them yet: none).
std::optional<cuda::TwoPhaseGrid> one_launch(const Tensor& x, dim3 grid, cudaStream_t st) {
  unsigned* tickets = cuda::stream_tickets(x.device().index, st);
  if (tickets == nullptr) return std::nullopt;
  return cuda::TwoPhaseGrid{tickets, grid.x * grid.y, grid.x};
}

// A training forward's launches: the statistics and the normalise (or pooling) kernel, as one
// launch where the stream has tickets (Note [batch norm in one launch]).
template <class T, class S>
void launch_training_forward(const BnFusedOut<T>& f, const Tensor& xt, const Tensor& yt, const BnGeom& g,
                             const BnDims& d, Wf<S>* wsp, const S* w, const S* b, S* rm, S* rv, S* save_mean,
                             S* save_invstd, const FwdParams& fp, cudaStream_t st) {
  const T* x = cp<T>(xt);
  T* y = mp<T>(yt);
  const unsigned width =
      g.channels_last ? static_cast<unsigned>((g.C + kColTile - 1) / kColTile) : static_cast<unsigned>(g.C);
  const dim3 grid(width, static_cast<unsigned>(d.splits));
  if (const std::optional<cuda::TwoPhaseGrid> one = one_launch(xt, grid, st)) {
    const dim3 blocks(2 * one->first);
    if (g.channels_last)
      cuda::launch(forward_columnar<T, S>, blocks, dim3(kColTile, kColRows), 0, st, x, y, d, wsp, w, b, rm, rv,
                   save_mean, save_invstd, fp, *one);
    else if (f.pool != nullptr)
      cuda::launch(forward_pool_planar<T, S>, blocks, kPlanarThreads, 0, st, x, *f.pool, d, wsp, w, b, rm, rv,
                   save_mean, save_invstd, fp, *one);
    else if (f.avg != nullptr)
      cuda::launch(forward_avg_planar<T, S>, blocks, kPlanarThreads, 0, st, x, *f.avg, d, wsp, w, b, rm, rv, save_mean,
                   save_invstd, fp, *one);
    else
      cuda::launch(forward_planar<T, S>, blocks, kPlanarThreads, 0, st, x, y, d, wsp, w, b, rm, rv, save_mean,
                   save_invstd, fp, *one);
  } else if (!g.channels_last) {
    cuda::launch(stats_planar<T, S>, grid, kPlanarThreads, 0, st, x, d, wsp);
    if (f.any()) launch_fused_apply<T, S>(f, grid, st, x, d, wsp, w, b, rm, rv, save_mean, save_invstd, fp);
    else
      cuda::launch(apply_planar<T, S>, grid, kPlanarThreads, 0, st, x, y, d, wsp, w, b, rm, rv, save_mean, save_invstd,
                   fp);
  } else {
    dim3 block(kColTile, kColRows);
    cuda::launch(stats_columnar<T, S>, grid, block, 0, st, x, d, wsp);
    cuda::launch(apply_columnar<T, S>, grid, block, 0, st, x, y, d, wsp, w, b, rm, rv, save_mean, save_invstd, fp);
  }
}

// batch_norm's forward, or batch_norm_max_pool2d's or batch_norm_global_avg_pool2d's (f: planar x,
// not empty; max pooling in disjoint windows).
template <class T, class S>
void forward_impl(const KernelCall& c, const Tensor& x, const BnGeom& g, const BnFusedOut<T>& f) {
  const auto& a = c.attr<BatchNormAttrs>();
  const DType sd = dtype_v<S>;
  const Device dev = x.device();
  cudaStream_t st = cuda::stream_for(x);
  const size_t stats = f.pool != nullptr ? 2 : 1;  // the outputs' (mean, invstd)
  const Tensor &y = c.out[0], &save_mean = c.out[stats], &save_invstd = c.out[stats + 1];
  Tensor w = as_stats(c.in[1], sd), b = as_stats(c.in[2], sd);
  const Tensor &rm_in = c.in[3], &rv_in = c.in[4];
  const bool training = a.training != 0;
  const int sms = cuda::sm_count(dev.index);
  if (!training && f.any()) {
    Tensor rm = as_stats(rm_in, sd), rv = as_stats(rv_in, sd);
    BnDims d = bn_dims(g, sms);
    dim3 grid(static_cast<unsigned>(g.C), static_cast<unsigned>(d.splits));
    launch_fused_apply<T, S>(f, grid, st, cp<T>(x), d, nullptr, cp<S>(w), cp<S>(b), mp<S>(rm), mp<S>(rv),
                             mp<S>(save_mean), mp<S>(save_invstd), FwdParams{a.eps, 0, 0});
    return;
  }
  if (!training) {
    Tensor rm = as_stats(rm_in, sd), rv = as_stats(rv_in, sd);
    const int64_t n = x.numel();
    cuda::launch(eval_kernel<T, S>, cuda::grid_for(std::max<int64_t>(n, g.C), 256, dev.index), 256, 0, st, cp<T>(x),
                 mp<T>(y), n, static_cast<int>(g.C), static_cast<int>(g.L), g.channels_last, cp<S>(rm), cp<S>(rv),
                 cp<S>(w), cp<S>(b), mp<S>(save_mean), mp<S>(save_invstd), a.eps);
    return;
  }
  if (x.numel() == 0) {  // statistics of nothing; running stats untouched, the batch counted
    Tensor m = save_mean, v = save_invstd;
    m.fill_(NAN);
    v.fill_(NAN);
    bn_count_batch(c);
    return;
  }
  // running stats: updated in place when they are already the statistics dtype, else via a copy
  const bool update = rm_in.defined();
  Tensor rm, rv;
  if (update) {
    rm = rm_in.dtype() == sd ? rm_in : rm_in.to(sd);
    rv = rv_in.dtype() == sd ? rv_in : rv_in.to(sd);
  }
  BnDims d = bn_dims(g, sms);
  Tensor ws = empty({static_cast<int64_t>(g.C) * d.splits * static_cast<int64_t>(sizeof(Wf<S>))},
                    TensorOptions().dtype(DType::u8).device(dev));
  Wf<S>* wsp = static_cast<Wf<S>*>(ws.data_ptr());
  const Tensor* counter = bn_counter(c);
  FwdParams fp{a.eps, a.momentum, update ? 1 : 0, counter != nullptr ? mp<int64_t>(*counter) : nullptr};
  launch_training_forward<T, S>(f, x, y, g, d, wsp, cp<S>(w), cp<S>(b), mp<S>(rm), mp<S>(rv), mp<S>(save_mean),
                                mp<S>(save_invstd), fp, st);
  if (update) {
    write_back(rm, rm_in);
    write_back(rv, rv_in);
    rm_in.bump_version();
    rv_in.bump_version();
  }
  if (counter != nullptr) counter->bump_version();
}

template <class T, class S>
void forward_dispatch(const KernelCall& c, const Tensor& x, const BnGeom& g) {
  if (c.op == OpId::batch_norm) return forward_impl<T, S>(c, x, g, BnFusedOut<T>{});
  if (c.op == OpId::batch_norm_global_avg_pool2d) {
    const BnAvgOut<T> avg{mp<T>(c.out[0]), static_cast<int>(c.attr<BatchNormAttrs>().relu)};
    return forward_impl<T, S>(c, x, g, BnFusedOut<T>{nullptr, &avg});
  }
  const PoolAttrs& p = c.attr<BatchNormAttrs>().pool;
  BnPoolOut<T> po{mp<T>(c.out[0]),
                  mp<int64_t>(c.out[1]),
                  static_cast<int>(x.shape()[2]),
                  static_cast<int>(x.shape()[3]),
                  static_cast<int>(p.kernel[0]),
                  static_cast<int>(p.kernel[1]),
                  static_cast<int>(c.out[0].shape()[2]),
                  static_cast<int>(c.out[0].shape()[3]),
                  static_cast<int>(p.relu),
                  0};
  po.pairs =
      p.kernel[1] == 2 && x.shape()[3] % 2 == 0 && reinterpret_cast<uintptr_t>(x.data_ptr()) % (2 * sizeof(T)) == 0;
  forward_impl<T, S>(c, x, g, BnFusedOut<T>{&po, nullptr});
}

// batch_norm, and the `fused` variants of batch_norm_max_pool2d (bn_pool_fused_supports) and
// batch_norm_global_avg_pool2d (bn_avg_fused_supports).
void batch_norm_cuda(const KernelCall& c) {
  const Tensor x = contiguous_as(c.in[0], runs_channels_last(c.in[0]));
  const BnGeom g = bn_geometry(x);
  cuda::DeviceGuard scope(x.device().index);
  switch (x.dtype()) {
    case DType::f32: forward_dispatch<float, float>(c, x, g); break;
    case DType::f64: forward_dispatch<double, double>(c, x, g); break;
    case DType::f16: forward_dispatch<Half, float>(c, x, g); break;
    case DType::bf16: forward_dispatch<BFloat16, float>(c, x, g); break;
    default: EMBER_FAIL("batch_norm: expects a floating input, got ", x.dtype());
  }
}

// NCHW planes of more than one value (bn_geometry calls a 1x1 plane columnar): what the fused
// normalise kernels take.
bool bn_planar(const Tensor& x) { return !runs_channels_last(x) && x.shape()[2] * x.shape()[3] > 1; }

// A max pooling the fused kernels take: planar x, windows that do not overlap.
bool bn_pool_planar(const Tensor& x, const BatchNormAttrs& a) { return bn_planar(x) && pool::disjoint_windows(a.pool); }

bool bn_pool_fused_supports(const KernelCall& c) {
  return bn_supports(c) && c.in[0].numel() > 0 && bn_pool_planar(c.in[0], c.attr<BatchNormAttrs>());
}

bool bn_avg_fused_supports(const KernelCall& c) { return bn_supports(c) && c.in[0].numel() > 0 && bn_planar(c.in[0]); }

// How the backward's kernels read g (BnGrad): dense, max pooled (ind defined: planar x, disjoint
// windows) or averaged over each plane.
template <class T>
BnGrad<T> bn_grad(const BatchNormAttrs& a, const Tensor& gy, const Tensor& x, const Tensor& ind) {
  BnGrad<T> gr{cp<T>(gy), nullptr, 0, 1, 1, 0, 0, static_cast<int>(a.avg_pool), static_cast<int>(a.relu)};
  if (ind.defined()) {
    gr.ind = cp<int64_t>(ind);
    gr.W = static_cast<int>(x.shape()[3]);
    gr.kh = static_cast<int>(a.pool.kernel[0]);
    gr.kw = static_cast<int>(a.pool.kernel[1]);
    gr.PH = static_cast<int>(gy.shape()[2]);
    gr.PW = static_cast<int>(gy.shape()[3]);
  }
  return gr;
}

template <class T, class S>
void backward_impl(const KernelCall& c, const Tensor& gy, const Tensor& x, const BnGeom& g, const Tensor& ind) {
  const auto& a = c.attr<BatchNormAttrs>();
  const DType sd = dtype_v<S>;
  const Device dev = x.device();
  cudaStream_t st = cuda::stream_for(x);
  const Tensor &dx = c.out[0], &dweight_out = c.out[1], &dbias_out = c.out[2];
  Tensor w = as_stats(c.in[2], sd), mean = as_stats(c.in[3], sd), invstd = as_stats(c.in[4], sd);
  const Tensor b = a.avg_pool != 0 && c.in[5].defined() ? c.in[5].contiguous() : Tensor();  // BwdParams
  Tensor dweight = dweight_out.dtype() == sd ? dweight_out : empty({g.C}, TensorOptions().dtype(sd).device(dev));
  Tensor dbias = dbias_out.dtype() == sd ? dbias_out : empty({g.C}, TensorOptions().dtype(sd).device(dev));
  if (x.numel() == 0) {
    dweight.zero_();
    dbias.zero_();
  } else {
    BnDims d = bn_dims(g, cuda::sm_count(dev.index));
    Tensor ws = empty({static_cast<int64_t>(g.C) * d.splits * static_cast<int64_t>(sizeof(Sums<S>))},
                      TensorOptions().dtype(DType::u8).device(dev));
    Sums<S>* wsp = static_cast<Sums<S>*>(ws.data_ptr());
    const int training = a.training != 0 ? 1 : 0;
    const BnGrad<T> gr = bn_grad<T>(a, gy, x, ind);
    const bool b_s = b.defined() && b.dtype() == sd;
    const BwdParams<T, S> p{cp<S>(mean), cp<S>(invstd), cp<S>(w), b_s ? cp<S>(b) : nullptr,
                            b.defined() && !b_s ? cp<T>(b) : nullptr};
    const unsigned width =
        g.channels_last ? static_cast<unsigned>((g.C + kColTile - 1) / kColTile) : static_cast<unsigned>(g.C);
    const dim3 grid(width, static_cast<unsigned>(d.splits));
    if (const std::optional<cuda::TwoPhaseGrid> one = one_launch(x, grid, st)) {
      const dim3 blocks(2 * one->first);
      if (g.channels_last)
        cuda::launch(backward_columnar<T, S>, blocks, dim3(kColTile, kColRows), 0, st, gr, cp<T>(x), mp<T>(dx), d, wsp,
                     p, mp<S>(dweight), mp<S>(dbias), training, *one);
      else
        cuda::launch(backward_planar<T, S>, blocks, kPlanarThreads, 0, st, gr, cp<T>(x), mp<T>(dx), d, wsp, p,
                     mp<S>(dweight), mp<S>(dbias), training, *one);
    } else if (!g.channels_last) {
      cuda::launch(bwd_sums_planar<T, S>, grid, kPlanarThreads, 0, st, gr, cp<T>(x), p, d, wsp);
      cuda::launch(bwd_apply_planar<T, S>, grid, kPlanarThreads, 0, st, gr, cp<T>(x), mp<T>(dx), d, wsp, p,
                   mp<S>(dweight), mp<S>(dbias), training);
    } else {
      dim3 block(kColTile, kColRows);
      cuda::launch(bwd_sums_columnar<T, S>, grid, block, 0, st, gr, cp<T>(x), p, d, wsp);
      cuda::launch(bwd_apply_columnar<T, S>, grid, block, 0, st, gr, cp<T>(x), mp<T>(dx), d, wsp, p, mp<S>(dweight),
                   mp<S>(dbias), training);
    }
  }
  write_back(dweight, dweight_out);
  write_back(dbias, dbias_out);
}

// A max pooled gradient (max_pool = 1) is read in place where bn_pool_planar allows, else unpooled
// first (Note [max pooling in the batch norm backward]); an averaged one (avg_pool = 1) always in
// place (Note [global average pooling in the batch norm backward]).
void batch_norm_backward_cuda(const KernelCall& c) {
  const auto& a = c.attr<BatchNormAttrs>();
  if (a.max_pool == 1 && !bn_pool_planar(c.in[1], a)) return bn_unpooled_apart(c, batch_norm_backward_cuda);
  const bool cl = runs_channels_last(c.in[1]);
  const Tensor x = contiguous_as(c.in[1], cl), gy = contiguous_as(c.in[0], cl);
  const Tensor ind = a.max_pool == 1 ? c.in[5].contiguous() : Tensor();
  const BnGeom g = bn_geometry(x);
  cuda::DeviceGuard scope(x.device().index);
  switch (x.dtype()) {
    case DType::f32: backward_impl<float, float>(c, gy, x, g, ind); break;
    case DType::f64: backward_impl<double, double>(c, gy, x, g, ind); break;
    case DType::f16: backward_impl<Half, float>(c, gy, x, g, ind); break;
    case DType::bf16: backward_impl<BFloat16, float>(c, gy, x, g, ind); break;
    default: EMBER_FAIL("batch_norm_backward: expects a floating input, got ", x.dtype());
  }
}

#if EMBER_WITH_CUDNN
// ---- cuDNN's batch norm (legacy API, SPATIAL mode): the vendor variant to compare against ----
// x is described as [N, C, L, 1], fully packed in its layout: NCHW, or NHWC for channels-last and
// 2-D data (Note [cuDNN layouts from strides] in sim/libs/cudnn_common.cpp). Scale, bias and
// statistics are float (double for f64 data), as cuDNN requires; an undefined weight or bias is
// passed as ones or zeros. cuDNN's saved inverse variance is 1 / sqrt(var + eps), our invstd, and
// its running variance update uses the unbiased variance, as ours. Its backward is the training
// formula only, so eval-mode gradients stay with our kernel; bf16 is left to ours too.

// A [C] statistics-dtype tensor filled with `v` (an undefined weight or bias).
Tensor filled(int64_t C, double v, const TensorOptions& so) {
  Tensor t = empty({C}, so);
  t.fill_(v);
  return t;
}

bool cudnn_bn_ok(const KernelCall& c) {
  const bool fwd = c.op != OpId::batch_norm_backward;
  const Tensor& x = fwd ? c.in[0] : c.in[1];
  const auto& a = c.attr<BatchNormAttrs>();
  if (!bn_supports(c) || x.numel() == 0 || x.dtype() == DType::bf16 || a.eps < CUDNN_BN_MIN_EPSILON) return false;
  if (a.avg_pool != 0) return false;  // no cuDNN call reads an averaged gradient
  if (fwd) return a.training != 0 || (c.in[3].defined() && c.in[4].defined());
  return a.training != 0;
}

void bn_desc(cudnn::TensorDesc& d, const Tensor& t, const BnGeom& g) {
  const int64_t size[4] = {g.N, g.C, g.L, 1};
  // the size-1 W's stride counts too: cuDNN tells NHWC from NCHW by the packed strides, and NHWC
  // packing has W's stride = C (1 would read as neither layout)
  const int64_t stride[4] = {g.sn, g.sc, g.sl, g.channels_last ? g.C : 1};
  d.set(t.dtype(), size, stride, "cuDNN batch_norm");
}

// alpha = 1, beta = 0 in the type cuDNN reads for this data (double for f64, else float).
struct Scaling {
  double one_d = 1, zero_d = 0;
  float one_f = 1, zero_f = 0;
  bool dbl;
  explicit Scaling(DType t) : dbl(t == DType::f64) {}
  const void* one() const { return dbl ? static_cast<const void*>(&one_d) : static_cast<const void*>(&one_f); }
  const void* zero() const { return dbl ? static_cast<const void*>(&zero_d) : static_cast<const void*>(&zero_f); }
};

void batch_norm_cudnn(const KernelCall& c) {
  const auto& a = c.attr<BatchNormAttrs>();
  const Tensor x = contiguous_as(c.in[0], runs_channels_last(c.in[0]));
  const Tensor &y = c.out[0], &save_mean = c.out[1], &save_invstd = c.out[2];
  const BnGeom gx = bn_geometry(x), gy = bn_geometry(y);
  const DType sd = bn_stats_dtype(x.dtype());
  const TensorOptions so = TensorOptions().dtype(sd).device(x.device());
  cuda::DeviceGuard scope(x.device().index);
  cudnnHandle_t h = cudnn::handle_for(x.device().index, cuda::stream_for(x));
  cudnn::TensorDesc xd, yd, pd;
  bn_desc(xd, x, gx);
  bn_desc(yd, y, gy);
  EMBER_CUDNN_CHECK(cudnnDeriveBNTensorDescriptor(pd.d, xd.d, CUDNN_BATCHNORM_SPATIAL));
  const Tensor w = c.in[1].defined() ? as_stats(c.in[1], sd) : filled(gx.C, 1, so);
  const Tensor b = c.in[2].defined() ? as_stats(c.in[2], sd) : filled(gx.C, 0, so);
  const Scaling k(x.dtype());
  const Tensor &rm_in = c.in[3], &rv_in = c.in[4];
  if (a.training == 0) {
    const Tensor rm = as_stats(rm_in, sd), rv = as_stats(rv_in, sd);
    EMBER_CUDNN_CHECK(cudnnBatchNormalizationForwardInference(h, CUDNN_BATCHNORM_SPATIAL, k.one(), k.zero(), xd.d,
                                                              x.data_ptr(), yd.d, y.data_ptr(), pd.d, w.data_ptr(),
                                                              b.data_ptr(), rm.data_ptr(), rv.data_ptr(), a.eps));
    // the op's other outputs, as our kernel gives them (mean, 1 / sqrt(var + eps))
    const int C = static_cast<int>(gx.C);
    const int blocks = cuda::grid_for(gx.C, 256, x.device().index);
    cudaStream_t st = cuda::stream_for(x);
    if (sd == DType::f64)
      cuda::launch(eval_stats_kernel<double>, blocks, 256, 0, st, cp<double>(rm), cp<double>(rv), mp<double>(save_mean),
                   mp<double>(save_invstd), C, a.eps);
    else
      cuda::launch(eval_stats_kernel<float>, blocks, 256, 0, st, cp<float>(rm), cp<float>(rv), mp<float>(save_mean),
                   mp<float>(save_invstd), C, a.eps);
    return;
  }
  const bool update = rm_in.defined();
  Tensor rm, rv;
  if (update) {
    rm = rm_in.dtype() == sd ? rm_in : rm_in.to(sd);
    rv = rv_in.dtype() == sd ? rv_in : rv_in.to(sd);
  }
  EMBER_CUDNN_CHECK(cudnnBatchNormalizationForwardTraining(
      h, CUDNN_BATCHNORM_SPATIAL, k.one(), k.zero(), xd.d, x.data_ptr(), yd.d, y.data_ptr(), pd.d, w.data_ptr(),
      b.data_ptr(), a.momentum, update ? rm.data_ptr() : nullptr, update ? rv.data_ptr() : nullptr, a.eps,
      save_mean.data_ptr(), save_invstd.data_ptr()));
  bn_count_batch(c);  // cuDNN's call does not count
  if (update) {
    write_back(rm, rm_in);
    write_back(rv, rv_in);
    rm_in.bump_version();
    rv_in.bump_version();
  }
}

void batch_norm_backward_cudnn(const KernelCall& c) {
  const auto& a = c.attr<BatchNormAttrs>();
  const bool cl = runs_channels_last(c.in[1]);
  const Tensor x = contiguous_as(c.in[1], cl), gy = contiguous_as(c.in[0], cl);
  const Tensor& dx = c.out[0];
  const Tensor &dweight_out = c.out[1], &dbias_out = c.out[2];
  const BnGeom gx = bn_geometry(x), gg = bn_geometry(gy), gd = bn_geometry(dx);
  const DType sd = bn_stats_dtype(x.dtype());
  const TensorOptions so = TensorOptions().dtype(sd).device(x.device());
  cuda::DeviceGuard scope(x.device().index);
  cudnnHandle_t h = cudnn::handle_for(x.device().index, cuda::stream_for(x));
  cudnn::TensorDesc xd, gd_desc, dxd, pd;
  bn_desc(xd, x, gx);
  bn_desc(gd_desc, gy, gg);
  bn_desc(dxd, dx, gd);
  EMBER_CUDNN_CHECK(cudnnDeriveBNTensorDescriptor(pd.d, xd.d, CUDNN_BATCHNORM_SPATIAL));
  const Tensor w = c.in[2].defined() ? as_stats(c.in[2], sd) : filled(gx.C, 1, so);
  const Tensor mean = as_stats(c.in[3], sd), invstd = as_stats(c.in[4], sd);
  Tensor dweight = dweight_out.dtype() == sd ? dweight_out : empty({gx.C}, so);
  Tensor dbias = dbias_out.dtype() == sd ? dbias_out : empty({gx.C}, so);
  const Scaling k(x.dtype());
  EMBER_CUDNN_CHECK(cudnnBatchNormalizationBackward(h, CUDNN_BATCHNORM_SPATIAL, k.one(), k.zero(), k.one(), k.zero(),
                                                    xd.d, x.data_ptr(), gd_desc.d, gy.data_ptr(), dxd.d, dx.data_ptr(),
                                                    pd.d, w.data_ptr(), dweight.data_ptr(), dbias.data_ptr(), a.eps,
                                                    mean.data_ptr(), invstd.data_ptr()));
  write_back(dweight, dweight_out);
  write_back(dbias, dbias_out);
}
#endif  // EMBER_WITH_CUDNN

}  // namespace

void register_cuda_batch_norm(OpInfo& info) {
  info.add_variant({.name = "cuda",
                    .device = DeviceType::cuda,
                    .fn = batch_norm_cuda,
                    .dtypes = kFloatTypes,
                    .supports = bn_supports,
                    .note = "Welford partials per block + normalise (2 kernels, deterministic), "
                            "NCHW or channels-last"});
#if EMBER_WITH_CUDNN
  info.add_variant({.name = "cudnn",
                    .device = DeviceType::cuda,
                    .fn = batch_norm_cudnn,
                    .dtypes = DTypeSet{DType::f32, DType::f64, DType::f16},
                    .flags = kVendor,
                    .supports = cudnn_bn_ok,
                    .note = "cudnnBatchNormalizationForwardTraining / ForwardInference (SPATIAL)"});
#endif
}

void register_cuda_batch_norm_backward(OpInfo& info) {
  info.add_variant({.name = "cuda",
                    .device = DeviceType::cuda,
                    .fn = batch_norm_backward_cuda,
                    .dtypes = kFloatTypes,
                    .supports = bn_supports,
                    .note = "per-block (sum g, sum g (x - mean)) partials + fused dx/dweight/dbias (2 kernels); "
                            "NCHW reads a pooled gradient in place"});
#if EMBER_WITH_CUDNN
  info.add_variant({.name = "cudnn",
                    .device = DeviceType::cuda,
                    .fn = bn_unpool_apart<batch_norm_backward_cudnn>,
                    .dtypes = DTypeSet{DType::f32, DType::f64, DType::f16},
                    .flags = kVendor,
                    .supports = cudnn_bn_ok,
                    .note = "cudnnBatchNormalizationBackward (SPATIAL, training mode)"});
#endif
}

void register_cuda_batch_norm_global_avg_pool2d(OpInfo& info) {
  info.add_variant({.name = "fused",
                    .device = DeviceType::cuda,
                    .fn = batch_norm_cuda,
                    .dtypes = kFloatTypes,
                    .supports = bn_avg_fused_supports,
                    .note = "batch_norm's kernels, the normalise kernel relu'ing and summing each plane (NCHW): y "
                            "never stored"});
  info.add_variant({.name = "ops",
                    .device = DeviceType::cuda,
                    .fn = bn_then_avg_ops,
                    .dtypes = kFloatTypes,
                    .note = "batch_norm, relu, then adaptive_avg_pool2d, each through the registry"});
}

void register_cuda_batch_norm_max_pool2d(OpInfo& info) {
  info.add_variant(
      {.name = "fused",
       .device = DeviceType::cuda,
       .fn = batch_norm_cuda,
       .dtypes = kFloatTypes,
       .supports = bn_pool_fused_supports,
       .note = "batch_norm's kernels, the normalise kernel pooling disjoint windows (NCHW): y never stored"});
  info.add_variant({.name = "ops",
                    .device = DeviceType::cuda,
                    .fn = bn_then_pool_ops,
                    .dtypes = kFloatTypes,
                    .note = "batch_norm, then max_pool2d, each through the registry"});
}

}  // namespace ember
