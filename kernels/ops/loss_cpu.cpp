// Losses: the CPU references. Formulas and the exact PyTorch semantics are in loss.h; loss.cpp
// defines the ops and registers these through register_cpu_*.
//
// Targets are validated first (serially, so the error names the first bad one), then rows run in
// parallel computing in double; the reductions add the per-row values in row order in double.
#include "kernels/ops/loss.h"

#include <array>
#include <cmath>
#include <limits>

#include "core/parallel.h"
#include "kernels/registry.h"

namespace ember {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

inline double nan_max(double a, double b) {
  if (a != a || b != b) return kNaN;
  return a > b ? a : b;
}

// Throws for the first target outside [0, C) that is not ignore_index.
template <class I>
void check_targets(const char* op, const I* t, int64_t rows, int64_t C, int64_t ignore_index) {
  for (int64_t r = 0; r < rows; ++r) {
    int64_t v = static_cast<int64_t>(t[r]);
    if (v == ignore_index) continue;
    EMBER_CHECK(v >= 0 && v < C, op, ": target ", v, " (at flat position ", r, ") is out of range for ", C,
                " classes; targets must be in [0, ", C, ") or equal ignore_index (", ignore_index, ")");
  }
}

double scalar_value(const Tensor& t) {
  return EMBER_DISPATCH_FLOAT(t.dtype(), "total_weight",
                              [&] { return static_cast<double>(*static_cast<const scalar_t*>(t.data_ptr())); });
}

// Writes the reduced (or per-row) loss and total_weight from per-row values.
template <class T>
void write_reduced(const KernelCall& c, Reduction reduction, const std::vector<double>& l,
                   const std::vector<double>& w) {
  const Tensor &out = c.out[0], &tw = c.out[1];
  T* op = static_cast<T*>(out.data_ptr());
  double total = 0, wsum = 0;
  if (reduction == Reduction::none) {
    for (size_t r = 0; r < l.size(); ++r) op[r] = static_cast<T>(l[r]);
  } else {
    for (size_t r = 0; r < l.size(); ++r) {
      total += l[r];
      wsum += w[r];
    }
    op[0] = static_cast<T>(reduction == Reduction::mean ? total / wsum : total);  // mean over W = 0 is 0/0 = NaN
  }
  double twv = reduction == Reduction::none ? 0.0 : wsum;
  if (tw.dtype() == DType::f64) *static_cast<double*>(tw.data_ptr()) = twv;
  else *static_cast<float*>(tw.data_ptr()) = static_cast<float>(twv);
}

// Per row: max, log Σ exp, in double. Returns lse (NaN/inf per the softmax rules).
template <class T>
double row_lse(const T* x, int64_t base, int64_t stride, int64_t C) {
  double m = -kInf;
  for (int64_t k = 0; k < C; ++k) m = nan_max(m, static_cast<double>(x[base + k * stride]));
  double s = 0;
  for (int64_t k = 0; k < C; ++k) s += std::exp(static_cast<double>(x[base + k * stride]) - m);
  return m + std::log(s);
}

void cross_entropy_cpu(const KernelCall& c) {
  const Tensor &x = c.in[0], &t = c.in[1], &w = c.in[2];
  const LossAttrs& la = c.attr<LossAttrs>();
  const RowGeometry g = class_loss_geometry("cross_entropy", x, t, w);
  const int64_t rows = g.rows(), C = g.C;
  const double eps = la.label_smoothing;
  std::vector<double> l(static_cast<size_t>(rows)), wn(static_cast<size_t>(rows));
  EMBER_DISPATCH_FLOAT(x.dtype(), "cross_entropy", [&] {
    EMBER_DISPATCH_INDEX(t.dtype(), "cross_entropy", [&] {
      const scalar_t* xp = static_cast<const scalar_t*>(x.data_ptr());
      const index_t* tp = static_cast<const index_t*>(t.data_ptr());
      const scalar_t* wp = w.defined() ? static_cast<const scalar_t*>(w.data_ptr()) : nullptr;
      check_targets("cross_entropy", tp, rows, C, la.ignore_index);
      auto wc = [&](int64_t k) { return wp ? static_cast<double>(wp[k]) : 1.0; };
      parallel_for(0, rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(C, 1)), [&](int64_t lo, int64_t hi) {
        for (int64_t r = lo; r < hi; ++r) {
          const int64_t tv = static_cast<int64_t>(tp[r]);
          if (tv == la.ignore_index) {
            l[r] = 0;
            wn[r] = 0;
            continue;
          }
          const int64_t base = (r / g.B) * C * g.B + r % g.B, stride = g.B;
          const double lse = row_lse(xp, base, stride, C);
          const double wt = wc(tv);
          double loss = (1 - eps) * wt * (lse - static_cast<double>(xp[base + tv * stride]));
          if (eps > 0) {
            double smooth = 0;
            for (int64_t k = 0; k < C; ++k) smooth += wc(k) * (lse - static_cast<double>(xp[base + k * stride]));
            loss += eps / static_cast<double>(C) * smooth;
          }
          l[r] = loss;
          wn[r] = wt;
        }
      });
    });
    write_reduced<scalar_t>(c, la.reduction, l, wn);
  });
}

