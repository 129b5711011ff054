// Implicit-GEMM convolution kernels: forward, backward_input and backward_weight, fp32/fp64 SIMT
// and f16/bf16 tensor cores (mma.sync m16n8k16, fp32 accumulation). Any shape: the im2col matrix
// is gathered on the fly tile by tile (zero outside the input, the channel range and the GEMM
// bounds), so odd channel counts, C = 1, K not a multiple of the tile all work.
//
// The three GEMMs (per group g; Cg = C/G, Kg = K/G):
//   forward          rows m = (n, p, q) output pixels [N P Q], cols k [Kg],  reduction (r, s, c) [R S Cg]
//                    A = x gathered, B = weight
//   backward_input   rows m = (n, h, w) input pixels [N H W],  cols c [Cg],  reduction (r, s, k) [R S Kg]
//                    A = grad_output gathered (p = (h + ph - r dh) / sh when exact), B = weight
//   backward_weight  rows k [Kg], cols (c, r, s) in the weight's memory order [Cg R S], reduction
//                    (n, p, q) [N P Q]; split over the reduction ("split-K") into fp32 partials that
//                    each tile's last block adds in split order (deterministic, no atomics on the
//                    values; Note [wgrad split-K in one launch])
// The reduction of the data GEMMs runs (r, s) outermost and channels innermost, so a k-tile is one
// (r, s) and BK consecutive channels: the gather address of a row is computed once per tile and
// channels-last inputs are read as contiguous 16-byte vectors (when channels % 8 == 0).
//
// Each kernel is the shared GEMM main loop (kernels/gemm/mainloop.cuh, Note [gemm main loop]) with
// its own operand iterator: DataSimtTiles, WgradSimtTiles, DataMmaTiles, WgradMmaTiles gather the
// im2col tiles; ConvSimtSmem and ConvMmaSmem hold the shared layouts and the output ownership the
// epilogues walk.
//
// SIMT (f32, f64): block tile BM x BN x BK, 256 threads, each TM x TN outputs in registers, A and B
//   staged through registers into double-buffered shared memory (the next tile's global loads are in
//   flight while the current one is multiplied). Configs: 128x128x8 (8x8 per thread) when there are
//   enough tiles, else 64x64x16 (4x4). Per k step a thread does TM + TN shared loads for TM TN FMAs
//   (16 : 64 in the big config), at the 1 : 4 ratio shared-memory bandwidth allows.
// MMA (f16, bf16): BK = 32, warp tiles of 64x32 or 32x32 built from m16n8k16 mma.sync with ldmatrix
//   fragment loads from padded shared rows (40 halves: conflict-free ldmatrix phases). Configs:
//   128x128 (8 warps), 128x64 and 64x64 (4 warps), chosen by tile count. fp32 accumulators, bias and
//   conversion in the epilogue.
//
// f32 is bound by the FMA units; f16/bf16 by the tensor cores and the activations' bytes alike, so
// the shared-memory staging through registers (no cp.async, no warp specialisation) is the first
// thing to revisit if the MMA kernels fall short of cuDNN. Late, small layers (7x7 planes) have too
// few 128-row tiles for the SMs: the 64x64 config is what gives them enough blocks.
// Napkin math: docs/perf.md ("Napkin math behind the kernels").
// The generic parity tests check every variant (every config, both layouts, vector loads, split-K)
// against the CPU reference, in the simulator build and on a GPU; what has run where is recorded in
// docs/gpu-validation.md.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "core/cuda/device_guard.h"
#include "core/cuda/kernel.cuh"
#include "kernels/common/aligned_vec.cuh"
#include "kernels/common/block_phases.cuh"  // last_block_to_arrive
#include "kernels/common/current_stream.cuh"
#include "kernels/common/grid_size.cuh"
#include "kernels/common/ptx.cuh"
#include "kernels/gemm/cuda_gemm.h"
#include "kernels/gemm/mainloop.cuh"
#include "kernels/ops/conv2d_cuda.h"

