// Benchmark shapes of fill (kernels/ops/fill.*).
#include "bench/op_shapes/op_shapes.h"

namespace ember {

std::vector<BenchCase> benches_fill() {
  return std::vector<BenchCase>{{"2^26 f32", {{Shape{int64_t{1} << 26}, DType::f32}}, ScalarAttrs{1.5}, {}}};
}

}  // namespace ember
