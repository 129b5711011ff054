// conv2d, conv2d_backward_input, conv2d_backward_weight: shape inference, the CPU kernels, the
// composite vjps, samples, cost and benches, and the functional API. See conv2d.h for formulas.
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

#include "core/autograd/node.h"
#include "core/parallel.h"
#include "kernels/common/memory_format.h"
#include "kernels/common/samples.h"
#include "kernels/functional.h"
#include "kernels/registry.h"

namespace ember {

ConvGeom conv_geometry(const char* op, const Shape& x, const Shape& w, const Conv2dAttrs& a) {
  EMBER_CHECK(x.size() == 4, op, ": expects a 4-D input [N, C, H, W], got ", x, " (", x.size(), " dims)");
  EMBER_CHECK(w.size() == 4, op, ": expects a 4-D weight [K, C/groups, R, S], got ", w, " (", w.size(), " dims)");
  EMBER_CHECK(a.groups >= 1, op, ": groups must be positive, got ", a.groups);
  for (int i = 0; i < 2; ++i) {
    EMBER_CHECK(a.stride[i] >= 1, op, ": stride must be positive, got (", a.stride[0], ", ", a.stride[1], ")");
    EMBER_CHECK(a.dilation[i] >= 1, op, ": dilation must be positive, got (", a.dilation[0], ", ", a.dilation[1], ")");
    EMBER_CHECK(a.padding[i] >= 0, op, ": padding must be non-negative, got (", a.padding[0], ", ", a.padding[1], ")");
  }
  ConvGeom g;
  g.N = x[0];
  g.C = x[1];
  g.H = x[2];
  g.W = x[3];
  g.K = w[0];
  g.R = w[2];
  g.S = w[3];
  g.G = a.groups;
  g.sh = a.stride[0];
  g.sw = a.stride[1];
  g.ph = a.padding[0];
  g.pw = a.padding[1];
  g.dh = a.dilation[0];
  g.dw = a.dilation[1];
  EMBER_CHECK(g.C >= 1, op, ": the input ", x, " has no channels");
  EMBER_CHECK(g.K >= 1 && w[1] >= 1 && g.R >= 1 && g.S >= 1, op, ": the weight ", w, " has an empty dimension");
  EMBER_CHECK(g.C % g.G == 0, op, ": groups = ", g.G, " must divide the input channels C = ", g.C, " (input ", x, ")");
  EMBER_CHECK(g.K % g.G == 0, op, ": groups = ", g.G, " must divide the output channels K = ", g.K, " (weight ", w, ")");
  g.Cg = g.C / g.G;
  g.Kg = g.K / g.G;
  EMBER_CHECK(w[1] == g.Cg, op, ": input ", x, " has ", g.C, " channels but weight ", w, " expects ", w[1], " * groups = ",
              w[1] * g.G, " channels (groups = ", g.G, ")");
  const int64_t eh = g.dh * (g.R - 1) + 1, ew = g.dw * (g.S - 1) + 1;
  const int64_t hp = g.H + 2 * g.ph, wp = g.W + 2 * g.pw;
  EMBER_CHECK(eh <= hp && ew <= wp, op, ": the kernel ", g.R, "x", g.S, " (", eh, "x", ew, " with dilation ", g.dh, "x",
              g.dw, ") is larger than the padded input ", hp, "x", wp, " (input ", g.H, "x", g.W, ", padding ", g.ph, "x",
              g.pw, ")");
  g.P = (hp - eh) / g.sh + 1;
  g.Q = (wp - ew) / g.sw + 1;
  return g;
}

namespace {

// ---- shape inference ----

void check_dtypes(const char* op, const Tensor& a, const char* an, const Tensor& b, const char* bn) {
  EMBER_CHECK(is_floating(a.dtype()), op, ": expects a floating ", an, ", got ", a.describe());
  EMBER_CHECK(a.dtype() == b.dtype(), op, ": ", an, " ", a.describe(), " and ", bn, " ", b.describe(),
              " must have the same dtype");
}

std::vector<TensorSpec> infer_conv2d(std::span<const Tensor> in, const Attrs& attrs) {
  EMBER_CHECK(in.size() == 3, "conv2d: expects (input, weight, bias)");
  const Tensor &x = in[0], &w = in[1], &b = in[2];
  EMBER_CHECK(x.defined() && w.defined(), "conv2d: input and weight must be defined");
  ConvGeom g = conv_geometry("conv2d", x.shape(), w.shape(), attrs.get<Conv2dAttrs>());
  check_dtypes("conv2d", x, "input", w, "weight");
  if (b.defined()) {
    EMBER_CHECK(b.dim() == 1 && b.shape()[0] == g.K, "conv2d: bias must be [", g.K, "] (one value per output channel), got ",
                b.shape());
    check_dtypes("conv2d", x, "input", b, "bias");
  }
  Shape out{g.N, g.K, g.P, g.Q};
  return {{out, x.dtype(), layout_strides(out, runs_channels_last(x))}};
}

std::vector<TensorSpec> infer_conv2d_backward_input(std::span<const Tensor> in, const Attrs& attrs) {
  EMBER_CHECK(in.size() == 2, "conv2d_backward_input: expects (grad_output, weight)");
  const Tensor &gy = in[0], &w = in[1];
  const auto& a = attrs.get<Conv2dAttrs>();
  EMBER_CHECK(gy.dim() == 4, "conv2d_backward_input: expects a 4-D grad_output [N, K, P, Q], got ", gy.shape());
  EMBER_CHECK(w.dim() == 4, "conv2d_backward_input: expects a 4-D weight [K, C/groups, R, S], got ", w.shape());
  EMBER_CHECK(a.size[0] >= 1 && a.size[1] >= 1, "conv2d_backward_input: the input size (H, W) = (", a.size[0], ", ",
              a.size[1], ") must be positive");
  Shape xs{gy.shape()[0], w.shape()[1] * a.groups, a.size[0], a.size[1]};
  ConvGeom g = conv_geometry("conv2d_backward_input", xs, w.shape(), a);
  Shape ys{g.N, g.K, g.P, g.Q};
  EMBER_CHECK(gy.shape() == ys, "conv2d_backward_input: grad_output ", gy.shape(), " does not match the output ", ys,
              " of a convolution of input ", xs, " with weight ", w.shape());
  check_dtypes("conv2d_backward_input", gy, "grad_output", w, "weight");
  return {{xs, gy.dtype(), layout_strides(xs, runs_channels_last(gy))}};
}

std::vector<TensorSpec> infer_conv2d_backward_weight(std::span<const Tensor> in, const Attrs& attrs) {
  EMBER_CHECK(in.size() == 2, "conv2d_backward_weight: expects (grad_output, input)");
  const Tensor &gy = in[0], &x = in[1];
  const auto& a = attrs.get<Conv2dAttrs>();
  EMBER_CHECK(gy.dim() == 4, "conv2d_backward_weight: expects a 4-D grad_output [N, K, P, Q], got ", gy.shape());
  EMBER_CHECK(x.dim() == 4, "conv2d_backward_weight: expects a 4-D input [N, C, H, W], got ", x.shape());
  EMBER_CHECK(a.size[0] >= 1 && a.size[1] >= 1, "conv2d_backward_weight: the kernel size (R, S) = (", a.size[0], ", ",
              a.size[1], ") must be positive");
  EMBER_CHECK(a.groups >= 1 && x.shape()[1] % a.groups == 0, "conv2d_backward_weight: groups = ", a.groups,
              " must divide the input channels C = ", x.shape()[1]);
  Shape ws{gy.shape()[1], x.shape()[1] / a.groups, a.size[0], a.size[1]};
  ConvGeom g = conv_geometry("conv2d_backward_weight", x.shape(), ws, a);
  Shape ys{g.N, g.K, g.P, g.Q};
  EMBER_CHECK(gy.shape() == ys, "conv2d_backward_weight: grad_output ", gy.shape(), " does not match the output ", ys,
              " of a convolution of input ", x.shape(), " with weight ", ws);
  check_dtypes("conv2d_backward_weight", gy, "grad_output", x, "input");
  return {{ws, x.dtype(), layout_strides(ws, runs_channels_last(x))}};
}

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

// ---- autograd ----

Conv2dAttrs with_size(Conv2dAttrs a, int64_t s0, int64_t s1) {
  a.size[0] = s0;
  a.size[1] = s1;
  return a;
}

std::vector<Tensor> conv2d_vjp(const BackwardCtx& ctx) {
  const Tensor &x = ctx.inputs[0], &w = ctx.inputs[1], &b = ctx.inputs[2];
  const auto& a = ctx.attr<Conv2dAttrs>();
  Tensor g = ctx.grad(0);
  // the gradient ops run in the layout of their first operand: keep it the forward's
  g = contiguous_as(g, runs_channels_last(x));
  Tensor dx, dw, db;
  if (ctx.needs_grad(0)) dx = call1(OpId::conv2d_backward_input, {g, w}, with_size(a, x.shape()[2], x.shape()[3]));
  if (ctx.needs_grad(1)) dw = call1(OpId::conv2d_backward_weight, {g, x}, with_size(a, w.shape()[2], w.shape()[3]));
  if (ctx.needs_grad(2) && b.defined()) db = sum(g, {0, 2, 3});
  return {dx, dw, db};
}

std::vector<Tensor> conv2d_backward_input_vjp(const BackwardCtx& ctx) {
  const Tensor &gy = ctx.inputs[0], &w = ctx.inputs[1];
  const auto& a = ctx.attr<Conv2dAttrs>();
  Tensor G = contiguous_as(ctx.grad(0), runs_channels_last(gy));
  Tensor dgy, dw;
  if (ctx.needs_grad(0)) dgy = call1(OpId::conv2d, {G, w, Tensor()}, with_size(a, 0, 0));
  if (ctx.needs_grad(1)) dw = call1(OpId::conv2d_backward_weight, {gy, G}, with_size(a, w.shape()[2], w.shape()[3]));
  return {dgy, dw};
}

std::vector<Tensor> conv2d_backward_weight_vjp(const BackwardCtx& ctx) {
  const Tensor &gy = ctx.inputs[0], &x = ctx.inputs[1];
  const auto& a = ctx.attr<Conv2dAttrs>();
  Tensor G = ctx.grad(0);
  Tensor dgy, dx;
  if (ctx.needs_grad(0)) dgy = call1(OpId::conv2d, {x, G, Tensor()}, with_size(a, 0, 0));
  if (ctx.needs_grad(1)) dx = call1(OpId::conv2d_backward_input, {contiguous_as(gy, runs_channels_last(x)), G},
                                    with_size(a, x.shape()[2], x.shape()[3]));
  return {dgy, dx};
}

// ---- samples ----

struct ConvCase {
  std::string name;
  Shape x, w;
  Conv2dOptions o;
  bool bias = true;
  bool channels_last = false;
  bool sliced = false;  // x is a strided slice (neither layout): the kernels must make it dense
};

Conv2dOptions opts(int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh = 1, int64_t dw = 1, int64_t groups = 1) {
  Conv2dOptions o;
  o.stride[0] = sh;
  o.stride[1] = sw;
  o.padding[0] = ph;
  o.padding[1] = pw;
  o.dilation[0] = dh;
  o.dilation[1] = dw;
  o.groups = groups;
  return o;
}

std::vector<ConvCase> conv_cases() {
  return {
      {"3x3 pad 1 [2,3,5,5] -> 4", {2, 3, 5, 5}, {4, 3, 3, 3}, opts(1, 1, 1, 1)},
      {"stride 2 odd 7x5 [2,3,7,5] -> 4", {2, 3, 7, 5}, {4, 3, 3, 3}, opts(2, 2, 1, 1)},
      {"dilation 2 [1,2,7,7] -> 3", {1, 2, 7, 7}, {3, 2, 3, 3}, opts(1, 1, 2, 2, 2, 2)},
      {"groups 2 [2,4,5,5] -> 6", {2, 4, 5, 5}, {6, 2, 3, 3}, opts(1, 1, 1, 1, 1, 1, 2), false},
      {"depthwise groups=C [2,4,6,6] -> 8", {2, 4, 6, 6}, {8, 1, 3, 3}, opts(1, 1, 1, 1, 1, 1, 4)},
      {"1x1 [2,8,4,4] -> 5", {2, 8, 4, 4}, {5, 8, 1, 1}, opts(1, 1, 0, 0), false},
      {"1x1 stride 2 [2,6,5,5] -> 4", {2, 6, 5, 5}, {4, 6, 1, 1}, opts(2, 2, 0, 0)},
      {"non-square kernel 2x4 stride (2,1) pad (1,0) [1,3,6,8] -> 2", {1, 3, 6, 8}, {2, 3, 2, 4}, opts(2, 1, 1, 0)},
      {"batch 1, C = 1 [1,1,6,6] -> 2", {1, 1, 6, 6}, {2, 1, 3, 3}, opts(1, 1, 1, 1)},
      {"5x5 pad 2 [2,2,7,7] -> 3", {2, 2, 7, 7}, {3, 2, 5, 5}, opts(1, 1, 2, 2)},
      {"stride 3 > kernel, rows unused [1,2,8,7] -> 2", {1, 2, 8, 7}, {2, 2, 2, 2}, opts(3, 3, 0, 0)},
      {"channels-last [2,4,5,6] -> 6", {2, 4, 5, 6}, {6, 4, 3, 3}, opts(1, 1, 1, 1), true, true},
      {"channels-last groups 2 stride 2 [2,4,7,5] -> 6", {2, 4, 7, 5}, {6, 2, 3, 3}, opts(2, 2, 1, 1, 1, 1, 2), true, true},
      {"channels-last 1x1 [2,16,4,3] -> 8", {2, 16, 4, 3}, {8, 16, 1, 1}, opts(1, 1, 0, 0), false, true},
      {"channels-last C%8==0 (vector loads) [2,16,6,6] -> 24", {2, 16, 6, 6}, {24, 16, 3, 3}, opts(1, 1, 1, 1), true, true},
      {"sliced input [2,3,5,5] (every other column)", {2, 3, 5, 5}, {4, 3, 3, 3}, opts(1, 1, 1, 1), true, false, true},
      {"odd channels, K not a tile multiple [2,9,9,9] -> 70", {2, 9, 9, 9}, {70, 9, 3, 3}, opts(1, 1, 1, 1)},
      {"several tiles [2,40,12,12] -> 72", {2, 40, 12, 12}, {72, 40, 3, 3}, opts(1, 1, 1, 1)},
      {"several tiles channels-last [2,40,12,12] -> 72", {2, 40, 12, 12}, {72, 40, 3, 3}, opts(1, 1, 1, 1), true, true},
      {"MNIST conv1 [2,1,28,28] -> 32 3x3 pad 1", {2, 1, 28, 28}, {32, 1, 3, 3}, opts(1, 1, 1, 1)},
      {"MNIST conv2 [2,32,14,14] -> 64 3x3 pad 1", {2, 32, 14, 14}, {64, 32, 3, 3}, opts(1, 1, 1, 1)},
      {"MNIST conv1 5x5 pad 2 [2,1,28,28] -> 32", {2, 1, 28, 28}, {32, 1, 5, 5}, opts(1, 1, 2, 2)},
      {"MNIST conv2 5x5 pad 2 [2,32,14,14] -> 64", {2, 32, 14, 14}, {64, 32, 5, 5}, opts(1, 1, 2, 2)},
      {"empty batch [0,3,5,5]", {0, 3, 5, 5}, {4, 3, 3, 3}, opts(1, 1, 1, 1)},
  };
}

Tensor make_input(const ConvCase& cc, const Shape& s, uint64_t seed, bool layout_cl) {
  if (cc.sliced) {
    Shape wide = s;
    wide[3] = 2 * s[3];
    return samples::uniform(wide, -1, 1, seed).slice(3, 0, 2 * s[3], 2);
  }
  Tensor t = samples::uniform(s, -1, 1, seed);
  return layout_cl ? contiguous_as(t, true) : t;
}

// Tolerances: the kernels sum in another order than the double-accumulating reference.
void conv_tol(OpSample& s, int64_t reduction) {
  double f32 = reduction > 64 ? 1e-5 : 2e-6;
  s.tol = {{DType::f32, {f32, 1e-4}}, {DType::f16, {2e-3, 1e-3}}, {DType::bf16, {1.6e-2, 1e-2}}};
  s.tol_note =
      "fp32 accumulation in another order than the double-accumulating reference; the f16/bf16 result is one "
      "rounding of that fp32 sum, which may land on the neighbouring value";
}

std::vector<OpSample> conv2d_samples() {
  std::vector<OpSample> out;
  uint64_t seed = 2000;
  for (const ConvCase& cc : conv_cases()) {
    ConvGeom g = conv_geometry("conv2d", cc.x, cc.w, conv2d_attrs(cc.o));
    OpSample s;
    s.name = cc.name;
    Tensor x = make_input(cc, cc.x, ++seed, cc.channels_last);
    Tensor w = samples::uniform(cc.w, -1, 1, ++seed);
    if (cc.channels_last && cc.name.find("1x1") != std::string::npos) w = contiguous_as(w, true);  // a KRSC weight too
    Tensor b = cc.bias ? samples::uniform({cc.w[0]}, -1, 1, ++seed) : Tensor();
    s.inputs = {x, w, b};
    s.attrs = conv2d_attrs(cc.o);
    conv_tol(s, g.Cg * g.R * g.S);
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<OpSample> conv2d_backward_input_samples() {
  std::vector<OpSample> out;
  uint64_t seed = 3000;
  for (const ConvCase& cc : conv_cases()) {
    ConvGeom g = conv_geometry("conv2d", cc.x, cc.w, conv2d_attrs(cc.o));
    OpSample s;
    s.name = cc.name;
    Tensor gy = make_input(cc, {g.N, g.K, g.P, g.Q}, ++seed, cc.channels_last);
    Tensor w = samples::uniform(cc.w, -1, 1, ++seed);
    s.inputs = {gy, w};
    s.attrs = conv2d_attrs(cc.o, g.H, g.W);
    conv_tol(s, g.Kg * g.R * g.S);
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<OpSample> conv2d_backward_weight_samples() {
  std::vector<OpSample> out;
  uint64_t seed = 4000;
  for (const ConvCase& cc : conv_cases()) {
    ConvGeom g = conv_geometry("conv2d", cc.x, cc.w, conv2d_attrs(cc.o));
    OpSample s;
    s.name = cc.name;
    Tensor gy = samples::uniform({g.N, g.K, g.P, g.Q}, -1, 1, ++seed);
    if (cc.channels_last) gy = contiguous_as(gy, true);
    Tensor x = make_input(cc, cc.x, ++seed, cc.channels_last);
    s.inputs = {gy, x};
    s.attrs = conv2d_attrs(cc.o, g.R, g.S);
    conv_tol(s, g.N * g.P * g.Q);
    out.push_back(std::move(s));
  }
  return out;
}

// ---- cost and benches ----

Cost conv2d_cost(const KernelCall& c) {
  ConvGeom g = conv_geometry("conv2d", c.in[0].shape(), c.in[1].shape(), c.attr<Conv2dAttrs>());
  double bytes = static_cast<double>(c.in[0].nbytes() + c.in[1].nbytes() + c.out[0].nbytes());
  if (c.in[2].defined()) bytes += static_cast<double>(c.in[2].nbytes());
  return {bytes, g.flops()};
}
Cost conv2d_backward_input_cost(const KernelCall& c) {
  ConvGeom g = conv_geometry("conv2d_backward_input", c.out[0].shape(), c.in[1].shape(), c.attr<Conv2dAttrs>());
  return {static_cast<double>(c.in[0].nbytes() + c.in[1].nbytes() + c.out[0].nbytes()), g.flops()};
}
Cost conv2d_backward_weight_cost(const KernelCall& c) {
  ConvGeom g = conv_geometry("conv2d_backward_weight", c.in[1].shape(), c.out[0].shape(), c.attr<Conv2dAttrs>());
  return {static_cast<double>(c.in[0].nbytes() + c.in[1].nbytes() + c.out[0].nbytes()), g.flops()};
}

struct BenchShape {
  const char* name;
  int64_t N, C, H, W, K, R, pad, stride;
};

// The MNIST CNN (conv 1->32 and 32->64, 3x3 pad 1) and ResNet-50's convolutions at batch 32.
std::vector<BenchShape> bench_shapes(size_t* n_mnist) {
  std::vector<BenchShape> v;
  for (int64_t n : {64, 128, 512}) {
    v.push_back({"mnist conv1 1->32 3x3 28x28", n, 1, 28, 28, 32, 3, 1, 1});
    v.push_back({"mnist conv2 32->64 3x3 14x14", n, 32, 14, 14, 64, 3, 1, 1});
  }
  *n_mnist = v.size();
  v.push_back({"resnet50 64->64 3x3 56x56", 32, 64, 56, 56, 64, 3, 1, 1});
  v.push_back({"resnet50 128->128 3x3 28x28", 32, 128, 28, 28, 128, 3, 1, 1});
  v.push_back({"resnet50 256->256 3x3 14x14", 32, 256, 14, 14, 256, 3, 1, 1});
  v.push_back({"resnet50 512->512 3x3 7x7", 32, 512, 7, 7, 512, 3, 1, 1});
  v.push_back({"resnet50 1x1 64->256 56x56", 32, 64, 56, 56, 256, 1, 0, 1});
  v.push_back({"resnet50 1x1 256->64 56x56", 32, 256, 56, 56, 64, 1, 0, 1});
  v.push_back({"resnet50 1x1 512->128 28x28", 32, 512, 28, 28, 128, 1, 0, 1});
  v.push_back({"resnet50 1x1 1024->256 14x14", 32, 1024, 14, 14, 256, 1, 0, 1});
  v.push_back({"resnet50 1x1 2048->512 7x7", 32, 2048, 7, 7, 512, 1, 0, 1});
  v.push_back({"resnet50 1x1 s2 256->512 56x56", 32, 256, 56, 56, 512, 1, 0, 2});
  return v;
}

Tensor bench_tensor(const Shape& s, DType dt, Device d, bool cl) {
  Tensor t = uniform(s, -1, 1, TensorOptions().dtype(dt).device(d));
  return cl ? contiguous_as(t, true) : t;
}

// kind 0: forward (x, w, b); 1: backward_input (gy, w); 2: backward_weight (gy, x)
std::vector<BenchCase> conv_benches(int kind) {
  std::vector<BenchCase> out;
  size_t n_mnist = 0;
  std::vector<BenchShape> shapes = bench_shapes(&n_mnist);
  for (size_t i = 0; i < shapes.size(); ++i) {
    const BenchShape b = shapes[i];
    const bool mnist = i < n_mnist;
    std::vector<std::pair<DType, bool>> configs;  // dtype, channels-last
    if (mnist) configs = {{DType::f32, false}, {DType::bf16, false}};
    else configs = {{DType::f32, false}, {DType::f16, true}, {DType::bf16, true}};
    for (const auto& config : configs) {
      const DType dt = config.first;  // not a structured binding: clang 14 cannot capture those
      const bool cl = config.second;
      Conv2dOptions o = opts(b.stride, b.stride, b.pad, b.pad);
      ConvGeom g = conv_geometry("conv2d", {b.N, b.C, b.H, b.W}, {b.K, b.C, b.R, b.R}, conv2d_attrs(o));
      Conv2dAttrs attrs = kind == 0 ? conv2d_attrs(o) : kind == 1 ? conv2d_attrs(o, g.H, g.W) : conv2d_attrs(o, g.R, g.S);
      BenchCase bc;
      bc.name = str(b.name, " n", b.N, " ", dt, cl ? " channels-last" : "");
      bc.attrs = attrs;
      bc.make = [g, dt, cl, kind](Device d) {
        Shape xs{g.N, g.C, g.H, g.W}, ws{g.K, g.Cg, g.R, g.S}, ys{g.N, g.K, g.P, g.Q};
        if (kind == 0)
          return std::vector<Tensor>{bench_tensor(xs, dt, d, cl), bench_tensor(ws, dt, d, cl),
                                     bench_tensor({g.K}, dt, d, false)};
        if (kind == 1) return std::vector<Tensor>{bench_tensor(ys, dt, d, cl), bench_tensor(ws, dt, d, cl)};
        return std::vector<Tensor>{bench_tensor(ys, dt, d, cl), bench_tensor(xs, dt, d, cl)};
      };
      out.push_back(std::move(bc));
    }
  }
  return out;
}

}  // namespace

void define_op_conv2d(OpInfo& info) {
  info.doc = "2-D convolution (NCHW or channels-last), stride/padding/dilation/groups, fused bias";
  info.infer = infer_conv2d;
  info.backward = conv2d_vjp;
  info.save = Save::inputs;
  info.samples = conv2d_samples;
  info.cost = conv2d_cost;
  info.benches = [] { return conv_benches(0); };
  info.autocast = AutocastPolicy::lower;
  info.contiguous_inputs = false;  // NCHW and channels-last both reach the kernels
  info.add_variant({.name = "naive", .device = DeviceType::cpu, .fn = conv2d_naive_cpu, .dtypes = kFloatTypes,
                    .flags = kReference, .note = "the formula as loops over any strides, double accumulation"});
  info.add_variant({.name = "im2col", .device = DeviceType::cpu, .fn = conv2d_im2col_cpu, .dtypes = kFloatTypes,
                    .note = "im2col per image and group + the matmul op, images across threads"});
}

void define_op_conv2d_backward_input(OpInfo& info) {
  info.doc = "gradient of conv2d with respect to its input (a transposed convolution)";
  info.infer = infer_conv2d_backward_input;
  info.backward = conv2d_backward_input_vjp;
  info.save = Save::inputs;
  info.samples = conv2d_backward_input_samples;
  info.cost = conv2d_backward_input_cost;
  info.benches = [] { return conv_benches(1); };
  info.contiguous_inputs = false;
  info.add_variant({.name = "naive", .device = DeviceType::cpu, .fn = conv2d_backward_input_naive_cpu,
                    .dtypes = kFloatTypes, .flags = kReference,
                    .note = "the formula as loops over any strides, double accumulation"});
  info.add_variant({.name = "col2im", .device = DeviceType::cpu, .fn = conv2d_backward_input_col2im_cpu,
                    .dtypes = kFloatTypes, .note = "matmul op (W^T g) per image and group, then col2im"});
}

void define_op_conv2d_backward_weight(OpInfo& info) {
  info.doc = "gradient of conv2d with respect to its weight";
  info.infer = infer_conv2d_backward_weight;
  info.backward = conv2d_backward_weight_vjp;
  info.save = Save::inputs;
  info.samples = conv2d_backward_weight_samples;
  info.cost = conv2d_backward_weight_cost;
  info.benches = [] { return conv_benches(2); };
  info.contiguous_inputs = false;
  info.add_variant({.name = "naive", .device = DeviceType::cpu, .fn = conv2d_backward_weight_naive_cpu,
                    .dtypes = kFloatTypes, .flags = kReference,
                    .note = "the formula as loops over any strides, double accumulation"});
  info.add_variant({.name = "im2col", .device = DeviceType::cpu, .fn = conv2d_backward_weight_im2col_cpu,
                    .dtypes = kFloatTypes,
                    .note = "im2col + matmul op (g col^T) per image, per-thread partial sums added in order"});
}

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dOptions& o) {
  return call1(OpId::conv2d, {x, weight, bias}, conv2d_attrs(o));
}

Tensor conv2d_backward_input(const Tensor& grad_output, const Tensor& weight, std::array<int64_t, 2> input_hw,
                             const Conv2dOptions& o) {
  return call1(OpId::conv2d_backward_input, {grad_output, weight}, conv2d_attrs(o, input_hw[0], input_hw[1]));
}

Tensor conv2d_backward_weight(const Tensor& grad_output, const Tensor& x, std::array<int64_t, 2> kernel_rs,
                              const Conv2dOptions& o) {
  return call1(OpId::conv2d_backward_weight, {grad_output, x}, conv2d_attrs(o, kernel_rs[0], kernel_rs[1]));
}

}  // namespace ember
