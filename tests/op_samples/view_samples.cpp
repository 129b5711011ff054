// Test samples of the view ops view, permute, slice and expand (kernels/ops/view.*).
#include "kernels/ops/view.h"
#include "tests/op_samples/sample_inputs.h"

namespace ember {
namespace {

// A sample of a view op: one input and its attributes.
OpSample one_input(const char* name, Tensor x, const Attrs& attrs) {
  OpSample o;
  o.name = name;
  o.inputs = {std::move(x)};
  o.attrs = attrs;
  return o;
}

}  // namespace

std::vector<OpSample> samples_view() {
  auto mk = [](const char* name, Tensor x, Shape s) { return one_input(name, std::move(x), ShapeAttrs::from(s)); };
  return {mk("[2,3,4] -> [6,4]", samples::uniform({2, 3, 4}, -1, 1, 1), {6, 4}),
          mk("[2,3,4] -> [-1]", samples::uniform({2, 3, 4}, -1, 1, 2), {-1}),
          mk("[] -> [1,1]", samples::uniform({}, -1, 1, 3), {1, 1}),
          mk("[0,3] -> [3,0]", samples::uniform({0, 3}, -1, 1, 4), {3, 0}),
          mk("sliced rows [3,4] -> [3,2,2]", samples::uniform({6, 4}, -1, 1, 5).slice(0, 0, 6, 2), {3, 2, 2})};
}

std::vector<OpSample> samples_permute() {
  auto mk = [](const char* name, Tensor x, Shape s) { return one_input(name, std::move(x), ShapeAttrs::from(s)); };
  return {mk("[2,3,4] (2,0,1)", samples::uniform({2, 3, 4}, -1, 1, 1), {2, 0, 1}),
          mk("[5,6] (-1,0)", samples::uniform({5, 6}, -1, 1, 2), {-1, 0}),
          mk("[] ()", samples::uniform({}, -1, 1, 3), {})};
}

std::vector<OpSample> samples_slice() {
  auto mk = [](const char* name, Tensor x, SliceAttrs a) { return one_input(name, std::move(x), a); };
  return {mk("[7,5] rows 1:6:2", samples::uniform({7, 5}, -1, 1, 1), {0, 1, 6, 2}),
          mk("[4,9] cols -4:", samples::uniform({4, 9}, -1, 1, 2), {1, -4, 1000, 1}),
          mk("[6] empty 4:2", samples::uniform({6}, -1, 1, 3), {0, 4, 2, 1}),
          mk("[2,3,8] dim 2 0:8:3", samples::uniform({2, 3, 8}, -1, 1, 4), {2, 0, 8, 3})};
}

std::vector<OpSample> samples_expand() {
  auto mk = [](const char* name, Tensor x, Shape s) { return one_input(name, std::move(x), ShapeAttrs::from(s)); };
  return {mk("[3,1] -> [3,4]", samples::uniform({3, 1}, -1, 1, 1), {3, 4}),
          mk("[4] -> [2,3,4]", samples::uniform({4}, -1, 1, 2), {2, 3, -1}),
          mk("[] -> [2,2]", samples::uniform({}, -1, 1, 3), {2, 2})};
}

}  // namespace ember
