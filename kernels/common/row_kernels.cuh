// Row kernels: the CUDA machinery behind softmax, log_softmax, their gradients and cross_entropy.
//
// A tensor is viewed as [A, C, B] around the reduced dim (kernels/common/row_geometry.h); a
// row is the C elements (a, :, b). A row op (a policy P, below) reduces each row to a few
// statistics in one pass over it (phase 1), may then write an output row computed from them
// (phase 2), and may end with a per-row epilogue (cross_entropy's loss). The kernels differ only
// in how rows map onto threads:
//
//   regs<K>   B == 1, C <= 32 K (K in {1, 4, 16}): G = min(32, pow2ceil(C)) threads per row, each
//             holding K elements in registers, 32 / G rows per warp (C = 10: 16 lanes per row, two
//             rows per warp, eight rows per 128-thread block). The row is read once.
//   warp      B == 1, C < 4096 (and every C for f64): a warp per row; phase 2 reads the row again
//             (an L1/L2 hit: it was read a moment ago by the same warp).
//   block     B == 1, C >= 4096: a block per row with 16-byte vector loads, 4 in flight per thread.
//             kCache keeps the row in dynamic shared memory between the phases, so HBM sees one
//             read and one write of the row; without it phase 2 reads the row again (from L2 as
//             long as the rows in flight fit in it: 264 rows of 128 KiB = 33 MiB of the H200's 50).
//   cols      B > 1 (the dim is not the innermost one): a 32 x 8 block takes 32 adjacent rows
//             (adjacent b, so every load instruction reads 32 consecutive elements) and 8 threads
//             split each row's C elements; their statistics merge in shared memory.
//
// The row ops are memory-bound: the exp per element costs far less issue time than moving the row.
// Napkin math: docs/perf.md ("Napkin math behind the kernels").
//
// Note [online softmax]: phase 1 keeps a running max m and a sum s of exp(x - m) rescaled whenever
// m grows (s <- s exp(m_old - m_new) + 1), so the statistics need a single read of the row. Two
// partial states merge as (max(m1, m2), s1 exp(m1 - m) + s2 exp(m2 - m)). Special values follow
// PyTorch's two-pass definition: NaN anywhere makes s NaN; a +inf entry makes s NaN (its
// exp(inf - inf)); an all -inf row keeps (m, s) = (-inf, 0), whose outputs exp(NaN) / 0 and
// NaN - log 0 are NaN; -inf entries next to a finite max add exactly 0.
//
// Determinism: every reduction has a fixed shape (xor butterflies, fixed warp order, fixed loops),
// so results do not depend on timing. The butterfly leaves bit-identical statistics in every lane
// because each merge is commutative in floating point (a + b == b + a, max is symmetric).
//
// A policy P derives from rows::Policy<T, kIn, kStats, kOut> (below), which gives it
//   using T, Acc;                     element type and accumulation type
//   static constexpr int kIn;         input rows read per element (1 or 2), in p.in[0..kIn)
//   static constexpr int kStats;      accumulators in Stats = rows::Stats<Acc, kStats>
//   static constexpr bool kOut;       whether phase 2 writes p.out (same layout as the inputs)
//   const T* in[kIn]; T* out;
// and defaults for a policy without per-row context or epilogue, which P may hide with its own:
//   struct Row;                       per-row context (target, weight, scale; default-constructible)
//   Row row(int64_t r, int64_t base)  r = a B + b, base = offset of element c = 0
//   void done(const Stats&, const Row&, int64_t r);                          (epilogue, one thread)
// P provides
//   Stats init(); void step(Stats&, const Row&, int64_t c, const Acc (&v)[kIn]);
//   void merge(Stats&, const Stats&); void finish(Stats&, const Row&);
//   Acc value(const Stats&, const Row&, int64_t c, const Acc (&v)[kIn]);   (phase 2)
#pragma once

#include <cuda_runtime.h>

#include <array>
#include <map>
#include <mutex>
#include <type_traits>

