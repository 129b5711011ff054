// Losses on CUDA (formulas in loss.h).
//
// cross_entropy forward: one fused kernel (online log-sum-exp + target logit + smoothing sums in a
// single read of each row, the row kernels of kernels/common/row_kernels.cuh):
//   small     mean/sum with C <= 128 and at most 8 passes of one block over the rows (the MNIST
//             batches [64, 10], [512, 10]: 16 lanes per row, 64 rows per pass): ONE block of 1024
//             threads does every row and the reduction, in a fixed order: one launch,
//             deterministic, no atomics.
//   rows      otherwise: the per-row kernel (regs / warp / block / cols) writes (loss_n, w_n) pairs
//             in f64 to a workspace, and one block sums them in a fixed order (two launches).
//   none      the per-row kernel writes l_n directly (and row 0 zeroes total_weight): one launch.
// cross_entropy backward: one kernel for every size: each row recomputes its log-sum-exp (the row
// is read once into shared memory/registers and again for the output: same HBM traffic as
// softmax) and writes (p A - B) * scale; the mean's 1/W comes from the forward's total_weight, a
// device scalar, so nothing waits for the host.
// cross_entropy_with_grad (the loss that ends the graph, with the gradient its backward will get):
//   at the small path's sizes ONE launch: the forward's one block, then the same block writes dx
//   row by row with the backward's policy and row mapping (the same bits as the backward kernel);
//   elsewhere the forward's launches, then the backward's.
// Each registers one variant, `fused` (the automatic row plan). The forward's per-row path for every
// size (`rows`, `block`) and the backward's forced row plans (`warp`, `block_2pass`,
// `block_cached`) are the benchmark lab's (bench/lab/loss_lab.cu, through kernels/ops/loss_cuda.h):
// none is a default nor a recorded winner (Note [library rule] in bench/lab/library_rule.h).
// Memory bound: the forward reads each row once; the backward reads it once and writes it once.
// Napkin math: docs/perf.md ("Napkin math behind the kernels").
//
// nll_loss: one thread per row (a block per 64Ki rows at most) with the same single-block /
// workspace-and-finalize split; backward: one thread per element of the (dense) gradient.
// mse_loss: none is the generic elementwise kernel; mean/sum: per-thread f64 partial sums, one
// block when n <= 65536 (one launch), else a fixed grid + finalize. Backward: one elementwise kernel.
//
// Bad targets set the device error word (Note [device errors]); the row gives NaN in the forward and
// zeros in the backward, and the next synchronisation throws naming the op.
#include <array>
#include <type_traits>

#include "core/cuda/device_guard.h"
#include "core/cuda/kernel.cuh"
#include "kernels/common/cuda_loops.cuh"
#include "kernels/common/current_stream.cuh"
#include "kernels/common/grid_size.cuh"
#include "kernels/common/row_kernels.cuh"
#include "kernels/functional.h"
#include "kernels/ops/loss.h"
#include "kernels/ops/loss_cuda.h"
#include "kernels/registry.h"

namespace ember {

namespace {

__device__ __forceinline__ void report(int* err, int code) { atomicCAS(err, 0, code); }

int code_of(OpId id) { return static_cast<int>(id) + 1; }

// Row geometry of class-index losses: [N, C, d...] -> (N, C, Π d); [C] -> (1, C, 1).
RowGeometry class_rows(const Tensor& x) {
  return x.dim() == 1 ? RowGeometry{1, x.shape()[0], 1} : row_geometry(x.shape(), 1);
}

// ---- block reduction of two doubles (fixed order) ----

// Sums (a, b) over the block; the result is valid in thread 0. blockDim.x is a multiple of 32.
__device__ __forceinline__ void block_sum2(double& a, double& b) {
  EMBER_SHARED(double[32], sa);
  EMBER_SHARED(double[32], sb);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  EMBER_UNROLL
  for (int off = 16; off > 0; off >>= 1) {
    a += __shfl_xor_sync(0xffffffffu, a, off);
    b += __shfl_xor_sync(0xffffffffu, b, off);
  }
  if (lane == 0) {
    sa[warp] = a;
    sb[warp] = b;
  }
  __syncthreads();
  if (warp == 0) {
    a = lane < nwarps ? sa[lane] : 0.0;
    b = lane < nwarps ? sb[lane] : 0.0;
    EMBER_UNROLL
    for (int off = 16; off > 0; off >>= 1) {
      a += __shfl_xor_sync(0xffffffffu, a, off);
      b += __shfl_xor_sync(0xffffffffu, b, off);
    }
  }
}

// Sums n (loss, weight) pairs in a fixed order and writes the reduced loss and total_weight.
// count > 0: the mean divides by count (mse) instead of by the summed weights.
template <class T, class Acc>
__global__ void __launch_bounds__(1024) finalize_kernel(const double* __restrict__ ws, int64_t n, Reduction reduction,
                                                        double count, T* __restrict__ out, Acc* __restrict__ tw) {
  double l = 0, w = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    l += ws[2 * i];
    w += ws[2 * i + 1];
  }
  block_sum2(l, w);
  if (threadIdx.x == 0) {
    const double den = count > 0 ? count : w;
    out[0] = static_cast<T>(reduction == Reduction::mean ? l / den : l);
    if (tw != nullptr) tw[0] = static_cast<Acc>(w);
  }
}

template <class T, class Acc>
void launch_finalize(const Tensor& ws, int64_t n, Reduction reduction, double count, const Tensor& out, Acc* tw,
                     cudaStream_t stream) {
  cuda::launch(finalize_kernel<T, Acc>, 1, 1024, 0, stream, static_cast<const double*>(ws.data_ptr()), n, reduction,
               count, static_cast<T*>(out.data_ptr()), tw);
}

// ---- cross_entropy: forward policy ----

enum RowState : int { kValid = 0, kIgnored = 1, kBad = 2 };

template <class T, class Acc, class I>
struct ClassRow {
  int64_t t = 0;
  Acc wt = 0, x0 = 0, scale = 0;
  int state = kIgnored;
};

template <class T, class I>
__device__ __forceinline__ int classify(I tv, int64_t C, int64_t ignore_index, int* err, int code) {
  const int64_t t = static_cast<int64_t>(tv);
  if (t == ignore_index) return kIgnored;
  if (t < 0 || t >= C) {
    report(err, code);
    return kBad;
  }
  return kValid;
}

// Stats: (max, Σ exp(x - max), x_t, Σ w_c (x_c - x0), Σ w_c); x0 = the row's first logit (a
// shift that keeps the smoothing sum accurate when all logits are large and close together).
// L: the dtype of the loss and the class weights, the logits' own but for f32_loss (f32; loss.h).
template <class T, class I, class L = T>
struct CrossEntropyForward : rows::Policy<T, 1, 5, false> {
  using Base = rows::Policy<T, 1, 5, false>;
  using Base::kIn, Base::in;
  using typename Base::Acc, typename Base::Stats;
  using Row = ClassRow<T, Acc, I>;
  using Loss = L;

