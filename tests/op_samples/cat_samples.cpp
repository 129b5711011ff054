// Test samples of cat (kernels/ops/cat.*): several inputs, an empty one, a transposed one.
#include "kernels/ops/cat.h"
#include "tests/op_samples/sample_inputs.h"

namespace ember {

std::vector<OpSample> samples_cat() {
  std::vector<OpSample> out;
  auto mk = [&](const char* name, std::vector<Tensor> in, int64_t dim) {
    OpSample s;
    s.name = name;
    s.inputs = std::move(in);
    s.attrs = CatAttrs{dim};
    out.push_back(std::move(s));
  };
  mk("[2,3] + [4,3] dim 0", {samples::uniform({2, 3}, -1, 1, 1), samples::uniform({4, 3}, -1, 1, 2)}, 0);
  mk("[2,3] + [2,5] + [2,1] dim -1",
     {samples::uniform({2, 3}, -1, 1, 3), samples::uniform({2, 5}, -1, 1, 4), samples::uniform({2, 1}, -1, 1, 5)}, -1);
  mk("with empty", {samples::uniform({0, 3}, -1, 1, 6), samples::uniform({2, 3}, -1, 1, 7)}, 0);
  mk("transposed input", {samples::uniform({3, 2}, -1, 1, 8).t(), samples::uniform({2, 3}, -1, 1, 9)}, 1);
  mk("single [1023]", {samples::uniform({1023}, -1, 1, 10)}, 0);
  return out;
}

}  // namespace ember
