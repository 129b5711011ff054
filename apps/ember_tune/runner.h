// Running a study: trials are mnist_train child processes, --parallel K at a time, each writing its --log JSONL (the
// interface: epoch records as they finish, a summary at the end), which the runner reads as it grows for the pruner.
// A trial that crashes, diverges, cannot start, runs past the trial timeout or never reports the objective is recorded
// as failed with the reason; the study goes on.
#pragma once

#include <optional>
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
  // Seconds a trial may run before its process group is killed and it is recorded as failed: < 0 derives it from the
  // trials so far (default_trial_timeout), 0 never.
  double trial_timeout = -1;
  PrunerOptions pruner;
  bool quiet = false;
};

// Checks what can be checked before any trial starts, and throws ember::Error naming the parameter or argument: the
// program runs; no parameter or argument is a flag ember_tune sets itself (--seed, --log, --tensorboard, --quiet) or
// one that makes mnist_train not train (--help, --check-options, --ablation, --eval-only); no flag is both searched
// and given after --; every parameter names one of mnist_train's flags (its --help); and mnist_train's own parser
// accepts the arguments after -- and each parameter at both ends of its range and at every choice (mnist_train
// --check-options: unknown flags, flags without a value, values outside the allowed range).
void check_trainer(const std::string& mnist_train, const StudyConfig& config);

// Makes the paths among mnist_train's arguments absolute (the values of its path flags after --, and the choices of a
// categorical parameter that is one), so a study resumed from another working directory runs the same trials.
void make_paths_absolute(StudyConfig& config);

// The trial timeout when none is given: 10 x the median duration of the completed trials, at least 60 s; none (nullopt)
// before a trial has completed, since nothing says yet how long one takes.
std::optional<double> default_trial_timeout(const std::vector<TrialRecord>& trials);

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
inline double as_loss(const StudyConfig& c, double value) { return c.maximize ? -value : value; }
std::vector<Observation> observations(const StudyFile& study);

}  // namespace ember::tune