  const I* target;
  const L* weight;  // nullptr: all ones
  int64_t C, ignore_index;
  Acc eps;
  int mode;     // 0: loss_out[r] = l_n (reduction none); 1: ws[2r], ws[2r + 1] = (l_n, w_n)
  L* loss_out;  // mode 0
  Acc* tw_out;  // mode 0: zeroed by row 0
  double* ws;   // mode 1
  int* err;
  int code;

  __device__ Row row(int64_t r, int64_t base) const {
    Row rw;
    rw.t = static_cast<int64_t>(target[r]);
    rw.state = classify<T, I>(target[r], C, ignore_index, err, code);
    if (rw.state == kValid) rw.wt = weight ? static_cast<Acc>(weight[rw.t]) : Acc(1);
    const Acc x0 = static_cast<Acc>(in[0][base]);
    rw.x0 = (x0 - x0 == Acc(0)) ? x0 : Acc(0);  // finite, else no shift
    return rw;
  }
  __device__ Stats init() const { return {{rows::neg_inf<Acc>(), Acc(0), Acc(0), Acc(0), Acc(0)}}; }
  __device__ void step(Stats& s, const Row& rw, int64_t c, const Acc (&v)[kIn]) const {
    rows::online_step(s.v[0], s.v[1], v[0]);
    if (c == rw.t) s.v[2] += v[0];
    if (eps > Acc(0)) {
      const Acc w = weight ? static_cast<Acc>(weight[c]) : Acc(1);
      s.v[3] += w * (v[0] - rw.x0);
      s.v[4] += w;
    }
  }
  __device__ void merge(Stats& s, const Stats& o) const {
    rows::online_merge(s.v[0], s.v[1], o.v[0], o.v[1]);
    s.v[2] += o.v[2];
    s.v[3] += o.v[3];
    s.v[4] += o.v[4];
  }
  __device__ void finish(Stats&, const Row&) const {}
  __device__ Acc value(const Stats&, const Row&, int64_t, const Acc (&)[kIn]) const { return Acc(0); }

