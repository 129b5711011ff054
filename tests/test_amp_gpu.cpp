// Mixed precision on a GPU: f16 and bf16 autocast linear and conv against the CPU on the same
// rounded inputs (the documented per-dtype tolerances) and against f32 (a looser, stated bound),
// f32 parameter gradients under autocast, an op's casts in one launch each way, the GradScaler
// recipe on CUDA against an unscaled run that skips the bad iteration, the whole AMP step
// (autocast forward, scaled backward, step, update) captured in a CUDA graph and replayed with an
// inf batch skipped, and no host sync in a scaler step.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>

#include "amp/autocast.h"
#include "amp/grad_scaler.h"
#include "core/autograd/node.h"
#include "core/cuda/graph.h"
#include "core/cuda/runtime.h"
#include "core/rng.h"
#include "core/runtime.h"
#include "kernels/functional.h"
#include "kernels/ops/mlp.h"
#include "kernels/registry.h"
#include "nn/nn.h"
#include "optim/optim.h"
#include "tests/amp_test_util.h"
#include "tests/launch_count_util.h"
#include "tests/op_driver.h"

using namespace ember;
using namespace ember::amp_testing;

namespace {

constexpr DType kLowTypes[] = {DType::f16, DType::bf16};

// Autocast vs f32 on the same (unrounded) inputs: the inputs are rounded to the low dtype, so the
// bound is about the dtype's epsilon times the size of the terms, not the per-op parity
// tolerance: f16 (eps 2^-11) rtol 1e-2 / atol 2e-3, bf16 (eps 2^-8) rtol 5e-2 / atol 2e-2, for
// inputs in [-1, 1) and weights at PyTorch's default initialisation scale.
Tol vs_f32_tol(DType t) { return t == DType::f16 ? Tol{1e-2, 2e-3} : Tol{5e-2, 2e-2}; }

}  // namespace

TEST_CASE("cuda autocast linear: f16 and bf16 outputs against the CPU and against f32", "[gpu][amp]") {
  manual_seed(61);
  const int64_t K = 256;
  const double bound = 1.0 / std::sqrt(static_cast<double>(K));
  Tensor x = uniform({64, K}, -1, 1), w = uniform({128, K}, -bound, bound), b = uniform({128}, -bound, bound);
  Tensor want32 = linear(x, w, b);
  for (DType dt : kLowTypes) {
    INFO("autocast dtype " << dt);
    Tensor xd = x.cuda(), wd = w.cuda(), bd = b.cuda();
    wd.requires_grad_(true);
    bd.requires_grad_(true);
    Tensor y;
    {
      amp::autocast ac(DeviceType::cuda, dt);
      y = linear(xd, wd, bd);
    }
    CHECK(y.dtype() == dt);
    // the CPU reference on the same rounded inputs, in the same dtype: the op parity tolerance
    Tensor want = linear(x.to(dt), w.to(dt), b.to(dt));
    CHECK(testing::compare(y.cpu(), want, testing::default_tol(dt)) == "");
    CHECK(testing::compare(y.cpu().to(DType::f32), want32, vs_f32_tol(dt)) == "");
    // gradients of the f32 weights are f32
    sum(y).backward();
    CHECK(wd.grad().dtype() == DType::f32);
    CHECK(bd.grad().dtype() == DType::f32);
    // a CPU op inside a CUDA scope is untouched
    {
      amp::autocast ac(DeviceType::cuda, dt);
      CHECK(linear(x, w, b).dtype() == DType::f32);
    }
  }
}

