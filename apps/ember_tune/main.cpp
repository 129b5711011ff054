// ember_tune: Bayesian hyper-parameter search for mnist_train (docs/tune.md).
//
//   ember_tune --study s.jsonl --param lr=log:1e-4:1e-1 --param batch-size=cat:32,64,128
//              --trials 20 -- --epochs 3
//   ember_tune --resume s.jsonl                # after a kill: the finished trials are kept, on to the planned 20
//   ember_tune --benchmark                     # the samplers on Branin, Hartmann-6, noisy Branin
//
// Exit codes: 0 done, 1 a run-time error (the study or its trial directory in use by another ember_tune, every trial
// failed, ...), 2 bad input (one line on stderr, no trial started, the study file untouched), 128+signal when stopped
// by SIGINT/SIGTERM (resume continues it).
#include <signal.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>

#include "apps/cli_checks.h"
#include "apps/ember_tune/benchmark.h"
#include "apps/ember_tune/report.h"
#include "apps/ember_tune/runner.h"
#include "apps/ember_tune/study.h"
#include "core/error.h"
#include "io/file_lock.h"

namespace {

namespace fs = std::filesystem;
using namespace ember::tune;
namespace io = ember::io;

struct Cli {
  std::vector<std::string> params;
  std::string space_file, objective = "val_accuracy", direction = "auto", sampler = "gp", study, resume;
  std::string pruner = "none", mnist_train, out_dir, tensorboard, plot;
  int trials = 20, parallel = 1, n_init = 0, warmup = 1, eta = 3, min_epochs = 1;
  double trial_timeout = -1;
  uint64_t seed = 0;
  bool quiet = false, benchmark = false;
  std::string bench_functions = "branin,hartmann6,noisy-branin", bench_samplers = "gp,tpe,random", bench_svg;
  int bench_seeds = 20, bench_evals = 50;
  std::vector<std::string> train_args;
};

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  std::string cur;
  for (char ch : s) {
    if (ch == ',') {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += ch;
    }
  }
  out.push_back(cur);
  return out;
}

std::string self_dir() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string(".") : exe.parent_path().string();
}

int benchmark(const Cli& c) {
  std::vector<SamplerKind> kinds;
  for (const std::string& s : split_commas(c.bench_samplers)) kinds.push_back(parse_sampler(s));
  const std::vector<BenchmarkResult> r =
      run_benchmark(split_commas(c.bench_functions), kinds, c.bench_seeds, c.bench_evals);
  std::printf("%s", benchmark_table(r, c.bench_evals).c_str());
  if (!c.bench_svg.empty()) write_benchmark_svg(c.bench_svg, r);
  return 0;
}

// The study's flags: what is searched, how, and in which file.
void add_study_options(CLI::App& app, Cli& c) {
  app.add_option("--param", c.params,
                 "a parameter: NAME=log:LO:HI, NAME=float:LO:HI, NAME=int:LO:HI or NAME=cat:A,B,C (NAME is "
                 "mnist_train's flag without --); repeatable")
      ->group("Study");
  app.add_option("--space", c.space_file, "the parameters from a JSON file (docs/tune.md)")->group("Study");
  app.add_option("--objective", c.objective,
                 "a metric mnist_train logs (val_accuracy, test_accuracy, train_loss, best_test_accuracy, "
                 "total_seconds, ...) or time_to:ACC")
      ->group("Study");
  app.add_option("--direction", c.direction, "max, min, or auto (max for accuracies, min for losses and times)")
      ->check(CLI::IsMember({"auto", "max", "min"}))
      ->group("Study");
  app.add_option("--sampler", c.sampler, "gp (GP-EI), tpe or random")
      ->check(CLI::IsMember({"gp", "tpe", "random"}))
      ->group("Study");
  app.add_option("--trials", c.trials,
                 "trials the study should hold (failed and pruned ones count); stored in the study, so --resume "
                 "without it continues to the stored count")
      ->check(CLI::Range(1, kMaxTrials))
      ->group("Study");
  app.add_option("--parallel", c.parallel, "trials running at once")->check(CLI::Range(1, 256))->group("Study");
  app.add_option("--init", c.n_init, "Latin-hypercube trials before the model (0: 2 x parameters + 2, at least 5)")
      ->check(CLI::Range(0, 100000))
      ->group("Study");
  app.add_option("--seed", c.seed, "seed of the sampler and of every trial's mnist_train --seed")
      ->check(ember::cli::kSeed)
      ->group("Study");
  app.add_option("--study", c.study, "a new study file (JSONL, append-only)")->group("Study");
  app.add_option("--resume", c.resume, "continue this study file (its space, objective and sampler)")->group("Study");
}