  // (l_n, w_n) of a finished row.
  __device__ void row_loss(const Stats& s, const Row& rw, Acc& l, Acc& w) const {
    if (rw.state != kValid) {
      l = rw.state == kBad ? rows::quiet_nan<Acc>() : Acc(0);
      w = Acc(0);
      return;
    }
    const Acc log_s = math::log(s.v[1]);
    l = (Acc(1) - eps) * rw.wt * ((s.v[0] - s.v[2]) + log_s);
    if (eps > Acc(0)) l += eps / static_cast<Acc>(C) * (s.v[4] * ((s.v[0] - rw.x0) + log_s) - s.v[3]);
    w = rw.wt;
  }
  __device__ void done(const Stats& s, const Row& rw, int64_t r) const {
    Acc l, w;
    row_loss(s, rw, l, w);
    if (mode == 0) {
      loss_out[r] = static_cast<L>(l);
      if (r == 0) tw_out[0] = Acc(0);
    } else {
      ws[2 * r] = static_cast<double>(l);
      ws[2 * r + 1] = static_cast<double>(w);
    }
  }
};

// The one-block kernels' walk over the rows: groups of G = 2^log2g lanes, K elements of a row in
// each lane's registers, as many passes as the rows need (the same trip count for every thread,
// so the shuffles of regs_phase1 see every lane); per row and lane, after phase 1,
// f(row, active, lane, rc, st, v).
template <class P, int K, class F>
__device__ __forceinline__ void for_each_block_row(const P& p, int64_t rows, int C, int log2g, F&& f) {
  const int G = 1 << log2g;
  const int lane = threadIdx.x & (G - 1);
  const int group = threadIdx.x >> log2g, groups = blockDim.x >> log2g;
  for (int64_t r0 = 0; r0 < rows; r0 += groups) {
    const int64_t row = r0 + group;
    const bool active = row < rows;
    typename P::Row rc{};
    if (active) rc = p.row(row, row * C);
    typename P::Acc v[K][P::kIn];
    typename P::Stats st = rows::regs_phase1<P, K>(p, row, active, C, G, lane, rc, v);
    f(row, active, lane, rc, st, v);
  }
}

// One block does every row (groups of G lanes, K elements each) and the mean/sum; thread 0 writes
// the loss and W.
template <class P, int K>
__device__ __forceinline__ void ce_small_loss(const P& p, int64_t rows, int C, int log2g, Reduction reduction,
                                              typename P::Loss* __restrict__ out, typename P::Acc* __restrict__ tw) {
  using Acc = typename P::Acc;
  double lsum = 0, wsum = 0;
  for_each_block_row<P, K>(p, rows, C, log2g,
                           [&](int64_t, bool active, int lane, const auto& rc, const auto& st, auto&) {
                             if (active && lane == 0) {
                               Acc l, w;
                               p.row_loss(st, rc, l, w);
                               lsum += static_cast<double>(l);
                               wsum += static_cast<double>(w);
                             }
                           });
  block_sum2(lsum, wsum);
  if (threadIdx.x == 0) {
    out[0] = static_cast<typename P::Loss>(reduction == Reduction::mean ? lsum / wsum : lsum);  // W = 0: NaN
    tw[0] = static_cast<Acc>(wsum);
  }
}

template <class P, int K>
__global__ void __launch_bounds__(1024)
    ce_small_kernel(P p, int64_t rows, int C, int log2g, Reduction reduction, typename P::Loss* __restrict__ out,
                    typename P::Acc* __restrict__ tw) {
  ce_small_loss<P, K>(p, rows, C, log2g, reduction, out, tw);
}

// cross_entropy_with_grad's one launch: the loss as above, then the same block writes dx with the
// backward's policy B (whose total_weight points at tw): after the barrier every thread sees W, and
// each group reads its rows again (L1/L2 hits: the block read them a moment ago) with the backward
// kernel's row mapping (regs<K>, G lanes per row), so dx equals cross_entropy_backward's bit for bit.
template <class P, class B, int K>
__global__ void __launch_bounds__(1024)
    ce_small_grad_kernel(P p, B b, int64_t rows, int C, int log2g, Reduction reduction,
                         typename P::Loss* __restrict__ out, typename P::Acc* __restrict__ tw) {
  ce_small_loss<P, K>(p, rows, C, log2g, reduction, out, tw);
  __syncthreads();  // thread 0's W (and the loss) are visible to the block
  const int G = 1 << log2g;
  for_each_block_row<B, K>(b, rows, C, log2g,
                           [&](int64_t row, bool active, int lane, const auto& rc, const auto& st, auto& v) {
                             if (!active) return;
                             EMBER_UNROLL
                             for (int j = 0; j < K; ++j) {
                               const int c = lane + j * G;
                               if (c < C) b.out[row * C + c] = static_cast<typename P::T>(b.value(st, rc, c, v[j]));
                             }
                           });
}

// G: lanes per row of the one-block kernels (K = 1: pow2ceil(C); else 32), as log2.
template <int K>
int ce_small_log2g(int64_t C) {
  int g = 1, log2g = 0;
  const int64_t per_row = K == 1 ? C : 32;
  while (g < per_row && g < 32) {
    g <<= 1;
    ++log2g;
  }
  return log2g;
}

template <class P, int K>
void launch_ce_small(const P& p, int64_t rows, int64_t C, Reduction reduction, typename P::Loss* out,
                     typename P::Acc* tw, cudaStream_t stream) {
  cuda::launch(ce_small_kernel<P, K>, 1, 1024, 0, stream, p, rows, static_cast<int>(C), ce_small_log2g<K>(C), reduction,
               out, tw);
}

// The forward's policy for logits x, targets t, class weights w (undefined: none); `op` names the
// op in the device error a bad target raises.
template <class T, class I, class L = T>
CrossEntropyForward<T, I, L> forward_policy(OpId op, const Tensor& x, const Tensor& t, const Tensor& w,
                                            const LossAttrs& la) {
  using Acc = typename CrossEntropyForward<T, I, L>::Acc;
  CrossEntropyForward<T, I, L> p{};
  p.in[0] = static_cast<const T*>(x.data_ptr());
  p.target = static_cast<const I*>(t.data_ptr());
  p.weight = w.defined() ? static_cast<const L*>(w.data_ptr()) : nullptr;
  p.C = class_rows(x).C;
  p.ignore_index = la.ignore_index;
  p.eps = static_cast<Acc>(la.label_smoothing);
  p.err = cuda::device_error_word(x.device().index);
  p.code = code_of(op);
  return p;
}

// The single-block path: rows of at most 128 classes, at most 8 passes of the 1024-thread block
// over the rows (C = 10: 16 lanes per row, 64 rows per pass, so up to 512 rows).
bool small_batch(const RowGeometry& g) {
  if (g.B != 1 || g.C > 128) return false;
  int64_t lanes = 1;
  while (lanes < g.C && lanes < 32) lanes <<= 1;
  return g.rows() <= 8 * (1024 / lanes);
}

// force_rows: run the per-row kernels with `plan` (and the workspace + finalize reduction) for every
// size, skipping the single-block path: the lab's variants (cross_entropy_cuda_rows).
void cross_entropy_cuda(const KernelCall& c, rows::Plan plan, bool force_rows) {
  const Tensor &x = c.in[0], &t = c.in[1], &w = c.in[2];
  Tensor out = c.out[0], tw = c.out[1];
  const LossAttrs& la = c.attr<LossAttrs>();
  cuda::DeviceGuard guard(x.device().index);
  cudaStream_t stream = cuda::stream_for(x);
  const RowGeometry g = class_rows(x);
  const int64_t rows = g.rows();
  if (rows == 0) {  // empty batch: mean 0/0 = NaN, sum 0, none empty; W = 0
    if (la.reduction != Reduction::none) out.fill_(la.reduction == Reduction::mean ? std::nan("") : 0.0);
    tw.fill_(0.0);
    return;
  }
  EMBER_DISPATCH_FLOAT(x.dtype(), "cross_entropy", [&] {
    EMBER_DISPATCH_INDEX(t.dtype(), "cross_entropy", [&] {
      using P = CrossEntropyForward<scalar_t, index_t>;
      using Acc = typename P::Acc;
      P p = forward_policy<scalar_t, index_t>(c.op, x, t, w, la);
      Acc* twp = static_cast<Acc*>(tw.data_ptr());
      if (la.reduction == Reduction::none) {
        p.mode = 0;
        p.loss_out = static_cast<scalar_t*>(out.data_ptr());
        p.tw_out = twp;
        rows::launch(p, g, x.device(), plan);
        return;
      }
      if constexpr (!std::is_same_v<scalar_t, double>) {
        if (!force_rows && small_batch(g)) {
          scalar_t* op = static_cast<scalar_t*>(out.data_ptr());
          const Reduction red = la.reduction;
          if (g.C <= 32) return launch_ce_small<P, 1>(p, rows, g.C, red, op, twp, stream);
          return launch_ce_small<P, 4>(p, rows, g.C, red, op, twp, stream);
        }
      }
      Tensor ws = empty({2 * rows}, TensorOptions().dtype(DType::f64).device(x.device()));
      p.mode = 1;
      p.ws = static_cast<double*>(ws.data_ptr());
      rows::launch(p, g, x.device(), plan);
      launch_finalize<scalar_t, Acc>(ws, rows, la.reduction, 0, out, twp, stream);
    });
  });
}

// ---- cross_entropy: backward policy ----

// Stats: (max, Σ exp(x - max), Σ w_c); after finish (max, log s, A).
// L: the dtype of the gradient g and the class weights (as the forward's).
template <class T, class I, class L = T>
struct CrossEntropyBackward : rows::Policy<T, 1, 3, true> {
  using Base = rows::Policy<T, 1, 3, true>;
  using Base::kIn;
  using typename Base::Acc, typename Base::Stats;
  using Row = ClassRow<T, Acc, I>;

