#include "apps/mnist_train/options.h"

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "apps/cli_checks.h"
#include "core/device.h"
#include "core/error.h"
#include "kernels/autotune.h"

namespace mnist {

namespace {

// CLI11's PositiveNumber and NonNegativeNumber are ranges up to DBL_MAX, and their error message
// prints that bound in full (300 digits); this says what is wanted in a few words.
CLI::Validator at_least(double lo, bool strict) {
  return CLI::Validator(
      [lo, strict](std::string& text) -> std::string {
        double v = 0;
        const std::string want =
            std::string(strict ? "a finite number > " : "a finite number >= ") + CLI::detail::to_string(lo);
        if (!CLI::detail::lexical_cast(text, v)) return "expected " + want + ", got '" + text + "'";
        if (!std::isfinite(v) || (strict ? !(v > lo) : !(v >= lo))) return "expected " + want + ", got " + text;
        return std::string();
      },
      strict ? "POSITIVE" : "NONNEGATIVE");
}

using ember::cli::kFinite;  // the ranged floats check this first
using ember::cli::kSeed;

const CLI::Validator kPositive = at_least(0, true);
const CLI::Validator kNonNegative = at_least(0, false);

// The choices a flag takes, spelled as on the command line.
template <class E>
struct Choice {
  const char* name;
  E value;
};
constexpr Choice<ModelKind> kModels[] = {{"mlp", ModelKind::mlp}, {"cnn", ModelKind::cnn}, {"fast", ModelKind::fast}};
constexpr Choice<OptimizerKind> kOptimizers[] = {
    {"sgd", OptimizerKind::sgd}, {"adam", OptimizerKind::adam}, {"adamw", OptimizerKind::adamw}};
constexpr Choice<SchedulerKind> kSchedulers[] = {{"none", SchedulerKind::none},
                                                 {"onecycle", SchedulerKind::onecycle},
                                                 {"cyclic", SchedulerKind::cyclic},
                                                 {"cosine", SchedulerKind::cosine},
                                                 {"step", SchedulerKind::step}};
constexpr Choice<AmpMode> kAmpModes[] = {{"off", AmpMode::off}, {"fp16", AmpMode::fp16}, {"bf16", AmpMode::bf16}};
constexpr Choice<bool> kCpuDefaults[] = {{"measured", true}, {"fixed", false}};

template <class E, size_t N>
const char* name_in(const Choice<E> (&choices)[N], E value) {
  for (const Choice<E>& c : choices)
    if (c.value == value) return c.name;
  return "?";
}

// A flag that takes one of `choices`: checked as text (the usual "X not in {a,b}" message), stored
// as the enum.
template <class E, size_t N>
CLI::Option* add_choice(CLI::App& app, const std::string& flag, E& target, const Choice<E> (&choices)[N],
                        const std::string& help) {
  std::vector<std::string> names;
  for (const Choice<E>& c : choices) names.emplace_back(c.name);
  return app
      .add_option_function<std::string>(
          flag,
          [&target, &choices](const std::string& v) {
            for (const Choice<E>& c : choices)
              if (v == c.name) target = c.value;
          },
          help)
      ->check(CLI::IsMember(names))
      ->default_str(name_in(choices, target));
}

// --data and how it is split, loaded and augmented
void add_data_options(CLI::App& app, Options& o, std::string& resize) {
  app.option_defaults()->group("Data");
  app.add_option("--data", o.data,
                 "the data: a directory of IDX files (raw or .gz; MNIST and Fashion-MNIST names), an ImageFolder "
                 "directory (root/<class>/<image>, or split by folder: root/train/<class>/... with valid/, val/, "
                 "dev/ and/or test/, any case; docs/data.md), or a packed file from ember_pack");
  app.add_option("--val-split", o.val_split, "fraction of the training set held out for validation")
      ->check(kFinite)
      ->check(CLI::Range(0.0, 0.5));
  app.add_option("--test-split", o.test_split,
                 "fraction held out for testing (stratified by class, seeded) when the data has no test split: an "
                 "ImageFolder without a test/ folder, or a packed file (an error for data with one)")
      ->check(kFinite)
      ->check(CLI::Range(0.01, 0.9));
  app.add_option("--resize", resize,
                 "ImageFolder: resize every image to HxW (default: the first image's size; "
                 "others must match)")
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            const size_t x = v.find('x');
            char* e1 = nullptr;
            char* e2 = nullptr;
            const long h = x == std::string::npos ? 0 : std::strtol(v.c_str(), &e1, 10);
            const long w = x == std::string::npos ? 0 : std::strtol(v.c_str() + x + 1, &e2, 10);
            if (x == std::string::npos || e1 != v.c_str() + x || *e2 != '\0' || h < 1 || w < 1 || h > 4096 || w > 4096)
              return "expected HxW with 1 <= H, W <= 4096 (e.g. 32x32), got '" + v + "'";
            return "";
          },
          "HxW"));
  app.add_flag("--skip-bad-images", o.skip_bad_images,
               "ImageFolder: leave out (and count) images that cannot be decoded instead of stopping");
  app.add_option("--workers", o.workers, "loader worker threads (0: load in the training thread)")
      ->check(CLI::Range(0, 64));
  app.add_flag("--pin-memory,!--no-pin-memory", o.pin_memory, "page-locked staging buffers and non-blocking copies");
  app.add_flag("--device-resident", o.device_resident,
               "upload the whole set to the GPU once as uint8 and gather batches there");
  app.add_flag("--augment", o.augment, "random crop (pad 2) and horizontal flip on the host");
}

