// train_stats on CUDA (see train_stats.h): one launch. Blocks of 256 threads take rows, a thread
// a row at a time (argmax over K in the row's order, as the argmax op); each block's count of
// correct rows is added to `correct` with an integer atomic (exact in any order); block 0's
// thread 0 updates the four f32 scalars. Launch bound: a [128, 10] batch reads 6 KB.
#include "core/cuda/device_guard.h"
#include "core/cuda/kernel.cuh"
#include "kernels/common/current_stream.cuh"
#include "kernels/common/grid_size.cuh"
#include "kernels/ops/train_stats.h"
#include "kernels/registry.h"

namespace ember {

namespace {

constexpr int kThreads = 256;

struct StatsState {
  const float* loss;
  float *loss_sum, *run, *diverged_at, *steps;
  unsigned long long* correct;  // the i64 counter (counts are never negative)
};

// f64 logits compare in f64, the rest in f32 (exact for f16/bf16/f32: the order is theirs)
template <class T>
using Cmp = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <class T>
__global__ void __launch_bounds__(kThreads)
    train_stats_kernel(const T* __restrict__ logits, int64_t N, int K, int64_t sr, int64_t sk,
                       const int64_t* __restrict__ labels, int64_t sy, StatsState s, TrainStatsAttrs a) {
  EMBER_SHARED(unsigned[kThreads / 32], warps);
  unsigned count = 0;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; i < N;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    const T* row = logits + i * sr;
    Cmp<T> best = static_cast<Cmp<T>>(row[0]);
    int idx = 0;
    for (int k = 1; k < K && best == best; ++k) {  // a NaN is the maximum: stop at the first
      const Cmp<T> v = static_cast<Cmp<T>>(row[k * sk]);
      if (v > best || v != v) {
        best = v;
        idx = k;
      }
    }
    count += idx == labels[i * sy] ? 1u : 0u;
  }
  for (int off = 16; off > 0; off >>= 1) count += __shfl_down_sync(0xffffffffu, count, off);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) warps[warp] = count;
  __syncthreads();
  if (threadIdx.x != 0) return;
  for (int w = 1; w < kThreads / 32; ++w) count += warps[w];
  if (count > 0) atomicAdd(s.correct, static_cast<unsigned long long>(count));
  if (blockIdx.x != 0) return;
  const float loss = *s.loss;
  *s.loss_sum += loss;
  const float run = isfinite(loss) ? 0.0f : *s.run + 1.0f;
  *s.run = run;
  if (run >= static_cast<float>(a.limit) && *s.diverged_at < 0.0f) *s.diverged_at = *s.steps + 1.0f;
  if (a.count_step != 0) *s.steps += 1.0f;
}

void train_stats_cuda(const KernelCall& c) {
  const Tensor &logits = c.in[0], &labels = c.in[1];
  cuda::DeviceGuard guard(logits.device().index);
  const StatsState s{c.in[2].data<float>(), c.in[3].data<float>(),
                     c.in[5].data<float>(), c.in[6].data<float>(),
                     c.in[7].data<float>(), reinterpret_cast<unsigned long long*>(c.in[4].data<int64_t>())};
  const int64_t N = logits.shape()[0];
  const unsigned blocks = N > 0 ? cuda::grid_for(N, kThreads, logits.device().index) : 1;
  EMBER_DISPATCH_FLOAT(logits.dtype(), "train_stats", [&] {
    cuda::launch(train_stats_kernel<scalar_t>, blocks, kThreads, 0, cuda::stream_for(logits),
                 static_cast<const scalar_t*>(logits.data_ptr()), N, static_cast<int>(logits.shape()[1]),
                 logits.strides()[0], logits.strides()[1], labels.data<int64_t>(), labels.strides()[0], s,
                 c.attr<TrainStatsAttrs>());
  });
}

}  // namespace

void register_cuda_train_stats(OpInfo& info) {
  info.add_variant({.name = "cuda",
                    .device = DeviceType::cuda,
                    .fn = train_stats_cuda,
                    .dtypes = kFloatTypes,
                    .note = "one launch: a thread a row, the count by integer atomics, block 0 the scalars"});
}

}  // namespace ember
