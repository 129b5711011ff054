// The training loop of mnist_train: Trainer::run reads top to bottom (plan, resume, per epoch the
// steps, then evaluation, the epoch's record and checkpoint); the parts it is made of live beside
// it: the graphed step, K steps per launch and evaluation (graphed_step.h, multi_step.h,
// graphed_eval.h), the divergence guard (nonfinite_guard.h), the
// step timer (step_timer.h), the records (run_logs.h), the profile window (profile_window.h), the side outputs and stop
// signals (outputs.h, stop_signals.h).
//
// Note [no host syncs in the step]: the loss and the number of correct predictions accumulate in
// device tensors; the host reads them once per log interval (one sync), never per step, unless
// --sync-every-step asks for the naive loop. They and the divergence guard's counters take one
// launch a step (the train_stats op: as separate ops they took 19, a launch-bound step's largest
// share). The GPU's idle time between steps is measured with
// CUDA events around each step and read at the same interval.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "amp/grad_scaler.h"
#include "apps/mnist_train/graphed_eval.h"
#include "apps/mnist_train/graphed_step.h"
#include "apps/mnist_train/multi_step.h"
#include "apps/mnist_train/nonfinite_guard.h"
#include "apps/mnist_train/options.h"
#include "apps/mnist_train/outputs.h"
#include "apps/mnist_train/profile_window.h"
#include "apps/mnist_train/run_agreement.h"
#include "apps/mnist_train/run_logs.h"
#include "apps/mnist_train/run_result.h"
#include "apps/mnist_train/splits.h"
#include "apps/mnist_train/step_timer.h"
#include "apps/mnist_train/stop_signals.h"
#include "ckpt/run_record.h"
#include "ckpt/training_checkpoint.h"
#include "data/data.h"
#include "dist/ddp.h"
#include "nn/nn.h"
#include "optim/optim.h"

namespace mnist {

class Trainer {
 public:
  Trainer(const Options& options, ember::Device device, const Splits& splits);
  ~Trainer();

  RunResult run();
  EvalResult evaluate(const std::shared_ptr<ember::data::InMemoryDataset>& ds);
  // Loads the model part of a training checkpoint (for --eval-only).
  void load_model(const std::string& path);
  ember::nn::Module& model() { return *learner_.model; }

 private:
  // What learns: the model, the optimizer over its parameters, the schedule, fp16's loss scaler.
  struct Learner {
    std::shared_ptr<ember::nn::Module> model;
    std::vector<ember::Tensor> params;
    std::unique_ptr<ember::optim::Optimizer> opt;
    std::unique_ptr<ember::optim::LRScheduler> sched;
    std::unique_ptr<ember::amp::GradScaler> scaler;
    ember::Tensor loss_grad;  // f32 1 / grad_accum: the loss's backward starts from it (times the scale)
  };
  // --distributed: the default group and DDP around the model.
  struct DataParallel {
    ember::dist::ProcessGroupPtr pg;
    std::unique_ptr<ember::dist::DistributedDataParallel> ddp;
    bool stop_agreed = false;  // some rank got SIGINT/SIGTERM (Note [stopping on a signal])
    double world() const { return pg ? static_cast<double>(pg->size()) : 1.0; }
  };
  // The inputs: their normalisation (the training split's, or --eval-only's checkpoint's) and the
  // --device-resident copies of the splits (uploaded once, as uint8).
  struct Inputs {
    std::vector<double> mean, std;
    std::shared_ptr<ember::data::InMemoryDataset> train, val, test;
  };
  // One log interval (Note [no host syncs in the step]): the device sums, the host counts.
  struct Interval {
    ember::Tensor loss_sum, correct;
    int64_t samples = 0, steps = 0;
    double start = 0;  // now_s() when it began
  };
  // Where the run is, as laid out by plan_run (recorded in checkpoints, compared on --resume).
  struct Progress {
    int64_t global_step = 0;  // optimizer steps of the run, a resumed one's included
    int64_t steps_here = 0;   // optimizer steps this process made
    int start_epoch = 0;
    int64_t micro = 0;  // micro-batches since the last optimizer step
    int64_t micro_per_epoch = 0, steps_per_epoch = 0, total_steps = 0;
    double run_start = 0, train_total = 0, wait_total = 0;  // now_s() at the start; time training, waiting for data
    // Note [the timing rule] (run_result.h): now_s() at the warm-up's end and at the last
    // evaluation's end, and the samples trained by the warm-up's end (-1 / 0: not yet)
    double warmup_end = -1, last_eval_end = -1;
    int64_t warmup_samples = 0;
    bool save_failed = false;
  };
  // One epoch's steps.
  struct EpochStats {
    int64_t micro = 0, samples = 0;  // micro-batches and samples trained
    double loss = 0, correct = 0;    // sums over the log intervals
    double start = 0, wait_before = 0;
    bool max_steps_reached = false;
  };

