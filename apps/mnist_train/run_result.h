// What a training run reports: per epoch, the final evaluation, the totals and the notes of the
// summary (report.cpp prints them, --log records them).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mnist {

struct EvalResult {
  double accuracy = 0;                          // percent
  std::vector<std::vector<int64_t>> confusion;  // [true][predicted], K x K
  int64_t samples = 0;
};

struct EpochResult {
  int epoch = 0;
  double train_loss = 0, train_acc = 0, val_acc = 0, test_acc = 0;
  double seconds = 0;  // training time of the epoch (evaluation excluded)
  double samples_per_s = 0;
  double lr = 0;
};

struct RunResult {
  std::vector<EpochResult> epochs;
  EvalResult final_test;
  double total_seconds = 0;     // wall time of the whole run (loading and evaluation included)
  double train_seconds = 0;     // time inside training epochs
  double startup_seconds = -1;  // process start to the first training step (-1: no step ran)
  // Note [the timing rule]: the warm-up is this process's first optimizer step (with --graph: the
  // steps until the step graph is captured), plus with --autotune one forward at each evaluation
  // batch shape; what a run pays once (tuning, capture) lands there. After it the clock runs over
  // training and the per-epoch evaluations: timed_seconds, and the samples trained in it per second.
  double warmup_seconds = -1;  // first step's start to the warm-up's end (-1: it did not end)
  int64_t warmup_steps = 0;
  double timed_seconds = -1;  // the warm-up's end to the last epoch's evaluation's end (-1: n/a)
  double timed_samples_per_s = 0;
  double time_to_best = 0;  // wall time when the best test accuracy was first reached
  double best_test_acc = 0;
  int64_t steps = 0, samples = 0;
  double samples_per_s = 0;       // training throughput
  double gpu_idle_fraction = -1;  // share of the GPU's step time spent idle between steps (-1: n/a)
  double data_wait_fraction = 0;  // share of the training time the host waited for the loader
  bool graph_used = false;
  int64_t eval_replays = 0;        // evaluation passes replayed from a CUDA graph (graphed_eval.h)
  int64_t multi_steps = 0;         // optimizer steps run by K-step graphs (multi_step.h)
  int64_t multi_launches = 0;      // ... and their launches
  bool has_val = false;            // a validation split was held out (else val_acc means nothing)
  int64_t skipped_steps = 0;       // steps the loss scaler skipped
  std::vector<std::string> notes;  // fallbacks and warnings worth repeating in the summary
  std::string kernels;             // the variants that ran, for ops with a choice ("conv2d=dnnl, ...")
  std::string kernel_choices;      // with --autotune or measured CPU defaults: where the choices came from
  int interrupted_by = 0;          // the signal that stopped the run (Note [stopping on a signal])
  std::string error;               // why the run stopped early with a failure (divergence): exit 1
  // curves for the plot: (step, interval loss)
  std::vector<double> curve_steps, curve_loss;
};

}  // namespace mnist
