// Benchmark shapes of sgd_step and adam_step (kernels/ops/optim.*).
#include "bench/op_shapes/op_shapes.h"
#include "kernels/functional.h"
#include "kernels/ops/optim.h"
#include "kernels/options.h"

namespace ember {

namespace {

// A ResNet-ish list of 60 tensors, 25M parameters in all.
std::vector<int64_t> resnet_sizes() {
  std::vector<int64_t> sizes;
  for (int i = 0; i < 60; ++i) sizes.push_back(i % 3 == 0 ? 1000003 : (i % 3 == 1 ? 200003 : 64));
  return sizes;
}
// mnist_train's models (apps/mnist_train/models.cpp), weight and bias of each layer: the CNN's
// 421,642 parameters and the MLP's 101,770, where launch latency and parallelism decide.
const std::vector<int64_t> kCnnSizes = {288, 32, 18432, 64, 401408, 128, 1280, 10};
const std::vector<int64_t> kMlpSizes = {100352, 128, 1280, 10};

// The op's inputs for parameters of `sizes`: hyper, found_inf, inv_scale, the ticket, clip_norm
// (with `clip`: a norm of 4, which max_norm 1 clips), then `lists` lists, the one at `step_list` of
// step counters.
std::vector<Tensor> bench_lists(Device d, int lists, int step_list, std::vector<double> hyper,
                                const std::vector<int64_t>& sizes, bool clip = false) {
  std::vector<Tensor> in;
  in.push_back(tensor(hyper, DType::f64).to(d));
  in.push_back(Tensor());                                                                  // found_inf
  in.push_back(Tensor());                                                                  // inv_scale
  in.push_back(d.is_cuda() ? zeros({1}, TensorOptions(DType::i32).device(d)) : Tensor());  // ticket
  in.push_back(clip ? full({}, 4.0, TensorOptions(DType::f32).device(d)) : Tensor());      // clip_norm
  const int n = static_cast<int>(sizes.size());
  for (int l = 0; l < lists; ++l)
    for (int i = 0; i < n; ++i) {
      if (l == step_list) in.push_back(zeros({}, TensorOptions(DType::f32).device(d)));
      else in.push_back(uniform({sizes[static_cast<size_t>(i)]}, 0, 0.1, TensorOptions(DType::f32).device(d)));
    }
  return in;
}

}  // namespace

std::vector<BenchCase> benches_sgd_step() {
  BenchCase b{"60 tensors, 25M params, momentum", {}, SgdStepAttrs{60, 1, 0, 0}, [](Device d) {
                return bench_lists(d, 4, 3, SgdHyper{.lr = 0.1, .momentum = 0.9, .weight_decay = 1e-4}.values(),
                                   resnet_sizes());
              }};
  return std::vector<BenchCase>{b};
}

std::vector<BenchCase> benches_adam_step() {
  const std::vector<double> adamw = {1e-3, 0.9, 0.999, 1e-8, 0.01};
  std::vector<BenchCase> v;
  v.push_back({"60 tensors, 25M params, AdamW", {}, AdamStepAttrs{60, 0, 1, 0}, [adamw](Device d) {
                 return bench_lists(d, 5, 4, adamw, resnet_sizes());
               }});
  v.push_back({"mnist CNN, 8 tensors, 421,642 params, AdamW", {}, AdamStepAttrs{8, 0, 1, 0}, [adamw](Device d) {
                 return bench_lists(d, 5, 4, adamw, kCnnSizes);
               }});
  v.push_back({"mnist MLP, 4 tensors, 101,770 params, AdamW", {}, AdamStepAttrs{4, 0, 1, 0}, [adamw](Device d) {
                 return bench_lists(d, 5, 4, adamw, kMlpSizes);
               }});
  // mnist_train --clip-grad: the clipping coefficient applied as the gradients are read
  v.push_back(
      {"mnist CNN, 8 tensors, 421,642 params, AdamW, clipped", {}, AdamStepAttrs{8, 0, 1, 0, 1.0}, [adamw](Device d) {
         return bench_lists(d, 5, 4, adamw, kCnnSizes, true);
       }});
  return v;
}

}  // namespace ember
