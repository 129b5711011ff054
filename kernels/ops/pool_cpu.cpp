// Pooling ops: the CPU reference kernels (plain loops over any strides, accumulating in double,
// parallel over (n, c) planes), and max_pool2d's default "planes" variant (the same loop in the
// input's precision with masked selects). See pool.h for the definitions; pool.cpp defines the ops
// and registers these through register_cpu_*.
#include "kernels/ops/pool.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/parallel.h"
#include "kernels/registry.h"

namespace ember {

namespace {

template <class T>
struct Plane {  // strided element access of one 4-D tensor
  T* p;
  int64_t s0, s1, s2, s3;
  T& at(int64_t n, int64_t c, int64_t h, int64_t w) const { return p[n * s0 + c * s1 + h * s2 + w * s3]; }
};

template <class T>
Plane<T> plane(const Tensor& t) {
  return {static_cast<T*>(t.data_ptr()), t.strides()[0], t.strides()[1], t.strides()[2], t.strides()[3]};
}

// Runs f(n, c) for every (image, channel) plane, the planes spread over the thread pool.
template <class F>
void for_each_plane(const PoolGeom& g, F&& f) {
  parallel_for(0, g.N * g.C, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t nc = lo; nc < hi; ++nc) f(nc / g.C, nc % g.C);
  });
}

template <class T>
void max_pool_cpu_impl(const PoolGeom& g, const Tensor& x, const Tensor& y, const Tensor& ind) {
  auto X = plane<const T>(x);
  auto Y = plane<T>(y);
  auto I = plane<int64_t>(ind);
  for_each_plane(g, [&](int64_t n, int64_t c) {
    for (int64_t p = 0; p < g.P; ++p) {
      int64_t h0, h1;
      pool::max_window(p, g.sh, g.ph, g.kh, g.H, h0, h1);
      for (int64_t q = 0; q < g.Q; ++q) {
        int64_t w0, w1;
        pool::max_window(q, g.sw, g.pw, g.kw, g.W, w0, w1);
        double best = -INFINITY;
        int64_t idx = h0 * g.W + w0;
        const T* plane = &X.at(n, c, 0, 0);
        for (int64_t h = h0; h < h1; ++h) {
          const T* row = plane + h * X.s2;
          for (int64_t w = w0; w < w1; ++w) {
            const double v = static_cast<double>(row[w * X.s3]);
            // a branch-free select: on real data the comparison is a coin flip, and compilers
            // turn the obvious ternaries back into mispredicted branches
            const uint64_t take = static_cast<uint64_t>((v > best) | (v != v));
            const uint64_t mask = uint64_t{0} - take;
            uint64_t vb, bb;
            std::memcpy(&vb, &v, 8);
            std::memcpy(&bb, &best, 8);
            bb = (vb & mask) | (bb & ~mask);
            std::memcpy(&best, &bb, 8);
            idx += static_cast<int64_t>(take) * (h * g.W + w - idx);
          }
        }
        if (g.relu) pool::relu_max(best, idx);
        Y.at(n, c, p, q) = static_cast<T>(best);
        I.at(n, c, p, q) = idx;
      }
    }
  });
}

// best, idx = v, i when t, as masks rather than ternaries: on real data t is a coin flip, and
// compilers turn ternaries back into branches that mispredict half the time (docs/perf.md,
// "Measurements behind kernel decisions"); the masked form also lets the 2x2 loop vectorise.
template <class A>
inline void take_if(bool t, A v, int64_t i, A& best, int64_t& idx) {
  using U = std::conditional_t<sizeof(A) == 8, uint64_t, uint32_t>;
  const U m = U(0) - static_cast<U>(t);
  U vb, bb;
  std::memcpy(&vb, &v, sizeof(A));
  std::memcpy(&bb, &best, sizeof(A));
  bb = (vb & m) | (bb & ~m);
  std::memcpy(&best, &bb, sizeof(A));
  const int64_t mi = -static_cast<int64_t>(t);
  idx = (i & mi) | (idx & ~mi);
}

