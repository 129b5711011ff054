// conv2d, conv2d_backward_input, conv2d_backward_weight: the CPU engines. The op definitions
// (shape inference, vjps, cost, functional API) are in conv2d.cpp, which
// registers these variants through register_cpu_conv2d*; formulas in conv2d.h.
//
// CPU variants (per op), in registration order; the default is the first that accepts a call:
//   naive   (kReference, registered first so the generic tests compare everything with it): the
//           formula as plain loops over any strides, accumulating in double.
//   winograd (NCHW 3x3 stride 1, >= 8 channels per group each way): Winograd F(2x2, 3x3), Note
//           [conv winograd]; backward_weight: Note [conv winograd weight gradient].
//   im2col_blocked / col2im_blocked (NCHW; backward_weight only with C/G R S < 64): im2col of a
//           block of images side by side and one GEMM per block, Note [conv image blocks].
//   im2col  (channels-last, and what the others decline): per image and group, im2col into a
//           buffer, then the matmul op (so the fast CPU GEMM serves convolution too); col2im for
//           backward_input; backward_weight sums
//           per-image GEMMs into one partial per thread chunk, added in chunk order. Images are
//           split over the thread pool; with one image the GEMM itself runs in parallel (a
//           parallel_for inside a chunk runs inline). 1x1 stride-1 unpadded convolutions skip
//           im2col (the input already is the column matrix). f16/bf16 are computed in f32 and
//           rounded once.
#include "kernels/ops/conv2d.h"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/parallel.h"
#include "kernels/common/memory_format.h"
#include "kernels/functional.h"
#include "kernels/registry.h"

namespace ember {

namespace {

// ---- CPU: the naive reference (any strides, double accumulation) ----

template <class T>
struct View4 {
  T* p;
  int64_t s0, s1, s2, s3;
  T& operator()(int64_t a, int64_t b, int64_t c, int64_t d) const { return p[a * s0 + b * s1 + c * s2 + d * s3]; }
};
template <class T>
View4<T> view4(const Tensor& t) {
  return {static_cast<T*>(t.data_ptr()), t.strides()[0], t.strides()[1], t.strides()[2], t.strides()[3]};
}

// Output positions o in [0, out) whose input index o * stride + off lies in [0, in).
struct Range {
  int64_t lo, hi;
};
int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
Range valid_range(int64_t off, int64_t stride, int64_t in, int64_t out) {
  const int64_t lo = std::max<int64_t>(0, -floor_div(off, stride));  // ceil(-off / stride)
  const int64_t hi = std::min<int64_t>(out, floor_div(in - 1 - off, stride) + 1);
  return {lo, std::max(lo, hi)};
}

// The formula, one (image, output channel) plane at a time: every tap (c, r, s) adds w x over the
// output positions whose input is inside the image (no padding branches in the inner loop).
template <class T>
void conv_fwd_naive(const ConvGeom& g, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y) {
  auto X = view4<const T>(x), Wt = view4<const T>(w);
  auto Y = view4<T>(y);
  const T* bp = b.defined() ? static_cast<const T*>(b.data_ptr()) : nullptr;
  const int64_t bs = b.defined() ? b.strides()[0] : 0;
  parallel_for(0, g.N * g.K, 1, [&](int64_t lo, int64_t hi) {
    std::vector<double> acc(static_cast<size_t>(g.P * g.Q));
    for (int64_t nk = lo; nk < hi; ++nk) {
      const int64_t n = nk / g.K, k = nk % g.K, grp = k / g.Kg;
      std::fill(acc.begin(), acc.end(), bp ? static_cast<double>(bp[k * bs]) : 0.0);
      for (int64_t c = 0; c < g.Cg; ++c)
        for (int64_t r = 0; r < g.R; ++r) {
          const Range pr = valid_range(r * g.dh - g.ph, g.sh, g.H, g.P);
          for (int64_t s = 0; s < g.S; ++s) {
            const Range qr = valid_range(s * g.dw - g.pw, g.sw, g.W, g.Q);
            const double wv = static_cast<double>(Wt(k, c, r, s));
            for (int64_t p = pr.lo; p < pr.hi; ++p) {
              const T* xrow = &X(n, grp * g.Cg + c, p * g.sh - g.ph + r * g.dh, 0);
              double* arow = acc.data() + p * g.Q;
              const int64_t step = g.sw * X.s3, base = (s * g.dw - g.pw) * X.s3;
              for (int64_t q = qr.lo; q < qr.hi; ++q) arow[q] += wv * static_cast<double>(xrow[q * step + base]);
            }
          }
        }
      for (int64_t p = 0; p < g.P; ++p)
        for (int64_t q = 0; q < g.Q; ++q) Y(n, k, p, q) = static_cast<T>(acc[static_cast<size_t>(p * g.Q + q)]);
    }
  });
}

// dx, one (image, input channel) plane at a time: every (k, r, s) scatters w g into the input
// positions its valid outputs read (the adjoint of the forward loop).
template <class T>
void conv_bwd_input_naive(const ConvGeom& g, const Tensor& gy, const Tensor& w, const Tensor& dx) {
  auto GY = view4<const T>(gy), Wt = view4<const T>(w);
  auto DX = view4<T>(dx);
  parallel_for(0, g.N * g.C, 1, [&](int64_t lo, int64_t hi) {
    std::vector<double> acc(static_cast<size_t>(g.H * g.W));
    for (int64_t nc = lo; nc < hi; ++nc) {
      const int64_t n = nc / g.C, cc = nc % g.C, grp = cc / g.Cg, c = cc % g.Cg;
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t kk = 0; kk < g.Kg; ++kk) {
        const int64_t k = grp * g.Kg + kk;
        for (int64_t r = 0; r < g.R; ++r) {
          const Range pr = valid_range(r * g.dh - g.ph, g.sh, g.H, g.P);
          for (int64_t s = 0; s < g.S; ++s) {
            const Range qr = valid_range(s * g.dw - g.pw, g.sw, g.W, g.Q);
            const double wv = static_cast<double>(Wt(k, c, r, s));
            for (int64_t p = pr.lo; p < pr.hi; ++p) {
              const T* grow = &GY(n, k, p, 0);
              const int64_t base = (p * g.sh - g.ph + r * g.dh) * g.W + (s * g.dw - g.pw);  // + q sw >= 0
              for (int64_t q = qr.lo; q < qr.hi; ++q)
                acc[static_cast<size_t>(base + q * g.sw)] += wv * static_cast<double>(grow[q * GY.s3]);
            }
          }
        }
      }
      for (int64_t h = 0; h < g.H; ++h)
        for (int64_t ww = 0; ww < g.W; ++ww) DX(n, cc, h, ww) = static_cast<T>(acc[static_cast<size_t>(h * g.W + ww)]);
    }
  });
}

// dw[k, c, r, s] = sum over images and valid output positions of g x.
template <class T>
void conv_bwd_weight_naive(const ConvGeom& g, const Tensor& gy, const Tensor& x, const Tensor& dw) {
  auto GY = view4<const T>(gy), X = view4<const T>(x);
  auto DW = view4<T>(dw);
  parallel_for(0, g.K * g.Cg, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t kc = lo; kc < hi; ++kc) {
      const int64_t k = kc / g.Cg, c = kc % g.Cg, grp = k / g.Kg;
      for (int64_t r = 0; r < g.R; ++r) {
        const Range pr = valid_range(r * g.dh - g.ph, g.sh, g.H, g.P);
        for (int64_t s = 0; s < g.S; ++s) {
          const Range qr = valid_range(s * g.dw - g.pw, g.sw, g.W, g.Q);
          double acc = 0;
          for (int64_t n = 0; n < g.N; ++n)
            for (int64_t p = pr.lo; p < pr.hi; ++p) {
              const T* grow = &GY(n, k, p, 0);
              const T* xrow = &X(n, grp * g.Cg + c, p * g.sh - g.ph + r * g.dh, 0);
              const int64_t step = g.sw * X.s3, base = (s * g.dw - g.pw) * X.s3;
              for (int64_t q = qr.lo; q < qr.hi; ++q)
                acc += static_cast<double>(grow[q * GY.s3]) * static_cast<double>(xrow[q * step + base]);
            }
          DW(k, c, r, s) = static_cast<T>(acc);
        }
      }
    }
  });
}

// db (Note [conv bias gradient]). Channels-last (k the unit stride): a thread's run of k reads its
// part of every position's channels, one accumulator a channel. Otherwise a thread per k walks the
// (n, k) planes row by row with four accumulators, added in a fixed order at the end.
template <class T>
void conv_bias_grad_loop(const Tensor& gy, const Tensor& db) {
  auto GY = view4<const T>(gy);
  const Shape& s = gy.shape();
  T* out = static_cast<T*>(db.data_ptr());
  const int64_t os = db.strides()[0];
  if (GY.s1 == 1 && s[1] > 1) {
    parallel_for(0, s[1], 16, [&](int64_t lo, int64_t hi) {
      std::vector<double> acc(static_cast<size_t>(hi - lo), 0.0);
      for (int64_t n = 0; n < s[0]; ++n)
        for (int64_t p = 0; p < s[2]; ++p)
          for (int64_t q = 0; q < s[3]; ++q) {
            const T* px = &GY(n, lo, p, q);
            for (int64_t k = 0; k < hi - lo; ++k) acc[static_cast<size_t>(k)] += static_cast<double>(px[k]);
          }
      for (int64_t k = lo; k < hi; ++k) out[k * os] = static_cast<T>(acc[static_cast<size_t>(k - lo)]);
    });
    return;
  }
  parallel_for(0, s[1], 1, [&](int64_t lo, int64_t hi) {
    for (int64_t k = lo; k < hi; ++k) {
      double acc[4] = {0, 0, 0, 0};
      for (int64_t n = 0; n < s[0]; ++n)
        for (int64_t p = 0; p < s[2]; ++p) {
          const T* row = &GY(n, k, p, 0);
          int64_t q = 0;
          for (; q + 4 <= s[3]; q += 4)
            for (int j = 0; j < 4; ++j) acc[j] += static_cast<double>(row[(q + j) * GY.s3]);
          for (; q < s[3]; ++q) acc[0] += static_cast<double>(row[q * GY.s3]);
        }
      out[k * os] = static_cast<T>((acc[0] + acc[1]) + (acc[2] + acc[3]));
    }
  });
}

