// Test samples of normalize_u8 (kernels/ops/normalize.*): one to eight channels, every output
// dtype, every byte value, transposed and channel-sliced inputs.
#include "kernels/functional.h"
#include "kernels/ops/normalize.h"
#include "tests/op_samples/sample_inputs.h"

namespace ember {

namespace {

Tensor random_u8(const Shape& shape, uint64_t seed) { return samples::randint(shape, 256, seed).to(DType::u8); }

}  // namespace

std::vector<OpSample> samples_normalize_u8() {
  std::vector<OpSample> out;
  auto mk = [&](std::string name, Tensor x, std::vector<double> mean, std::vector<double> sd, DType dt) {
    OpSample s;
    s.name = std::move(name);
    s.inputs = {std::move(x)};
    s.attrs = normalize_u8_attrs(mean, sd, dt);
    s.gradcheck = false;  // integer input: nothing to differentiate
    // The driver runs integer-input samples once and compares with the f32 entry; for reduced
    // precision outputs that entry holds the output dtype's default tolerance.
    if (dt == DType::f16) s.tol = {{DType::f32, {1e-3, 1e-5}}};
    if (dt == DType::bf16) s.tol = {{DType::f32, {1.6e-2, 1e-5}}};
    if (is_reduced_float(dt)) s.tol_note = "f16/bf16 output: compared with that dtype's default tolerance";
    out.push_back(std::move(s));
  };
  const std::vector<double> rgb_mean{0.485, 0.456, 0.406}, rgb_std{0.229, 0.224, 0.225};
  mk("[2,3,5,7] RGB (ImageNet mean/std) f32", random_u8({2, 3, 5, 7}, 1), rgb_mean, rgb_std, DType::f32);
  mk("[4,28,28] one channel (MNIST mean/std) f32", random_u8({4, 28, 28}, 2), {0.1307}, {0.3081}, DType::f32);
  mk("[4,1,28,28] f16", random_u8({4, 1, 28, 28}, 3), {0.1307}, {0.3081}, DType::f16);
  mk("[4,1,28,28] bf16", random_u8({4, 1, 28, 28}, 4), {0.2860}, {0.3530}, DType::bf16);
  mk("[2,3,5,7] RGB f64", random_u8({2, 3, 5, 7}, 5), rgb_mean, rgb_std, DType::f64);
  mk("empty [0,3,4,4]", random_u8({0, 3, 4, 4}, 6), rgb_mean, rgb_std, DType::f32);
  mk("scalar [] ToTensor only", random_u8({}, 7), {0}, {1}, DType::f32);
  mk("[1023] ToTensor only (mean 0, std 1)", random_u8({1023}, 8), {0}, {1}, DType::f32);
  mk("[2^20+3] one channel f32", random_u8({(int64_t{1} << 20) + 3}, 9), {0.5}, {0.25}, DType::f32);
  mk("[3,8,2,2] eight channels f32", random_u8({3, 8, 2, 2}, 10), {0, .1, .2, .3, .4, .5, .6, .7},
     {1, .9, .8, .7, .6, .5, .4, -.3}, DType::f32);
  mk("[1,3,1,1] one pixel per channel", random_u8({1, 3, 1, 1}, 11), rgb_mean, rgb_std, DType::f32);
  // every byte value once, through a negative std
  Tensor all = arange(256, TensorOptions(DType::u8));
  mk("all 256 byte values, std < 0", all, {0.5}, {-0.5}, DType::f32);
  mk("transposed [5,7] one channel", random_u8({7, 5}, 12).transpose(0, 1), {0.1307}, {0.3081}, DType::f32);
  mk("channel-sliced [2,3,4,4]", random_u8({2, 6, 4, 4}, 13).slice(1, 0, 6, 2), rgb_mean, rgb_std, DType::f32);
  return out;
}

}  // namespace ember
