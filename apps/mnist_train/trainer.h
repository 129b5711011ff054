// The training loop of mnist_train: data, model, optimizer, schedule, loss scaling, the eager step
// and the CUDA-graph step, evaluation, logging and checkpoints.
//
// Note [no host syncs in the step]: the loss and the number of correct predictions accumulate in
// device tensors; the host reads them once per log interval (one sync), never per step, unless
// --sync-every-step asks for the naive loop. The GPU's idle time between steps is measured with
// CUDA events around each step and read at the same interval.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "amp/grad_scaler.h"
#include "ckpt/training_checkpoint.h"
#include "apps/mnist_train/models.h"
#include "apps/mnist_train/options.h"
#include "apps/mnist_train/run_agreement.h"
#include "apps/mnist_train/splits.h"
#include "core/cuda/graph.h"
#include "core/cuda/runtime.h"
#include "data/data.h"
#include "dist/ddp.h"
#include "nn/nn.h"
#include "optim/optim.h"

namespace mnist {

// Note [side outputs]: --log, --tensorboard, --plot, --profile and --save are side outputs of a
// run. Their paths are checked before anything trains (main.cpp); a failure later (a full disk,
// /dev/full, an I/O error) never stops the training: it is reported once, as one line on stderr
// naming the flag, the path and the error, nothing more is written to that output, and the
// program exits 1 at the end. Files are never left empty or half-written: --plot, --profile and
// --save are replaced atomically (io::AtomicFile), --log and --tensorboard write each record whole
// or not at all (io::AppendFile).
void output_failed(const std::string& flag, const std::string& path, const std::string& what);
int output_failures();

// Note [stopping on a signal]: the first SIGINT/SIGTERM asks the run to stop after the current
// step: the partial epoch is dropped (no checkpoint for it), the outputs are written for the
// completed epochs (JSONL summary, plot, profile) and the program exits 128 + the signal number
// (130, 143). A second signal exits at once. Under --distributed the ranks agree on stopping at
// each log interval (an all_reduce next to the loss's), so they all leave after the same step.
void install_stop_handlers();
int stop_signal();  // 0 while no stop was asked for

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
  double total_seconds = 0;  // wall time of the whole run (loading and evaluation included)
  double train_seconds = 0;  // time inside training epochs
  double time_to_best = 0;   // wall time when the best test accuracy was first reached
  double best_test_acc = 0;
  int64_t steps = 0, samples = 0;
  double samples_per_s = 0;       // training throughput
  double gpu_idle_fraction = -1;  // share of the GPU's step time spent idle between steps (-1: n/a)
  double data_wait_fraction = 0;  // share of the training time the host waited for the loader
  bool graph_used = false;
  bool has_val = false;            // a validation split was held out (else val_acc means nothing)
  int64_t skipped_steps = 0;       // steps the loss scaler skipped
  std::vector<std::string> notes;  // fallbacks and warnings worth repeating in the summary
  int interrupted_by = 0;          // the signal that stopped the run (Note [stopping on a signal])
  std::string error;               // why the run stopped early with a failure (divergence): exit 1
  // curves for the plot: (step, interval loss)
  std::vector<double> curve_steps, curve_loss;
};

class Trainer {
 public:
  Trainer(const Options& options, ember::Device device, const Splits& splits);
  ~Trainer();

  RunResult run();
  EvalResult evaluate(const std::shared_ptr<ember::data::InMemoryDataset>& ds);
  // Loads the model part of a training checkpoint (for --eval-only).
  void load_model(const std::string& path);
  ember::nn::Module& model() { return *model_; }

 private:
  std::vector<RunField> run_fields() const;
  void build_optimizer();
  void build_scheduler(int64_t total_steps);
  std::unique_ptr<ember::data::DataLoader> make_loader(std::shared_ptr<ember::data::InMemoryDataset> ds, bool train);
  // One micro-batch: forward, loss, backward, metrics; with do_step the optimizer step too.
  void eager_step(const ember::Tensor& x, const ember::Tensor& y, bool do_step);
  void optimizer_step();
  bool capture_graph(const ember::Tensor& x, const ember::Tensor& y);
  void graph_step(const ember::Tensor& x, const ember::Tensor& y);
  // Reads the device accumulators (the one host sync of an interval), logs, resets them; returns
  // the interval's (loss sum, correct count).
  std::pair<double, double> log_interval(RunResult& r, int epoch, int64_t step_in_epoch);
  void mark_step_event();
  void save_checkpoint(int epoch, int64_t step);
  // The first model state entry holding NaN or inf ("" if none): no checkpoint is saved of it.
  std::string nonfinite_weight() const;
  // The run's flags recorded in checkpoints ("run." metadata) and their check on --resume.
  ember::Metadata run_info() const;
  void check_resume_flags(const ember::Metadata& saved) const;
  void check_resume_progress(const ember::Metadata& saved, const ember::TrainingProgress& p,
                             int64_t steps_per_epoch) const;
  // The optimizer's actual learning rate (what the epoch lines print).
  double current_lr() const;

