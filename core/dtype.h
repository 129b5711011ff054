// Element types and the promotion rules between them.
//
// Promotion follows PyTorch: bool < integers < floating point; within integers the wider wins
// (u8 with a signed type gives the signed type, at least i16 which ember lacks, so i32); within
// floats the wider wins, and f16 with bf16 gives f32. A Python-like scalar (a double passed to an
// op) never widens a floating tensor; it turns an integer or bool tensor into the default float.
#pragma once

#include <cstdint>
#include <ostream>
#include <string_view>
#include <type_traits>

#include "core/error.h"
#include "core/half.h"

namespace ember {

enum class DType : uint8_t { f32, f64, f16, bf16, i32, i64, u8, boolean };
inline constexpr int kNumDTypes = 8;

// The dtype that float factories and integer-to-float promotion use.
inline constexpr DType kDefaultFloat = DType::f32;

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::f16: return 2;
    case DType::bf16: return 2;
    case DType::i32: return 4;
    case DType::i64: return 8;
    case DType::u8: return 1;
    case DType::boolean: return 1;
  }
  return 0;
}

constexpr bool is_floating(DType t) {
  return t == DType::f32 || t == DType::f64 || t == DType::f16 || t == DType::bf16;
}
constexpr bool is_integral(DType t, bool include_bool = false) {
  return t == DType::i32 || t == DType::i64 || t == DType::u8 || (include_bool && t == DType::boolean);
}
constexpr bool is_reduced_float(DType t) { return t == DType::f16 || t == DType::bf16; }

// Short names as used in messages and tables: f32, bf16, i64, bool ...
std::string_view dtype_name(DType t);
// Accepts the short names and the PyTorch spellings (float32, half, bfloat16, int64, uint8 ...).
DType parse_dtype(std::string_view s);
std::ostream& operator<<(std::ostream& os, DType t);

DType promote_types(DType a, DType b);
// Result dtype of `tensor op scalar` where the scalar is a double (is_integral_scalar=false) or an
// integer (true).
DType promote_with_scalar(DType t, bool is_integral_scalar);

// A set of dtypes, for declaring what a kernel variant supports.
class DTypeSet {
 public:
  constexpr DTypeSet() = default;
  constexpr DTypeSet(std::initializer_list<DType> ts) {
    for (DType t : ts) bits_ |= 1u << static_cast<unsigned>(t);
  }
  constexpr bool has(DType t) const { return (bits_ >> static_cast<unsigned>(t)) & 1u; }
  constexpr DTypeSet operator|(DTypeSet o) const {
    DTypeSet s;
    s.bits_ = bits_ | o.bits_;
    return s;
  }
  constexpr bool empty() const { return bits_ == 0; }

 private:
  uint32_t bits_ = 0;
};

inline constexpr DTypeSet kFloatTypes{DType::f32, DType::f64, DType::f16, DType::bf16};
inline constexpr DTypeSet kIntTypes{DType::i32, DType::i64, DType::u8};
inline constexpr DTypeSet kNumericTypes = kFloatTypes | kIntTypes;
inline constexpr DTypeSet kAllTypes = kNumericTypes | DTypeSet{DType::boolean};

// C++ type <-> DType: the C++ type of each DType, in the enum's order (dtype_v<Half> is f16).
template <class... Ts>
struct TypeList {};
using DTypeScalars = TypeList<float, double, Half, BFloat16, int32_t, int64_t, uint8_t, bool>;

// The position of T in the list, -1 when it is not there.
template <class T, class... Ts>
constexpr int index_in(TypeList<Ts...>) {
  int i = 0;
  const bool found = ((std::is_same_v<T, Ts> || (++i, false)) || ...);
  return found ? i : -1;
}
template <class T>
struct dtype_of {
  static constexpr int index = index_in<T>(DTypeScalars{});
  static_assert(index >= 0, "dtype_of<T>: T is the C++ type of no DType");
  static constexpr DType value = static_cast<DType>(index);
};
static_assert(dtype_of<bool>::value == DType::boolean && static_cast<int>(DType::boolean) == kNumDTypes - 1,
              "DTypeScalars lists one C++ type per DType, in DType's order");
