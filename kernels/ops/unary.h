// Elementwise unary math, written once for the CPU loop and the CUDA kernel.
//
// Shapes: y = f(x), y has x's shape and dtype (and x's layout when x is dense).
// Backward: the op <name>_backward(g, x) computes dx = g * f'(x) in one fused kernel.
//
// An op is one line in kernels/ops.def, EMBER_UNARY(name, Functor), plus its functor here; the
// generic code (unary.cpp, unary.cu) reads everything else from the functor's members:
//   f(x)          the forward formula, on acc_t (float for f16/bf16, else the type itself)
//   df(x, g)      g * f'(x)
//   kFloatOnly    integer inputs are promoted to f32 by the functional API (exp of an int tensor
//                 is a float tensor); neg, abs and relu also run on integers
//   kAutocast     the op's autocast policy (required, so each op decides): fp32 for math that loses
//                 accuracy in f16/bf16 (exp, log, sqrt, sin, ...), none for sign-like ops and for
//                 activations, which run in whatever precision they get
//   kLo, kHi      the sample domain
//   kKinks        optional: the points where f' jumps; the samples keep clear of them so that the
//                 gradcheck's central differences do not straddle one. Host-only (read by the
//                 samples in tests/op_samples/unary_samples.cpp, never by f or df), so device code
//                 never touches the array.
#pragma once

#include <type_traits>

#include "core/dtype.h"
#include "kernels/autocast_policy.h"
#include "kernels/common/math.h"

