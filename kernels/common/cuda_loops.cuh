// The generic CUDA elementwise kernel: the counterpart of cpu_loops.h.
//
//   gpu_map<Out, In...>(layout, {out, in...}, f)
//
// Two kernels, chosen at launch:
//  - contiguous and 16-byte aligned: each thread moves 16 bytes per operand per iteration
//    (float4 for f32, 8 halves for f16) in a grid-stride loop; the tail (< VEC elements) is done
//    scalar. This loop is bandwidth-bound, not instruction-bound.
//  - anything else (strided, broadcast, misaligned): one element per thread per iteration with the
//    offsets computed from the layout's sizes and byte strides (32-bit index math when it fits).
// f must be a __host__ __device__ functor (or an extended __device__ lambda).
// Napkin math: docs/perf.md ("Napkin math behind the kernels").
#pragma once

#include <cuda/std/tuple>

#include <array>
#include <cstdint>
#include <utility>

#include "core/cuda/device_guard.h"
#include "core/cuda/kernel.cuh"
#include "kernels/common/aligned_vec.cuh"
#include "kernels/common/current_stream.cuh"
#include "kernels/common/grid_size.cuh"
#include "kernels/common/layout.h"

namespace ember {

namespace detail {

template <int N>
struct OffsetCalc {
  int ndim;
  int64_t sizes[kMaxDims];
  int64_t strides[N][kMaxDims];  // bytes

  template <class Index>
  __device__ __forceinline__ void get(Index linear, int64_t (&off)[N]) const {
    EMBER_UNROLL
    for (int k = 0; k < N; ++k) off[k] = 0;
    for (int d = ndim - 1; d >= 0; --d) {
      Index size = static_cast<Index>(sizes[d]);
      Index i = linear % size;
      linear /= size;
      EMBER_UNROLL
      for (int k = 0; k < N; ++k) off[k] += static_cast<int64_t>(i) * strides[k][d];
    }
  }
};

template <int N>
struct InPtrs {
  const char* p[N > 0 ? N : 1];
};

// (__global__ templates may have one parameter pack, last; the index_sequence expansions live in
// these __device__ helpers.)
template <int VEC, class Out, class F, class... Ins, size_t... I>
__device__ __forceinline__ void vec_step(const F& f, Out* __restrict__ out, const InPtrs<sizeof...(Ins)>& in, int64_t i,
                                         std::index_sequence<I...>) {
  // one 16-byte (or narrower) load per input, then VEC independent evaluations
  ::cuda::std::tuple<AlignedVec<Ins, VEC>...> loaded{
      *reinterpret_cast<const AlignedVec<Ins, VEC>*>(reinterpret_cast<const Ins*>(in.p[I]) + i)...};
  AlignedVec<Out, VEC> r;
  EMBER_UNROLL
  for (int j = 0; j < VEC; ++j) r.v[j] = static_cast<Out>(f(::cuda::std::get<I>(loaded).v[j]...));
  *reinterpret_cast<AlignedVec<Out, VEC>*>(out + i) = r;
}

template <class Out, class F, class... Ins, size_t... I>
__device__ __forceinline__ void scalar_step(const F& f, Out* out, const InPtrs<sizeof...(Ins)>& in, int64_t i,
                                            std::index_sequence<I...>) {
  out[i] = static_cast<Out>(f(reinterpret_cast<const Ins*>(in.p[I])[i]...));
}

template <int N, class Out, class F, class... Ins, size_t... I>
__device__ __forceinline__ void strided_step(const F& f, char* out, const InPtrs<sizeof...(Ins)>& in,
                                             const int64_t (&off)[N], std::index_sequence<I...>) {
  *reinterpret_cast<Out*>(out + off[0]) = static_cast<Out>(f(*reinterpret_cast<const Ins*>(in.p[I] + off[I + 1])...));
}

template <int VEC, class Out, class F, class... Ins>
__global__ void elementwise_vec_kernel(int64_t n, F f, Out* __restrict__ out, InPtrs<sizeof...(Ins)> in) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x * VEC;
  int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * VEC;
  for (; i + VEC <= n; i += step) vec_step<VEC, Out, F, Ins...>(f, out, in, i, std::index_sequence_for<Ins...>{});
  // tail: the last n % VEC elements, one per thread of the first block
  int64_t tail = n - n % VEC;
  if (blockIdx.x == 0 && tail + threadIdx.x < n)
    scalar_step<Out, F, Ins...>(f, out, in, tail + threadIdx.x, std::index_sequence_for<Ins...>{});
}

template <class Index, class Out, class F, class... Ins>
__global__ void elementwise_strided_kernel(Index n, F f, OffsetCalc<1 + sizeof...(Ins)> calc, char* out,
                                           InPtrs<sizeof...(Ins)> in) {
  const Index step = static_cast<Index>(gridDim.x) * blockDim.x;
  for (Index i = static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    int64_t off[1 + sizeof...(Ins)];
    calc.get(i, off);
    strided_step<1 + sizeof...(Ins), Out, F, Ins...>(f, out, in, off, std::index_sequence_for<Ins...>{});
  }
}

template <class... Ts>
constexpr int max_size() {
  int m = 1;
  ((m = static_cast<int>(sizeof(Ts)) > m ? static_cast<int>(sizeof(Ts)) : m), ...);
  return m;
}

}  // namespace detail

