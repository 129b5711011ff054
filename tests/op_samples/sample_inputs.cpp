// The sample-input helpers declared in tests/op_samples/sample_inputs.h.
#include "tests/op_samples/sample_inputs.h"

#include <cmath>

#include "core/rng.h"
#include "kernels/functional.h"

namespace ember::samples {

Tensor uniform(const Shape& shape, double lo, double hi, uint64_t seed) {
  Tensor t = empty(shape, DType::f64);
  double* p = t.data<double>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    // two 24-bit draws give a 48-bit uniform: plenty for f64 test values
    double u = philox_uniform(seed, 0, 2 * i) + philox_uniform(seed, 0, 2 * i + 1) / 16777216.0;
    p[i] = lo + (hi - lo) * u;
  }
  return t;
}

Tensor away_from(const Shape& shape, double lo, double hi, const std::vector<double>& kinks, double margin,
                 uint64_t seed) {
  Tensor t = uniform(shape, lo, hi, seed);
  double* p = t.data<double>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    for (double k : kinks) {
      if (std::fabs(p[i] - k) < margin) p[i] = k + (p[i] >= k ? margin : -margin);
    }
  }
  return t;
}

Tensor distinct(const Shape& shape, double lo, double hi, uint64_t seed) {
  Tensor t = empty(shape, DType::f64);
  int64_t n = t.numel();
  double* p = t.data<double>();
  for (int64_t i = 0; i < n; ++i) p[i] = lo + (hi - lo) * (static_cast<double>(i) + 0.5) / static_cast<double>(n);
  for (int64_t i = n - 1; i > 0; --i) {
    auto j = static_cast<int64_t>(philox(seed, static_cast<uint64_t>(i)).v[1] % static_cast<uint64_t>(i + 1));
    std::swap(p[i], p[j]);
  }
  return t;
}

Tensor randint(const Shape& shape, int64_t n, uint64_t seed) {
  Tensor t = empty(shape, DType::i64);
  int64_t* p = t.data<int64_t>();
  for (int64_t i = 0; i < t.numel(); ++i)
    p[i] = static_cast<int64_t>(philox(seed, static_cast<uint64_t>(i)).v[0] % static_cast<uint64_t>(n));
  return t;
}

Tensor transposed(const Shape& shape, double lo, double hi, uint64_t seed) {
  EMBER_CHECK(shape.size() >= 2, "transposed sample needs 2+ dims");
  Shape s = shape;
  std::swap(s[s.size() - 1], s[s.size() - 2]);
  return uniform(s, lo, hi, seed).transpose(-1, -2);
}

Tensor strided_slice(const Shape& shape, double lo, double hi, uint64_t seed) {
  EMBER_CHECK(shape.size() >= 1, "strided sample needs 1+ dims");
  Shape s = shape;
  s[s.size() - 1] = 2 * shape.back() + 1;
  return uniform(s, lo, hi, seed).slice(-1, 1, 2 * shape.back() + 1, 2);
}

Tensor expanded(const Shape& shape, double lo, double hi, uint64_t seed) {
  EMBER_CHECK(shape.size() >= 1, "expanded sample needs 1+ dims");
  Shape s = shape;
  s[0] = 1;
  return uniform(s, lo, hi, seed).expand(shape);
}

std::vector<NamedShape> elementwise_shapes() {
  return {{"empty [0]", Shape{0}},
          {"empty [3, 0]", Shape{3, 0}},
          {"scalar []", Shape{}},
          {"[1]", Shape{1}},
          {"[7]", Shape{7}},
          {"[1023]", Shape{1023}},
          {"[2^20+3]", Shape{(1 << 20) + 3}},
          {"[5, 6]", Shape{5, 6}},
          {"[2, 3, 4, 5]", Shape{2, 3, 4, 5}}};
}

std::vector<OpSample> unary_samples(double lo, double hi, const std::vector<double>& kinks) {
  std::vector<OpSample> out;
  uint64_t seed = 1;
  const double margin = 1e-3;  // far beyond the gradcheck step (1e-6)
  for (const auto& ns : elementwise_shapes()) {
    OpSample s;
    s.name = ns.name;
    s.inputs = {away_from(ns.shape, lo, hi, kinks, margin, ++seed)};
    out.push_back(std::move(s));
  }
  auto layout = [&](const char* name, Tensor t) {
    OpSample s;
    s.name = name;
    s.inputs = {std::move(t)};
    out.push_back(std::move(s));
  };
  layout("transposed [6, 5]", away_from({5, 6}, lo, hi, kinks, margin, ++seed).transpose(0, 1));
  layout("strided [4, 7] step 2", away_from({4, 15}, lo, hi, kinks, margin, ++seed).slice(1, 1, 15, 2));
  layout("expanded [1, 9] -> [4, 9]", away_from({1, 9}, lo, hi, kinks, margin, ++seed).expand({4, 9}));
  // values just either side of each kink (the derivative must pick the right branch)
  if (!kinks.empty()) {
    std::vector<double> v;
    for (double k : kinks)
      for (double d : {-0.1, -0.01, -margin, margin, 0.01, 0.1}) v.push_back(k + d);
    OpSample s;
    s.name = "near kinks";
    s.inputs = {tensor(v, TensorOptions(DType::f64))};
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace ember::samples