ConvGeom geom_of(const KernelCall& c, const char* op, const Shape& xs, const Shape& ws) {
  return conv_geometry(op, xs, ws, c.attr<Conv2dAttrs>());
}
Shape weight_shape_of(const KernelCall& c) {  // backward_weight: from the output
  return c.out[0].shape();
}

void conv2d_naive_cpu(const KernelCall& c) {
  ConvGeom g = geom_of(c, "conv2d", c.in[0].shape(), c.in[1].shape());
  EMBER_DISPATCH_FLOAT(c.in[0].dtype(), "conv2d",
                       [&] { conv_fwd_naive<scalar_t>(g, c.in[0], c.in[1], c.in[2], c.out[0]); });
}
void conv2d_backward_input_naive_cpu(const KernelCall& c) {
  ConvGeom g = geom_of(c, "conv2d_backward_input", c.out[0].shape(), c.in[1].shape());
  EMBER_DISPATCH_FLOAT(c.in[0].dtype(), "conv2d_backward_input",
                       [&] { conv_bwd_input_naive<scalar_t>(g, c.in[0], c.in[1], c.out[0]); });
}
void conv2d_backward_weight_naive_cpu(const KernelCall& c) {
  conv_bias_grad_apart(c);  // Note [conv bias gradient]
  ConvGeom g = geom_of(c, "conv2d_backward_weight", c.in[1].shape(), weight_shape_of(c));
  EMBER_DISPATCH_FLOAT(c.in[0].dtype(), "conv2d_backward_weight",
                       [&] { conv_bwd_weight_naive<scalar_t>(g, c.in[0], c.in[1], c.out[0]); });
}

// ---- CPU: im2col + matmul ----

// The dtype the im2col path computes in: f64 stays f64, everything else runs in f32.
DType compute_dtype(DType t) { return t == DType::f64 ? DType::f64 : DType::f32; }

// t in the compute dtype and the requested layout (no copy when it already is).
Tensor prepare(const Tensor& t, DType ct, bool channels_last) {
  if (!t.defined()) return t;
  Tensor u = t.detach();
  if (u.dtype() != ct) {
    Tensor v =
        empty_strided(u.shape(), channels_last ? channels_last_strides(u.shape()) : contiguous_strides(u.shape()),
                      TensorOptions().dtype(ct));
    copy_(v, u);
    return v;
  }
  return contiguous_as(u, channels_last);
}

// A scratch output in the compute dtype with out's layout, or out itself.
Tensor scratch_like(const Tensor& out, DType ct) {
  if (out.dtype() == ct) return out;
  return empty_strided(out.shape(), out.strides(), TensorOptions().dtype(ct));
}
void finish(const Tensor& out, const Tensor& scratch) {
  if (scratch.is_same(out)) return;
  Tensor o = out;
  copy_(o, scratch);
}

Tensor mview(const Tensor& base, int64_t rows, int64_t cols, int64_t row_stride, int64_t offset) {
  return make_view(base, {rows, cols}, {row_stride, 1}, base.offset() + offset);
}

// Images [0, N) split into one contiguous chunk per thread (deterministic for a thread count).
template <class F>
void for_image_chunks(int64_t N, const F& body) {
  const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>(N, num_threads()));
  parallel_for(0, chunks, 1, [&](int64_t lo, int64_t hi) {
    autograd::NoGradGuard no_grad;  // worker threads start in grad mode
    for (int64_t ch = lo; ch < hi; ++ch) body(ch, ch * N / chunks, (ch + 1) * N / chunks);
  });
}
int64_t image_chunks(int64_t N) { return std::max<int64_t>(1, std::min<int64_t>(N, num_threads())); }

// Per-thread scratch for the column / transform matrices, kept between calls: a fresh megabyte-sized
// buffer per call comes from mmap and is paid again in page faults on first touch (perf on the
// MNIST CNN, 1 thread: about a fifth of the run in the kernel's fault path). Buffers grow to the
// largest call up to kScratchKeep elements per slot; bigger requests get a temporary tensor.
constexpr int64_t kScratchKeep = int64_t{1} << 22;  // 16 MB of f32 per slot and thread
template <class T>
Tensor thread_scratch(int slot, int64_t n) {
  if (n > kScratchKeep) return empty({n}, dtype_v<T>);
  thread_local std::vector<T> bufs[3];
  std::vector<T>& b = bufs[slot];
  if (static_cast<int64_t>(b.size()) < n) b.resize(static_cast<size_t>(n));
  return from_blob(b.data(), {n}, dtype_v<T>);
}

bool is_pointwise(const ConvGeom& g) {
  return g.R == 1 && g.S == 1 && g.sh == 1 && g.sw == 1 && g.ph == 0 && g.pw == 0;
}

// col[(c R + r) S + s][p Q + q] = x[c][h][w] for one image and group (x: [Cg, H, W] planes of size HW)
// ld: the row stride of col (PQ for one image; nb PQ when nb images sit side by side)
template <class T>
void im2col_nchw(const ConvGeom& g, const T* x, T* col, int64_t ld = -1) {
  if (ld < 0) ld = g.P * g.Q;
  for (int64_t c = 0; c < g.Cg; ++c)
    for (int64_t r = 0; r < g.R; ++r)
      for (int64_t s = 0; s < g.S; ++s) {
        T* row = col + ((c * g.R + r) * g.S + s) * ld;
        const T* plane = x + c * g.H * g.W;
        for (int64_t p = 0; p < g.P; ++p) {
          const int64_t h = p * g.sh - g.ph + r * g.dh;
          T* dst = row + p * g.Q;
          if (h < 0 || h >= g.H) {
            std::fill(dst, dst + g.Q, T(0));
            continue;
          }
          const T* src = plane + h * g.W;
          for (int64_t q = 0; q < g.Q; ++q) {
            const int64_t w = q * g.sw - g.pw + s * g.dw;
            dst[q] = (w >= 0 && w < g.W) ? src[w] : T(0);
          }
        }
      }
}

// The transpose of im2col_nchw: colT[p Q + q][(c R + r) S + s] (the weight gradient's B operand).
template <class T>
void im2col_nchw_t(const ConvGeom& g, const T* x, T* colT) {
  const int64_t CRS = g.Cg * g.R * g.S;
  for (int64_t p = 0; p < g.P; ++p)
    for (int64_t q = 0; q < g.Q; ++q) {
      T* row = colT + (p * g.Q + q) * CRS;
      for (int64_t c = 0; c < g.Cg; ++c) {
        const T* plane = x + c * g.H * g.W;
        for (int64_t r = 0; r < g.R; ++r) {
          const int64_t h = p * g.sh - g.ph + r * g.dh;
          T* dst = row + (c * g.R + r) * g.S;
          if (h < 0 || h >= g.H) {
            std::fill(dst, dst + g.S, T(0));
            continue;
          }
          for (int64_t s = 0; s < g.S; ++s) {
            const int64_t w = q * g.sw - g.pw + s * g.dw;
            dst[s] = (w >= 0 && w < g.W) ? plane[h * g.W + w] : T(0);
          }
        }
      }
    }
}

template <class T>
void col2im_nchw(const ConvGeom& g, const T* col, T* x, int64_t ld = -1) {  // x += col, scattered back
  if (ld < 0) ld = g.P * g.Q;
  for (int64_t c = 0; c < g.Cg; ++c)
    for (int64_t r = 0; r < g.R; ++r)
      for (int64_t s = 0; s < g.S; ++s) {
        const T* row = col + ((c * g.R + r) * g.S + s) * ld;
        T* plane = x + c * g.H * g.W;
        for (int64_t p = 0; p < g.P; ++p) {
          const int64_t h = p * g.sh - g.ph + r * g.dh;
          if (h < 0 || h >= g.H) continue;
          const T* src = row + p * g.Q;
          T* dst = plane + h * g.W;
          for (int64_t q = 0; q < g.Q; ++q) {
            const int64_t w = q * g.sw - g.pw + s * g.dw;
            if (w >= 0 && w < g.W) dst[w] += src[q];
          }
        }
      }
}

// col[p Q + q][(r S + s) Cg + c] = x[h][w][c] for one image (x: HWC with C channels, from group's first channel)
template <class T>
void im2col_nhwc(const ConvGeom& g, const T* x, T* col) {
  const int64_t RSC = g.R * g.S * g.Cg;
  for (int64_t p = 0; p < g.P; ++p)
    for (int64_t q = 0; q < g.Q; ++q) {
      T* row = col + (p * g.Q + q) * RSC;
      for (int64_t r = 0; r < g.R; ++r) {
        const int64_t h = p * g.sh - g.ph + r * g.dh;
        for (int64_t s = 0; s < g.S; ++s) {
          const int64_t w = q * g.sw - g.pw + s * g.dw;
          T* dst = row + (r * g.S + s) * g.Cg;
          if (h < 0 || h >= g.H || w < 0 || w >= g.W) std::fill(dst, dst + g.Cg, T(0));
          else std::memcpy(dst, x + (h * g.W + w) * g.C, sizeof(T) * static_cast<size_t>(g.Cg));
        }
      }
    }
}