#include "core/cuda/kernel.cuh"
#include "core/dtype.h"
#include "kernels/common/cuda_loops.cuh"
#include "kernels/common/current_stream.cuh"
#include "kernels/common/math.h"
#include "kernels/common/row_geometry.h"
#include "kernels/common/row_plan.h"

namespace ember::rows {

template <class Acc, int N>
struct Stats {
  Acc v[N];
};

// The base of every policy (the list above). A policy is a class template, so it names what it
// uses of its base: using typename Base::Acc, ...
template <class T_, int kIn_, int kStats_, bool kOut_>
struct Policy {
  using T = T_;
  using Acc = acc_t<T>;
  static constexpr int kIn = kIn_, kStats = kStats_;
  static constexpr bool kOut = kOut_;
  using Stats = rows::Stats<Acc, kStats>;
  struct Row {};

  const T* in[kIn];
  T* out;  // unused when !kOut

  __device__ Row row(int64_t, int64_t) const { return {}; }
  template <class R>
  __device__ void done(const Stats&, const R&, int64_t) const {}
};

template <class Acc>
__device__ __forceinline__ Acc neg_inf() {
  return static_cast<Acc>(-INFINITY);
}
template <class Acc>
__device__ __forceinline__ Acc quiet_nan() {
  return static_cast<Acc>(NAN);
}

// One element into the running (max, sum) state (Note [online softmax]).
template <class Acc>
__device__ __forceinline__ void online_step(Acc& m, Acc& s, Acc x) {
  if (x > m) {
    // (x - x) is 0 for finite x and NaN for x = +inf, where PyTorch's exp(x - max) is NaN too
    s = s * math::exp(m - x) + (Acc(1) + (x - x));
    m = x;
  } else if (x != x) {
    m = x;
    s = x;
  } else if (m != neg_inf<Acc>()) {  // x <= m; when m = -inf so is x, which adds nothing
    s += math::exp(x - m);
  }
}

// Merges (m2, s2) into (m, s); symmetric in its operands.
template <class Acc>
__device__ __forceinline__ void online_merge(Acc& m, Acc& s, Acc m2, Acc s2) {
  if (m != m || m2 != m2) {
    m = s = quiet_nan<Acc>();
    return;
  }
  const Acc mx = m > m2 ? m : m2;
  if (mx == neg_inf<Acc>()) {  // two all -inf states: s = s2 = 0
    s = s + s2;
  } else {
    s = s * math::exp(m - mx) + s2 * math::exp(m2 - mx);
  }
  m = mx;
}

template <class Acc, int N>
__device__ __forceinline__ Stats<Acc, N> shfl_xor(const Stats<Acc, N>& s, int lane_mask) {
  Stats<Acc, N> r;
  EMBER_UNROLL
  for (int i = 0; i < N; ++i) r.v[i] = __shfl_xor_sync(0xffffffffu, s.v[i], lane_mask);
  return r;
}

// All-reduce within aligned groups of `width` lanes (a power of two <= 32). Every lane of the warp
// must call it.
template <class P>
__device__ __forceinline__ void group_allreduce(const P& p, typename P::Stats& st, int width) {
  for (int off = width >> 1; off > 0; off >>= 1) {
    typename P::Stats other = shfl_xor(st, off);
    p.merge(st, other);
  }
}

// All-reduce over the block (blockDim.x a multiple of 32); `red` holds 33 entries.
template <class P>
__device__ __forceinline__ void block_allreduce(const P& p, typename P::Stats& st, typename P::Stats* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  group_allreduce(p, st, 32);
  if (lane == 0) red[warp] = st;
  __syncthreads();
  if (warp == 0) {
    typename P::Stats w = lane < nwarps ? red[lane] : p.init();
    group_allreduce(p, w, 32);
    if (lane == 0) red[32] = w;
  }
  __syncthreads();
  st = red[32];
}

// ---- regs<K>: G threads per row, K elements each in registers ----

// Phase 1 of one row held by a group: loads (when active), reduces, all-reduces, finishes.
template <class P, int K>
__device__ __forceinline__ typename P::Stats regs_phase1(const P& p, int64_t row, bool active, int C, int G, int lane,
                                                         const typename P::Row& rc, typename P::Acc (&v)[K][P::kIn]) {
  using Acc = typename P::Acc;
  const int64_t base = row * C;
  EMBER_UNROLL
  for (int j = 0; j < K; ++j) {
    const int c = lane + j * G;
    if (active && c < C) {
      EMBER_UNROLL
      for (int k = 0; k < P::kIn; ++k) v[j][k] = static_cast<Acc>(p.in[k][base + c]);
    }
  }
  typename P::Stats st = p.init();
  EMBER_UNROLL
  for (int j = 0; j < K; ++j) {
    const int c = lane + j * G;
    if (active && c < C) p.step(st, rc, c, v[j]);
  }
  group_allreduce(p, st, G);
  p.finish(st, rc);
  return st;
}

template <class P, int K>
__global__ void __launch_bounds__(128) regs_kernel(P p, int64_t rows, int C, int log2g) {
  using Acc = typename P::Acc;
  using T = typename P::T;
  const int G = 1 << log2g;
  const int lane = threadIdx.x & (G - 1);
  const int64_t row = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> log2g;
  const bool active = row < rows;
  typename P::Row rc{};
  if (active) rc = p.row(row, row * C);
  Acc v[K][P::kIn];
  typename P::Stats st = regs_phase1<P, K>(p, row, active, C, G, lane, rc, v);
  if (!active) return;  // after the shuffles, which need every lane
  if constexpr (P::kOut) {
    EMBER_UNROLL
    for (int j = 0; j < K; ++j) {
      const int c = lane + j * G;
      if (c < C) p.out[row * C + c] = static_cast<T>(p.value(st, rc, c, v[j]));
    }
  }
  if (lane == 0) p.done(st, rc, row);
}

// ---- warp: a warp per row ----

template <class P>
__global__ void __launch_bounds__(256) warp_kernel(P p, int64_t rows, int64_t C) {
  using Acc = typename P::Acc;
  using T = typename P::T;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;  // the whole warp leaves together
  const int64_t base = row * C;
  const typename P::Row rc = p.row(row, base);
  typename P::Stats st = p.init();
  EMBER_UNROLL_N(4)
  for (int64_t c = lane; c < C; c += 32) {
    Acc v[P::kIn];
    EMBER_UNROLL
    for (int k = 0; k < P::kIn; ++k) v[k] = static_cast<Acc>(p.in[k][base + c]);
    p.step(st, rc, c, v);
  }
  group_allreduce(p, st, 32);
  p.finish(st, rc);
  if constexpr (P::kOut) {
    EMBER_UNROLL_N(4)
    for (int64_t c = lane; c < C; c += 32) {
      Acc v[P::kIn];
      EMBER_UNROLL
      for (int k = 0; k < P::kIn; ++k) v[k] = static_cast<Acc>(p.in[k][base + c]);
      p.out[base + c] = static_cast<T>(p.value(st, rc, c, v));
    }
  }
  if (lane == 0) p.done(st, rc, row);
}

// ---- block: a block per row ----

// This thread's U vectors i = i0 + u nthreads (those below nvec) of every input row into a: from
// global memory, or with kFromCache from the row's copy in shared memory (cache[k * nvec + i]).
template <class P, bool kFromCache, int U, class V>
__device__ __forceinline__ void block_load(const P& p, int64_t base, int64_t i0, int64_t nthreads, int64_t nvec,
                                           const V* cache, V (&a)[U][P::kIn]) {
  EMBER_UNROLL
  for (int u = 0; u < U; ++u) {
    const int64_t i = i0 + u * nthreads;
    if (i < nvec) {
      EMBER_UNROLL
      for (int k = 0; k < P::kIn; ++k)
        a[u][k] = kFromCache ? cache[k * nvec + i] : reinterpret_cast<const V*>(p.in[k] + base)[i];
    }
  }
}

// Element j of each input's vector, in the accumulation type.
template <class P, class V>
__device__ __forceinline__ void block_unpack(const V (&a)[P::kIn], int j, typename P::Acc (&v)[P::kIn]) {
  EMBER_UNROLL
  for (int k = 0; k < P::kIn; ++k) v[k] = static_cast<typename P::Acc>(a[k].v[j]);
}

// VEC elements per load (16 bytes; the host checks alignment and C % VEC == 0 when VEC > 1).
template <class P, int VEC, bool kCache>
__global__ void __launch_bounds__(1024) block_kernel(P p, int64_t C) {
  using Acc = typename P::Acc;
  using T = typename P::T;
  using V = detail::AlignedVec<T, VEC>;
  constexpr int U = 4;  // vector loads in flight per thread
  EMBER_DYNAMIC_SHARED(unsigned char, dyn_smem);
  EMBER_SHARED(typename P::Stats[33], red);
  V* cache = reinterpret_cast<V*>(dyn_smem);  // [kIn][nvec] when kCache
  const int64_t row = blockIdx.x;
  const int64_t base = row * C;
  const int64_t nvec = C / VEC;
  const int64_t nthreads = blockDim.x;
  const typename P::Row rc = p.row(row, base);
  typename P::Stats st = p.init();
  for (int64_t i0 = threadIdx.x; i0 < nvec; i0 += U * nthreads) {
    V a[U][P::kIn];
    block_load<P, false>(p, base, i0, nthreads, nvec, cache, a);
    EMBER_UNROLL
    for (int u = 0; u < U; ++u) {
      const int64_t i = i0 + u * nthreads;
      if (i < nvec) {
        if constexpr (kCache) {
          EMBER_UNROLL
          for (int k = 0; k < P::kIn; ++k) cache[k * nvec + i] = a[u][k];
        }
        EMBER_UNROLL
        for (int j = 0; j < VEC; ++j) {
          Acc v[P::kIn];
          block_unpack<P>(a[u], j, v);
          p.step(st, rc, i * VEC + j, v);
        }
      }
    }
  }
  block_allreduce(p, st, red);  // (its __syncthreads also orders the cache; each thread reads back its own entries)
  p.finish(st, rc);
  if constexpr (P::kOut) {
    for (int64_t i0 = threadIdx.x; i0 < nvec; i0 += U * nthreads) {
      V a[U][P::kIn];
      block_load<P, kCache>(p, base, i0, nthreads, nvec, cache, a);
      EMBER_UNROLL
      for (int u = 0; u < U; ++u) {
        const int64_t i = i0 + u * nthreads;
        if (i < nvec) {
          V o;
          EMBER_UNROLL
          for (int j = 0; j < VEC; ++j) {
            Acc v[P::kIn];
            block_unpack<P>(a[u], j, v);
            o.v[j] = static_cast<T>(p.value(st, rc, i * VEC + j, v));
          }
          reinterpret_cast<V*>(p.out + base)[i] = o;
        }
      }
    }
  }
  if (threadIdx.x == 0) p.done(st, rc, row);
}

// ---- cols: the reduced dim is not innermost ----

constexpr int kColsX = 32, kColsY = 8;

template <class P>
__global__ void __launch_bounds__(kColsX* kColsY) cols_kernel(P p, int64_t C, int64_t B) {
  using Acc = typename P::Acc;
  using T = typename P::T;
  EMBER_SHARED(typename P::Stats[kColsY][kColsX], sm);
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t tiles = (B + kColsX - 1) / kColsX;
  const int64_t a = blockIdx.x / tiles;
  const int64_t b = (blockIdx.x % tiles) * kColsX + tx;
  const bool valid = b < B;
  const int64_t base = a * C * B + b;
  const int64_t row = a * B + b;
  typename P::Row rc{};
  if (valid) rc = p.row(row, base);
  typename P::Stats st = p.init();
  if (valid) {
    for (int64_t c = ty; c < C; c += kColsY) {
      Acc v[P::kIn];
      EMBER_UNROLL
      for (int k = 0; k < P::kIn; ++k) v[k] = static_cast<Acc>(p.in[k][base + c * B]);
      p.step(st, rc, c, v);
    }
  }
  sm[ty][tx] = st;
  __syncthreads();
  if (ty == 0) {
    EMBER_UNROLL
    for (int k = 1; k < kColsY; ++k) p.merge(st, sm[k][tx]);
    sm[0][tx] = st;
  }
  __syncthreads();
  st = sm[0][tx];
  p.finish(st, rc);
  if (!valid) return;
  if constexpr (P::kOut) {
    for (int64_t c = ty; c < C; c += kColsY) {
      Acc v[P::kIn];
      EMBER_UNROLL
      for (int k = 0; k < P::kIn; ++k) v[k] = static_cast<Acc>(p.in[k][base + c * B]);
      p.out[base + c * B] = static_cast<T>(p.value(st, rc, c, v));
    }
  }
  if (ty == 0) p.done(st, rc, row);
}

// ---- launching ----

// Plan (kernels/common/row_plan.h): which kernel runs a B == 1 geometry.

// Raises a kernel's dynamic shared memory limit above the 48 KiB default (once per kernel and device).
inline void allow_dynamic_smem(const void* kernel, int device, size_t bytes) {
  if (bytes <= 48 * 1024) return;
  static std::mutex mu;
  static std::map<std::pair<const void*, int>, size_t> granted;
  std::lock_guard<std::mutex> lock(mu);
  size_t& g = granted[{kernel, device}];
  if (g >= bytes) return;
  EMBER_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  g = bytes;
}

// Bytes of shared memory the block kernel may use to cache a row (leaves room for the static part).
// (cached: cudaGetDeviceProperties is far too slow to call per launch)
inline size_t row_cache_limit(int device) {
  static std::array<int, 16> optin{};
  static std::array<std::once_flag, 16> once;
  EMBER_CHECK(device >= 0 && device < 16, "row kernels: bad device ", device);
  std::call_once(once[device], [&] {
    int n = 0;
    EMBER_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    optin[device] = n;
  });
  size_t bytes = static_cast<size_t>(optin[device]);
  return bytes > 4096 ? bytes - 4096 : 0;
}

template <class P>
size_t cache_bytes(int64_t C) {
  return static_cast<size_t>(P::kIn) * static_cast<size_t>(C) * sizeof(typename P::T);
}

// True when the block kernel with 16-byte loads can read (and write) rows of length C.
template <class P>
bool vector_aligned(const P& p, int64_t C) {
  using T = typename P::T;
  if ((C * static_cast<int64_t>(sizeof(T))) % 16 != 0) return false;
  for (int k = 0; k < P::kIn; ++k)
    if (reinterpret_cast<uintptr_t>(p.in[k]) % 16 != 0) return false;
  if constexpr (P::kOut)
    if (reinterpret_cast<uintptr_t>(p.out) % 16 != 0) return false;
  return true;
}

template <class P, int VEC, bool kCache>
void launch_block(const P& p, int64_t rows, int64_t C, int device, cudaStream_t stream) {
  const int threads = C >= 16384 ? 1024 : 512;
  const size_t smem = kCache ? cache_bytes<P>(C) : 0;
  auto kernel = block_kernel<P, VEC, kCache>;
  allow_dynamic_smem(reinterpret_cast<const void*>(kernel), device, smem);
  EMBER_CHECK(rows <= 0x7fffffff, "row kernels: ", rows, " rows exceed the grid limit");
  cuda::launch(kernel, static_cast<unsigned>(rows), threads, smem, stream, p, C);
}

template <class P, bool kCache>
void launch_block_any(const P& p, int64_t rows, int64_t C, int device, cudaStream_t stream) {
  constexpr int VEC = 16 / sizeof(typename P::T) > 0 ? 16 / sizeof(typename P::T) : 1;
  if (VEC > 1 && vector_aligned(p, C)) launch_block<P, VEC, kCache>(p, rows, C, device, stream);
  else launch_block<P, 1, kCache>(p, rows, C, device, stream);
}

template <class P, int K>
void launch_regs(const P& p, int64_t rows, int64_t C, cudaStream_t stream) {
  int g = 1, log2g = 0;
  const int64_t per_row = K == 1 ? C : 32;  // K == 1: one element per lane; else a full warp
  while (g < per_row && g < 32) {
    g <<= 1;
    ++log2g;
  }
  constexpr int kThreads = 128;
  const int64_t rows_per_block = kThreads / g;
  const int64_t blocks = (rows + rows_per_block - 1) / rows_per_block;
  EMBER_CHECK(blocks <= 0x7fffffff, "row kernels: ", rows, " rows exceed the grid limit");
  cuda::launch(regs_kernel<P, K>, static_cast<unsigned>(blocks), kThreads, 0, stream, p, rows, static_cast<int>(C),
               log2g);
}

template <class P>
void launch_warp(const P& p, int64_t rows, int64_t C, cudaStream_t stream) {
  constexpr int kThreads = 256, kRowsPerBlock = kThreads / 32;
  const int64_t blocks = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
  EMBER_CHECK(blocks <= 0x7fffffff, "row kernels: ", rows, " rows exceed the grid limit");
  cuda::launch(warp_kernel<P>, static_cast<unsigned>(blocks), kThreads, 0, stream, p, rows, C);
}

template <class P>
void launch_cols(const P& p, const RowGeometry& g, cudaStream_t stream) {
  const int64_t tiles = (g.B + kColsX - 1) / kColsX;
  const int64_t blocks = g.A * tiles;
  EMBER_CHECK(blocks <= 0x7fffffff, "row kernels: ", g.A, " x ", tiles, " column tiles exceed the grid limit");
  cuda::launch(cols_kernel<P>, static_cast<unsigned>(blocks), dim3(kColsX, kColsY), 0, stream, p, g.C, g.B);
}

// Runs policy p over every row of geometry g on the current stream of `device`.
template <class P>
void launch(const P& p, const RowGeometry& g, Device device, Plan plan = Plan::automatic) {
  const int64_t rows = g.rows();
  if (rows == 0 || g.C == 0) return;
  cudaStream_t stream = cuda::stream_for(device);
  const int dev = device.index;
  if (g.B > 1) {
    launch_cols(p, g, stream);
    return;
  }
  const int64_t C = g.C;
  const bool fits = cache_bytes<P>(C) <= row_cache_limit(dev);
  switch (plan) {
    case Plan::warp: launch_warp(p, rows, C, stream); return;
    case Plan::block_2pass: launch_block_any<P, false>(p, rows, C, dev, stream); return;
    case Plan::block_cached:
      if constexpr (P::kOut) {
        EMBER_CHECK(fits, "row kernels: a row of ", C, " elements does not fit in shared memory");
        launch_block_any<P, true>(p, rows, C, dev, stream);
        return;
      } else {
        EMBER_FAIL("row kernels: block_cached is for ops that write an output row");
      }
    case Plan::automatic: break;
  }
  if constexpr (!std::is_same_v<typename P::T, double>) {
    if (C <= 32) return launch_regs<P, 1>(p, rows, C, stream);
    if (C <= 128) return launch_regs<P, 4>(p, rows, C, stream);
    if (C <= 512) return launch_regs<P, 16>(p, rows, C, stream);
  }
  if (C < 4096) return launch_warp(p, rows, C, stream);
  if constexpr (P::kOut) {  // (without phase 2 there is nothing to cache)
    if (fits) return launch_block_any<P, true>(p, rows, C, dev, stream);
  }
  launch_block_any<P, false>(p, rows, C, dev, stream);
}

}  // namespace ember::rows
