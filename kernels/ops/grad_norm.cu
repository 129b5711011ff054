// total_norm and clip_by_total_norm on CUDA (see grad_norm.h for the formulas).
//
// Versions:
//   multi_tensor  total_norm: pass 1, one block per 64K-element chunk of any tensor of the list
//                 (multi-tensor tables, multi_tensor.cuh), each writes one f64 partial; pass 2, one
//                 block combines the partials in a fixed order and applies the root.
//                 Deterministic, no atomics, the result stays on the device.
//                 clip_by_total_norm: one block per chunk, coef computed by each thread from the
//                 norm in device memory.
// Memory bound: the norm reads every gradient once, the clip reads and writes it once.
// Napkin math: docs/perf.md ("Napkin math behind the kernels").
#include "core/cuda/device_guard.h"
#include "core/cuda/kernel.cuh"
#include "kernels/common/current_stream.cuh"
#include "kernels/common/multi_tensor.cuh"
#include "kernels/ops/copy.h"
#include "kernels/ops/grad_norm.h"
#include "kernels/registry.h"

namespace ember {

namespace {

using norm_detail::combine;

// Combines v over the block; the result is valid in thread 0. blockDim.x is a multiple of 32.
__device__ double block_combine(double v, int kind) {
  EMBER_SHARED(double[32], warps);
  const int lane = static_cast<int>(threadIdx.x % 32), warp = static_cast<int>(threadIdx.x / 32);
  EMBER_UNROLL
  for (int off = 16; off > 0; off >>= 1) v = combine(v, __shfl_down_sync(0xffffffffu, v, off), kind);
  if (lane == 0) warps[warp] = v;
  __syncthreads();
  const int nwarps = static_cast<int>(blockDim.x / 32);
  if (warp == 0) {
    v = lane < nwarps ? warps[lane] : 0.0;
    EMBER_UNROLL
    for (int off = 16; off > 0; off >>= 1) v = combine(v, __shfl_down_sync(0xffffffffu, v, off), kind);
  }
  return v;
}

template <class T>
__global__ void __launch_bounds__(mt::kThreads)
    norm_partials_kernel(const __grid_constant__ mt::Table<1> tab, double* __restrict__ partials, int kind, double p) {
  const mt::BlockWork w = mt::block_work(tab);
  const T* x = static_cast<const T*>(tab.ptr[0][w.t]);
  double acc = 0.0;  // the identity of both sum and max-of-absolute-values
  for (int64_t i = w.begin + threadIdx.x; i < w.end; i += blockDim.x)
    acc = combine(acc, norm_detail::term(convert<double, T>(x[i]), kind, p), kind);
  acc = block_combine(acc, kind);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

template <class Out>
__global__ void norm_finish_kernel(const double* __restrict__ partials, int64_t n, Out* __restrict__ out, int kind,
                                   double p) {
  double acc = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) acc = combine(acc, partials[i], kind);
  acc = block_combine(acc, kind);
  if (threadIdx.x == 0) *out = static_cast<Out>(norm_detail::finish(acc, kind, p));
}

void total_norm_cuda(const KernelCall& c) {
  const double p = c.attr<TotalNormAttrs>().norm_type;
  const int kind = norm_detail::kind_of(p);
  const Tensor& out = c.out[0];
  cuda::DeviceGuard guard(out.device().index);
  cudaStream_t stream = cuda::stream_for(out);
  std::vector<mt::Entry<1>> entries;
  for (const Tensor& t : c.in) entries.push_back({{t.data_ptr()}, t.numel(), nullptr});
  const int64_t nblocks = mt::total_chunks(entries);
  Tensor partials = empty({std::max<int64_t>(nblocks, 1)}, TensorOptions(DType::f64).device(out.device()));
  double* part = partials.data<double>();
  EMBER_DISPATCH_FLOAT(c.in[0].dtype(), "total_norm", [&] {
    mt::for_each_table<1>(entries, [&](const mt::Table<1>& tab, int nb, int64_t first) {
      cuda::launch(norm_partials_kernel<scalar_t>, nb, mt::kThreads, 0, stream, tab, part + first, kind, p);
    });
  });
  if (out.dtype() == DType::f64)
    cuda::launch(norm_finish_kernel<double>, 1, 1024, 0, stream, part, nblocks, out.data<double>(), kind, p);
  else cuda::launch(norm_finish_kernel<float>, 1, 1024, 0, stream, part, nblocks, out.data<float>(), kind, p);
}

template <class T, class N>
__global__ void __launch_bounds__(mt::kThreads)
    clip_kernel(const __grid_constant__ mt::Table<1> tab, const N* __restrict__ norm, double max_norm) {
  using A = acc_t<T>;
  const A coef = static_cast<A>(norm_detail::clip_coef<N>(*norm, max_norm));
  const mt::BlockWork w = mt::block_work(tab);
  T* x = static_cast<T*>(tab.ptr[0][w.t]);
  for (int64_t i = w.begin + threadIdx.x; i < w.end; i += blockDim.x) x[i] = convert<T, A>(convert<A, T>(x[i]) * coef);
}

void clip_cuda(const KernelCall& c) {
  if (c.in.size() < 2) return;
  const double max_norm = c.attr<ClipByNormAttrs>().max_norm;
  const Tensor& norm = c.in[0];
  cuda::DeviceGuard guard(norm.device().index);
  cudaStream_t stream = cuda::stream_for(norm);
  std::vector<mt::Entry<1>> entries;
  for (size_t i = 1; i < c.in.size(); ++i) entries.push_back({{c.in[i].data_ptr()}, c.in[i].numel(), nullptr});
  EMBER_DISPATCH_FLOAT(c.in[1].dtype(), "clip_by_total_norm", [&] {
    mt::for_each_table<1>(entries, [&](const mt::Table<1>& tab, int nb, int64_t) {
      if (norm.dtype() == DType::f64)
        cuda::launch(clip_kernel<scalar_t, double>, nb, mt::kThreads, 0, stream, tab, norm.data<double>(), max_norm);
      else cuda::launch(clip_kernel<scalar_t, float>, nb, mt::kThreads, 0, stream, tab, norm.data<float>(), max_norm);
    });
  });
}

}  // namespace

void register_cuda_total_norm(OpInfo& info) {
  info.add_variant({.name = "multi_tensor",
                    .device = DeviceType::cuda,
                    .fn = total_norm_cuda,
                    .dtypes = kFloatTypes,
                    .note = "per-chunk f64 partials, then one block combines them (deterministic)"});
}

void register_cuda_clip_by_total_norm(OpInfo& info) {
  info.add_variant({.name = "multi_tensor",
                    .device = DeviceType::cuda,
                    .fn = clip_cuda,
                    .dtypes = kFloatTypes,
                    .note = "one block per chunk; the coefficient is read from the norm on the device"});
}

}  // namespace ember