  const I* target;
  const L* weight;
  const L* grad;
  int64_t grad_stride;  // 1 for reduction none (g has the target's shape), 0 for a scalar g
  const Acc* total_weight;
  Reduction reduction;
  int64_t C, ignore_index;
  Acc eps;
  int* err;
  int code;

  __device__ Row row(int64_t r, int64_t) const {
    Row rw;
    rw.t = static_cast<int64_t>(target[r]);
    rw.state = classify<T, I>(target[r], C, ignore_index, err, code);
    if (rw.state == kValid) {
      rw.wt = weight ? static_cast<Acc>(weight[rw.t]) : Acc(1);
      const Acc g = static_cast<Acc>(grad[r * grad_stride]);
      rw.scale = reduction == Reduction::mean ? g / total_weight[0] : g;
    }
    return rw;
  }
  __device__ Stats init() const { return {{rows::neg_inf<Acc>(), Acc(0), Acc(0)}}; }
  __device__ void step(Stats& s, const Row&, int64_t c, const Acc (&v)[kIn]) const {
    rows::online_step(s.v[0], s.v[1], v[0]);
    if (eps > Acc(0)) s.v[2] += weight ? static_cast<Acc>(weight[c]) : Acc(1);
  }
  __device__ void merge(Stats& s, const Stats& o) const {
    rows::online_merge(s.v[0], s.v[1], o.v[0], o.v[1]);
    s.v[2] += o.v[2];
  }
  __device__ void finish(Stats& s, const Row& rw) const {
    s.v[1] = math::log(s.v[1]);
    s.v[2] = (Acc(1) - eps) * rw.wt + (eps > Acc(0) ? eps / static_cast<Acc>(C) * s.v[2] : Acc(0));
  }
  __device__ Acc value(const Stats& s, const Row& rw, int64_t c, const Acc (&v)[kIn]) const {
    if (rw.state != kValid) return Acc(0);
    const Acc p = math::exp((v[0] - s.v[0]) - s.v[1]);
    Acc b = c == rw.t ? (Acc(1) - eps) * rw.wt : Acc(0);
    if (eps > Acc(0)) b += eps / static_cast<Acc>(C) * (weight ? static_cast<Acc>(weight[c]) : Acc(1));
    return (p * s.v[2] - b) * rw.scale;
  }
};

// The backward's policy: dx = (p A - B) s from the gradient g and the forward's total_weight `tw`
// (a device pointer: the one-block kernel of cross_entropy_with_grad writes it just before).
template <class T, class I, class L = T>
CrossEntropyBackward<T, I, L> backward_policy(OpId op, const Tensor& g, const Tensor& x, const Tensor& t,
                                              const Tensor& w, const typename CrossEntropyBackward<T, I, L>::Acc* tw,
                                              const Tensor& dx, const LossAttrs& la) {
  using Acc = typename CrossEntropyBackward<T, I, L>::Acc;
  CrossEntropyBackward<T, I, L> p{};
  p.in[0] = static_cast<const T*>(x.data_ptr());
  p.out = static_cast<T*>(dx.data_ptr());
  p.target = static_cast<const I*>(t.data_ptr());
  p.weight = w.defined() ? static_cast<const L*>(w.data_ptr()) : nullptr;
  p.grad = static_cast<const L*>(g.data_ptr());
  p.grad_stride = la.reduction == Reduction::none ? 1 : 0;
  p.total_weight = tw;
  p.reduction = la.reduction;
  p.C = class_rows(x).C;
  p.ignore_index = la.ignore_index;
  p.eps = static_cast<Acc>(la.label_smoothing);
  p.err = cuda::device_error_word(x.device().index);
  p.code = code_of(op);
  return p;
}

void cross_entropy_backward_cuda(const KernelCall& c, rows::Plan plan) {
  const Tensor &g = c.in[0], &x = c.in[1], &t = c.in[2], &w = c.in[3];
  const Tensor& dx = c.out[0];
  const LossAttrs& la = c.attr<LossAttrs>();
  if (dx.numel() == 0) return;
  cuda::DeviceGuard guard(x.device().index);
  const DType acc = loss_acc_dtype(x.dtype());
  Tensor tw = c.in[4].dtype() == acc ? c.in[4] : cast(c.in[4], acc);  // (already so from the forward)
  EMBER_DISPATCH_FLOAT(x.dtype(), "cross_entropy_backward", [&] {
    EMBER_DISPATCH_INDEX(t.dtype(), "cross_entropy_backward", [&] {
      using Acc = typename CrossEntropyBackward<scalar_t, index_t>::Acc;
      const auto p =
          backward_policy<scalar_t, index_t>(c.op, g, x, t, w, static_cast<const Acc*>(tw.data_ptr()), dx, la);
      rows::launch(p, class_rows(x), x.device(), plan);
    });
  });
}

void cross_entropy_fused(const KernelCall& c) { cross_entropy_cuda(c, rows::Plan::automatic, false); }
void cross_entropy_backward_fused(const KernelCall& c) { cross_entropy_backward_cuda(c, rows::Plan::automatic); }

// The one launch of cross_entropy_with_grad_fused for logits of type T, targets of type I, and the
// loss, class weights and g of type L.
template <class T, class I, class L = T>
void launch_ce_small_grad(const KernelCall& c, const RowGeometry& geo) {
  const Tensor &x = c.in[0], &t = c.in[1], &w = c.in[2], &g = c.in[3];
  const LossAttrs& la = c.attr<LossAttrs>();
  cuda::DeviceGuard guard(x.device().index);
  cudaStream_t stream = cuda::stream_for(x);
  using P = CrossEntropyForward<T, I, L>;
  using B = CrossEntropyBackward<T, I, L>;
  using Acc = typename P::Acc;
  Acc* tw = static_cast<Acc*>(c.out[1].data_ptr());
  const P p = forward_policy<T, I, L>(c.op, x, t, w, la);
  const B b = backward_policy<T, I, L>(c.op, g, x, t, w, tw, c.out[2], la);
  L* out = static_cast<L*>(c.out[0].data_ptr());
  const int C = static_cast<int>(geo.C);
  if (geo.C <= 32)
    cuda::launch(ce_small_grad_kernel<P, B, 1>, 1, 1024, 0, stream, p, b, geo.rows(), C, ce_small_log2g<1>(C),
                 la.reduction, out, tw);
  else
    cuda::launch(ce_small_grad_kernel<P, B, 4>, 1, 1024, 0, stream, p, b, geo.rows(), C, ce_small_log2g<4>(C),
                 la.reduction, out, tw);
}

// cross_entropy_with_grad: one launch where the forward takes its one-block path (mean or sum over
// the MNIST-sized batches, small_batch; not f64, whose one-block kernels have no instances);
// elsewhere the forward's kernels, then the backward's, as the two ops would run (a bad target is
// reported under this op's name either way).
void cross_entropy_with_grad_fused(const KernelCall& c) {
  const Tensor &x = c.in[0], &t = c.in[1], &w = c.in[2], &g = c.in[3];
  const LossAttrs& la = c.attr<LossAttrs>();
  const RowGeometry geo = class_rows(x);
  if (la.reduction != Reduction::none && x.dtype() != DType::f64 && geo.rows() > 0 && small_batch(geo)) {
    // f32_loss (Note [the loss reads the logits as they are] in loss.cpp): an f32 loss, weights
    // and g beside f16/bf16 logits and dx
    auto with_targets = [&]<class T>() {
      EMBER_DISPATCH_INDEX(t.dtype(), "cross_entropy_with_grad", [&] {
        if constexpr (std::is_same_v<T, float>) launch_ce_small_grad<T, index_t>(c, geo);
        else if (la.f32_loss) launch_ce_small_grad<T, index_t, float>(c, geo);
        else launch_ce_small_grad<T, index_t>(c, geo);
      });
    };
    switch (x.dtype()) {
      case DType::f32: with_targets.template operator()<float>(); break;
      case DType::f16: with_targets.template operator()<Half>(); break;
      case DType::bf16: with_targets.template operator()<BFloat16>(); break;
      default: EMBER_FAIL("cross_entropy_with_grad: dtype ", x.dtype(), " has no one-launch kernel");
    }
    return;
  }
  if (la.f32_loss) return cross_entropy_with_grad_in_f32(c, cross_entropy_with_grad_fused);
  std::array<Tensor, 2> fwd_out{c.out[0], c.out[1]};
  cross_entropy_cuda(KernelCall{c.op, c.in.first(3), fwd_out, c.attrs}, rows::Plan::automatic, false);
  const std::array<Tensor, 5> bwd_in{g, x, t, w, c.out[1]};
  std::array<Tensor, 1> bwd_out{c.out[2]};
  cross_entropy_backward_cuda(KernelCall{c.op, bwd_in, bwd_out, c.attrs}, rows::Plan::automatic);
}

// ---- nll_loss ----

// Thread per row, grid-stride. none: writes l_n (block 0 thread 0 zeroes total_weight); mean/sum:
// per-thread f64 sums reduced per block; one block writes the result, several write (l, w) pairs.
template <class T, class I>
__global__ void __launch_bounds__(1024)
    nll_kernel(const T* __restrict__ x, const I* __restrict__ target, const T* __restrict__ weight, int64_t rows,
               int64_t C, int64_t B, int64_t ignore_index, Reduction reduction, T* __restrict__ out,
               acc_t<T>* __restrict__ tw, double* __restrict__ ws, int* err, int code) {
  double lsum = 0, wsum = 0;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; r < rows;
       r += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int state = classify<T, I>(target[r], C, ignore_index, err, code);
    double l = 0, w = 0;
    if (state == kBad) {
      l = NAN;
    } else if (state == kValid) {
      const int64_t t = static_cast<int64_t>(target[r]);
      w = weight ? static_cast<double>(static_cast<acc_t<T>>(weight[t])) : 1.0;
      l = -w * static_cast<double>(static_cast<acc_t<T>>(x[(r / B) * C * B + t * B + r % B]));
    }
    if (reduction == Reduction::none) out[r] = static_cast<T>(l);
    lsum += l;
    wsum += w;
  }
  if (reduction == Reduction::none) {
    if (blockIdx.x == 0 && threadIdx.x == 0) tw[0] = 0;
    return;
  }
  block_sum2(lsum, wsum);
  if (threadIdx.x == 0) {
    if (gridDim.x == 1) {
      out[0] = static_cast<T>(reduction == Reduction::mean ? lsum / wsum : lsum);
      tw[0] = static_cast<acc_t<T>>(wsum);
    } else {
      ws[2 * blockIdx.x] = lsum;
      ws[2 * blockIdx.x + 1] = wsum;
    }
  }
}