template <class Out, class... Ins, class F>
void gpu_map(const ElementwiseLayout& L, std::array<const Tensor*, 1 + sizeof...(Ins)> operands, const F& f) {
  constexpr int N = 1 + sizeof...(Ins);
  if (L.numel == 0) return;
  const Tensor& out_t = *operands[0];
  cuda::DeviceGuard guard(out_t.device().index);
  cudaStream_t stream = cuda::stream_for(out_t);
  const int device = out_t.device().index;
  constexpr int kThreads = 256;

  bool aligned = true;
  for (int k = 0; k < N; ++k) aligned = aligned && (reinterpret_cast<uintptr_t>(operands[k]->data_ptr()) % 16 == 0);
  detail::InPtrs<N - 1> in{};
  for (int k = 1; k < N; ++k) in.p[k - 1] = static_cast<const char*>(operands[k]->data_ptr());
  if (L.contiguous() && aligned) {
    constexpr int VEC = 16 / detail::max_size<Out, Ins...>() > 0 ? 16 / detail::max_size<Out, Ins...>() : 1;
    unsigned grid = cuda::grid_for((L.numel + VEC - 1) / VEC, kThreads, device);
    cuda::launch(detail::elementwise_vec_kernel<VEC, Out, F, Ins...>, grid, kThreads, 0, stream, L.numel, f,
                 static_cast<Out*>(operands[0]->data_ptr()), in);
    return;
  }

  detail::OffsetCalc<N> calc{};
  calc.ndim = L.ndim;
  for (int d = 0; d < L.ndim; ++d) {
    calc.sizes[d] = L.sizes[d];
    for (int k = 0; k < N; ++k)
      calc.strides[k][d] = L.strides[k][d] * static_cast<int64_t>(operands[k]->element_size());
  }
  char* out = static_cast<char*>(operands[0]->data_ptr());
  unsigned grid = cuda::grid_for(L.numel, kThreads, device);
  if (L.numel <= INT32_MAX) {
    cuda::launch(detail::elementwise_strided_kernel<uint32_t, Out, F, Ins...>, grid, kThreads, 0, stream,
                 static_cast<uint32_t>(L.numel), f, calc, out, in);
  } else {
    cuda::launch(detail::elementwise_strided_kernel<int64_t, Out, F, Ins...>, grid, kThreads, 0, stream, L.numel, f,
                 calc, out, in);
  }
}

}  // namespace ember
