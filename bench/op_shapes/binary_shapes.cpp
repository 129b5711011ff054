// Benchmark shapes of the elementwise binary family and its tensor-scalar forms (kernels/ops/binary.*).
#include "bench/op_shapes/op_shapes.h"

namespace ember {

namespace {

std::vector<BenchCase> binary_benches() {
  Shape s{int64_t{1} << 26};
  return {{"2^26 f32", {{s, DType::f32}, {s, DType::f32}}, {}, {}},
          {"2^26 bf16", {{s, DType::bf16}, {s, DType::bf16}}, {}, {}},
          {"[8192, 8192] + [8192] f32", {{Shape{8192, 8192}, DType::f32}, {Shape{8192}, DType::f32}}, {}, {}}};
}
std::vector<BenchCase> binary_scalar_benches() {
  return {{"2^26 f32", {{Shape{int64_t{1} << 26}, DType::f32}}, ScalarAttrs{1.5}, {}}};
}

}  // namespace

#define EMBER_BINARY(name, Functor)                                    \
  std::vector<BenchCase> benches_##name() { return binary_benches(); } \
  std::vector<BenchCase> benches_##name##_scalar() { return binary_scalar_benches(); }
#include "kernels/ops.def"

}  // namespace ember