void nll_loss_cuda(const KernelCall& c) {
  const Tensor &x = c.in[0], &t = c.in[1], &w = c.in[2];
  Tensor out = c.out[0], tw = c.out[1];
  const LossAttrs& la = c.attr<LossAttrs>();
  cuda::DeviceGuard guard(x.device().index);
  cudaStream_t stream = cuda::stream_for(x);
  const RowGeometry g = class_rows(x);
  const int64_t rows = g.rows();
  if (rows == 0) {
    if (la.reduction != Reduction::none) out.fill_(la.reduction == Reduction::mean ? std::nan("") : 0.0);
    tw.fill_(0.0);
    return;
  }
  // mean/sum: one block up to 64Ki rows (one launch), then a block per 64Ki rows + finalize;
  // none: enough blocks to cover the rows.
  constexpr int kThreads = 1024;
  const int64_t blocks = la.reduction == Reduction::none ? cuda::grid_for(rows, kThreads, x.device().index)
                                                         : std::min<int64_t>(1024, (rows + 65535) / 65536);
  EMBER_DISPATCH_FLOAT(x.dtype(), "nll_loss", [&] {
    EMBER_DISPATCH_INDEX(t.dtype(), "nll_loss", [&] {
      using Acc = acc_t<scalar_t>;
      Tensor ws;
      if (la.reduction != Reduction::none && blocks > 1)
        ws = empty({2 * blocks}, TensorOptions().dtype(DType::f64).device(x.device()));
      cuda::launch(nll_kernel<scalar_t, index_t>, static_cast<unsigned>(blocks), kThreads, 0, stream,
                   static_cast<const scalar_t*>(x.data_ptr()), static_cast<const index_t*>(t.data_ptr()),
                   w.defined() ? static_cast<const scalar_t*>(w.data_ptr()) : nullptr, rows, g.C, g.B, la.ignore_index,
                   la.reduction, static_cast<scalar_t*>(out.data_ptr()), static_cast<Acc*>(tw.data_ptr()),
                   ws.defined() ? static_cast<double*>(ws.data_ptr()) : nullptr,
                   cuda::device_error_word(x.device().index), code_of(OpId::nll_loss));
      if (ws.defined())
        launch_finalize<scalar_t, Acc>(ws, blocks, la.reduction, 0, out, static_cast<Acc*>(tw.data_ptr()), stream);
    });
  });
}

