// Test samples of uniform, normal and bernoulli (kernels/ops/random.*): the same Philox numbers on
// every device, at sizes that end mid-way through a Philox block.
#include "kernels/ops/random.h"
#include "tests/op_samples/sample_inputs.h"

namespace ember {

namespace {

std::vector<OpSample> random_samples(double a, double b) {
  std::vector<OpSample> out;
  for (auto [name, shape] : std::vector<std::pair<const char*, Shape>>{
           {"[1]", {1}}, {"[7]", {7}}, {"[1023]", {1023}}, {"[2^20+3]", {(1 << 20) + 3}}, {"[0]", {0}}}) {
    OpSample s;
    s.name = name;
    s.inputs = {samples::uniform(shape, 0, 1, 1)};
    s.attrs = RandomAttrs{a, b, 1234, 56};
    s.gradcheck = false;
    s.dtypes = {DType::f32, DType::f16, DType::bf16};
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace

std::vector<OpSample> samples_uniform() { return random_samples(-2, 3); }
std::vector<OpSample> samples_normal() { return random_samples(0.5, 2); }
std::vector<OpSample> samples_bernoulli() { return random_samples(0.3, 0); }

}  // namespace ember
