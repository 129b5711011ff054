// Running a study: trials are mnist_train child processes, --parallel K at a time, each writing its --log JSONL (the
// interface: epoch records as they finish, a summary at the end), which the runner reads as it grows for the pruner.
// A trial that crashes, diverges, cannot start or never reports the objective is recorded as failed; the study goes
// on.
#pragma once

#include <string>
#include <vector>

#include "apps/ember_tune/pruner.h"
#include "apps/ember_tune/study.h"

namespace ember::tune {

// The objective: a metric from mnist_train's --log records (apps/mnist_train/trainer.cpp writes them: the last epoch
// record's value, else the summary's), or time_to:ACC, the training seconds until val_accuracy first reaches ACC
// percent (summed epoch times).
struct Objective {
  std::string metric;
  bool time_to = false;
  double target = 0;
  bool epoch_level = true;  // read from the epoch records (else from the summary)
};
Objective parse_objective(const std::string& spec);  // throws ember::Error: never reported, bad target
bool default_maximize(const Objective& o);           // accuracies and throughput up, losses and times down

struct RunOptions {
  std::string mnist_train;  // the program
  std::string out_dir;      // trial-N.jsonl (its --log) and trial-N.out (its stdout and stderr)
  std::string tensorboard;  // when set, each trial writes TensorBoard events into DIR/trial-N
  int parallel = 1;
  int n_trials = 20;  // the study's size in recorded trials (a resumed study counts what it has)
  PrunerOptions pruner;
  bool quiet = false;
};

// Checks what can be checked before any trial starts: the program runs, and every parameter names one of its flags
// (from its --help). Throws ember::Error naming the problem.
void check_trainer(const std::string& mnist_train, const StudyConfig& config);

// mnist_train's arguments for a trial (without the program name and the --log/--tensorboard paths): the study's
// train_args, then --flag value per parameter, then --seed.
std::vector<std::string> trial_args(const StudyConfig& config, const std::vector<double>& u);
// Epochs the trial will run: its epochs parameter, else --epochs in train_args, else mnist_train's default.
int planned_epochs(const StudyConfig& config, const std::vector<double>& u);

// Runs trials until the study holds n_trials records; records each as it ends. Returns 0, or the
// signal (SIGINT/SIGTERM) that stopped it: the running trials are then stopped and not recorded,
// and a resume runs them again.
int run_study(StudyFile& study, const RunOptions& ro);

// The orientation samplers and pruners work in (lower is better).
inline double as_loss(const StudyConfig& c, double value) {
  return c.maximize ? -value : value;
}
std::vector<Observation> observations(const StudyFile& study);

}  // namespace ember::tune