// Under autocast (Note [autocast casts in one launch] in kernels/autocast_policy.cpp) an mlp op (x
// and six f32 parameters) casts its parameters in one launch and x in another, and the backward
// turns the six bf16 gradients back to f32 in one; the values and gradients are those of each
// input cast on its own, bit for bit.
TEST_CASE("cuda autocast: an op's weights cast in one launch, their gradients back in one", "[gpu][amp]") {
  manual_seed(62);
  const std::vector<int64_t> widths{48, 32, 16, 10};
  std::vector<Tensor> params;  // w0, b0, w1, b1, w2, b2, f32 on the device
  for (size_t l = 0; l + 1 < widths.size(); ++l) {
    params.push_back(uniform({widths[l + 1], widths[l]}, -0.2, 0.2).cuda().requires_grad_(true));
    params.push_back(uniform({widths[l + 1]}, -0.2, 0.2).cuda().requires_grad_(true));
  }
  Tensor x = uniform({8, widths[0]}, -1, 1).cuda(), g = uniform({8, widths.back()}, -1, 1).cuda();
  const MlpAttrs attrs{3, 3};  // three layers, relu after the first two
  auto mlp_of = [&](const std::vector<Tensor>& ps, const Tensor& in) {
    std::vector<Tensor> inputs{in};
    inputs.insert(inputs.end(), ps.begin(), ps.end());
    return call(OpId::mlp, inputs, attrs)[0];  // y (the others: what the backward reads)
  };
  // each input cast on its own, outside autocast: the reference
  std::vector<Tensor> low;
  for (const Tensor& p : params) low.push_back(cast(p, DType::bf16));
  Tensor want = mlp_of(low, cast(x, DType::bf16));
  want.backward(g.to(DType::bf16));
  std::vector<Tensor> want_grads;
  for (Tensor& p : params) {
    want_grads.push_back(p.grad().cpu());
    p.reset_grad();
  }
  size_t forward_launches = 0, backward_launches = 0;
  Tensor y;
  {
    amp::autocast ac(DeviceType::cuda, DType::bf16);
    forward_launches = test::kernels_launched_by([&] { mlp_of(params, x); });
    y = mlp_of(params, x);
  }
  backward_launches = test::kernels_launched_by([&] { y.backward(g.to(DType::bf16)); });  // never run
  for (Tensor& p : params) p.reset_grad();
  {
    amp::autocast ac(DeviceType::cuda, DType::bf16);
    y = mlp_of(params, x);
  }
  y.backward(g.to(DType::bf16));
  CHECK(forward_launches == 3);  // the parameters' casts, x's, the mlp kernel
  const Tensor p_cpu = y.cpu(), q_cpu = want.cpu();
  REQUIRE(y.dtype() == DType::bf16);
  CHECK(std::memcmp(p_cpu.data_ptr(), q_cpu.data_ptr(), p_cpu.nbytes()) == 0);
  for (size_t i = 0; i < params.size(); ++i) {
    INFO("parameter " << i);
    REQUIRE(params[i].grad().dtype() == DType::f32);
    const Tensor got = params[i].grad().cpu();
    CHECK(std::memcmp(got.data_ptr(), want_grads[i].data_ptr(), got.nbytes()) == 0);
  }
  // the same backward with each cast on its own: six launches back to f32 where autocast has one
  for (Tensor& p : params) p.reset_grad();  // (accumulating into a gradient would add launches)
  std::vector<Tensor> low2;
  for (const Tensor& p : params) low2.push_back(cast(p, DType::bf16));
  Tensor r = mlp_of(low2, cast(x, DType::bf16));
  const size_t separate = test::kernels_launched_by([&] { r.backward(g.to(DType::bf16)); });
  // and with bf16 leaves, no cast at all: the mlp's own backward
  std::vector<Tensor> leaves;
  for (const Tensor& p : params) leaves.push_back(cast(p, DType::bf16).detach().requires_grad_(true));
  Tensor q = mlp_of(leaves, cast(x, DType::bf16));
  const size_t none = test::kernels_launched_by([&] { q.backward(g.to(DType::bf16)); });
  CHECK(backward_launches == none + 1);
  CHECK(separate == none + 6);
}

