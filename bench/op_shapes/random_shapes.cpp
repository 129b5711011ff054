// Benchmark shapes of uniform, normal and bernoulli (kernels/ops/random.*).
#include "bench/op_shapes/op_shapes.h"
#include "kernels/ops/random.h"

namespace ember {

namespace {

std::vector<BenchCase> random_benches() {
  return std::vector<BenchCase>{{"2^26 f32", {{Shape{int64_t{1} << 26}, DType::f32}}, RandomAttrs{0, 1, 7, 0}, {}}};
}

}  // namespace

std::vector<BenchCase> benches_uniform() { return random_benches(); }
std::vector<BenchCase> benches_normal() { return random_benches(); }
std::vector<BenchCase> benches_bernoulli() { return random_benches(); }

}  // namespace ember