// Thread per element of the dense gradient: -w_t * scale where c == t, else 0.
template <class T, class I>
__global__ void nll_backward_kernel(const T* __restrict__ grad, int64_t grad_stride, const I* __restrict__ target,
                                    const T* __restrict__ weight, const acc_t<T>* __restrict__ total_weight,
                                    Reduction reduction, T* __restrict__ dx, int64_t n, int64_t C, int64_t B,
                                    int64_t ignore_index, int* err, int code) {
  using Acc = acc_t<T>;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t b = e % B, ac = e / B;
    const int64_t cls = ac % C, a = ac / C;
    const int64_t r = a * B + b;
    Acc v = 0;
    const int64_t t = static_cast<int64_t>(target[r]);
    if (t == cls && t != ignore_index) {
      const Acc g = static_cast<Acc>(grad[r * grad_stride]);
      const Acc wt = weight ? static_cast<Acc>(weight[t]) : Acc(1);
      v = -wt * (reduction == Reduction::mean ? g / total_weight[0] : g);
    } else if (cls == 0 && t != ignore_index && (t < 0 || t >= C)) {
      report(err, code);
    }
    dx[e] = static_cast<T>(v);
  }
}

void nll_loss_backward_cuda(const KernelCall& c) {
  const Tensor &g = c.in[0], &x = c.in[1], &t = c.in[2], &w = c.in[3];
  const Tensor& dx = c.out[0];
  const LossAttrs& la = c.attr<LossAttrs>();
  if (dx.numel() == 0) return;
  cuda::DeviceGuard guard(x.device().index);
  const DType acc = loss_acc_dtype(x.dtype());
  Tensor tw = c.in[4].dtype() == acc ? c.in[4] : cast(c.in[4], acc);
  const RowGeometry geo = class_rows(x);
  EMBER_DISPATCH_FLOAT(x.dtype(), "nll_loss_backward", [&] {
    EMBER_DISPATCH_INDEX(t.dtype(), "nll_loss_backward", [&] {
      cuda::launch(nll_backward_kernel<scalar_t, index_t>, cuda::grid_for(dx.numel(), 256, x.device().index), 256, 0,
                   cuda::stream_for(x), static_cast<const scalar_t*>(g.data_ptr()),
                   la.reduction == Reduction::none ? 1 : 0, static_cast<const index_t*>(t.data_ptr()),
                   w.defined() ? static_cast<const scalar_t*>(w.data_ptr()) : nullptr,
                   static_cast<const acc_t<scalar_t>*>(tw.data_ptr()), la.reduction,
                   static_cast<scalar_t*>(dx.data_ptr()), dx.numel(), geo.C, geo.B, la.ignore_index,
                   cuda::device_error_word(x.device().index), code_of(OpId::nll_loss_backward));
    });
  });
}