// the model, the optimizer and its schedule, the run's length, --distributed
void add_training_options(CLI::App& app, Options& o) {
  app.option_defaults()->group("Training");
  add_choice(app, "--model", o.model, kModels,
             "mlp (784-128-64-10), cnn (two conv layers), fast (BN-CNN tuned for time-to-accuracy)");
  app.add_option("--epochs", o.epochs, "passes over the training set")->check(CLI::Range(1, 1000));
  app.add_option("--batch-size", o.batch_size, "samples per optimizer step (per micro-batch with --grad-accum)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  app.add_option("--lr", o.lr, "learning rate (the peak lr with onecycle/cyclic)")->check(kPositive);
  add_choice(app, "--optimizer", o.optimizer, kOptimizers, "sgd, adam or adamw");
  app.add_option("--weight-decay", o.weight_decay, "weight decay (decoupled for adamw)")->check(kNonNegative);
  app.add_option("--momentum", o.momentum, "SGD momentum (nesterov), or Adam's beta1")
      ->check(kFinite)
      ->check(CLI::Range(0.0, 0.9999));
  add_choice(app, "--scheduler", o.scheduler, kSchedulers, "none, onecycle, cyclic, cosine or step");
  app.add_option("--grad-accum", o.grad_accum, "micro-batches per optimizer step (the loss is divided by N)")
      ->check(CLI::Range(1, 1024));
  app.add_option("--clip-grad", o.clip_grad, "clip the gradients' total 2-norm to this (0: off)")->check(kNonNegative);
  app.add_option("--label-smoothing", o.label_smoothing, "cross-entropy label smoothing")
      ->check(kFinite)
      ->check(CLI::Range(0.0, 0.99));
  app.add_option("--seed", o.seed, "seed for initialisation, shuffling, augmentation and the split")->check(kSeed);
  app.add_flag("--deterministic", o.deterministic, "only deterministic kernels (bitwise repeatable runs)");
  app.add_flag("--distributed", o.distributed,
               "data parallel over the processes ember_run started (gloo on the CPU, nccl on CUDA: cuda:LOCAL_RANK). "
               "--batch-size is per process, so the global batch is WORLD_SIZE x --batch-size, and --lr is multiplied "
               "by WORLD_SIZE (the linear scaling rule; --no-lr-scaling keeps --lr as given). Only rank 0 prints, logs "
               "and saves; the test accuracy covers the whole test set. Start: ember_run --nproc-per-node N -- "
               "mnist_train --distributed ...");
  app.add_flag("!--no-lr-scaling", o.lr_scaling, "with --distributed: do not scale --lr by WORLD_SIZE");
  app.add_option_function<std::string>(
         "--device",
         [&o](const std::string& v) {
           if (v == "auto") o.device.reset();
           else o.device = ember::Device::parse(v);
         },
         "auto, cpu, cuda or cuda:N")
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            try {
              if (v != "auto") (void)ember::Device::parse(v);
              return "";
            } catch (const ember::Error& e) {
              return e.what();
            }
          },
          "DEVICE"))
      ->default_str("auto");
  app.add_option("--max-steps", o.max_steps, "stop after this many optimizer steps in all (0: no limit)")
      ->check(kNonNegative);
  app.add_option("--max-nonfinite-steps", o.max_nonfinite_steps,
                 "stop with an error after this many consecutive steps with a NaN/inf loss (checked at each log "
                 "interval, without a host read per step; fp16 overflow steps the loss scaler skips do not count)")
      ->check(CLI::Range(1, 1000000));
}