  // the pieces of run(), in the order it calls them
  struct EpochStats {                // one epoch's steps
    int64_t micro = 0, samples = 0;  // micro-batches and samples trained
    double loss = 0, correct = 0;    // sums over the log intervals
    double start = 0, wait_before = 0;
    bool max_steps_reached = false;
  };
  void upload_device_resident(RunResult& r);
  void plan_run(int64_t micro_per_epoch);
  void resume_from_checkpoint();
  bool graph_wanted(RunResult& r) const;
  EpochStats train_epoch(ember::data::DataLoader& loader, int epoch, bool want_graph, RunResult& r);
  void train_step(const ember::data::Batch& b, bool do_step, bool want_graph, RunResult& r);
  static void add_interval(EpochStats& e, std::pair<double, double> loss_and_correct);
  bool end_epoch(const EpochStats& e, int epoch, ember::data::DataLoader& loader, RunResult& r);
  bool save_epoch(const EpochStats& e, int epoch, RunResult& r);
  void finish_run(RunResult& r);

  Options o_;
  ember::Device device_;
  const Splits& splits_;
  std::shared_ptr<ember::nn::Module> model_;
  std::vector<ember::Tensor> params_;
  std::unique_ptr<ember::optim::Optimizer> opt_;
  ember::dist::ProcessGroupPtr pg_;  // --distributed: the default group
  std::unique_ptr<ember::dist::DistributedDataParallel> ddp_;
  std::unique_ptr<ember::optim::LRScheduler> sched_;
  std::unique_ptr<ember::amp::GradScaler> scaler_;
  // the inputs' normalisation: the training split's, or (--eval-only) the checkpoint's
  std::vector<double> mean_, std_;
  ember::DType amp_dtype_ = ember::DType::f32;

  // device accumulators (Note [no host syncs in the step])
  ember::Tensor loss_sum_, correct_;
  // divergence detection, on the device too: consecutive non-finite losses, the step at which
  // --max-nonfinite-steps was reached (-1: not yet) and the optimizer step counter it reports
  ember::Tensor nonfinite_run_, diverged_at_, dev_step_;
  int64_t diverged_step_ = -1;
  bool save_failed_ = false;
  bool stop_agreed_ = false;  // --distributed: some rank got SIGINT/SIGTERM (Note [stopping on a signal])
  bool stop_requested() const;
  int64_t interval_samples_ = 0, interval_steps_ = 0;
  double interval_start_ = 0;  // when the current log interval began (now_s())
  int64_t micro_ = 0;          // micro-batches since the last optimizer step

  // graph mode
  std::unique_ptr<ember::cuda::Graph> graph_;
  ember::Tensor static_x_, static_y_;
  bool graph_failed_ = false;
  bool capturing_ = false;  // inside capture_graph: the step is recorded, not run (no host reads)

  // GPU idle time between steps, from events around each step: a ring reused every interval
  std::vector<ember::cuda::Event> events_;
  size_t events_used_ = 0;
  double gpu_busy_ms_ = 0, gpu_idle_ms_ = 0;
  // device-resident copies of the splits (uploaded once)
  std::shared_ptr<ember::data::InMemoryDataset> train_dev_, val_dev_, test_dev_;

  // side outputs (Note [side outputs]): the records of steps and epochs, and the --profile window
  struct Logs;
  std::unique_ptr<Logs> logs_;
  struct ProfileWindow;
  std::unique_ptr<ProfileWindow> profile_;
  int64_t global_step_ = 0;
  int64_t steps_here_ = 0;  // optimizer steps this process made (a resumed run starts at 0)
  int start_epoch_ = 0;
  // the run's length as laid out in run() (recorded in checkpoints, compared on --resume)
  int64_t micro_per_epoch_ = 0, steps_per_epoch_ = 0, total_steps_ = 0;
  double run_start_ = 0, train_total_ = 0, wait_total_ = 0;  // now_s() at the start; time training, waiting for data
};

}  // namespace mnist
