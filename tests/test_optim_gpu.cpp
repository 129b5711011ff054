// Optimizers, clipping and checkpointing on CUDA: the fused multi-tensor kernels against the CPU
// loops over several steps (with the lr changing every step, so the device hyperparameter tensor
// is re-uploaded, or read from rows staged ahead), found_inf / inv_scale read on the device, no
// host sync inside a step, many tensors (several multi-tensor tables), and activation
// checkpointing's lower peak memory. (The per-op parity of sgd_step/adam_step/total_norm/
// clip_by_total_norm on every sample and dtype is in the generic test_ops_gpu.cpp.)
#include <catch2/catch.hpp>

#include <algorithm>

#include "core/cuda/graph.h"
#include "core/cuda/runtime.h"
#include "core/rng.h"
#include "core/runtime.h"
#include "kernels/functional.h"
#include "nn/nn.h"
#include "optim/optim.h"
#include "tests/clip_step_check.h"
#if EMBER_WITH_CUDA  // raw CUDA runtime calls; a CPU-only build has no toolkit headers
#include "tests/launch_count_util.h"
#endif
#include "tests/op_driver.h"

using namespace ember;

namespace {

// A model-like list of parameters: 40 tensors (more than one 32-tensor table), one of them of
// 4.2M elements (most of the call's ~260 chunks). With `empty`, every fourth is empty: the
// kernels then count the steps in a launch of their own (kernels/ops/optim.h, the ticket).
std::vector<int64_t> sizes(bool empty) {
  std::vector<int64_t> s;
  for (int i = 0; i < 40; ++i)
    s.push_back(i == 3 ? (int64_t{1} << 22) + 17 : (empty && i % 4 == 0 ? 0 : 1000 + 37 * i));
  return s;
}

std::vector<Tensor> make_params(Device d, uint64_t seed, bool empty = true) {
  std::vector<Tensor> out;
  manual_seed(seed);
  for (int64_t n : sizes(empty)) {
    Tensor t = uniform({n}, -1, 1, TensorOptions().device(d));  // Philox: the same numbers on both devices
    t.requires_grad_(true);
    out.push_back(t);
  }
  return out;
}

void set_grads(std::vector<Tensor>& ps, uint64_t seed) {
  manual_seed(seed);
  for (Tensor& p : ps) p.set_grad(normal({p.numel()}, 0, 1, TensorOptions().device(p.device())));
}

std::unique_ptr<optim::Optimizer> make_opt(int which, std::vector<Tensor> ps) {
  switch (which) {
    case 0:
      return std::make_unique<optim::SGD>(ps, optim::SGDOptions(0.1).momentum(0.9).dampening(0.1).weight_decay(1e-4));
    case 1: return std::make_unique<optim::SGD>(ps, optim::SGDOptions(0.05).momentum(0.8).nesterov(true));
    case 2: return std::make_unique<optim::Adam>(ps, optim::AdamOptions(1e-3).weight_decay(1e-2));
    default: return std::make_unique<optim::AdamW>(ps, optim::AdamWOptions(1e-3).amsgrad(true));
  }
}

void compare(const std::vector<Tensor>& a, const std::vector<Tensor>& b, double rtol, double atol) {
  for (size_t i = 0; i < a.size(); ++i) {
    std::vector<float> x = a[i].to_vector<float>(), y = b[i].to_vector<float>();
    REQUIRE(x.size() == y.size());
    size_t bad = 0;
    for (size_t j = 0; j < x.size(); ++j)
      if (!(std::fabs(x[j] - y[j]) <= atol + rtol * std::fabs(y[j]))) ++bad;
    INFO("tensor " << i << " (" << x.size() << " elements)");
    CHECK(bad == 0);
  }
}

}  // namespace

