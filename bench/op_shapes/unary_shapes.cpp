// Benchmark shapes of the elementwise unary family and its fused backwards (kernels/ops/unary.*).
#include "bench/op_shapes/op_shapes.h"

namespace ember {

namespace {

std::vector<BenchCase> unary_benches() {
  return {{"2^26 f32", {{Shape{int64_t{1} << 26}, DType::f32}}, {}, {}},
          {"2^26 bf16", {{Shape{int64_t{1} << 26}, DType::bf16}}, {}, {}}};
}
std::vector<BenchCase> unary_backward_benches() {
  Shape s{int64_t{1} << 26};
  return {{"2^26 f32", {{s, DType::f32}, {s, DType::f32}}, {}, {}}};
}

}  // namespace

#define EMBER_UNARY(name, Functor)                                    \
  std::vector<BenchCase> benches_##name() { return unary_benches(); } \
  std::vector<BenchCase> benches_##name##_backward() { return unary_backward_benches(); }
#include "kernels/ops.def"

}  // namespace ember
