// Pooling ops: the CPU reference kernels (plain loops over any strides, accumulating in double,
// parallel over (n, c) planes). See pool.h for the definitions; pool.cpp defines the ops and registers
// these through register_cpu_*.
#include "kernels/ops/pool.h"

#include <cmath>
#include <cstring>
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
        Y.at(n, c, p, q) = static_cast<T>(best);
        I.at(n, c, p, q) = idx;
      }
    }
  });
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
          EMBER_CHECK(idx >= 0 && idx < g.H * g.W, "max_pool2d_backward: index ", idx, " at [", n, ", ", c, ", ", p, ", ",
                      q, "] is out of range for an input plane of ", g.H, "x", g.W);
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

template <class T>
void avg_pool_cpu_impl(const PoolGeom& g, const Tensor& x, const Tensor& y) {
  auto X = plane<const T>(x);
  auto Y = plane<T>(y);
  for_each_plane(g, [&](int64_t n, int64_t c) {
    for (int64_t p = 0; p < g.P; ++p) {
      int64_t h0, h1, eh;
      pool::avg_window(p, g.sh, g.ph, g.kh, g.H, g.count_include_pad, h0, h1, eh);
      for (int64_t q = 0; q < g.Q; ++q) {
        int64_t w0, w1, ew;
        pool::avg_window(q, g.sw, g.pw, g.kw, g.W, g.count_include_pad, w0, w1, ew);
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

void avg_pool2d_cpu(const KernelCall& c) {
  PoolGeom g = pool_geometry("avg_pool2d", c.in[0].shape(), c.attr<PoolAttrs>());
  EMBER_DISPATCH_FLOAT(c.in[0].dtype(), "avg_pool2d", [&] { avg_pool_cpu_impl<scalar_t>(g, c.in[0], c.out[0]); });
}

template <class T>
void avg_pool_backward_cpu_impl(const PoolGeom& g, const Tensor& gy, const Tensor& dx) {
  auto G = plane<const T>(gy);
  auto DX = plane<T>(dx);
  for_each_plane(g, [&](int64_t n, int64_t c) {
    for (int64_t h = 0; h < g.H; ++h)
      for (int64_t w = 0; w < g.W; ++w) {
        int64_t p0, p1, q0, q1;
        pool::covering(h, g.sh, g.ph, g.kh, g.P, p0, p1);
        pool::covering(w, g.sw, g.pw, g.kw, g.Q, q0, q1);
        double s = 0;
        for (int64_t p = p0; p < p1; ++p) {
          int64_t h0, h1, eh;
          pool::avg_window(p, g.sh, g.ph, g.kh, g.H, g.count_include_pad, h0, h1, eh);
          for (int64_t q = q0; q < q1; ++q) {
            int64_t w0, w1, ew;
            pool::avg_window(q, g.sw, g.pw, g.kw, g.W, g.count_include_pad, w0, w1, ew);
            s += static_cast<double>(G.at(n, c, p, q)) / static_cast<double>(eh * ew);
          }
        }
        DX.at(n, c, h, w) = static_cast<T>(s);
      }
  });
}

void avg_pool2d_backward_cpu(const KernelCall& c) {
  const auto& a = c.attr<PoolAttrs>();
  PoolGeom g = pool_geometry("avg_pool2d_backward", {c.in[0].shape()[0], c.in[0].shape()[1], a.size[0], a.size[1]}, a);
  EMBER_DISPATCH_FLOAT(c.in[0].dtype(), "avg_pool2d_backward",
                       [&] { avg_pool_backward_cpu_impl<scalar_t>(g, c.in[0], c.out[0]); });
}

template <class T>
void adaptive_cpu_impl(const PoolGeom& g, const Tensor& x, const Tensor& y) {
  auto X = plane<const T>(x);
  auto Y = plane<T>(y);
  for_each_plane(g, [&](int64_t n, int64_t c) {
    for (int64_t p = 0; p < g.P; ++p) {
      const int64_t h0 = pool::bin_start(p, g.H, g.P), h1 = pool::bin_end(p, g.H, g.P);
      for (int64_t q = 0; q < g.Q; ++q) {
        const int64_t w0 = pool::bin_start(q, g.W, g.Q), w1 = pool::bin_end(q, g.W, g.Q);
        double s = 0;
        for (int64_t h = h0; h < h1; ++h)
          for (int64_t w = w0; w < w1; ++w) s += static_cast<double>(X.at(n, c, h, w));
        Y.at(n, c, p, q) = static_cast<T>(s / static_cast<double>((h1 - h0) * (w1 - w0)));
      }
    }
  });
}

void adaptive_cpu(const KernelCall& c) {
  PoolGeom g = adaptive_geometry("adaptive_avg_pool2d", c.in[0].shape(), c.attr<AdaptivePoolAttrs>());
  EMBER_DISPATCH_FLOAT(c.in[0].dtype(), "adaptive_avg_pool2d", [&] { adaptive_cpu_impl<scalar_t>(g, c.in[0], c.out[0]); });
}

template <class T>
void adaptive_backward_cpu_impl(const PoolGeom& g, const Tensor& gy, const Tensor& dx) {
  auto G = plane<const T>(gy);
  auto DX = plane<T>(dx);
  for_each_plane(g, [&](int64_t n, int64_t c) {
    for (int64_t h = 0; h < g.H; ++h)
      for (int64_t w = 0; w < g.W; ++w) {
        int64_t p0, p1, q0, q1;
        pool::bins_covering(h, g.H, g.P, p0, p1);
        pool::bins_covering(w, g.W, g.Q, q0, q1);
        double s = 0;
        for (int64_t p = p0; p < p1; ++p) {
          const int64_t h0 = pool::bin_start(p, g.H, g.P), h1 = pool::bin_end(p, g.H, g.P);
          if (h < h0 || h >= h1) continue;
          for (int64_t q = q0; q < q1; ++q) {
            const int64_t w0 = pool::bin_start(q, g.W, g.Q), w1 = pool::bin_end(q, g.W, g.Q);
            if (w < w0 || w >= w1) continue;
            s += static_cast<double>(G.at(n, c, p, q)) / static_cast<double>((h1 - h0) * (w1 - w0));
          }
        }
        DX.at(n, c, h, w) = static_cast<T>(s);
      }
  });
}

void adaptive_backward_cpu(const KernelCall& c) {
  const auto& a = c.attr<AdaptivePoolAttrs>();
  PoolGeom g = adaptive_geometry("adaptive_avg_pool2d_backward",
                                 {c.in[0].shape()[0], c.in[0].shape()[1], a.size[0], a.size[1]}, a);
  EMBER_DISPATCH_FLOAT(c.in[0].dtype(), "adaptive_avg_pool2d_backward",
                       [&] { adaptive_backward_cpu_impl<scalar_t>(g, c.in[0], c.out[0]); });
}

}  // namespace

void register_cpu_max_pool2d(OpInfo& info) {
  info.add_variant({.name = "cpu", .device = DeviceType::cpu, .fn = max_pool2d_cpu, .dtypes = kFloatTypes,
                    .note = "loop per (n, c) plane"});
}

void register_cpu_max_pool2d_backward(OpInfo& info) {
  info.add_variant({.name = "cpu", .device = DeviceType::cpu, .fn = max_pool2d_backward_cpu, .dtypes = kFloatTypes,
                    .note = "scatter per (n, c) plane into a double buffer, indices checked"});
}

void register_cpu_avg_pool2d(OpInfo& info) {
  info.add_variant({.name = "cpu", .device = DeviceType::cpu, .fn = avg_pool2d_cpu, .dtypes = kFloatTypes,
                    .note = "loop per (n, c) plane"});
}

void register_cpu_avg_pool2d_backward(OpInfo& info) {
  info.add_variant({.name = "cpu", .device = DeviceType::cpu, .fn = avg_pool2d_backward_cpu, .dtypes = kFloatTypes,
                    .note = "gather per input element"});
}

void register_cpu_adaptive_avg_pool2d(OpInfo& info) {
  info.add_variant({.name = "cpu", .device = DeviceType::cpu, .fn = adaptive_cpu, .dtypes = kFloatTypes,
                    .note = "loop per (n, c) plane"});
}

void register_cpu_adaptive_avg_pool2d_backward(OpInfo& info) {
  info.add_variant({.name = "cpu", .device = DeviceType::cpu, .fn = adaptive_backward_cpu, .dtypes = kFloatTypes,
                    .note = "gather per input element"});
}

}  // namespace ember
