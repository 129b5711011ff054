// Benchmark shapes of sgd_step and adam_step (kernels/ops/optim.*).
#include "bench/op_shapes/op_shapes.h"
#include "kernels/functional.h"
#include "kernels/ops/optim.h"
#include "kernels/options.h"

namespace ember {

namespace {

// Benchmark: a ResNet-ish list of 60 tensors, 25M parameters in all.
std::vector<Tensor> bench_lists(Device d, int lists, int step_list, std::vector<double> hyper) {
  std::vector<Tensor> in;
  in.push_back(tensor(hyper, DType::f64).to(d));
  in.push_back(Tensor());
  in.push_back(Tensor());
  const int n = 60;
  std::vector<int64_t> sizes;
  for (int i = 0; i < n; ++i) sizes.push_back(i % 3 == 0 ? 1000003 : (i % 3 == 1 ? 200003 : 64));
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
                return bench_lists(d, 4, 3, SgdHyper{.lr = 0.1, .momentum = 0.9, .weight_decay = 1e-4}.values());
              }};
  return std::vector<BenchCase>{b};
}

std::vector<BenchCase> benches_adam_step() {
  BenchCase b{"60 tensors, 25M params, AdamW", {}, AdamStepAttrs{60, 0, 1, 0}, [](Device d) {
                return bench_lists(d, 5, 4, {1e-3, 0.9, 0.999, 1e-8, 0.01});
              }};
  return std::vector<BenchCase>{b};
}

}  // namespace ember
