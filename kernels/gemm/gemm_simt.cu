// simt: the f32/f64 SIMT GEMM (CUDA cores, no tensor cores: pure FP32/FP64 arithmetic).
//
// Tiles: f32 128x128 per block, BK = 8, 256 threads, 8x8 outputs per thread; f64 64x64, BK = 8,
// 256 threads, 4x4 per thread. A thread's outputs are a 2x2 grid of (TM/2)x(TN/2) sub-tiles
// (rows ty*TM/2.. and BM/2 + ty*TM/2.., columns likewise), so each k step reads its 8+8 operands
// with four 16-byte shared loads; a warp is a 4x8 grid of threads, so those loads are
// broadcasts of 4 (A) and 8 (B) distinct vectors: one shared-memory wavefront each.
// Pipeline: the shared main loop (kernels/gemm/mainloop.cuh, Note [gemm main loop]) with a
// register-staged operand iterator, SimtTiles: the next k tile's global loads (one 16-byte vector
// of A and one of B per thread) are issued before the current tile's 8 k steps and stored after
// them. A is stored k-major (As[k][m]) so the outer product reads contiguous rows; a k-contiguous
// operand is transposed on the way in (Note [simt tile padding]).
// Split-K (Note [split-K] in gemm_common.cuh) when the tiles fill less than half the SMs.
// Operands: row-major or transposed views in place (template on which stride is 1); 16-byte
// vector loads when the base, leading dim, batch strides and the contiguous extent allow, else
// guarded scalar loads. Epilogue: bias, activation, rounding, 16-byte stores where aligned.
//
// Limits: per k step a warp issues 64 FFMA per thread against 4 LDS.128 (4 wavefronts), and a k
// tile's L2 reads are small beside its FLOPs, so the FMA pipe, not shared memory or L2, is the
// limit. Registers: 64 accumulators + 16 operands + 8 prefetch ~ 120 per thread, so 2 blocks
// (16 warps) per SM. f64 runs at FP64 SIMT speed, while cuBLAS's DGEMM uses the FP64 tensor cores.
// Napkin math: docs/perf.md ("Napkin math behind the kernels").
#include <algorithm>

#include "core/cuda/device_guard.h"
#include "core/cuda/kernel.cuh"
#include "kernels/common/current_stream.cuh"
#include "kernels/gemm/gemm_common.cuh"
#include "kernels/gemm/mainloop.cuh"

namespace ember::gemm {

namespace dev {

template <class T>
struct SimtCfg;
template <>
struct SimtCfg<float> {
  static constexpr int BM = 128, BN = 128, BK = 8, TM = 8, TN = 8;
};
template <>
struct SimtCfg<double> {
  static constexpr int BM = 64, BN = 64, BK = 8, TM = 4, TN = 4;
};
constexpr int kSimtThreads = 256;

// The operand iterator of the SIMT GEMM (Note [gemm main loop]): each thread moves one 16-byte
// vector of A and one of B per k tile, staged through registers; tiles are stored k-major
// (As[k][m], Bs[k][n]) so a k step reads contiguous rows. kMask: A's vector is zeroed where the
// mask's vector beside it is not > 0 (Note [fused simt backward]).
template <class T, bool A_K, bool B_K, bool kMask = false>
struct SimtTiles : RegisterStaged {
  using Cfg = SimtCfg<T>;
  static constexpr int BM = Cfg::BM, BN = Cfg::BN, BK = Cfg::BK, TM = Cfg::TM, TN = Cfg::TN;
  static constexpr int VEC = 16 / sizeof(T);  // elements per 16-byte vector
  static constexpr int HM = TM / 2, HN = TN / 2;
  static_assert(BM * BK == kSimtThreads * VEC && BN * BK == kSimtThreads * VEC, "one vector per thread per tile");
  static_assert((BM / TM) * (BN / TN) == kSimtThreads && BM / TM == 16 && BN / TN == 16, "16x16 threads");
  static_assert(HM == VEC && HN == VEC, "sub-tile rows are one 16-byte vector");
  using V = Vec<T, VEC>;
  using ATile = V[2][BK][BM / VEC + 1];  // one vector of padding per row: Note [simt tile padding]
  using BTile = V[2][BK][BN / VEC + 1];