template <class T>
void col2im_nhwc(const ConvGeom& g, const T* col, T* x) {
  const int64_t RSC = g.R * g.S * g.Cg;
  for (int64_t p = 0; p < g.P; ++p)
    for (int64_t q = 0; q < g.Q; ++q) {
      const T* row = col + (p * g.Q + q) * RSC;
      for (int64_t r = 0; r < g.R; ++r) {
        const int64_t h = p * g.sh - g.ph + r * g.dh;
        if (h < 0 || h >= g.H) continue;
        for (int64_t s = 0; s < g.S; ++s) {
          const int64_t w = q * g.sw - g.pw + s * g.dw;
          if (w < 0 || w >= g.W) continue;
          const T* src = row + (r * g.S + s) * g.Cg;
          T* dst = x + (h * g.W + w) * g.C;
          for (int64_t c = 0; c < g.Cg; ++c) dst[c] += src[c];
        }
      }
    }
}

// dst[i][j] (row stride ld) = src[i][j] (contiguous [rows, cols]), optionally accumulating.
template <class T>
void copy_rows(const T* src, T* dst, int64_t rows, int64_t cols, int64_t ld, bool accumulate) {
  for (int64_t i = 0; i < rows; ++i) {
    T* d = dst + i * ld;
    const T* s = src + i * cols;
    if (accumulate)
      for (int64_t j = 0; j < cols; ++j) d[j] += s[j];
    else std::memcpy(d, s, sizeof(T) * static_cast<size_t>(cols));
  }
}

// x, w, y: compute dtype; layouts: NCHW with KCRS weight, or NHWC with KRSC weight.
template <class T>
void conv_fwd_im2col(const ConvGeom& g, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y) {
  const int64_t HW = g.H * g.W, PQ = g.P * g.Q, CRS = g.Cg * g.R * g.S;
  const bool pw1 = is_pointwise(g);
  const T* xp = static_cast<const T*>(x.data_ptr());
  const T* bp = b.defined() ? static_cast<const T*>(b.data_ptr()) : nullptr;
  T* yp = static_cast<T*>(y.data_ptr());
  // channels-last multiplies col [PQ, RSC] by W^T: transpose each group's weight once, so both
  // GEMM operands are dense rows
  std::vector<Tensor> wt(static_cast<size_t>(g.G));
  if (g.channels_last)
    for (int64_t grp = 0; grp < g.G; ++grp)
      wt[static_cast<size_t>(grp)] = mview(w, g.Kg, CRS, CRS, grp * g.Kg * CRS).t().contiguous();
  for_image_chunks(g.N, [&](int64_t, int64_t n0, int64_t n1) {
    Tensor col = pw1 ? Tensor() : empty({CRS * PQ}, dtype_v<T>);
    for (int64_t n = n0; n < n1; ++n)
      for (int64_t grp = 0; grp < g.G; ++grp) {
        Tensor wg = mview(w, g.Kg, CRS, CRS, grp * g.Kg * CRS);
        if (!g.channels_last) {
          Tensor colv;
          if (pw1) {
            colv = mview(x, g.Cg, HW, HW, n * g.C * HW + grp * g.Cg * HW);
          } else {
            im2col_nchw(g, xp + n * g.C * HW + grp * g.Cg * HW, col.data<T>());
            colv = mview(col, CRS, PQ, PQ, 0);
          }
          Tensor yg = mview(y, g.Kg, PQ, PQ, n * g.K * PQ + grp * g.Kg * PQ);
          call_into(OpId::matmul, {wg, colv}, {yg});
          if (bp)
            for (int64_t k = 0; k < g.Kg; ++k) {
              T* row = yp + n * g.K * PQ + (grp * g.Kg + k) * PQ;
              const T bv = bp[grp * g.Kg + k];
              for (int64_t i = 0; i < PQ; ++i) row[i] += bv;
            }
        } else {
          Tensor colv;
          if (pw1) {
            colv = mview(x, HW, g.Cg, g.C, n * HW * g.C + grp * g.Cg);
          } else {
            im2col_nhwc(g, xp + n * HW * g.C + grp * g.Cg, col.data<T>());
            colv = mview(col, PQ, CRS, CRS, 0);
          }
          T* yn = yp + n * PQ * g.K + grp * g.Kg;
          const Tensor& wtg = wt[static_cast<size_t>(grp)];
          if (g.G == 1) {
            call_into(OpId::matmul, {colv, wtg}, {mview(y, PQ, g.K, g.K, n * PQ * g.K)});
          } else {
            Tensor t = matmul(colv, wtg);  // [PQ, Kg], placed into every K-th row slot below
            copy_rows(t.data<T>(), yn, PQ, g.Kg, g.K, false);
          }
          if (bp)
            for (int64_t i = 0; i < PQ; ++i)
              for (int64_t k = 0; k < g.Kg; ++k) yn[i * g.K + k] += bp[grp * g.Kg + k];
        }
      }
  });
}

// gy, w, dx: compute dtype; dx is overwritten.
template <class T>
void conv_bwd_input_col2im(const ConvGeom& g, const Tensor& gy, const Tensor& w, const Tensor& dx) {
  const int64_t HW = g.H * g.W, PQ = g.P * g.Q, CRS = g.Cg * g.R * g.S;
  const bool pw1 = is_pointwise(g);
  T* dxp = static_cast<T*>(dx.data_ptr());
  for_image_chunks(g.N, [&](int64_t, int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      if (!pw1) std::fill(dxp + n * g.C * HW, dxp + (n + 1) * g.C * HW, T(0));
      for (int64_t grp = 0; grp < g.G; ++grp) {
        Tensor wg = mview(w, g.Kg, CRS, CRS, grp * g.Kg * CRS);
        if (!g.channels_last) {
          Tensor gyg = mview(gy, g.Kg, PQ, PQ, n * g.K * PQ + grp * g.Kg * PQ);
          if (pw1) {
            call_into(OpId::matmul, {wg.t(), gyg}, {mview(dx, g.Cg, HW, HW, n * g.C * HW + grp * g.Cg * HW)});
          } else {
            Tensor dcol = matmul(wg.t(), gyg);  // [CRS, PQ]
            col2im_nchw(g, dcol.data<T>(), dxp + n * g.C * HW + grp * g.Cg * HW);
          }
        } else {
          Tensor gyg = mview(gy, PQ, g.Kg, g.K, n * PQ * g.K + grp * g.Kg);
          Tensor dcol = matmul(gyg, wg);  // [PQ, CRS]
          T* dxn = dxp + n * HW * g.C + grp * g.Cg;
          if (pw1) copy_rows(dcol.data<T>(), dxn, HW, g.Cg, g.C, false);
          else col2im_nhwc(g, dcol.data<T>(), dxn);
        }
      }
    }
  });
}

// dw = the sum of the image chunks' weight-gradient partials, in chunk order (deterministic
// whatever the thread count's timing).
template <class T>
void sum_chunk_partials(const std::vector<T>& partial, int64_t chunks, int64_t wsize, const Tensor& dw) {
  T* out = static_cast<T*>(dw.data_ptr());
  std::fill(out, out + wsize, T(0));
  for (int64_t ch = 0; ch < chunks; ++ch) {
    const T* src = partial.data() + ch * wsize;
    for (int64_t i = 0; i < wsize; ++i) out[i] += src[i];
  }
}

// gy, x: compute dtype; dw (compute dtype, KCRS or KRSC memory) is overwritten.
template <class T>
void conv_bwd_weight_im2col(const ConvGeom& g, const Tensor& gy, const Tensor& x, const Tensor& dw) {
  const int64_t HW = g.H * g.W, PQ = g.P * g.Q, CRS = g.Cg * g.R * g.S;
  const bool pw1 = is_pointwise(g);
  const T* xp = static_cast<const T*>(x.data_ptr());
  const int64_t chunks = image_chunks(g.N), wsize = g.K * CRS;
  std::vector<T> partial(static_cast<size_t>(chunks * wsize), T(0));
  for_image_chunks(g.N, [&](int64_t ch, int64_t n0, int64_t n1) {
    T* acc = partial.data() + ch * wsize;
    Tensor col = pw1 ? Tensor() : thread_scratch<T>(0, CRS * PQ);
    for (int64_t n = n0; n < n1; ++n)
      for (int64_t grp = 0; grp < g.G; ++grp) {
        Tensor t;
        if (!g.channels_last) {
          Tensor colT;  // [PQ, CRS]
          if (pw1) {
            colT = mview(x, g.Cg, HW, HW, n * g.C * HW + grp * g.Cg * HW).t();
          } else {
            im2col_nchw_t(g, xp + n * g.C * HW + grp * g.Cg * HW, col.data<T>());
            colT = mview(col, PQ, CRS, CRS, 0);
          }
          t = matmul(mview(gy, g.Kg, PQ, PQ, n * g.K * PQ + grp * g.Kg * PQ), colT);  // [Kg, CRS]
        } else {
          Tensor colv;
          if (pw1) {
            colv = mview(x, HW, g.Cg, g.C, n * HW * g.C + grp * g.Cg);
          } else {
            im2col_nhwc(g, xp + n * HW * g.C + grp * g.Cg, col.data<T>());
            colv = mview(col, PQ, CRS, CRS, 0);
          }
          t = matmul(mview(gy, PQ, g.Kg, g.K, n * PQ * g.K + grp * g.Kg).t(), colv);  // [Kg, CRS]
        }
        const T* tp = t.data<T>();
        T* dst = acc + grp * g.Kg * CRS;
        for (int64_t i = 0; i < g.Kg * CRS; ++i) dst[i] += tp[i];
      }
  });
  sum_chunk_partials(partial, chunks, wsize, dw);
}

