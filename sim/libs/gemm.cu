// The simulated kernels of the emulated cuBLAS / cuBLASLt GEMMs (gemm.h): plain one-thread-per-
// output-element loops, written from the libraries' definition of the GEMM and its epilogues, not
// from ember's kernels, so a parity test compares two independent computations. Running them as
// simulated kernels puts the library's reads and writes under the simulator's bounds,
// initialisation and stream-order checks, and lets graph capture record them.
#include "sim/libs/gemm.h"

#include <algorithm>
#include <cmath>

#include "sim/libs/launch.h"

namespace ember::sim::libs {

namespace {

constexpr int kThreads = 256;
// Few threads with grid-stride loops: in the simulator every CUDA thread is a fiber.
constexpr int64_t kMaxBlocks = 512;

__device__ float round_in(float v, InRound r) {
  switch (r) {
    case InRound::none: return v;
    case InRound::tf32: return round_tf32(v);
    case InRound::f16: return round_f16(v);
    case InRound::bf16: return round_bf16(v);
  }
  return v;
}

// op(A)(i, p) and op(B)(p, j) of batch z.
__device__ double a_at(const GemmArgs& g, int64_t z, int64_t i, int64_t p) {
  const int64_t off = z * g.sa + (g.ta ? p + i * g.lda : i + p * g.lda);
  return load_elem(g.a, off, g.at);
}
__device__ double b_at(const GemmArgs& g, int64_t z, int64_t p, int64_t j) {
  const int64_t off = z * g.sb + (g.tb ? j + p * g.ldb : p + j * g.ldb);
  return load_elem(g.b, off, g.bt);
}

// sum over p in [k0, k1) of op(A)(i, p) op(B)(p, j), in the accumulator's type, in order.
__device__ double dot(const GemmArgs& g, int64_t z, int64_t i, int64_t j, int64_t k0, int64_t k1) {
  if (g.alpha == 0) return 0;  // A and B are not read (BLAS)
  switch (g.acc) {
    case Elem::f64: {
      double s = 0;
      for (int64_t p = k0; p < k1; ++p) s = std::fma(a_at(g, z, i, p), b_at(g, z, p, j), s);
      return s;
    }
    case Elem::f16: {
      float s = 0;
      for (int64_t p = k0; p < k1; ++p)
        s = round_f16(std::fmaf(static_cast<float>(a_at(g, z, i, p)), static_cast<float>(b_at(g, z, p, j)), s));
      return s;
    }
    default: {
      float s = 0;
      for (int64_t p = k0; p < k1; ++p)
        s = std::fmaf(round_in(static_cast<float>(a_at(g, z, i, p)), g.in),
                      round_in(static_cast<float>(b_at(g, z, p, j)), g.in), s);
      return s;
    }
  }
}

// alpha * s + beta * C(i, j) in the accumulator's (scale) type.
__device__ double scale(const GemmArgs& g, int64_t z, int64_t i, int64_t j, double s) {
  const bool with_c = g.beta != 0;
  const double c = with_c ? load_elem(g.c, z * g.sc + i + j * g.ldc, g.ct) : 0.0;
  switch (g.acc) {
    case Elem::f64: return with_c ? std::fma(g.beta, c, g.alpha * s) : g.alpha * s;
    case Elem::f16: {
      const float v = round_f16(static_cast<float>(g.alpha) * static_cast<float>(s));
      return with_c ? round_f16(v + round_f16(static_cast<float>(g.beta) * static_cast<float>(c))) : v;
    }
    default: {
      const float v = static_cast<float>(g.alpha) * static_cast<float>(s);
      return with_c ? std::fmaf(static_cast<float>(g.beta), static_cast<float>(c), v) : v;
    }
  }
}

// Bias and activation on v (f32 arithmetic, f64 for f64 accumulators), then the store to D.
__device__ void finish(const GemmArgs& g, int64_t z, int64_t i, int64_t j, double v) {
  if (g.acc == Elem::f64) {
    if (g.bias != nullptr) v += load_elem(g.bias, z * g.bias_stride + i, g.biast);
    if (g.act == Act::relu) v = v > 0 ? v : 0;
    if (g.act == Act::gelu) v = 0.5 * v * (1 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
  } else {
    float f = static_cast<float>(v);
    if (g.bias != nullptr) f += static_cast<float>(load_elem(g.bias, z * g.bias_stride + i, g.biast));
    if (g.act == Act::relu) f = f > 0 ? f : 0.f;
    if (g.act == Act::gelu) f = 0.5f * f * (1.f + std::tanh(0.7978845608f * (f + 0.044715f * f * f * f)));
    v = f;
  }
  store_elem(g.d, z * g.sd + i + j * g.ldd, g.dt, v);
}

// Without split-K: one accumulation over K, the epilogue on the accumulator, one rounding.
__global__ void gemm_direct(GemmArgs g) {
  const int64_t total = g.batch * g.m * g.n;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < total;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = t % g.m, j = (t / g.m) % g.n, z = t / (g.m * g.n);
    finish(g, z, i, j, scale(g, z, i, j, dot(g, z, i, j, 0, g.k)));
  }
}

__device__ int64_t slice_begin(const GemmArgs& g, int s) { return g.k * s / g.splits; }

// Split-K, first step: each slice's partial sum into the workspace.
__global__ void gemm_partials(GemmArgs g) {
  const int64_t mn = g.m * g.n, total = g.batch * g.splits * mn;
  const Elem pt = g.partial_type();
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < total;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = t % g.m, j = (t / g.m) % g.n;
    const int s = static_cast<int>((t / mn) % g.splits);
    const int64_t z = t / (mn * g.splits);
    store_elem(g.work, t, pt, dot(g, z, i, j, slice_begin(g, s), slice_begin(g, s + 1)));
  }
}

// Split-K, second step: the partials summed in slice order (in D's type or the accumulator's),
// scaled, rounded to D's type, then the epilogue.
__global__ void gemm_reduce(GemmArgs g) {
  const int64_t mn = g.m * g.n, total = g.batch * mn;
  const Elem pt = g.partial_type();
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < total;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = t % g.m, j = (t / g.m) % g.n, z = t / mn;
    const int64_t base = z * g.splits * mn + j * g.m + i;
    double sum = load_elem(g.work, base, pt);
    for (int s = 1; s < g.splits; ++s) {
      const double p = load_elem(g.work, base + s * mn, pt);
      if (g.partials_in_output) sum = round_to(sum + p, g.dt);
      else if (g.acc == Elem::f64) sum += p;
      else if (g.acc == Elem::f16) sum = round_f16(static_cast<float>(sum) + static_cast<float>(p));
      else sum = static_cast<float>(sum) + static_cast<float>(p);
    }
    double v = scale(g, z, i, j, sum);
    if (g.bias != nullptr || g.act != Act::none) v = round_to(v, g.dt);
    finish(g, z, i, j, v);
  }
}

unsigned blocks_for(int64_t total) {
  return static_cast<unsigned>(std::clamp<int64_t>((total + kThreads - 1) / kThreads, 1, kMaxBlocks));
}

}  // namespace

void enqueue_gemm(const GemmArgs& g, cudaStream_t stream) {
  const int64_t out = g.batch * g.m * g.n;
  if (out == 0) return;
  if (g.splits > 1 && g.k > 0) {
    libs::enqueue(gemm_partials, blocks_for(out * g.splits), kThreads, 0, stream, g);
    libs::enqueue(gemm_reduce, blocks_for(out), kThreads, 0, stream, g);
  } else {
    libs::enqueue(gemm_direct, blocks_for(out), kThreads, 0, stream, g);
  }
}

}  // namespace ember::sim::libs
