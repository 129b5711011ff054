// Benchmark shapes of dropout (kernels/ops/dropout.*).
#include "bench/op_shapes/op_shapes.h"
#include "kernels/ops/dropout.h"

namespace ember {

std::vector<BenchCase> benches_dropout() {
  Shape s{int64_t{1} << 26};
  return std::vector<BenchCase>{{"2^26 f32", {TensorSpec{s, DType::f32, {}}}, DropoutAttrs{0.5, 7, 0}, {}},
                                {"2^26 bf16", {TensorSpec{s, DType::bf16, {}}}, DropoutAttrs{0.5, 7, 0}, {}}};
}

}  // namespace ember