// ---- CPU: im2col over blocks of images (the default for NCHW) ----
//
// Note [conv image blocks]: the im2col variant above runs one GEMM per image and group. Where that
// GEMM is thin (MNIST's conv1: 32 x 9 x 784, and its weight gradient 32 x 784 x 9) the packed
// GEMM's fixed costs per call (packing, partial register tiles, the op dispatch) are a large share;
// blocking images is faster there (docs/perf.md, "CPU: ember's hand-written conv kernels").
// conv2's per-image GEMM (64 x 288 x 196) already runs near the GEMM's peak, and its 3x3 convs go
// to winograd anyway. Here the GEMM's long side covers nb images side by side
// (about kBlockCols columns): im2col writes image i's columns at [i PQ, (i + 1) PQ) of one column
// matrix, one GEMM serves the block, and the result is copied to (or read from) the images' planes.
//   forward:         Y_blk [Kg, nb PQ]  = W_g [Kg, CRS] x col [CRS, nb PQ]; Y_blk -> y (+ bias)
//   backward_input:  dcol [CRS, nb PQ]  = W_g^T x G_blk [Kg, nb PQ]; col2im per image
//   backward_weight: dW_g [Kg, CRS]    += G_blk [Kg, nb PQ] x col^T (col^T built directly)
// G_blk is the images' gradient planes gathered into one matrix. The column matrix of a block is
// CRS x kBlockCols values (conv2: 288 x ~1200 floats, 1.4 MB) instead of the whole batch's. Images
// are still split over the threads first (one chunk each), so the per-thread partial sums of the
// weight gradient are added in a fixed order (deterministic for a thread count).
constexpr int64_t kBlockCols = 1024;

int64_t images_per_block(const ConvGeom& g, int64_t n_images) {
  const int64_t PQ = std::max<int64_t>(1, g.P * g.Q);
  return std::max<int64_t>(1, std::min<int64_t>(n_images, (kBlockCols + PQ - 1) / PQ));
}

template <class T>
void conv_fwd_blocked(const ConvGeom& g, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y) {
  const int64_t HW = g.H * g.W, PQ = g.P * g.Q, CRS = g.Cg * g.R * g.S;
  const T* xp = static_cast<const T*>(x.data_ptr());
  const T* bp = b.defined() ? static_cast<const T*>(b.data_ptr()) : nullptr;
  T* yp = static_cast<T*>(y.data_ptr());
  for_image_chunks(g.N, [&](int64_t, int64_t n0, int64_t n1) {
    const int64_t nb_max = images_per_block(g, n1 - n0);
    Tensor col = thread_scratch<T>(0, CRS * nb_max * PQ);
    Tensor out = thread_scratch<T>(1, g.Kg * nb_max * PQ);
    for (int64_t nb0 = n0; nb0 < n1; nb0 += nb_max) {
      const int64_t nb = std::min(nb_max, n1 - nb0), L = nb * PQ;
      for (int64_t grp = 0; grp < g.G; ++grp) {
        for (int64_t i = 0; i < nb; ++i)
          im2col_nchw(g, xp + (nb0 + i) * g.C * HW + grp * g.Cg * HW, col.data<T>() + i * PQ, L);
        call_into(OpId::matmul, {mview(w, g.Kg, CRS, CRS, grp * g.Kg * CRS), mview(col, CRS, L, L, 0)},
                  {mview(out, g.Kg, L, L, 0)});
        const T* op = out.data<T>();
        for (int64_t i = 0; i < nb; ++i)
          for (int64_t k = 0; k < g.Kg; ++k) {
            const T* src = op + k * L + i * PQ;
            T* dst = yp + (nb0 + i) * g.K * PQ + (grp * g.Kg + k) * PQ;
            if (bp) {
              const T bv = bp[grp * g.Kg + k];
              for (int64_t j = 0; j < PQ; ++j) dst[j] = src[j] + bv;
            } else {
              std::memcpy(dst, src, sizeof(T) * static_cast<size_t>(PQ));
            }
          }
      }
    }
  });
}

// G_blk [Kg, nb PQ]: the gradient planes of images [n0, n0 + nb), group grp, side by side.
template <class T>
void gather_grad_block(const ConvGeom& g, const T* gyp, int64_t n0, int64_t nb, int64_t grp, T* dst) {
  const int64_t PQ = g.P * g.Q, L = nb * PQ;
  for (int64_t k = 0; k < g.Kg; ++k)
    for (int64_t i = 0; i < nb; ++i)
      std::memcpy(dst + k * L + i * PQ, gyp + (n0 + i) * g.K * PQ + (grp * g.Kg + k) * PQ,
                  sizeof(T) * static_cast<size_t>(PQ));
}

template <class T>
void conv_bwd_input_blocked(const ConvGeom& g, const Tensor& gy, const Tensor& w, const Tensor& dx) {
  const int64_t HW = g.H * g.W, PQ = g.P * g.Q, CRS = g.Cg * g.R * g.S;
  const T* gyp = static_cast<const T*>(gy.data_ptr());
  T* dxp = static_cast<T*>(dx.data_ptr());
  for_image_chunks(g.N, [&](int64_t, int64_t n0, int64_t n1) {
    const int64_t nb_max = images_per_block(g, n1 - n0);
    Tensor gblk = thread_scratch<T>(0, g.Kg * nb_max * PQ);
    Tensor dcol = thread_scratch<T>(1, CRS * nb_max * PQ);
    std::fill(dxp + n0 * g.C * HW, dxp + n1 * g.C * HW, T(0));
    for (int64_t nb0 = n0; nb0 < n1; nb0 += nb_max) {
      const int64_t nb = std::min(nb_max, n1 - nb0), L = nb * PQ;
      for (int64_t grp = 0; grp < g.G; ++grp) {
        gather_grad_block(g, gyp, nb0, nb, grp, gblk.data<T>());
        call_into(OpId::matmul, {mview(w, g.Kg, CRS, CRS, grp * g.Kg * CRS).t(), mview(gblk, g.Kg, L, L, 0)},
                  {mview(dcol, CRS, L, L, 0)});
        for (int64_t i = 0; i < nb; ++i)
          col2im_nchw(g, dcol.data<T>() + i * PQ, dxp + (nb0 + i) * g.C * HW + grp * g.Cg * HW, L);
      }
    }
  });
}

template <class T>
void conv_bwd_weight_blocked(const ConvGeom& g, const Tensor& gy, const Tensor& x, const Tensor& dw) {
  const int64_t HW = g.H * g.W, PQ = g.P * g.Q, CRS = g.Cg * g.R * g.S;
  const T* gyp = static_cast<const T*>(gy.data_ptr());
  const T* xp = static_cast<const T*>(x.data_ptr());
  const int64_t chunks = image_chunks(g.N), wsize = g.K * CRS;
  std::vector<T> partial(static_cast<size_t>(chunks * wsize), T(0));
  for_image_chunks(g.N, [&](int64_t ch, int64_t n0, int64_t n1) {
    T* acc = partial.data() + ch * wsize;
    const int64_t nb_max = images_per_block(g, n1 - n0);
    Tensor gblk = thread_scratch<T>(0, g.Kg * nb_max * PQ);
    Tensor col = thread_scratch<T>(1, CRS * nb_max * PQ);
    Tensor t = mview(thread_scratch<T>(2, g.Kg * CRS), g.Kg, CRS, CRS, 0);
    for (int64_t nb0 = n0; nb0 < n1; nb0 += nb_max) {
      const int64_t nb = std::min(nb_max, n1 - nb0), L = nb * PQ;
      for (int64_t grp = 0; grp < g.G; ++grp) {
        gather_grad_block(g, gyp, nb0, nb, grp, gblk.data<T>());
        for (int64_t i = 0; i < nb; ++i)  // col^T [nb PQ, CRS]: image i's rows at i PQ
          im2col_nchw_t(g, xp + (nb0 + i) * g.C * HW + grp * g.Cg * HW, col.data<T>() + i * PQ * CRS);
        call_into(OpId::matmul, {mview(gblk, g.Kg, L, L, 0), mview(col, L, CRS, CRS, 0)}, {t});
        const T* tp = t.data<T>();
        T* dst = acc + grp * g.Kg * CRS;
        for (int64_t j = 0; j < g.Kg * CRS; ++j) dst[j] += tp[j];
      }
    }
  });
  sum_chunk_partials(partial, chunks, wsize, dw);
}

// The blocked kernels run NCHW (a KRSC weight is converted); channels-last calls go to im2col. The
// layout is x's (forward), grad_output's (backward_input) or x's (backward_weight, input 1).
bool blocked_supports(const KernelCall& c) { return !runs_channels_last(c.in[0]); }
// backward_weight: only where a per-image GEMM is thin (CRS < 64 columns, e.g. MNIST's conv1 with
// CRS = 9). With CRS = 288 (conv2) the per-image GEMMs are faster than blocked ones (docs/perf.md,
// "CPU: ember's hand-written conv kernels"), so im2col runs
// (where winograd declines). C/G R S comes from x and the attributes, not from c.out[0], which the
// generic tests' variant probe leaves empty.
bool blocked_supports_weight(const KernelCall& c) {
  if (runs_channels_last(c.in[1]) || c.in[1].dim() != 4) return false;
  const Conv2dAttrs& a = c.attr<Conv2dAttrs>();
  if (a.conv.groups < 1) return false;
  return c.in[1].shape()[1] / a.conv.groups * a.size[0] * a.size[1] < 64;
}