// The flags of pruning, of the trials' processes, of the output and of --benchmark.
void add_run_options(CLI::App& app, Cli& c) {
  app.add_option("--pruner", c.pruner, "none, median or asha")
      ->check(CLI::IsMember({"none", "median", "asha"}))
      ->group("Pruning");
  app.add_option("--prune-warmup", c.warmup, "median: epochs before a trial can be pruned")
      ->check(CLI::Range(0, 1000))
      ->group("Pruning");
  app.add_option("--asha-eta", c.eta, "asha: keep the best 1/eta at each rung")
      ->check(CLI::Range(2, 100))
      ->group("Pruning");
  app.add_option("--asha-min-epochs", c.min_epochs, "asha: epochs of the first rung")
      ->check(CLI::Range(1, 1000))
      ->group("Pruning");
  app.add_option("--mnist-train", c.mnist_train, "the trainer (default: mnist_train beside ember_tune)")
      ->group("Trials");
  app.add_option("--out-dir", c.out_dir, "each trial's log and output (default: the study file's name + .d)")
      ->group("Trials");
  app.add_option("--tensorboard", c.tensorboard, "TensorBoard events of trial N into DIR/trial-N")->group("Trials");
  app.add_option("--trial-timeout", c.trial_timeout,
                 "seconds a trial may run before its process group is killed and it is recorded as failed (0: "
                 "never; default: 10 x the median completed trial's duration, at least 60 s, none before a trial "
                 "completed)")
      ->check(ember::cli::kFinite)
      ->check(CLI::NonNegativeNumber)
      ->default_str("derived")
      ->group("Trials");
  app.add_option("--plot", c.plot, "write PREFIX-history.svg and PREFIX-slices.svg (default: the study file's name)")
      ->group("Output");
  app.add_flag("--quiet", c.quiet, "no line per trial")->group("Output");
  app.add_flag("--benchmark", c.benchmark, "run the samplers on test functions and print the regret table")
      ->group("Benchmark");
  app.add_option("--bench-functions", c.bench_functions, "branin, hartmann6, noisy-branin")->group("Benchmark");
  app.add_option("--bench-samplers", c.bench_samplers, "samplers to compare")->group("Benchmark");
  app.add_option("--bench-seeds", c.bench_seeds, "seeds per sampler")->check(CLI::Range(1, 10000))->group("Benchmark");
  app.add_option("--bench-evals", c.bench_evals, "evaluations per run")
      ->check(CLI::Range(1, 100000))
      ->group("Benchmark");
  app.add_option("--bench-svg", c.bench_svg, "the median-regret plot")->group("Benchmark");
}

// Parses the command line into `c`; the exit code when the program ends here (--help 0, bad usage 2).
std::optional<int> parse_command_line(CLI::App& app, Cli& c, int argc, char** argv) {
  // Everything after the first "--" is mnist_train's, split off here: CLI11 would let a vector option just before
  // "--" end there and then reject what follows.
  int own = argc;
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--") {
      own = i;
      c.train_args.assign(argv + i + 1, argv + argc);
      break;
    }
  try {
    app.parse(own, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) {
      std::printf("%s", app.help().c_str());
      return 0;
    }
    std::fprintf(stderr, "ember_tune: error: %s (see --help)\n", e.what());
    return 2;
  }
  return std::nullopt;
}

// The study the flags describe (a resumed study's own may differ: check_resume_agrees).
StudyConfig config_of(const Cli& c) {
  StudyConfig cfg;
  if (!c.space_file.empty()) cfg.space = load_space_file(c.space_file);
  for (const std::string& spec : c.params) {
    const Param p = parse_param(spec);
    for (const Param& q : cfg.space.params) EMBER_CHECK(q.name != p.name, "parameter '", p.name, "' is given twice");
    cfg.space.params.push_back(p);
  }
  const Objective obj = parse_objective(c.objective);
  cfg.objective = c.objective;
  cfg.maximize = c.direction == "auto" ? default_maximize(obj) : c.direction == "max";
  cfg.sampler.kind = parse_sampler(c.sampler);
  cfg.sampler.seed = c.seed;
  cfg.sampler.n_init = c.n_init;
  cfg.pruner = c.pruner;
  cfg.train_args = c.train_args;

  // Paths in the arguments as absolute ones, before the resume comparison and before they are stored: the trials
  // of a study resumed elsewhere must read and write the same files.
  make_paths_absolute(cfg);
  return cfg;
}

