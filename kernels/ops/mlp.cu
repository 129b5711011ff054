// mlp on CUDA (mlp.cpp says what it computes):
//   fused      the whole Linear/ReLU stack in one launch each way (Note [fused MLP], Note [fused
//              MLP backward in one launch]); every layer at most kMlpMaxWidth wide; registered
//              first, the default
//   composite  linear (and its backward ops) layer by layer, their own defaults
//   vendor     (kVendor) the same on each layer op's vendor variant: cuBLASLt's epilogues forward,
//              relu_backward + cuBLAS's GEMMs + sum backward (PyTorch's eager path)
#include <algorithm>
#include <span>
#include <type_traits>

#include "core/cuda/device_guard.h"
#include "core/cuda/kernel.cuh"
#include "core/cuda/runtime.h"
#include "kernels/common/aligned_vec.cuh"
#include "kernels/common/block_phases.cuh"
#include "kernels/common/current_stream.cuh"
#include "kernels/common/grid_size.cuh"
#include "kernels/ops/linear.h"  // linear_rows
#include "kernels/ops/mlp.h"
#include "kernels/ops/unary.h"
#include "kernels/registry.h"

namespace ember {

// Note [fused MLP]: the MNIST MLP (784 -> 128 -> 64 -> 10, relu between) ran as three linear
// launches forward and five backward (Note [fused linear backward] in linear.cu), each a few
// microseconds of work behind a launch of about 4.8 us (the time model's fit to the H200,
// docs/perf.md). This is the tiny-cuda-nn idea at ember's sizes: a block takes R rows of the batch
// through every layer, their activations kept in shared memory, so the stack is one launch.
//   - Rows a block: every block reads all the weights (the first layer's are 400 KB in f32), so
//     fewer, fuller blocks move fewer bytes, but a block per 8 rows leaves most of the GPU idle at
//     batch 64. rows_per_block takes the most rows (8, 4, 2 or 1; 16-bit types at most 4) that
//     still give half the SMs a block.
//   - Forward: no shared-memory staging of W and no barrier inside a layer. A first version
//     staged W in chunks of 16 inputs between two barriers: about 120 barriers a block, each
//     behind a global load, which the time model put at 27 us (the layers one by one: 20 us).
//     Now each warp takes kCols output columns at a time and its lanes stride along K, a 16-byte
//     vector of each W row and of each input row at a time (the W rows coalesced, read once per
//     block; the inputs from shared memory, or x from global memory through L1), keeping kCols x R
//     partial sums that the warp then adds in a fixed butterfly. The epilogue adds the bias,
//     applies relu and rounds to the dtype once, and keeps the rounded value in shared memory as
//     the next layer's input: the values the layers one by one produce, up to each sum's order.
//     After the layer's one barrier the block stores its rows of the output (y, or h_l, which the
//     backward needs), a contiguous run, coalesced.
//   - Backward, phase 1 (rows): the same blocks walk the layers down: dz of the top layer is g
//     masked by y > 0; below, g_{l-1} = dz_l W_l (a thread per input column, reading W's rows
//     coalesced), rounded to the dtype, masked by h_{l-1} > 0. Every layer's dz goes to a scratch
//     buffer; dx = dz_1 W_1 only when x wants a gradient (not the data's case), and only where x
//     is at most kMlpMaxWidth wide: every row block reads all of W_1 for it, and for the CNN's
//     3136 -> 128 head (1.6 MB of W_1 in f32, read by each of 64-256 blocks) the time model put
//     the fused backward at 33-109 us against the layers' 26-127 us, behind at every batch in f32.
//   - Backward, phase 2 (weights): one grid over every layer's dW tiles (kTileN x kTileK), each
//     block summing dz^T h over all rows, staged kRowChunk rows at a time, its threads in 4 x 4
//     register tiles and kRowSplits row splits (Note [weight-gradient register tile]); the blocks
//     of a layer's first k tile also sum dz's rows: the bias gradient, as a by-product.
// Every sum runs in a fixed order, so the results do not depend on timing. Widths past
// kMlpMaxWidth, gradients flowing into the hidden outputs (only a caller that uses them makes
// those) and sizes past int32 go to the composite.
//
// Note [fused MLP backward in one launch]: phase 2 needs every row of every layer's dz, so it
// cannot start before all of phase 1 is done, a grid-wide dependency. The two phases were two
// launches; now they are one grid of the row blocks and then the weight tiles, a block's part
// taken from its place in start order, and the tiles waiting for the row blocks' count (Note
// [two-phase launch] in kernels/common/block_phases.cuh): a launch less a step (the fitted
// model's 4.8 us eagerly, less within a graph), the same sums in the same order, so bit for bit
// the two launches' results. At the MNIST sizes the whole grid is resident at once (64 row
// blocks and 113 tiles at batch 64 on an H200, 256 threads and at most 40 KB each), so the tiles
// wait on their SMs rather than behind the row blocks; where it is not, the order still
// guarantees progress. The counters are the stream's tickets; a capture on a stream that has
// none yet (they cannot be made then) takes the two launches.
namespace {
namespace dev {

constexpr int kThreads = 256;
constexpr int kW = static_cast<int>(kMlpMaxWidth);  // 128
constexpr int kWarps = kThreads / 32;
constexpr int kCols = 4;                 // forward: the columns a warp takes at once
constexpr int kTileN = 16, kTileK = 64;  // weight gradients: a block's output tile
constexpr int kRowChunk = 64;            // weight gradients: rows staged per step
constexpr int kRowSplits = 4;            // weight gradients: thread groups a block's rows are dealt to
constexpr int kPart = 4 * 4 + 4;         // weight gradients: a thread's 4 x 4 tile of dW and 4 of db

template <class T>
struct Layer {
  const T* w;  // [n, k]
  const T* b;  // [n] or null
  T* out;      // [rows, n]
  int n, k;
  int relu;
};

template <class T>
struct ForwardArgs {
  const T* x;  // [rows, k of layer 0]
  int64_t rows;
  int layers;
  Layer<T> l[kMlpMaxLayers];
};

// ls[l] with compile-time indices: a kernel parameter indexed at run time is copied to local
// memory first (ptxas reported a stack frame and spills for it).
template <class Lay>
__device__ __forceinline__ Lay layer_at(const Lay (&ls)[kMlpMaxLayers], int l) {
  Lay out = ls[0];
  EMBER_UNROLL
  for (int i = 1; i < kMlpMaxLayers; ++i)
    if (i == l) out = ls[i];
  return out;
}

// Adds v over the warp; every lane gets the sum (a fixed butterfly: the same order every run).
template <class A>
__device__ __forceinline__ A warp_sum(A v) {
  EMBER_UNROLL
  for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

// Widens V consecutive elements of T at `src` (V-aligned when V > 1) into a[0..V).
template <class T, int V, class A>
__device__ __forceinline__ void load_vec(const T* src, A (&a)[V]) {
  if constexpr (V == 1) {
    a[0] = static_cast<A>(*src);
  } else {
    const detail::AlignedVec<T, V> v = *reinterpret_cast<const detail::AlignedVec<T, V>*>(src);
    EMBER_UNROLL
    for (int e = 0; e < V; ++e) a[e] = static_cast<A>(v.v[e]);
  }
}

// The same from the accumulator-typed activations in shared memory, 16 bytes at a time.
template <int V, class A>
__device__ __forceinline__ void load_act(const A* src, A (&a)[V]) {
  constexpr int S = V * sizeof(A) >= 16 ? static_cast<int>(16 / sizeof(A)) : V;
  EMBER_UNROLL
  for (int s = 0; s < V; s += S) {
    if constexpr (S == 1) {
      a[s] = src[s];
    } else {
      const detail::AlignedVec<A, S> v = *reinterpret_cast<const detail::AlignedVec<A, S>*>(src + s);
      EMBER_UNROLL
      for (int e = 0; e < S; ++e) a[s + e] = v.v[e];
    }
  }
}

// Stores a[0..V) to accumulator-typed shared memory at `dst`, 16 bytes at a time.
template <int V, class A>
__device__ __forceinline__ void store_act(A* dst, const A (&a)[V]) {
  constexpr int S = V * sizeof(A) >= 16 ? static_cast<int>(16 / sizeof(A)) : V;
  EMBER_UNROLL
  for (int s = 0; s < V; s += S) {
    detail::AlignedVec<A, S> v;
    EMBER_UNROLL
    for (int e = 0; e < S; ++e) v.v[e] = a[s + e];
    *reinterpret_cast<detail::AlignedVec<A, S>*>(dst + s) = v;
  }
}

// R rows a block; V elements a vector (V > 1 only where every layer's K is a multiple of V and the
// operands are 16-byte aligned). Warp w takes columns in passes of kCols (w * kCols, then 8 * kCols
// further, ...); in a pass its lanes stride along K a vector at a time, each keeping kCols x R
// partial sums, which the warp then adds (warp_sum). No barrier inside a layer, and each W row is
// read once per block, coalesced.
template <class T, int R, int V>
__global__ void __launch_bounds__(kThreads) mlp_forward_kernel(ForwardArgs<T> p) {
  using A = acc_t<T>;
  EMBER_SHARED(A[2][R][kW], act);  // layer l writes act[l & 1] and reads act[(l + 1) & 1]
  const int tid = static_cast<int>(threadIdx.x), lane = tid % 32, warp = tid / 32;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * R;
  const int rows = static_cast<int>(p.rows - row0 < R ? p.rows - row0 : R);
  for (int l = 0; l < p.layers; ++l) {
    const Layer<T> L = layer_at(p.l, l);
    const int kv = L.k / V;
    const A(*in)[kW] = act[(l + 1) & 1];
    for (int nb = warp * kCols; nb < L.n; nb += kWarps * kCols) {
      A acc[kCols][R] = {};
      EMBER_UNROLL_N(2)
      for (int v = lane; v < kv; v += 32) {
        A w[kCols][V] = {};  // zeros past the layer's last column
        EMBER_UNROLL
        for (int c = 0; c < kCols; ++c) {
          if (nb + c < L.n) load_vec<T, V>(L.w + static_cast<int64_t>(nb + c) * L.k + v * V, w[c]);
        }
        EMBER_UNROLL
        for (int r = 0; r < R; ++r) {
          A x[V] = {};  // zeros past the block's last row
          if (l > 0) load_act<V>(&in[r][v * V], x);
          else if (r < rows) load_vec<T, V>(p.x + (row0 + r) * L.k + v * V, x);
          EMBER_UNROLL
          for (int c = 0; c < kCols; ++c) {
            EMBER_UNROLL
            for (int e = 0; e < V; ++e) acc[c][r] += x[e] * w[c][e];
          }
        }
      }
      // the epilogue: lane c finishes column nb + c for every row
      EMBER_UNROLL
      for (int c = 0; c < kCols; ++c) {
        EMBER_UNROLL
        for (int r = 0; r < R; ++r) {
          A v = warp_sum(acc[c][r]);
          const int n = nb + c;
          if (lane != c || n >= L.n) continue;
          if (L.b != nullptr) v += static_cast<A>(L.b[n]);
          if (L.relu) v = unary::Relu::f(v);
          act[l & 1][r][n] = static_cast<A>(static_cast<T>(v));  // rounded once, as linear rounds
        }
      }
    }
    __syncthreads();  // this layer's outputs are the next one's inputs
    // the block's rows of the output are one contiguous run: stored coalesced (exact: already rounded)
    T* out = L.out + row0 * L.n;
    for (int e = tid; e < rows * L.n; e += kThreads) out[e] = static_cast<T>(act[l & 1][e / L.n][e % L.n]);
  }
}

template <class T>
struct BackLayer {
  const T* w;    // [n, k]
  const T* in;   // the layer's input [rows, k]: x or h_l
  const T* out;  // the layer's output [rows, n]: its mask
  T* dz;         // [rows, n], scratch
  T* dw;         // [n, k]
  T* db;         // [n]
  int n, k;
  int relu;
  int tiles_k;  // the weight gradient's tiles along k (at least 1: db rides on the first)
  int tile0;    // the weight-gradient launch's first block for this layer
};

template <class T>
struct BackwardArgs {
  const T* g;  // [rows, n of the top layer]
  T* dx;       // [rows, k of layer 0], or null
  int64_t rows;
  int layers;
  BackLayer<T> l[kMlpMaxLayers];
};

// relu_backward's rule: y > 0 keeps g, anything else (NaN included) gives exactly 0.
template <class T, class A>
__device__ __forceinline__ T masked(T g, const T* y, int64_t at, int relu) {
  return relu && !(static_cast<A>(y[at]) > A(0)) ? T(0) : g;
}

// Row block `block` (R rows), walking the layers down; dzs: layer l's dz in dzs[l & 1], zeros past
// its rows and width.
template <class T, int R>
__device__ __forceinline__ void backward_rows(const BackwardArgs<T>& p, int64_t block, acc_t<T> (*dzs)[R][kW]) {
  using A = acc_t<T>;
  const int tid = static_cast<int>(threadIdx.x);
  const int64_t row0 = block * R;
  const int rows = static_cast<int>(p.rows - row0 < R ? p.rows - row0 : R);
  const int top = p.layers - 1;
  {
    const BackLayer<T> L = layer_at(p.l, top);
    for (int e = tid; e < R * kW; e += kThreads) {
      const int r = e / kW, n = e % kW;
      A v = A(0);
      if (r < rows && n < L.n) {
        const int64_t at = (row0 + r) * L.n + n;
        const T t = masked<T, A>(p.g[at], L.out, at, L.relu);
        L.dz[at] = t;
        v = static_cast<A>(t);
      }
      dzs[top & 1][r][n] = v;
    }
  }
  __syncthreads();
  // below: g_{l-1} = dz_l W_l, a thread per input column and every other row
  constexpr int kHalves = kThreads / kW;  // 2
  const int col = tid % kW, half = tid / kW;
  for (int l = top; l >= 1; --l) {
    const BackLayer<T> L = layer_at(p.l, l), B = layer_at(p.l, l - 1);  // B's output is L's input: B.n == L.k
    A acc[(R + 1) / 2];
    EMBER_UNROLL
    for (int i = 0; i < (R + 1) / 2; ++i) acc[i] = A(0);
    if (col < L.k)
      for (int n = 0; n < L.n; ++n) {
        const A w = static_cast<A>(L.w[static_cast<int64_t>(n) * L.k + col]);
        EMBER_UNROLL
        for (int i = 0; i < (R + 1) / 2; ++i)
          if (half + kHalves * i < R) acc[i] += dzs[l & 1][half + kHalves * i][n] * w;
      }
    EMBER_UNROLL
    for (int i = 0; i < (R + 1) / 2; ++i) {
      const int r = half + kHalves * i;
      if (r >= R) continue;
      A v = A(0);
      if (col < L.k && r < rows) {
        const int64_t at = (row0 + r) * L.k + col;
        const T t = masked<T, A>(static_cast<T>(acc[i]), B.out, at, B.relu);
        B.dz[at] = t;
        v = static_cast<A>(t);
      }
      dzs[(l - 1) & 1][r][col] = v;
    }
    __syncthreads();
  }
  if (p.dx == nullptr) return;
  // dx = dz_1 W_1: a thread per column of x, every row of the block
  const BackLayer<T> L = p.l[0];
  for (int k = tid; k < L.k; k += kThreads) {
    A acc[R];
    EMBER_UNROLL
    for (int r = 0; r < R; ++r) acc[r] = A(0);
    for (int n = 0; n < L.n; ++n) {
      const A w = static_cast<A>(L.w[static_cast<int64_t>(n) * L.k + k]);
      EMBER_UNROLL
      for (int r = 0; r < R; ++r) acc[r] += dzs[0][r][n] * w;
    }
    EMBER_UNROLL
    for (int r = 0; r < R; ++r)
      if (r < rows) p.dx[(row0 + r) * L.k + k] = static_cast<T>(acc[r]);
  }
}

template <class T, int R>
__global__ void __launch_bounds__(kThreads) mlp_backward_rows_kernel(BackwardArgs<T> p) {
  EMBER_SHARED(acc_t<T>[2][R][kW], dzs);
  backward_rows<T, R>(p, blockIdx.x, dzs);
}

// Stores a thread's 4 x 4 tile of dW (rows n.., inputs k..) and, with `bias`, its 4 bias
// gradients: each row's 4 inputs as vectors (of at most 16 bytes) where the row allows it.
template <class T, class A>
__device__ __forceinline__ void store_tile(const BackLayer<T>& L, int n0, int k, bool bias, const A (&tile)[kPart]) {
  constexpr int SV = 4 * sizeof(T) > 16 ? static_cast<int>(16 / sizeof(T)) : 4;
  const bool vec = L.k % 4 == 0 && reinterpret_cast<uintptr_t>(L.dw) % (SV * sizeof(T)) == 0;
  EMBER_UNROLL
  for (int i = 0; i < 4; ++i) {
    const int n = n0 + i;
    if (n >= L.n) continue;
    T* row = L.dw + static_cast<int64_t>(n) * L.k;
    if (vec && k < L.k) {
      EMBER_UNROLL
      for (int s = 0; s < 4; s += SV) {
        detail::AlignedVec<T, SV> v;
        EMBER_UNROLL
        for (int j = 0; j < SV; ++j) v.v[j] = static_cast<T>(tile[4 * i + s + j]);
        *reinterpret_cast<detail::AlignedVec<T, SV>*>(row + k + s) = v;
      }
    } else {
      EMBER_UNROLL
      for (int j = 0; j < 4; ++j)
        if (k + j < L.k) row[k + j] = static_cast<T>(tile[4 * i + j]);
    }
    if (bias) L.db[n] = static_cast<T>(tile[16 + i]);
  }
}

// Note [weight-gradient register tile]: a block owns a kTileN x kTileK tile of one layer's dW and
// sums dz^T h over every row. Its threads form kRowSplits splits of 64; thread (i, j) of a split
// keeps a 4 x 4 register tile (columns 4i.., inputs 4j..), and split s takes rows s, s + 4, ... of
// each staged chunk. Per row a warp then loads 16 distinct 16-byte vectors of h and 2 of dz for
// 16 multiply-adds a thread: a third of the shared-memory wavefronts per multiply-add that one
// output column a thread (4 outputs, 3 loads) took, which the time model put at the limit of the
// MLP's backward at batch 512. The splits add their partial tiles in split order at the end (a
// fixed order: the result does not depend on timing), through the staging buffer.
constexpr int kStage = kRowChunk * (kTileN + kTileK);  // dz rows [kRowChunk][kTileN], then h rows

// Weight-gradient tile `block` of every layer's tiles (tile0 and tiles_k say whose); stage: kStage
// accumulators of shared memory.
template <class T>
__device__ __forceinline__ void weight_grads(const BackwardArgs<T>& p, int block, acc_t<T>* stage) {
  using A = acc_t<T>;
  constexpr int kSplitThreads = kThreads / kRowSplits;  // 64: (kTileN / 4) x (kTileK / 4)
  static_assert(kSplitThreads == (kTileN / 4) * (kTileK / 4), "a split's threads cover the tile in 4 x 4");
  static_assert((kRowSplits - 1) * kSplitThreads * kPart <= kStage, "partials fit the stage");
  A(*dzt)[kTileN] = reinterpret_cast<A(*)[kTileN]>(stage);
  A(*xt)[kTileK] = reinterpret_cast<A(*)[kTileK]>(stage + kRowChunk * kTileN);
  int l = 0;  // the last layer whose first block is at or before this one (tile0 never decreases)
  EMBER_UNROLL
  for (int i = 1; i < kMlpMaxLayers; ++i)
    if (i < p.layers && block >= p.l[i].tile0) l = i;
  const BackLayer<T> L = layer_at(p.l, l);
  const int t = block - L.tile0;
  const int n0 = (t / L.tiles_k) * kTileN, k0 = (t % L.tiles_k) * kTileK;
  const int tid = static_cast<int>(threadIdx.x);
  const int split = tid / kSplitThreads, st = tid % kSplitThreads;
  const int nb = (st / (kTileK / 4)) * 4, kb = (st % (kTileK / 4)) * 4;
  const bool bias = k0 == 0 && kb == 0;  // these threads also sum dz's rows
  A tile[kPart] = {};                    // tile[4 i + j]: dW[nb + i][kb + j]; tile[16 + i]: db[nb + i]
  for (int64_t rc = 0; rc < p.rows; rc += kRowChunk) {
    const int nr = static_cast<int>(p.rows - rc < kRowChunk ? p.rows - rc : kRowChunk);
    for (int e = tid; e < kRowChunk * kTileN; e += kThreads) {
      const int r = e / kTileN, n = e % kTileN;
      dzt[r][n] = r < nr && n0 + n < L.n ? static_cast<A>(L.dz[(rc + r) * L.n + n0 + n]) : A(0);
    }
    for (int e = tid; e < kRowChunk * kTileK; e += kThreads) {
      const int r = e / kTileK, k = e % kTileK;
      xt[r][k] = r < nr && k0 + k < L.k ? static_cast<A>(L.in[(rc + r) * L.k + k0 + k]) : A(0);
    }
    __syncthreads();
    for (int r = split; r < nr; r += kRowSplits) {
      A d[4], x[4];
      load_act<4>(&dzt[r][nb], d);
      load_act<4>(&xt[r][kb], x);
      EMBER_UNROLL
      for (int i = 0; i < 4; ++i) {
        EMBER_UNROLL
        for (int j = 0; j < 4; ++j) tile[4 * i + j] += d[i] * x[j];
        if (bias) tile[16 + i] += d[i];
      }
    }
    __syncthreads();
  }
  // splits 1.. leave their tiles in the (now free) stage, 16-byte vectors at a stride of kPart
  // (conflict-free); split 0 adds them in split order
  A(*part)[kSplitThreads][kPart] = reinterpret_cast<A(*)[kSplitThreads][kPart]>(stage);
  if (split > 0) store_act<kPart>(part[split - 1][st], tile);
  __syncthreads();
  if (split > 0) return;
  for (int s = 0; s < kRowSplits - 1; ++s) {
    A other[kPart];
    load_act<kPart>(part[s][st], other);
    EMBER_UNROLL
    for (int e = 0; e < kPart; ++e) tile[e] += other[e];
  }
  store_tile(L, n0 + nb, k0 + kb, bias, tile);
}

template <class T>
__global__ void __launch_bounds__(kThreads) mlp_weight_grads_kernel(BackwardArgs<T> p) {
  EMBER_SHARED(acc_t<T>[kStage], stage);
  weight_grads<T>(p, static_cast<int>(blockIdx.x), stage);
}

// The backward in one launch (Note [fused MLP backward in one launch]): row_blocks blocks of R
// rows, then the weight-gradient tiles, in start order (Note [two-phase launch]). At least one
// block an SM: with the thread bound alone ptxas held some instances at 64 registers (128 for f64
// at 8 rows) and spilled 8-16 bytes; so they take 80-100 (f64 126-148), none spilled.
template <class T, int R>
__global__ void __launch_bounds__(kThreads, 1) mlp_backward_kernel(BackwardArgs<T> p, cuda::TwoPhaseGrid g) {
  using A = acc_t<T>;
  constexpr int kSmem = std::max(2 * R * kW, kStage);  // one phase's buffers at a time
  EMBER_SHARED(A[kSmem], smem);
  const cuda::PhaseBlock at = cuda::begin_phase_block(g);
  if (at.first) backward_rows<T, R>(p, at.x, reinterpret_cast<A(*)[R][kW]>(smem));
  else weight_grads<T>(p, at.x, smem);
  cuda::end_phase_block(g, at);
}

}  // namespace dev

// Every layer at most kMlpMaxWidth wide, its inputs within int32 (the kernels' column indices), and
// the row blocks within the grid.
bool fits(std::span<const Tensor> weights_from, size_t step, int L, int64_t rows) {
  constexpr int64_t kMax = (int64_t{1} << 31) - 1;
  if (rows >= kMax) return false;
  for (int l = 0; l < L; ++l) {
    const Tensor& w = weights_from[static_cast<size_t>(l) * step];
    if (w.shape()[0] > kMlpMaxWidth || w.shape()[1] > kMax) return false;
  }
  return true;
}

// Rows a block (Note [fused MLP]): the most (up to kMaxR) that still gives half the SMs a block.
// Every block reads all the weights, so fewer, fuller blocks move fewer bytes, as long as the GPU
// is busy.
template <int kMaxR>
int rows_per_block(int64_t rows, const Device& d) {
  const int64_t want = std::max(1, cuda::sm_count(d.index) / 2);
  for (int r : {8, 4, 2})
    if (r <= kMaxR && (rows + r - 1) / r >= want) return r;
  return 1;
}

// Calls f(std::integral_constant<int, R>{}) for r = R in {1, 2, 4, 8}, R <= kMaxR.
template <int kMaxR, class F>
void with_rows(int r, const F& f) {
  if constexpr (kMaxR >= 8) {
    if (r == 8) return f(std::integral_constant<int, 8>{});
  }
  if (r == 4) return f(std::integral_constant<int, 4>{});
  if (r == 2) return f(std::integral_constant<int, 2>{});
  return f(std::integral_constant<int, 1>{});
}

bool fused_ok(const KernelCall& c) {
  const int L = static_cast<int>(c.attr<MlpAttrs>().layers);
  return fits(c.in.subspan(1), 2, L, linear_rows(c.in[0]));
}

// dx only where the first layer's inputs are at most kMlpMaxWidth (Note [fused MLP]: every row
// block reads all of W_1 for it).
bool fused_backward_ok(const KernelCall& c) {
  const MlpAttrs& a = c.attr<MlpAttrs>();
  const int L = static_cast<int>(a.layers);
  for (int i = 1; i < L; ++i)
    if (c.in[static_cast<size_t>(1 + 2 * L + i)].defined()) return false;  // a hidden output's own gradient
  const Tensor& w1 = c.in[static_cast<size_t>(2 + L)];
  if (a.input_grad != 0 && w1.shape()[1] > kMlpMaxWidth) return false;
  return fits(c.in.subspan(static_cast<size_t>(2 + L)), 1, L, linear_rows(c.in[0]));
}

template <class T>
void launch_forward(const KernelCall& c, cudaStream_t stream) {
  const MlpAttrs& a = c.attr<MlpAttrs>();
  dev::ForwardArgs<T> p{};
  p.x = c.in[0].data<T>();
  p.rows = linear_rows(c.in[0]);
  p.layers = static_cast<int>(a.layers);
  for (int l = 0; l < p.layers; ++l) {
    const Tensor &w = c.in[static_cast<size_t>(1 + 2 * l)], &b = c.in[static_cast<size_t>(2 + 2 * l)];
    const Tensor& out = l == p.layers - 1 ? c.out[0] : c.out[static_cast<size_t>(1 + l)];
    p.l[l] = {w.data<T>(),
              b.defined() ? b.data<T>() : nullptr,
              out.data<T>(),
              static_cast<int>(w.shape()[0]),
              static_cast<int>(w.shape()[1]),
              a.relu_at(l) ? 1 : 0};
  }
  if (p.rows == 0) return;
  // 16-byte vectors where every row of x and of each W starts on 16 bytes
  constexpr int V = static_cast<int>(16 / sizeof(T));
  bool vec = reinterpret_cast<uintptr_t>(p.x) % 16 == 0;
  for (int l = 0; l < p.layers; ++l) vec = vec && p.l[l].k % V == 0 && reinterpret_cast<uintptr_t>(p.l[l].w) % 16 == 0;
  // 16-bit types at most 4 rows: at 8 rows x 16-byte vectors of 8 elements, ptxas spilled
  constexpr int kMaxR = sizeof(T) == 2 ? 4 : 8;
  with_rows<kMaxR>(rows_per_block<kMaxR>(p.rows, c.in[0].device()), [&](auto rc) {
    constexpr int R = decltype(rc)::value;
    const unsigned blocks = static_cast<unsigned>((p.rows + R - 1) / R);
    if (vec) cuda::launch(dev::mlp_forward_kernel<T, R, V>, blocks, dev::kThreads, 0, stream, p);
    else cuda::launch(dev::mlp_forward_kernel<T, R, 1>, blocks, dev::kThreads, 0, stream, p);
  });
}

template <class T>
void launch_backward(const KernelCall& c, cudaStream_t stream) {
  const MlpAttrs& a = c.attr<MlpAttrs>();
  const int L = static_cast<int>(a.layers);
  dev::BackwardArgs<T> p{};
  p.g = c.in[0].data<T>();
  p.rows = linear_rows(c.in[0]);
  p.layers = L;
  p.dx = a.input_grad != 0 && c.out[0].numel() > 0 ? c.out[0].data<T>() : nullptr;
  int64_t scratch = 0;
  for (int l = 0; l < L; ++l) scratch += p.rows * c.in[static_cast<size_t>(2 + L + l)].shape()[0];
  Tensor dz = empty({scratch}, TensorOptions(c.in[0].dtype()).device(c.in[0].device()));
  T* next = dz.data<T>();
  int tiles = 0;
  for (int l = 0; l < L; ++l) {
    const Tensor& w = c.in[static_cast<size_t>(2 + L + l)];
    const int n = static_cast<int>(w.shape()[0]), k = static_cast<int>(w.shape()[1]);
    const int tiles_k = std::max(1, (k + dev::kTileK - 1) / dev::kTileK);
    p.l[l] = {w.data<T>(),
              c.in[static_cast<size_t>(1 + l)].data<T>(),
              c.in[static_cast<size_t>(2 + l)].data<T>(),
              next,
              c.out[static_cast<size_t>(1 + 2 * l)].data<T>(),
              c.out[static_cast<size_t>(2 + 2 * l)].data<T>(),
              n,
              k,
              a.relu_at(l) ? 1 : 0,
              tiles_k,
              tiles};
    next += p.rows * n;
    tiles += (n + dev::kTileN - 1) / dev::kTileN * tiles_k;
  }
  unsigned* tickets = cuda::stream_tickets(c.in[0].device().index, stream);
  with_rows<8>(rows_per_block<8>(p.rows, c.in[0].device()), [&](auto rc) {
    constexpr int R = decltype(rc)::value;
    const int row_blocks = static_cast<int>((p.rows + R - 1) / R);
    if (tickets != nullptr) {
      // with no rows the first phase is empty and the weight gradients are zeros, written too
      const unsigned blocks = static_cast<unsigned>(row_blocks + tiles);
      if (blocks > 0)
        cuda::launch(dev::mlp_backward_kernel<T, R>, blocks, dev::kThreads, 0, stream, p,
                     cuda::TwoPhaseGrid{tickets, static_cast<unsigned>(row_blocks), blocks});
      return;
    }
    if (row_blocks > 0)
      cuda::launch(dev::mlp_backward_rows_kernel<T, R>, static_cast<unsigned>(row_blocks), dev::kThreads, 0, stream, p);
    if (tiles > 0)
      cuda::launch(dev::mlp_weight_grads_kernel<T>, static_cast<unsigned>(tiles), dev::kThreads, 0, stream, p);
  });
}

void mlp_fused(const KernelCall& c) {
  cuda::DeviceGuard guard(c.in[0].device().index);
  cudaStream_t stream = cuda::stream_for(c.in[0].device());
  EMBER_DISPATCH_FLOAT(c.in[0].dtype(), "mlp", [&] { launch_forward<scalar_t>(c, stream); });
}

void mlp_backward_fused(const KernelCall& c) {
  cuda::DeviceGuard guard(c.in[0].device().index);
  cudaStream_t stream = cuda::stream_for(c.in[0].device());
  EMBER_DISPATCH_FLOAT(c.in[0].dtype(), "mlp_backward", [&] { launch_backward<scalar_t>(c, stream); });
}

}  // namespace

void register_cuda_mlp(OpInfo& info) {
  info.add_variant({.name = "fused",
                    .device = DeviceType::cuda,
                    .fn = mlp_fused,
                    .dtypes = kFloatTypes,
                    .supports = fused_ok,
                    .note = "the whole stack in one launch: a block's rows through every layer in shared memory"});
  info.add_variant({.name = "composite",
                    .device = DeviceType::cuda,
                    .fn = mlp_composite,
                    .dtypes = kFloatTypes,
                    .note = "linear layer by layer through the registry"});
  info.add_variant({.name = "vendor",
                    .device = DeviceType::cuda,
                    .fn = mlp_vendor,
                    .dtypes = kFloatTypes,
                    .flags = kVendor,
                    .note = "linear layer by layer on its vendor variant (cuBLASLt)"});
}

void register_cuda_mlp_backward(OpInfo& info) {
  info.add_variant({.name = "fused",
                    .device = DeviceType::cuda,
                    .fn = mlp_backward_fused,
                    .dtypes = kFloatTypes,
                    .supports = fused_backward_ok,
                    .note = "one launch: every layer's dz (and dx) by rows, then every dW and db"});
  info.add_variant({.name = "composite",
                    .device = DeviceType::cuda,
                    .fn = mlp_backward_composite,
                    .dtypes = kFloatTypes,
                    .note = "linear's backward ops layer by layer through the registry"});
  info.add_variant({.name = "vendor",
                    .device = DeviceType::cuda,
                    .fn = mlp_backward_vendor,
                    .dtypes = kFloatTypes,
                    .flags = kVendor,
                    .note = "linear's backward ops layer by layer on their vendor variants (cuBLAS)"});
}

}  // namespace ember