void cross_entropy_backward_cpu(const KernelCall& c) {
  const Tensor &gr = c.in[0], &x = c.in[1], &t = c.in[2], &w = c.in[3];
  const Tensor& dx = c.out[0];
  const LossAttrs& la = c.attr<LossAttrs>();
  const RowGeometry g = class_loss_geometry("cross_entropy_backward", x, t, w);
  const int64_t rows = g.rows(), C = g.C;
  const double eps = la.label_smoothing;
  const double W = la.reduction == Reduction::mean ? scalar_value(c.in[4]) : 1.0;
  EMBER_DISPATCH_FLOAT(x.dtype(), "cross_entropy_backward", [&] {
    EMBER_DISPATCH_INDEX(t.dtype(), "cross_entropy_backward", [&] {
      const scalar_t* xp = static_cast<const scalar_t*>(x.data_ptr());
      const scalar_t* gp = static_cast<const scalar_t*>(gr.data_ptr());
      const index_t* tp = static_cast<const index_t*>(t.data_ptr());
      const scalar_t* wp = w.defined() ? static_cast<const scalar_t*>(w.data_ptr()) : nullptr;
      scalar_t* dp = static_cast<scalar_t*>(dx.data_ptr());
      check_targets("cross_entropy_backward", tp, rows, C, la.ignore_index);
      auto wc = [&](int64_t k) { return wp ? static_cast<double>(wp[k]) : 1.0; };
      double wsum = 0;
      for (int64_t k = 0; k < C; ++k) wsum += wc(k);
      parallel_for(0, rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(C, 1)), [&](int64_t lo, int64_t hi) {
        for (int64_t r = lo; r < hi; ++r) {
          const int64_t tv = static_cast<int64_t>(tp[r]);
          const int64_t base = (r / g.B) * C * g.B + r % g.B, stride = g.B;
          if (tv == la.ignore_index) {
            for (int64_t k = 0; k < C; ++k) dp[base + k * stride] = static_cast<scalar_t>(0.0);
            continue;
          }
          const double gv = static_cast<double>(gp[la.reduction == Reduction::none ? r : 0]);
          const double scale = la.reduction == Reduction::mean ? gv / W : gv;
          const double lse = row_lse(xp, base, stride, C);
          const double wt = wc(tv);
          const double A = (1 - eps) * wt + eps / static_cast<double>(C) * wsum;
          for (int64_t k = 0; k < C; ++k) {
            double p = std::exp(static_cast<double>(xp[base + k * stride]) - lse);
            double Bk = (k == tv ? (1 - eps) * wt : 0.0) + eps / static_cast<double>(C) * wc(k);
            dp[base + k * stride] = static_cast<scalar_t>((p * A - Bk) * scale);
          }
        }
      });
    });
  });
}

