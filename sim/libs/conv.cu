// The simulated kernels of the simulator's cuDNN convolutions (conv.h): one thread per output
// element, grid-stride, each summing its products straight from the definition of cuDNN's
// cross-correlation (or convolution) over the channels of its group. Written independently of
// ember's convolution kernels, so a cuDNN variant's parity test compares two implementations.
//
// Note [emulated convolution numerics]: the reduction of each output element (forward: over
// c, r, s of its group; backward-data: over k and the taps that reach the element; backward-
// filter: over n, p, q) is cut into chunks of ConvNumerics::chunk products, as split-K and
// tensor-core tiles cut it:
// - the products are formed from operands rounded as the math type permits (TF32 or f16 for f32
//   data) and summed with fused multiply-adds in the accumulator (f32, or f64 for double data);
// - partial sums of chunks are then combined (cudnn.cpp's `numerics` decides how): in the
//   accumulator; or each rounded to the data type and added in the accumulator (f16 backward data
//   with tensor-op math: Note [cuDNN f16 partial sums] in tests/op_samples/conv2d_samples.cpp has
//   the H200 observation); or, for compute type HALF, added in the data type, rounded after every
//   addition;
// - a nondeterministic algorithm (atomics on a GPU) combines the chunks in an order drawn from the
//   call's seed: a rotation and a direction per element, so two identical calls may differ in the
//   last bits, while a deterministic algorithm always uses chunk order 0, 1, 2, ...;
// - FFT-, FFT-tiling- and nonfused-Winograd-like algorithms get a deterministic pseudo-random error
//   of 1e-3 * (sum of |products|) / sqrt(reduction length): it models an observation (an H200 run
//   had f32 weight gradients 2% off near zero with them: their error grows with the inputs'
//   magnitude, not the output's), not a bound NVIDIA documents;
// - the result is blended, alpha * result + beta * old (old not read when beta is 0), in double
//   and rounded once to the data type.
#if EMBER_WITH_CUDNN  // built where CMake found cudnn.h (CMakeLists.txt)

#include "sim/libs/conv.h"

#include <algorithm>
#include <cmath>

#include "sim/libs/launch.h"

