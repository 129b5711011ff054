// Reductions on CUDA (see reduce.h for the [A, R, B] plan).
//
// Kernels:
//  - rows_warp    B == 1, R <= 4096: one warp per row (e.g. [512, 10] sums, softmax-sized rows)
//  - rows_block   B == 1, long rows: a block per (row, split); 16-byte loads when rows are aligned;
//                 with several splits per row, partial results go to a workspace and `finalize`
//                 merges them (two passes, no atomics: deterministic)
//  - cols         B > 1: a 32x8 block per (32 outputs, R split); adjacent threads read adjacent
//                 columns (coalesced), 8 rows of threads share the R range, merged in shared memory
// Memory bound: every input is read once. With ~8 blocks per SM and 4 independent accumulators per
// thread the loads stay in flight.
// Napkin math: docs/perf.md ("Napkin math behind the kernels").
#include "core/cuda/device_guard.h"
#include "core/cuda/kernel.cuh"
#include "kernels/common/cuda_loops.cuh"
#include "kernels/common/current_stream.cuh"
#include "kernels/common/grid_size.cuh"
#include "kernels/ops/reduce.h"
#include "kernels/registry.h"

namespace ember {

namespace {

// ---- shuffles and block reduction for every accumulator type ----

template <class V>
__device__ __forceinline__ V shfl_down(V v, int off) {
  return __shfl_down_sync(0xffffffffu, v, off);
}
template <class V>
__device__ __forceinline__ reduce::ArgMaxAcc<V> shfl_down(reduce::ArgMaxAcc<V> a, int off) {
  return {shfl_down(a.value, off), shfl_down(a.index, off)};
}
template <class V>
__device__ __forceinline__ reduce::WelfordAcc<V> shfl_down(reduce::WelfordAcc<V> a, int off) {
  return {shfl_down(a.mean, off), shfl_down(a.m2, off), shfl_down(a.n, off)};
}

template <class Op, class Acc>
__device__ __forceinline__ Acc warp_reduce(Acc acc) {
  EMBER_UNROLL
  for (int off = 16; off > 0; off >>= 1) acc = Op::merge(acc, shfl_down(acc, off));
  return acc;
}

// Result valid in thread 0. blockDim.x is a multiple of 32 and at most 1024.
template <class Op, class Acc>
__device__ __forceinline__ Acc block_reduce(Acc acc) {
  EMBER_SHARED(Acc[32], warps);
  int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  acc = warp_reduce<Op>(acc);
  if (lane == 0) warps[warp] = acc;
  __syncthreads();
  int nwarps = blockDim.x / 32;
  acc = threadIdx.x < nwarps ? warps[threadIdx.x] : Op::init();
  if (warp == 0) acc = warp_reduce<Op>(acc);
  return acc;
}

// ---- projections (accumulator -> output element) ----

template <class Out>
struct CastProj {
  template <class Acc>
  __device__ Out operator()(Acc a) const {
    return static_cast<Out>(a);
  }
};
template <class Out>
struct MeanProj {
  double r;
  template <class Acc>
  __device__ Out operator()(Acc a) const {
    return static_cast<Out>(r == 0 ? static_cast<Acc>(NAN) : static_cast<Acc>(a / static_cast<Acc>(r)));
  }
};
struct IndexProj {
  template <class Acc>
  __device__ int64_t operator()(Acc a) const {
    return a.index;
  }
};
template <class Out>
struct VarProj {
  double correction;
  template <class Acc>
  __device__ Out operator()(Acc a) const {
    double den = static_cast<double>(a.n) - correction;
    return static_cast<Out>(den > 0 ? a.m2 / static_cast<decltype(a.m2)>(den) : static_cast<decltype(a.m2)>(NAN));
  }
};

// ---- kernels ----

template <class Op, class T, class Out, class Proj>
__global__ void rows_warp_kernel(const T* __restrict__ x, int64_t A, int64_t R, Out* __restrict__ out, Proj proj) {
  int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  int lane = threadIdx.x % 32;
  if (row >= A) return;
  const T* p = x + row * R;
  typename Op::acc_type acc = Op::init();
  for (int64_t i = lane; i < R; i += 32) acc = Op::step(acc, p[i], i);
  acc = warp_reduce<Op>(acc);
  if (lane == 0) out[row] = proj(acc);
}

template <int VEC, class Op, class T, class Out, class Proj>
__global__ void rows_block_kernel(const T* __restrict__ x, int64_t R, int64_t chunk, Out* __restrict__ out,
                                  typename Op::acc_type* __restrict__ partial, Proj proj) {
  using Acc = typename Op::acc_type;
  const int64_t row = blockIdx.x;
  const int splits = gridDim.y, s = blockIdx.y;
  const int64_t begin = s * chunk, end = min(R, begin + chunk);
  const T* p = x + row * R;
  constexpr int kIlp = 4;
  Acc acc[kIlp];
  EMBER_UNROLL
  for (int k = 0; k < kIlp; ++k) acc[k] = Op::init();
  if constexpr (VEC > 1) {
    // begin is a multiple of VEC (chunk is), rows are 16-byte aligned (checked on the host)
    const int64_t vend = begin + (end - begin) / VEC * VEC;
    const int64_t stride = static_cast<int64_t>(blockDim.x) * VEC;
    int64_t i = begin + static_cast<int64_t>(threadIdx.x) * VEC;
    for (; i + (kIlp - 1) * stride < vend; i += kIlp * stride) {
      detail::AlignedVec<T, VEC> v[kIlp];
      EMBER_UNROLL
      for (int k = 0; k < kIlp; ++k) v[k] = *reinterpret_cast<const detail::AlignedVec<T, VEC>*>(p + i + k * stride);
      EMBER_UNROLL
      for (int k = 0; k < kIlp; ++k) EMBER_UNROLL
      for (int j = 0; j < VEC; ++j) acc[k] = Op::step(acc[k], v[k].v[j], i + k * stride + j);
    }
    for (; i < vend; i += stride) {
      detail::AlignedVec<T, VEC> v = *reinterpret_cast<const detail::AlignedVec<T, VEC>*>(p + i);
      EMBER_UNROLL
      for (int j = 0; j < VEC; ++j) acc[0] = Op::step(acc[0], v.v[j], i + j);
    }
    for (int64_t t = vend + threadIdx.x; t < end; t += blockDim.x) acc[0] = Op::step(acc[0], p[t], t);
  } else {
    int64_t i = begin + threadIdx.x;
    const int64_t stride = blockDim.x;
    for (; i + (kIlp - 1) * stride < end; i += kIlp * stride) {
      T v[kIlp];
      EMBER_UNROLL
      for (int k = 0; k < kIlp; ++k) v[k] = p[i + k * stride];
      EMBER_UNROLL
      for (int k = 0; k < kIlp; ++k) acc[k] = Op::step(acc[k], v[k], i + k * stride);
    }
    for (; i < end; i += stride) acc[0] = Op::step(acc[0], p[i], i);
  }
  Acc total = acc[0];
  EMBER_UNROLL
  for (int k = 1; k < kIlp; ++k) total = Op::merge(total, acc[k]);
  total = block_reduce<Op>(total);
  if (threadIdx.x == 0) {
    if (splits == 1) out[row] = proj(total);
    else partial[static_cast<int64_t>(s) * gridDim.x + row] = total;  // split-major: Note [reduction partials]
  }
}

constexpr int kColTile = 32, kColLanes = 8;

template <class Op, class T, class Out, class Proj>
__global__ void cols_kernel(const T* __restrict__ x, int64_t A, int64_t R, int64_t B, int64_t chunk,
                            Out* __restrict__ out, typename Op::acc_type* __restrict__ partial, Proj proj) {
  using Acc = typename Op::acc_type;
  EMBER_SHARED(Acc[kColLanes][kColTile + 1], sm);
  const int64_t tiles_per_a = (B + kColTile - 1) / kColTile;
  const int64_t a = blockIdx.x / tiles_per_a;
  const int64_t b = (blockIdx.x % tiles_per_a) * kColTile + threadIdx.x;
  const int splits = gridDim.y, s = blockIdx.y;
  const int64_t begin = s * chunk, end = min(R, begin + chunk);
  Acc acc = Op::init();
  if (b < B) {
    const T* p = x + a * R * B + b;
    for (int64_t r = begin + threadIdx.y; r < end; r += kColLanes) acc = Op::step(acc, p[r * B], r);
  }
  sm[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && b < B) {
    EMBER_UNROLL
    for (int k = 1; k < kColLanes; ++k) acc = Op::merge(acc, sm[k][threadIdx.x]);
    int64_t o = a * B + b;
    if (splits == 1) out[o] = proj(acc);
    else partial[s * A * B + o] = acc;  // split-major: Note [reduction partials]
  }
}

// Note [reduction partials]: with several splits per output, split s of output o leaves its
// partial at partial[s * outputs + o]. Neighbouring threads of cols_kernel and finalize_kernel
// handle neighbouring outputs, so their stores and loads are contiguous; the output-major layout
// this replaced (partial[o * splits + s]) put a warp's 32 accesses `splits` elements apart, one
// useful 4-byte word per 32-byte sector. The merge order over s
// is unchanged, so the results are bit-identical to before.
template <class Op, class Out, class Proj>
__global__ void finalize_kernel(const typename Op::acc_type* __restrict__ partial, int64_t n, int splits,
                                Out* __restrict__ out, Proj proj) {
  for (int64_t o = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; o < n;
       o += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    typename Op::acc_type acc = Op::init();
    for (int s = 0; s < splits; ++s) acc = Op::merge(acc, partial[s * n + o]);
    out[o] = proj(acc);
  }
}

// Runs the plan for one (Op, element type, output type, projection).
template <class Op, class T, class Out, class Proj>
void launch_reduce(const Tensor& x, const ReducePlan& p, const Tensor& out_t, Proj proj) {
  using Acc = typename Op::acc_type;
  const int device = x.device().index;
  cudaStream_t stream = cuda::stream_for(x);
  const T* xp = static_cast<const T*>(x.data_ptr());
  Out* out = static_cast<Out*>(out_t.data_ptr());
  const int64_t A = p.A, R = p.R, B = p.B, outputs = A * B;
  const int64_t target_blocks = static_cast<int64_t>(cuda::sm_count(device)) * 8;

  if (B == 1 && R <= 4096) {
    constexpr int kThreads = 256, kRowsPerBlock = kThreads / 32;
    unsigned grid = static_cast<unsigned>((A + kRowsPerBlock - 1) / kRowsPerBlock);
    cuda::launch(rows_warp_kernel<Op, T, Out, Proj>, grid, kThreads, 0, stream, xp, A, R, out, proj);
    return;
  }

  int64_t splits, chunk;
  Tensor workspace;
  Acc* partial = nullptr;
  auto make_workspace = [&] {
    if (splits > 1) {
      workspace = empty({static_cast<int64_t>(outputs * splits * static_cast<int64_t>(sizeof(Acc)))},
                        TensorOptions().dtype(DType::u8).device(x.device()));
      partial = static_cast<Acc*>(workspace.data_ptr());
    }
  };

  if (B == 1) {
    constexpr int VEC = 16 / sizeof(T) > 0 ? 16 / sizeof(T) : 1;
    splits = std::clamp<int64_t>((target_blocks + A - 1) / A, 1, std::max<int64_t>(1, R / 8192));
    splits = std::min<int64_t>(splits, 65535);
    chunk = (R + splits - 1) / splits;
    chunk = (chunk + VEC - 1) / VEC * VEC;
    splits = (R + chunk - 1) / chunk;
    make_workspace();
    dim3 grid(static_cast<unsigned>(A), static_cast<unsigned>(splits));
    bool aligned = reinterpret_cast<uintptr_t>(xp) % 16 == 0 && (R * static_cast<int64_t>(sizeof(T))) % 16 == 0;
    if (aligned && VEC > 1)
      cuda::launch(rows_block_kernel<VEC, Op, T, Out, Proj>, grid, 256, 0, stream, xp, R, chunk, out, partial, proj);
    else cuda::launch(rows_block_kernel<1, Op, T, Out, Proj>, grid, 256, 0, stream, xp, R, chunk, out, partial, proj);
  } else {
    int64_t tiles = A * ((B + kColTile - 1) / kColTile);
    splits = std::clamp<int64_t>((target_blocks + tiles - 1) / tiles, 1, std::max<int64_t>(1, R / 64));
    splits = std::min<int64_t>(splits, 65535);
    chunk = (R + splits - 1) / splits;
    splits = std::max<int64_t>(1, (R + chunk - 1) / std::max<int64_t>(chunk, 1));
    make_workspace();
    dim3 grid(static_cast<unsigned>(tiles), static_cast<unsigned>(splits));
    dim3 block(kColTile, kColLanes);
    cuda::launch(cols_kernel<Op, T, Out, Proj>, grid, block, 0, stream, xp, A, R, B, std::max<int64_t>(chunk, 1), out,
                 partial, proj);
  }
  if (splits > 1) {
    cuda::launch(finalize_kernel<Op, Out, Proj>, cuda::grid_for(outputs, 256, device), 256, 0, stream, partial, outputs,
                 static_cast<int>(splits), out, proj);
  }
  // `workspace` is released here; the caching allocator reuses it only for later work on this
  // stream, which runs after the kernels above.
}

template <class T>
using cuda_acc_t = std::conditional_t<
    std::is_same_v<T, double>, double,
    std::conditional_t<std::is_same_v<T, float> || std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>, float,
                       int64_t>>;

enum class Kind { sum, mean, amax, amin, argmax, var };

template <Kind K>
void reduce_cuda(const KernelCall& c) {
  const ReduceAttrs& ra = c.attr<ReduceAttrs>();
  const Tensor& out = c.out[0];
  if (out.numel() == 0) return;
  cuda::DeviceGuard guard(c.in[0].device().index);
  ReducePlan p = plan_reduce(c.in[0], ra.mask, ra.keepdim != 0);
  Tensor x = reduce_input(c.in[0], p);
  auto run = [&]<class scalar_t>() {
    using Acc = cuda_acc_t<scalar_t>;
    if constexpr (K == Kind::sum) {
      using Out = std::conditional_t<std::is_same_v<Acc, int64_t>, int64_t, scalar_t>;
      launch_reduce<reduce::SumOp<Acc>, scalar_t, Out>(x, p, out, CastProj<Out>{});
    } else if constexpr (K == Kind::mean) {
      if constexpr (!std::is_same_v<Acc, int64_t>)
        launch_reduce<reduce::SumOp<Acc>, scalar_t, scalar_t>(x, p, out, MeanProj<scalar_t>{static_cast<double>(p.R)});
    } else if constexpr (K == Kind::amax) {
      launch_reduce<reduce::MaxOp<Acc>, scalar_t, scalar_t>(x, p, out, CastProj<scalar_t>{});
    } else if constexpr (K == Kind::amin) {
      launch_reduce<reduce::MinOp<Acc>, scalar_t, scalar_t>(x, p, out, CastProj<scalar_t>{});
    } else if constexpr (K == Kind::argmax) {
      launch_reduce<reduce::ArgMaxOp<Acc>, scalar_t, int64_t>(x, p, out, IndexProj{});
    } else {
      if constexpr (!std::is_same_v<Acc, int64_t>)
        launch_reduce<reduce::WelfordOp<Acc>, scalar_t, scalar_t>(x, p, out, VarProj<scalar_t>{ra.correction});
    }
  };
  if constexpr (K == Kind::sum) {
    EMBER_DISPATCH_ALL(x.dtype(), "sum", [&] { run.template operator()<scalar_t>(); });
  } else if constexpr (K == Kind::mean || K == Kind::var) {
    EMBER_DISPATCH_FLOAT(x.dtype(), "mean/var", [&] { run.template operator()<scalar_t>(); });
  } else {
    EMBER_DISPATCH_NUMERIC(x.dtype(), "amax/amin/argmax", [&] { run.template operator()<scalar_t>(); });
  }
}

constexpr const char* kNote = "warp-per-row, block-per-row split (two-pass), 32x8 column tiles";

}  // namespace

void register_cuda_sum(OpInfo& info) {
  info.add_variant({.name = "cuda", .device = DeviceType::cuda, .fn = reduce_cuda<Kind::sum>, .note = kNote});
}
void register_cuda_mean(OpInfo& info) {
  info.add_variant({.name = "cuda",
                    .device = DeviceType::cuda,
                    .fn = reduce_cuda<Kind::mean>,
                    .dtypes = kFloatTypes,
                    .note = kNote});
}
void register_cuda_amax(OpInfo& info) {
  info.add_variant({.name = "cuda",
                    .device = DeviceType::cuda,
                    .fn = reduce_cuda<Kind::amax>,
                    .dtypes = kNumericTypes,
                    .note = kNote});
}
void register_cuda_amin(OpInfo& info) {
  info.add_variant({.name = "cuda",
                    .device = DeviceType::cuda,
                    .fn = reduce_cuda<Kind::amin>,
                    .dtypes = kNumericTypes,
                    .note = kNote});
}
void register_cuda_argmax(OpInfo& info) {
  info.add_variant({.name = "cuda",
                    .device = DeviceType::cuda,
                    .fn = reduce_cuda<Kind::argmax>,
                    .dtypes = kNumericTypes,
                    .note = kNote});
}
void register_cuda_var(OpInfo& info) {
  info.add_variant({.name = "cuda",
                    .device = DeviceType::cuda,
                    .fn = reduce_cuda<Kind::var>,
                    .dtypes = kFloatTypes,
                    .note = kNote + std::string(", Welford")});
}

}  // namespace ember