void nll_loss_cpu(const KernelCall& c) {
  const Tensor &x = c.in[0], &t = c.in[1], &w = c.in[2];
  const LossAttrs& la = c.attr<LossAttrs>();
  const RowGeometry g = class_loss_geometry("nll_loss", x, t, w);
  const int64_t rows = g.rows(), C = g.C;
  std::vector<double> l(static_cast<size_t>(rows)), wn(static_cast<size_t>(rows));
  EMBER_DISPATCH_FLOAT(x.dtype(), "nll_loss", [&] {
    EMBER_DISPATCH_INDEX(t.dtype(), "nll_loss", [&] {
      const scalar_t* xp = static_cast<const scalar_t*>(x.data_ptr());
      const index_t* tp = static_cast<const index_t*>(t.data_ptr());
      const scalar_t* wp = w.defined() ? static_cast<const scalar_t*>(w.data_ptr()) : nullptr;
      check_targets("nll_loss", tp, rows, C, la.ignore_index);
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t tv = static_cast<int64_t>(tp[r]);
        if (tv == la.ignore_index) {
          l[r] = wn[r] = 0;
          continue;
        }
        const double wt = wp ? static_cast<double>(wp[tv]) : 1.0;
        l[r] = -wt * static_cast<double>(xp[(r / g.B) * C * g.B + tv * g.B + r % g.B]);
        wn[r] = wt;
      }
    });
    write_reduced<scalar_t>(c, la.reduction, l, wn);
  });
}

void nll_loss_backward_cpu(const KernelCall& c) {
  const Tensor &gr = c.in[0], &x = c.in[1], &t = c.in[2], &w = c.in[3];
  const Tensor& dx = c.out[0];
  const LossAttrs& la = c.attr<LossAttrs>();
  const RowGeometry g = class_loss_geometry("nll_loss_backward", x, t, w);
  const int64_t rows = g.rows(), C = g.C;
  const double W = la.reduction == Reduction::mean ? scalar_value(c.in[4]) : 1.0;
  EMBER_DISPATCH_FLOAT(x.dtype(), "nll_loss_backward", [&] {
    EMBER_DISPATCH_INDEX(t.dtype(), "nll_loss_backward", [&] {
      const scalar_t* gp = static_cast<const scalar_t*>(gr.data_ptr());
      const index_t* tp = static_cast<const index_t*>(t.data_ptr());
      const scalar_t* wp = w.defined() ? static_cast<const scalar_t*>(w.data_ptr()) : nullptr;
      scalar_t* dp = static_cast<scalar_t*>(dx.data_ptr());
      check_targets("nll_loss_backward", tp, rows, C, la.ignore_index);
      for (int64_t i = 0; i < dx.numel(); ++i) dp[i] = static_cast<scalar_t>(0.0);
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t tv = static_cast<int64_t>(tp[r]);
        if (tv == la.ignore_index) continue;
        const double gv = static_cast<double>(gp[la.reduction == Reduction::none ? r : 0]);
        const double scale = la.reduction == Reduction::mean ? gv / W : gv;
        const double wt = wp ? static_cast<double>(wp[tv]) : 1.0;
        dp[(r / g.B) * C * g.B + tv * g.B + r % g.B] = static_cast<scalar_t>(-wt * scale);
      }
    });
  });
}

void mse_loss_cpu(const KernelCall& c) {
  const Tensor &x = c.in[0], &y = c.in[1];
  const Tensor& out = c.out[0];
  const int64_t n = x.numel();
  const Reduction red = c.attr<LossAttrs>().reduction;
  EMBER_DISPATCH_FLOAT(x.dtype(), "mse_loss", [&] {
    const scalar_t* xp = static_cast<const scalar_t*>(x.data_ptr());
    const scalar_t* yp = static_cast<const scalar_t*>(y.data_ptr());
    scalar_t* op = static_cast<scalar_t*>(out.data_ptr());
    if (red == Reduction::none) {
      parallel_for(0, n, 16384, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i) {
          double d = static_cast<double>(xp[i]) - static_cast<double>(yp[i]);
          op[i] = static_cast<scalar_t>(d * d);
        }
      });
      return;
    }
    double s = 0;
    for (int64_t i = 0; i < n; ++i) {
      double d = static_cast<double>(xp[i]) - static_cast<double>(yp[i]);
      s += d * d;
    }
    op[0] =
        static_cast<scalar_t>(red == Reduction::mean ? s / static_cast<double>(n) : s);  // mean of nothing: 0/0 = NaN
  });
}