TEST_CASE("cuda autocast: cross_entropy_with_grad reads f16/bf16 logits as they are, in the f32 op's launches",
          "[gpu][amp][loss]") {
  manual_seed(63);
  const Device gpu(DeviceType::cuda, 0);
  for (DType low : {DType::f16, DType::bf16}) {
    check_loss_on_low_logits(gpu, low, 64, 10);    // the one-block kernel
    check_loss_on_low_logits(gpu, low, 512, 10);   // its largest batch at 10 classes
    check_loss_on_low_logits(gpu, low, 1000, 10);  // the row kernels, on a converted copy
    check_loss_on_low_logits(gpu, low, 64, 200);
  }
  // mnist_train's loss: the logits' cast before it and dx's after it are gone, so the loss and its
  // backward launch what they launch in f32
  Tensor t = tensor_i64(std::vector<int64_t>(128, 3), {128}).cuda(), g = ones({}, TensorOptions().device(gpu));
  Tensor xf = uniform({128, 10}, -3, 3).cuda().requires_grad_(true);
  Tensor xb = xf.detach().to(DType::bf16).requires_grad_(true);
  auto step = [&](const Tensor& x, bool amp) {
    Tensor loss;
    {
      amp::autocast ac(DeviceType::cuda, DType::bf16, amp);
      loss = cross_entropy_with_grad(x, t, g);
    }
    loss.backward(g);
  };
  step(xf, false);  // warm-up
  step(xb, true);
  xf.reset_grad();
  xb.reset_grad();
  const size_t f32 = test::kernels_launched_by([&] { step(xf, false); });
  xf.reset_grad();
  const size_t bf16 = test::kernels_launched_by([&] { step(xb, true); });
  xb.reset_grad();
  CHECK(f32 == 1);  // the loss and dx in one kernel; the leaf takes dx as its gradient
  CHECK(bf16 == f32);
}

TEST_CASE("cuda autocast cast plan: a scope casts the last scope's weights ahead in one launch, same bits",
          "[gpu][amp]") {
  manual_seed(72);
  check_cast_plan(Device(DeviceType::cuda, 0));
}

TEST_CASE("cuda autocast conv2d: f16 and bf16 outputs against the CPU and against f32", "[gpu][amp]") {
  manual_seed(67);
  const int64_t C = 16;
  const double bound = 1.0 / std::sqrt(static_cast<double>(C * 9));
  Tensor x = uniform({8, C, 14, 14}, -1, 1), w = uniform({32, C, 3, 3}, -bound, bound),
         b = uniform({32}, -bound, bound);
  const auto o = Conv2dFuncOptions().set_padding(1);
  Tensor want32 = conv2d(x, w, b, o);
  for (DType dt : kLowTypes) {
    INFO("autocast dtype " << dt);
    Tensor wd = w.cuda();
    wd.requires_grad_(true);
    Tensor y;
    {
      amp::autocast ac(DeviceType::cuda, dt);
      y = conv2d(x.cuda(), wd, b.cuda(), o);
    }
    CHECK(y.dtype() == dt);
    Tensor want = conv2d(x.to(dt), w.to(dt), b.to(dt), o);
    // 144-term sums accumulated in another order (implicit GEMM / cuDNN vs the CPU loop): one
    // rounding step of the low dtype on either side
    Tol t = testing::default_tol(dt);
    t.rtol *= 2;
    CHECK(testing::compare(y.cpu(), want, t) == "");
    CHECK(testing::compare(y.cpu().to(DType::f32), want32, vs_f32_tol(dt)) == "");
    sum(y).backward();
    CHECK(wd.grad().dtype() == DType::f32);
  }
}

TEST_CASE("cuda GradScaler recipe matches an unscaled run that skips the bad iteration", "[gpu][amp]") {
  constexpr int kIters = 4, kBad = 2;
  std::vector<Batch> data = make_batches(kIters, 6, 8, 8, 71, kCUDA);
  // f32 forward: the scaled and unscaled runs must agree to f32 rounding (a power-of-two scale is
  // exact). f16 autocast forward: the scale and skip bookkeeping are exact, the values close.
  for (bool f16 : {false, true}) {
    INFO((f16 ? "f16 autocast" : "f32"));
    manual_seed(72);
    TwoLayer scaled, ref;
    same_start_on(kCUDA, scaled, ref);
    std::vector<Tensor> ps = scaled.params(), qs = ref.params();
    const double lr = f16 ? 0.1 : 1.0;
    optim::SGD opt(ps, optim::SGDOptions(lr).momentum(0.9)), ref_opt(qs, optim::SGDOptions(lr).momentum(0.9));
    amp::GradScaler scaler(
        amp::GradScalerOptions().init_scale(128).growth_factor(2).backoff_factor(0.5).growth_interval(1));
    for (int it = 0; it < kIters; ++it) {
      const bool bad = it == kBad;
      opt.zero_grad();
      Tensor x = bad ? poisoned(data[it].x, INFINITY) : data[it].x;
      Tensor loss;
      {
        amp::autocast ac(DeviceType::cuda, DType::f16, f16);
        loss = cross_entropy(scaled(x), data[it].y);
      }
      scaler.scale(loss).backward();
      auto before = bits(ps);
      scaler.step(opt);
      scaler.update();
      if (bad) CHECK(bits(ps) == before);
      if (!bad) {
        ref_opt.zero_grad();
        Tensor rl;
        {
          amp::autocast ac(DeviceType::cuda, DType::f16, f16);
          rl = cross_entropy(ref(data[it].x), data[it].y);
        }
        rl.backward();
        ref_opt.step();
      }
    }
    CHECK(scaler.scale_value() == 128.0 * 8 * 0.5);
    CHECK(scaler.skipped_steps() == 1);
    const Tol tol = f16 ? Tol{1e-3, 1e-5} : Tol{1e-5, 1e-7};
    check_close(ps, qs, tol, "parameter");
    check_close(opt_state(opt, ps), opt_state(ref_opt, qs), tol, "optimizer state");
  }
}