// Flags given again to --resume must agree with the study's own; flags left out take its values.
void check_resume_agrees(const CLI::App& app, const Cli& c, const StudyConfig& cfg, const StudyConfig& have) {
  auto same = [&](const char* flag, bool given, bool equal) {
    EMBER_CHECK(!given || equal, "--resume ", c.resume, ": ", flag, " differs from the study's (",
                have.to_json().dump(), "); leave it out to continue the study as it was");
  };
  same("the search space", !cfg.space.params.empty(), cfg.space.to_json() == have.space.to_json());
  same("--objective", app.count("--objective") > 0, cfg.objective == have.objective);
  same("--direction", app.count("--direction") > 0 && c.direction != "auto", cfg.maximize == have.maximize);
  same("--sampler", app.count("--sampler") > 0, cfg.sampler.kind == have.sampler.kind);
  same("--seed", app.count("--seed") > 0, cfg.sampler.seed == have.sampler.seed);
  same("--init", app.count("--init") > 0, cfg.sampler.n_init == have.sampler.n_init);
  same("--pruner", app.count("--pruner") > 0, cfg.pruner == have.pruner);
  same("the mnist_train arguments", !cfg.train_args.empty(), cfg.train_args == have.train_args);
}

// What this ember_tune holds while its trials run. The study file and the trial directory each belong to one
// ember_tune at a time, for the whole session: two writers of one study would interleave trial numbers and records,
// two studies in one directory would overwrite each other's trial logs.
struct Session {
  std::string path;     // the study file
  std::string stem;     // its name without .jsonl: the default trial directory and plot prefix
  std::string out_dir;  // the trial directory
  std::optional<io::FileLock> study_lock, dir_lock;
  std::optional<io::IdentityLock> study_identity;  // a hard link is the same study under another name
  std::optional<StudyFile> study;
};

// Takes a lock. One that is taken is a run-time error (1), not bad input: `phase`, the exit code of an error, says so
// while it is taken.
template <class Lock>
void take_lock(std::optional<Lock>& l, const std::string& path, const std::string& what, int& phase) {
  const int before = phase;
  phase = 1;
  l.emplace(path, what, "ember_tune");
  phase = before;
}

// Opens the study of --resume, checked against the flags given again; the planned count is the study's unless
// --trials says otherwise (a version 1 file stored none).
void resume_study(Session& s, const CLI::App& app, Cli& c, const StudyConfig& cfg, int& phase) {
  take_lock(s.study_lock, study_lock_path(c.resume), "the study '" + c.resume + "'", phase);
  s.study = StudyFile::open(c.resume);
  take_lock(s.study_identity, c.resume, "the study '" + c.resume + "'", phase);
  const StudyConfig& have = s.study->config();
  check_resume_agrees(app, c, cfg, have);
  check_trainer(c.mnist_train, have);
  if (s.study->had_torn_line())
    std::fprintf(stderr,
                 "ember_tune: %s: the last record was cut short (a kill while writing); that trial runs again\n",
                 s.path.c_str());
  if (app.count("--trials") == 0 && s.study->planned_trials() > 0) c.trials = s.study->planned_trials();
}

// The study of --study (new) or --resume, locked with its trial directory. Errors until the trial directory is made
// are bad input (phase 2), after it run-time ones (1).
void open_session(Session& s, const CLI::App& app, Cli& c, const StudyConfig& cfg, int& phase) {
  s.path = c.resume.empty() ? c.study : c.resume;
  s.stem = s.path;
  if (s.stem.size() > 6 && s.stem.substr(s.stem.size() - 6) == ".jsonl") s.stem.resize(s.stem.size() - 6);
  s.out_dir = c.out_dir.empty() ? s.stem + ".d" : c.out_dir;
  auto canonical = [](const std::string& p) {  // "d/" and "./d" are d
    std::error_code ec;
    const fs::path c = fs::weakly_canonical(fs::absolute(p, ec), ec);
    return c.has_filename() ? c : c.parent_path();
  };
  EMBER_CHECK(canonical(s.out_dir) != canonical(s.path), "--out-dir ", s.out_dir,
              " is the study file itself; the trial directory needs a name of its own");
  if (!c.resume.empty()) {
    resume_study(s, app, c, cfg, phase);
  } else {
    EMBER_CHECK(!cfg.space.params.empty(), "no parameters to search: give --param NAME=TYPE:... or --space FILE");
    check_trainer(c.mnist_train, cfg);
    take_lock(s.study_lock, study_lock_path(c.study), "the study '" + c.study + "'", phase);
    StudyFile::check_new(c.study);
  }
  phase = 1;
  fs::create_directories(s.out_dir);
  take_lock(s.dir_lock, trial_dir_lock_path(s.out_dir), "the trial directory '" + s.out_dir + "'", phase);
  if (!s.study) {
    s.study = StudyFile::create(c.study, cfg, c.trials);
    take_lock(s.study_identity, c.study, "the study '" + c.study + "'", phase);
  } else if (s.study->planned_trials() != c.trials) s.study->plan(c.trials);
}

