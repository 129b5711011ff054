#include "apps/mnist_train/ablation.h"

#include <cmath>
#include <cstdio>
#include <functional>

#include "kernels/registry.h"

namespace mnist {

using namespace ember;

namespace {

struct Rung {
  std::string name;
  std::function<void(Options&)> apply;
  bool needs_gpu = false;
};

// The ladder: each rung adds one technique to the one above.
std::vector<Rung> ablation_rungs(const Options& base, bool gpu) {
  const int64_t big_batch = 512;
  // lr scaling for the larger batch: linear for SGD, square root for the Adam family
  const double scale = base.optimizer == OptimizerKind::sgd ? static_cast<double>(big_batch) / 64.0
                                                            : std::sqrt(static_cast<double>(big_batch) / 64.0);
  return {
      {"baseline (see above)",
       [](Options& o) {
         o.workers = 0;
         o.pin_memory = false;
         o.batch_size = 64;
         o.amp = AmpMode::off;
         o.zero_grad_to_none = false;
         o.sync_every_step = true;
         o.graph = false;
         o.graph_steps = 1;
         o.autotune = false;
         o.measured_cpu_defaults = false;  // ember's fixed kernels until the autotune rung
         o.device_resident = false;
         o.fuse_activations = false;
         o.fuse_mlp = false;
         o.fuse_pool = false;
       }},
      {"+ 4 worker threads", [](Options& o) { o.workers = 4; }},
      {"+ pinned memory, non-blocking copies", [](Options& o) { o.pin_memory = true; }, true},
      {str("+ batch ", big_batch, " (lr x", scale, ")"),
       [big_batch, scale, &base](Options& o) {
         o.batch_size = big_batch;
         o.lr = base.lr * scale;
       }},
      {"+ device-resident uint8 data, normalised on the GPU", [](Options& o) { o.device_resident = true; }, true},
      {"+ gradients set to none", [](Options& o) { o.zero_grad_to_none = true; }},
      {"+ no host sync in the step (read once per interval)", [](Options& o) { o.sync_every_step = false; }},
      {"+ ReLU fused into Linear and max pooling, each way", [](Options& o) { o.fuse_activations = true; }},
      {"+ each Linear/ReLU stack as one op (CUDA: 1 launch fwd, 2 bwd)", [](Options& o) { o.fuse_mlp = true; }},
      {"+ each Conv2d or BatchNorm2d/ReLU/pool as one op (the backward unpools)",
       [](Options& o) { o.fuse_pool = true; }},
      {"+ autotuned kernels", [](Options& o) { o.autotune = true; }},
      {"+ CUDA graph (one step per launch)", [](Options& o) { o.graph = true; }, true},
      {"+ many steps per graph launch (up to the log interval)",
       [&base](Options& o) { o.graph_steps = base.graph_steps; }, true},
      {gpu ? "+ mixed precision (bf16 autocast)" : "+ mixed precision (bf16 autocast on the CPU)",
       [](Options& o) { o.amp = AmpMode::bf16; }},
  };
}

}  // namespace

int run_ablation(const Options& base, Device device, const Splits& splits) {
  const bool gpu = device.is_cuda();
  const std::vector<Rung> rungs = ablation_rungs(base, gpu);
  std::printf("ablation: model %s, %lld optimizer steps per rung, %s on %s\n", name(base.model),
              static_cast<long long>(base.ablation_steps), name(base.optimizer), device.str().c_str());
  std::printf(
      "baseline: 0 workers, pageable memory, batch 64, fp32, zero-filled gradients, a host sync every "
      "step, ReLU after Linear as its own op, layer by layer, eager; each later rung adds one technique to the one "
      "above\n");
  std::printf("%-66s %6s %11s %8s %8s %9s %9s\n", "rung", "batch", "samples/s", "speed-up", "GPU idle", "data wait",
              "test acc");
  Options o = base;
  o.epochs = 1000;  // the step budget ends each run
  o.max_steps = base.ablation_steps;
  o.silent = true;
  o.quiet = true;
  o.save.clear();
  o.resume.clear();
  o.profile.clear();
  o.graph = false;
  double baseline = 0;
  std::vector<std::string> skipped;
  for (const Rung& rung : rungs) {
    if (rung.needs_gpu && !gpu) {  // not applied either: later rungs must not inherit it
      skipped.push_back(rung.name + ": needs a CUDA device");
      continue;
    }
    rung.apply(o);
    set_backend_all(o.autotune ? "auto" : "");
    Trainer t(o, device, splits);
    RunResult r = t.run();
    if (baseline == 0) baseline = r.samples_per_s;
    std::printf("%-66s %6lld %11.0f %7.2fx %8s %8.1f%% %8.2f%%\n", rung.name.c_str(),
                static_cast<long long>(o.batch_size), r.samples_per_s, r.samples_per_s / baseline,
                r.gpu_idle_fraction >= 0 ? str(100.0 * r.gpu_idle_fraction, "%").c_str() : "-",
                100.0 * r.data_wait_fraction, r.final_test.accuracy);
    for (const std::string& n : r.notes) std::printf("    note: %s\n", n.c_str());
    std::fflush(stdout);
  }
  set_backend_all("");
  for (const std::string& s : skipped) std::printf("skipped: %s\n", s.c_str());
  std::printf(
      "(samples/s: training only, evaluation excluded; GPU idle: time between steps with the GPU waiting, from "
      "CUDA events; data wait: host time blocked on the loader)\n");
  return 0;
}

}  // namespace mnist