// The "planes" variant (the default): the same scan order and tie / NaN rules as the reference
// loop above, but in the input's own precision (f32 for f16/bf16, whose every value f32 holds
// exactly, so the maximum and its index are the reference's bit for bit) and with the common
// MNIST / VGG case, a 2x2 window at stride 2 without padding over unit-stride rows, as a loop over
// output columns the compiler turns into vector compares and blends. The reference spends most of
// its time in the double conversion and the per-element index arithmetic of the generic loop.
template <class T>
void max_pool_planes_impl(const PoolGeom& g, const Tensor& x, const Tensor& y, const Tensor& ind) {
  using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
  auto X = plane<const T>(x);
  auto Y = plane<T>(y);
  auto I = plane<int64_t>(ind);
  const bool k2s2 =
      g.kh == 2 && g.kw == 2 && g.sh == 2 && g.sw == 2 && g.ph == 0 && g.pw == 0 && X.s3 == 1 && Y.s3 == 1 && I.s3 == 1;
  for_each_plane(g, [&](int64_t n, int64_t c) {
    thread_local std::vector<A> row_best;  // one output row's maxima and window positions (k2s2)
    thread_local std::vector<int32_t> row_code;
    if (k2s2 && static_cast<int64_t>(row_best.size()) < g.Q) {
      row_best.resize(static_cast<size_t>(g.Q));
      row_code.resize(static_cast<size_t>(g.Q));
    }
    const T* xp = &X.at(n, c, 0, 0);
    T* yp = &Y.at(n, c, 0, 0);
    int64_t* ip = &I.at(n, c, 0, 0);
    for (int64_t p = 0; p < g.P; ++p) {
      if (k2s2) {
        // window rows 2p and 2p + 1 are both inside the input (P = floor(H / 2) without padding)
        const T* r0 = xp + 2 * p * X.s2;
        const T* r1 = r0 + X.s2;
        T* yrow = yp + p * Y.s2;
        int64_t* irow = ip + p * I.s2;
        const int64_t base = 2 * p * g.W;
        // two passes so the first is a plain float loop the compiler vectorises: the maximum and
        // the winner's position in the window (0..3) as a 32-bit code, then the int64 indices
        A* best_row = row_best.data();
        int32_t* code_row = row_code.data();
        for (int64_t q = 0; q < g.Q; ++q) {
          const A a = static_cast<A>(r0[2 * q]), b = static_cast<A>(r0[2 * q + 1]);
          const A cc = static_cast<A>(r1[2 * q]), d = static_cast<A>(r1[2 * q + 1]);
          // scan order a, b, c, d: a later value wins when strictly larger or NaN (the last NaN wins)
          A best = a;
          int32_t code = 0;
          bool t = (b > best) | (b != b);
          best = t ? b : best;
          code = t ? 1 : code;
          t = (cc > best) | (cc != cc);
          best = t ? cc : best;
          code = t ? 2 : code;
          t = (d > best) | (d != d);
          best = t ? d : best;
          code = t ? 3 : code;
          best_row[q] = best;
          code_row[q] = code;
        }
        for (int64_t q = 0; q < g.Q; ++q) {
          A best = best_row[q];
          int64_t idx = base + 2 * q + (code_row[q] & 1) + (code_row[q] >> 1) * g.W;
          if (g.relu) pool::relu_max(best, idx);
          yrow[q] = static_cast<T>(best);
          irow[q] = idx;
        }
        continue;
      }
      int64_t h0, h1;
      pool::max_window(p, g.sh, g.ph, g.kh, g.H, h0, h1);
      for (int64_t q = 0; q < g.Q; ++q) {
        int64_t w0, w1;
        pool::max_window(q, g.sw, g.pw, g.kw, g.W, w0, w1);
        A best = -std::numeric_limits<A>::infinity();
        int64_t idx = h0 * g.W + w0;
        for (int64_t h = h0; h < h1; ++h) {
          const T* row = xp + h * X.s2;
          for (int64_t w = w0; w < w1; ++w) {
            const A v = static_cast<A>(row[w * X.s3]);
            take_if((v > best) | (v != v), v, h * g.W + w, best, idx);
          }
        }
        if (g.relu) pool::relu_max(best, idx);
        yp[p * Y.s2 + q * Y.s3] = static_cast<T>(best);
        ip[p * I.s2 + q * I.s3] = idx;
      }
    }
  });
}

void max_pool2d_planes_cpu(const KernelCall& c) {
  PoolGeom g = pool_geometry("max_pool2d", c.in[0].shape(), c.attr<PoolAttrs>());
  EMBER_DISPATCH_FLOAT(c.in[0].dtype(), "max_pool2d",
                       [&] { max_pool_planes_impl<scalar_t>(g, c.in[0], c.out[0], c.out[1]); });
}

void max_pool2d_cpu(const KernelCall& c) {
  PoolGeom g = pool_geometry("max_pool2d", c.in[0].shape(), c.attr<PoolAttrs>());
  EMBER_DISPATCH_FLOAT(c.in[0].dtype(), "max_pool2d",
                       [&] { max_pool_cpu_impl<scalar_t>(g, c.in[0], c.out[0], c.out[1]); });
}

