// Elementwise binary math with broadcasting, written once for the CPU loop and the CUDA kernel.
//
// Shapes: out = f(a, b) with a and b broadcast together (numpy rules); a and b have the same dtype
// by the time the kernel runs (the functional API promotes them: i32+f16 -> f16, f16+bf16 -> f32;
// a 0-dim tensor does not widen a tensor of the same kind, as in PyTorch). Comparisons give bool.
// Each op also has a _scalar form, f(a, s) with s a double held in the op's attributes.
//
// Gradients (composite, summed back to each input's shape over broadcast dims):
//   add: (g, g)   sub: (g, -g)   mul: (g b, g a)   div: (g / b, -g a / b^2)
//   pow: (g b a^(b-1), g a^b log a; 0 where a == 0)
//   maximum/minimum: g to the larger/smaller input, split evenly on ties
//   comparisons: none
#pragma once

#include <type_traits>

#include "core/dtype.h"
#include "kernels/common/math.h"

namespace ember::binary {

struct Add {
  static constexpr const char* kName = "add";
  static constexpr bool kCompare = false;
  template <class T>
  EMBER_HD static T f(T a, T b) {
    return a + b;
  }
};
struct Sub {
  static constexpr const char* kName = "sub";
  static constexpr bool kCompare = false;
  template <class T>
  EMBER_HD static T f(T a, T b) {
    return a - b;
  }
};
struct Mul {
  static constexpr const char* kName = "mul";
  static constexpr bool kCompare = false;
  template <class T>
  EMBER_HD static T f(T a, T b) {
    return a * b;
  }
};
struct Div {
  static constexpr const char* kName = "div";
  static constexpr bool kCompare = false;
  // Only floating types reach the kernel (true division); integers are promoted first.
  template <class T>
  EMBER_HD static T f(T a, T b) {
    return a / b;
  }
};
struct Pow {
  static constexpr const char* kName = "pow";
  static constexpr bool kCompare = false;
  template <class T>
  EMBER_HD static T f(T a, T b) {
    if constexpr (std::is_integral_v<T>) return math::ipow(a, b);
    else return math::pow(a, b);
  }
};
struct Maximum {
  static constexpr const char* kName = "maximum";
  static constexpr bool kCompare = false;
  // NaN propagates from either side (torch.maximum)
  template <class T>
  EMBER_HD static T f(T a, T b) {
    return a != a ? a : (b != b ? b : (a > b ? a : b));
  }
};
struct Minimum {
  static constexpr const char* kName = "minimum";
  static constexpr bool kCompare = false;
  template <class T>
  EMBER_HD static T f(T a, T b) {
    return a != a ? a : (b != b ? b : (a < b ? a : b));
  }
};

#define EMBER_COMPARE_FUNCTOR(Name, name, op)   \
  struct Name {                                 \
    static constexpr const char* kName = #name; \
    static constexpr bool kCompare = true;      \
    template <class T>                          \
    EMBER_HD static bool f(T a, T b) {          \
      return a op b;                            \
    }                                           \
  };
EMBER_COMPARE_FUNCTOR(Eq, eq, ==)
EMBER_COMPARE_FUNCTOR(Ne, ne, !=)
EMBER_COMPARE_FUNCTOR(Lt, lt, <)
EMBER_COMPARE_FUNCTOR(Le, le, <=)
EMBER_COMPARE_FUNCTOR(Gt, gt, >)
EMBER_COMPARE_FUNCTOR(Ge, ge, >=)
#undef EMBER_COMPARE_FUNCTOR

template <class Op, class T>
using out_t = std::conditional_t<Op::kCompare, bool, T>;

// The typed functors the loops run: compute in acc_t, round to the output type.
template <class Op, class T>
struct Fn {
  EMBER_HD out_t<Op, T> operator()(T a, T b) const {
    return static_cast<out_t<Op, T>>(Op::f(static_cast<acc_t<T>>(a), static_cast<acc_t<T>>(b)));
  }
};
template <class Op, class T>
struct ScalarFn {
  acc_t<T> b;
  EMBER_HD out_t<Op, T> operator()(T a) const { return static_cast<out_t<Op, T>>(Op::f(static_cast<acc_t<T>>(a), b)); }
};

}  // namespace ember::binary
