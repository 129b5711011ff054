// The small-problem GEMMs: one launch for the tiny and skinny layers where the tiled kernels need
// split-K and its second kernel (gemm::run_small, Note [small GEMM]), and for the short reductions
// of a layer's backward (gemm::run_outer, Note [outer-product GEMM]).
#include <algorithm>

#include "core/cuda/device_guard.h"
#include "core/cuda/kernel.cuh"
#include "kernels/common/current_stream.cuh"
#include "kernels/gemm/gemm_common.cuh"

namespace ember::gemm {

// Note [small GEMM]: a linear layer of the MNIST models ([64, 784] -> 128, [64..512, 128] -> 10)
// is one or two 128 x 128 output tiles; the tiled kernels split its K across blocks and a second
// kernel sums the splits, and the launch of that second kernel alone costs about as much as the
// whole layer in cuBLASLt (the time model fits 4.8 us per launch to the H200's rows,
// docs/perf.md, "The time model"). This kernel is one launch: a block owns a 4 x 4 output tile and
// all of K. Its 256 threads stride along K together, thread t taking vectors t, t + 256, ... of
// the 4 rows of A and the 4 columns of B (both K-major: each is a contiguous run of K elements, so
// a warp's load of one row is 32 consecutive 16-byte vectors), and each keeps 16 partial sums.
// Then a fixed reduction, so the result does not depend on timing: within each warp a transposing
// butterfly (offsets 16, 8, 4, 2 each halve the values a lane holds and exchange the other half,
// 15 shuffles, then offset 1) leaves output (lane >> 1) & 15's warp sum in lanes 2i and 2i + 1;
// the 8 warps' sums go through shared memory and threads 0-15 add them in warp order and run the
// epilogue (bias, activation, one rounding). No shared-memory staging: a tile this small is
// within a warp's reach, and re-reads of A and B come from L2. Those re-reads grow with the
// problem (A is read N / 4 times, B M / 4 times), which is why small_refusal() bounds them and the
// tiled kernels take larger layers.
namespace dev {

constexpr int kSmallThreads = 256, kSmallWarps = kSmallThreads / 32;
constexpr int kSmallTile = 4;  // output rows and columns per block

template <class T>
using SmallAcc = std::conditional_t<std::is_same_v<T, double>, double, float>;

// One step of the transposing butterfly: a lane holding 2 x kCount values keeps the half its lane
// bit kCount * 2 selects (the upper half when set), sends the other half to the lane across, and
// adds what it receives. Compile-time indices keep v in registers.
template <int kCount, class Acc>
__device__ __forceinline__ void transpose_step(Acc (&v)[16], int lane) {
  const bool upper = (lane & (2 * kCount)) != 0;
#pragma unroll
  for (int i = 0; i < kCount; ++i) {
    const Acc send = upper ? v[i] : v[i + kCount];
    const Acc keep = upper ? v[i + kCount] : v[i];
    v[i] = keep + __shfl_xor_sync(0xffffffffu, send, 2 * kCount);
  }
}

// Adds thread `lane`'s 16 partial sums across the warp; returns the warp's sum of output
// ((lane >> 1) & 15), the same in lanes 2i and 2i + 1.
template <class Acc>
__device__ __forceinline__ Acc warp_transpose_sum(Acc (&v)[16], int lane) {
  transpose_step<8>(v, lane);
  transpose_step<4>(v, lane);
  transpose_step<2>(v, lane);
  transpose_step<1>(v, lane);
  return v[0] + __shfl_xor_sync(0xffffffffu, v[0], 1);
}

// The output index a lane holds after warp_transpose_sum: lane bits 4, 3, 2, 1 chose the upper
// half at each step, the first step's half being the most significant.
__device__ __forceinline__ int transposed_index(int lane) {
  return ((lane >> 4) & 1) * 8 + ((lane >> 3) & 1) * 4 + ((lane >> 2) & 1) * 2 + ((lane >> 1) & 1);
}

template <class T, int V>
__global__ void __launch_bounds__(kSmallThreads) small_kernel(Args p) {
  using Acc = SmallAcc<T>;
  EMBER_SHARED(Acc[kSmallWarps][16], part);
  const int64_t tiles_n = (p.N + kSmallTile - 1) / kSmallTile;
  const int64_t m0 = static_cast<int64_t>(blockIdx.x) / tiles_n * kSmallTile;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) % tiles_n * kSmallTile;
  const T* A = static_cast<const T*>(p.a);
  const T* B = static_cast<const T*>(p.b);
  const T* arow[kSmallTile];
  const T* bcol[kSmallTile];
#pragma unroll
  for (int i = 0; i < kSmallTile; ++i) {
    arow[i] = m0 + i < p.M ? A + (m0 + i) * p.a_rs : nullptr;
    bcol[i] = n0 + i < p.N ? B + (n0 + i) * p.b_cs : nullptr;
  }
  Acc acc[16];
#pragma unroll
  for (int i = 0; i < 16; ++i) acc[i] = Acc(0);
  const int64_t nvec = p.K / V;  // V > 1 only when V divides K (make_args' a_vec and b_vec)
  for (int64_t k = threadIdx.x; k < nvec; k += kSmallThreads) {
    Vec<T, V> a[kSmallTile], b[kSmallTile];
#pragma unroll
    for (int i = 0; i < kSmallTile; ++i) {
      if (arow[i] != nullptr) a[i] = reinterpret_cast<const Vec<T, V>*>(arow[i])[k];
      if (bcol[i] != nullptr) b[i] = reinterpret_cast<const Vec<T, V>*>(bcol[i])[k];
    }
#pragma unroll
    for (int i = 0; i < kSmallTile; ++i) {
      if (arow[i] == nullptr) continue;
#pragma unroll
      for (int j = 0; j < kSmallTile; ++j) {
        if (bcol[j] == nullptr) continue;
#pragma unroll
        for (int e = 0; e < V; ++e)
          acc[i * kSmallTile + j] += static_cast<Acc>(a[i].v[e]) * static_cast<Acc>(b[j].v[e]);
      }
    }
  }
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  const Acc sum = warp_transpose_sum(acc, lane);
  if ((lane & 1) == 0) part[warp][transposed_index(lane)] = sum;
  __syncthreads();
  if (threadIdx.x >= 16) return;
  const int64_t m = m0 + threadIdx.x / kSmallTile, n = n0 + threadIdx.x % kSmallTile;
  if (m >= p.M || n >= p.N) return;
  Acc v = part[0][threadIdx.x];
#pragma unroll
  for (int w = 1; w < kSmallWarps; ++w) v += part[w][threadIdx.x];
  if (p.bias != nullptr) v += static_cast<Acc>(static_cast<const T*>(p.bias)[n]);
  static_cast<T*>(p.c)[m * p.c_rs + n] = static_cast<T>(activate(v, p.act));
}

// Note [outer-product GEMM]: the backward of a small layer multiplies over the batch (dW = dz^T x,
// a reduction of 64 to 512) or over the layer's outputs (dx = dz W, of 10 to 128), with B
// row-major: B's rows are contiguous along the output's columns. Each thread owns one column n
// of C and R rows, and walks the reduction in order: B[k, n] is a coalesced load across
// the warp, A[m, k] the same address in every lane (one broadcast), so A may have any layout (dz^T
// is a transposed view). No shared memory, no barrier: K is short, and the grid has
// M / R x N / 128 blocks (112 for the MLP's dW at batch 64, where the 128 x 128 tiles
// give 7); where it has fewer than the GPU's SMs and K is long, K is split inside the block (Note
// [outer K split]). The sum runs in k order (a split's runs in split order), so the result does
// not depend on timing. outer_refusal bounds K and the re-reads of B (once per R rows of C):
// R = 4 rows a thread where those fit the bound, else 16, which reads B a quarter as often for a
// grid a quarter as large. That takes the first layer's weight gradient at batch 512 ([128, 512]
// x [512, 784]: B read 32 times at R = 4, 51 MB in f32) in one launch, where the composite needs
// three.
constexpr int kOuterThreads = 128;

// Note [outer K split]: where the grid is smaller than the GPU (the first layer's weight
// gradient at batch 512 is 56 blocks of 16 rows, the second layer's 16 blocks of 4), each thread
// walks all of K alone: 512 dependent steps of R multiply-adds on a few warps per SM. Then the
// block holds S = 4 copies of its 128 columns (2 for f64 at 16 rows, whose partials would not
// fit the 48 KB), split s walks the s-th of S equal runs of K, splits 1..S-1 leave their sums
// (and row sums) in shared memory, and split 0 adds them in split order after its own: a fixed
// order, so the result still does not depend on timing (it differs from the unsplit kernel's by
// the order of the additions). outer_splits chooses S.
constexpr int kOuterSplitMinK = 256;       // shorter reductions are not worth the barrier
constexpr int64_t kOuterSplitBelow = 132;  // blocks: fewer than an H100's or H200's SMs

// kFused: the relu mask on A and the row sums (Note [fused linear backward]); without it the
// plain product, with no code for either. S: the splits of K (Note [outer K split]). A split
// kernel asks for one block an SM (its grid is smaller than the GPU anyway): left to its default,
// ptxas held the 16-row split under 128 registers and spilled. At 16 rows and 4 splits (512
// threads: 128 registers at most) the k loop unrolls by 2, not 4, which keeps the loads it
// hoists within them (no spills).
template <class T, bool kFused, int R, int S>
__global__ void __launch_bounds__(kOuterThreads* S, S == 1 ? 0 : 1) outer_kernel(Args p, OuterFusion f) {
  using Acc = SmallAcc<T>;
  // compile-time 0 and the thread index without a split, so that kernel is as it was
  const int split = S == 1 ? 0 : static_cast<int>(threadIdx.x) / kOuterThreads;
  const int col = S == 1 ? static_cast<int>(threadIdx.x) : static_cast<int>(threadIdx.x) % kOuterThreads;
  const int64_t tiles_n = (p.N + kOuterThreads - 1) / kOuterThreads;
  const int64_t tile_n = static_cast<int64_t>(blockIdx.x) % tiles_n;
  const int64_t m0 = static_cast<int64_t>(blockIdx.x) / tiles_n * R;
  const int64_t n = tile_n * kOuterThreads + col;
  const bool active = n < p.N;    // column 0 of every tile is (n = tile_n * 128 < N)
  if (S == 1 && !active) return;  // no barrier below without a split
  // this split's run of K: [k0, k0 + len)
  int64_t k0 = 0, len = p.K;
  if constexpr (S > 1) {
    const int64_t run = (p.K + S - 1) / S;
    k0 = min64(p.K, split * run);
    len = active ? min64(p.K - k0, run) : 0;
  }
  const T* A = static_cast<const T*>(p.a) + m0 * p.a_rs + k0 * p.a_cs;
  const T* mask = kFused && f.a_mask != nullptr ? static_cast<const T*>(f.a_mask) + m0 * p.a_rs + k0 * p.a_cs : nullptr;
  // the blocks of the first column tile also sum A's rows, from the loads they make anyway
  const bool sums = kFused && f.row_sum != nullptr && tile_n == 0;
  const T* B = static_cast<const T*>(p.b) + k0 * p.b_rs + n;  // b_cs == 1
  const int rows = static_cast<int>(min64(R, p.M - m0));
  Acc acc[R], rsum[R];
#pragma unroll
  for (int i = 0; i < R; ++i) acc[i] = rsum[i] = Acc(0);
#pragma unroll(R* S > 32 ? 2 : 4)
  for (int64_t k = 0; k < len; ++k) {
    const Acc b = static_cast<Acc>(B[k * p.b_rs]);
#pragma unroll
    for (int i = 0; i < R; ++i) {
      if (i >= rows) continue;
      const int64_t at = i * p.a_rs + k * p.a_cs;
      Acc a = static_cast<Acc>(A[at]);
      if constexpr (kFused) {
        // relu_backward's rule: y > 0 keeps g, anything else (NaN included) gives exactly 0
        if (mask != nullptr && !(static_cast<Acc>(mask[at]) > Acc(0))) a = Acc(0);
        if (sums) rsum[i] += a;
      }
      acc[i] += a * b;
    }
  }
  if constexpr (S > 1) {
    EMBER_SHARED(Acc[S - 1][R][kOuterThreads], part);
    EMBER_SHARED(Acc[S - 1][R], row_part);
    if (split > 0 && active) {
#pragma unroll
      for (int i = 0; i < R; ++i) part[split - 1][i][col] = acc[i];
      if (sums && col == 0)
#pragma unroll
        for (int i = 0; i < R; ++i) row_part[split - 1][i] = rsum[i];
    }
    __syncthreads();
    if (split > 0 || !active) return;
    for (int s = 0; s < S - 1; ++s) {
#pragma unroll
      for (int i = 0; i < R; ++i) acc[i] += part[s][i][col];
      if (sums && col == 0)
#pragma unroll
        for (int i = 0; i < R; ++i) rsum[i] += row_part[s][i];
    }
  }
  const Acc bias = p.bias != nullptr ? static_cast<Acc>(static_cast<const T*>(p.bias)[n]) : Acc(0);
#pragma unroll
  for (int i = 0; i < R; ++i)
    if (i < rows) static_cast<T*>(p.c)[(m0 + i) * p.c_rs + n] = static_cast<T>(activate(acc[i] + bias, p.act));
  if constexpr (kFused) {
    if (sums && col == 0)
#pragma unroll
      for (int i = 0; i < R; ++i)
        if (i < rows) static_cast<T*>(f.row_sum)[m0 + i] = static_cast<T>(rsum[i]);
  }
}

template <class T, int R, int S>
void launch_outer_rows(const Problem& p, const OuterFusion& fuse, cudaStream_t stream) {
  const int64_t blocks = ((p.M + R - 1) / R) * ((p.N + kOuterThreads - 1) / kOuterThreads);
  const unsigned threads = kOuterThreads * S;
  if (fuse.a_mask != nullptr || fuse.row_sum != nullptr)
    cuda::launch(outer_kernel<T, true, R, S>, static_cast<unsigned>(blocks), threads, 0, stream, make_args(p, 16),
                 fuse);
  else
    cuda::launch(outer_kernel<T, false, R, S>, static_cast<unsigned>(blocks), threads, 0, stream, make_args(p, 16),
                 fuse);
}

template <class T>
void launch_outer(const Problem& p, const OuterFusion& fuse, cudaStream_t stream) {
  const int splits = outer_splits(p);
  if (outer_rows(p) == 4) {
    if (splits == 4) launch_outer_rows<T, 4, 4>(p, fuse, stream);
    else launch_outer_rows<T, 4, 1>(p, fuse, stream);
  } else if (splits == 1) {
    launch_outer_rows<T, 16, 1>(p, fuse, stream);
  } else if constexpr (sizeof(T) == 8) {
    launch_outer_rows<T, 16, 2>(p, fuse, stream);
  } else {
    launch_outer_rows<T, 16, 4>(p, fuse, stream);
  }
}

template <class T>
void launch_small(const Problem& p, cudaStream_t stream) {
  Args args = make_args(p, 16);
  const int64_t blocks = ((p.M + kSmallTile - 1) / kSmallTile) * ((p.N + kSmallTile - 1) / kSmallTile);
  constexpr int V = static_cast<int>(16 / sizeof(T));
  if (args.a_vec && args.b_vec)
    cuda::launch(small_kernel<T, V>, static_cast<unsigned>(blocks), kSmallThreads, 0, stream, args);
  else cuda::launch(small_kernel<T, 1>, static_cast<unsigned>(blocks), kSmallThreads, 0, stream, args);
}

}  // namespace dev