RunOptions run_options(const Cli& c, const Session& s) {
  RunOptions ro;
  ro.mnist_train = c.mnist_train;
  ro.out_dir = s.out_dir;
  ro.tensorboard = c.tensorboard;
  ro.trial_timeout = c.trial_timeout;
  ro.parallel = c.parallel;
  ro.n_trials = c.trials;
  ro.quiet = c.quiet;
  ro.pruner.kind = parse_pruner(s.study->config().pruner);
  ro.pruner.warmup = c.warmup;
  ro.pruner.eta = c.eta;
  ro.pruner.min_epochs = c.min_epochs;
  return ro;
}

// The trials table, the pruning summary, the best trial's command and the plots.
void print_results(const Cli& c, const Session& s) {
  const StudyFile& study = *s.study;
  std::printf("\n%s", trials_table(study).c_str());
  if (const std::string p = pruning_summary(study); !p.empty()) std::printf("%s\n", p.c_str());
  if (const std::string best = best_command(study, c.mnist_train); !best.empty())
    std::printf("best: %s\n", best.c_str());
  else std::printf("best: no trial completed\n");
  write_study_plots(study, c.plot.empty() ? s.stem : c.plot);
}

// The exit code of a session that ran its trials: 128 + the signal that stopped it, 1 when every trial failed, else 0.
int exit_code(const Session& s, int stopped_by) {
  if (stopped_by != 0) {
    std::fprintf(stderr, "ember_tune: stopped by %s; continue with: ember_tune --resume %s\n",
                 stopped_by == SIGINT ? "SIGINT" : "SIGTERM", s.path.c_str());
    return 128 + stopped_by;
  }
  // A study in which nothing worked is a failed run, not a result: most often every trial failed the same way
  // (a bad argument, missing data), and that reason is the one to show.
  const std::vector<TrialRecord>& all = s.study->trials();
  if (!all.empty() && std::all_of(all.begin(), all.end(), [](const TrialRecord& t) { return t.state == "failed"; })) {
    std::map<std::string, int> count;
    for (const TrialRecord& t : all) ++count[t.error];
    const auto common =
        std::max_element(count.begin(), count.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
    std::fprintf(stderr, "ember_tune: error: every trial of %s failed (%zu); the most common reason (%d of them): %s\n",
                 s.path.c_str(), all.size(), common->second, common->first.c_str());
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  ember::install_terminate_handler("ember_tune");  // Note [no abort] in core/error.h
  Cli c;
  CLI::App app{
      "ember_tune: Bayesian hyper-parameter search (GP-EI, TPE or random) for mnist_train, with pruning and resumable "
      "studies. Arguments after -- go to every trial's mnist_train.",
      "ember_tune"};
  app.option_defaults()->always_capture_default();
  app.get_formatter()->column_width(34);
  add_study_options(app, c);
  add_run_options(app, c);
  app.footer("Arguments after -- are mnist_train's, given to every trial before the searched parameters.");
  if (const std::optional<int> code = parse_command_line(app, c, argc, argv)) return *code;

  int phase = 2;  // errors before the first trial are bad input
  try {
    if (c.benchmark) {
      phase = 1;
      return benchmark(c);
    }
    EMBER_CHECK(c.study.empty() != c.resume.empty(),
                "name the study file: --study PATH for a new one, or --resume PATH");
    if (c.mnist_train.empty()) c.mnist_train = self_dir() + "/mnist_train";
    const StudyConfig cfg = config_of(c);
    Session s;
    open_session(s, app, c, cfg, phase);
    const int stopped_by = run_study(*s.study, run_options(c, s));
    print_results(c, s);
    return exit_code(s, stopped_by);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ember_tune: error: %s\n", ember::user_message(e.what()).c_str());
    return phase;
  }
}
