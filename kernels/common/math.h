// Math functions callable from EMBER_HD code with the same name on the host and the device
// (float and double overloads): the device side uses CUDA's math library, the host side <cmath>.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/error.h"

namespace ember::math {

// The device functions are named with :: on purpose: inside ember::math an unqualified sqrt(x)
// finds ember::math::sqrt itself first, and the double overloads called themselves forever. The
// host build (and so the simulator) takes the std:: branch, which is why only a real GPU showed it
// (NaN from Adam's bias correction, total_norm without its root, f64 GELU).
#if defined(__CUDA_ARCH__)
#define EMBER_MATH1(name, fexpr, dexpr)                      \
  EMBER_HD inline float name(float x) { return ::fexpr(x); } \
  EMBER_HD inline double name(double x) { return ::dexpr(x); }
#else
#define EMBER_MATH1(name, fexpr, dexpr)                         \
  EMBER_HD inline float name(float x) { return std::dexpr(x); } \
  EMBER_HD inline double name(double x) { return std::dexpr(x); }
#endif

EMBER_MATH1(exp, expf, exp)
EMBER_MATH1(log, logf, log)
EMBER_MATH1(sqrt, sqrtf, sqrt)
EMBER_MATH1(sin, sinf, sin)
EMBER_MATH1(cos, cosf, cos)
EMBER_MATH1(tanh, tanhf, tanh)
EMBER_MATH1(erf, erff, erf)
EMBER_MATH1(fabs, fabsf, fabs)
EMBER_MATH1(log1p, log1pf, log1p)
EMBER_MATH1(expm1, expm1f, expm1)
#undef EMBER_MATH1

#if defined(__CUDA_ARCH__)
EMBER_HD inline float pow(float a, float b) { return powf(a, b); }
EMBER_HD inline double pow(double a, double b) { return ::pow(a, b); }
EMBER_HD inline float rsqrt(float x) { return rsqrtf(x); }
EMBER_HD inline double rsqrt(double x) { return ::rsqrt(x); }
#else
EMBER_HD inline float pow(float a, float b) { return std::pow(a, b); }
EMBER_HD inline double pow(double a, double b) { return std::pow(a, b); }
EMBER_HD inline float rsqrt(float x) { return 1.0f / std::sqrt(x); }
EMBER_HD inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
#endif

template <class T>
EMBER_HD inline bool isnan(T x) {
  return x != x;
}

// Integer power by squaring (for integer dtypes of pow); negative exponents give 0 except for
// bases 1 and -1, like PyTorch.
template <class T>
EMBER_HD inline T ipow(T base, T e) {
  if (e < 0) {
    if (base == 1) return 1;
    if (base == -1) return (e % 2 == 0) ? 1 : -1;
    return 0;
  }
  T r = 1;
  while (e) {
    if (e & 1) r *= base;
    base *= base;
    e >>= 1;
  }
  return r;
}

}  // namespace ember::math
