// softmax / log_softmax and their fused gradients on CUDA: the row kernels of
// kernels/common/row_kernels.cuh (which holds the kernel table and Note [online softmax]; their
// napkin math is in docs/perf.md) with the automatic plan.
//
// Variants (f32, f16, bf16 computing in f32; f64 in f64):
//   fused         default: regs<K> for C <= 512 (several rows per warp for C <= 16), a warp per
//                 row for C < 4096, a block per row beyond (the row cached in shared memory when it
//                 fits: one HBM read + one write), the cols kernel when the dim is not innermost
//   cudnn         vendor (cudnnSoftmaxForward/Backward; f32, f64, f16): what bench_ops compares with
// The forced plans (warp, block_2pass, block_cached: one kernel for every C, innermost dims only)
// are the benchmark lab's (bench/lab/softmax_lab.cu, Note [library rule] in
// bench/lab/library_rule.h): never a default, they run in bench_ops and the parity tests through
// softmax_cuda_plan (kernels/ops/softmax_cuda.h).
//
// Strided dims (B > 1): the cols kernel reads 32 adjacent rows per instruction, so it is coalesced
// for any B >= 32 and fully uses 32-byte sectors from B >= 8 (f32). Its parallelism is A * B / 32
// blocks; when there are fewer than 4096 rows and they are long (C >= 1024) it would leave most
// SMs idle, so `fused` permutes the dim innermost first (a copy in and a copy out: 3x the traffic
// of the ideal, but a block per row). Everything else runs strided in place: permuting would move
// every byte two extra times, which costs more than the strided kernel's partial sectors.
#include <type_traits>

#include "core/cuda/device_guard.h"
#include "core/cuda/kernel.cuh"
#include "kernels/common/current_stream.cuh"
#include "kernels/common/row_kernels.cuh"
#include "kernels/functional.h"
#include "kernels/ops/softmax.h"
#include "kernels/ops/softmax_cuda.h"
#include "kernels/registry.h"

#if EMBER_WITH_CUDNN
#include "kernels/common/cudnn_utils.h"
#endif

namespace ember {

namespace {

// Stats: (max, Σ exp(x - max)); after finish (max, 1/s or log s).
template <class T, bool kLog>
struct SoftmaxPolicy : rows::Policy<T, 1, 2, true> {
  using Base = rows::Policy<T, 1, 2, true>;
  using Base::kIn;
  using typename Base::Acc, typename Base::Row, typename Base::Stats;

  __device__ Stats init() const { return {{rows::neg_inf<Acc>(), Acc(0)}}; }
  __device__ void step(Stats& s, const Row&, int64_t, const Acc (&v)[kIn]) const {
    rows::online_step(s.v[0], s.v[1], v[0]);
  }
  __device__ void merge(Stats& s, const Stats& o) const { rows::online_merge(s.v[0], s.v[1], o.v[0], o.v[1]); }
  __device__ void finish(Stats& s, const Row&) const { s.v[1] = kLog ? math::log(s.v[1]) : Acc(1) / s.v[1]; }
  __device__ Acc value(const Stats& s, const Row&, int64_t, const Acc (&v)[kIn]) const {
    const Acc d = v[0] - s.v[0];
    return kLog ? d - s.v[1] : math::exp(d) * s.v[1];
  }
};

// in[0] = g, in[1] = y. Stats: Σ g (log) or Σ g y.
template <class T, bool kLog>
struct SoftmaxBackwardPolicy : rows::Policy<T, 2, 1, true> {
  using Base = rows::Policy<T, 2, 1, true>;
  using Base::kIn;
  using typename Base::Acc, typename Base::Row, typename Base::Stats;

