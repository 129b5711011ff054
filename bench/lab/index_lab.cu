// index_add's and scatter_add's atomic variants: one thread per source element, atomicAdd into the
// output (f32/f64). Faster than the library's `ordered` kernels for many indices per output element
// by design, but nondeterministic (the sum order varies between runs), and no GPU measurement shows
// where it wins yet; so a lab variant (Note [lab variants] in kernels/lab_variants.h, Note [library
// rule] in bench/lab/library_rule.h), compared with `ordered` by bench_ops and the parity tests. A
// measurement in bench/results/ that it wins a case would bring it back into kernels/ops/index.cu.
// Bad indices are skipped here and reported by the library's bounds check (Note [device errors]).
#include "bench/lab/lab.h"

#include "core/cuda/device_guard.h"
#include "core/cuda/kernel.cuh"
#include "kernels/common/current_stream.cuh"
#include "kernels/common/grid_size.cuh"
#include "kernels/lab_variants.h"
#include "kernels/ops/index.h"
#include "kernels/ops/index_cuda.h"
#include "kernels/registry.h"

namespace ember {

namespace {

template <class T, class I>
__global__ void index_add_atomic_kernel(const I* __restrict__ idx, const T* __restrict__ src, T* __restrict__ out,
                                        int64_t K, int64_t size, int64_t inner, int64_t n) {
  EMBER_GRID_LOOP(e, n) {
    int64_t i = e % inner, ok = e / inner;
    int64_t k = ok % K, o = ok / K;
    int64_t j = static_cast<int64_t>(idx[k]);
    if (j < 0 || j >= size) continue;  // reported by the check kernel
    atomicAdd(out + (o * size + j) * inner + i, src[e]);
  }
}

template <class T, class I>
__global__ void scatter_add_atomic_kernel(const I* __restrict__ idx, const T* __restrict__ src, T* __restrict__ out,
                                          Dims dims, int d, int64_t size, int64_t n) {
  EMBER_GRID_LOOP(e, n) {
    int64_t j = static_cast<int64_t>(idx[e]);
    if (j < 0 || j >= size) continue;  // reported by the check kernel
    int64_t rem = e, off = 0;
    for (int k = dims.n - 1; k >= 0; --k) {
      int64_t c = rem % dims.index_shape[k];
      rem /= dims.index_shape[k];
      off += (k == d ? j : c) * dims.x_strides[k];
    }
    atomicAdd(out + off, src[e]);
  }
}

// out = self, then the atomic adds; f32/f64 (the variants' dtypes).
template <class Launch>
void copy_then_add(const KernelCall& c, const char* op, Launch&& launch) {
  const Tensor &self = c.in[0], &src = c.in[2];
  const Tensor& out = c.out[0];
  cudaStream_t stream = cuda::stream_for(self);
  EMBER_CUDA_CHECK(cudaMemcpyAsync(out.data_ptr(), self.data_ptr(), self.nbytes(), cudaMemcpyDeviceToDevice, stream));
  if (src.numel() == 0) return;
  EMBER_DISPATCH_INDEX(c.in[1].dtype(), op, [&] {
    switch (self.dtype()) {
      case DType::f32: launch.template operator()<float, index_t>(stream); break;
      case DType::f64: launch.template operator()<double, index_t>(stream); break;
      default: EMBER_FAIL(op, " atomic: f32/f64 only");
    }
  });
}

void index_add_atomic(const KernelCall& c) {
  const Tensor &self = c.in[0], &index = c.in[1], &src = c.in[2];
  const Tensor& out = c.out[0];
  if (out.numel() == 0) return;
  const int d = wrap_dim(c.attr<IndexAttrs>().dim, self.dim());
  const Split s = split_at(self.shape(), d);
  cuda::DeviceGuard guard(self.device().index);
  check_index_bounds_cuda(index, s.size, OpId::index_add);
  const int device = self.device().index;
  copy_then_add(c, "index_add", [&]<class T, class I>(cudaStream_t stream) {
    cuda::launch(index_add_atomic_kernel<T, I>, cuda::grid_for(src.numel(), 256, device), 256, 0, stream,
                 static_cast<const I*>(index.data_ptr()), static_cast<const T*>(src.data_ptr()),
                 static_cast<T*>(out.data_ptr()), index.numel(), s.size, s.inner, src.numel());
  });
}

void scatter_add_atomic(const KernelCall& c) {
  const Tensor &self = c.in[0], &index = c.in[1], &src = c.in[2];
  const Tensor& out = c.out[0];
  if (out.numel() == 0) return;
  const int d = wrap_dim(c.attr<IndexAttrs>().dim, std::max(self.dim(), 1));
  const int64_t size = self.dim() > 0 ? self.shape()[d] : 1;
  cuda::DeviceGuard guard(self.device().index);
  check_index_bounds_cuda(index, size, OpId::scatter_add);
  const int device = self.device().index;
  copy_then_add(c, "scatter_add", [&]<class T, class I>(cudaStream_t stream) {
    cuda::launch(scatter_add_atomic_kernel<T, I>, cuda::grid_for(src.numel(), 256, device), 256, 0, stream,
                 static_cast<const I*>(index.data_ptr()), static_cast<const T*>(src.data_ptr()),
                 static_cast<T*>(out.data_ptr()), dims_of(index, out), d, size, src.numel());
  });
}

}  // namespace

void register_lab_index() {
  add_lab_variant(OpId::index_add, {.name = "atomic",
                                    .device = DeviceType::cuda,
                                    .fn = index_add_atomic,
                                    .dtypes = DTypeSet{DType::f32, DType::f64},
                                    .flags = kReference | kNondeterministic,
                                    .note = "thread per source element, atomicAdd"});
  add_lab_variant(OpId::scatter_add, {.name = "atomic",
                                      .device = DeviceType::cuda,
                                      .fn = scatter_add_atomic,
                                      .dtypes = DTypeSet{DType::f32, DType::f64},
                                      .flags = kReference | kNondeterministic,
                                      .note = "thread per source element, atomicAdd"});
}

}  // namespace ember
