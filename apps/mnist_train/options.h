// mnist_train's command line: every flag, its default, and validation (exit code 2 on bad usage).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/device.h"

namespace mnist {

// The choices a flag names, as enums from parsing on; name() gives the flag's spelling back.
enum class ModelKind { mlp, cnn, fast };
enum class OptimizerKind { sgd, adam, adamw };
enum class SchedulerKind { none, onecycle, cyclic, cosine, step };
enum class AmpMode { off, fp16, bf16 };
const char* name(ModelKind m);
const char* name(OptimizerKind o);
const char* name(SchedulerKind s);
const char* name(AmpMode a);
// The model a checkpoint names ("run.model"); throws naming it when it is none of mnist_train's.
ModelKind model_named(const std::string& name);

struct Options {
  // data: an IDX directory, an ImageFolder directory or a packed file (load_splits in splits.h)
  std::string data = "/usr/share/datasets/fashion-mnist";
  double val_split = 0.1;
  bool val_split_given = false;        // a data set with a validation split of its own refuses --val-split
  double test_split = 0.2;             // held out for testing when the data has no test split of its own
  bool test_split_given = false;       // --test-split on the command line (refused for data with a test split)
  int64_t resize_h = 0, resize_w = 0;  // --resize HxW (ImageFolder; 0: the first image's size)
  bool skip_bad_images = false;
  int workers = 2;
  bool pin_memory = true;
  bool device_resident = false;
  bool augment = false;
  // model and training
  ModelKind model = ModelKind::mlp;
  int epochs = 15;  // the MLP reaches ~89.3% on Fashion-MNIST in ~10 s on a 2-core CPU (docs/perf.md)
  int64_t batch_size = 128;
  double lr = 3e-3;
  OptimizerKind optimizer = OptimizerKind::adamw;
  double weight_decay = 1e-4;
  double momentum = 0.9;
  SchedulerKind scheduler = SchedulerKind::onecycle;
  int grad_accum = 1;
  double clip_grad = 0;  // 0: off
  double label_smoothing = 0;
  uint64_t seed = 0;
  bool deterministic = false;
  std::optional<ember::Device> device;  // --device; empty: auto (the GPU when there is one)
  int64_t max_steps = 0;                // 0: the whole epochs (a cap, for quick runs and the ablation)
  int max_nonfinite_steps = 1;          // consecutive NaN/inf losses that stop the run (divergence)
  // speed
  bool graph = false;
  bool eager_eval = false;    // with --graph --device-resident: evaluate eagerly, not from a graph
  int64_t graph_steps = 100;  // with --graph: optimizer steps per graph launch, at most
  bool autotune = false;
  bool sync_debug = false;
  AmpMode amp = AmpMode::off;
  std::string backends;  // e.g. "matmul=cublas,conv2d=auto" (kernels/autotune.h set_backends)
  // Note [CPU defaults] in kernels/registry.h: true: the CPU's defaults measured on this machine
  // (--cpu-defaults measured, or EMBER_CPU_DEFAULTS), false: the fixed ones
  bool measured_cpu_defaults = true;
  bool channels_last = false;
  bool fuse_activations = true;  // Note [fused activations] in nn/sequential.h
  bool fuse_mlp = true;          // Note [fused MLP stacks] in nn/sequential.h; only with fuse_activations
  bool fuse_pool = true;         // Note [fused layer and max pooling] in nn/sequential.h; likewise
  bool zero_grad_to_none = true;
  bool sync_every_step = false;
  // observability
  std::string log;
  std::string tensorboard;
  std::string plot;
  std::string profile;
  int log_interval = 50;
  bool quiet = false;
  bool check_options = false;  // parse and check the command line, then exit 0 (scripts' dry runs)
  bool distributed = false;    // data parallel over the ranks ember_run started
  bool lr_scaling = true;      // with --distributed: lr x WORLD_SIZE (the linear scaling rule)
  bool silent = false;         // not a flag: no per-epoch lines (the ablation's runs)
  // checkpoints
  std::string save;
  std::string resume;
  std::string eval_only;
  std::vector<std::string> predict;  // images to classify with the --eval-only checkpoint
  // the ablation
  bool ablation = false;
  int64_t ablation_steps = 400;
};

// Parses argv. Returns the options, or an exit code: 0 after --help, 2 after a usage error (the
// one-line message is already printed on stderr).
struct ParseResult {
  std::optional<Options> options;
  int exit_code = 0;
};
ParseResult parse_options(int argc, char** argv);

}  // namespace mnist
