// Test samples of the reductions sum, mean, amax, amin, argmax and var (kernels/ops/reduce.*):
// adjacent and non-adjacent reduced dims, size-1 and empty dims, long rows and tall columns, ties.
#include "kernels/functional.h"
#include "kernels/ops/reduce.h"
#include "tests/op_samples/sample_inputs.h"

namespace ember {

namespace {

// which reduction a sample list is for
enum class Kind { sum, mean, amax, amin, argmax, var };

uint64_t mask_of(std::initializer_list<int> dims) {
  uint64_t m = 0;
  for (int d : dims) m |= uint64_t{1} << d;
  return m;
}

template <Kind K>
std::vector<OpSample> reduce_samples() {
  std::vector<OpSample> out;
  uint64_t seed = 500;
  const char* why = "the CUDA kernels sum in f32 as a tree of partial sums, the CPU reference sequentially in f64";
  auto mk = [&](std::string name, Tensor x, uint64_t mask, bool keepdim, double correction = 1) {
    OpSample s;
    s.name = std::move(name);
    s.inputs = {std::move(x)};
    s.attrs = ReduceAttrs{mask, keepdim ? 1 : 0, correction};
    s.gradcheck = K != Kind::argmax;
    // var is NaN (no gradient) when the reduced count does not exceed the correction
    if (K == Kind::var && reduced_count(s.inputs[0].shape(), mask) <= correction) s.gradcheck = false;
    if (s.inputs[0].numel() > 4096) {
      s.tol = {{DType::f32, {1e-5, 1e-3}}};
      s.tol_note = why;
    }
    out.push_back(std::move(s));
  };
  // amax/amin have kinks at ties: their inputs are distinct values
  auto u = [&](Shape s) {
    ++seed;
    return K == Kind::amax || K == Kind::amin ? samples::distinct(s, -2, 2, seed) : samples::uniform(s, -2, 2, seed);
  };
  mk("[1023] all", u({1023}), mask_of({0}), false);
  mk("[5, 6] dim 0", u({5, 6}), mask_of({0}), false);
  mk("[5, 6] dim 1 keepdim", u({5, 6}), mask_of({1}), true);
  mk("[5, 6] all keepdim", u({5, 6}), mask_of({0, 1}), true);
  mk("[2, 3, 4, 5] dims 1, 2 (adjacent)", u({2, 3, 4, 5}), mask_of({1, 2}), false);
  mk("[2, 3, 4, 5] dims 1, 3 (not adjacent)", u({2, 3, 4, 5}), mask_of({1, 3}), false);
  mk("[2, 1, 7] dim 1 (size 1)", u({2, 1, 7}), mask_of({1}), false);
  mk("transposed [6, 5] dim 1", u({5, 6}).transpose(0, 1), mask_of({1}), false);
  mk("scalar", u({}), 0, false);
  mk("[2^20+3] all", u({(1 << 20) + 3}), mask_of({0}), false);
  mk("[64, 4096] dim 1 (long rows)", u({64, 4096}), mask_of({1}), false);
  mk("[4096, 10] dim 0 (tall columns)", u({4096, 10}), mask_of({0}), false);
  if constexpr (K == Kind::sum || K == Kind::mean) {
    mk("[0, 3] dim 0 (empty)", u({0, 3}), mask_of({0}), false);
    mk("[3, 0] dim 0", u({3, 0}), mask_of({0}), false);
  }
  if constexpr (K == Kind::var) {
    mk("[5, 6] dim 1 correction 0", u({5, 6}), mask_of({1}), false, 0);
    mk("[1] correction 1 (nan)", u({1}), mask_of({0}), false, 1);
    out.back().gradcheck = false;
  }
  if constexpr (K == Kind::argmax || K == Kind::amax || K == Kind::amin) {
    // ties: the first index wins; amax's gradient is split (not gradchecked: ties are kinks)
    Tensor t = tensor({1, 3, 3, 2, -1, 3, 0, 0}, {2, 4}, TensorOptions(DType::f64));
    mk("ties [2, 4] dim 1", t, mask_of({1}), false);
    out.back().gradcheck = false;
  }
  return out;
}

}  // namespace

std::vector<OpSample> samples_sum() { return reduce_samples<Kind::sum>(); }
std::vector<OpSample> samples_mean() { return reduce_samples<Kind::mean>(); }
std::vector<OpSample> samples_amax() { return reduce_samples<Kind::amax>(); }
std::vector<OpSample> samples_amin() { return reduce_samples<Kind::amin>(); }
std::vector<OpSample> samples_argmax() { return reduce_samples<Kind::argmax>(); }
std::vector<OpSample> samples_var() { return reduce_samples<Kind::var>(); }

}  // namespace ember
