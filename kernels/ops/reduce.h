// Reductions over any set of dims: sum, mean, amax, amin, argmax, var.
//
// Shapes: x [d0..dn); dims D (empty = all). out has x's shape with the dims in D removed (or kept
// as size 1 with keepdim). argmax takes exactly one dim (or none: the flattened index).
//   sum    Σ x                   ints and bool sum to i64
//   mean   Σ x / R               R = product of the reduced sizes; NaN when R = 0
//   amax   max x, NaN if any     amin likewise
//   argmax first index of the max (NaN counts as the max), i64
//   var    Σ (x - mean)^2 / (R - correction), Welford's update; NaN when R - correction <= 0
// Gradients: sum: g broadcast; mean: g / R broadcast; amax/amin: g split evenly among the
// elements equal to the result; var: g * 2 (x - mean) / (R - correction).
//
// Plan: the input (contiguous) is viewed as [A, R, B] when the reduced dims are adjacent in
// memory (B = product of the kept dims after them); otherwise it is permuted so the reduced dims
// come last ([A, R, 1]). Rows (B = 1) and columns (B > 1) have their own kernels on both devices.
// Accumulation: double on the CPU for floating inputs (the reference), float on CUDA for
// f32/f16/bf16 (and double for f64), i64 for integers.
#pragma once

#include <cstdint>
#include <limits>
#include <type_traits>

#include "core/dtype.h"
#include "core/tensor.h"

namespace ember {

struct ReduceAttrs {
  uint64_t mask = 0;  // bit d set: reduce dim d (after wrapping); 0 with all_dims = 1: everything
  int64_t keepdim = 0;
  double correction = 1;  // var
};

struct ReducePlan {
  int64_t A = 1, R = 1, B = 1;
  bool permute = false;       // the input must first be permuted (kept dims, then reduced)
  std::vector<int64_t> perm;  // for permute
  Shape out_shape;            // with or without the kept size-1 dims, per keepdim
};

// mask: which dims to reduce (bit d), already wrapped; ndim: x.dim().
ReducePlan plan_reduce(const Tensor& x, uint64_t mask, bool keepdim);
// x laid out as the plan wants it: contiguous, permuted when the reduced dims are not adjacent.
Tensor reduce_input(const Tensor& x, const ReducePlan& p);
// How many elements of shape `s` each output of a reduction over `mask` combines.
int64_t reduced_count(const Shape& s, uint64_t mask);

namespace reduce {

// An accumulator for value reductions: Acc is the running state, T the element type.
template <class Acc>
struct SumOp {
  using acc_type = Acc;
  EMBER_HD static Acc init() { return Acc(0); }
  template <class T>
  EMBER_HD static Acc step(Acc a, T v, int64_t) {
    return a + static_cast<Acc>(v);
  }
  EMBER_HD static Acc merge(Acc a, Acc b) { return a + b; }
};

template <class Acc>
struct MaxOp {
  using acc_type = Acc;
  EMBER_HD static Acc init() {
    if constexpr (std::is_floating_point_v<Acc>) return -std::numeric_limits<Acc>::infinity();
    else return std::numeric_limits<Acc>::lowest();
  }
  EMBER_HD static Acc merge(Acc a, Acc b) { return (a != a || a > b) ? a : (b != b ? b : (a > b ? a : b)); }
  template <class T>
  EMBER_HD static Acc step(Acc a, T v, int64_t) {
    return merge(a, static_cast<Acc>(v));
  }
};

template <class Acc>
struct MinOp {
  using acc_type = Acc;
  EMBER_HD static Acc init() {
    if constexpr (std::is_floating_point_v<Acc>) return std::numeric_limits<Acc>::infinity();
    else return std::numeric_limits<Acc>::max();
  }
  EMBER_HD static Acc merge(Acc a, Acc b) { return (a != a || a < b) ? a : (b != b ? b : (a < b ? a : b)); }
  template <class T>
  EMBER_HD static Acc step(Acc a, T v, int64_t) {
    return merge(a, static_cast<Acc>(v));
  }
};

// argmax: (value, index); ties and NaN resolved towards the lower index, NaN beats everything.
template <class V>
struct ArgMaxAcc {
  V value;
  int64_t index;
};
template <class V>
struct ArgMaxOp {
  using acc_type = ArgMaxAcc<V>;
  EMBER_HD static acc_type init() {
    if constexpr (std::is_floating_point_v<V>) return {-std::numeric_limits<V>::infinity(), -1};
    else return {std::numeric_limits<V>::lowest(), -1};
  }
  EMBER_HD static bool better(const acc_type& a, const acc_type& b) {  // is a preferred over b?
    if (a.index < 0) return false;
    if (b.index < 0) return true;
    bool an = a.value != a.value, bn = b.value != b.value;
    if (an || bn) return an && (!bn || a.index < b.index);
    if (a.value != b.value) return a.value > b.value;
    return a.index < b.index;
  }
  EMBER_HD static acc_type merge(acc_type a, acc_type b) { return better(a, b) ? a : b; }
  template <class T>
  EMBER_HD static acc_type step(acc_type a, T v, int64_t i) {
    return merge(a, acc_type{static_cast<V>(v), i});
  }
};

// Welford's running (count, mean, M2).
template <class V>
struct WelfordAcc {
  V mean;
  V m2;
  int64_t n;
};
template <class V>
struct WelfordOp {
  using acc_type = WelfordAcc<V>;
  EMBER_HD static acc_type init() { return {V(0), V(0), 0}; }
  template <class T>
  EMBER_HD static acc_type step(acc_type a, T v, int64_t) {
    V x = static_cast<V>(v);
    a.n += 1;
    V d = x - a.mean;
    a.mean += d / static_cast<V>(a.n);
    a.m2 += d * (x - a.mean);
    return a;
  }
  EMBER_HD static acc_type merge(acc_type a, acc_type b) {
    if (a.n == 0) return b;
    if (b.n == 0) return a;
    int64_t n = a.n + b.n;
    V d = b.mean - a.mean;
    V nb_over_n = static_cast<V>(b.n) / static_cast<V>(n);
    acc_type r;
    r.n = n;
    r.mean = a.mean + d * nb_over_n;
    r.m2 = a.m2 + b.m2 + d * d * static_cast<V>(a.n) * nb_over_n;
    return r;
  }
};

}  // namespace reduce

}  // namespace ember
