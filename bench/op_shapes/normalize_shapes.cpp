// Benchmark shapes of normalize_u8 (kernels/ops/normalize.*): MNIST and ImageNet batches.
#include "bench/op_shapes/op_shapes.h"
#include "kernels/ops/normalize.h"

namespace ember {

std::vector<BenchCase> benches_normalize_u8() {
  return {{"[256,1,28,28] MNIST batch -> f32",
           {{Shape{256, 1, 28, 28}, DType::u8, {}, -1}},
           normalize_u8_attrs({0.1307}, {0.3081}, DType::f32),
           {}},
          {"[256,3,224,224] ImageNet batch -> f32",
           {{Shape{256, 3, 224, 224}, DType::u8, {}, -1}},
           normalize_u8_attrs({0.485, 0.456, 0.406}, {0.229, 0.224, 0.225}, DType::f32),
           {}},
          {"[256,3,224,224] ImageNet batch -> bf16",
           {{Shape{256, 3, 224, 224}, DType::u8, {}, -1}},
           normalize_u8_attrs({0.485, 0.456, 0.406}, {0.229, 0.224, 0.225}, DType::bf16),
           {}}};
}

}  // namespace ember
