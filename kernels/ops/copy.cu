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

void register_cuda_copy(OpInfo& info) {
  info.add_variant({.name = "cuda",
                    .device = DeviceType::cuda,
                    .fn = copy_cuda,
                    .note = "elementwise kernel on one device; cudaMemcpyAsync across devices"});
}

}  // namespace ember
