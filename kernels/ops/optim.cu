// sgd_step and adam_step on CUDA: multi-tensor kernels (kernels/common/multi_tensor.cuh).
//
// Versions:
//   multi_tensor  one block per chunk (2K-64K elements, sized to the call: Note [multi-tensor
//                 chunks] in multi_tensor.cuh), a block-stride loop within the chunk, the element
//                 math is the EMBER_HD functor the CPU loop runs (optim.h); every parameter of a
//                 call is updated by one launch per table (one launch for up to 32 tensors).
// Launch sequence of one step, all on the params' current stream, no host sync, no H2D copy:
//   with a ticket (the optimizers pass one) and no empty tensor: the update kernel(s) alone. They
//      read hyper (f64 on the device), found_inf, inv_scale, clip_norm (Note [clipping folded
//      into the step]: clipping costs no launch of its own) and the old step count of their
//      tensor, update with count + 1, and the last block to finish advances the counters
//      (Note [optimizer step counters]); all of it is skipped when *found_inf != 0.
//   else: 1. increment_steps: step += 1 for every step counter (skipped when *found_inf != 0)
//         2. the update kernel(s), reading the advanced count.
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

// Note [optimizer step counters]: with a ticket, one launch both updates and counts. Thread 0 of
// every block reads its tensor's step counter before the block updates (and the update uses
// count + 1); when done it takes a ticket, and the block that takes the last one (gridDim.x - 1)
// knows every other block has read its counter already, so it alone adds 1 to each counter of the
// table (one thread a counter) and puts the ticket back to 0 for the next launch on this stream. A
// skipped step (found_inf) takes no ticket and counts nothing, in every block alike.
template <int Depth>
__device__ __forceinline__ void count_step(const mt::Table<Depth>& tab, unsigned* ticket) {
  if (ticket == nullptr) return;
  EMBER_SHARED(int, last);
  if (threadIdx.x == 0) {  // it read the block's counter before update_chunk's barrier
    __threadfence();
    last = atomicAdd(ticket, 1u) == gridDim.x - 1 ? 1 : 0;
  }
  __syncthreads();
  if (last == 0) return;
  const int t = static_cast<int>(threadIdx.x);  // a table holds fewer tensors than a block has threads
  static_assert(mt::kMaxTensors <= mt::kThreads);
  if (t < tab.n && tab.step[t] != nullptr) *tab.step[t] += 1.0f;
  if (t == 0) *ticket = 0u;
}

// The step count this update uses: the counter was advanced before the launch (no ticket), or is
// advanced after it by count_step (ticket: the old count + 1).
__device__ __forceinline__ float step_count(const float* step, const unsigned* ticket) {
  if (step == nullptr) return 0.0f;
  return ticket != nullptr ? *step + 1.0f : *step;
}

// The frame of every update kernel: nothing when GradScaler found an inf or NaN (*found_inf != 0:
// the step is skipped); else thread 0 forms the step's scalars for this block's chunk w once,
// s = make_scalars(w), and shares them (f64 math with a pow per bias correction: too slow to
// repeat in each of 512 threads that update 4 elements each), then update = make_update(w, s),
// update(i) for each element i of the chunk, strided over the block's threads, and the step
// counters (count_step).
template <class Scalars, int Depth, class MakeScalars, class MakeUpdate>
__device__ __forceinline__ void update_chunk(const mt::Table<Depth>& tab, const float* found_inf, unsigned* ticket,
                                             const MakeScalars& make_scalars, const MakeUpdate& make_update) {
  if (found_inf != nullptr && *found_inf != 0.0f) return;
  const mt::BlockWork w = mt::block_work(tab);
  EMBER_SHARED(Scalars, shared);
  if (threadIdx.x == 0) shared = make_scalars(w);
  __syncthreads();
  const auto update = make_update(w, shared);
  for (int64_t i = w.begin + threadIdx.x; i < w.end; i += blockDim.x) update(i);
  count_step(tab, ticket);
}

