// cast and copy on CUDA.
//
// Same-device conversions run the generic elementwise kernel (cuda_loops.cuh). Cross-device
// copies are cudaMemcpyAsync on the current stream of the CUDA side (device -> device: of the
// destination, ordered both ways against the source's current stream with events):
//  - host -> device from pinned memory is asynchronous; an event is recorded on the pinned block so
//    the caching host allocator does not hand it out again before the copy has read it;
//  - host -> device from pageable memory makes the driver stage the bytes (it may synchronise);
//    it is reported as a host sync in sync-debug mode;
//  - device -> host waits for the copy unless non_blocking and the destination is pinned.
#include "core/cuda/device_guard.h"
#include "core/runtime.h"
#include "kernels/common/cuda_loops.cuh"
#include "kernels/common/multi_tensor.cuh"
#include "kernels/ops/copy.h"
#include "kernels/registry.h"

namespace ember {

namespace {

template <class Out>
void convert_loop_cuda(const Tensor& dst, const Tensor& src) {
  ElementwiseLayout L = make_layout({&dst, &src});
  EMBER_DISPATCH_ALL(src.dtype(), "copy", [&] { gpu_map<Out, scalar_t>(L, {&dst, &src}, ConvertFn<Out, scalar_t>{}); });
}

void convert_cuda(const Tensor& dst, const Tensor& src) {
  EMBER_DISPATCH_ALL(dst.dtype(), "copy", [&] { convert_loop_cuda<scalar_t>(dst, src); });
}

void cast_cuda(const KernelCall& c) { convert_cuda(c.out[0], c.in[0]); }

// cast_many: one block per chunk of one tensor (kernels/common/multi_tensor.cuh); ptr[0] the
// source, ptr[1] the destination, both contiguous.
template <class Out, class In>
__global__ void __launch_bounds__(mt::kThreads) cast_many_kernel(const __grid_constant__ mt::Table<2> tab) {
  const mt::BlockWork w = mt::block_work(tab);
  const In* src = static_cast<const In*>(tab.ptr[0][w.t]);
  Out* dst = static_cast<Out*>(tab.ptr[1][w.t]);
  for (int64_t i = w.begin + threadIdx.x; i < w.end; i += blockDim.x) dst[i] = convert<Out, In>(src[i]);
}

// One launch per source dtype (autocast's calls have one) and per kMaxTensors tensors.
void cast_many_cuda(const KernelCall& c) {
  cuda::DeviceGuard guard(c.in[0].device().index);
  cudaStream_t stream = cuda::stream_for(c.in[0]);
  std::vector<bool> done(c.in.size(), false);
  for (size_t i = 0; i < c.in.size(); ++i) {
    if (done[i]) continue;
    const DType from = c.in[i].dtype();
    std::vector<mt::Entry<2>> entries;
    for (size_t j = i; j < c.in.size(); ++j) {
      if (done[j] || c.in[j].dtype() != from) continue;
      done[j] = true;
      entries.push_back({{c.in[j].data_ptr(), c.out[j].data_ptr()}, c.in[j].numel()});
    }
    EMBER_DISPATCH_FLOAT(c.out[0].dtype(), "cast_many", [&] {
      using Out = scalar_t;
      EMBER_DISPATCH_FLOAT(from, "cast_many", [&] {
        mt::for_each_table<2>(entries, [&](const mt::Table<2>& tab, int nblocks, int64_t) {
          cuda::launch(cast_many_kernel<Out, scalar_t>, nblocks, mt::kThreads, 0, stream, tab);
        });
      });
    });
  }
}

void copy_cuda(const KernelCall& c) {
  const Tensor& dst = c.in[0];
  const Tensor& src = c.in[1];
  bool non_blocking = c.attr<CopyAttrs>().non_blocking != 0;
  if (dst.device() == src.device()) {
    convert_cuda(dst, src);
    return;
  }
  size_t bytes = src.nbytes();
  if (bytes == 0) return;
  if (dst.is_cuda() && src.is_cuda()) {
    // Peer copy (several GPUs in one process), on the destination's current stream. That stream is
    // not ordered with the source device's work: it first waits (an event, no host sync) for the
    // work queued so far on the source's current stream, which wrote `src`. Afterwards the source's
    // stream waits for the copy in turn, so the source device cannot overwrite `src`, or reuse its
    // memory once freed (the caching allocator reuses a block in its stream's order), while the
    // copy still reads it.
    cuda::Stream dst_stream = cuda::current_stream(dst.device().index);
    cuda::Stream src_stream = cuda::current_stream(src.device().index);
    dst_stream.wait_stream(src_stream);
    EMBER_CUDA_CHECK(cudaMemcpyPeerAsync(dst.data_ptr(), dst.device().index, src.data_ptr(), src.device().index, bytes,
                                         static_cast<cudaStream_t>(dst_stream.handle())));
    src_stream.wait_stream(dst_stream);
    return;
  }
  if (dst.is_cuda()) {  // host -> device
    cuda::DeviceGuard guard(dst.device().index);
    cuda::Stream stream = cuda::current_stream(dst.device().index);
    bool pinned = src.is_pinned();
    if (!pinned) runtime::note_host_sync("host-to-device copy from pageable memory");
    EMBER_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), bytes, cudaMemcpyHostToDevice,
                                     static_cast<cudaStream_t>(stream.handle())));
    if (pinned) {
      cuda::record_pinned_use(src.data_ptr(), stream);
      if (!non_blocking) stream.synchronize();
    }
    return;
  }
  // device -> host
  cuda::DeviceGuard guard(src.device().index);
  cuda::Stream stream = cuda::current_stream(src.device().index);
  bool pinned = dst.is_pinned();
  EMBER_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), bytes, cudaMemcpyDeviceToHost,
                                   static_cast<cudaStream_t>(stream.handle())));
  if (pinned && non_blocking) {
    cuda::record_pinned_use(dst.data_ptr(), stream);
    return;
  }
  stream.synchronize();
}

}  // namespace

void register_cuda_cast(OpInfo& info) {
  info.add_variant(
      {.name = "cuda", .device = DeviceType::cuda, .fn = cast_cuda, .note = "generic vectorized elementwise kernel"});
}

void register_cuda_cast_many(OpInfo& info) {
  info.add_variant({.name = "cuda",
                    .device = DeviceType::cuda,
                    .fn = cast_many_cuda,
                    .note = "multi-tensor: one launch per source dtype, the table in the kernel arguments"});
}

void register_cuda_copy(OpInfo& info) {
  info.add_variant({.name = "cuda",
                    .device = DeviceType::cuda,
                    .fn = copy_cuda,
                    .note = "elementwise kernel on one device; cudaMemcpyAsync across devices"});
}

}  // namespace ember