TEST_CASE("cuda optimizers: fused multi-tensor kernels match the CPU loops over steps with a schedule",
          "[gpu][optim]") {
  for (int which = 0; which < 8; ++which) {
    const bool empty = which >= 4;  // without: the update kernels count the steps themselves
    INFO("optimizer " << which % 4 << (empty ? ", empty tensors in the list" : ""));
    std::vector<Tensor> pc = make_params(kCPU, 1, empty), pg = make_params(kCUDA, 1, empty);
    auto oc = make_opt(which % 4, pc), og = make_opt(which % 4, pg);
    optim::OneCycleLR sc(*oc, optim::OneCycleLROptions(which % 4 < 2 ? 0.2 : 3e-3, 10));
    optim::OneCycleLR sg(*og, optim::OneCycleLROptions(which % 4 < 2 ? 0.2 : 3e-3, 10));
    for (int s = 0; s < 3; ++s) {
      set_grads(pc, 100 + s);
      set_grads(pg, 100 + s);
      oc->step();
      og->step();
      sc.step();
      sg.step();
    }
    // f32, 3 steps: FMA contraction on the GPU makes the last bits differ
    compare(pg, pc, 1e-5, 1e-6);
    for (size_t i = 0; i < pc.size(); ++i) {
      const TensorDict& a = og->state(pg[i]);
      const TensorDict& b = oc->state(pc[i]);
      REQUIRE(a.size() == b.size());
      for (const auto& [name, t] : b) CHECK(a.at(name).device().is_cuda());
      if (b.contains("step")) CHECK(a.at("step").item() == b.at("step").item());
    }
  }
}

TEST_CASE("cuda optimizers: found_inf skips and inv_scale unscales on the device, no host sync in a step",
          "[gpu][optim]") {
  const bool empty = GENERATE(true, false);  // without: the update kernels count the steps
  INFO((empty ? "empty tensors in the list" : "no empty tensor"));
  std::vector<Tensor> p = make_params(kCUDA, 2, empty), q = make_params(kCUDA, 2, empty);
  optim::AdamW a(p), b(q);
  optim::StepLR sched(a, 1, 0.5);  // the lr changes every step: the hyperparameters are re-uploaded
  set_grads(p, 7);
  for (Tensor& t : p) {
    Tensor g = t.grad();
    g.mul_(1024.0);
  }
  set_grads(q, 7);
  std::vector<std::vector<float>> before;
  for (const Tensor& t : p) before.push_back(t.to_vector<float>());
  Tensor found = full({1}, 1.0, kCUDA), inv = full({1}, 1.0 / 1024, kCUDA);
  a.step({found, inv});  // skipped
  for (size_t i = 0; i < p.size(); ++i) CHECK(p[i].to_vector<float>() == before[i]);
  CHECK(a.state(p[1]).at("step").item() == 0);
  found.fill_(0.0);
  // From here on, nothing may block the host: sync-debug turns a hidden sync into an error.
  runtime::set_sync_debug(runtime::SyncDebug::error);
  uint64_t syncs = runtime::host_sync_count();
  a.step({found, inv});
  b.step();
  sched.step();
  a.step({found, inv});
  Tensor norm = optim::clip_grad_norm_(p, 1.0);
  runtime::set_sync_debug(runtime::SyncDebug::off);
  CHECK(runtime::host_sync_count() == syncs);
  CHECK(norm.is_cuda());
  CHECK(a.state(p[1]).at("step").item() == 2);
  (void)b;
}

TEST_CASE("cuda optimizer step replayed from a CUDA graph sees new lrs and advancing step counters",
          "[gpu][optim][graph]") {
  // p is stepped by graph replays, q eagerly; same start, same (static) gradients, same schedule.
  // With empty tensors in the list a launch of its own counts the steps; without, the update
  // kernels count them (their ticket must be back at 0 after every replay, or the count stops).
  const bool empty = GENERATE(true, false);
  INFO((empty ? "empty tensors in the list" : "no empty tensor"));
  std::vector<Tensor> p = make_params(kCUDA, 4, empty), q = make_params(kCUDA, 4, empty);
  set_grads(p, 11);
  set_grads(q, 11);
  optim::AdamW a(p, optim::AdamWOptions(1e-2).amsgrad(true)), b(q, optim::AdamWOptions(1e-2).amsgrad(true));
  optim::StepLR sa(a, 1, 0.7), sb(b, 1, 0.7);
  cuda::Stream st = cuda::Stream::create(0);
  cuda::device_synchronize(0);
  cuda::Graph g;
  {
    cuda::StreamGuard guard(st);
    a.step();  // warm-up: creates the state outside the capture
    sa.step();
    a.sync_hyperparameters();  // nothing changes inside the capture
    g.capture_begin(st);
    a.step();
    g.capture_end();
    // without empty tensors: 2 launches update the 40 parameters (32 tensors per table) and count
    // the steps; with them: 1 launch counts the 40 steps, 1 updates the 30 nonempty tensors; no
    // copies, no memsets
    CHECK(g.num_nodes() == 2);
    // A changed lr inside a capture is an error naming the fix.
    cuda::Graph bad;
    bad.capture_begin(st);
    a.param_groups()[0].options().set_lr(0.5);
    CHECK_THROWS_WITH(a.step(), Catch::Contains("sync_hyperparameters()"));
    a.param_groups()[0].options().set_lr(sa.get_last_lr()[0]);
  }
  b.step();
  sb.step();
  for (int i = 0; i < 4; ++i) {
    {
      cuda::StreamGuard guard(st);
      a.sync_hyperparameters();  // eager, stream-ordered before the replay
      g.replay();
      sa.step();
    }
    b.step();
    sb.step();
  }
  cuda::device_synchronize(0);
  compare(p, q, 0, 0);  // the same kernels on the same data: bit for bit
  CHECK(a.state(p[1]).at("step").item() == 5);
}

