// Test samples of the elementwise binary family and its tensor-scalar forms (kernels/ops/binary.*):
// every elementwise shape, broadcast pairs, transposed, expanded and strided operands, ties for
// the comparisons and maximum/minimum.
#include <string>
#include <type_traits>

#include "core/rng.h"
#include "kernels/ops/binary.h"
#include "tests/op_samples/sample_inputs.h"

namespace ember {

namespace {

struct Domain {
  double alo, ahi, blo, bhi;
  bool b_away_from_zero = false;
};

template <class Op>
Domain domain() {
  if constexpr (std::is_same_v<Op, binary::Div>) return {-3, 3, 0.5, 2, true};
  if constexpr (std::is_same_v<Op, binary::Pow>) return {0.5, 2, -2, 2, false};
  return {-3, 3, -3, 3, false};
}

Tensor sample(const Shape& s, double lo, double hi, bool away_from_zero, uint64_t seed) {
  Tensor t = samples::uniform(s, lo, hi, seed);
  if (away_from_zero) {  // random sign, magnitude in [lo, hi)
    double* p = t.data<double>();
    for (int64_t i = 0; i < t.numel(); ++i)
      if (philox(seed + 7, static_cast<uint64_t>(i)).v[0] & 1u) p[i] = -p[i];
  }
  return t;
}

template <class Op>
std::vector<OpSample> binary_samples() {
  Domain d = domain<Op>();
  std::vector<OpSample> out;
  uint64_t seed = 100;
  auto add_case = [&](std::string name, Tensor a, Tensor b) {
    OpSample& s = samples::add_sample(out, std::move(name));
    s.inputs = {std::move(a), std::move(b)};
    s.gradcheck = !Op::kCompare;
    if constexpr (std::is_same_v<Op, binary::Pow>) {
      // d/db a^b = g a^b log(a) is three f16 roundings on each device, and CUDA's powf/logf differ
      // from the host's in the last f32 bit: two elements of 2^20+3 were 2 f16 ulps apart on an H200
      s.tol = {{DType::f16, {2e-3, 1e-5}}, {DType::bf16, {3.2e-2, 1e-5}}};
      s.tol_note = "the exponent's gradient is a product of three rounded factors";
    }
  };
  for (const auto& ns : samples::elementwise_shapes()) {
    seed += 2;
    add_case(ns.name, sample(ns.shape, d.alo, d.ahi, false, seed),
             sample(ns.shape, d.blo, d.bhi, d.b_away_from_zero, seed + 1));
  }
  std::vector<std::pair<Shape, Shape>> pairs = {{{3, 1}, {1, 4}},          {{5, 6}, {6}}, {{}, {4, 5}},
                                                {{2, 3, 4, 5}, {3, 1, 5}}, {{0, 3}, {3}}, {{7, 1, 3}, {1, 2, 1}}};
  for (auto& [sa, sb] : pairs) {
    seed += 2;
    add_case("broadcast " + str(sa) + " with " + str(sb), sample(sa, d.alo, d.ahi, false, seed),
             sample(sb, d.blo, d.bhi, d.b_away_from_zero, seed + 1));
  }
  add_case("transposed a, expanded b", sample({5, 6}, d.alo, d.ahi, false, 901).transpose(0, 1),
           sample({1, 5}, d.blo, d.bhi, d.b_away_from_zero, 902).expand({6, 5}));
  add_case("strided both", sample({4, 9}, d.alo, d.ahi, false, 903).slice(1, 0, 9, 2),
           sample({4, 10}, d.blo, d.bhi, d.b_away_from_zero, 904).slice(1, 1, 10, 2));
  if constexpr (Op::kCompare || std::is_same_v<Op, binary::Maximum> || std::is_same_v<Op, binary::Minimum>) {
    // ties: equal values (comparison results and the split gradient of maximum/minimum)
    Tensor a = sample({33}, -2, 2, false, 905);
    Tensor b = a.clone();
    b.data<double>()[0] += 1;
    OpSample& s = samples::add_sample(out, "ties");
    s.inputs = {a, b};
    s.gradcheck = false;  // central differences straddle the tie
  }
  return out;
}

template <class Op>
std::vector<OpSample> binary_scalar_samples() {
  Domain d = domain<Op>();
  std::vector<OpSample> out;
  uint64_t seed = 300;
  double value = std::is_same_v<Op, binary::Pow> ? 2.5 : (std::is_same_v<Op, binary::Div> ? -1.75 : 0.75);
  for (const auto& ns : samples::elementwise_shapes()) {
    OpSample& s = samples::add_sample(out, ns.name);
    s.inputs = {sample(ns.shape, d.alo, d.ahi, false, ++seed)};
    s.attrs = ScalarAttrs{value};
    s.gradcheck = !Op::kCompare;
  }
  OpSample& t = samples::add_sample(out, "transposed");
  t.inputs = {sample({5, 6}, d.alo, d.ahi, false, 999).transpose(0, 1)};
  t.attrs = ScalarAttrs{value};
  t.gradcheck = !Op::kCompare;
  return out;
}

}  // namespace

// Per ops.def line: samples of the tensor-tensor op and of its tensor-scalar form.
#define EMBER_BINARY(name, Functor)                                                    \
  std::vector<OpSample> samples_##name() { return binary_samples<binary::Functor>(); } \
  std::vector<OpSample> samples_##name##_scalar() { return binary_scalar_samples<binary::Functor>(); }
#include "kernels/ops.def"

}  // namespace ember
