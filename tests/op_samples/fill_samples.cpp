// Test samples of fill and arange (kernels/ops/fill.*).
#include "kernels/ops/fill.h"
#include "tests/op_samples/sample_inputs.h"

namespace ember {

std::vector<OpSample> samples_fill() {
  std::vector<OpSample> out;
  for (double v : {0.0, 1.5, -3.0, 1e4}) {
    OpSample s;
    s.name = "[1023] = " + std::to_string(v);
    s.inputs = {samples::uniform({1023}, -1, 1, 1)};
    s.attrs = ScalarAttrs{v};
    s.gradcheck = false;
    out.push_back(std::move(s));
  }
  OpSample tr;
  tr.name = "transposed view";
  tr.inputs = {samples::uniform({5, 6}, -1, 1, 2).transpose(0, 1)};
  tr.attrs = ScalarAttrs{2.0};
  tr.gradcheck = false;
  out.push_back(std::move(tr));
  OpSample e;
  e.name = "empty";
  e.inputs = {samples::uniform({0}, -1, 1, 3)};
  e.attrs = ScalarAttrs{2.0};
  e.gradcheck = false;
  out.push_back(std::move(e));
  return out;
}

std::vector<OpSample> samples_arange() {
  OpSample s;
  s.name = "[1000] from -3 step 0.25";
  s.inputs = {samples::uniform({1000}, -1, 1, 1)};
  s.attrs = ArangeAttrs{-3, 0.25};
  s.gradcheck = false;
  s.dtypes = {DType::f32, DType::f16, DType::bf16};
  return {s};
}

}  // namespace ember