TEST_CASE("cuda optimizer steps read a schedule staged ahead: bit for bit, no copy in a step", "[gpu][optim]") {
  // p steps with optim::ScheduleAhead (rows of 4), q uploads its values each step; OneCycleLR moves
  // lr and beta1 every step. The capture of p's step would refuse an upload (the changed lr), so
  // a captured step proves that the step reads its staged row and copies nothing.
  std::vector<Tensor> p = make_params(kCUDA, 5, false), q = make_params(kCUDA, 5, false);
  optim::AdamW a(p, optim::AdamWOptions(1e-2)), b(q, optim::AdamWOptions(1e-2));
  const int64_t total = 10;
  optim::OneCycleLR sa(a, optim::OneCycleLROptions(1e-2, total)), sb(b, optim::OneCycleLROptions(1e-2, total));
  optim::ScheduleAhead ahead(sa, 4);
  cuda::Stream st = cuda::Stream::create(0);
  cuda::device_synchronize(0);
  cuda::StreamGuard guard(st);
  for (int64_t i = 0; i < total; ++i) {
    set_grads(p, 30 + i);
    set_grads(q, 30 + i);
    ahead.before_step(total - i);
    if (i == 2) {
      cuda::Graph g;
      g.capture_begin(st);
      a.step();
      g.capture_end();
      CHECK(g.num_nodes() == 2);  // adam_step's two tables of tensors (it counts the steps too); no copy
    }
    a.step();
    b.step();
    sa.step();
    sb.step();
  }
  ahead.finish();
  cuda::device_synchronize(0);
  compare(p, q, 0, 0);  // the same kernels on the same values
  CHECK(ahead.rows_read() == total);
  CHECK(ahead.stagings() == 3);
  CHECK(a.state(p[0]).at("step").item() == total);
}

TEST_CASE("cuda clip_grad_norm_ matches the CPU over many tensors", "[gpu][optim]") {
  for (double p : {2.0, 1.0, static_cast<double>(INFINITY), 3.0}) {
    std::vector<Tensor> pc = make_params(kCPU, 3), pg = make_params(kCUDA, 3);
    set_grads(pc, 9);
    set_grads(pg, 9);
    Tensor nc = optim::clip_grad_norm_(pc, 5.0, p), ng = optim::clip_grad_norm_(pg, 5.0, p);
    INFO("norm type " << p);
    CHECK(ng.item() == Approx(nc.item()).epsilon(1e-6));
    std::vector<Tensor> gc, gg;
    for (size_t i = 0; i < pc.size(); ++i) {
      gc.push_back(pc[i].grad());
      gg.push_back(pg[i].grad());
    }
    compare(gg, gc, 2e-6, 1e-7);
  }
}

TEST_CASE("cuda clipping folded into the step: clip_grad_norm_ then step bit for bit, one launch fewer",
          "[gpu][optim]") {
  for (int which : {0, 1, 2})
    for (DType dt : {DType::f32, DType::bf16}) test::check_clip_into_step(kCUDA, dt, which);
#if EMBER_WITH_CUDA  // (a CPU-only build skips every GPU test anyway)
  // launches of a warm step: the norm's two passes and the update; clipping in place adds one
  std::vector<Tensor> all = make_params(kCUDA, 5, false), p(all.begin(), all.begin() + 8);  // one table
  set_grads(p, 9);
  optim::AdamW opt(p, optim::AdamOptions(1e-3));
  opt.step();
  const size_t folded = test::kernels_launched_by([&] {
    optim::GradScaling clip;
    optim::clip_grad_norm_into_step(p, 1.0, clip);
    opt.step(clip);
  });
  const size_t separate = test::kernels_launched_by([&] {
    optim::clip_grad_norm_(p, 1.0);
    opt.step();
  });
  CHECK(folded == 3);
  CHECK(separate == folded + 1);
#endif
}