void mse_loss_backward_cpu(const KernelCall& c) {
  const Tensor &g = c.in[0], &x = c.in[1], &y = c.in[2];
  const Tensor& dx = c.out[0];
  const int64_t n = x.numel();
  const Reduction red = c.attr<LossAttrs>().reduction;
  EMBER_DISPATCH_FLOAT(x.dtype(), "mse_loss_backward", [&] {
    const scalar_t* gp = static_cast<const scalar_t*>(g.data_ptr());
    const scalar_t* xp = static_cast<const scalar_t*>(x.data_ptr());
    const scalar_t* yp = static_cast<const scalar_t*>(y.data_ptr());
    scalar_t* dp = static_cast<scalar_t*>(dx.data_ptr());
    const double s = red == Reduction::mean ? 2.0 / static_cast<double>(n) : 2.0;
    parallel_for(0, n, 16384, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        double gv = static_cast<double>(gp[red == Reduction::none ? i : 0]);
        dp[i] = static_cast<scalar_t>((static_cast<double>(xp[i]) - static_cast<double>(yp[i])) * gv * s);
      }
    });
  });
}

// The specification of cross_entropy_with_grad: the forward, then the backward for the announced
// gradient with the forward's total_weight.
void cross_entropy_with_grad_cpu(const KernelCall& c) {
  if (c.attr<LossAttrs>().f32_loss) return cross_entropy_with_grad_in_f32(c, cross_entropy_with_grad_cpu);
  std::array<Tensor, 2> fwd_out{c.out[0], c.out[1]};
  cross_entropy_cpu(KernelCall{OpId::cross_entropy, c.in.first(3), fwd_out, c.attrs});
  const std::array<Tensor, 5> bwd_in{c.in[3], c.in[0], c.in[1], c.in[2], c.out[1]};
  std::array<Tensor, 1> bwd_out{c.out[2]};
  cross_entropy_backward_cpu(KernelCall{OpId::cross_entropy_backward, bwd_in, bwd_out, c.attrs});
}

}  // namespace

void register_cpu_cross_entropy(OpInfo& info) {
  info.add_variant({.name = "cpu",
                    .device = DeviceType::cpu,
                    .fn = cross_entropy_cpu,
                    .dtypes = kFloatTypes,
                    .note = "per row in f64 (max, log Σ exp, target and smoothing terms), reduction in row order"});
}

void register_cpu_cross_entropy_backward(OpInfo& info) {
  info.add_variant({.name = "cpu",
                    .device = DeviceType::cpu,
                    .fn = cross_entropy_backward_cpu,
                    .dtypes = kFloatTypes,
                    .note = "per row in f64: lse, then the gradient row"});
}

void register_cpu_cross_entropy_with_grad(OpInfo& info) {
  info.add_variant({.name = "cpu",
                    .device = DeviceType::cpu,
                    .fn = cross_entropy_with_grad_cpu,
                    .dtypes = kFloatTypes,
                    .note = "the cpu cross_entropy, then the cpu cross_entropy_backward"});
}

void register_cpu_nll_loss(OpInfo& info) {
  info.add_variant({.name = "cpu",
                    .device = DeviceType::cpu,
                    .fn = nll_loss_cpu,
                    .dtypes = kFloatTypes,
                    .note = "serial over rows in f64"});
}

void register_cpu_nll_loss_backward(OpInfo& info) {
  info.add_variant({.name = "cpu",
                    .device = DeviceType::cpu,
                    .fn = nll_loss_backward_cpu,
                    .dtypes = kFloatTypes,
                    .note = "zero fill, then one store per row"});
}

void register_cpu_mse_loss(OpInfo& info) {
  info.add_variant({.name = "cpu",
                    .device = DeviceType::cpu,
                    .fn = mse_loss_cpu,
                    .dtypes = kFloatTypes,
                    .note = "f64 accumulation"});
}

void register_cpu_mse_loss_backward(OpInfo& info) {
  info.add_variant({.name = "cpu",
                    .device = DeviceType::cpu,
                    .fn = mse_loss_backward_cpu,
                    .dtypes = kFloatTypes,
                    .note = "elementwise in f64"});
}

}  // namespace ember