template <class T>
void max_pool_backward_cpu_impl(const PoolGeom& g, const Tensor& gy, const Tensor& ind, const Tensor& dx) {
  auto G = plane<const T>(gy);
  auto I = plane<const int64_t>(ind);
  auto DX = plane<T>(dx);
  parallel_for(0, g.N * g.C, 1, [&](int64_t lo, int64_t hi) {
    std::vector<double> acc(static_cast<size_t>(g.H * g.W));
    for (int64_t nc = lo; nc < hi; ++nc) {
      const int64_t n = nc / g.C, c = nc % g.C;
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t p = 0; p < g.P; ++p)
        for (int64_t q = 0; q < g.Q; ++q) {
          const int64_t idx = I.at(n, c, p, q);
          if (idx == -1) continue;  // a window relu zeroed (Note [relu after max pooling])
          EMBER_CHECK(idx >= 0 && idx < g.H * g.W, "max_pool2d_backward: index ", idx, " at [", n, ", ", c, ", ", p,
                      ", ", q, "] is out of range for an input plane of ", g.H, "x", g.W);
          acc[static_cast<size_t>(idx)] += static_cast<double>(G.at(n, c, p, q));
        }
      for (int64_t h = 0; h < g.H; ++h)
        for (int64_t w = 0; w < g.W; ++w) DX.at(n, c, h, w) = static_cast<T>(acc[static_cast<size_t>(h * g.W + w)]);
    }
  });
}

void max_pool2d_backward_cpu(const KernelCall& c) {
  const auto& a = c.attr<PoolAttrs>();
  PoolGeom g = pool_geometry("max_pool2d_backward", {c.in[0].shape()[0], c.in[0].shape()[1], a.size[0], a.size[1]}, a);
  EMBER_DISPATCH_FLOAT(c.in[0].dtype(), "max_pool2d_backward",
                       [&] { max_pool_backward_cpu_impl<scalar_t>(g, c.in[0], c.in[1], c.out[0]); });
}

// Average pooling's windows along one dim (rows or columns), for the shared loops below: the
// window of output o, [lo, hi) clipped to the input, with the extent its sum is divided by, and
// the outputs whose window may hold input index i, [first, last).
struct AvgDim {
  int64_t s, pad, k, in, out;
  bool include_pad;
  void window(int64_t o, int64_t& lo, int64_t& hi, int64_t& extent) const {
    pool::avg_window(o, s, pad, k, in, include_pad, lo, hi, extent);
  }
  void covering(int64_t i, int64_t& first, int64_t& last) const { pool::covering(i, s, pad, k, out, first, last); }
};
struct AdaptiveDim {
  int64_t in, out;
  void window(int64_t o, int64_t& lo, int64_t& hi, int64_t& extent) const {
    lo = pool::bin_start(o, in, out);
    hi = pool::bin_end(o, in, out);
    extent = hi - lo;
  }
  void covering(int64_t i, int64_t& first, int64_t& last) const { pool::bins_covering(i, in, out, first, last); }
};

// y(p, q) = the mean of x over the window of (p, q), summed in double.
template <class T, class Dim>
void avg_forward_impl(const PoolGeom& g, const Dim& hd, const Dim& wd, const Tensor& x, const Tensor& y) {
  auto X = plane<const T>(x);
  auto Y = plane<T>(y);
  for_each_plane(g, [&](int64_t n, int64_t c) {
    for (int64_t p = 0; p < g.P; ++p) {
      int64_t h0, h1, eh;
      hd.window(p, h0, h1, eh);
      for (int64_t q = 0; q < g.Q; ++q) {
        int64_t w0, w1, ew;
        wd.window(q, w0, w1, ew);
        double s = 0;
        const T* plane = &X.at(n, c, 0, 0);
        for (int64_t h = h0; h < h1; ++h) {
          const T* row = plane + h * X.s2;
          for (int64_t w = w0; w < w1; ++w) s += static_cast<double>(row[w * X.s3]);
        }
        Y.at(n, c, p, q) = static_cast<T>(s / static_cast<double>(eh * ew));
      }
    }
  });
}

// dx(h, w) = the sum of gy(p, q) / (window extent) over the outputs whose window holds (h, w):
// a gather per input element.
template <class T, class Dim>
void avg_backward_impl(const PoolGeom& g, const Dim& hd, const Dim& wd, const Tensor& gy, const Tensor& dx) {
  auto G = plane<const T>(gy);
  auto DX = plane<T>(dx);
  for_each_plane(g, [&](int64_t n, int64_t c) {
    for (int64_t h = 0; h < g.H; ++h)
      for (int64_t w = 0; w < g.W; ++w) {
        int64_t p0, p1, q0, q1;
        hd.covering(h, p0, p1);
        wd.covering(w, q0, q1);
        double s = 0;
        for (int64_t p = p0; p < p1; ++p) {
          int64_t h0, h1, eh;
          hd.window(p, h0, h1, eh);
          if (h < h0 || h >= h1) continue;
          for (int64_t q = q0; q < q1; ++q) {
            int64_t w0, w1, ew;
            wd.window(q, w0, w1, ew);
            if (w < w0 || w >= w1) continue;
            s += static_cast<double>(G.at(n, c, p, q)) / static_cast<double>(eh * ew);
          }
        }
        DX.at(n, c, h, w) = static_cast<T>(s);
      }
  });
}