namespace ember::convcuda {

namespace {

// ---- problem descriptions (int indexing: every tensor has < 2^31 elements, checked) ----

// The filter's geometry as int: every GEMM of a convolution reads it.
struct Taps {
  int Kg, Cg, RS, S;
  int sh, sw, ph, pw, dh, dw;
};

// Sizes as int: every tensor has < 2^31 elements (checked before any kernel runs).
int i32(int64_t v) { return static_cast<int>(v); }

Taps taps_of(const ConvGeom& g) {
  return Taps{i32(g.Kg), i32(g.Cg), i32(g.R * g.S), i32(g.S),  i32(g.sh),
              i32(g.sw), i32(g.ph), i32(g.pw),      i32(g.dh), i32(g.dw)};
}

struct DataGemm : Taps {
  int M;  // rows: output pixels of the GEMM (N Ho Wo)
  int HoWo, Wo;
  int Ca, Ha, Wa;  // the gathered operand: x (forward) or grad_output (backward_input)
  int img;         // Ca Ha Wa
  int Co;          // channels of the written tensor
  int red;         // reduction channels per group: Cg (forward) or Kg (backward_input)
  int ncol;        // columns per group: Kg (forward) or Cg (backward_input)
};

DataGemm data_gemm(const ConvGeom& g, bool dgrad) {
  DataGemm p{};
  static_cast<Taps&>(p) = taps_of(g);
  // forward: x [C, H, W] gathered for the output pixels [P, Q]; backward_input: grad_output
  // [K, P, Q] gathered for the input pixels [H, W]
  const int64_t rows_h = dgrad ? g.H : g.P, rows_w = dgrad ? g.W : g.Q;
  p.Wo = i32(rows_w);
  p.HoWo = i32(rows_h * rows_w);
  p.Ca = i32(dgrad ? g.K : g.C);
  p.Ha = i32(dgrad ? g.P : g.H);
  p.Wa = i32(dgrad ? g.Q : g.W);
  p.Co = i32(dgrad ? g.C : g.K);
  p.red = i32(dgrad ? g.Kg : g.Cg);
  p.ncol = i32(dgrad ? g.Cg : g.Kg);
  p.M = i32(g.N) * p.HoWo;
  p.img = p.Ca * p.Ha * p.Wa;
  return p;
}

struct RowInfo {
  int base, h0, w0;
  bool ok;
};

template <bool DGRAD>
__device__ __forceinline__ RowInfo row_info(const DataGemm& p, int m) {
  RowInfo ri{0, 0, 0, m < p.M};
  if (ri.ok) {
    const int n = m / p.HoWo;
    const int rem = m - n * p.HoWo;
    const int oh = rem / p.Wo;
    const int ow = rem - oh * p.Wo;
    ri.base = n * p.img;
    if (!DGRAD) {
      ri.h0 = oh * p.sh - p.ph;
      ri.w0 = ow * p.sw - p.pw;
    } else {
      ri.h0 = oh + p.ph;
      ri.w0 = ow + p.pw;
    }
  }
  return ri;
}

// Offset of channel 0 of the gathered element for kernel tap (r, s), or -1 when it is zero padding.
template <bool DGRAD, bool CL>
__device__ __forceinline__ int gather_offset(const DataGemm& p, const RowInfo& ri, int r, int s) {
  if (!ri.ok) return -1;
  int ih, iw;
  if (!DGRAD) {
    ih = ri.h0 + r * p.dh;
    iw = ri.w0 + s * p.dw;
    if (static_cast<unsigned>(ih) >= static_cast<unsigned>(p.Ha) ||
        static_cast<unsigned>(iw) >= static_cast<unsigned>(p.Wa))
      return -1;
  } else {
    const int th = ri.h0 - r * p.dh, tw = ri.w0 - s * p.dw;
    if (th < 0 || tw < 0) return -1;
    ih = th / p.sh;
    iw = tw / p.sw;
    if (ih * p.sh != th || iw * p.sw != tw || ih >= p.Ha || iw >= p.Wa) return -1;
  }
  return CL ? ri.base + (ih * p.Wa + iw) * p.Ca : ri.base + ih * p.Wa + iw;
}

// Weight element for reduction channel c_red, GEMM column col, tap rs (KCRS or KRSC memory).
template <bool DGRAD, bool CL>
__device__ __forceinline__ int weight_index(const DataGemm& p, int g, int c_red, int col, int rs) {
  const int kidx = g * p.Kg + (DGRAD ? c_red : col);
  const int cidx = DGRAD ? col : c_red;
  return CL ? (kidx * p.RS + rs) * p.Cg + cidx : (kidx * p.Cg + cidx) * p.RS + rs;
}

template <bool CL>
__device__ __forceinline__ int out_index(const DataGemm& p, int m, int oc) {
  if (CL) return m * p.Co + oc;
  const int n = m / p.HoWo;
  return (n * p.Co + oc) * p.HoWo + (m - n * p.HoWo);
}

// GEMM rows: Kg (in Taps).
struct WgradGemm : Taps {
  int ncol;  // GEMM columns ((c, r, s) in the weight's memory order) per group
  int J;     // reduction length N P Q
  int P, Q, PQ;
  int K, C, H, W, HW;
  int G, splits, tiles_per_split;
  // a counter per output tile (the stream's tickets) when split and the tiles fit them, else null
  unsigned* tickets;
};

WgradGemm wgrad_gemm(const ConvGeom& g) {
  WgradGemm p{};
  static_cast<Taps&>(p) = taps_of(g);
  p.ncol = i32(g.Cg * g.R * g.S);
  p.J = i32(g.N * g.P * g.Q);
  p.P = i32(g.P);
  p.Q = i32(g.Q);
  p.PQ = p.P * p.Q;
  p.K = i32(g.K);
  p.C = i32(g.C);
  p.H = i32(g.H);
  p.W = i32(g.W);
  p.HW = p.H * p.W;
  p.G = i32(g.G);
  return p;
}

// Position (n, p, q) of reduction index j, stepped one at a time.
struct JPos {
  int j, n, p, q;
};
__device__ __forceinline__ JPos jpos(const WgradGemm& w, int j) {
  JPos a;
  a.j = j;
  a.n = j / w.PQ;
  const int pq = j - a.n * w.PQ;
  a.p = pq / w.Q;
  a.q = pq - a.p * w.Q;
  return a;
}
__device__ __forceinline__ void jstep(const WgradGemm& w, JPos& a) {
  ++a.j;
  if (++a.q == w.Q) {
    a.q = 0;
    if (++a.p == w.P) {
      a.p = 0;
      ++a.n;
    }
  }
}

// One column (c, r, s) of the weight gradient: where its x elements are.
struct ColInfo {
  int xc;      // channel offset into x: (g Cg + c) for channels-last, (g Cg + c) H W for NCHW
  int hr, wr;  // r dh - ph, s dw - pw
  bool ok;
};
template <bool CL>
__device__ __forceinline__ ColInfo col_info(const WgradGemm& w, int g, int col) {
  ColInfo ci{0, 0, 0, col < w.ncol};
  if (ci.ok) {
    int c, rs;
    if (CL) {
      rs = col / w.Cg;
      c = col - rs * w.Cg;
    } else {
      c = col / w.RS;
      rs = col - c * w.RS;
    }
    const int r = rs / w.S, s = rs - r * w.S;
    ci.xc = CL ? g * w.Cg + c : (g * w.Cg + c) * w.HW;
    ci.hr = r * w.dh - w.ph;
    ci.wr = s * w.dw - w.pw;
  }
  return ci;
}

// x element of column ci at reduction position a (or -1 for padding / past the end).
template <bool CL>
__device__ __forceinline__ int wgrad_x_index(const WgradGemm& w, const ColInfo& ci, const JPos& a) {
  if (!ci.ok || a.j >= w.J) return -1;
  const int ih = a.p * w.sh + ci.hr, iw = a.q * w.sw + ci.wr;
  if (static_cast<unsigned>(ih) >= static_cast<unsigned>(w.H) ||
      static_cast<unsigned>(iw) >= static_cast<unsigned>(w.W))
    return -1;
  return CL ? (a.n * w.HW + ih * w.W + iw) * w.C + ci.xc : a.n * w.C * w.HW + ci.xc + ih * w.W + iw;
}

// grad_output element of row k at position a (or -1).
template <bool CL>
__device__ __forceinline__ int wgrad_g_index(const WgradGemm& w, int g, int k, const JPos& a) {
  if (k >= w.Kg || a.j >= w.J) return -1;
  const int kk = g * w.Kg + k;
  return CL ? a.j * w.K + kk : (a.n * w.K + kk) * w.PQ + a.p * w.Q + a.q;
}

// ======================= SIMT kernels =======================

// Note [conv simt tile padding]: both SIMT kernels keep their tiles k-major, As[k][m] and Bs[k][n],
// so the k steps read along m / n; the loaders fill them across k. One store instruction of a
// warp writes 32 / BK consecutive m (n) in each of the BK rows (data_simt: k = tid % BK), or
// 128 / BK consecutive m in each of BK / 4 rows 4 apart (wgrad_simt: runs of 4 k per thread; both
// configurations, 128x128x8 and 64x64x16, have 4). With rows padded by one element (the usual
// + 1) row k starts k banks further on, and the rows' groups of consecutive banks overlap: 2- to
// 4-way conflicts on every tile store (the simulator's counters gave 1.5 over the whole data_simt
// kernel). Padding by 32 / BK elements starts row k at bank k * 32 / BK: in both patterns the
// rows' groups then tile the 32 banks exactly. The k-step reads (one row: consecutive m, or
// broadcasts) stay conflict-free.
template <int BK>
constexpr int kSimtPad = 32 / BK;

// What the SIMT iterators share: k-major padded tiles (Note [conv simt tile padding]) and the
// strided ownership of outputs: thread (tm, tn) holds rows tm + i MBT and columns tn + j NBT.
template <class T, int BM, int BN, int BK, int TM, int TN>
struct ConvSimtSmem : gemm::dev::RegisterStaged {
  static constexpr int MBT = BM / TM, NBT = BN / TN, NT = MBT * NBT;
  using ATile = T[2][BK][BM + kSimtPad<BK>];
  using BTile = T[2][BK][BN + kSimtPad<BK>];

  ATile& As;
  BTile& Bs;
  int tm = 0, tn = 0;

