// Helpers for the op samples (tests/op_samples/*_samples.cpp): deterministic CPU f64 test inputs,
// including the awkward layouts every op is tested on (transposed, sliced, expanded) and values
// kept away from kinks.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "tests/op_samples/op_samples.h"

namespace ember::samples {

// Uniform values in [lo, hi) (CPU f64), a fixed function of `seed`.
Tensor uniform(const Shape& shape, double lo, double hi, uint64_t seed);
// Like uniform, but every value is at least `margin` away from each kink.
Tensor away_from(const Shape& shape, double lo, double hi, const std::vector<double>& kinks, double margin,
                 uint64_t seed);
// Distinct values, evenly spaced over [lo, hi) in a random order: no two elements are closer than
// (hi - lo) / numel, so ops with a kink at ties (amax, sort-like) can be gradchecked.
Tensor distinct(const Shape& shape, double lo, double hi, uint64_t seed);
// Random integers in [0, n) as i64.
Tensor randint(const Shape& shape, int64_t n, uint64_t seed);

// Layout variants of a sample input of logical shape `shape` (values from `make`):
Tensor transposed(const Shape& shape, double lo, double hi, uint64_t seed);     // last two dims swapped in memory
Tensor strided_slice(const Shape& shape, double lo, double hi, uint64_t seed);  // every other column of a wider tensor
Tensor expanded(const Shape& shape, double lo, double hi, uint64_t seed);       // dim 0 broadcast from size 1

// Appends a sample named `name` to `out`, to be filled in through the returned reference (valid
// until the next append).
inline OpSample& add_sample(std::vector<OpSample>& out, std::string name) {
  OpSample& s = out.emplace_back();
  s.name = std::move(name);
  return s;
}

// The shapes every elementwise op is tested on: empty, scalar, 1, 7, 1023, 2^20 + 3, 2-D and 4-D.
struct NamedShape {
  std::string name;
  Shape shape;
};
std::vector<NamedShape> elementwise_shapes();

// One sample per elementwise shape and layout for a unary op on [lo, hi) avoiding `kinks`.
std::vector<OpSample> unary_samples(double lo, double hi, const std::vector<double>& kinks);

}  // namespace ember::samples
