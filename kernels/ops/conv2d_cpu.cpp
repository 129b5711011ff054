// conv2d, conv2d_backward_input, conv2d_backward_weight: the CPU engines. The op definitions
// (shape inference, vjps, samples, cost, benches, functional API) are in conv2d.cpp, which
// registers these variants through register_cpu_conv2d*; formulas in conv2d.h.
//
// CPU variants (per op):
//   naive   (kReference, registered first so the generic tests compare everything with it): the
//           formula as plain loops over any strides, accumulating in double.
//   im2col  (the default): per image and group, im2col into a buffer, then the matmul op (so the
//           fast CPU GEMM serves convolution too); col2im for backward_input; backward_weight sums
//           per-image GEMMs into one partial per thread chunk, added in chunk order. Images are
//           split over the thread pool; with one image the GEMM itself runs in parallel (a
//           parallel_for inside a chunk runs inline). 1x1 stride-1 unpadded convolutions skip
//           im2col (the input already is the column matrix). f16/bf16 are computed in f32 and
//           rounded once.
#include "kernels/ops/conv2d.h"

#include <algorithm>
#include <cstring>

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

ConvGeom geom_of(const KernelCall& c, const char* op, const Shape& xs, const Shape& ws) {
  return conv_geometry(op, xs, ws, c.attr<Conv2dAttrs>());
}
Shape weight_shape_of(const KernelCall& c) {  // backward_weight: from the output
  return c.out[0].shape();
}

void conv2d_naive_cpu(const KernelCall& c) {
  ConvGeom g = geom_of(c, "conv2d", c.in[0].shape(), c.in[1].shape());
  EMBER_DISPATCH_FLOAT(c.in[0].dtype(), "conv2d", [&] { conv_fwd_naive<scalar_t>(g, c.in[0], c.in[1], c.in[2], c.out[0]); });
}
void conv2d_backward_input_naive_cpu(const KernelCall& c) {
  ConvGeom g = geom_of(c, "conv2d_backward_input", c.out[0].shape(), c.in[1].shape());
  EMBER_DISPATCH_FLOAT(c.in[0].dtype(), "conv2d_backward_input",
                       [&] { conv_bwd_input_naive<scalar_t>(g, c.in[0], c.in[1], c.out[0]); });
}
void conv2d_backward_weight_naive_cpu(const KernelCall& c) {
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
    Tensor v = empty_strided(u.shape(), channels_last ? channels_last_strides(u.shape()) : contiguous_strides(u.shape()),
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

bool is_pointwise(const ConvGeom& g) {
  return g.R == 1 && g.S == 1 && g.sh == 1 && g.sw == 1 && g.ph == 0 && g.pw == 0;
}

// col[(c R + r) S + s][p Q + q] = x[c][h][w] for one image and group (x: [Cg, H, W] planes of size HW)
template <class T>
void im2col_nchw(const ConvGeom& g, const T* x, T* col) {
  const int64_t PQ = g.P * g.Q;
  for (int64_t c = 0; c < g.Cg; ++c)
    for (int64_t r = 0; r < g.R; ++r)
      for (int64_t s = 0; s < g.S; ++s) {
        T* row = col + ((c * g.R + r) * g.S + s) * PQ;
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
void col2im_nchw(const ConvGeom& g, const T* col, T* x) {  // x += col, scattered back
  const int64_t PQ = g.P * g.Q;
  for (int64_t c = 0; c < g.Cg; ++c)
    for (int64_t r = 0; r < g.R; ++r)
      for (int64_t s = 0; s < g.S; ++s) {
        const T* row = col + ((c * g.R + r) * g.S + s) * PQ;
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
    else
      std::memcpy(d, s, sizeof(T) * static_cast<size_t>(cols));
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
    Tensor col = pw1 ? Tensor() : empty({CRS * PQ}, dtype_v<T>);
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
  T* out = static_cast<T*>(dw.data_ptr());
  std::fill(out, out + wsize, T(0));
  for (int64_t ch = 0; ch < chunks; ++ch) {
    const T* src = partial.data() + ch * wsize;
    for (int64_t i = 0; i < wsize; ++i) out[i] += src[i];
  }
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

void register_cpu_conv2d(OpInfo& info) {
  info.add_variant({.name = "naive", .device = DeviceType::cpu, .fn = conv2d_naive_cpu, .dtypes = kFloatTypes,
                    .flags = kReference, .note = "the formula as loops over any strides, double accumulation"});
  info.add_variant({.name = "im2col", .device = DeviceType::cpu, .fn = conv2d_im2col_cpu, .dtypes = kFloatTypes,
                    .note = "im2col per image and group + the matmul op, images across threads"});
}

void register_cpu_conv2d_backward_input(OpInfo& info) {
  info.add_variant({.name = "naive", .device = DeviceType::cpu, .fn = conv2d_backward_input_naive_cpu,
                    .dtypes = kFloatTypes, .flags = kReference,
                    .note = "the formula as loops over any strides, double accumulation"});
  info.add_variant({.name = "col2im", .device = DeviceType::cpu, .fn = conv2d_backward_input_col2im_cpu,
                    .dtypes = kFloatTypes, .note = "matmul op (W^T g) per image and group, then col2im"});
}

void register_cpu_conv2d_backward_weight(OpInfo& info) {
  info.add_variant({.name = "naive", .device = DeviceType::cpu, .fn = conv2d_backward_weight_naive_cpu,
                    .dtypes = kFloatTypes, .flags = kReference,
                    .note = "the formula as loops over any strides, double accumulation"});
  info.add_variant({.name = "im2col", .device = DeviceType::cpu, .fn = conv2d_backward_weight_im2col_cpu,
                    .dtypes = kFloatTypes,
                    .note = "im2col + matmul op (g col^T) per image, per-thread partial sums added in order"});
}

}  // namespace ember
