// Benchmark shapes of index_select (kernels/ops/index.*): batching MNIST by index on the device.
#include "bench/op_shapes/op_shapes.h"
#include "kernels/functional.h"
#include "kernels/ops/index.h"
#include "tests/op_samples/sample_inputs.h"

namespace ember {

std::vector<BenchCase> benches_index_select() {
  return std::vector<BenchCase>{{"[60000,784] u8 pick 512", {}, IndexAttrs{0}, [](Device d) {
                                   return std::vector<Tensor>{zeros({60000, 784}, TensorOptions(DType::u8).device(d)),
                                                              samples::randint({512}, 60000, 1).to(d)};
                                 }}};
}

}  // namespace ember