// what makes a step faster: graphs, autotuning, mixed precision, layouts
void add_speed_options(CLI::App& app, Options& o) {
  app.option_defaults()->group("Speed");
  app.add_flag("--graph", o.graph,
               "capture the whole training step in a CUDA graph after warm-up and replay it (eager fallback if "
               "capture is impossible); with --device-resident, each evaluation pass too");
  app.add_option("--graph-steps", o.graph_steps,
                 "with --graph: optimizer steps per graph launch, at most (up to the next log "
                 "line or the end of the epoch; 1: one step per launch)")
      ->check(CLI::Range(int64_t{1}, int64_t{10000}));
  app.add_flag("--eager-eval", o.eager_eval,
               "with --graph --device-resident: evaluate eagerly, batch by batch, not from a replayed CUDA graph");
  app.add_flag("--autotune", o.autotune, "time every kernel variant once per shape and keep the fastest");
  app.add_option("--backends", o.backends,
                 "kernel choice per op, e.g. matmul=cublas,linear=auto,conv2d=cudnn (op or *, = default, auto, vendor "
                 "or a variant name from bench_ops --list; vendor alone: every op; applied after --autotune; the "
                 "ablation sets its own)")
      ->check(CLI::Validator(
          [](std::string& spec) -> std::string {
            try {
              ember::set_backends(spec);  // validates the whole string; the trainer applies it again
              ember::set_backend_all("");
              return "";
            } catch (const std::exception& e) {
              // The library lists every op with kernels after an unknown op name: too long for one line here.
              std::string msg = e.what();
              if (size_t cut = msg.find("; ops with kernels:"); cut != std::string::npos)
                msg = msg.substr(0, cut) + "; bench_ops --list names the ops and their variants";
              return msg;
            }
          },
          "SPEC", "backends"));
  app.add_flag("--sync-debug", o.sync_debug, "report every host synchronisation inside a step, with the op");
  add_choice(app, "--amp", o.amp, kAmpModes, "mixed precision: off, fp16 (with loss scaling) or bf16");
  add_choice(app, "--cpu-defaults", o.measured_cpu_defaults, kCpuDefaults,
             "on the CPU, the kernel of an op without --backends: measured (the fastest on this machine, timed at "
             "first use and kept in the kernel cache, EMBER_CACHE_DIR or ~/.cache/ember) or fixed (the first "
             "registered); the default is EMBER_CPU_DEFAULTS or measured");
  app.add_flag("--channels-last", o.channels_last, "NHWC activations for the conv models");
  app.add_flag("--fuse-activations,!--no-fuse-activations", o.fuse_activations,
               "run each Linear followed by ReLU as one linear with the relu fused, and each ReLU followed by "
               "MaxPool2d as one max pooling with the relu fused, both ways (else two ops)");
  app.add_flag("--fuse-mlp,!--no-fuse-mlp", o.fuse_mlp,
               "run each stack of Linears (and ReLUs) as one mlp op: on CUDA one kernel each way, "
               "where every layer is at most 128 wide (only with --fuse-activations; else layer by layer)");
  app.add_flag("--fuse-pool,!--no-fuse-pool", o.fuse_pool,
               "run each Conv2d or BatchNorm2d followed by MaxPool2d, and each BatchNorm2d followed by "
               "AdaptiveAvgPool2d(1) (directly or after a ReLU), as one op whose backward reads the pooled "
               "gradient: on CUDA the kernels pool the layer's output before storing it and unpool the gradient "
               "as they load it (only with --fuse-activations)");
  app.add_flag("--zero-grad-to-none,!--zero-grad-fill", o.zero_grad_to_none,
               "set gradients to none between steps (else fill them with zeros)");
  app.add_flag("--sync-every-step", o.sync_every_step,
               "read the loss back every step (the naive loop; off: once per log interval)");
}

// the run's records and the dry run
void add_logging_options(CLI::App& app, Options& o) {
  app.option_defaults()->group("Logging");
  app.add_option("--log", o.log,
                 "append one JSON object per log interval, per epoch and a summary at the end to this file (a "
                 "failed output is reported once, training goes on, the exit code is 1)");
  app.add_option("--tensorboard", o.tensorboard, "write TensorBoard event files into this directory");
  app.add_option("--plot", o.plot, "write loss and accuracy curves to this SVG file");
  app.add_option("--profile", o.profile, "profile a few steps into this Chrome-trace JSON file and print the top ops");
  app.add_option("--log-interval", o.log_interval, "steps between progress updates (the only host reads)")
      ->check(CLI::Range(1, 1000000));
  app.add_flag("--quiet", o.quiet, "no progress bar, only epoch lines and the summary");
  app.add_flag("--check-options", o.check_options,
               "check the command line (every usage error exits 2), print 'options ok' and exit 0 without training");
}

