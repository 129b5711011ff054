// Test samples of the elementwise unary family and its fused backwards (kernels/ops/unary.*): every
// elementwise shape and layout over the functor's domain (kLo, kHi), kept away from its kinks.
#include <iterator>

#include "kernels/ops/unary.h"
#include "tests/op_samples/sample_inputs.h"

namespace ember {

namespace {

// A functor's kinks: its optional kKinks member (host-only, see unary.h), else none.
template <class Op>
std::vector<double> unary_kinks() {
  if constexpr (requires { Op::kKinks; }) return {std::begin(Op::kKinks), std::end(Op::kKinks)};
  else return {};
}

template <class Op>
std::vector<OpSample> unary_op_samples() {
  return samples::unary_samples(Op::kLo, Op::kHi, unary_kinks<Op>());
}

template <class Op>
std::vector<OpSample> unary_backward_samples() {
  std::vector<OpSample> out;
  uint64_t seed = 1000;
  for (OpSample& s : unary_op_samples<Op>()) {
    OpSample b;
    b.name = s.name;
    b.inputs = {samples::uniform(s.inputs[0].shape(), -1, 1, ++seed), s.inputs[0]};
    b.gradcheck = false;  // the backward kernels are not differentiated again
    out.push_back(std::move(b));
  }
  return out;
}

}  // namespace

// Per ops.def line: the op's samples and its fused backward's.
#define EMBER_UNARY(name, Functor)                                                      \
  std::vector<OpSample> samples_##name() { return unary_op_samples<unary::Functor>(); } \
  std::vector<OpSample> samples_##name##_backward() { return unary_backward_samples<unary::Functor>(); }
#include "kernels/ops.def"

}  // namespace ember