AvgDim rows_of(const PoolGeom& g) { return {g.sh, g.ph, g.kh, g.H, g.P, g.count_include_pad}; }
AvgDim cols_of(const PoolGeom& g) { return {g.sw, g.pw, g.kw, g.W, g.Q, g.count_include_pad}; }

void avg_pool2d_cpu(const KernelCall& c) {
  PoolGeom g = pool_geometry("avg_pool2d", c.in[0].shape(), c.attr<PoolAttrs>());
  EMBER_DISPATCH_FLOAT(c.in[0].dtype(), "avg_pool2d",
                       [&] { avg_forward_impl<scalar_t>(g, rows_of(g), cols_of(g), c.in[0], c.out[0]); });
}

void avg_pool2d_backward_cpu(const KernelCall& c) {
  const auto& a = c.attr<PoolAttrs>();
  PoolGeom g = pool_geometry("avg_pool2d_backward", {c.in[0].shape()[0], c.in[0].shape()[1], a.size[0], a.size[1]}, a);
  EMBER_DISPATCH_FLOAT(c.in[0].dtype(), "avg_pool2d_backward",
                       [&] { avg_backward_impl<scalar_t>(g, rows_of(g), cols_of(g), c.in[0], c.out[0]); });
}

void adaptive_cpu(const KernelCall& c) {
  PoolGeom g = adaptive_geometry("adaptive_avg_pool2d", c.in[0].shape(), c.attr<AdaptivePoolAttrs>());
  EMBER_DISPATCH_FLOAT(c.in[0].dtype(), "adaptive_avg_pool2d", [&] {
    avg_forward_impl<scalar_t>(g, AdaptiveDim{g.H, g.P}, AdaptiveDim{g.W, g.Q}, c.in[0], c.out[0]);
  });
}

void adaptive_backward_cpu(const KernelCall& c) {
  const auto& a = c.attr<AdaptivePoolAttrs>();
  PoolGeom g = adaptive_geometry("adaptive_avg_pool2d_backward",
                                 {c.in[0].shape()[0], c.in[0].shape()[1], a.size[0], a.size[1]}, a);
  EMBER_DISPATCH_FLOAT(c.in[0].dtype(), "adaptive_avg_pool2d_backward", [&] {
    avg_backward_impl<scalar_t>(g, AdaptiveDim{g.H, g.P}, AdaptiveDim{g.W, g.Q}, c.in[0], c.out[0]);
  });
}

// One CPU variant over the float types (every pooling kernel here takes them).
void add_cpu_variant(OpInfo& info, const char* name, KernelFn fn, const char* note, uint32_t flags = 0) {
  info.add_variant(
      {.name = name, .device = DeviceType::cpu, .fn = fn, .dtypes = kFloatTypes, .flags = flags, .note = note});
}

}  // namespace

void register_cpu_max_pool2d(OpInfo& info) {
  add_cpu_variant(info, "cpu", max_pool2d_cpu, "loop per (n, c) plane in double", kReference);
  add_cpu_variant(info, "planes", max_pool2d_planes_cpu,
                  "loop per (n, c) plane in the input's precision, 2x2 stride 2 vectorised");
}

void register_cpu_max_pool2d_backward(OpInfo& info) {
  add_cpu_variant(info, "cpu", max_pool2d_backward_cpu,
                  "scatter per (n, c) plane into a double buffer, indices checked");
}

void register_cpu_avg_pool2d(OpInfo& info) { add_cpu_variant(info, "cpu", avg_pool2d_cpu, "loop per (n, c) plane"); }

void register_cpu_avg_pool2d_backward(OpInfo& info) {
  add_cpu_variant(info, "cpu", avg_pool2d_backward_cpu, "gather per input element");
}

void register_cpu_adaptive_avg_pool2d(OpInfo& info) {
  add_cpu_variant(info, "cpu", adaptive_cpu, "loop per (n, c) plane");
}

void register_cpu_adaptive_avg_pool2d_backward(OpInfo& info) {
  add_cpu_variant(info, "cpu", adaptive_backward_cpu, "gather per input element");
}

}  // namespace ember
