// total_norm and clip_by_total_norm: the two passes of clip_grad_norm_, each over a whole list of
// tensors (multi-tensor: one CUDA launch per table of tensors, see optim.cu's tables).
//
//   total_norm(x_0..x_{n-1}; p) -> norm       f32 [] (f64 [] when the tensors are f64)
//       p = 2:   sqrt(sum x^2)     p = 1: sum |x|     p = inf: max |x|     p = 0: count(x != 0)
//       other p > 0: (sum |x|^p)^(1/p)
//     Every term is accumulated in f64 (so a sum over millions of f32 elements does not depend on
//     the order, and CPU and CUDA agree to f32 rounding); NaN propagates (also through max).
//     CUDA: pass 1 writes one f64 partial per block (64K elements), pass 2 (one block) combines
//     them in a fixed order: deterministic, no atomics, no host sync.
//     Not differentiable (a gradient-clipping building block).
//
//   clip_by_total_norm(norm, x_0..x_{n-1}; max_norm) -> x_0..x_{n-1} (in place)
//       coef = min(1, max_norm / (norm + 1e-6))   computed in the norm's dtype on the device
//       x_i = x_i * coef
//     As PyTorch's foreach clip_grad_norm_: the multiply always runs (coef == 1 is exact), so the
//     host never has to look at the norm.
//
// Bytes: total_norm reads every element once; clip reads and writes every element once.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/common/math.h"

namespace ember {

struct TotalNormAttrs {
  double norm_type = 2.0;
};

struct ClipByNormAttrs {
  double max_norm = 1.0;
};

namespace norm_detail {

enum Kind : int { kZero = 0, kOne = 1, kTwo = 2, kInf = 3, kP = 4 };

inline Kind kind_of(double p) {
  if (std::isinf(p)) return kInf;
  if (p == 0) return kZero;
  if (p == 1) return kOne;
  if (p == 2) return kTwo;
  return kP;
}

EMBER_HD inline double term(double x, int kind, double p) {
  switch (kind) {
    case kZero: return x != 0 ? 1.0 : 0.0;  // NaN counts as nonzero, as in torch.linalg.vector_norm
    case kOne: return math::fabs(x);
    case kTwo: return x * x;
    case kInf: return math::fabs(x);
    default: return math::pow(math::fabs(x), p);
  }
}

// Merges two partial results; max for inf (NaN wins), sums otherwise.
EMBER_HD inline double combine(double a, double b, int kind) {
  if (kind != kInf) return a + b;
  if (a != a) return a;
  if (b != b) return b;
  return a > b ? a : b;
}

EMBER_HD inline double finish(double acc, int kind, double p) {
  if (kind == kTwo) return math::sqrt(acc);
  if (kind == kP) return math::pow(acc, 1.0 / p);
  return acc;
}

// The clipping coefficient in the norm's dtype N: min(1, max_norm / (norm + 1e-6)); NaN stays NaN.
template <class N>
EMBER_HD inline N clip_coef(N norm, double max_norm) {
  N c = static_cast<N>(max_norm) / (norm + static_cast<N>(1e-6));
  return c > static_cast<N>(1) ? static_cast<N>(1) : c;
}

}  // namespace norm_detail

}  // namespace ember