TEST_CASE("cuda AMP step captured in a CUDA graph: replays match eager steps, an inf batch is skipped",
          "[gpu][amp][graph]") {
  constexpr int kSteps = 5, kBad = 2;
  std::vector<Batch> data = make_batches(kSteps + 1, 32, 8, 8, 81, kCUDA);
  manual_seed(82);
  TwoLayer g_net, e_net;
  same_start_on(kCUDA, g_net, e_net);
  std::vector<Tensor> ps = g_net.params(), qs = e_net.params();
  optim::SGD g_opt(ps, optim::SGDOptions(0.1).momentum(0.9)), e_opt(qs, optim::SGDOptions(0.1).momentum(0.9));
  auto opts = amp::GradScalerOptions().init_scale(1024).growth_interval(2);
  amp::GradScaler g_scaler(opts), e_scaler(opts);

  auto step = [](TwoLayer& net, optim::Optimizer& opt, amp::GradScaler& scaler, const Tensor& x, const Tensor& y) {
    Tensor loss;
    {
      amp::autocast ac(DeviceType::cuda, DType::f16);
      loss = cross_entropy(net(x), y);
    }
    scaler.scale(loss).backward();
    scaler.step(opt);
    scaler.update();
    return loss;
  };

  cuda::Stream st = cuda::Stream::create(0);
  Tensor static_x = empty(data[0].x.shape(), TensorOptions().device(kCUDA));
  Tensor static_y = empty(data[0].y.shape(), TensorOptions(DType::i64).device(kCUDA));
  cuda::Graph graph;
  Tensor static_loss;
  {
    st.wait_stream(cuda::current_stream(0));  // the batches and nets were made on the compute stream
    cuda::StreamGuard guard(st);
    // warm-up (eager, on the capture stream): creates the optimizer state and the scaler's
    // device tensors outside the capture
    copy_(static_x, data[0].x);
    copy_(static_y, data[0].y);
    g_opt.zero_grad();
    step(g_net, g_opt, g_scaler, static_x, static_y);
    g_opt.sync_hyperparameters();
    cuda::device_synchronize(0);
    g_opt.zero_grad(true);  // the step's grads are allocated in the graph's pool
    graph.capture_begin(st);
    static_loss = step(g_net, g_opt, g_scaler, static_x, static_y);
    graph.capture_end();
  }
  CHECK(graph.ready());
  CHECK(graph.num_nodes() > 0);
  // the eager twin: the same warm-up step
  e_opt.zero_grad();
  step(e_net, e_opt, e_scaler, data[0].x, data[0].y);

  for (int i = 1; i <= kSteps; ++i) {
    const bool bad = i == kBad;
    Tensor x = bad ? poisoned(data[i].x, INFINITY) : data[i].x;
    auto before = bits(ps);
    {
      st.wait_stream(cuda::current_stream(0));  // x (poisoned on the compute stream) is ready
      cuda::StreamGuard guard(st);
      copy_(static_x, x);
      copy_(static_y, data[i].y);
      graph.replay();
    }
    cuda::device_synchronize(0);
    INFO("step " << i);
    if (bad) CHECK(bits(ps) == before);
    else CHECK(bits(ps) != before);
    e_opt.zero_grad();
    step(e_net, e_opt, e_scaler, x, data[i].y);
    cuda::device_synchronize(0);
    // the same kernels on the same data
    check_close(ps, qs, {1e-6, 1e-7}, "parameter");
  }
  CHECK(g_scaler.skipped_steps() == 1);
  CHECK(g_scaler.scale_value() == e_scaler.scale_value());
  CHECK(e_scaler.skipped_steps() == 1);
  check_close(opt_state(g_opt, ps), opt_state(e_opt, qs), {1e-6, 1e-7}, "optimizer state");
  {
    runtime::AllowSyncScope allow;
    CHECK(std::isfinite(static_loss.item()));
  }
}