template <class T>
inline constexpr DType dtype_v = dtype_of<T>::value;

// The type arithmetic is done in: float for the 16-bit floats, the type itself otherwise.
template <class T>
struct acc_type {
  using type = T;
};
template <>
struct acc_type<Half> {
  using type = float;
};
template <>
struct acc_type<BFloat16> {
  using type = float;
};
template <>
struct acc_type<bool> {
  using type = bool;
};
template <class T>
using acc_t = typename acc_type<T>::type;

}  // namespace ember

// Runs the lambda with `scalar_t` bound to the C++ type of `dtype`. Which dtypes are accepted is
// part of the macro name so a kernel states what it instantiates (and compile time stays in check).
#define EMBER_DTYPE_CASE(enum_v, T, ...) \
  case ::ember::DType::enum_v: {         \
    using scalar_t = T;                  \
    return __VA_ARGS__();                \
  }

// The case lists the dispatchers share: each wider set extends the narrower one.
#define EMBER_DTYPE_CASES_FLOAT(...)                \
  EMBER_DTYPE_CASE(f32, float, __VA_ARGS__)         \
  EMBER_DTYPE_CASE(f64, double, __VA_ARGS__)        \
  EMBER_DTYPE_CASE(f16, ::ember::Half, __VA_ARGS__) \
  EMBER_DTYPE_CASE(bf16, ::ember::BFloat16, __VA_ARGS__)

#define EMBER_DTYPE_CASES_NUMERIC(...)        \
  EMBER_DTYPE_CASES_FLOAT(__VA_ARGS__)        \
  EMBER_DTYPE_CASE(i32, int32_t, __VA_ARGS__) \
  EMBER_DTYPE_CASE(i64, int64_t, __VA_ARGS__) \
  EMBER_DTYPE_CASE(u8, uint8_t, __VA_ARGS__)

#define EMBER_DISPATCH_FLOAT(dtype, name, ...)                                                     \
  [&] {                                                                                            \
    switch (dtype) {                                                                               \
      EMBER_DTYPE_CASES_FLOAT(__VA_ARGS__)                                                         \
      default: EMBER_FAIL(name, ": dtype ", dtype, " is not supported (expects a floating type)"); \
    }                                                                                              \
  }()

#define EMBER_DISPATCH_NUMERIC(dtype, name, ...)                                                  \
  [&] {                                                                                           \
    switch (dtype) {                                                                              \
      EMBER_DTYPE_CASES_NUMERIC(__VA_ARGS__)                                                      \
      default: EMBER_FAIL(name, ": dtype ", dtype, " is not supported (expects a numeric type)"); \
    }                                                                                             \
  }()

#define EMBER_DISPATCH_ALL(dtype, name, ...)       \
  [&] {                                            \
    switch (dtype) {                               \
      EMBER_DTYPE_CASES_NUMERIC(__VA_ARGS__)       \
      EMBER_DTYPE_CASE(boolean, bool, __VA_ARGS__) \
    }                                              \
    EMBER_FAIL(name, ": unknown dtype");           \
  }()

// Index tensors (gather, index_select, targets) are i32 or i64.
#define EMBER_DISPATCH_INDEX(dtype, name, ...)                                                      \
  [&] {                                                                                             \
    switch (dtype) {                                                                                \
      case ::ember::DType::i32: {                                                                   \
        using index_t = int32_t;                                                                    \
        return __VA_ARGS__();                                                                       \
      }                                                                                             \
      case ::ember::DType::i64: {                                                                   \
        using index_t = int64_t;                                                                    \
        return __VA_ARGS__();                                                                       \
      }                                                                                             \
      default: EMBER_FAIL(name, ": index dtype ", dtype, " is not supported (expects i32 or i64)"); \
    }                                                                                               \
  }()
