// sgd_step and adam_step on CUDA: multi-tensor kernels (kernels/common/multi_tensor.cuh).
//
// Versions:
//   multi_tensor  one block per 64K-element chunk, grid-stride within the chunk, the element math
//                 is the EMBER_HD functor the CPU loop runs (optim.h); every parameter of a call is
//                 updated by one launch per table (one launch for up to 32 tensors).
// Launch sequence of one step, all on the params' current stream, no host sync, no H2D copy:
//   1. increment_steps: step += 1 for every step counter (skipped when *found_inf != 0)
//   2. the update kernel(s): read hyper (f64 on the device), found_inf, inv_scale and the step
//      counter of their tensor; return at once when *found_inf != 0.
// Memory bound: a step reads the parameters, gradients and state once and writes the parameters and
// state once.
// Napkin math: docs/perf.md ("Napkin math behind the kernels").
#include "core/cuda/device_guard.h"
#include "core/cuda/kernel.cuh"
#include "kernels/common/current_stream.cuh"
#include "kernels/common/multi_tensor.cuh"
#include "kernels/ops/optim.h"
#include "kernels/registry.h"

namespace ember {

namespace {

using namespace optim_layout;

__global__ void increment_steps_kernel(const __grid_constant__ mt::StepTable tab, const float* found_inf) {
  if (found_inf != nullptr && *found_inf != 0.0f) return;
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < tab.n) *tab.step[i] += 1.0f;
}

void increment_steps(const std::vector<float*>& steps, const float* found_inf, cudaStream_t stream) {
  mt::StepTable tab;
  tab.n = 0;
  for (size_t i = 0; i < steps.size(); ++i) {
    tab.step[tab.n++] = steps[i];
    if (tab.n == mt::kMaxSteps || i + 1 == steps.size()) {
      const int threads = 128;
      cuda::launch(increment_steps_kernel, (tab.n + threads - 1) / threads, threads, 0, stream, tab, found_inf);
      tab.n = 0;
    }
  }
}

// The frame of every update kernel: nothing when GradScaler found an inf or NaN (*found_inf != 0:
// the step is skipped); else update = make(w) for this block's chunk w, then update(i) for each
// element i of the chunk, strided over the block's threads.
template <int Depth, class Make>
__device__ __forceinline__ void update_chunk(const mt::Table<Depth>& tab, const float* found_inf, const Make& make) {
  if (found_inf != nullptr && *found_inf != 0.0f) return;
  const mt::BlockWork w = mt::block_work(tab);
  const auto update = make(w);
  for (int64_t i = w.begin + threadIdx.x; i < w.end; i += blockDim.x) update(i);
}

template <class T>
__global__ void __launch_bounds__(mt::kThreads)
    sgd_kernel(const __grid_constant__ mt::Table<3> tab, const double* __restrict__ hyper,
               const float* __restrict__ found_inf, const float* __restrict__ inv_scale, SgdStepAttrs a) {
  update_chunk(tab, found_inf, [&](const mt::BlockWork& w) {
    const float step = tab.step[w.t] != nullptr ? *tab.step[w.t] : 0.0f;
    const auto s =
        make_sgd_scalars<acc_t<T>>(hyper, inv_scale != nullptr ? static_cast<double>(*inv_scale) : 1.0, step, a);
    T* p = static_cast<T*>(tab.ptr[0][w.t]);
    const T* g = static_cast<const T*>(tab.ptr[1][w.t]);
    T* buf = static_cast<T*>(tab.ptr[2][w.t]);
    const bool scale = inv_scale != nullptr;
    return [=](int64_t i) { sgd_update(p, g, buf, i, s, scale); };
  });
}

template <class T>
__global__ void __launch_bounds__(mt::kThreads)
    adam_kernel(const __grid_constant__ mt::Table<5> tab, const double* __restrict__ hyper,
                const float* __restrict__ found_inf, const float* __restrict__ inv_scale, AdamStepAttrs a) {
  update_chunk(tab, found_inf, [&](const mt::BlockWork& w) {
    const auto s = make_adam_scalars<acc_t<T>>(hyper, inv_scale != nullptr ? static_cast<double>(*inv_scale) : 1.0,
                                               *tab.step[w.t], a);
    T* p = static_cast<T*>(tab.ptr[0][w.t]);
    const T* g = static_cast<const T*>(tab.ptr[1][w.t]);
    T* m = static_cast<T*>(tab.ptr[2][w.t]);
    T* v = static_cast<T*>(tab.ptr[3][w.t]);
    T* vmax = static_cast<T*>(tab.ptr[4][w.t]);
    const bool scale = inv_scale != nullptr;
    return [=](int64_t i) { adam_update(p, g, m, v, vmax, i, s, scale); };
  });
}

const float* opt_f32(const Tensor& t) { return t.defined() ? t.data<float>() : nullptr; }

// What every fused optimizer step reads besides its tensor lists, on the hyperparameters' device.
struct StepInputs {
  const Tensor& hyper;
  cuda::DeviceGuard guard;
  cudaStream_t stream;
  const float* found_inf;  // GradScaler's flag: nullptr, or skip the step when set
  const float* inv_scale;  // nullptr, or unscale the gradients on the fly
  explicit StepInputs(const KernelCall& c)
      : hyper(c.in[kHyper]),
        guard(hyper.device().index),
        stream(cuda::stream_for(hyper)),
        found_inf(opt_f32(c.in[kFoundInf])),
        inv_scale(opt_f32(c.in[kInvScale])) {}
};

void* in_ptr(const KernelCall& c, int64_t n, int list, int64_t i) {
  return c.in[static_cast<size_t>(kFirstTensor + list * n + i)].data_ptr();
}

void sgd_cuda(const KernelCall& c) {
  const auto& a = c.attr<SgdStepAttrs>();
  if (a.n == 0) return;
  const StepInputs in(c);
  std::vector<mt::Entry<3>> entries(static_cast<size_t>(a.n));
  std::vector<float*> steps;
  for (int64_t i = 0; i < a.n; ++i) {
    auto& e = entries[static_cast<size_t>(i)];
    e.ptr = {in_ptr(c, a.n, 0, i), in_ptr(c, a.n, 1, i), a.momentum_buffers ? in_ptr(c, a.n, 2, i) : nullptr};
    e.numel = c.in[static_cast<size_t>(kFirstTensor + i)].numel();
    if (a.momentum_buffers) {
      e.step = static_cast<float*>(in_ptr(c, a.n, 3, i));
      steps.push_back(e.step);
    }
  }
  if (!steps.empty()) increment_steps(steps, in.found_inf, in.stream);
  EMBER_DISPATCH_FLOAT(c.in[kFirstTensor].dtype(), "sgd_step", [&] {
    mt::for_each_table<3>(entries, [&](const mt::Table<3>& tab, int nblocks, int64_t) {
      cuda::launch(sgd_kernel<scalar_t>, nblocks, mt::kThreads, 0, in.stream, tab, in.hyper.data<double>(),
                   in.found_inf, in.inv_scale, a);
    });
  });
}

void adam_cuda(const KernelCall& c) {
  const auto& a = c.attr<AdamStepAttrs>();
  if (a.n == 0) return;
  const StepInputs in(c);
  const int step_list = a.amsgrad ? 5 : 4;
  std::vector<mt::Entry<5>> entries(static_cast<size_t>(a.n));
  std::vector<float*> steps;
  for (int64_t i = 0; i < a.n; ++i) {
    auto& e = entries[static_cast<size_t>(i)];
    e.ptr = {in_ptr(c, a.n, 0, i), in_ptr(c, a.n, 1, i), in_ptr(c, a.n, 2, i), in_ptr(c, a.n, 3, i),
             a.amsgrad ? in_ptr(c, a.n, 4, i) : nullptr};
    e.numel = c.in[static_cast<size_t>(kFirstTensor + i)].numel();
    e.step = static_cast<float*>(in_ptr(c, a.n, step_list, i));
    steps.push_back(e.step);
  }
  increment_steps(steps, in.found_inf, in.stream);
  EMBER_DISPATCH_FLOAT(c.in[kFirstTensor].dtype(), "adam_step", [&] {
    mt::for_each_table<5>(entries, [&](const mt::Table<5>& tab, int nblocks, int64_t) {
      cuda::launch(adam_kernel<scalar_t>, nblocks, mt::kThreads, 0, in.stream, tab, in.hyper.data<double>(),
                   in.found_inf, in.inv_scale, a);
    });
  });
}

}  // namespace

void register_cuda_sgd_step(OpInfo& info) {
  info.add_variant({.name = "multi_tensor",
                    .device = DeviceType::cuda,
                    .fn = sgd_cuda,
                    .dtypes = kFloatTypes,
                    .note = "one launch per table of 32 tensors / 256 chunks; hyperparameters read from the device"});
}

void register_cuda_adam_step(OpInfo& info) {
  info.add_variant({.name = "multi_tensor",
                    .device = DeviceType::cuda,
                    .fn = adam_cuda,
                    .dtypes = kFloatTypes,
                    .note = "one launch per table of 32 tensors / 256 chunks; step counters and hyperparameters "
                            "on the device"});
}

}  // namespace ember