// ---- mse_loss ----

struct SquaredDiff {
  template <class T>
  EMBER_HD acc_t<T> operator()(T a, T b) const {
    const acc_t<T> d = static_cast<acc_t<T>>(a) - static_cast<acc_t<T>>(b);
    return d * d;
  }
};

// Per-thread f64 sums of (x - y)^2 over a grid-stride range, reduced per block.
template <class T>
__global__ void __launch_bounds__(256)
    sqdiff_sum_kernel(const T* __restrict__ x, const T* __restrict__ y, int64_t n, Reduction reduction,
                      T* __restrict__ out, double* __restrict__ ws) {
  double s = 0;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const double d =
        static_cast<double>(static_cast<acc_t<T>>(x[i])) - static_cast<double>(static_cast<acc_t<T>>(y[i]));
    s += d * d;
  }
  double unused = 0;
  block_sum2(s, unused);
  if (threadIdx.x == 0) {
    if (gridDim.x == 1) {
      out[0] = static_cast<T>(reduction == Reduction::mean ? s / static_cast<double>(n) : s);  // n = 0: NaN
    } else {
      ws[2 * blockIdx.x] = s;
      ws[2 * blockIdx.x + 1] = 0;
    }
  }
}

void mse_loss_cuda(const KernelCall& c) {
  const Tensor &x = c.in[0], &y = c.in[1];
  const Tensor& out = c.out[0];
  const Reduction red = c.attr<LossAttrs>().reduction;
  const int64_t n = x.numel();
  if (red == Reduction::none) {
    if (n == 0) return;
    ElementwiseLayout L = make_layout({&out, &x, &y});
    EMBER_DISPATCH_FLOAT(x.dtype(), "mse_loss", [&] {
      gpu_map<scalar_t, scalar_t, scalar_t>(L, {&out, &x, &y}, SquaredDiff{});
    });
    return;
  }
  cuda::DeviceGuard guard(x.device().index);
  cudaStream_t stream = cuda::stream_for(x);
  constexpr int kThreads = 256;
  const int64_t blocks = n <= 65536 ? 1 : std::min<int64_t>(1024, (n + 65535) / 65536);
  EMBER_DISPATCH_FLOAT(x.dtype(), "mse_loss", [&] {
    Tensor ws;
    if (blocks > 1) ws = empty({2 * blocks}, TensorOptions().dtype(DType::f64).device(x.device()));
    cuda::launch(sqdiff_sum_kernel<scalar_t>, static_cast<unsigned>(blocks), kThreads, 0, stream,
                 static_cast<const scalar_t*>(x.data_ptr()), static_cast<const scalar_t*>(y.data_ptr()), n, red,
                 static_cast<scalar_t*>(out.data_ptr()), ws.defined() ? static_cast<double*>(ws.data_ptr()) : nullptr);
    if (ws.defined())
      launch_finalize<scalar_t, acc_t<scalar_t>>(ws, blocks, red, static_cast<double>(n), out, nullptr, stream);
  });
}

