// Benchmark shapes of total_norm (kernels/ops/grad_norm.*).
#include "bench/op_shapes/op_shapes.h"
#include "kernels/functional.h"
#include "kernels/ops/grad_norm.h"

namespace ember {

std::vector<BenchCase> benches_total_norm() {
  BenchCase b{"60 tensors, 25M elements", {}, TotalNormAttrs{2}, [](Device d) {
                std::vector<Tensor> in;
                for (int i = 0; i < 60; ++i) in.push_back(uniform({i % 3 == 0 ? 1000003 : 200003}, -1, 1, d));
                return in;
              }};
  return std::vector<BenchCase>{b};
}

}  // namespace ember