  // construction
  void build_learner();
  void use_kernel_cache();
  void build_optimizer();
  void build_scheduler(int64_t total_steps);
  std::vector<RunField> run_fields() const;
  std::unique_ptr<ember::data::DataLoader> make_loader(std::shared_ptr<ember::data::InMemoryDataset> ds, bool train);
  // evaluation: one batch counted into the confusion table; one pass over a resident split
  static constexpr int64_t kEvalBatch = 1000;
  ember::Tensor count_batch(const ember::Tensor& counts, const ember::Tensor& images, const ember::Tensor& labels);
  ember::Tensor resident_pass(const ember::data::InMemoryDataset& ds);
  // the step; eager steps on the GPU take the schedule's values this many steps at a time
  static constexpr int64_t kScheduleRowsAhead = 64;
  void train_step(const ember::data::Batch& b, bool do_step, RunResult& r);
  void eager_step(const ember::Tensor& x, const ember::Tensor& y, bool do_step);
  void optimizer_step();
  GraphedStep::Hooks graph_hooks();
  // the run, in the order run() calls the pieces
  void upload_device_resident(RunResult& r);
  void plan_run(int64_t micro_per_epoch);
  void resume_from_checkpoint();
  void note_graph_limits(RunResult& r) const;
  EpochStats train_epoch(ember::data::DataLoader& loader, int epoch, RunResult& r);
  bool count_steps(int64_t micro, int64_t samples, int epoch, EpochStats& e, RunResult& r, bool stepped = true);
  void end_warmup(int64_t samples, RunResult& r);
  void warm_evaluation_shapes();
  int64_t multi_step_size(const EpochStats& e) const;
  bool stage_batches(int64_t k, ember::data::DataLoader& loader);
  void run_multi_step(int64_t k, const ember::data::DataLoader& loader);
  // Reads the device sums (the one host sync of an interval), logs, resets them; returns the
  // interval's (loss sum, correct count).
  std::pair<double, double> log_interval(RunResult& r, int epoch, int64_t step_in_epoch);
  bool end_epoch(const EpochStats& e, int epoch, ember::data::DataLoader& loader, RunResult& r);
  bool save_epoch(const EpochStats& e, int epoch, RunResult& r);
  void finish_run(RunResult& r);
  // checkpoints
  void save_checkpoint(int epoch, int64_t step);
  // The first model state entry holding NaN or inf ("" if none): no checkpoint is saved of it.
  std::string nonfinite_weight() const;
  // The run's settings recorded in checkpoints and compared on --resume (ckpt/run_record.h).
  ember::RunRecord run_record() const;
  void add_training_settings(ember::RunRecord& rec) const;
  void add_data_settings(ember::RunRecord& rec) const;
  void check_resume_progress(const ember::Metadata& saved, const ember::TrainingProgress& p) const;
  bool stop_requested() const;
  // The optimizer's actual learning rate (what the epoch lines print).
  double current_lr() const;

  const Options& o_;
  ember::Device device_;
  const Splits& splits_;
  Inputs inputs_;
  Learner learner_;
  DataParallel dp_;
  GraphedStep graph_;
  GraphedEval eval_graphs_;
  std::unique_ptr<MultiStepGraphs> multi_;  // --graph: K steps per launch
  // What K-step graphs read (stage_batches): dataset indices (device-resident data), else batches.
  struct Staged {
    ember::Tensor indices, images, labels;
  } staged_;
  bool hyper_rows_made_ = false;
  // Eager steps on the GPU read the schedule's values from rows staged ahead (Note [hyperparameter
  // rows ahead] in optim/schedule_ahead.h); null on the CPU, with --graph or without a schedule.
  std::unique_ptr<ember::optim::ScheduleAhead> ahead_;
  NonFiniteGuard guard_;
  StepTimer timer_;
  Interval interval_;
  Progress progress_;
  std::unique_ptr<RunLogs> logs_;
  std::unique_ptr<ProfileWindow> profile_;
  std::vector<std::string> notes_;  // from construction, for the run's summary
};

}  // namespace mnist