void conv2d_blocked_cpu(const KernelCall& c) {
  const Tensor &x = c.in[0], &w = c.in[1], &b = c.in[2];
  const Tensor& y = c.out[0];
  ConvGeom g = geom_of(c, "conv2d", x.shape(), w.shape());
  if (y.numel() == 0) return;
  const DType ct = compute_dtype(x.dtype());
  Tensor xc = prepare(x, ct, false), wc = prepare(w, ct, false), bc = prepare(b, ct, false);
  Tensor yc = scratch_like(y, ct);
  if (ct == DType::f64) conv_fwd_blocked<double>(g, xc, wc, bc, yc);
  else conv_fwd_blocked<float>(g, xc, wc, bc, yc);
  finish(y, yc);
}

void conv2d_backward_input_blocked_cpu(const KernelCall& c) {
  const Tensor &gy = c.in[0], &w = c.in[1];
  const Tensor& dx = c.out[0];
  ConvGeom g = geom_of(c, "conv2d_backward_input", dx.shape(), w.shape());
  if (dx.numel() == 0) return;
  const DType ct = compute_dtype(gy.dtype());
  Tensor gc = prepare(gy, ct, false), wc = prepare(w, ct, false);
  Tensor dc = scratch_like(dx, ct);
  if (ct == DType::f64) conv_bwd_input_blocked<double>(g, gc, wc, dc);
  else conv_bwd_input_blocked<float>(g, gc, wc, dc);
  finish(dx, dc);
}

void conv2d_backward_weight_blocked_cpu(const KernelCall& c) {
  conv_bias_grad_apart(c);  // Note [conv bias gradient]
  const Tensor &gy = c.in[0], &x = c.in[1];
  const Tensor& dw = c.out[0];
  ConvGeom g = geom_of(c, "conv2d_backward_weight", x.shape(), dw.shape());
  const DType ct = compute_dtype(x.dtype());
  Tensor gc = prepare(gy, ct, false), xc = prepare(x, ct, false);
  Tensor dc = scratch_like(dw, ct);
  if (ct == DType::f64) conv_bwd_weight_blocked<double>(g, gc, xc, dc);
  else conv_bwd_weight_blocked<float>(g, gc, xc, dc);
  finish(dw, dc);
}

// ---- CPU: Winograd F(2x2, 3x3) (the default for 3x3 stride-1 NCHW convolutions) ----
//
// Note [conv winograd]: the 3x3 layers of the MNIST CNN already run the im2col GEMMs near the CPU
// GEMM's peak, so the remaining lever is arithmetic. Winograd's F(2x2, 3x3) computes a 2x2 output
// tile from a 4x4 input tile with 16 multiplications per (input, output) channel pair instead of
// 36 (2.25x fewer): per tile and channel V = B^T d B (input), per channel pair U = G g G^T (weight,
// once per call), then for each of the 16 positions e one GEMM M_e [Kg, T] = U_e [Kg, Cg] x V_e
// [Cg, T] over the T tiles of a block of images (one batched matmul call), and Y = A^T m A per
// tile (output, bias added there). backward_input is the same computation on grad_output with the
// weight transposed over channels and flipped in space (padding 2 - pad), which is what a stride-1
// 3x3 transposed convolution is. The transforms add and subtract a few values in the compute
// dtype (f32 for f32/f16/bf16), so results differ from the direct sum by a few units of rounding
// of the partial sums (the samples' tolerances hold; the f64 gradcheck runs it in f64).
//   B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1], G = [1 0 0; .5 .5 .5; .5 -.5 .5; 0 0 1],
//   A^T = [1 1 1 0; 0 1 -1 -1].
constexpr int64_t kWinoBlockTiles = 768;  // tiles per GEMM block: V and M of conv2 ~ 2 + 3 MB

struct WinoGeom {
  int64_t N, Cin, H, W;  // input planes (x, or grad_output for backward_input)
  int64_t Cout, P, Q;    // output planes
  int64_t G, Ci, Co;     // groups, input / output channels per group
  int64_t ph, pw;        // padding of the stride-1 3x3 convolution
};

// U [G][16][Co][Ci] from wt(grp, o, i, r, s), the 3x3 kernel linking input i to output o.
template <class T, class F>
std::vector<T> wino_weights(const WinoGeom& g, const F& wt) {
  std::vector<T> U(static_cast<size_t>(g.G * 16 * g.Co * g.Ci));
  for (int64_t grp = 0; grp < g.G; ++grp)
    for (int64_t o = 0; o < g.Co; ++o)
      for (int64_t i = 0; i < g.Ci; ++i) {
        T k[3][3], t[4][3];
        for (int r = 0; r < 3; ++r)
          for (int s = 0; s < 3; ++s) k[r][s] = wt(grp, o, i, r, s);
        for (int s = 0; s < 3; ++s) {  // G k
          t[0][s] = k[0][s];
          t[1][s] = T(0.5) * (k[0][s] + k[1][s] + k[2][s]);
          t[2][s] = T(0.5) * (k[0][s] - k[1][s] + k[2][s]);
          t[3][s] = k[2][s];
        }
        for (int a = 0; a < 4; ++a) {  // (G k) G^T
          const T u[4] = {t[a][0], T(0.5) * (t[a][0] + t[a][1] + t[a][2]), T(0.5) * (t[a][0] - t[a][1] + t[a][2]),
                          t[a][2]};
          for (int b = 0; b < 4; ++b) U[static_cast<size_t>(((grp * 16 + a * 4 + b) * g.Co + o) * g.Ci + i)] = u[b];
        }
      }
  return U;
}

template <class T>
void wino_conv(const WinoGeom& g, const T* x, const std::vector<T>& U, const T* bias, T* y) {
  const int64_t tp = (g.P + 1) / 2, tq = (g.Q + 1) / 2, tiles = tp * tq, HW = g.H * g.W, PQ = g.P * g.Q;
  for_image_chunks(g.N, [&](int64_t, int64_t n0, int64_t n1) {
    const int64_t per_block = kWinoBlockTiles / std::max<int64_t>(1, tiles);
    const int64_t nb_max = std::max<int64_t>(1, std::min<int64_t>(n1 - n0, per_block));
    const int64_t T_max = nb_max * tiles;
    Tensor V = thread_scratch<T>(0, 16 * g.Ci * T_max);
    Tensor M = thread_scratch<T>(1, 16 * g.Co * T_max);
    for (int64_t nb0 = n0; nb0 < n1; nb0 += nb_max) {
      const int64_t nb = std::min(nb_max, n1 - nb0), NT = nb * tiles;
      for (int64_t grp = 0; grp < g.G; ++grp) {
        T* vp = V.data<T>();
        for (int64_t i = 0; i < nb; ++i)
          for (int64_t c = 0; c < g.Ci; ++c) {
            const T* plane = x + (nb0 + i) * g.Cin * HW + (grp * g.Ci + c) * HW;
            for (int64_t ti = 0; ti < tp; ++ti)
              for (int64_t tj = 0; tj < tq; ++tj) {
                const int64_t h0 = 2 * ti - g.ph, w0 = 2 * tj - g.pw;
                T d[4][4];
                if (h0 >= 0 && h0 + 4 <= g.H && w0 >= 0 && w0 + 4 <= g.W) {
                  for (int a = 0; a < 4; ++a)
                    for (int b = 0; b < 4; ++b) d[a][b] = plane[(h0 + a) * g.W + w0 + b];
                } else {  // a border tile: zeros outside the image
                  for (int a = 0; a < 4; ++a)
                    for (int b = 0; b < 4; ++b) {
                      const int64_t h = h0 + a, w = w0 + b;
                      d[a][b] = (h >= 0 && h < g.H && w >= 0 && w < g.W) ? plane[h * g.W + w] : T(0);
                    }
                }
                T t[4][4];
                for (int b = 0; b < 4; ++b) {  // B^T d
                  t[0][b] = d[0][b] - d[2][b];
                  t[1][b] = d[1][b] + d[2][b];
                  t[2][b] = d[2][b] - d[1][b];
                  t[3][b] = d[1][b] - d[3][b];
                }
                const int64_t col = i * tiles + ti * tq + tj;
                for (int a = 0; a < 4; ++a) {  // (B^T d) B
                  const T v[4] = {t[a][0] - t[a][2], t[a][1] + t[a][2], t[a][2] - t[a][1], t[a][1] - t[a][3]};
                  for (int b = 0; b < 4; ++b) vp[((a * 4 + b) * g.Ci + c) * NT + col] = v[b];
                }
              }
          }
        // the 16 GEMMs as one batched matmul: [16, Co, Ci] x [16, Ci, NT] -> [16, Co, NT]
        Tensor Uv = from_blob(const_cast<T*>(U.data()) + grp * 16 * g.Co * g.Ci, {16, g.Co, g.Ci}, dtype_v<T>);
        call_into(OpId::matmul, {Uv, make_view(V, {16, g.Ci, NT}, {g.Ci * NT, NT, 1}, V.offset())},
                  {make_view(M, {16, g.Co, NT}, {g.Co * NT, NT, 1}, M.offset())});
        const T* mp = M.data<T>();
        for (int64_t i = 0; i < nb; ++i)
          for (int64_t o = 0; o < g.Co; ++o) {
            T* out = y + (nb0 + i) * g.Cout * PQ + (grp * g.Co + o) * PQ;
            const T bv = bias ? bias[grp * g.Co + o] : T(0);
            for (int64_t ti = 0; ti < tp; ++ti)
              for (int64_t tj = 0; tj < tq; ++tj) {
                const int64_t col = i * tiles + ti * tq + tj;
                T m[4][4];
                for (int e = 0; e < 16; ++e) m[e / 4][e % 4] = mp[(e * g.Co + o) * NT + col];
                T s[2][4];
                for (int b = 0; b < 4; ++b) {  // A^T m
                  s[0][b] = m[0][b] + m[1][b] + m[2][b];
                  s[1][b] = m[1][b] - m[2][b] - m[3][b];
                }
                const int64_t p0 = 2 * ti, q0 = 2 * tj;
                for (int a = 0; a < 2; ++a) {  // (A^T m) A, the tile's part inside the output
                  if (p0 + a >= g.P) break;
                  T* row = out + (p0 + a) * g.Q + q0;
                  row[0] = s[a][0] + s[a][1] + s[a][2] + bv;
                  if (q0 + 1 < g.Q) row[1] = s[a][1] - s[a][2] - s[a][3] + bv;
                }
              }
          }
      }
    }
  });
}