// The device scalars that scale the gradients (each pointer optional).
struct GradScalePtrs {
  const float* inv_scale;  // AMP's 1 / scale
  const float* norm32;     // clip_norm when f32
  const double* norm64;    // clip_norm when f64
};

// inv_scale and the clipping coefficient as one thread reads them (thread 0, make_scalars).
__device__ __forceinline__ GradFactors read_factors(const GradScalePtrs& g, double max_norm) {
  GradFactors f;
  if (g.inv_scale != nullptr) f.inv_scale = static_cast<double>(*g.inv_scale);
  if (g.norm32 != nullptr || g.norm64 != nullptr) {
    f.clip = true;
    f.clip_coef = step_clip_coef(g.norm32, g.norm64, max_norm);
  }
  return f;
}

template <class T>
__global__ void __launch_bounds__(mt::kThreads)
    sgd_kernel(const __grid_constant__ mt::Table<3> tab, const double* __restrict__ hyper,
               const float* __restrict__ found_inf, GradScalePtrs gs, unsigned* ticket, SgdStepAttrs a) {
  using S = SgdScalars<acc_t<T>>;
  update_chunk<S>(
      tab, found_inf, ticket,
      [&](const mt::BlockWork& w) {
        return make_sgd_scalars<acc_t<T>>(hyper, read_factors(gs, a.max_norm), step_count(tab.step[w.t], ticket), a);
      },
      [&](const mt::BlockWork& w, const S& shared) {
        const S s = shared;
        T* p = static_cast<T*>(tab.ptr[0][w.t]);
        const T* g = static_cast<const T*>(tab.ptr[1][w.t]);
        T* buf = static_cast<T*>(tab.ptr[2][w.t]);
        const bool scale = gs.inv_scale != nullptr;
        return [=](int64_t i) { sgd_update(p, g, buf, i, s, scale); };
      });
}