const char* small_refusal(const Problem& p) {
  constexpr int64_t T = dev::kSmallTile;
  if (p.batch() != 1) return "batched";
  if (p.a_cs != 1 || p.b_rs != 1) return "an operand is not K-major";
  if (((p.M + T - 1) / T) * ((p.N + T - 1) / T) >= (int64_t{1} << 31)) return "too many output tiles";
  const double es = static_cast<double>(dtype_size(p.dtype));
  const double rereads =
      (static_cast<double>((p.N + T - 1) / T) * p.M + static_cast<double>((p.M + T - 1) / T) * p.N) * p.K * es;
  if (rereads > kSmallMaxRereadBytes) return "its operand re-reads exceed the bound (a tiled kernel's problem)";
  return nullptr;
}

int outer_rows(const Problem& p) {
  const double es = static_cast<double>(dtype_size(p.dtype));
  // 16 rows only up to half of kOuterMaxK: a thread's serial walk is K x R multiply-adds, and
  // 512 x 16 (batch 512) is already twice the longest walk at 4 rows
  for (int64_t r : {4, 16}) {
    const double rereads = static_cast<double>(p.K) * p.N * es * static_cast<double>((p.M + r - 1) / r);
    if (rereads <= kSmallMaxRereadBytes && (r == 4 || p.K <= kOuterMaxK / 2)) return static_cast<int>(r);
  }
  return 0;
}