// checkpoints, evaluation and prediction, the ablation
void add_checkpoint_options(CLI::App& app, Options& o) {
  app.option_defaults()->group("Checkpoints");
  app.add_option("--save", o.save, "save a training checkpoint (safetensors, atomic) after every epoch");
  app.add_option("--resume", o.resume,
                 "continue from a training checkpoint (flags that shape the run, e.g. --lr, --batch-size, --scheduler, "
                 "must match the checkpoint's)");
  app.add_option("--eval-only", o.eval_only, "load the model from a checkpoint and only evaluate");
  app.add_option("--predict", o.predict,
                 "with --eval-only CKPT: the predicted class, its probability and the top 3 for each image (the "
                 "input shape, normalisation and class names come from the checkpoint; --data is not read)");

  app.option_defaults()->group("Ablation");
  app.add_flag("--ablation", o.ablation, "run the speed-up ladder and print one table");
  app.add_option("--ablation-steps", o.ablation_steps, "optimizer steps per rung of the ablation")
      ->check(CLI::Range(int64_t{20}, int64_t{1000000}));
}

// The usage errors CLI11 cannot see: combinations of flags and the device. Empty when fine.
std::string usage_error(const Options& o) {
  if (!o.eval_only.empty() && !o.resume.empty()) return "--eval-only and --resume cannot be combined";
  if (!o.predict.empty() && o.eval_only.empty()) return "--predict needs --eval-only CKPT (the model to predict with)";
  if (!o.predict.empty() && (o.distributed || o.ablation))
    return "--predict runs on one process, without --distributed or --ablation";
  if (o.ablation && (!o.eval_only.empty() || !o.resume.empty()))
    return "--ablation runs its own trainings; it cannot be combined with --eval-only or --resume";
  if (o.channels_last && o.model == ModelKind::mlp) return "--channels-last applies to the conv models (cnn, fast)";
  return "";
}

}  // namespace

const char* name(ModelKind m) { return name_in(kModels, m); }
const char* name(OptimizerKind o) { return name_in(kOptimizers, o); }
const char* name(SchedulerKind s) { return name_in(kSchedulers, s); }
const char* name(AmpMode a) { return name_in(kAmpModes, a); }

ModelKind model_named(const std::string& name) {
  for (const Choice<ModelKind>& c : kModels)
    if (name == c.name) return c.value;
  EMBER_FAIL("unknown model '", name, "' (expected mlp, cnn or fast)");
}

ParseResult parse_options(int argc, char** argv) {
  Options o;
  // the environment's default for --cpu-defaults (test suites fix it for reproducible kernels)
  if (const char* e = std::getenv("EMBER_CPU_DEFAULTS"); e != nullptr && *e != '\0') {
    const std::string v = e;
    if (v != "measured" && v != "fixed") {
      std::fprintf(stderr, "mnist_train: error: EMBER_CPU_DEFAULTS is '%s', expected measured or fixed\n",
                   ember::user_message(v).c_str());
      return ParseResult{std::nullopt, 2};
    }
    o.measured_cpu_defaults = v == "measured";
  }
  CLI::App app{
      "mnist_train: trains and evaluates a classifier on an MNIST-format IDX set (Fashion-MNIST by default), an "
      "ImageFolder of your own images or a packed file, on the "
      "GPU when there is one, else on the CPU, and measures what each training speed-up is worth (--ablation).",
      "mnist_train"};
  app.option_defaults()->always_capture_default();
  app.get_formatter()->column_width(34);

  std::string resize;
  // Each sets the help group of what it adds through option_defaults(), so the group is named
  // once per section rather than on every option.
  add_data_options(app, o, resize);
  add_training_options(app, o);
  add_speed_options(app, o);
  add_logging_options(app, o);
  add_checkpoint_options(app, o);

  ParseResult r;
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) {  // --help
      std::printf("%s", app.help().c_str());
      r.exit_code = 0;
      return r;
    }
    std::fprintf(stderr, "mnist_train: error: %s (see --help)\n", ember::user_message(e.what()).c_str());
    r.exit_code = 2;
    return r;
  }
  o.test_split_given = app.count("--test-split") > 0;
  o.val_split_given = app.count("--val-split") > 0;
  if (!resize.empty()) {  // checked by its validator: "HxW"
    o.resize_h = std::strtol(resize.c_str(), nullptr, 10);
    o.resize_w = std::strtol(resize.c_str() + resize.find('x') + 1, nullptr, 10);
  }
  if (const std::string msg = usage_error(o); !msg.empty()) {
    std::fprintf(stderr, "mnist_train: error: %s (see --help)\n", ember::user_message(msg).c_str());
    r.exit_code = 2;
    return r;
  }
  r.options = o;
  return r;
}

}  // namespace mnist