// Note [conv winograd weight gradient]: backward_weight by the same F(2x2, 3x3) algebra run
// backwards. With M = U ⊙ V per tile and Y = A^T M A, dL/dM = A dY A^T (the 2x2 gradient tile to
// 4x4; outputs past P, Q have no gradient, so the tile is zero-padded there), dL/dU = Σ_tiles dL/dM
// ⊙ V, and dW = G^T dL/dU G (4x4 to 3x3). Per block of kWinoBlockTiles tiles (whole images) and
// group: V [16][NT][Ci] = B^T d B and Mg [16][NT][Co] = A dY A^T, both channels-last (each image's
// planes are first copied channels-last into a small padded buffer, then every tile is transformed
// over contiguous channels, which vectorises; AVX-512 / AVX2 builds are picked at run time), then one
// batched matmul dU_e [Ci, Co] += V_e^T [Ci, NT] x Mg_e [NT, Co] for the 16 positions e (the GEMM
// reduces over the block's tiles; its operands are the forward's V and M sizes: conv2 ~ 1.5 + 3 MB).
// Images are split into one chunk per thread as in the other kernels; each chunk sums its blocks
// into its own dU [G][16][Ci][Co] (16/9 of a weight), the chunks' dU are added in chunk order
// (deterministic for a thread count), and G^T dU G runs once per channel pair at the end. This
// layout, not the forward's [16][Ci][NT] V with a [16][Co][NT] Mg and scalar per-plane transforms,
// because it runs in half the time (docs/perf.md, "Measurements behind kernel decisions").

// dst[((h + ph) Wp + w + pw) C + c] = src[c HW + h W + w]: C planes of H x W to channels-last rows
// of Wp positions (the rows of a padded image). Blocks of 16 channels, so the planes are read as 16
// sequential streams (the prefetchers follow them; reading all C planes at once did not) and each
// position's 16 values are written together.
template <class T>
[[gnu::always_inline]] inline void wino_planes_to_cl(const T* __restrict src, int64_t C, int64_t H, int64_t W,
                                                     int64_t ph, int64_t pw, int64_t Wp, T* __restrict dst) {
  const int64_t HW = H * W;
  constexpr int64_t kB = 16;
  for (int64_t c0 = 0; c0 < C; c0 += kB) {
    const int64_t cn = std::min(kB, C - c0);
    for (int64_t h = 0; h < H; ++h)
      for (int64_t w = 0; w < W; ++w) {
        T* d = dst + ((h + ph) * Wp + w + pw) * C + c0;
        const T* s = src + c0 * HW + h * W + w;
        if (cn == kB) {
          for (int64_t c = 0; c < kB; ++c) d[c] = s[c * HW];
        } else {
          for (int64_t c = 0; c < cn; ++c) d[c] = s[c * HW];
        }
      }
  }
}

// Mg = A dY A^T for the tiles of one image's gradient planes (Co channels, plane o at planes + o
// PQ): tile t's position e of channel o goes to m[e stride + t Co + o]. The planes are first turned
// channels-last into yt [Pp][Qp][Co] (Pp, Qp: P, Q rounded up to even; the extra row and column
// must hold zeros, which the caller's buffer keeps), so the transform runs over contiguous channels
// and vectorises; wino_grad_image picks an AVX-512 or AVX2 build of it where the CPU has one.
template <class T>
[[gnu::always_inline]] inline void wino_grad_image_impl(const T* __restrict planes, int64_t P, int64_t Q, int64_t Co,
                                                        T* __restrict yt, T* __restrict m, int64_t stride) {
  const int64_t tp = (P + 1) / 2, tq = (Q + 1) / 2, Qp = 2 * tq;
  wino_planes_to_cl(planes, Co, P, Q, 0, 0, Qp, yt);
  for (int64_t ti = 0; ti < tp; ++ti)
    for (int64_t tj = 0; tj < tq; ++tj) {
      const T* y00 = yt + (2 * ti * Qp + 2 * tj) * Co;
      const T* y01 = y00 + Co;
      const T* y10 = y00 + Qp * Co;
      const T* y11 = y10 + Co;
      T* mt = m + (ti * tq + tj) * Co;
#pragma GCC ivdep
      for (int64_t o = 0; o < Co; ++o) {
        // A dY: rows (y0), (y0 + y1), (y0 - y1), (-y1) of the tile's rows y0, y1; then (A dY) A^T
        const T u[4][2] = {{y00[o], y01[o]},
                           {y00[o] + y10[o], y01[o] + y11[o]},
                           {y00[o] - y10[o], y01[o] - y11[o]},
                           {-y10[o], -y11[o]}};
        for (int a = 0; a < 4; ++a) {
          mt[(a * 4 + 0) * stride + o] = u[a][0];
          mt[(a * 4 + 1) * stride + o] = u[a][0] + u[a][1];
          mt[(a * 4 + 2) * stride + o] = u[a][0] - u[a][1];
          mt[(a * 4 + 3) * stride + o] = -u[a][1];
        }
      }
    }
}

// V = B^T d B for the 4x4 input tiles of one image's planes (Ci channels, plane c at planes + c HW),
// channels last: tile t's position e of channel c goes to v[e stride + t Ci + c]. The planes are
// first copied channels-last into xt [Hp][Wp][Ci] (Hp = 2 tp + 2, Wp = 2 tq + 2) at row h + ph, column
// w + pw; the rest (padding) must hold zeros, which the caller's buffer keeps. Vectorised over the
// channels like wino_grad_image_impl.
template <class T>
[[gnu::always_inline]] inline void wino_input_image_impl(const T* __restrict planes, int64_t H, int64_t W, int64_t Ci,
                                                         int64_t ph, int64_t pw, int64_t tp, int64_t tq,
                                                         T* __restrict xt, T* __restrict v, int64_t stride) {
  const int64_t Wp = 2 * tq + 2;
  wino_planes_to_cl(planes, Ci, H, W, ph, pw, Wp, xt);
  for (int64_t ti = 0; ti < tp; ++ti)
    for (int64_t tj = 0; tj < tq; ++tj) {
      const T* r[4];
      for (int a = 0; a < 4; ++a) r[a] = xt + ((2 * ti + a) * Wp + 2 * tj) * Ci;
      T* vt = v + (ti * tq + tj) * Ci;
#pragma GCC ivdep
      for (int64_t c = 0; c < Ci; ++c) {
        T t[4][4];
        for (int b = 0; b < 4; ++b) {  // B^T d
          const T d0 = r[0][b * Ci + c], d1 = r[1][b * Ci + c], d2 = r[2][b * Ci + c], d3 = r[3][b * Ci + c];
          t[0][b] = d0 - d2;
          t[1][b] = d1 + d2;
          t[2][b] = d2 - d1;
          t[3][b] = d1 - d3;
        }
        for (int a = 0; a < 4; ++a) {  // (B^T d) B
          vt[(a * 4 + 0) * stride + c] = t[a][0] - t[a][2];
          vt[(a * 4 + 1) * stride + c] = t[a][1] + t[a][2];
          vt[(a * 4 + 2) * stride + c] = t[a][2] - t[a][1];
          vt[(a * 4 + 3) * stride + c] = t[a][1] - t[a][3];
        }
      }
    }
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx512f,avx2,fma"))) void wino_grad_image_avx512(const float* planes, int64_t P, int64_t Q,
                                                                        int64_t Co, float* yt, float* m,
                                                                        int64_t stride) {
  wino_grad_image_impl<float>(planes, P, Q, Co, yt, m, stride);
}
__attribute__((target("avx2,fma"))) void wino_grad_image_avx2(const float* planes, int64_t P, int64_t Q, int64_t Co,
                                                              float* yt, float* m, int64_t stride) {
  wino_grad_image_impl<float>(planes, P, Q, Co, yt, m, stride);
}
__attribute__((target("avx512f,avx2,fma"))) void wino_input_image_avx512(const float* planes, int64_t H, int64_t W,
                                                                         int64_t Ci, int64_t ph, int64_t pw, int64_t tp,
                                                                         int64_t tq, float* xt, float* v,
                                                                         int64_t stride) {
  wino_input_image_impl<float>(planes, H, W, Ci, ph, pw, tp, tq, xt, v, stride);
}
__attribute__((target("avx2,fma"))) void wino_input_image_avx2(const float* planes, int64_t H, int64_t W, int64_t Ci,
                                                               int64_t ph, int64_t pw, int64_t tp, int64_t tq,
                                                               float* xt, float* v, int64_t stride) {
  wino_input_image_impl<float>(planes, H, W, Ci, ph, pw, tp, tq, xt, v, stride);
}
#endif