  ATile& As;
  BTile& Bs;
  int64_t a_ld, b_ld;  // A: its stride along m (A_K) or along k; B: along n (B_K) or along k
  bool a_vec, b_vec;   // 16-byte vector loads (Args::a_vec, b_vec)
  const T* A;
  const T* B;
  const T* Amask = nullptr;  // kMask: A's mask, at A's offsets
  int M, N, K, m0, n0;
  int ty, tx;    // the thread's row and column group of the 16x16 thread grid
  int a_x, a_k;  // A_K: row a_x, k a_k..a_k+VEC; else k a_k, rows a_x..a_x+VEC
  int b_x, b_k;  // B_K: column b_x, k b_k..; else k b_k, columns b_x..b_x+VEC
  V ra{}, rb{};  // staged k tile (zeroed: only ever stored after a fetch)

  __device__ __forceinline__ SimtTiles(ATile& as, BTile& bs, const Args& args, int tid, int row0, int col0)
      : As(as),
        Bs(bs),
        a_ld(A_K ? args.a_rs : args.a_cs),
        b_ld(B_K ? args.b_cs : args.b_rs),
        a_vec(args.a_vec),
        b_vec(args.b_vec),
        A(nullptr),
        B(nullptr),
        M(static_cast<int>(args.M)),
        N(static_cast<int>(args.N)),
        K(static_cast<int>(args.K)),
        m0(row0),
        n0(col0) {
    const int lane = tid & 31, warp = tid >> 5;
    ty = (warp >> 1) * 4 + (lane >> 3);  // 0..15: the thread's row group
    tx = (warp & 1) * 8 + (lane & 7);    // 0..15: the thread's column group
    if constexpr (A_K) {
      a_x = tid / (BK / VEC);
      a_k = (tid % (BK / VEC)) * VEC;
    } else {
      a_k = tid / (BM / VEC);
      a_x = (tid % (BM / VEC)) * VEC;
    }
    if constexpr (B_K) {
      b_x = tid / (BK / VEC);
      b_k = (tid % (BK / VEC)) * VEC;
    } else {
      b_k = tid / (BN / VEC);
      b_x = (tid % (BN / VEC)) * VEC;
    }
  }

  __device__ __forceinline__ T& a_at(int buf, int k, int m) { return As[buf][k][m / VEC].v[m % VEC]; }
  __device__ __forceinline__ T& b_at(int buf, int k, int n) { return Bs[buf][k][n / VEC].v[n % VEC]; }

  // The thread's vector of A (or of the mask, at A's offsets from `base`) in k tile k0 / BK.
  __device__ __forceinline__ V load_a(const T* base, int k0) const {
    V r;
    const int gm = m0 + a_x, gk = k0 + a_k;
    if constexpr (A_K) {  // A[m, k] at A + m * a_rs + k
      const T* src = base + static_cast<int64_t>(gm) * a_ld + gk;
      if (a_vec) {
        if (gm < M && gk < K) r = *reinterpret_cast<const V*>(src);
        else r = V{};
      } else {
        EMBER_UNROLL
        for (int i = 0; i < VEC; ++i) r.v[i] = (gm < M && gk + i < K) ? src[i] : T(0);
      }
    } else {  // A[m, k] at A + m + k * a_cs
      const T* src = base + static_cast<int64_t>(gk) * a_ld + gm;
      if (a_vec) {
        if (gk < K && gm < M) r = *reinterpret_cast<const V*>(src);
        else r = V{};
      } else {
        EMBER_UNROLL
        for (int i = 0; i < VEC; ++i) r.v[i] = (gk < K && gm + i < M) ? src[i] : T(0);
      }
    }
    return r;
  }

