// softmax / cross_entropy / dropout on CUDA beyond the generic parity tests: the launch counts
// the training loop relies on (one kernel for the MNIST-sized forward and backward, one for both
// with cross_entropy_with_grad, one for a step's bookkeeping with train_stats, counted by
// capturing the calls into a CUDA graph), no host synchronisation, the device error for a bad
// target, and dropout's mask equal to the CPU's.
#include <catch2/catch.hpp>

#if EMBER_WITH_CUDA
#include <cuda_runtime.h>

#include <cmath>
#include <functional>
#include <vector>

#include "core/cuda/runtime.h"
#include "core/rng.h"
#include "core/runtime.h"
#include "kernels/functional.h"
#include "kernels/ops/loss.h"  // LossAttrs
#include "kernels/registry.h"
#include "tests/launch_count_util.h"

using namespace ember;

namespace {

const Device kGPU(DeviceType::cuda, 0);
using test::kernels_launched_by;

Tensor logits(int64_t n, int64_t c) { return uniform({n, c}, -3, 3, TensorOptions().device(kGPU)); }

// Deterministic class indices in [0, c) on the GPU.
Tensor class_targets(int64_t n, int64_t c) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = (i * 7 + 3) % c;
  return tensor_i64(v, {n}).to(kGPU);
}

}  // namespace

TEST_CASE("cuda: MNIST-sized cross_entropy forward and backward are one kernel each", "[gpu][loss]") {
  for (int64_t n : {64, 512}) {
    INFO("batch " << n);
    Tensor x = logits(n, 10), t = class_targets(n, 10);
    std::vector<Tensor> fwd =
        call(OpId::cross_entropy, {x, t, Tensor()}, LossAttrs{Reduction::mean, -100, 0});  // warm-up
    CHECK(kernels_launched_by([&] {
            call(OpId::cross_entropy, {x, t, Tensor()}, LossAttrs{Reduction::mean, -100, 0});
          }) == 1);
    Tensor g = ones({}, TensorOptions().device(kGPU));
    CHECK(kernels_launched_by([&] {
            call(OpId::cross_entropy_backward, {g, x, t, Tensor(), fwd[1]}, LossAttrs{Reduction::mean, -100, 0});
          }) == 1);
    CHECK(kernels_launched_by([&] { softmax(x, 1); }) == 1);
    CHECK(kernels_launched_by([&] { log_softmax(x, 1); }) == 1);
  }
  Tensor big = logits(64, 4096);
  CHECK(kernels_launched_by([&] { softmax(big, 1); }) == 1);
  Tensor h = uniform({1 << 20}, -1, 1, TensorOptions().device(kGPU));
  CHECK(kernels_launched_by([&] { dropout(h, 0.5); }) == 1);
}

TEST_CASE("cuda: cross_entropy_with_grad is one kernel for the loss and dx and equals the two ops", "[gpu][loss]") {
  for (int64_t n : {64, 512}) {
    INFO("batch " << n);
    Tensor x = logits(n, 10), t = class_targets(n, 10), w = uniform({10}, 0.5, 2, TensorOptions().device(kGPU));
    Tensor g = full({}, 0.75, TensorOptions().device(kGPU));
    const LossAttrs a{Reduction::mean, -100, 0.1};
    std::vector<Tensor> fused = call(OpId::cross_entropy_with_grad, {x, t, w, g}, a);  // warm-up
    CHECK(kernels_launched_by([&] { call(OpId::cross_entropy_with_grad, {x, t, w, g}, a); }) == 1);
    std::vector<Tensor> fwd = call(OpId::cross_entropy, {x, t, w}, a);
    Tensor dx = call1(OpId::cross_entropy_backward, {g, x, t, w, fwd[1]}, a);
    // the same arithmetic in the same order (Note in kernels/ops/loss.cu): equal bits
    CHECK(fused[0].cpu().to_vector<float>() == fwd[0].cpu().to_vector<float>());
    CHECK(fused[1].cpu().to_vector<float>() == fwd[1].cpu().to_vector<float>());
    CHECK(fused[2].cpu().to_vector<float>() == dx.cpu().to_vector<float>());
  }
  // Through autograd: backward(g) with the announced g gets dx without a launch for the loss.
  Tensor x = logits(128, 10).requires_grad_(true), t = class_targets(128, 10);
  Tensor g = ones({}, TensorOptions().device(kGPU));
  cross_entropy_with_grad(x, t, g).backward(g);  // warm-up
  x.reset_grad();
  size_t fused = kernels_launched_by([&] { cross_entropy_with_grad(x, t, g).backward(g); });
  x.reset_grad();
  size_t separate = kernels_launched_by([&] { cross_entropy(x, t).backward(g); });
  CHECK(fused + 1 == separate);
}