// 2: AVX-512 (with AVX2, FMA), 1: AVX2 + FMA, 0: neither (or not x86-64).
int wino_isa() {
#if defined(__x86_64__) && defined(__GNUC__)
  static const int isa =
      __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? 2
      : __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")                                    ? 1
                                                                                                           : 0;
  return isa;
#else
  return 0;
#endif
}

template <class T>
void wino_grad_image(const T* planes, int64_t P, int64_t Q, int64_t Co, T* yt, T* m, int64_t stride) {
#if defined(__x86_64__) && defined(__GNUC__)
  if constexpr (std::is_same_v<T, float>) {
    if (wino_isa() == 2) return wino_grad_image_avx512(planes, P, Q, Co, yt, m, stride);
    if (wino_isa() == 1) return wino_grad_image_avx2(planes, P, Q, Co, yt, m, stride);
  }
#endif
  wino_grad_image_impl<T>(planes, P, Q, Co, yt, m, stride);
}

template <class T>
void wino_input_image(const T* planes, int64_t H, int64_t W, int64_t Ci, int64_t ph, int64_t pw, int64_t tp, int64_t tq,
                      T* xt, T* v, int64_t stride) {
#if defined(__x86_64__) && defined(__GNUC__)
  if constexpr (std::is_same_v<T, float>) {
    if (wino_isa() == 2) return wino_input_image_avx512(planes, H, W, Ci, ph, pw, tp, tq, xt, v, stride);
    if (wino_isa() == 1) return wino_input_image_avx2(planes, H, W, Ci, ph, pw, tp, tq, xt, v, stride);
  }
#endif
  wino_input_image_impl<T>(planes, H, W, Ci, ph, pw, tp, tq, xt, v, stride);
}

// x, gy (NCHW) and dw (KCRS, overwritten): compute dtype.
template <class T>
void wino_bwd_weight(const WinoGeom& g, const T* gy, const T* x, T* dw) {
  const int64_t tp = (g.P + 1) / 2, tq = (g.Q + 1) / 2, tiles = tp * tq, PQ = g.P * g.Q, HW = g.H * g.W;
  const int64_t usize = g.G * 16 * g.Ci * g.Co, chunks = image_chunks(g.N);
  std::vector<T> partial(static_cast<size_t>(chunks * usize), T(0));
  for_image_chunks(g.N, [&](int64_t ch, int64_t n0, int64_t n1) {
    T* acc = partial.data() + ch * usize;
    const int64_t per_block = kWinoBlockTiles / std::max<int64_t>(1, tiles);
    const int64_t nb_max = std::max<int64_t>(1, std::min<int64_t>(n1 - n0, per_block));
    const int64_t T_max = nb_max * tiles;
    Tensor V = thread_scratch<T>(0, 16 * g.Ci * T_max);
    Tensor M = thread_scratch<T>(1, 16 * T_max * g.Co);
    Tensor D = thread_scratch<T>(2, 16 * g.Ci * g.Co);
    std::vector<T> yt(static_cast<size_t>(2 * tp * 2 * tq * g.Co), T(0));              // past P, Q: zeros throughout
    std::vector<T> xt(static_cast<size_t>((2 * tp + 2) * (2 * tq + 2) * g.Ci), T(0));  // padding: zeros
    for (int64_t nb0 = n0; nb0 < n1; nb0 += nb_max) {
      const int64_t nb = std::min(nb_max, n1 - nb0), NT = nb * tiles;
      for (int64_t grp = 0; grp < g.G; ++grp) {
        T* vp = V.data<T>();
        T* mp = M.data<T>();
        for (int64_t i = 0; i < nb; ++i)
          wino_input_image(x + (nb0 + i) * g.Cin * HW + grp * g.Ci * HW, g.H, g.W, g.Ci, g.ph, g.pw, tp, tq, xt.data(),
                           vp + i * tiles * g.Ci, NT * g.Ci);
        for (int64_t i = 0; i < nb; ++i)
          wino_grad_image(gy + (nb0 + i) * g.Cout * PQ + grp * g.Co * PQ, g.P, g.Q, g.Co, yt.data(),
                          mp + i * tiles * g.Co, NT * g.Co);
        // [16, Ci, NT] (V [16][NT][Ci] read transposed) x [16, NT, Co] -> [16, Ci, Co]
        call_into(OpId::matmul,
                  {make_view(V, {16, g.Ci, NT}, {NT * g.Ci, 1, g.Ci}, V.offset()),
                   make_view(M, {16, NT, g.Co}, {NT * g.Co, g.Co, 1}, M.offset())},
                  {make_view(D, {16, g.Ci, g.Co}, {g.Ci * g.Co, g.Co, 1}, D.offset())});
        const T* dp = D.data<T>();
        T* dst = acc + grp * 16 * g.Ci * g.Co;
        for (int64_t j = 0; j < 16 * g.Ci * g.Co; ++j) dst[j] += dp[j];
      }
    }
  });
  for (int64_t ch = 1; ch < chunks; ++ch) {
    const T* src = partial.data() + ch * usize;
    for (int64_t j = 0; j < usize; ++j) partial[static_cast<size_t>(j)] += src[j];
  }
  // dW [grp Co + o][i] = G^T dU G, G^T = [1 .5 .5 0; 0 .5 -.5 0; 0 .5 .5 1]
  for (int64_t grp = 0; grp < g.G; ++grp)
    for (int64_t o = 0; o < g.Co; ++o)
      for (int64_t i = 0; i < g.Ci; ++i) {
        T u[4][4];
        for (int e = 0; e < 16; ++e)
          u[e / 4][e % 4] = partial[static_cast<size_t>(((grp * 16 + e) * g.Ci + i) * g.Co + o)];
        T t[3][4];
        for (int b = 0; b < 4; ++b) {  // G^T u
          t[0][b] = u[0][b] + T(0.5) * (u[1][b] + u[2][b]);
          t[1][b] = T(0.5) * (u[1][b] - u[2][b]);
          t[2][b] = T(0.5) * (u[1][b] + u[2][b]) + u[3][b];
        }
        T* out = dw + ((grp * g.Co + o) * g.Ci + i) * 9;
        for (int r = 0; r < 3; ++r) {  // (G^T u) G
          out[r * 3 + 0] = t[r][0] + T(0.5) * (t[r][1] + t[r][2]);
          out[r * 3 + 1] = T(0.5) * (t[r][1] - t[r][2]);
          out[r * 3 + 2] = T(0.5) * (t[r][1] + t[r][2]) + t[r][3];
        }
      }
}

// 3x3, stride 1, no dilation, NCHW, and at least kWinoMinChannels input and output channels per
// group: the transforms cost about as much per channel as the thin GEMMs save. With MNIST's conv1
// (1 -> 32 channels) the variant is several times slower than the blocked im2col both ways
// (docs/perf.md, "Measurements behind kernel decisions"). backward_input also needs
// padding <= 2 (its own is 2 - pad).
constexpr int64_t kWinoMinChannels = 8;
bool wino_shape(const ConvGeom& g) {
  return g.R == 3 && g.S == 3 && g.sh == 1 && g.sw == 1 && g.dh == 1 && g.dw == 1 && g.P > 0 && g.Q > 0 &&
         g.Cg >= kWinoMinChannels && g.Kg >= kWinoMinChannels;
}
bool wino_supports_fwd(const KernelCall& c) {
  if (runs_channels_last(c.in[0]) || c.in[0].dim() != 4 || c.in[1].dim() != 4) return false;
  ConvGeom g = geom_of(c, "conv2d", c.in[0].shape(), c.in[1].shape());
  return wino_shape(g);
}
bool wino_supports_bwd_input(const KernelCall& c) {
  if (runs_channels_last(c.in[0]) || c.out[0].dim() != 4 || c.in[1].dim() != 4) return false;
  ConvGeom g = geom_of(c, "conv2d_backward_input", c.out[0].shape(), c.in[1].shape());
  return wino_shape(g) && g.ph <= 2 && g.pw <= 2;
}

// backward_weight: x NCHW (input 1) and a dense KCRS weight gradient; any padding. The weight's
// shape comes from the operands and attributes, not from c.out[0] (the generic tests' variant
// probe passes empty outputs).
bool wino_supports_bwd_weight(const KernelCall& c) {
  const Tensor &gy = c.in[0], &x = c.in[1];
  if (runs_channels_last(x) || x.dim() != 4 || gy.dim() != 4) return false;
  if (c.out[0].dim() == 4 && !c.out[0].is_contiguous()) return false;
  const Conv2dAttrs& a = c.attr<Conv2dAttrs>();
  if (a.conv.groups < 1 || x.shape()[1] % a.conv.groups != 0 || gy.shape()[1] % a.conv.groups != 0) return false;
  const Shape ws{gy.shape()[1], x.shape()[1] / a.conv.groups, a.size[0], a.size[1]};
  ConvGeom g = geom_of(c, "conv2d_backward_weight", x.shape(), ws);
  return wino_shape(g);
}

void conv2d_winograd_cpu(const KernelCall& c) {
  const Tensor &x = c.in[0], &w = c.in[1], &b = c.in[2];
  const Tensor& y = c.out[0];
  ConvGeom g = geom_of(c, "conv2d", x.shape(), w.shape());
  if (y.numel() == 0) return;
  const DType ct = compute_dtype(x.dtype());
  Tensor xc = prepare(x, ct, false), wc = prepare(w, ct, false), bc = prepare(b, ct, false);
  Tensor yc = scratch_like(y, ct);
  const WinoGeom wg{g.N, g.C, g.H, g.W, g.K, g.P, g.Q, g.G, g.Cg, g.Kg, g.ph, g.pw};
  auto run = [&]<class T>(T) {
    const T* wp = wc.data<T>();
    // forward: output o of group grp is channel grp Kg + o, its input i reads w[k][i][r][s]
    auto U = wino_weights<T>(wg, [&](int64_t grp, int64_t o, int64_t i, int r, int s) {
      return wp[(((grp * g.Kg + o) * g.Cg + i) * 3 + r) * 3 + s];
    });
    wino_conv<T>(wg, xc.data<T>(), U, bc.defined() ? bc.data<T>() : nullptr, yc.data<T>());
  };
  if (ct == DType::f64) run(double{});
  else run(float{});
  finish(y, yc);
}