  __device__ __forceinline__ void fetch(int t, int) {
    const int k0 = t * BK;
    ra = load_a(A, k0);
    if constexpr (kMask) {
      // relu_backward's rule: y > 0 keeps g, anything else (NaN included) gives exactly 0 (no
      // mask: the row sums alone)
      if (Amask != nullptr) {
        const V m = load_a(Amask, k0);
        EMBER_UNROLL
        for (int i = 0; i < VEC; ++i)
          if (!(m.v[i] > T(0))) ra.v[i] = T(0);
      }
    }
    if constexpr (B_K) {  // B[k, n] at B + k + n * b_cs
      const int gn = n0 + b_x, gk = k0 + b_k;
      const T* src = B + static_cast<int64_t>(gn) * b_ld + gk;
      if (b_vec) {
        if (gn < N && gk < K) rb = *reinterpret_cast<const V*>(src);
        else rb = V{};
      } else {
        EMBER_UNROLL
        for (int i = 0; i < VEC; ++i) rb.v[i] = (gn < N && gk + i < K) ? src[i] : T(0);
      }
    } else {  // B[k, n] at B + k * b_rs + n
      const int gn = n0 + b_x, gk = k0 + b_k;
      const T* src = B + static_cast<int64_t>(gk) * b_ld + gn;
      if (b_vec) {
        if (gk < K && gn < N) rb = *reinterpret_cast<const V*>(src);
        else rb = V{};
      } else {
        EMBER_UNROLL
        for (int i = 0; i < VEC; ++i) rb.v[i] = (gk < K && gn + i < N) ? src[i] : T(0);
      }
    }
  }

  __device__ __forceinline__ void commit(int buf, bool fetched) {
    if (!fetched) return;
    if constexpr (A_K) {
      EMBER_UNROLL
      for (int i = 0; i < VEC; ++i) a_at(buf, a_k + i, a_x) = ra.v[i];
    } else {
      As[buf][a_k][a_x / VEC] = ra;
    }
    if constexpr (B_K) {
      EMBER_UNROLL
      for (int i = 0; i < VEC; ++i) b_at(buf, b_k + i, b_x) = rb.v[i];
    } else {
      Bs[buf][b_k][b_x / VEC] = rb;
    }
  }