  __device__ __forceinline__ ConvSimtSmem(ATile& as, BTile& bs) : As(as), Bs(bs) {}
  __device__ __forceinline__ void fragments(int buf, int k, T (&av)[TM], T (&bv)[TN]) {
    EMBER_UNROLL
    for (int i = 0; i < TM; ++i) av[i] = As[buf][k][tm + i * MBT];
    EMBER_UNROLL
    for (int j = 0; j < TN; ++j) bv[j] = Bs[buf][k][tn + j * NBT];
  }
  // Calls f(acc[i][j], row, column) for each of the thread's outputs inside rows x cols.
  template <class F>
  __device__ __forceinline__ void for_each_output(const T (&acc)[TM][TN], int m0, int n0, int rows, int cols, F&& f) {
    EMBER_UNROLL
    for (int i = 0; i < TM; ++i) {
      const int m = m0 + tm + i * MBT;
      if (m >= rows) continue;
      EMBER_UNROLL
      for (int j = 0; j < TN; ++j) {
        const int c = n0 + tn + j * NBT;
        if (c < cols) f(acc[i][j], m, c);
      }
    }
  }
};

// The data GEMMs' SIMT operand iterator (Note [gemm main loop]): k tile t is one tap (r, s) and BK
// consecutive reduction channels; A is gathered from the image (zero outside it), B read from the
// weight; both staged through registers into k-major tiles.
template <class T, int BM, int BN, int BK, int TM, int TN, bool CL, bool DGRAD>
struct DataSimtTiles : ConvSimtSmem<T, BM, BN, BK, TM, TN> {
  using Base = ConvSimtSmem<T, BM, BN, BK, TM, TN>;
  using Base::As, Base::Bs, Base::NT;
  using typename Base::ATile, typename Base::BTile;
  static constexpr int A_LD = BM * BK / NT, B_LD = BN * BK / NT;
  static_assert(NT % BK == 0 && NT % BM == 0 && (BM * BK) % NT == 0 && (BN * BK) % NT == 0, "tile/thread mismatch");
  static constexpr int A_ROWS = CL ? A_LD : 1;

  const DataGemm& p;
  const T* src;
  const T* wt;
  int g, n0, CT, chs;
  int a_row[A_LD], a_kk[A_LD];
  RowInfo ri[A_ROWS];
  int b_kk, b_col[B_LD];
  T a_reg[A_LD]{}, b_reg[B_LD]{};  // staged k tile (zeroed: only ever stored after a fetch)

  __device__ __forceinline__ DataSimtTiles(ATile& as, BTile& bs, const DataGemm& gemm, const T* src_, const T* wt_,
                                           int tid, int group, int m0, int col0)
      : Base(as, bs), p(gemm), src(src_), wt(wt_), g(group), n0(col0) {
    // loads: channels-last A walks channels across threads (contiguous), NCHW A walks pixels
    EMBER_UNROLL
    for (int i = 0; i < A_LD; ++i) {
      if (CL) {
        a_row[i] = tid / BK + i * (NT / BK);
        a_kk[i] = tid % BK;
      } else {
        a_row[i] = tid % BM;
        a_kk[i] = tid / BM + i * (NT / BM);
      }
    }
    EMBER_UNROLL
    for (int i = 0; i < A_ROWS; ++i) ri[i] = row_info<DGRAD>(p, m0 + a_row[i]);
    b_kk = tid % BK;
    EMBER_UNROLL
    for (int i = 0; i < B_LD; ++i) b_col[i] = tid / BK + i * (NT / BK);
    // compute: consecutive threads take consecutive output rows (NCHW) or columns (channels-last)
    this->tm = CL ? tid / Base::NBT : tid % Base::MBT;
    this->tn = CL ? tid % Base::NBT : tid / Base::MBT;
    CT = (p.red + BK - 1) / BK;
    chs = CL ? 1 : p.Ha * p.Wa;
  }
  __device__ __forceinline__ int ktiles() const { return p.RS * CT; }

  __device__ __forceinline__ void fetch(int t, int) {
    const int rs = t / CT;
    const int c0 = (t - rs * CT) * BK;
    const int r = rs / p.S, s = rs - r * p.S;
    int off[A_ROWS];
    EMBER_UNROLL
    for (int i = 0; i < A_ROWS; ++i) off[i] = gather_offset<DGRAD, CL>(p, ri[i], r, s);
    EMBER_UNROLL
    for (int i = 0; i < A_LD; ++i) {
      const int c = c0 + a_kk[i];
      const int o = off[CL ? i : 0];
      a_reg[i] = (o >= 0 && c < p.red) ? src[o + (g * p.red + c) * chs] : T(0);
    }
    EMBER_UNROLL
    for (int i = 0; i < B_LD; ++i) {
      const int c = c0 + b_kk, col = n0 + b_col[i];
      b_reg[i] = (c < p.red && col < p.ncol) ? wt[weight_index<DGRAD, CL>(p, g, c, col, rs)] : T(0);
    }
  }
  __device__ __forceinline__ void commit(int buf, bool fetched) {
    if (!fetched) return;
    EMBER_UNROLL
    for (int i = 0; i < A_LD; ++i) As[buf][a_kk[i]][a_row[i]] = a_reg[i];
    EMBER_UNROLL
    for (int i = 0; i < B_LD; ++i) Bs[buf][b_kk][b_col[i]] = b_reg[i];
  }
};

template <class T, int BM, int BN, int BK, int TM, int TN, bool CL, bool DGRAD>
__global__ void __launch_bounds__((BM / TM) * (BN / TN))
    data_simt_kernel(const T* __restrict__ src, const T* __restrict__ wt, const T* __restrict__ bias,
                     T* __restrict__ out, DataGemm p) {
  using Tiles = DataSimtTiles<T, BM, BN, BK, TM, TN, CL, DGRAD>;
  EMBER_SHARED(typename Tiles::ATile, As);
  EMBER_SHARED(typename Tiles::BTile, Bs);
  const int g = blockIdx.z;
  const int m0 = blockIdx.x * BM, n0 = blockIdx.y * BN;
  Tiles tiles(As, Bs, p, src, wt, threadIdx.x, g, m0, n0);
  T acc[TM][TN];
  gemm::dev::simt_gemm<BK>(tiles, 0, tiles.ktiles(), acc);

  tiles.for_each_output(acc, m0, n0, p.M, p.ncol, [&](T v, int m, int c) {
    const int oc = g * p.ncol + c;
    if (bias != nullptr) v += bias[oc];
    out[out_index<CL>(p, m, oc)] = v;
  });
}

// Weight gradient, SIMT: rows k, columns (c, r, s), reduction over (n, p, q) in BK-long runs.
// The operand iterator: each thread loads a run of consecutive reduction indices for one row of
// grad_output (A) and one column of the gathered x (B).
template <class T, int BM, int BN, int BK, int TM, int TN, bool CL>
struct WgradSimtTiles : ConvSimtSmem<T, BM, BN, BK, TM, TN> {
  using Base = ConvSimtSmem<T, BM, BN, BK, TM, TN>;
  using Base::As, Base::Bs, Base::NT;
  using typename Base::ATile, typename Base::BTile;
  static constexpr int A_RUN = BM * BK / NT, B_RUN = BN * BK / NT;
  static_assert(BK % A_RUN == 0 && BK % B_RUN == 0, "runs must tile BK");
  static constexpr int A_TPR = BK / A_RUN, B_TPR = BK / B_RUN;  // threads per row / column

