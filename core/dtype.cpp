#include "core/dtype.h"

#include <string>

namespace ember {

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::u8: return "u8";
    case DType::boolean: return "bool";
  }
  return "?";
}

DType parse_dtype(std::string_view s) {
  struct Name {
    std::string_view name;
    DType t;
  };
  static constexpr Name names[] = {
      {"f32", DType::f32},   {"float32", DType::f32},   {"float", DType::f32},    {"fp32", DType::f32},
      {"f64", DType::f64},   {"float64", DType::f64},   {"double", DType::f64},   {"fp64", DType::f64},
      {"f16", DType::f16},   {"float16", DType::f16},   {"half", DType::f16},     {"fp16", DType::f16},
      {"bf16", DType::bf16}, {"bfloat16", DType::bf16}, {"i32", DType::i32},      {"int32", DType::i32},
      {"int", DType::i32},   {"i64", DType::i64},       {"int64", DType::i64},    {"long", DType::i64},
      {"u8", DType::u8},     {"uint8", DType::u8},      {"bool", DType::boolean},
  };
  for (const auto& n : names)
    if (n.name == s) return n.t;
  EMBER_FAIL("unknown dtype '", s, "' (expected one of f32, f64, f16, bf16, i32, i64, u8, bool)");
}

std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }

namespace {
int float_rank(DType t) {
  switch (t) {
    case DType::f16: return 1;
    case DType::bf16: return 1;
    case DType::f32: return 2;
    case DType::f64: return 3;
    default: return 0;
  }
}
int int_rank(DType t) {
  switch (t) {
    case DType::boolean: return 0;
    case DType::u8: return 1;
    case DType::i32: return 2;
    case DType::i64: return 3;
    default: return -1;
  }
}
}  // namespace

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  bool fa = is_floating(a), fb = is_floating(b);
  if (fa && fb) {
    if (is_reduced_float(a) && is_reduced_float(b)) return DType::f32;  // f16 with bf16
    return float_rank(a) >= float_rank(b) ? a : b;
  }
  if (fa) return a;
  if (fb) return b;
  // Both integral or bool. u8 with a signed type: the signed type (i32 at least).
  return int_rank(a) >= int_rank(b) ? a : b;
}

DType promote_with_scalar(DType t, bool is_integral_scalar) {
  if (is_floating(t)) return t;
  if (is_integral_scalar) return t == DType::boolean ? DType::i64 : t;
  return kDefaultFloat;
}

}  // namespace ember