template <class T>
__global__ void mse_backward_kernel(const T* __restrict__ g, int64_t g_stride, const T* __restrict__ x,
                                    const T* __restrict__ y, T* __restrict__ dx, int64_t n, acc_t<T> s) {
  using Acc = acc_t<T>;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dx[i] = static_cast<T>((static_cast<Acc>(x[i]) - static_cast<Acc>(y[i])) * static_cast<Acc>(g[i * g_stride]) * s);
}

void mse_loss_backward_cuda(const KernelCall& c) {
  const Tensor &g = c.in[0], &x = c.in[1], &y = c.in[2];
  const Tensor& dx = c.out[0];
  const Reduction red = c.attr<LossAttrs>().reduction;
  const int64_t n = x.numel();
  if (n == 0) return;
  cuda::DeviceGuard guard(x.device().index);
  EMBER_DISPATCH_FLOAT(x.dtype(), "mse_loss_backward", [&] {
    const double s = red == Reduction::mean ? 2.0 / static_cast<double>(n) : 2.0;
    cuda::launch(mse_backward_kernel<scalar_t>, cuda::grid_for(n, 256, x.device().index), 256, 0, cuda::stream_for(x),
                 static_cast<const scalar_t*>(g.data_ptr()), red == Reduction::none ? 1 : 0,
                 static_cast<const scalar_t*>(x.data_ptr()), static_cast<const scalar_t*>(y.data_ptr()),
                 static_cast<scalar_t*>(dx.data_ptr()), n, static_cast<acc_t<scalar_t>>(s));
  });
}

bool class_innermost(const KernelCall& c, int x_index) { return class_rows(c.in[x_index]).B == 1; }

}  // namespace

void cross_entropy_cuda_rows(const KernelCall& c, rows::Plan plan) { cross_entropy_cuda(c, plan, true); }
void cross_entropy_backward_cuda_plan(const KernelCall& c, rows::Plan plan) { cross_entropy_backward_cuda(c, plan); }

bool cross_entropy_plan_supports(const KernelCall& c, rows::Plan plan) {
  if (plan == rows::Plan::automatic) return true;
  return plan != rows::Plan::block_cached && class_innermost(c, 0);  // no output row to cache
}

bool cross_entropy_backward_plan_supports(const KernelCall& c, rows::Plan plan) {
  if (plan == rows::Plan::automatic) return true;
  if (!class_innermost(c, 1)) return false;
  if (plan != rows::Plan::block_cached) return true;
  const Tensor& x = c.in[1];
  const int dev = x.is_cuda() ? x.device().index : cuda::current_device();
  return static_cast<size_t>(class_rows(x).C) * x.element_size() <= rows::row_cache_limit(dev);
}

void register_cuda_cross_entropy(OpInfo& info) {
  info.add_variant({.name = "fused",
                    .device = DeviceType::cuda,
                    .fn = cross_entropy_fused,
                    .dtypes = kFloatTypes,
                    .note = "one kernel: online log-sum-exp + target + smoothing per row; one block does the "
                            "mean for small batches, else per-row pairs + finalize"});
}
void register_cuda_cross_entropy_backward(OpInfo& info) {
  info.add_variant({.name = "fused",
                    .device = DeviceType::cuda,
                    .fn = cross_entropy_backward_fused,
                    .dtypes = kFloatTypes,
                    .note = "one kernel: lse per row (online), then (p A - B) * scale"});
}
void register_cuda_cross_entropy_with_grad(OpInfo& info) {
  info.add_variant({.name = "fused",
                    .device = DeviceType::cuda,
                    .fn = cross_entropy_with_grad_fused,
                    .dtypes = kFloatTypes,
                    .note = "one block, one launch for small batches: the loss, then dx from the same rows; "
                            "else the forward's kernels and the backward's"});
}
void register_cuda_nll_loss(OpInfo& info) {
  info.add_variant({.name = "cuda",
                    .device = DeviceType::cuda,
                    .fn = nll_loss_cuda,
                    .dtypes = kFloatTypes,
                    .note = "thread per row; one block (<= 64Ki rows) or blocks + finalize"});
}
void register_cuda_nll_loss_backward(OpInfo& info) {
  info.add_variant({.name = "cuda",
                    .device = DeviceType::cuda,
                    .fn = nll_loss_backward_cuda,
                    .dtypes = kFloatTypes,
                    .note = "thread per gradient element"});
}
void register_cuda_mse_loss(OpInfo& info) {
  info.add_variant({.name = "cuda",
                    .device = DeviceType::cuda,
                    .fn = mse_loss_cuda,
                    .dtypes = kFloatTypes,
                    .note = "elementwise (none); f64 per-thread sums, one block (<= 64Ki) or blocks + finalize"});
}
void register_cuda_mse_loss_backward(OpInfo& info) {
  info.add_variant({.name = "cuda",
                    .device = DeviceType::cuda,
                    .fn = mse_loss_backward_cuda,
                    .dtypes = kFloatTypes,
                    .note = "thread per element"});
}

}  // namespace ember
