// 16-bit floating point storage types usable on the host and in CUDA kernels.
//
// Half is IEEE binary16, BFloat16 is the top half of an IEEE binary32. Both are storage types:
// arithmetic converts to float, computes, and rounds back (round-to-nearest-even), which is what
// the CUDA kernels do too, so CPU and CUDA results agree bit for bit on elementwise ops.
#pragma once

#include <cstdint>
#include <cstring>
#include <ostream>
#include <type_traits>

#include "core/error.h"

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif

namespace ember {

namespace detail {

// The same 32 bits as another type: bits_as<uint32_t>(float) and bits_as<float>(uint32_t).
template <class To, class From>
EMBER_HD inline To bits_as(From v) {
  static_assert(sizeof(To) == 4 && sizeof(From) == 4);
#if defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<To, float>) return __uint_as_float(v);
  else return __float_as_uint(v);
#else
  To out;
  std::memcpy(&out, &v, 4);
  return out;
#endif
}

// binary32 -> binary16, round to nearest even, with subnormals, infinities and NaN.
EMBER_HD inline uint16_t f32_to_f16_bits(float f) {
  uint32_t x = bits_as<uint32_t>(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t mag = x & 0x7fffffffu;
  if (mag >= 0x7f800000u) {  // inf or NaN
    return static_cast<uint16_t>(sign | 0x7c00u | (mag > 0x7f800000u ? 0x0200u : 0u));
  }
  if (mag >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to inf
  if (mag < 0x38800000u) {                                               // result is subnormal or zero
    if (mag < 0x33000000u) return static_cast<uint16_t>(sign);           // below half of the smallest subnormal
    uint32_t exp = mag >> 23;
    uint32_t mant = (mag & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - exp;  // 14 + (112 - exp) ... brings mantissa to subnormal position
    uint32_t halfway = 1u << (shift - 1);
    uint32_t rest = mant & ((1u << shift) - 1u);
    uint32_t r = mant >> shift;
    if (rest > halfway || (rest == halfway && (r & 1u))) ++r;
    return static_cast<uint16_t>(sign | r);
  }
  // normal: rebias exponent (127 -> 15) and round the mantissa from 23 to 10 bits
  uint32_t r = mag - 0x38000000u;  // subtract (127 - 15) << 23
  uint32_t rest = r & 0x1fffu;
  r >>= 13;
  if (rest > 0x1000u || (rest == 0x1000u && (r & 1u))) ++r;  // carry may bump the exponent: correct
  return static_cast<uint16_t>(sign | r);
}

EMBER_HD inline float f16_bits_to_f32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    if (mant == 0) return bits_as<float>(sign);
    // subnormal: value = mant * 2^-24
    float v = static_cast<float>(mant) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  if (exp == 31) return bits_as<float>(sign | 0x7f800000u | (mant << 13));
  return bits_as<float>(sign | ((exp + 112u) << 23) | (mant << 13));
}

EMBER_HD inline uint16_t f32_to_bf16_bits(float f) {
  uint32_t x = bits_as<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  uint32_t lsb = (x >> 16) & 1u;
  x += 0x7fffu + lsb;
  return static_cast<uint16_t>(x >> 16);
}

EMBER_HD inline float bf16_bits_to_f32(uint16_t b) { return bits_as<float>(static_cast<uint32_t>(b) << 16); }

// A Half or BFloat16 holding the bits `b` as they are.
template <class T>
EMBER_HD constexpr T with_bits(uint16_t b) {
  T h{};
  h.bits = b;
  return h;
}

}  // namespace detail

struct alignas(2) Half {
  uint16_t bits;
  Half() = default;
  EMBER_HD static constexpr Half from_bits(uint16_t b) { return detail::with_bits<Half>(b); }
#if defined(__CUDA_ARCH__)
  EMBER_HD Half(float f) : bits(__half_as_ushort(__float2half_rn(f))) {}
  EMBER_HD operator float() const { return __half2float(__ushort_as_half(bits)); }
#else
  EMBER_HD Half(float f) : bits(detail::f32_to_f16_bits(f)) {}
  EMBER_HD operator float() const { return detail::f16_bits_to_f32(bits); }
#endif
  EMBER_HD explicit Half(double d) : Half(static_cast<float>(d)) {}
  EMBER_HD explicit Half(int v) : Half(static_cast<float>(v)) {}
  EMBER_HD explicit Half(int64_t v) : Half(static_cast<float>(v)) {}
};

struct alignas(2) BFloat16 {
  uint16_t bits;
  BFloat16() = default;
  EMBER_HD static constexpr BFloat16 from_bits(uint16_t b) { return detail::with_bits<BFloat16>(b); }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  EMBER_HD BFloat16(float f) : bits(__bfloat16_as_ushort(__float2bfloat16_rn(f))) {}
#else
  EMBER_HD BFloat16(float f) : bits(detail::f32_to_bf16_bits(f)) {}
#endif
  EMBER_HD operator float() const { return detail::bf16_bits_to_f32(bits); }
  EMBER_HD explicit BFloat16(double d) : BFloat16(static_cast<float>(d)) {}
  EMBER_HD explicit BFloat16(int v) : BFloat16(static_cast<float>(v)) {}
  EMBER_HD explicit BFloat16(int64_t v) : BFloat16(static_cast<float>(v)) {}
};

static_assert(sizeof(Half) == 2 && sizeof(BFloat16) == 2);

inline std::ostream& operator<<(std::ostream& os, Half h) { return os << static_cast<float>(h); }
inline std::ostream& operator<<(std::ostream& os, BFloat16 h) { return os << static_cast<float>(h); }

}  // namespace ember