int outer_splits(const Problem& p) {
  const int r = outer_rows(p);
  if (r == 0 || p.K < dev::kOuterSplitMinK) return 1;
  const int64_t blocks = ((p.M + r - 1) / r) * ((p.N + dev::kOuterThreads - 1) / dev::kOuterThreads);
  if (blocks >= dev::kOuterSplitBelow) return 1;
  // f64 at 16 rows takes 2: 4 splits' partials would pass the 48 KB of static shared memory
  return r == 16 && dtype_size(p.dtype) == 8 ? 2 : 4;
}

const char* outer_refusal(const Problem& p) {
  constexpr int64_t W = dev::kOuterThreads;
  if (p.batch() != 1) return "batched";
  if (p.b_cs != 1) return "B is not row-major";
  if (p.K > kOuterMaxK) return "the reduction is longer than kOuterMaxK";
  const int r = outer_rows(p);
  if (r == 0) return "B's re-reads exceed the bound (a tiled kernel's problem)";
  if (((p.M + r - 1) / r) * ((p.N + W - 1) / W) >= (int64_t{1} << 31)) return "too many blocks";
  return nullptr;
}

namespace {

// Runs launch(T{}, stream) for the problem's dtype on its device, unless `why` (the refusal) says
// the kernel does not take it.
template <class F>
void run_checked(const char* name, const Problem& p, const char* why, const F& launch) {
  if (p.M == 0 || p.N == 0) return;
  EMBER_CHECK(why == nullptr, name, ": the problem [", p.M, ", ", p.K, "] x [", p.K, ", ", p.N,
              "] is not taken: ", why ? why : "");
  cuda::DeviceGuard guard(p.device.index);
  cudaStream_t stream = cuda::stream_for(p.device);
  EMBER_DISPATCH_FLOAT(p.dtype, name, [&] { launch(scalar_t{}, stream); });
}

}  // namespace

void run_outer(const Problem& p) { run_outer_fused(p, {}); }

void run_outer_fused(const Problem& p, const OuterFusion& fuse) {
  EMBER_CHECK(fuse.row_sum == nullptr || p.N > 0, "gemm outer: row sums need at least one column of C");
  run_checked("gemm outer", p, outer_refusal(p),
              [&](auto t, cudaStream_t stream) { dev::launch_outer<decltype(t)>(p, fuse, stream); });
}

void run_small(const Problem& p) {
  run_checked("gemm small", p, small_refusal(p),
              [&](auto t, cudaStream_t stream) { dev::launch_small<decltype(t)>(p, stream); });
}

}  // namespace ember::gemm