TEST_CASE("cuda zero_grad(false) zeroes every gradient in one launch per 32, in place", "[gpu][optim]") {
  std::vector<Tensor> p = make_params(kCUDA, 5);  // 40 tensors, every fourth empty, one of 4.2M elements
  set_grads(p, 9);
  std::vector<const void*> storage;
  for (const Tensor& t : p) storage.push_back(t.grad().data_ptr());
  optim::SGD opt(p, optim::SGDOptions(0.1));
#if EMBER_WITH_CUDA  // (a CPU-only build skips every GPU test anyway)
  // 30 non-empty gradients: one table; as PyTorch's foreach zero_, not a fill per parameter
  CHECK(test::kernels_launched_by([&] { opt.zero_grad(/*set_to_none=*/false); }) == 1);
  std::vector<Tensor> more = make_params(kCUDA, 6, false);  // 40 non-empty: two tables
  set_grads(more, 10);
  optim::SGD opt_more(more, optim::SGDOptions(0.1));
  CHECK(test::kernels_launched_by([&] { opt_more.zero_grad(false); }) == 2);
#endif
  opt.zero_grad(false);
  for (size_t i = 0; i < p.size(); ++i) {
    INFO("gradient " << i);
    REQUIRE(p[i].grad().defined());
    CHECK(p[i].grad().data_ptr() == storage[i]);  // kept, as set_to_none = false promises
    CHECK(sum(abs(p[i].grad())).item() == 0);
  }
  // a view whose base is not 16-byte aligned (bytes 2..62 of 64), a channels-last one, and bf16:
  // exactly their bytes are cleared
  Tensor base = full({32}, 3.0, TensorOptions(DType::bf16).device(kCUDA));
  Tensor cl = uniform({4, 5, 5, 3}, 1, 2, TensorOptions().device(kCUDA)).permute({0, 3, 1, 2});
  zero_many_({base.slice(0, 1, 31), cl});
  std::vector<float> b = base.to_vector<float>();
  CHECK(b.front() == 3.0f);
  CHECK(b.back() == 3.0f);
  CHECK(std::count(b.begin(), b.end(), 0.0f) == 30);
  CHECK(sum(abs(cl)).item() == 0);
}

TEST_CASE("cuda activation checkpointing lowers the peak device memory, same gradients", "[gpu][checkpoint]") {
  // 16 layers in 4 checkpointed blocks; width 1024 on 4096 rows on a GPU, 64 on 256 in the
  // simulator (the same activation-to-weight proportions, 1/4096 of the work)
  const int64_t width = testing::kSimulator ? 64 : 1024, rows = 4 * width;
  auto make = [width](bool ckpt) {
    manual_seed(11);
    nn::Sequential net;
    for (int i = 0; i < 4; ++i) {
      nn::Sequential block;
      for (int j = 0; j < 4; ++j) {
        block->push_back(nn::Linear(width, width));
        block->push_back(nn::GELU());
      }
      if (ckpt) net->push_back(nn::Checkpoint(block));
      else net->push_back(block);
    }
    net->to(kCUDA);
    return net;
  };
  manual_seed(5);
  Tensor x = randn({rows, width}).to(kCUDA);
  auto run = [&](nn::Sequential& net, size_t* peak) {
    cuda::device_synchronize(0);
    cuda::reset_peak_stats(0);
    size_t base = cuda::allocator_stats(0).allocated_bytes;
    Tensor loss = mean(net(x));
    loss.backward();
    cuda::device_synchronize(0);
    *peak = cuda::allocator_stats(0).peak_allocated_bytes - base;
    return loss.item();
  };
  nn::Sequential plain = make(false), ck = make(true);
  size_t peak_plain = 0, peak_ck = 0;
  double l1 = run(plain, &peak_plain), l2 = run(ck, &peak_ck);
  CHECK(l1 == Approx(l2).epsilon(1e-6));
  WARN("CUDA peak: " << peak_plain / 1048576.0 << " MiB without checkpointing, " << peak_ck / 1048576.0 << " MiB with");
  CHECK(static_cast<double>(peak_ck) < 0.6 * static_cast<double>(peak_plain));
  auto g1 = plain->parameters(), g2 = ck->parameters();
  std::vector<Tensor> a, b;
  for (size_t i = 0; i < g1.size(); ++i) {
    a.push_back(g2[i].grad());
    b.push_back(g1[i].grad());
  }
  compare(a, b, 1e-5, 1e-6);
}
