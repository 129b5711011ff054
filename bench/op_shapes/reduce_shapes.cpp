// Benchmark shapes of the reductions (kernels/ops/reduce.*): the same cases for each.
#include "bench/op_shapes/op_shapes.h"
#include "kernels/ops/reduce.h"

namespace ember {

namespace {

std::vector<BenchCase> reduce_benches() {
  return {{"[2^26] all f32", {{Shape{int64_t{1} << 26}, DType::f32}}, ReduceAttrs{1, 0, 1}, {}},
          {"[8192, 8192] dim 1 f32", {{Shape{8192, 8192}, DType::f32}}, ReduceAttrs{2, 0, 1}, {}},
          {"[8192, 8192] dim 0 f32", {{Shape{8192, 8192}, DType::f32}}, ReduceAttrs{1, 0, 1}, {}},
          {"[512, 10] dim 1 f32", {{Shape{512, 10}, DType::f32}}, ReduceAttrs{2, 0, 1}, {}}};
}

}  // namespace

std::vector<BenchCase> benches_sum() { return reduce_benches(); }
std::vector<BenchCase> benches_mean() { return reduce_benches(); }
std::vector<BenchCase> benches_amax() { return reduce_benches(); }
std::vector<BenchCase> benches_amin() { return reduce_benches(); }
std::vector<BenchCase> benches_argmax() { return reduce_benches(); }
std::vector<BenchCase> benches_var() { return reduce_benches(); }

}  // namespace ember