namespace ember::sim::libs::conv {

namespace {

struct Args {
  ConvGeom g;
  ConvNumerics num;
  Dir dir = Dir::forward;
  int64_t total = 0;  // output elements
  int64_t len = 0;    // products per output element (taps outside the input included)
  int64_t ws_touch = 0;
};

inline double round_operand(double v, OperandRounding r) {
  switch (r) {
    case OperandRounding::tf32: return round_tf32(static_cast<float>(v));
    case OperandRounding::f16: return round_f16(static_cast<float>(v));
    case OperandRounding::none: break;
  }
  return v;
}

inline float fma_acc(float a, float b, float c) { return std::fmaf(a, b, c); }
inline double fma_acc(double a, double b, double c) { return std::fma(a, b, c); }

// An output element's coordinates (those its direction has; the rest stay 0), its group, and its offset in `out`.
struct Element {
  int64_t n = 0, k = 0, c = 0, oh = 0, ow = 0, r = 0, s = 0, grp = 0, off = 0;
};

// Unravels i over a row-major [*, d1, d2, d3] into (a, b, c, d) and returns its offset with strides st.
inline int64_t unravel(int64_t i, int64_t d1, int64_t d2, int64_t d3, const int64_t (&st)[4], int64_t& a, int64_t& b,
                       int64_t& c, int64_t& d) {
  d = i % d3;
  c = (i / d3) % d2;
  b = (i / (d3 * d2)) % d1;
  a = i / (d3 * d2 * d1);
  return a * st[0] + b * st[1] + c * st[2] + d * st[3];
}

inline Element locate(const Args& p, int64_t i) {
  const ConvGeom& g = p.g;
  Element o;
  switch (p.dir) {
    case Dir::forward:
      o.off = unravel(i, g.K, g.P, g.Q, g.ys, o.n, o.k, o.oh, o.ow);
      o.grp = o.k / g.Kg();
      break;
    case Dir::backward_data:
      o.off = unravel(i, g.C, g.H, g.W, g.xs, o.n, o.c, o.oh, o.ow);
      o.grp = o.c / g.Cg();
      break;
    case Dir::backward_filter:
      o.off = unravel(i, g.Cg(), g.R, g.S, g.ws, o.k, o.c, o.r, o.s);
      o.grp = o.k / g.Kg();
      break;
  }
  return o;
}

// Operand x at `index` of `src`, rounded as the math type permits.
template <class Acc>
inline Acc operand(const void* src, int64_t index, const ConvNumerics& num) {
  return static_cast<Acc>(round_operand(load_elem(src, index, num.elem), num.operands));
}

// The operands of product t of output element o: forward x * w, backward-data dy * w, backward-filter x * dy.
// False: the tap falls outside the input, a zero product.
template <class Acc>
inline bool term(const Args& p, const Element& o, int64_t t, const void* a, const void* b, Acc& u, Acc& v) {
  const ConvGeom& g = p.g;
  const int64_t Cg = g.Cg(), Kg = g.Kg();
  switch (p.dir) {
    case Dir::forward: {
      const int64_t ts = t % g.S, tr = (t / g.S) % g.R, tc = t / (g.S * g.R);
      const int64_t hi = o.oh * g.sh - g.ph + tr * g.dh, wi = o.ow * g.sw - g.pw + ts * g.dw;
      if (hi < 0 || hi >= g.H || wi < 0 || wi >= g.W) return false;
      const int64_t fr = g.flip ? g.R - 1 - tr : tr, fs = g.flip ? g.S - 1 - ts : ts;
      u = operand<Acc>(a, o.n * g.xs[0] + (o.grp * Cg + tc) * g.xs[1] + hi * g.xs[2] + wi * g.xs[3], p.num);
      v = operand<Acc>(b, o.k * g.ws[0] + tc * g.ws[1] + fr * g.ws[2] + fs * g.ws[3], p.num);
      return true;
    }
    case Dir::backward_data: {
      const int64_t ts = t % g.S, tr = (t / g.S) % g.R, tk = o.grp * Kg + t / (g.S * g.R);
      const int64_t hp = o.oh + g.ph - tr * g.dh, wp = o.ow + g.pw - ts * g.dw;
      if (hp < 0 || wp < 0 || hp % g.sh != 0 || wp % g.sw != 0) return false;
      const int64_t py = hp / g.sh, qy = wp / g.sw;
      if (py >= g.P || qy >= g.Q) return false;
      const int64_t fr = g.flip ? g.R - 1 - tr : tr, fs = g.flip ? g.S - 1 - ts : ts;
      u = operand<Acc>(a, o.n * g.ys[0] + tk * g.ys[1] + py * g.ys[2] + qy * g.ys[3], p.num);
      v = operand<Acc>(b, tk * g.ws[0] + (o.c - o.grp * Cg) * g.ws[1] + fr * g.ws[2] + fs * g.ws[3], p.num);
      return true;
    }
    case Dir::backward_filter: {
      const int64_t tq = t % g.Q, tp = (t / g.Q) % g.P, tn = t / (g.Q * g.P);
      // the stored filter element (r, s) is tap (R-1-r, S-1-s) in convolution mode
      const int64_t tr = g.flip ? g.R - 1 - o.r : o.r, ts = g.flip ? g.S - 1 - o.s : o.s;
      const int64_t hi = tp * g.sh - g.ph + tr * g.dh, wi = tq * g.sw - g.pw + ts * g.dw;
      if (hi < 0 || hi >= g.H || wi < 0 || wi >= g.W) return false;
      u = operand<Acc>(a, tn * g.xs[0] + (o.grp * Cg + o.c) * g.xs[1] + hi * g.xs[2] + wi * g.xs[3], p.num);
      v = operand<Acc>(b, tn * g.ys[0] + o.k * g.ys[1] + tp * g.ys[2] + tq * g.ys[3], p.num);
      return true;
    }
  }
  return false;
}

// Output element i's reduction, cut into chunks and combined as Note [emulated convolution numerics] says (before
// alpha and beta).
template <class Acc>
inline double reduce(const Args& p, const Element& o, int64_t i, const void* a, const void* b) {
  const ConvNumerics& num = p.num;
  const Elem e = num.elem;
  const int64_t chunk = num.chunk, nch = (p.len + chunk - 1) / chunk;
  int64_t start = 0;
  bool reverse = false;
  if (num.nondeterministic && nch > 0) {
    const uint64_t h = mix(num.seed, static_cast<uint64_t>(i));
    start = static_cast<int64_t>(h % static_cast<uint64_t>(nch));
    reverse = (h >> 63) != 0;
  }
  Acc acc = 0;
  double in_type = 0, abs_sum = 0;
  for (int64_t j = 0; j < nch; ++j) {
    const int64_t ci = (start + (reverse ? nch - j : j)) % nch;
    const int64_t lo = ci * chunk, hi = std::min(p.len, lo + chunk);
    Acc part = 0;
    for (int64_t t = lo; t < hi; ++t) {
      Acc u = 0, v = 0;
      if (!term(p, o, t, a, b, u, v)) continue;
      part = fma_acc(u, v, part);
      if (num.transform_error) abs_sum += std::fabs(static_cast<double>(u) * static_cast<double>(v));
    }
    if (num.partials_in_type) in_type = round_to(in_type + round_to(static_cast<double>(part), e), e);
    else if (num.partials_rounded) acc += static_cast<Acc>(round_to(static_cast<double>(part), e));
    else acc += part;
  }
  double result = num.partials_in_type ? in_type : static_cast<double>(acc);
  if (num.transform_error && p.len > 0) {
    const double unit = static_cast<double>(mix(num.transform_seed, static_cast<uint64_t>(i)) >> 11) * 0x1p-53;
    result += 1e-3 * abs_sum / std::sqrt(static_cast<double>(p.len)) * (2 * unit - 1);
  }
  return result;
}

template <class Acc>
__global__ void conv_kernel(Args p, const void* a, const void* b, void* out, unsigned char* ws) {
  const ConvNumerics& num = p.num;
  if (p.ws_touch > 0 && blockIdx.x == 0 && threadIdx.x == 0) {
    ws[0] = 0;  // the workspace must be device memory of this size when the work runs
    ws[p.ws_touch - 1] = 0;
  }
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < p.total; i += step) {
    const Element o = locate(p, i);
    double v = num.alpha * reduce<Acc>(p, o, i, a, b);
    if (num.beta != 0) v += num.beta * load_elem(out, o.off, num.elem);
    store_elem(out, o.off, num.elem, v);
  }
}

}  // namespace