void conv2d_backward_input_winograd_cpu(const KernelCall& c) {
  const Tensor &gy = c.in[0], &w = c.in[1];
  const Tensor& dx = c.out[0];
  ConvGeom g = geom_of(c, "conv2d_backward_input", dx.shape(), w.shape());
  if (dx.numel() == 0) return;
  const DType ct = compute_dtype(gy.dtype());
  Tensor gc = prepare(gy, ct, false), wc = prepare(w, ct, false);
  Tensor dc = scratch_like(dx, ct);
  // dx = the stride-1 3x3 convolution of grad_output (K channels) with padding 2 - pad and the
  // weight w'[c][k][r][s] = w[k][c][2 - r][2 - s] (per group)
  const WinoGeom wg{g.N, g.K, g.P, g.Q, g.C, g.H, g.W, g.G, g.Kg, g.Cg, 2 - g.ph, 2 - g.pw};
  auto run = [&]<class T>(T) {
    const T* wp = wc.data<T>();
    auto U = wino_weights<T>(wg, [&](int64_t grp, int64_t o, int64_t i, int r, int s) {
      return wp[(((grp * g.Kg + i) * g.Cg + o) * 3 + (2 - r)) * 3 + (2 - s)];
    });
    wino_conv<T>(wg, gc.data<T>(), U, nullptr, dc.data<T>());
  };
  if (ct == DType::f64) run(double{});
  else run(float{});
  finish(dx, dc);
}

void conv2d_backward_weight_winograd_cpu(const KernelCall& c) {
  conv_bias_grad_apart(c);  // Note [conv bias gradient]
  const Tensor &gy = c.in[0], &x = c.in[1];
  const Tensor& dw = c.out[0];
  ConvGeom g = geom_of(c, "conv2d_backward_weight", x.shape(), dw.shape());
  const DType ct = compute_dtype(x.dtype());
  Tensor gc = prepare(gy, ct, false), xc = prepare(x, ct, false);
  Tensor dc = scratch_like(dw, ct);
  const WinoGeom wg{g.N, g.C, g.H, g.W, g.K, g.P, g.Q, g.G, g.Cg, g.Kg, g.ph, g.pw};
  if (ct == DType::f64) wino_bwd_weight<double>(wg, gc.data<double>(), xc.data<double>(), dc.data<double>());
  else wino_bwd_weight<float>(wg, gc.data<float>(), xc.data<float>(), dc.data<float>());
  finish(dw, dc);
}

void conv2d_im2col_cpu(const KernelCall& c) {
  const Tensor &x = c.in[0], &w = c.in[1], &b = c.in[2];
  const Tensor& y = c.out[0];
  ConvGeom g = geom_of(c, "conv2d", x.shape(), w.shape());
  g.channels_last = runs_channels_last(x);
  if (y.numel() == 0) return;
  const DType ct = compute_dtype(x.dtype());
  Tensor xc = prepare(x, ct, g.channels_last), wc = prepare(w, ct, g.channels_last), bc = prepare(b, ct, false);
  Tensor yc = scratch_like(y, ct);
  if (ct == DType::f64) conv_fwd_im2col<double>(g, xc, wc, bc, yc);
  else conv_fwd_im2col<float>(g, xc, wc, bc, yc);
  finish(y, yc);
}

void conv2d_backward_input_col2im_cpu(const KernelCall& c) {
  const Tensor &gy = c.in[0], &w = c.in[1];
  const Tensor& dx = c.out[0];
  ConvGeom g = geom_of(c, "conv2d_backward_input", dx.shape(), w.shape());
  g.channels_last = runs_channels_last(gy);
  if (dx.numel() == 0) return;
  const DType ct = compute_dtype(gy.dtype());
  Tensor gc = prepare(gy, ct, g.channels_last), wc = prepare(w, ct, g.channels_last);
  Tensor dc = scratch_like(dx, ct);
  if (ct == DType::f64) conv_bwd_input_col2im<double>(g, gc, wc, dc);
  else conv_bwd_input_col2im<float>(g, gc, wc, dc);
  finish(dx, dc);
}

void conv2d_backward_weight_im2col_cpu(const KernelCall& c) {
  conv_bias_grad_apart(c);  // Note [conv bias gradient]
  const Tensor &gy = c.in[0], &x = c.in[1];
  const Tensor& dw = c.out[0];
  ConvGeom g = geom_of(c, "conv2d_backward_weight", x.shape(), dw.shape());
  g.channels_last = runs_channels_last(x);
  const DType ct = compute_dtype(x.dtype());
  Tensor gc = prepare(gy, ct, g.channels_last), xc = prepare(x, ct, g.channels_last);
  Tensor dc = scratch_like(dw, ct);
  if (ct == DType::f64) conv_bwd_weight_im2col<double>(g, gc, xc, dc);
  else conv_bwd_weight_im2col<float>(g, gc, xc, dc);
  finish(dw, dc);
}

}  // namespace

void conv_bias_grad_cpu(const Tensor& gy, const Tensor& db) {
  EMBER_DISPATCH_FLOAT(gy.dtype(), "conv2d_backward_weight (bias)", [&] { conv_bias_grad_loop<scalar_t>(gy, db); });
}

void register_cpu_conv2d(OpInfo& info) {
  info.add_variant({.name = "naive",
                    .device = DeviceType::cpu,
                    .fn = conv2d_naive_cpu,
                    .dtypes = kFloatTypes,
                    .flags = kReference,
                    .note = "the formula as loops over any strides, double accumulation"});
  info.add_variant({.name = "winograd",
                    .device = DeviceType::cpu,
                    .fn = conv2d_winograd_cpu,
                    .dtypes = kFloatTypes,
                    .supports = wino_supports_fwd,
                    .note = "NCHW 3x3 stride 1: Winograd F(2x2, 3x3), 16 GEMMs per block of images"});
  info.add_variant({.name = "im2col_blocked",
                    .device = DeviceType::cpu,
                    .fn = conv2d_blocked_cpu,
                    .dtypes = kFloatTypes,
                    .supports = blocked_supports,
                    .note = "NCHW: im2col of a block of images + one matmul per block and group"});
  info.add_variant({.name = "im2col",
                    .device = DeviceType::cpu,
                    .fn = conv2d_im2col_cpu,
                    .dtypes = kFloatTypes,
                    .note = "im2col per image and group + the matmul op, images across threads"});
}

void register_cpu_conv2d_backward_input(OpInfo& info) {
  info.add_variant({.name = "naive",
                    .device = DeviceType::cpu,
                    .fn = unpool_apart<conv2d_backward_input_naive_cpu>,
                    .dtypes = kFloatTypes,
                    .flags = kReference,
                    .note = "the formula as loops over any strides, double accumulation"});
  info.add_variant({.name = "winograd",
                    .device = DeviceType::cpu,
                    .fn = unpool_apart<conv2d_backward_input_winograd_cpu>,
                    .dtypes = kFloatTypes,
                    .supports = wino_supports_bwd_input,
                    .note = "NCHW 3x3 stride 1: the flipped-weight convolution by Winograd F(2x2, 3x3)"});
  info.add_variant({.name = "col2im_blocked",
                    .device = DeviceType::cpu,
                    .fn = unpool_apart<conv2d_backward_input_blocked_cpu>,
                    .dtypes = kFloatTypes,
                    .supports = blocked_supports,
                    .note = "NCHW: matmul (W^T G) per block of images and group, then col2im"});
  info.add_variant({.name = "col2im",
                    .device = DeviceType::cpu,
                    .fn = unpool_apart<conv2d_backward_input_col2im_cpu>,
                    .dtypes = kFloatTypes,
                    .note = "matmul op (W^T g) per image and group, then col2im"});
}

void register_cpu_conv2d_backward_weight(OpInfo& info) {
  info.add_variant({.name = "naive",
                    .device = DeviceType::cpu,
                    .fn = unpool_apart<conv2d_backward_weight_naive_cpu>,
                    .dtypes = kFloatTypes,
                    .flags = kReference,
                    .note = "the formula as loops over any strides, double accumulation"});
  info.add_variant({.name = "winograd",
                    .device = DeviceType::cpu,
                    .fn = unpool_apart<conv2d_backward_weight_winograd_cpu>,
                    .dtypes = kFloatTypes,
                    .supports = wino_supports_bwd_weight,
                    .note = "NCHW 3x3 stride 1: Winograd F(2x2, 3x3), 16 GEMMs V^T (A dY A^T) per block of images"});
  info.add_variant({.name = "im2col_blocked",
                    .device = DeviceType::cpu,
                    .fn = unpool_apart<conv2d_backward_weight_blocked_cpu>,
                    .dtypes = kFloatTypes,
                    .supports = blocked_supports_weight,
                    .note = "NCHW: matmul (G col^T) per block of images, per-thread partial sums added in order"});
  info.add_variant({.name = "im2col",
                    .device = DeviceType::cpu,
                    .fn = unpool_apart<conv2d_backward_weight_im2col_cpu>,
                    .dtypes = kFloatTypes,
                    .note = "im2col + matmul op (g col^T) per image, per-thread partial sums added in order"});
}

}  // namespace ember