TEST_CASE("cuda: the loss path does not synchronise the host", "[gpu][loss]") {
  Tensor x = logits(512, 10).requires_grad_(true), t = class_targets(512, 10);
  Tensor w = uniform({10}, 0.5, 2, TensorOptions().device(kGPU));
  CrossEntropyOptions o;
  o.weight = w;
  o.label_smoothing = 0.1;
  cuda::device_synchronize(0);
  const uint64_t before = runtime::host_sync_count();
  Tensor loss = cross_entropy(x, t, o);
  loss.backward();
  Tensor y = log_softmax(dropout(x.detach(), 0.2), 1);
  Tensor m = mse_loss(y, zeros_like(y));
  CHECK(runtime::host_sync_count() == before);
  CHECK(std::isfinite(loss.item()));
  CHECK(std::isfinite(m.item()));
}

// mnist_train's per-step bookkeeping (Note [no host syncs in the step]): the loss sum, the correct
// count and the divergence guard in one launch, no host read; the unfused ops took 19 launches.
TEST_CASE("cuda: a step's bookkeeping is one train_stats kernel and reads nothing back", "[gpu][loss]") {
  const TensorOptions f32 = TensorOptions().device(kGPU);
  Tensor x = logits(512, 10), t = class_targets(512, 10);
  Tensor loss = full({1}, NAN, f32), loss_sum = zeros({1}, f32), run = zeros({1}, f32);
  Tensor at = full({1}, -1, f32), steps = full({1}, 9, f32);
  Tensor correct = zeros({1}, TensorOptions(DType::i64).device(kGPU));
  cuda::device_synchronize(0);
  const uint64_t before = runtime::host_sync_count();
  const size_t launches =
      kernels_launched_by([&] { train_stats_(x, t, loss, loss_sum, correct, run, at, steps, 1, true); });
  CHECK(launches == 1);
  CHECK(runtime::host_sync_count() == before);
  train_stats_(x, t, loss, loss_sum, correct, run, at, steps, 1, true);  // the captured call never ran
  CHECK(correct.item() == sum(eq(argmax(x, 1), t)).item());
  CHECK(at.item() == 10);  // the step after the 9 counted
  CHECK(steps.item() == 10);
  CHECK(std::isnan(loss_sum.item()));
}

TEST_CASE("cuda: an out-of-range target raises the device error at the next sync", "[gpu][loss][bad_input]") {
  cuda::device_synchronize(0);
  Tensor x = logits(4, 10);
  Tensor t = tensor_i64({1, 12, 3, 0}, {4}).to(kGPU);
  Tensor loss = cross_entropy(x, t);  // asynchronous: nothing thrown yet
  CHECK_THROWS_WITH(cuda::device_synchronize(0), Catch::Contains("cross_entropy"));
  cuda::device_synchronize(0);  // the error word was cleared
}

TEST_CASE("cuda: dropout draws the CPU's mask for the same seed and offset", "[gpu][dropout]") {
  Tensor x = uniform({4099}, 1, 2);
  manual_seed(77);
  std::vector<double> cpu = dropout(x, 0.4).to_vector<double>();
  manual_seed(77);
  std::vector<double> gpu = dropout(x.to(kGPU), 0.4).to_vector<double>();
  CHECK(cpu == gpu);
}

#endif  // EMBER_WITH_CUDA