void enqueue(Dir dir, const ConvGeom& g, const ConvNumerics& num, const void* a, const void* b, void* out,
             void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  Args p;
  p.g = g;
  p.num = num;
  p.dir = dir;
  switch (dir) {
    case Dir::forward:
      p.total = g.N * g.K * g.P * g.Q;
      p.len = g.Cg() * g.R * g.S;
      break;
    case Dir::backward_data:
      p.total = g.N * g.C * g.H * g.W;
      p.len = g.Kg() * g.R * g.S;
      break;
    case Dir::backward_filter:
      p.total = g.K * g.Cg() * g.R * g.S;
      p.len = g.N * g.P * g.Q;
      break;
  }
  if (p.num.chunk <= 0) p.num.chunk = 1;
  p.ws_touch = workspace != nullptr ? static_cast<int64_t>(workspace_bytes) : 0;
  constexpr int kThreads = 256;
  const int64_t blocks = std::clamp<int64_t>((p.total + kThreads - 1) / kThreads, 1, 1024);
  auto* ws = static_cast<unsigned char*>(workspace);
  if (num.acc_f64)
    libs::enqueue(conv_kernel<double>, static_cast<unsigned>(blocks), kThreads, 0, stream, p, a, b, out, ws);
  else libs::enqueue(conv_kernel<float>, static_cast<unsigned>(blocks), kThreads, 0, stream, p, a, b, out, ws);
}

}  // namespace ember::sim::libs::conv

#endif  // EMBER_WITH_CUDNN