  __device__ Stats init() const { return {{Acc(0)}}; }
  __device__ void step(Stats& s, const Row&, int64_t, const Acc (&v)[kIn]) const {
    s.v[0] += kLog ? v[0] : v[0] * v[1];
  }
  __device__ void merge(Stats& s, const Stats& o) const { s.v[0] += o.v[0]; }
  __device__ void finish(Stats&, const Row&) const {}
  __device__ Acc value(const Stats& s, const Row&, int64_t, const Acc (&v)[kIn]) const {
    return kLog ? v[0] - math::exp(v[1]) * s.v[0] : v[1] * (v[0] - s.v[0]);
  }
};

RowGeometry geometry_of(const KernelCall& c) {
  const Tensor& x = c.in[0];
  return row_geometry(x.shape(), wrap_dim(c.attr<SoftmaxAttrs>().dim, x.dim()));
}

// Few long rows along a strided dim: permute innermost (see the header comment).
bool should_permute(const RowGeometry& g) { return g.B > 1 && g.rows() < 4096 && g.C >= 1024; }

template <template <class, bool> class Policy, bool kLog>
void softmax_family_cuda(const KernelCall& c, rows::Plan plan) {
  const Tensor& y = c.out[0];
  if (y.numel() == 0) return;
  cuda::DeviceGuard guard(y.device().index);
  const int n = c.in[0].dim();
  const int d = wrap_dim(c.attr<SoftmaxAttrs>().dim, n);
  RowGeometry g = geometry_of(c);
  EMBER_DISPATCH_FLOAT(y.dtype(), "softmax", [&] {
    using P = Policy<scalar_t, kLog>;
    if (plan == rows::Plan::automatic && should_permute(g)) {
      std::vector<int64_t> perm;
      for (int i = 0; i < n; ++i)
        if (i != d) perm.push_back(i);
      perm.push_back(d);
      P p{};
      std::vector<Tensor> keep;
      for (int k = 0; k < P::kIn; ++k) {
        keep.push_back(c.in[k].permute(perm).contiguous());
        p.in[k] = static_cast<const scalar_t*>(keep.back().data_ptr());
      }
      Tensor yp = empty(keep[0].shape(), TensorOptions().dtype(y.dtype()).device(y.device()));
      p.out = static_cast<scalar_t*>(yp.data_ptr());
      rows::launch(p, RowGeometry{g.rows(), g.C, 1}, y.device());
      Tensor yv = y.permute(perm);
      copy_(yv, yp);
      return;
    }
    P p{};
    for (int k = 0; k < P::kIn; ++k) p.in[k] = static_cast<const scalar_t*>(c.in[k].data_ptr());
    p.out = static_cast<scalar_t*>(y.data_ptr());
    rows::launch(p, g, y.device(), plan);
  });
}

template <template <class, bool> class Policy, bool kLog>
void softmax_family_fused(const KernelCall& c) {
  softmax_family_cuda<Policy, kLog>(c, rows::Plan::automatic);
}

#if EMBER_WITH_CUDNN
// cuDNN's softmax (cudnnSoftmaxForward/Backward, CHANNEL mode) over the [A, C, B] view as an
// [N=A, C, H=B, W=1] tensor: the vendor variant to compare against. ACCURATE subtracts the max
// as ours does. cuDNN takes int dimensions, so tensors beyond 2^31 elements are left to ours.
bool cudnn_ok(const KernelCall& c) {
  const Tensor& x = c.in[0];
  constexpr int64_t kMax = 0x7fffffff;
  return x.numel() > 0 && x.numel() <= kMax && x.dtype() != DType::bf16;
}

template <bool kLog, bool kBackward>
void softmax_cudnn(const KernelCall& c) {
  const Tensor& x = c.in[0];
  const Tensor& y = c.out[0];
  const RowGeometry g = geometry_of(c);
  cuda::DeviceGuard guard(x.device().index);
  cudnnHandle_t h = cudnn::handle_for(x.device().index, cuda::stream_for(x));
  cudnn::TensorDesc desc;
  const int64_t size[4] = {g.A, g.C, g.B, 1};
  const int64_t stride[4] = {g.C * g.B, g.B, 1, 1};
  desc.set(x.dtype(), size, stride, kLog ? "cuDNN log_softmax" : "cuDNN softmax");
  const cudnnSoftmaxAlgorithm_t algo = kLog ? CUDNN_SOFTMAX_LOG : CUDNN_SOFTMAX_ACCURATE;
  // scaling factors are double for double data, float otherwise
  const double one_d = 1, zero_d = 0;
  const float one_f = 1, zero_f = 0;
  const bool dbl = x.dtype() == DType::f64;
  const void* one = dbl ? static_cast<const void*>(&one_d) : static_cast<const void*>(&one_f);
  const void* zero = dbl ? static_cast<const void*>(&zero_d) : static_cast<const void*>(&zero_f);
  if constexpr (!kBackward) {
    EMBER_CUDNN_CHECK(cudnnSoftmaxForward(h, algo, CUDNN_SOFTMAX_MODE_CHANNEL, one, desc.d, x.data_ptr(), zero, desc.d,
                                          y.data_ptr()));
  } else {
    const Tensor &grad = c.in[0], &out = c.in[1];
    EMBER_CUDNN_CHECK(cudnnSoftmaxBackward(h, algo, CUDNN_SOFTMAX_MODE_CHANNEL, one, desc.d, out.data_ptr(), desc.d,
                                           grad.data_ptr(), zero, desc.d, y.data_ptr()));
  }
}
#endif

template <template <class, bool> class Policy, bool kLog>
void register_family(OpInfo& info) {
  info.add_variant({.name = "fused",
                    .device = DeviceType::cuda,
                    .fn = softmax_family_fused<Policy, kLog>,
                    .dtypes = kFloatTypes,
                    .note = "online max/sum in one read: regs (C <= 512), warp (< 4096), block (row in smem), "
                            "cols (strided)"});
#if EMBER_WITH_CUDNN
  constexpr bool kBackward = std::is_same_v<Policy<float, kLog>, SoftmaxBackwardPolicy<float, kLog>>;
  info.add_variant({.name = "cudnn",
                    .device = DeviceType::cuda,
                    .fn = softmax_cudnn<kLog, kBackward>,
                    .dtypes = DTypeSet{DType::f32, DType::f64, DType::f16},
                    .flags = kVendor,
                    .supports = cudnn_ok,
                    .note = kBackward ? "cudnnSoftmaxBackward (CHANNEL mode over the [A, C, B] view)"
                                      : "cudnnSoftmaxForward (ACCURATE or LOG, CHANNEL mode over the [A, C, B] view)"});
#endif
}

}  // namespace

void softmax_cuda_plan(const KernelCall& c, rows::Plan plan) {
  switch (c.op) {
    case OpId::softmax: return softmax_family_cuda<SoftmaxPolicy, false>(c, plan);
    case OpId::log_softmax: return softmax_family_cuda<SoftmaxPolicy, true>(c, plan);
    case OpId::softmax_backward: return softmax_family_cuda<SoftmaxBackwardPolicy, false>(c, plan);
    case OpId::log_softmax_backward: return softmax_family_cuda<SoftmaxBackwardPolicy, true>(c, plan);
    default: EMBER_FAIL("softmax_cuda_plan: op ", op_info(c.op).name, " is not of the softmax family");
  }
}

bool softmax_plan_supports(const KernelCall& c, rows::Plan plan) {
  if (plan == rows::Plan::automatic) return true;
  const RowGeometry g = geometry_of(c);
  if (g.B != 1) return false;  // the forced plans run innermost dims only
  if (plan != rows::Plan::block_cached) return true;
  const Tensor& x = c.in[0];
  const int dev = x.is_cuda() ? x.device().index : cuda::current_device();
  const bool backward = c.op == OpId::softmax_backward || c.op == OpId::log_softmax_backward;
  const size_t rows_in = backward ? SoftmaxBackwardPolicy<float, false>::kIn : SoftmaxPolicy<float, false>::kIn;
  return rows_in * static_cast<size_t>(g.C) * x.element_size() <= rows::row_cache_limit(dev);
}

void register_cuda_softmax(OpInfo& info) { register_family<SoftmaxPolicy, false>(info); }
void register_cuda_log_softmax(OpInfo& info) { register_family<SoftmaxPolicy, true>(info); }
void register_cuda_softmax_backward(OpInfo& info) { register_family<SoftmaxBackwardPolicy, false>(info); }
void register_cuda_log_softmax_backward(OpInfo& info) { register_family<SoftmaxBackwardPolicy, true>(info); }

}  // namespace ember
