// fill, zero_many and arange on CUDA. fill is the generic elementwise kernel with no inputs (one
// 16-byte store per thread per iteration when contiguous); zero_many clears several tensors' bytes
// in one multi-tensor launch; arange writes start + i*step.
#include "core/cuda/device_guard.h"
#include "core/cuda/kernel.cuh"
#include "kernels/common/aligned_vec.cuh"
#include "kernels/common/cuda_loops.cuh"
#include "kernels/common/current_stream.cuh"
#include "kernels/common/grid_size.cuh"
#include "kernels/common/multi_tensor.cuh"
#include "kernels/ops/fill.h"
#include "kernels/registry.h"

namespace ember {

namespace {

void fill_cuda(const KernelCall& c) {
  const Tensor& t = c.out[0];
  double v = c.attr<ScalarAttrs>().value;
  ElementwiseLayout L = make_layout({&t});
  EMBER_DISPATCH_ALL(t.dtype(), "fill",
                     [&] { gpu_map<scalar_t>(L, {&t}, FillFn<scalar_t>{convert<scalar_t, double>(v)}); });
}

// zero_many: one block per chunk of one tensor's bytes (kernels/common/multi_tensor.cuh, with
// numel counting bytes). A chunk starts a multiple of 2048 bytes into its tensor, so where the
// tensor's base is 16-byte aligned (the allocator's blocks are) its bytes go as whole 16-byte
// stores, with the chunk's last few bytes one by one; a misaligned view is cleared byte by byte.
__global__ void __launch_bounds__(mt::kThreads) zero_many_kernel(const __grid_constant__ mt::Table<1> tab) {
  const mt::BlockWork w = mt::block_work(tab);
  auto* base = static_cast<unsigned char*>(tab.ptr[0][w.t]);
  int64_t rest = w.begin;  // the first byte the vector stores leave
  if (reinterpret_cast<uintptr_t>(base) % 16 == 0) {
    using V = detail::AlignedVec<uint32_t, 4>;
    const int64_t vecs = (w.end - w.begin) / 16;
    V* dst = reinterpret_cast<V*>(base + w.begin);
    const V zero{};
    for (int64_t k = threadIdx.x; k < vecs; k += blockDim.x) dst[k] = zero;
    rest = w.begin + vecs * 16;
  }
  for (int64_t k = rest + threadIdx.x; k < w.end; k += blockDim.x) base[k] = 0;
}

// One launch per mt::kMaxTensors tensors.
void zero_many_cuda(const KernelCall& c) {
  if (c.out.empty()) return;
  cuda::DeviceGuard guard(c.out[0].device().index);
  cudaStream_t stream = cuda::stream_for(c.out[0]);
  std::vector<mt::Entry<1>> entries;
  for (const Tensor& t : c.out) entries.push_back({{t.data_ptr()}, static_cast<int64_t>(t.nbytes())});
  mt::for_each_table<1>(entries, [&](const mt::Table<1>& tab, int nblocks, int64_t) {
    cuda::launch(zero_many_kernel, nblocks, mt::kThreads, 0, stream, tab);
  });
}

template <class T>
__global__ void arange_kernel(T* out, int64_t n, double start, double step) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = convert<T, double>(start + static_cast<double>(i) * step);
}

void arange_cuda(const KernelCall& c) {
  const Tensor& t = c.out[0];
  if (t.numel() == 0) return;
  const ArangeAttrs& a = c.attr<ArangeAttrs>();
  cuda::DeviceGuard guard(t.device().index);
  EMBER_DISPATCH_NUMERIC(t.dtype(), "arange", [&] {
    cuda::launch(arange_kernel<scalar_t>, cuda::grid_for(t.numel(), 256, t.device().index), 256, 0, cuda::stream_for(t),
                 static_cast<scalar_t*>(t.data_ptr()), t.numel(), a.start, a.step);
  });
}

}  // namespace

void register_cuda_fill(OpInfo& info) {
  info.add_variant(
      {.name = "cuda", .device = DeviceType::cuda, .fn = fill_cuda, .note = "generic vectorized elementwise kernel"});
}

void register_cuda_zero_many(OpInfo& info) {
  info.add_variant({.name = "multi_tensor",
                    .device = DeviceType::cuda,
                    .fn = zero_many_cuda,
                    .note = "one launch per 32 tensors, 16-byte stores, table in kernel arguments"});
}

void register_cuda_arange(OpInfo& info) {
  info.add_variant({.name = "cuda",
                    .device = DeviceType::cuda,
                    .fn = arange_cuda,
                    .dtypes = kNumericTypes,
                    .note = "grid-stride loop"});
}

}  // namespace ember