namespace ember::unary {

struct Neg {
  static constexpr const char* kName = "neg";
  static constexpr bool kFloatOnly = false;
  static constexpr AutocastPolicy kAutocast = AutocastPolicy::none;
  static constexpr double kLo = -3, kHi = 3;
  template <class T>
  EMBER_HD static T f(T x) {
    return -x;
  }
  template <class T>
  EMBER_HD static T df(T, T g) {
    return -g;
  }
};

struct Abs {
  static constexpr const char* kName = "abs";
  static constexpr bool kFloatOnly = false;
  static constexpr AutocastPolicy kAutocast = AutocastPolicy::none;
  static constexpr double kLo = -3, kHi = 3;
  static constexpr double kKinks[] = {0.0};
  template <class T>
  EMBER_HD static T f(T x) {
    if constexpr (std::is_unsigned_v<T>) return x;
    else return x < T(0) ? T(-x) : x;
  }
  // d|x|/dx = sign(x), 0 at 0 (as PyTorch)
  template <class T>
  EMBER_HD static T df(T x, T g) {
    return x > T(0) ? g : (x < T(0) ? T(-g) : T(0));
  }
};

struct Exp {
  static constexpr const char* kName = "exp";
  static constexpr bool kFloatOnly = true;
  static constexpr AutocastPolicy kAutocast = AutocastPolicy::fp32;
  static constexpr double kLo = -4, kHi = 4;
  template <class T>
  EMBER_HD static T f(T x) {
    return math::exp(x);
  }
  template <class T>
  EMBER_HD static T df(T x, T g) {
    return g * math::exp(x);
  }
};

struct Log {
  static constexpr const char* kName = "log";
  static constexpr bool kFloatOnly = true;
  static constexpr AutocastPolicy kAutocast = AutocastPolicy::fp32;
  static constexpr double kLo = 0.1, kHi = 4;
  template <class T>
  EMBER_HD static T f(T x) {
    return math::log(x);
  }
  template <class T>
  EMBER_HD static T df(T x, T g) {
    return g / x;
  }
};

struct Sqrt {
  static constexpr const char* kName = "sqrt";
  static constexpr bool kFloatOnly = true;
  static constexpr AutocastPolicy kAutocast = AutocastPolicy::fp32;
  static constexpr double kLo = 0.1, kHi = 4;
  template <class T>
  EMBER_HD static T f(T x) {
    return math::sqrt(x);
  }
  template <class T>
  EMBER_HD static T df(T x, T g) {
    return g / (T(2) * math::sqrt(x));
  }
};

struct Rsqrt {
  static constexpr const char* kName = "rsqrt";
  static constexpr bool kFloatOnly = true;
  static constexpr AutocastPolicy kAutocast = AutocastPolicy::fp32;
  static constexpr double kLo = 0.1, kHi = 4;
  template <class T>
  EMBER_HD static T f(T x) {
    return T(1) / math::sqrt(x);
  }
  // d/dx x^-1/2 = -1/2 x^-3/2
  template <class T>
  EMBER_HD static T df(T x, T g) {
    return T(-0.5) * g / (x * math::sqrt(x));
  }
};

struct Sin {
  static constexpr const char* kName = "sin";
  static constexpr bool kFloatOnly = true;
  static constexpr AutocastPolicy kAutocast = AutocastPolicy::fp32;
  static constexpr double kLo = -3, kHi = 3;
  template <class T>
  EMBER_HD static T f(T x) {
    return math::sin(x);
  }
  template <class T>
  EMBER_HD static T df(T x, T g) {
    return g * math::cos(x);
  }
};

struct Cos {
  static constexpr const char* kName = "cos";
  static constexpr bool kFloatOnly = true;
  static constexpr AutocastPolicy kAutocast = AutocastPolicy::fp32;
  static constexpr double kLo = -3, kHi = 3;
  template <class T>
  EMBER_HD static T f(T x) {
    return math::cos(x);
  }
  template <class T>
  EMBER_HD static T df(T x, T g) {
    return -g * math::sin(x);
  }
};

struct Relu {
  static constexpr const char* kName = "relu";
  static constexpr bool kFloatOnly = false;
  static constexpr AutocastPolicy kAutocast = AutocastPolicy::none;
  static constexpr double kLo = -3, kHi = 3;
  static constexpr double kKinks[] = {0.0};
  // NaN propagates (as torch.relu)
  template <class T>
  EMBER_HD static T f(T x) {
    return (x > T(0) || x != x) ? x : T(0);
  }
  template <class T>
  EMBER_HD static T df(T x, T g) {
    return x > T(0) ? g : T(0);
  }
};

// Exact GELU: x * Phi(x), Phi the standard normal CDF (torch.nn.functional.gelu's default, the erf
// form, not the tanh approximation).
struct Gelu {
  static constexpr const char* kName = "gelu";
  static constexpr bool kFloatOnly = true;
  static constexpr AutocastPolicy kAutocast = AutocastPolicy::none;
  static constexpr double kLo = -4, kHi = 4;
  template <class T>
  EMBER_HD static T f(T x) {
    return T(0.5) * x * (T(1) + math::erf(x * T(0.70710678118654752440)));
  }
  // d/dx x Phi(x) = Phi(x) + x phi(x)
  template <class T>
  EMBER_HD static T df(T x, T g) {
    T cdf = T(0.5) * (T(1) + math::erf(x * T(0.70710678118654752440)));
    T pdf = math::exp(T(-0.5) * x * x) * T(0.39894228040143267794);
    return g * (cdf + x * pdf);
  }
};

struct Sigmoid {
  static constexpr const char* kName = "sigmoid";
  static constexpr bool kFloatOnly = true;
  static constexpr AutocastPolicy kAutocast = AutocastPolicy::none;
  static constexpr double kLo = -6, kHi = 6;
  template <class T>
  EMBER_HD static T f(T x) {
    return T(1) / (T(1) + math::exp(-x));
  }
  template <class T>
  EMBER_HD static T df(T x, T g) {
    T s = f(x);
    return g * s * (T(1) - s);
  }
};

struct Tanh {
  static constexpr const char* kName = "tanh";
  static constexpr bool kFloatOnly = true;
  static constexpr AutocastPolicy kAutocast = AutocastPolicy::none;
  static constexpr double kLo = -3, kHi = 3;
  template <class T>
  EMBER_HD static T f(T x) {
    return math::tanh(x);
  }
  template <class T>
  EMBER_HD static T df(T x, T g) {
    T t = math::tanh(x);
    return g * (T(1) - t * t);
  }
};

// SiLU (swish): x * sigmoid(x).
struct Silu {
  static constexpr const char* kName = "silu";
  static constexpr bool kFloatOnly = true;
  static constexpr AutocastPolicy kAutocast = AutocastPolicy::none;
  static constexpr double kLo = -6, kHi = 6;
  template <class T>
  EMBER_HD static T f(T x) {
    return x / (T(1) + math::exp(-x));
  }
  template <class T>
  EMBER_HD static T df(T x, T g) {
    T s = T(1) / (T(1) + math::exp(-x));
    return g * s * (T(1) + x * (T(1) - s));
  }
};

// The typed elementwise functors the loops run: load, compute in acc_t, round to T.
template <class Op, class T>
struct Fwd {
  EMBER_HD T operator()(T x) const { return static_cast<T>(Op::f(static_cast<acc_t<T>>(x))); }
};
template <class Op, class T>
struct Bwd {
  EMBER_HD T operator()(T g, T x) const {
    return static_cast<T>(Op::df(static_cast<acc_t<T>>(x), static_cast<acc_t<T>>(g)));
  }
};

}  // namespace ember::unary