  // The thread's outputs are a 2x2 grid of (TM/2)x(TN/2) sub-tiles: two 16-byte vectors of each
  // operand per k step.
  __device__ __forceinline__ void fragments(int buf, int kk, T (&af)[TM], T (&bf)[TN]) {
    const V a0 = As[buf][kk][ty], a1 = As[buf][kk][BM / 2 / VEC + ty];
    const V b0 = Bs[buf][kk][tx], b1 = Bs[buf][kk][BN / 2 / VEC + tx];
    EMBER_UNROLL
    for (int i = 0; i < HM; ++i) {
      af[i] = a0.v[i];
      af[HM + i] = a1.v[i];
    }
    EMBER_UNROLL
    for (int j = 0; j < HN; ++j) {
      bf[j] = b0.v[j];
      bf[HN + j] = b1.v[j];
    }
  }
};

// Split-K: this block's raw partial sums into its slice of the workspace.
template <class Tiles, class T>
__device__ __forceinline__ void simt_store_partials(const Args& p, int64_t z, int m0, int n0, int ty, int tx,
                                                    const T (&acc)[Tiles::TM][Tiles::TN]) {
  constexpr int BM = Tiles::BM, BN = Tiles::BN, TM = Tiles::TM, TN = Tiles::TN, HM = Tiles::HM, HN = Tiles::HN;
  const int M = static_cast<int>(p.M), N = static_cast<int>(p.N);
  T* W = static_cast<T*>(p.ws) + (static_cast<int64_t>(blockIdx.y) * p.batch + z) * p.M * p.N;
  EMBER_UNROLL
  for (int i = 0; i < TM; ++i) {
    const int gm = m0 + (i < HM ? ty * HM + i : BM / 2 + ty * HM + (i - HM));
    if (gm >= M) continue;
    EMBER_UNROLL
    for (int j = 0; j < TN; ++j) {
      const int gn = n0 + (j < HN ? tx * HN + j : BN / 2 + tx * HN + (j - HN));
      if (gn < N) W[static_cast<int64_t>(gm) * N + gn] = acc[i][j];
    }
  }
}

// The epilogue: bias, activation, store (16-byte vectors where aligned and inside N); GELU's loop
// apart, the thread's column halves past N skipped (Note [compact epilogues]).
template <class Tiles, class T>
__device__ __forceinline__ void simt_store_tile(const Args& p, int64_t z, int m0, int n0, int ty, int tx,
                                                const T (&acc)[Tiles::TM][Tiles::TN]) {
  constexpr int BM = Tiles::BM, BN = Tiles::BN, TM = Tiles::TM, HM = Tiles::HM, HN = Tiles::HN;
  using V = typename Tiles::V;
  const int M = static_cast<int>(p.M), N = static_cast<int>(p.N);
  const T* bias = static_cast<const T*>(p.bias);
  T* Cz = static_cast<T*>(p.c) + z * p.c_bs;
  with_activation(p.act, [&](auto act) {
    EMBER_UNROLL
    for (int i = 0; i < TM; ++i) {
      const int gm = m0 + (i < HM ? ty * HM + i : BM / 2 + ty * HM + (i - HM));
      if (gm >= M) continue;
      T* crow = Cz + static_cast<int64_t>(gm) * p.c_rs;
      EMBER_UNROLL
      for (int h = 0; h < 2; ++h) {
        const int gn0 = n0 + h * (BN / 2) + tx * HN;
        if (gn0 >= N) continue;  // this thread's columns of the half are past N
        V out;
        EMBER_UNROLL
        for (int j = 0; j < HN; ++j) {
          T v = acc[i][h * HN + j];
          if (bias != nullptr && gn0 + j < N) v += bias[gn0 + j];
          out.v[j] = activate<decltype(act)::value>(v, p.act);
        }
        if (p.c_vec && gn0 + HN <= N) {
          *reinterpret_cast<V*>(crow + gn0) = out;
        } else {
          EMBER_UNROLL
          for (int j = 0; j < HN; ++j) {
            if (gn0 + j < N) crow[gn0 + j] = out.v[j];
          }
        }
      }
    }
  });
}

// Note [fused simt backward]: a relu layer's backward where the outer-product kernel refuses (the
// CNN's 3136-wide layer from batch 256; Note [fused linear backward] in kernels/ops/linear.cu) ran
// four launches: relu_backward (dz), dz W, dz^T x, and the sum of dz's rows for the bias. Here it
// is two, one for each GEMM, with outer's fusion: each thread loads the mask's vector (the layer's
// output y, at A's offsets) beside its vector of A and zeroes A where the mask is not > 0, so dz is
// never written; and for dW the bias gradient, the sums of A = dz^T's rows, comes from blocks of
// its own appended to the grid (row_sums_block in gemm_common.cuh). They share the GEMM's launch,
// not its loads: beside a GEMM of 2 M N K FLOPs, M K more reads. Only f32 with B row-major (both
// GEMMs of the backward) is instantiated: f64 (gradchecks, never training) at the 128-register cap
// spilled with the mask.
template <class T, bool A_K, bool B_K, bool kFused = false>
__global__ void __launch_bounds__(kSimtThreads, 2) simt_kernel(Args p) {
  using Tiles = SimtTiles<T, A_K, B_K, kFused>;
  constexpr int BM = Tiles::BM, BN = Tiles::BN, BK = Tiles::BK, TM = Tiles::TM, TN = Tiles::TN;

  // Note [simt tile padding]: a k-contiguous operand arrives as one vector along k per thread and
  // is stored transposed, element by element: for element i a warp's lanes write the rows
  // k = j VEC + i (j = 0 .. BK/VEC - 1), 64 bytes of consecutive m in each (f32: 16 lanes of m per
  // row; f64: 8). Rows of BM (BN) elements are a multiple of the 32 banks long, so unpadded those
  // rows started on the same bank: 2-way conflicts on every such store. One 16-byte vector of
  // padding per row (33 vectors = 132 words) starts row k at bank 4k: rows VEC apart are 16 banks
  // apart for f32 (conflict-free) and the four f64 rows cover every bank exactly twice (its ideal
  // 2 wavefronts per 256 bytes). The padding keeps rows 16-byte aligned, so the k-step reads stay
  // 16-byte vectors (4 of one row per warp: one wavefront), and the m-contiguous vector stores
  // (one row per warp) stay conflict-free. ptxas also spills less with it than unpadded or with
  // an XOR swizzle of the vector index.
  EMBER_SHARED(typename Tiles::ATile, As_raw);
  EMBER_SHARED(typename Tiles::BTile, Bs_raw);

  const int K = static_cast<int>(p.K);
  const int64_t tiles_m = (p.M + BM - 1) / BM, tiles_n = (p.N + BN - 1) / BN;
  if constexpr (kFused) {
    if (blockIdx.x >= tiles_m * tiles_n) {  // a row-sum block (Note [fused simt backward])
      if (blockIdx.y == 0 && p.row_sum != nullptr) row_sums_block<T, kSimtThreads>(p, blockIdx.x - tiles_m * tiles_n);
      return;
    }
  }
  int64_t tmi, tni;
  tile_coords(blockIdx.x, tiles_m, tiles_n, tmi, tni);
  const int m0 = static_cast<int>(tmi) * BM, n0 = static_cast<int>(tni) * BN;

  const int ktiles = (K + BK - 1) / BK;
  const int kt_begin = static_cast<int>(min64(ktiles, blockIdx.y * p.kt_per_split));
  const int kt_end = static_cast<int>(min64(ktiles, kt_begin + p.kt_per_split));
  for (int64_t z = blockIdx.z; z < p.batch; z += gridDim.z) {
    int64_t ao, bo;
    batch_offsets(p, z, ao, bo);
    // constructed per batch: its staging registers carry nothing from one batch to the next
    Tiles tiles(As_raw, Bs_raw, p, threadIdx.x, m0, n0);
    tiles.A = static_cast<const T*>(p.a) + ao;
    tiles.B = static_cast<const T*>(p.b) + bo;
    if constexpr (kFused) tiles.Amask = p.a_mask != nullptr ? static_cast<const T*>(p.a_mask) + ao : nullptr;
    const int ty = tiles.ty, tx = tiles.tx;

    T acc[TM][TN];
    simt_gemm<BK>(tiles, kt_begin, kt_end, acc);

    if (p.ws != nullptr) {  // split-K: reduced by the tile's last block
      simt_store_partials<Tiles>(p, z, m0, n0, ty, tx, acc);
      finish_split_tile<T, BM, BN>(p, z, m0, n0);
      continue;
    }
    simt_store_tile<Tiles>(p, z, m0, n0, ty, tx, acc);
    __syncthreads();  // the next batch reuses the shared tiles
  }
}

template <class T, bool A_K, bool B_K, bool kFused = false>
void launch_simt(const Args& args, int splits, cudaStream_t stream) {
  using Cfg = SimtCfg<T>;
  const int64_t tiles = ((args.M + Cfg::BM - 1) / Cfg::BM) * ((args.N + Cfg::BN - 1) / Cfg::BN);
  // the row sums' blocks after the tiles' (Note [fused simt backward])
  const int64_t sums = args.row_sum != nullptr ? (args.M + kRowSumRows - 1) / kRowSumRows : 0;
  EMBER_CHECK(tiles + sums < (int64_t{1} << 31), "gemm simt: too many tiles (", tiles, ")");
  dim3 grid(static_cast<unsigned>(tiles + sums), static_cast<unsigned>(splits), grid_z(args.batch));
  cuda::launch(simt_kernel<T, A_K, B_K, kFused>, grid, kSimtThreads, 0, stream, args);
}

template <class T>
void dispatch_simt(const Problem& p, cudaStream_t stream, const OuterFusion* fuse = nullptr) {
  using Cfg = SimtCfg<T>;
  Args args = make_args(p, 16);
  if (fuse != nullptr) {
    args.a_mask = fuse->a_mask;
    args.row_sum = fuse->row_sum;
  }
  const int64_t tiles = ((p.M + Cfg::BM - 1) / Cfg::BM) * ((p.N + Cfg::BN - 1) / Cfg::BN) * args.batch;
  const int64_t ktiles = (p.K + Cfg::BK - 1) / Cfg::BK;
  Tensor ws;
  int splits = choose_splits(tiles, ktiles, 16, p.device.index);  // >= 128 k per split
  if (splits > 1) splits = plan_splits(args, p, ktiles, splits, sizeof(T), tiles, ws, stream);
  const bool ak = p.a_kmajor(), bk = p.b_kmajor();
  if constexpr (std::is_same_v<T, float>) {  // the fused form: f32, B row-major (simt_fused_refusal)
    if (fuse != nullptr && ak) launch_simt<T, true, false, true>(args, splits, stream);
    else if (fuse != nullptr) launch_simt<T, false, false, true>(args, splits, stream);
  }
  if (fuse == nullptr) {
    if (ak && bk) launch_simt<T, true, true>(args, splits, stream);
    else if (ak) launch_simt<T, true, false>(args, splits, stream);
    else if (bk) launch_simt<T, false, true>(args, splits, stream);
    else launch_simt<T, false, false>(args, splits, stream);
  }
  if (splits > 1) finish_splits(args, p, splits, stream);
}

}  // namespace dev

namespace {

void run_simt_with(const Problem& p, const OuterFusion* fuse) {
  if (p.M == 0 || p.N == 0 || p.batch() == 0) return;
  constexpr int64_t kIntMax = (int64_t{1} << 31) - 1;
  EMBER_CHECK(p.M <= kIntMax && p.N <= kIntMax && p.K <= kIntMax, "gemm simt: M, N, K must fit in int32, got ", p.M,
              ", ", p.N, ", ", p.K);
  EMBER_CHECK((p.a_cs == 1 || p.a_rs == 1) && (p.b_cs == 1 || p.b_rs == 1),
              "gemm simt: each operand needs a unit stride (prepare with Layout::unit_stride)");
  cuda::DeviceGuard guard(p.device.index);
  cudaStream_t stream = cuda::stream_for(p.device);
  if (p.dtype == DType::f32) dev::dispatch_simt<float>(p, stream, fuse);
  else if (p.dtype == DType::f64 && fuse == nullptr) dev::dispatch_simt<double>(p, stream);
  else EMBER_FAIL("gemm simt: dtype ", p.dtype, " is not supported (f32, f64; the fused form f32)");
}

}  // namespace

void run_simt(const Problem& p) { run_simt_with(p, nullptr); }

const char* simt_fused_refusal(const Problem& p) {
  return p.dtype != DType::f32 ? "not f32" : dev::fused_shape_refusal(p);
}

void run_simt_fused(const Problem& p, const OuterFusion& fuse) {
  dev::check_fused_call(p, fuse, simt_fused_refusal(p), "simt fused");
  run_simt_with(p, &fuse);
}

}  // namespace ember::gemm
