// Test samples of total_norm and clip_by_total_norm (kernels/ops/grad_norm.*): every norm type,
// lists with empty, scalar and 2^20+3 element tensors, norms below, above and at the bound.
#include <cmath>

#include "kernels/functional.h"
#include "kernels/ops/grad_norm.h"
#include "tests/op_samples/sample_inputs.h"

namespace ember {

namespace {

std::vector<Shape> norm_shapes(bool big) {
  std::vector<Shape> s{{7}, {3, 5}, {1}, {0}, {}, {1023}};
  if (big) s.push_back({(int64_t{1} << 20) + 3});
  return s;
}

}  // namespace

std::vector<OpSample> samples_total_norm() {
  std::vector<OpSample> out;
  uint64_t seed = 7500;
  auto mk = [&](std::string name, double p, bool big) {
    OpSample& s = samples::add_sample(out, std::move(name));
    s.gradcheck = false;
    for (const Shape& sh : norm_shapes(big)) s.inputs.push_back(samples::uniform(sh, -2, 2, ++seed));
    s.attrs = TotalNormAttrs{p};
  };
  mk("L2 over 7 tensors incl. 2^20+3", 2, true);
  mk("L1", 1, false);
  mk("inf", INFINITY, true);
  mk("p = 3", 3, false);
  mk("p = 0.5", 0.5, false);
  mk("p = 0 (count)", 0, false);
  OpSample& one = samples::add_sample(out, "single empty tensor");
  one.gradcheck = false;
  one.inputs = {samples::uniform({0}, -1, 1, 1)};
  one.attrs = TotalNormAttrs{2};
  return out;
}

std::vector<OpSample> samples_clip_by_total_norm() {
  std::vector<OpSample> out;
  uint64_t seed = 7600;
  auto mk = [&](std::string name, double norm, double max_norm, bool big) {
    OpSample& s = samples::add_sample(out, std::move(name));
    s.gradcheck = false;
    s.inputs.push_back(full({}, norm, DType::f32));
    for (const Shape& sh : norm_shapes(big)) s.inputs.push_back(samples::uniform(sh, -2, 2, ++seed));
    s.keep_dtype = {0};
    s.attrs = ClipByNormAttrs{max_norm};
  };
  mk("norm 5 > max 1: scale by 1/5", 5.0, 1.0, true);
  mk("norm 0.5 < max 1: unchanged", 0.5, 1.0, false);
  mk("norm 0: unchanged", 0.0, 1.0, false);
  mk("norm inf: zeros", INFINITY, 2.0, false);
  return out;
}

}  // namespace ember
