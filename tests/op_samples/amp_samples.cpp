// Test samples of amp_unscale and amp_update_scale (kernels/ops/amp.*): inf and NaN in one tensor
// of several, more tensors than one launch takes, channels-last gradients; every branch of the
// scale's growth/backoff rule.
#include <cmath>
#include <tuple>

#include "kernels/functional.h"
#include "kernels/ops/amp.h"
#include "tests/op_samples/sample_inputs.h"

namespace ember {

std::vector<OpSample> samples_amp_unscale() {
  auto mk = [](const char* name, std::vector<Tensor> grads, double inv) {
    OpSample s;
    s.name = name;
    s.inputs = {zeros({1}, DType::f32), full({1}, inv, DType::f32)};
    for (Tensor& g : grads) s.inputs.push_back(g);
    s.keep_dtype = {0, 1};
    s.gradcheck = false;
    return s;
  };
  Tensor with_inf = samples::uniform({1000}, -1, 1, 2);
  with_inf.data<double>()[777] = INFINITY;
  Tensor with_nan = samples::uniform({5, 7}, -1, 1, 3);
  with_nan.data<double>()[11] = NAN;
  return {mk("finite, three tensors",
             {samples::uniform({33}, -1, 1, 1), samples::uniform({4, 5}, -1, 1, 4), samples::uniform({1}, -1, 1, 5)},
             1.0 / 1024),
          mk("an inf in one tensor", {samples::uniform({17}, -1, 1, 6), with_inf}, 0.5), mk("a nan", {with_nan}, 0.25),
          mk("[2^20+3]", {samples::uniform({(1 << 20) + 3}, -1, 1, 7)}, 1.0 / 65536),
          mk("60 tensors (two launches)", std::vector<Tensor>(60, samples::uniform({9}, -1, 1, 8)), 0.125),
          // a conv weight's gradient under --channels-last: dense, not contiguous
          mk("channels-last [4,3,5,5] and a plain tensor",
             {samples::uniform({4, 5, 5, 3}, -1, 1, 9).permute({0, 3, 1, 2}), samples::uniform({7}, -1, 1, 10)}, 0.5),
          mk("no gradients", {}, 1.0)};
}

std::vector<OpSample> samples_amp_update_scale() {
  std::vector<OpSample> out;
  for (auto [found, tracker, interval] :
       std::vector<std::tuple<double, double, int64_t>>{{0, 0, 2000}, {0, 1, 2}, {1, 5, 2000}, {0, 0, 1}}) {
    OpSample s;
    s.name = str("found_inf ", found, " tracker ", tracker, " interval ", interval);
    s.inputs = {full({1}, 128, DType::f32), full({1}, tracker, DType::i32), full({1}, found, DType::f32),
                zeros({1}, DType::i64)};
    s.attrs = AmpScaleAttrs{2.0, 0.5, interval};
    s.keep_dtype = {0, 1, 2, 3};
    s.gradcheck = false;
    s.dtypes = {DType::f32};
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace ember
