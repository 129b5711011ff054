// Test samples of index_select, gather, index_add and scatter_add (kernels/ops/index.*): repeated
// indices (collisions), i32 and i64 indices, empty indices.
#include "kernels/functional.h"
#include "kernels/ops/index.h"
#include "tests/op_samples/sample_inputs.h"

namespace ember {

namespace {

OpSample mk(const char* name, std::vector<Tensor> in, int64_t dim, std::vector<int> grad_inputs) {
  OpSample s;
  s.name = name;
  s.inputs = std::move(in);
  s.attrs = IndexAttrs{dim};
  s.grad_inputs = std::move(grad_inputs);
  return s;
}

}  // namespace

std::vector<OpSample> samples_index_select() {
  Tensor rows = tensor_i64({2, 0, 2, 4, 1}, {5});
  return {mk("[5,3] rows (repeats)", {samples::uniform({5, 3}, -1, 1, 1), rows}, 0, {0}),
          mk("[2,6,3] dim 1", {samples::uniform({2, 6, 3}, -1, 1, 2), rows}, 1, {0}),
          mk("[4,5] dim -1 i32", {samples::uniform({4, 5}, -1, 1, 3), rows.to(DType::i32)}, -1, {0}),
          mk("empty index", {samples::uniform({4, 5}, -1, 1, 4), tensor_i64(std::vector<int64_t>{}, Shape{0})}, 0, {0}),
          mk("[60000-like gather] [300,28]", {samples::uniform({300, 28}, -1, 1, 5), samples::randint({64}, 300, 6)}, 0,
             {0})};
}
std::vector<OpSample> samples_gather() {
  return {mk("[4,5] dim 1", {samples::uniform({4, 5}, -1, 1, 1), samples::randint({4, 3}, 5, 2)}, 1, {0}),
          mk("[4,5] dim 0", {samples::uniform({4, 5}, -1, 1, 3), samples::randint({6, 5}, 4, 4)}, 0, {0}),
          mk("[2,3,4] dim 2 (targets)", {samples::uniform({2, 3, 4}, -1, 1, 5), samples::randint({2, 3, 1}, 4, 6)}, 2,
             {0})};
}
std::vector<OpSample> samples_index_add() {
  Tensor rows = tensor_i64({2, 0, 2, 4, 1}, {5});
  return {mk("[5,3] with repeats", {samples::uniform({5, 3}, -1, 1, 1), rows, samples::uniform({5, 3}, -1, 1, 2)}, 0,
             {0, 2}),
          mk("[2,6,3] dim 1", {samples::uniform({2, 6, 3}, -1, 1, 3), rows, samples::uniform({2, 5, 3}, -1, 1, 4)}, 1,
             {0, 2})};
}
std::vector<OpSample> samples_scatter_add() {
  return {mk("[4,5] dim 1",
             {samples::uniform({4, 5}, -1, 1, 1), samples::randint({4, 3}, 5, 2), samples::uniform({4, 3}, -1, 1, 3)},
             1, {0, 2}),
          mk("[4,5] dim 0 collisions",
             {samples::uniform({4, 5}, -1, 1, 4), samples::randint({8, 5}, 4, 5), samples::uniform({8, 5}, -1, 1, 6)},
             0, {0, 2})};
}

}  // namespace ember
