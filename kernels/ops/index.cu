// Indexing on CUDA. Bad indices are reported through the device error word (Note [device
// errors]): the kernel skips the element and records the op, and the next synchronisation throws.
//
// Versions:
//  index_select / gather: one thread per output element.
//  index_add / scatter_add:
//    ordered (default) - one thread per output element walks the indices in order: deterministic,
//                        O(K) work per element (fine for the sizes gradients of batching produce)
//    atomic            - the benchmark lab's (bench/lab/index_lab.cu): one thread per source element,
//                        atomicAdd, faster for large K by design, nondeterministic; no measurement
//                        shows where it wins yet (Note [library rule] in bench/lab/library_rule.h)
#include "core/cuda/device_guard.h"
#include "core/cuda/kernel.cuh"
#include "kernels/common/current_stream.cuh"
#include "kernels/common/grid_size.cuh"
#include "kernels/ops/index.h"
#include "kernels/ops/index_cuda.h"
#include "kernels/registry.h"

namespace ember {

namespace {

__device__ __forceinline__ void report(int* err, int code) { atomicCAS(err, 0, code); }

template <class T>
__device__ __forceinline__ void add_to(T& dst, T v) {
  dst = static_cast<T>(static_cast<acc_t<T>>(dst) + static_cast<acc_t<T>>(v));
}

template <class T, class I>
__global__ void index_select_kernel(const T* __restrict__ x, const I* __restrict__ idx, T* __restrict__ out, int64_t K,
                                    int64_t size, int64_t inner, int64_t n, int* err, int code) {
  EMBER_GRID_LOOP(e, n) {
    int64_t i = e % inner, ok = e / inner;
    int64_t k = ok % K, o = ok / K;
    int64_t j = static_cast<int64_t>(idx[k]);
    if (j < 0 || j >= size) {
      report(err, code);
      continue;
    }
    out[e] = x[(o * size + j) * inner + i];
  }
}

template <class T, class I>
__global__ void gather_kernel(const T* __restrict__ x, const I* __restrict__ idx, T* __restrict__ out, Dims dims, int d,
                              int64_t size, int64_t n, int* err, int code) {
  EMBER_GRID_LOOP(e, n) {
    int64_t j = static_cast<int64_t>(idx[e]);
    if (j < 0 || j >= size) {
      report(err, code);
      continue;
    }
    int64_t rem = e, off = 0;
    for (int k = dims.n - 1; k >= 0; --k) {
      int64_t c = rem % dims.index_shape[k];
      rem /= dims.index_shape[k];
      off += (k == d ? j : c) * dims.x_strides[k];
    }
    out[e] = x[off];
  }
}

template <class I>
__global__ void check_index_kernel(const I* __restrict__ idx, int64_t n, int64_t size, int* err, int code) {
  EMBER_GRID_LOOP(e, n) {
    int64_t j = static_cast<int64_t>(idx[e]);
    if (j < 0 || j >= size) report(err, code);
  }
}

template <class T, class I>
__global__ void index_add_ordered_kernel(const T* __restrict__ self, const I* __restrict__ idx,
                                         const T* __restrict__ src, T* __restrict__ out, int64_t K, int64_t size,
                                         int64_t inner, int64_t n) {
  EMBER_GRID_LOOP(e, n) {
    int64_t i = e % inner, oj = e / inner;
    int64_t j = oj % size, o = oj / size;
    acc_t<T> acc = static_cast<acc_t<T>>(self[e]);
    for (int64_t k = 0; k < K; ++k)
      if (static_cast<int64_t>(idx[k]) == j) acc += static_cast<acc_t<T>>(src[(o * K + k) * inner + i]);
    out[e] = static_cast<T>(acc);
  }
}

// scatter_add, ordered: thread per output element; walks the index positions that share its other
// coordinates (dims.index_shape bounds them) along dim d.
template <class T, class I>
__global__ void scatter_add_ordered_kernel(const T* __restrict__ self, const I* __restrict__ idx,
                                           const T* __restrict__ src, T* __restrict__ out, Dims out_dims,
                                           Dims index_dims, int d, int64_t n) {
  EMBER_GRID_LOOP(e, n) {
    // coordinates of e in the output (out_dims.index_shape holds the output shape here)
    int64_t coord[kMaxDims];
    int64_t rem = e;
    for (int k = out_dims.n - 1; k >= 0; --k) {
      coord[k] = rem % out_dims.index_shape[k];
      rem /= out_dims.index_shape[k];
    }
    acc_t<T> acc = static_cast<acc_t<T>>(self[e]);
    bool inside = true;
    for (int k = 0; k < index_dims.n; ++k)
      if (k != d && coord[k] >= index_dims.index_shape[k]) inside = false;
    if (inside) {
      // offset of (coord with dim d = 0) in the contiguous index/src tensors
      int64_t base = 0;
      for (int k = 0; k < index_dims.n; ++k) base += (k == d ? 0 : coord[k]) * index_dims.x_strides[k];
      int64_t step = index_dims.x_strides[d];
      for (int64_t r = 0; r < index_dims.index_shape[d]; ++r) {
        int64_t p = base + r * step;
        if (static_cast<int64_t>(idx[p]) == coord[d]) acc += static_cast<acc_t<T>>(src[p]);
      }
    }
    out[e] = static_cast<T>(acc);
  }
}

int code_of(OpId id) { return static_cast<int>(id) + 1; }

void index_select_cuda(const KernelCall& c) {
  const Tensor &x = c.in[0], &index = c.in[1];
  const Tensor& out = c.out[0];
  if (out.numel() == 0) return;
  int d = wrap_dim(c.attr<IndexAttrs>().dim, x.dim());
  Split s = split_at(x.shape(), d);
  cuda::DeviceGuard guard(x.device().index);
  int* err = cuda::device_error_word(x.device().index);
  unsigned grid = cuda::grid_for(out.numel(), 256, x.device().index);
  EMBER_DISPATCH_ALL(x.dtype(), "index_select", [&] {
    EMBER_DISPATCH_INDEX(index.dtype(), "index_select", [&] {
      cuda::launch(index_select_kernel<scalar_t, index_t>, grid, 256, 0, cuda::stream_for(x),
                   static_cast<const scalar_t*>(x.data_ptr()), static_cast<const index_t*>(index.data_ptr()),
                   static_cast<scalar_t*>(out.data_ptr()), index.numel(), s.size, s.inner, out.numel(), err,
                   code_of(OpId::index_select));
    });
  });
}

void gather_cuda(const KernelCall& c) {
  const Tensor &x = c.in[0], &index = c.in[1];
  const Tensor& out = c.out[0];
  if (out.numel() == 0) return;
  int d = wrap_dim(c.attr<IndexAttrs>().dim, std::max(x.dim(), 1));
  int64_t size = x.dim() > 0 ? x.shape()[d] : 1;
  cuda::DeviceGuard guard(x.device().index);
  int* err = cuda::device_error_word(x.device().index);
  unsigned grid = cuda::grid_for(out.numel(), 256, x.device().index);
  EMBER_DISPATCH_ALL(x.dtype(), "gather", [&] {
    EMBER_DISPATCH_INDEX(index.dtype(), "gather", [&] {
      cuda::launch(gather_kernel<scalar_t, index_t>, grid, 256, 0, cuda::stream_for(x),
                   static_cast<const scalar_t*>(x.data_ptr()), static_cast<const index_t*>(index.data_ptr()),
                   static_cast<scalar_t*>(out.data_ptr()), dims_of(index, x), d, size, out.numel(), err,
                   code_of(OpId::gather));
    });
  });
}

template <class I>
void check_indices(const Tensor& index, int64_t size, OpId op) {
  if (index.numel() == 0) return;
  cuda::launch(check_index_kernel<I>, cuda::grid_for(index.numel(), 256, index.device().index), 256, 0,
               cuda::stream_for(index), static_cast<const I*>(index.data_ptr()), index.numel(), size,
               cuda::device_error_word(index.device().index), code_of(op));
}

void index_add_cuda(const KernelCall& c) {
  const Tensor &self = c.in[0], &index = c.in[1], &src = c.in[2];
  const Tensor& out = c.out[0];
  if (out.numel() == 0) return;
  int d = wrap_dim(c.attr<IndexAttrs>().dim, self.dim());
  Split s = split_at(self.shape(), d);
  cuda::DeviceGuard guard(self.device().index);
  cudaStream_t stream = cuda::stream_for(self);
  int device = self.device().index;
  EMBER_DISPATCH_INDEX(index.dtype(), "index_add", [&] {
    check_indices<index_t>(index, s.size, OpId::index_add);
    EMBER_DISPATCH_NUMERIC(self.dtype(), "index_add", [&] {
      cuda::launch(index_add_ordered_kernel<scalar_t, index_t>, cuda::grid_for(out.numel(), 256, device), 256, 0,
                   stream, static_cast<const scalar_t*>(self.data_ptr()), static_cast<const index_t*>(index.data_ptr()),
                   static_cast<const scalar_t*>(src.data_ptr()), static_cast<scalar_t*>(out.data_ptr()), index.numel(),
                   s.size, s.inner, out.numel());
    });
  });
}

void scatter_add_cuda(const KernelCall& c) {
  const Tensor &self = c.in[0], &index = c.in[1], &src = c.in[2];
  const Tensor& out = c.out[0];
  if (out.numel() == 0) return;
  int d = wrap_dim(c.attr<IndexAttrs>().dim, std::max(self.dim(), 1));
  int64_t size = self.dim() > 0 ? self.shape()[d] : 1;
  cuda::DeviceGuard guard(self.device().index);
  cudaStream_t stream = cuda::stream_for(self);
  int device = self.device().index;
  EMBER_DISPATCH_INDEX(index.dtype(), "scatter_add", [&] {
    check_indices<index_t>(index, size, OpId::scatter_add);
    Dims od{};
    od.n = out.dim();
    for (int k = 0; k < od.n; ++k) od.index_shape[k] = out.shape()[k];
    Dims id = dims_of(index, index);  // index's own (contiguous) strides, shared by src
    EMBER_DISPATCH_NUMERIC(self.dtype(), "scatter_add", [&] {
      cuda::launch(scatter_add_ordered_kernel<scalar_t, index_t>, cuda::grid_for(out.numel(), 256, device), 256, 0,
                   stream, static_cast<const scalar_t*>(self.data_ptr()), static_cast<const index_t*>(index.data_ptr()),
                   static_cast<const scalar_t*>(src.data_ptr()), static_cast<scalar_t*>(out.data_ptr()), od, id, d,
                   out.numel());
    });
  });
}

}  // namespace

void check_index_bounds_cuda(const Tensor& index, int64_t size, OpId op) {
  EMBER_DISPATCH_INDEX(index.dtype(), op_info(op).name, [&] { check_indices<index_t>(index, size, op); });
}

void register_cuda_index_select(OpInfo& info) {
  info.add_variant(
      {.name = "cuda", .device = DeviceType::cuda, .fn = index_select_cuda, .note = "thread per output element"});
}
void register_cuda_gather(OpInfo& info) {
  info.add_variant(
      {.name = "cuda", .device = DeviceType::cuda, .fn = gather_cuda, .note = "thread per output element"});
}
void register_cuda_index_add(OpInfo& info) {
  info.add_variant({.name = "ordered",
                    .device = DeviceType::cuda,
                    .fn = index_add_cuda,
                    .dtypes = kNumericTypes,
                    .note = "thread per output element, indices in order (deterministic)"});
}
void register_cuda_scatter_add(OpInfo& info) {
  info.add_variant({.name = "ordered",
                    .device = DeviceType::cuda,
                    .fn = scatter_add_cuda,
                    .dtypes = kNumericTypes,
                    .note = "thread per output element, indices in order (deterministic)"});
}

}  // namespace ember