  const WgradGemm& p;
  const T* gy;
  const T* x;
  int g, m0, a_row, a_kk0, b_col, b_kk0;
  ColInfo ci;
  T a_reg[A_RUN]{}, b_reg[B_RUN]{};  // staged k tile (zeroed: only ever stored after a fetch)

  __device__ __forceinline__ WgradSimtTiles(ATile& as, BTile& bs, const WgradGemm& gemm, const T* gy_, const T* x_,
                                            int tid, int group, int row0, int col0)
      : Base(as, bs), p(gemm), gy(gy_), x(x_), g(group), m0(row0) {
    a_row = tid / A_TPR;
    a_kk0 = (tid % A_TPR) * A_RUN;
    b_col = tid / B_TPR;
    b_kk0 = (tid % B_TPR) * B_RUN;
    ci = col_info<CL>(p, g, col0 + b_col);
    this->tm = tid / Base::NBT;
    this->tn = tid % Base::NBT;
  }

  __device__ __forceinline__ void fetch(int t, int) {
    JPos a = jpos(p, t * BK + a_kk0);
    EMBER_UNROLL
    for (int e = 0; e < A_RUN; ++e) {
      const int o = wgrad_g_index<CL>(p, g, m0 + a_row, a);
      a_reg[e] = o >= 0 ? gy[o] : T(0);
      jstep(p, a);
    }
    JPos b = jpos(p, t * BK + b_kk0);
    EMBER_UNROLL
    for (int e = 0; e < B_RUN; ++e) {
      const int o = wgrad_x_index<CL>(p, ci, b);
      b_reg[e] = o >= 0 ? x[o] : T(0);
      jstep(p, b);
    }
  }
  __device__ __forceinline__ void commit(int buf, bool fetched) {
    if (!fetched) return;
    EMBER_UNROLL
    for (int e = 0; e < A_RUN; ++e) As[buf][a_kk0 + e][a_row] = a_reg[e];
    EMBER_UNROLL
    for (int e = 0; e < B_RUN; ++e) Bs[buf][b_kk0 + e][b_col] = b_reg[e];
  }
};

// Note [wgrad split-K in one launch]: the weight gradient's reduction (N P Q, 25,088 for conv2 of
// the MNIST CNN at batch 128) is split over blocks that write fp32 (fp64) partial tiles, and
// gemm::sum_splits added them in a second launch: a launch (about 4.8 us on an H200 in the time
// model) for a few microseconds of adds at these sizes. As in the GEMMs' split-K (Note [split-K] in
// kernels/gemm/gemm_common.cuh), each block takes its tile's ticket once its partials are written,
// and the tile's last block adds the tile's partials in split order and stores them: the same
// additions in the same order as sum_splits, so the same bits. A capture on a stream that has no
// tickets yet, or more tiles than a stream has tickets, keeps the second launch.
template <int BM, int BN, class Acc, class Store>
__device__ __forceinline__ void finish_wgrad_tile(const WgradGemm& p, const Acc* ws, int g, int m0, int n0,
                                                  Store&& store) {
  if (p.tickets == nullptr) return;
  unsigned* ticket = p.tickets + (static_cast<int64_t>(g) * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
  if (!cuda::last_block_to_arrive(ticket, static_cast<unsigned>(p.splits))) return;
  const int64_t nout = static_cast<int64_t>(p.G) * p.Kg * p.ncol;
  const int rows = min(BM, p.Kg - m0), cols = min(BN, p.ncol - n0);
  for (int i = static_cast<int>(threadIdx.x); i < rows * cols; i += static_cast<int>(blockDim.x)) {
    const int o = (g * p.Kg + m0 + i / cols) * p.ncol + n0 + i % cols;
    Acc v = 0;
    for (int sp = 0; sp < p.splits; ++sp) v += ws[sp * nout + o];
    store(o, v);
  }
  if (threadIdx.x == 0) *ticket = 0u;
}

template <class T, int BM, int BN, int BK, int TM, int TN, bool CL>
__global__ void __launch_bounds__((BM / TM) * (BN / TN))
    wgrad_simt_kernel(const T* __restrict__ gy, const T* __restrict__ x, T* __restrict__ dw, acc_t<T>* __restrict__ ws,
                      WgradGemm p) {
  using Tiles = WgradSimtTiles<T, BM, BN, BK, TM, TN, CL>;
  EMBER_SHARED(typename Tiles::ATile, As);
  EMBER_SHARED(typename Tiles::BTile, Bs);
  const int g = blockIdx.z / p.splits, sp = blockIdx.z % p.splits;
  const int n0 = blockIdx.x * BN, m0 = blockIdx.y * BM;
  Tiles tiles(As, Bs, p, gy, x, threadIdx.x, g, m0, n0);

  const int total = (p.J + BK - 1) / BK;
  const int t0 = sp * p.tiles_per_split;
  const int t1 = min(total, t0 + p.tiles_per_split);
  T acc[TM][TN];
  gemm::dev::simt_gemm<BK>(tiles, t0, max(t0, t1), acc);

  const int nout = p.G * p.Kg * p.ncol;
  tiles.for_each_output(acc, m0, n0, p.Kg, p.ncol, [&](T v, int k, int col) {
    const int o = (g * p.Kg + k) * p.ncol + col;
    if (p.splits == 1) dw[o] = v;
    else ws[static_cast<int64_t>(sp) * nout + o] = v;
  });
  if (p.splits > 1) finish_wgrad_tile<BM, BN>(p, ws, g, m0, n0, [&](int o, acc_t<T> v) { dw[o] = static_cast<T>(v); });
}

// ======================= tensor-core (mma.sync) kernels =======================

template <bool BF16>
__device__ __forceinline__ float bits_to_float(uint16_t b) {
  if constexpr (BF16) return static_cast<float>(BFloat16::from_bits(b));
  else return static_cast<float>(Half::from_bits(b));
}
template <bool BF16>
__device__ __forceinline__ uint16_t float_to_bits(float v) {
  if constexpr (BF16) return BFloat16(v).bits;
  else return Half(v).bits;
}

constexpr int kMmaBK = 32;
constexpr int kMmaLDS = kMmaBK + 8;  // padded row: 80 bytes, conflict-free ldmatrix phases

// The fragments of k16 step ks of the warp tile at (wm0, wn0), from padded shared rows.
template <int MT, int NT8>
__device__ __forceinline__ void padded_fragments(const uint16_t (*As)[kMmaLDS], const uint16_t (*Bs)[kMmaLDS], int wm0,
                                                 int wn0, int lane, int ks, uint32_t (&af)[MT][4],
                                                 uint32_t (&bf)[NT8][2]) {
  const int k0 = ks * 16;
  EMBER_UNROLL
  for (int i = 0; i < MT; ++i) ptx::ldmatrix_x4(af[i], &As[wm0 + i * 16 + (lane & 15)][k0 + (lane >> 4) * 8]);
  EMBER_UNROLL
  for (int jj = 0; jj < NT8 / 2; ++jj) {
    uint32_t d[4];
    ptx::ldmatrix_x4(d, &Bs[wn0 + jj * 16 + (lane & 7) + ((lane >> 4) << 3)][k0 + ((lane >> 3) & 1) * 8]);
    bf[2 * jj][0] = d[0];
    bf[2 * jj][1] = d[1];
    bf[2 * jj + 1][0] = d[2];
    bf[2 * jj + 1][1] = d[3];
  }
}

__device__ __forceinline__ unsigned pack2(uint16_t lo, uint16_t hi) {
  return static_cast<unsigned>(lo) | (static_cast<unsigned>(hi) << 16);
}

// 8 halves as one 16-byte access (Note [whole vector accesses] in kernels/common/aligned_vec.cuh).
using Chunk16 = detail::AlignedVec<unsigned, 4>;

// Stores a run of RUN halves (RUN % 8 == 0) at a 16-byte aligned shared address.
template <int RUN>
__device__ __forceinline__ void store_run(uint16_t* dst, const unsigned (&w)[RUN / 2]) {
  EMBER_UNROLL
  for (int v = 0; v < RUN / 8; ++v) {
    Chunk16 q;
    EMBER_UNROLL
    for (int i = 0; i < 4; ++i) q.v[i] = w[4 * v + i];
    reinterpret_cast<Chunk16*>(dst)[v] = q;
  }
}

// What the tensor-core iterators share: padded [row][k] tiles, the warp tiles of WM x WN outputs
// and the m16n8 accumulator layout (thread (gid, tig) of a warp holds rows gid and gid + 8,
// columns 2 tig and 2 tig + 1 of each m16n8 tile).
template <int BM, int BN, int WM, int WN>
struct ConvMmaSmem : gemm::dev::RegisterStaged {
  static constexpr int WARPS_M = BM / WM, NT = WARPS_M * (BN / WN) * 32;
  static constexpr int MT = WM / 16, NT8 = WN / 8;
  static_assert(NT8 % 2 == 0, "ldmatrix.x4 loads pairs of n8 tiles");
  using ATile = uint16_t[2][BM][kMmaLDS];
  using BTile = uint16_t[2][BN][kMmaLDS];

  ATile& As;
  BTile& Bs;
  int lane, wm0, wn0;

  __device__ __forceinline__ ConvMmaSmem(ATile& as, BTile& bs, int tid) : As(as), Bs(bs) {
    lane = tid & 31;
    const int warp = tid >> 5;
    wm0 = (warp % WARPS_M) * WM;
    wn0 = (warp / WARPS_M) * WN;
  }
  __device__ __forceinline__ void fragments(int buf, int ks, uint32_t (&af)[MT][4], uint32_t (&bf)[NT8][2]) {
    padded_fragments<MT, NT8>(As[buf], Bs[buf], wm0, wn0, lane, ks, af, bf);
  }
  // Calls f(accumulator, row, column) for each of the thread's outputs inside rows x cols.
  template <class F>
  __device__ __forceinline__ void for_each_output(const float (&acc)[MT][NT8][4], int m0, int n0, int rows, int cols,
                                                  F&& f) {
    const int gid = lane >> 2, tig = lane & 3;
    EMBER_UNROLL
    for (int i = 0; i < MT; ++i) {
      EMBER_UNROLL
      for (int e2 = 0; e2 < 2; ++e2) {
        const int m = m0 + wm0 + i * 16 + gid + e2 * 8;
        if (m >= rows) continue;
        EMBER_UNROLL
        for (int j = 0; j < NT8; ++j) {
          EMBER_UNROLL
          for (int e1 = 0; e1 < 2; ++e1) {
            const int c = n0 + wn0 + j * 8 + tig * 2 + e1;
            if (c < cols) f(acc[i][j][e2 * 2 + e1], m, c);
          }
        }
      }
    }
  }
};

// The data GEMMs' tensor-core operand iterator (Note [gemm main loop]): k tile t is one tap (r, s)
// and 32 reduction channels, staged through registers as runs of whole 16-byte vectors into
// padded [row][k] tiles.
template <int BM, int BN, int WM, int WN, bool CL, bool DGRAD, bool VEC>
struct DataMmaTiles : ConvMmaSmem<BM, BN, WM, WN> {
  using Base = ConvMmaSmem<BM, BN, WM, WN>;
  using Base::As, Base::Bs, Base::NT;
  using typename Base::ATile, typename Base::BTile;
  static constexpr int BK = kMmaBK;
  static constexpr int A_RUN = BM * BK / NT, B_RUN = BN * BK / NT;
  static constexpr int A_TPR = BK / A_RUN, B_TPR = BK / B_RUN;
  static_assert(A_RUN % 8 == 0 && B_RUN % 8 == 0 && BK % A_RUN == 0 && BK % B_RUN == 0, "runs of whole vectors");
  static_assert(NT % BM == 0, "thread mapping");
  static_assert(!VEC || CL, "vector loads need channels-last");
  static constexpr bool B_VEC = VEC && !DGRAD;  // forward KRSC weights: the run is contiguous

  const DataGemm& p;
  const uint16_t* src;
  const uint16_t* wt;
  int g;
  // A: channels-last -> one row, a run of A_RUN consecutive channels; NCHW -> one row, channels
  // tid / BM + i NT / BM (consecutive threads take consecutive pixels: coalesced)
  int a_row, a_kk0, b_col, b_kk0, colg, CT, chs;
  RowInfo ri;
  unsigned a_w[A_RUN / 2]{};  // staged k tile (zeroed: only ever stored after a fetch)
  uint16_t a_s[CL ? 1 : A_RUN]{};
  unsigned b_w[B_RUN / 2]{};

  __device__ __forceinline__ DataMmaTiles(ATile& as, BTile& bs, const DataGemm& gemm, const uint16_t* src_,
                                          const uint16_t* wt_, int tid, int group, int m0, int n0)
      : Base(as, bs, tid), p(gemm), src(src_), wt(wt_), g(group) {
    a_row = CL ? tid / A_TPR : tid % BM;
    a_kk0 = CL ? (tid % A_TPR) * A_RUN : tid / BM;
    ri = row_info<DGRAD>(p, m0 + a_row);
    b_col = tid / B_TPR;
    b_kk0 = (tid % B_TPR) * B_RUN;
    colg = n0 + b_col;
    CT = (p.red + BK - 1) / BK;
    chs = CL ? 1 : p.Ha * p.Wa;
  }
  __device__ __forceinline__ int ktiles() const { return p.RS * CT; }

  __device__ __forceinline__ void fetch(int t, int) {
    const int rs = t / CT;
    const int c0 = (t - rs * CT) * BK;
    const int r = rs / p.S, s = rs - r * p.S;
    const int off = gather_offset<DGRAD, CL>(p, ri, r, s);
    if constexpr (CL) {
      const int cb = c0 + a_kk0;
      if constexpr (VEC) {
        EMBER_UNROLL
        for (int v = 0; v < A_RUN / 8; ++v) {
          const int c = cb + 8 * v;
          Chunk16 q{};
          if (off >= 0 && c < p.red) q = *reinterpret_cast<const Chunk16*>(src + off + g * p.red + c);
          EMBER_UNROLL
          for (int i = 0; i < 4; ++i) a_w[4 * v + i] = q.v[i];
        }
      } else {
        EMBER_UNROLL
        for (int e = 0; e < A_RUN; e += 2) {
          const int c = cb + e;
          const uint16_t lo = (off >= 0 && c < p.red) ? src[off + g * p.red + c] : uint16_t(0);
          const uint16_t hi = (off >= 0 && c + 1 < p.red) ? src[off + g * p.red + c + 1] : uint16_t(0);
          a_w[e / 2] = pack2(lo, hi);
        }
      }
    } else {
      EMBER_UNROLL
      for (int i = 0; i < A_RUN; ++i) {
        const int c = c0 + a_kk0 + i * (NT / BM);
        a_s[i] = (off >= 0 && c < p.red) ? src[off + (g * p.red + c) * chs] : uint16_t(0);
      }
    }
    const int cb = c0 + b_kk0;
    if constexpr (B_VEC) {
      EMBER_UNROLL
      for (int v = 0; v < B_RUN / 8; ++v) {
        const int c = cb + 8 * v;
        Chunk16 q{};
        if (colg < p.ncol && c < p.red)
          q = *reinterpret_cast<const Chunk16*>(wt + weight_index<DGRAD, CL>(p, g, c, colg, rs));
        EMBER_UNROLL
        for (int i = 0; i < 4; ++i) b_w[4 * v + i] = q.v[i];
      }
    } else {
      EMBER_UNROLL
      for (int e = 0; e < B_RUN; e += 2) {
        const int c = cb + e;
        const bool okc = colg < p.ncol;
        const uint16_t lo = (okc && c < p.red) ? wt[weight_index<DGRAD, CL>(p, g, c, colg, rs)] : uint16_t(0);
        const uint16_t hi = (okc && c + 1 < p.red) ? wt[weight_index<DGRAD, CL>(p, g, c + 1, colg, rs)] : uint16_t(0);
        b_w[e / 2] = pack2(lo, hi);
      }
    }
  }
  __device__ __forceinline__ void commit(int buf, bool fetched) {
    if (!fetched) return;
    if constexpr (CL) {
      store_run<A_RUN>(&As[buf][a_row][a_kk0], a_w);
    } else {
      EMBER_UNROLL
      for (int i = 0; i < A_RUN; ++i) As[buf][a_row][a_kk0 + i * (NT / BM)] = a_s[i];
    }
    store_run<B_RUN>(&Bs[buf][b_col][b_kk0], b_w);
  }
};

template <bool BF16, int BM, int BN, int WM, int WN, bool CL, bool DGRAD, bool VEC>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32)
    data_mma_kernel(const uint16_t* __restrict__ src, const uint16_t* __restrict__ wt,
                    const uint16_t* __restrict__ bias, uint16_t* __restrict__ out, DataGemm p) {
  using Tiles = DataMmaTiles<BM, BN, WM, WN, CL, DGRAD, VEC>;
  constexpr int MT = Tiles::MT, NT8 = Tiles::NT8;
  EMBER_SHARED(typename Tiles::ATile, As);
  EMBER_SHARED(typename Tiles::BTile, Bs);
  const int g = blockIdx.z;
  const int m0 = blockIdx.x * BM, n0 = blockIdx.y * BN;
  Tiles tiles(As, Bs, p, src, wt, threadIdx.x, g, m0, n0);
  float acc[MT][NT8][4];
  gemm::dev::mma_gemm<kMmaBK / 16, BF16>(tiles, 0, tiles.ktiles(), acc);

  tiles.for_each_output(acc, m0, n0, p.M, p.ncol, [&](float v, int m, int c) {
    const int oc = g * p.ncol + c;
    if (bias != nullptr) v += bits_to_float<BF16>(bias[oc]);
    out[out_index<CL>(p, m, oc)] = float_to_bits<BF16>(v);
  });
}

// Weight gradient on tensor cores: rows k, columns (c, r, s), reduction runs of (n, p, q). The
// operand iterator gathers runs of grad_output (A) and x (B) into padded [row][k] tiles.
template <int BM, int BN, int WM, int WN, bool CL>
struct WgradMmaTiles : ConvMmaSmem<BM, BN, WM, WN> {
  using Base = ConvMmaSmem<BM, BN, WM, WN>;
  using Base::As, Base::Bs, Base::NT;
  using typename Base::ATile, typename Base::BTile;
  static constexpr int BK = kMmaBK;
  static constexpr int A_RUN = BM * BK / NT, B_RUN = BN * BK / NT;
  static constexpr int A_TPR = BK / A_RUN, B_TPR = BK / B_RUN;
  static_assert(A_RUN % 8 == 0 && B_RUN % 8 == 0 && BK % A_RUN == 0 && BK % B_RUN == 0, "runs of whole vectors");