TEST_CASE("cuda GradScaler restored from a checkpoint before its first use scales CUDA losses", "[gpu][amp]") {
  // Resuming: the scaler's state is loaded before any loss has told it the device.
  manual_seed(95);
  TwoLayer net;
  net.to(kCUDA);
  optim::SGD opt(net.params(), optim::SGDOptions(0.1));
  std::vector<Batch> data = make_batches(2, 8, 8, 8, 96, kCUDA);
  amp::GradScaler first(amp::GradScalerOptions().init_scale(512).growth_interval(4));
  for (const Batch& b : data) {
    opt.zero_grad();
    first.scale(cross_entropy(net(b.x), b.y)).backward();
    first.step(opt);
    first.update();
  }
  StateDict sd = first.state_dict();
  amp::GradScaler resumed;
  resumed.load_state_dict(sd);
  CHECK(resumed.scale_value() == 512);
  opt.zero_grad();
  Tensor scaled = resumed.scale(cross_entropy(net(data[0].x), data[0].y));
  CHECK(scaled.is_cuda());
  CHECK(resumed.scale_tensor().is_cuda());
  scaled.backward();
  resumed.step(opt);
  resumed.update();
  // the growth tracker came along (2 of 4): two more clean steps grow the scale
  CHECK(resumed.scale_value() == 512);
  opt.zero_grad();
  resumed.scale(cross_entropy(net(data[1].x), data[1].y)).backward();
  resumed.step(opt);
  resumed.update();
  CHECK(resumed.scale_value() == 1024);
  // a checkpoint read is deliberate: allowed in sync-debug mode
  runtime::set_sync_debug(runtime::SyncDebug::error);
  std::string meta;
  try {
    meta = resumed.state_dict().metadata.at("grad_scaler");
  } catch (...) {
    runtime::set_sync_debug(runtime::SyncDebug::off);
    throw;
  }
  runtime::set_sync_debug(runtime::SyncDebug::off);
  CHECK_THAT(meta, Catch::Contains("\"skipped_steps\":0"));
}

TEST_CASE("cuda AMP step makes no host sync", "[gpu][amp]") {
  manual_seed(91);
  TwoLayer net;
  net.to(kCUDA);
  std::vector<Tensor> ps = net.params();
  optim::AdamW opt(ps, optim::AdamWOptions(1e-3));
  amp::GradScaler scaler;
  std::vector<Batch> data = make_batches(3, 16, 8, 8, 92, kCUDA);
  auto step = [&](const Batch& b) {
    opt.zero_grad();
    Tensor loss;
    {
      amp::autocast ac(DeviceType::cuda, DType::f16);
      loss = cross_entropy(net(b.x), b.y);
    }
    scaler.scale(loss).backward();
    scaler.unscale_(opt);
    optim::clip_grad_norm_(ps, 1.0);
    scaler.step(opt);
    scaler.update();
  };
  step(data[0]);  // first step: lazy initialisation and optimizer state
  cuda::device_synchronize(0);
  runtime::set_sync_debug(runtime::SyncDebug::error);
  const uint64_t syncs = runtime::host_sync_count();
  try {
    step(data[1]);
    step(data[2]);
  } catch (...) {
    runtime::set_sync_debug(runtime::SyncDebug::off);
    throw;
  }
  runtime::set_sync_debug(runtime::SyncDebug::off);
  CHECK(runtime::host_sync_count() == syncs);
  CHECK(scaler.skipped_steps() == 0);
}