template <class T>
__global__ void __launch_bounds__(mt::kThreads)
    adam_kernel(const __grid_constant__ mt::Table<5> tab, const double* __restrict__ hyper,
                const float* __restrict__ found_inf, GradScalePtrs gs, unsigned* ticket, AdamStepAttrs a) {
  using S = AdamScalars<acc_t<T>>;
  update_chunk<S>(
      tab, found_inf, ticket,
      [&](const mt::BlockWork& w) {
        return make_adam_scalars<acc_t<T>>(hyper, read_factors(gs, a.max_norm), step_count(tab.step[w.t], ticket), a);
      },
      [&](const mt::BlockWork& w, const S& shared) {
        const S s = shared;
        T* p = static_cast<T*>(tab.ptr[0][w.t]);
        const T* g = static_cast<const T*>(tab.ptr[1][w.t]);
        T* m = static_cast<T*>(tab.ptr[2][w.t]);
        T* v = static_cast<T*>(tab.ptr[3][w.t]);
        T* vmax = static_cast<T*>(tab.ptr[4][w.t]);
        const bool scale = gs.inv_scale != nullptr;
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
  GradScalePtrs scale;     // unscale (inv_scale) and clip (clip_norm) the gradients on the fly
  unsigned* ticket;        // nullptr, or the update kernel counts the steps (Note [optimizer step counters])
  explicit StepInputs(const KernelCall& c)
      : hyper(c.in[kHyper]),
        guard(hyper.device().index),
        stream(cuda::stream_for(hyper)),
        found_inf(opt_f32(c.in[kFoundInf])),
        scale(scale_ptrs(c)),
        ticket(c.in[kTicket].defined() ? static_cast<unsigned*>(c.in[kTicket].data_ptr()) : nullptr) {}

  static GradScalePtrs scale_ptrs(const KernelCall& c) {
    const Tensor& n = c.in[kClipNorm];
    const bool f64 = n.defined() && n.dtype() == DType::f64;
    return {opt_f32(c.in[kInvScale]), f64 ? nullptr : opt_f32(n), f64 ? n.data<double>() : nullptr};
  }

  // Advances the step counters now (increment_steps) unless the update kernels will: they need a
  // ticket, and an empty tensor is in no table, so its counter would be left behind. Returns the
  // ticket the update kernels count with, or nullptr.
  unsigned* counting_ticket(const std::vector<float*>& steps, bool any_empty) const {
    if (steps.empty()) return nullptr;
    if (ticket != nullptr && !any_empty) return ticket;
    increment_steps(steps, found_inf, stream);
    return nullptr;
  }
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
  bool any_empty = false;
  for (int64_t i = 0; i < a.n; ++i) {
    auto& e = entries[static_cast<size_t>(i)];
    e.ptr = {in_ptr(c, a.n, 0, i), in_ptr(c, a.n, 1, i), a.momentum_buffers ? in_ptr(c, a.n, 2, i) : nullptr};
    e.numel = c.in[static_cast<size_t>(kFirstTensor + i)].numel();
    any_empty = any_empty || e.numel == 0;
    if (a.momentum_buffers) {
      e.step = static_cast<float*>(in_ptr(c, a.n, 3, i));
      steps.push_back(e.step);
    }
  }
  unsigned* ticket = in.counting_ticket(steps, any_empty);
  EMBER_DISPATCH_FLOAT(c.in[kFirstTensor].dtype(), "sgd_step", [&] {
    mt::for_each_table<3>(entries, [&](const mt::Table<3>& tab, int nblocks, int64_t) {
      cuda::launch(sgd_kernel<scalar_t>, nblocks, mt::kThreads, 0, in.stream, tab, in.hyper.data<double>(),
                   in.found_inf, in.scale, ticket, a);
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
  bool any_empty = false;
  for (int64_t i = 0; i < a.n; ++i) {
    auto& e = entries[static_cast<size_t>(i)];
    e.ptr = {in_ptr(c, a.n, 0, i), in_ptr(c, a.n, 1, i), in_ptr(c, a.n, 2, i), in_ptr(c, a.n, 3, i),
             a.amsgrad ? in_ptr(c, a.n, 4, i) : nullptr};
    e.numel = c.in[static_cast<size_t>(kFirstTensor + i)].numel();
    any_empty = any_empty || e.numel == 0;
    e.step = static_cast<float*>(in_ptr(c, a.n, step_list, i));
    steps.push_back(e.step);
  }
  unsigned* ticket = in.counting_ticket(steps, any_empty);
  EMBER_DISPATCH_FLOAT(c.in[kFirstTensor].dtype(), "adam_step", [&] {
    mt::for_each_table<5>(entries, [&](const mt::Table<5>& tab, int nblocks, int64_t) {
      cuda::launch(adam_kernel<scalar_t>, nblocks, mt::kThreads, 0, in.stream, tab, in.hyper.data<double>(),
                   in.found_inf, in.scale, ticket, a);
    });
  });
}

}  // namespace

void register_cuda_sgd_step(OpInfo& info) {
  info.add_variant({.name = "multi_tensor",
                    .device = DeviceType::cuda,
                    .fn = sgd_cuda,
                    .dtypes = kFloatTypes,
                    .note = "one launch per table of 32 tensors, chunks sized to the call; hyperparameters read from "
                            "the device; with a ticket it also counts the steps; clipping folded in"});
}

void register_cuda_adam_step(OpInfo& info) {
  info.add_variant({.name = "multi_tensor",
                    .device = DeviceType::cuda,
                    .fn = adam_cuda,
                    .dtypes = kFloatTypes,
                    .note =
                        "one launch per table of 32 tensors, chunks sized to the call; step counters and "
                        "hyperparameters on the device; with a ticket it also counts the steps; clipping folded in"});
}

}  // namespace ember