  const WgradGemm& p;
  const uint16_t* gy;
  const uint16_t* x;
  int g, m0, a_row, a_kk0, b_col, b_kk0;
  ColInfo ci;
  unsigned a_w[A_RUN / 2]{}, b_w[B_RUN / 2]{};  // staged k tile (zeroed: only ever stored after a fetch)

  __device__ __forceinline__ WgradMmaTiles(ATile& as, BTile& bs, const WgradGemm& gemm, const uint16_t* gy_,
                                           const uint16_t* x_, int tid, int group, int row0, int col0)
      : Base(as, bs, tid), p(gemm), gy(gy_), x(x_), g(group), m0(row0) {
    a_row = tid / A_TPR;
    a_kk0 = (tid % A_TPR) * A_RUN;
    b_col = tid / B_TPR;
    b_kk0 = (tid % B_TPR) * B_RUN;
    ci = col_info<CL>(p, g, col0 + b_col);
  }

  __device__ __forceinline__ void fetch(int t, int) {
    JPos a = jpos(p, t * BK + a_kk0);
    EMBER_UNROLL
    for (int e = 0; e < A_RUN; e += 2) {
      const int o0 = wgrad_g_index<CL>(p, g, m0 + a_row, a);
      jstep(p, a);
      const int o1 = wgrad_g_index<CL>(p, g, m0 + a_row, a);
      jstep(p, a);
      a_w[e / 2] = pack2(o0 >= 0 ? gy[o0] : uint16_t(0), o1 >= 0 ? gy[o1] : uint16_t(0));
    }
    JPos b = jpos(p, t * BK + b_kk0);
    EMBER_UNROLL
    for (int e = 0; e < B_RUN; e += 2) {
      const int o0 = wgrad_x_index<CL>(p, ci, b);
      jstep(p, b);
      const int o1 = wgrad_x_index<CL>(p, ci, b);
      jstep(p, b);
      b_w[e / 2] = pack2(o0 >= 0 ? x[o0] : uint16_t(0), o1 >= 0 ? x[o1] : uint16_t(0));
    }
  }
  __device__ __forceinline__ void commit(int buf, bool fetched) {
    if (!fetched) return;
    store_run<A_RUN>(&As[buf][a_row][a_kk0], a_w);
    store_run<B_RUN>(&Bs[buf][b_col][b_kk0], b_w);
  }
};

template <bool BF16, int BM, int BN, int WM, int WN, bool CL>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32)
    wgrad_mma_kernel(const uint16_t* __restrict__ gy, const uint16_t* __restrict__ x, uint16_t* __restrict__ dw,
                     float* __restrict__ ws, WgradGemm p) {
  using Tiles = WgradMmaTiles<BM, BN, WM, WN, CL>;
  constexpr int MT = Tiles::MT, NT8 = Tiles::NT8, BK = Tiles::BK;
  EMBER_SHARED(typename Tiles::ATile, As);
  EMBER_SHARED(typename Tiles::BTile, Bs);
  const int g = blockIdx.z / p.splits, sp = blockIdx.z % p.splits;
  const int n0 = blockIdx.x * BN, m0 = blockIdx.y * BM;
  Tiles tiles(As, Bs, p, gy, x, threadIdx.x, g, m0, n0);

  const int total = (p.J + BK - 1) / BK;
  const int t0 = sp * p.tiles_per_split;
  const int t1 = min(total, t0 + p.tiles_per_split);
  float acc[MT][NT8][4];
  gemm::dev::mma_gemm<BK / 16, BF16>(tiles, t0, max(t0, t1), acc);

  const int nout = p.G * p.Kg * p.ncol;
  tiles.for_each_output(acc, m0, n0, p.Kg, p.ncol, [&](float v, int k, int col) {
    const int o = (g * p.Kg + k) * p.ncol + col;
    if (p.splits == 1) dw[o] = float_to_bits<BF16>(v);
    else ws[static_cast<int64_t>(sp) * nout + o] = v;
  });
  if (p.splits > 1)
    finish_wgrad_tile<BM, BN>(p, ws, g, m0, n0, [&](int o, float v) { dw[o] = float_to_bits<BF16>(v); });
}

// ======================= launchers =======================

int ceil_div(int64_t a, int64_t b) { return static_cast<int>((a + b - 1) / b); }

bool aligned16(const Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0; }

template <class T, int BM, int BN, int BK, int TM, int TN, bool CL, bool DGRAD>
void launch_data_simt(const DataGemm& p, int G, const T* src, const T* wt, const T* bias, T* out, cudaStream_t st) {
  dim3 grid(ceil_div(p.M, BM), ceil_div(p.ncol, BN), G);
  cuda::launch(data_simt_kernel<T, BM, BN, BK, TM, TN, CL, DGRAD>, grid, (BM / TM) * (BN / TN), 0, st, src, wt, bias,
               out, p);
}

template <class T, bool CL, bool DGRAD>
void data_simt(const ConvArgs& a, const T* src, const T* wt, const T* bias, T* out) {
  DataGemm p = data_gemm(a.g, DGRAD);
  if (p.M == 0) return;
  const int G = static_cast<int>(a.g.G);
  cudaStream_t st = cuda::stream_for(a.y);
  const int sms = cuda::sm_count(a.y.device().index);
  const int64_t big_blocks = int64_t{ceil_div(p.M, 128)} * ceil_div(p.ncol, 128) * G;
  if constexpr (std::is_same_v<T, float>) {
    if (p.ncol > 64 && big_blocks >= sms) {
      launch_data_simt<T, 128, 128, 8, 8, 8, CL, DGRAD>(p, G, src, wt, bias, out, st);
      return;
    }
  }
  launch_data_simt<T, 64, 64, 16, 4, 4, CL, DGRAD>(p, G, src, wt, bias, out, st);
}

template <class T, bool DGRAD>
void data_simt_dispatch(const ConvArgs& a) {
  // forward reads x, writes y; backward_input reads grad_output (a.y), writes grad_input (a.x)
  const T* src = DGRAD ? cp<T>(a.y) : cp<T>(a.x);
  T* out = DGRAD ? mp<T>(a.x) : mp<T>(a.y);
  const T* bias = DGRAD ? nullptr : cp<T>(a.b);
  if (a.g.channels_last) data_simt<T, true, DGRAD>(a, src, cp<T>(a.w), bias, out);
  else data_simt<T, false, DGRAD>(a, src, cp<T>(a.w), bias, out);
}

// split-K factor for the weight gradient: enough blocks for ~2 waves, >= 8 tiles per split
void choose_splits(WgradGemm& p, int64_t mn_blocks, int bk, int sms) {
  const int total = ceil_div(p.J, bk);
  int64_t splits =
      std::max<int64_t>(1, (2 * static_cast<int64_t>(sms) + mn_blocks - 1) / std::max<int64_t>(mn_blocks, 1));
  splits = std::min<int64_t>(splits, std::max(1, total / 8));
  splits = std::min<int64_t>(splits, 65535 / std::max(1, p.G));
  splits = std::max<int64_t>(splits, 1);
  p.tiles_per_split = std::max(1, ceil_div(total, splits));
  p.splits = std::max(1, ceil_div(total, p.tiles_per_split));
}

// The output tiles' tickets for a split grid (Note [wgrad split-K in one launch]); null keeps the
// second launch.
unsigned* wgrad_tickets(const WgradGemm& p, dim3 grid, const Tensor& w, cudaStream_t st) {
  const int64_t tiles = int64_t{grid.x} * grid.y * p.G;
  if (p.splits == 1 || tiles > static_cast<int64_t>(cuda::kStreamTickets)) return nullptr;
  return cuda::stream_tickets(w.device().index, st);
}

template <class T, int BM, int BN, int BK, int TM, int TN, bool CL>
void launch_wgrad_simt(const ConvArgs& a, WgradGemm p) {
  using Acc = acc_t<T>;
  const int sms = cuda::sm_count(a.w.device().index);
  const int64_t mn = int64_t{ceil_div(p.ncol, BN)} * ceil_div(p.Kg, BM) * p.G;
  choose_splits(p, mn, BK, sms);
  cudaStream_t st = cuda::stream_for(a.w);
  const int nout = p.G * p.Kg * p.ncol;
  Tensor ws;
  if (p.splits > 1)
    ws = empty({static_cast<int64_t>(p.splits) * nout}, TensorOptions().dtype(dtype_v<Acc>).device(a.w.device()));
  dim3 grid(ceil_div(p.ncol, BN), ceil_div(p.Kg, BM), p.G * p.splits);
  p.tickets = wgrad_tickets(p, grid, a.w, st);
  cuda::launch(wgrad_simt_kernel<T, BM, BN, BK, TM, TN, CL>, grid, (BM / TM) * (BN / TN), 0, st, cp<T>(a.y), cp<T>(a.x),
               mp<T>(a.w), p.splits > 1 ? mp<Acc>(ws) : nullptr, p);
  if (p.splits > 1 && p.tickets == nullptr)
    gemm::sum_splits(dtype_v<T>, mp<Acc>(ws), p.splits, nout, mp<T>(a.w), st, a.w.device().index);
}

template <class T>
void wgrad_simt(const ConvArgs& a) {
  WgradGemm p = wgrad_gemm(a.g);
  if (p.J == 0) {
    Tensor w = a.w;
    w.zero_();
    return;
  }
  const bool big = std::is_same_v<T, float> && p.Kg > 64 && p.ncol > 64;
  if (a.g.channels_last) {
    if (big) launch_wgrad_simt<T, 128, 128, 8, 8, 8, true>(a, p);
    else launch_wgrad_simt<T, 64, 64, 16, 4, 4, true>(a, p);
  } else {
    if (big) launch_wgrad_simt<T, 128, 128, 8, 8, 8, false>(a, p);
    else launch_wgrad_simt<T, 64, 64, 16, 4, 4, false>(a, p);
  }
}

template <bool BF16, int BM, int BN, int WM, int WN, bool CL, bool DGRAD, bool VEC>
void launch_data_mma(const DataGemm& p, int G, const uint16_t* src, const uint16_t* wt, const uint16_t* bias,
                     uint16_t* out, cudaStream_t st) {
  dim3 grid(ceil_div(p.M, BM), ceil_div(p.ncol, BN), G);
  cuda::launch(data_mma_kernel<BF16, BM, BN, WM, WN, CL, DGRAD, VEC>, grid, (BM / WM) * (BN / WN) * 32, 0, st, src, wt,
               bias, out, p);
}

// 0: 128x128 (8 warps), 1: 128x64 (4 warps), 2: 64x64 (4 warps)
int mma_config(int64_t rows, int64_t cols, int64_t G, int sms) {
  auto blocks = [&](int bm, int bn) { return int64_t{ceil_div(rows, bm)} * ceil_div(cols, bn) * G; };
  if (cols > 64 && blocks(128, 128) >= sms) return 0;
  if (blocks(128, 64) >= sms) return 1;
  return 2;
}

template <bool BF16, bool CL, bool DGRAD, bool VEC>
void data_mma_cfg(const DataGemm& p, int G, int sms, const uint16_t* src, const uint16_t* wt, const uint16_t* bias,
                  uint16_t* out, cudaStream_t st) {
  switch (mma_config(p.M, p.ncol, G, sms)) {
    case 0: launch_data_mma<BF16, 128, 128, 64, 32, CL, DGRAD, VEC>(p, G, src, wt, bias, out, st); break;
    case 1: launch_data_mma<BF16, 128, 64, 64, 32, CL, DGRAD, VEC>(p, G, src, wt, bias, out, st); break;
    default: launch_data_mma<BF16, 64, 64, 32, 32, CL, DGRAD, VEC>(p, G, src, wt, bias, out, st); break;
  }
}

template <bool BF16, bool DGRAD>
void data_mma(const ConvArgs& a) {
  DataGemm p = data_gemm(a.g, DGRAD);
  if (p.M == 0) return;
  const int G = static_cast<int>(a.g.G);
  const Tensor& src_t = DGRAD ? a.y : a.x;
  const Tensor& out_t = DGRAD ? a.x : a.y;
  const uint16_t* src = cp<uint16_t>(src_t);
  const uint16_t* wt = cp<uint16_t>(a.w);
  const uint16_t* bias = DGRAD ? nullptr : cp<uint16_t>(a.b);
  uint16_t* out = mp<uint16_t>(out_t);
  cudaStream_t st = cuda::stream_for(out_t);
  const int sms = cuda::sm_count(out_t.device().index);
  if (!a.g.channels_last) {
    data_mma_cfg<BF16, false, DGRAD, false>(p, G, sms, src, wt, bias, out, st);
    return;
  }
  // 16-byte channel vectors: the reduction channels come in whole vectors and every row is aligned
  bool vec = p.red % 8 == 0 && p.Ca % 8 == 0 && aligned16(src_t);
  if (!DGRAD) vec = vec && p.Cg % 8 == 0 && aligned16(a.w);
  if (vec) data_mma_cfg<BF16, true, DGRAD, true>(p, G, sms, src, wt, bias, out, st);
  else data_mma_cfg<BF16, true, DGRAD, false>(p, G, sms, src, wt, bias, out, st);
}

template <bool BF16, int BM, int BN, int WM, int WN, bool CL>
void launch_wgrad_mma(const ConvArgs& a, WgradGemm p) {
  const int sms = cuda::sm_count(a.w.device().index);
  const int64_t mn = int64_t{ceil_div(p.ncol, BN)} * ceil_div(p.Kg, BM) * p.G;
  choose_splits(p, mn, kMmaBK, sms);
  cudaStream_t st = cuda::stream_for(a.w);
  const int nout = p.G * p.Kg * p.ncol;
  Tensor ws;
  if (p.splits > 1)
    ws = empty({static_cast<int64_t>(p.splits) * nout}, TensorOptions().dtype(DType::f32).device(a.w.device()));
  dim3 grid(ceil_div(p.ncol, BN), ceil_div(p.Kg, BM), p.G * p.splits);
  p.tickets = wgrad_tickets(p, grid, a.w, st);
  cuda::launch(wgrad_mma_kernel<BF16, BM, BN, WM, WN, CL>, grid, (BM / WM) * (BN / WN) * 32, 0, st, cp<uint16_t>(a.y),
               cp<uint16_t>(a.x), mp<uint16_t>(a.w), p.splits > 1 ? mp<float>(ws) : nullptr, p);
  if (p.splits > 1 && p.tickets == nullptr)
    gemm::sum_splits(BF16 ? DType::bf16 : DType::f16, mp<float>(ws), p.splits, nout, a.w.data_ptr(), st,
                     a.w.device().index);
}

template <bool BF16, bool CL>
void wgrad_mma_cl(const ConvArgs& a, const WgradGemm& p) {
  const int sms = cuda::sm_count(a.w.device().index);
  switch (mma_config(p.Kg, p.ncol, p.G, sms)) {
    case 0: launch_wgrad_mma<BF16, 128, 128, 64, 32, CL>(a, p); break;
    case 1: launch_wgrad_mma<BF16, 128, 64, 64, 32, CL>(a, p); break;
    default: launch_wgrad_mma<BF16, 64, 64, 32, 32, CL>(a, p); break;
  }
}

template <bool BF16>
void wgrad_mma(const ConvArgs& a) {
  WgradGemm p = wgrad_gemm(a.g);
  if (p.J == 0) {
    Tensor w = a.w;
    w.zero_();
    return;
  }
  if (a.g.channels_last) wgrad_mma_cl<BF16, true>(a, p);
  else wgrad_mma_cl<BF16, false>(a, p);
}

// The entry points: on the written tensor's device, the instance for the call's dtype (f64 or
// bf16 picks the first, f32 or f16 the second).
template <void (*First)(const ConvArgs&), void (*Second)(const ConvArgs&)>
void run_on(const Tensor& written, bool first, const ConvArgs& a) {
  cuda::DeviceGuard scope(written.device().index);
  (first ? First : Second)(a);
}

}  // namespace

void igemm_simt_forward(const ConvArgs& a) {
  run_on<data_simt_dispatch<double, false>, data_simt_dispatch<float, false>>(a.y, a.x.dtype() == DType::f64, a);
}
void igemm_simt_backward_input(const ConvArgs& a) {
  run_on<data_simt_dispatch<double, true>, data_simt_dispatch<float, true>>(a.x, a.x.dtype() == DType::f64, a);
}
void igemm_simt_backward_weight(const ConvArgs& a) {
  run_on<wgrad_simt<double>, wgrad_simt<float>>(a.w, a.w.dtype() == DType::f64, a);
}
void igemm_mma_forward(const ConvArgs& a) {
  run_on<data_mma<true, false>, data_mma<false, false>>(a.y, a.x.dtype() == DType::bf16, a);
}
void igemm_mma_backward_input(const ConvArgs& a) {
  run_on<data_mma<true, true>, data_mma<false, true>>(a.x, a.x.dtype() == DType::bf16, a);
}
void igemm_mma_backward_weight(const ConvArgs& a) {
  run_on<wgrad_mma<true>, wgrad_mma<false>>(a.w, a.w.dtype() == DType::bf16, a);
}

}  // namespace ember::convcuda
