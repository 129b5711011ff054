#include "apps/ember_tune/runner.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "apps/mnist_train/options.h"
#include "core/error.h"

namespace ember::tune {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// The metrics mnist_train's --log records carry (apps/mnist_train/trainer.cpp, Logs::epoch and Logs::summary). Listed
// here so a study with an objective it never reports stops before any trial.
const char* const kEpochMetrics[] = {"val_accuracy", "test_accuracy", "train_accuracy",
                                     "train_loss",   "seconds",       "samples_per_s"};
const char* const kSummaryMetrics[] = {"best_test_accuracy", "train_seconds", "total_seconds"};

std::atomic<int> g_stop{0};
void on_signal(int sig) { g_stop.store(sig); }

std::string flag_of(const std::string& name) {
  std::string f = "--" + name;
  std::replace(f.begin(), f.end(), '_', '-');
  return f;
}

std::string last_line_of(const std::string& text) {
  std::istringstream in(text);
  std::string line, last;
  while (std::getline(in, line))
    if (line.find_first_not_of(" \t\r") != std::string::npos) last = line;
  if (last.size() > 240) last = last.substr(0, 240) + "...";
  return last;
}

std::string last_line(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return last_line_of(ss.str());
}

// Flags of mnist_train that ember_tune gives every trial itself, and flags that make it do something other than train
// (a trial would report nothing).
const char* const kOwnFlags[] = {"--seed", "--log", "--tensorboard", "--quiet"};
const char* const kNoTrainingFlags[] = {"-h", "--help", "--check-options", "--ablation", "--eval-only"};
// mnist_train's flags whose value is a path (apps/mnist_train/options.cpp; its --help does not say which take one).
// --log and --tensorboard are ember_tune's own.
const char* const kPathFlags[] = {"--data", "--save", "--resume", "--eval-only", "--plot", "--profile"};

// "--lr=3" -> "--lr", "--lr" -> "--lr", "-h" -> "-h"; "" for what is not a flag (a value, or a negative number).
std::string flag_name(const std::string& arg) {
  if (arg.size() > 2 && arg.rfind("--", 0) == 0) return arg.substr(0, arg.find('='));
  if (arg.size() == 2 && arg[0] == '-' && std::isalpha(static_cast<unsigned char>(arg[1]))) return arg;
  return "";
}

struct Captured {
  int status = -1;     // as waitpid() gives it
  std::string output;  // stdout and stderr
};

// Runs a program (no shell: arguments are passed as they are) and returns its exit status and its output.
Captured run_capture(const std::string& program, const std::vector<std::string>& args) {
  std::vector<std::string> argv_s{program};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  int fds[2];
  EMBER_CHECK(::pipe2(fds, O_CLOEXEC) == 0, "pipe failed: ", std::strerror(errno));
  const pid_t pid = fork();
  if (pid < 0) {
    const int e = errno;
    ::close(fds[0]);
    ::close(fds[1]);
    EMBER_FAIL("fork failed: ", std::strerror(e));
  }
  if (pid == 0) {  // async-signal-safe calls only until exec
    const int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, 0);
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    execv(program.c_str(), argv.data());
    _exit(127);
  }
  ::close(fds[1]);
  Captured r;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    r.output.append(buf, static_cast<size_t>(n));
  }
  ::close(fds[0]);
  while (waitpid(pid, &r.status, 0) < 0 && errno == EINTR) {
  }
  return r;
}

// What mnist_train said when it refused a command line: its one error line without "mnist_train: error: " and
// " (see --help)".
std::string refusal(const Captured& r) {
  std::string line = last_line_of(r.output);
  if (const size_t at = line.find(": error: "); at != std::string::npos) line = line.substr(at + 9);
  const std::string see = " (see --help)";
  if (line.size() > see.size() && line.compare(line.size() - see.size(), see.size(), see) == 0)
    line.resize(line.size() - see.size());
  if (line.empty()) line = WIFEXITED(r.status) ? str("exit code ", WEXITSTATUS(r.status)) : str("status ", r.status);
  return line;
}

// mnist_train's flags as its --help lists them (CLI11's layout: "  -h,--help   text", "  --lr FLOAT:POSITIVE=0.003
// text", "  --pin-memory,--no-pin-memory{false}"), each with whether it takes a value: a type word right after the
// names, one space away (the description is further off, or on the next line).
std::map<std::string, bool> help_flags(const std::string& help) {
  std::map<std::string, bool> flags;
  std::istringstream in(help);
  std::string line;
  while (std::getline(in, line)) {
    const size_t start = line.find_first_not_of(' ');
    if (start == std::string::npos || start == 0 || line[start] != '-') continue;
    const size_t end = line.find_first_of(" {", start);
    const std::string names = line.substr(start, end == std::string::npos ? std::string::npos : end - start);
    const bool takes_value =
        end != std::string::npos && line[end] == ' ' && end + 1 < line.size() && line[end + 1] != ' ';
    std::istringstream ns(names);
    std::string n;
    while (std::getline(ns, n, ','))
      if (!n.empty() && n[0] == '-') flags[n.substr(0, n.find('='))] = takes_value;
  }
  return flags;
}

std::string absolute_path(const std::string& p) {
  if (p.empty()) return p;
  return fs::absolute(fs::path(p)).lexically_normal().string();
}

struct Running {
  uint64_t number = 0;
  std::vector<double> u;
  pid_t pid = -1;
  std::string log_path, out_path;
  uint64_t log_offset = 0;
  std::string partial;
  std::vector<nlohmann::json> epochs;
  nlohmann::json summary;
  std::vector<double> curve;  // intermediate values, as losses
  int planned = 0;
  size_t judged = 0;  // epochs the pruner has judged
  bool pruned = false;
  double timed_out_after = 0;  // > 0: killed at the trial timeout of this many seconds
  Clock::time_point start;
};

// The per-epoch value the pruner watches: the objective when it is an epoch metric, else val_accuracy.
std::pair<std::string, bool> intermediate_metric(const Objective& obj, const StudyConfig& c) {
  if (obj.epoch_level && !obj.time_to) return {obj.metric, c.maximize};
  return {"val_accuracy", true};
}

void read_log(Running& t, const Objective& obj, const StudyConfig& c) {
  std::ifstream in(t.log_path, std::ios::binary);
  if (!in.good()) return;
  in.seekg(static_cast<std::streamoff>(t.log_offset));
  std::string chunk((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  t.log_offset += chunk.size();
  t.partial += chunk;
  size_t nl;
  const auto [metric, up] = intermediate_metric(obj, c);
  while ((nl = t.partial.find('\n')) != std::string::npos) {
    const std::string line = t.partial.substr(0, nl);
    t.partial.erase(0, nl + 1);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception&) {
      continue;  // not ours to judge: mnist_train's log is only read
    }
    const std::string type = j.value("type", "");
    if (type == "epoch") {
      t.epochs.push_back(j);
      // A metric the epoch does not have (null: val_accuracy without a validation split) is missing, not NaN: NaN
      // is a diverged run the pruner stops. Such a trial gets no curve and is never judged.
      if (!j.contains(metric) || j[metric].is_null()) continue;
      const double v = j[metric].is_number() ? j[metric].get<double>() : NAN;
      t.curve.push_back(up ? -v : v);
    } else if (type == "summary") {
      t.summary = j;
    }
  }
}

// The objective of a finished run, or an error saying why there is none.
std::optional<double> objective_value(const Running& t, const Objective& obj, std::string& error) {
  // mnist_train writes val_accuracy as null when it has no validation split (--val-split 0).
  const std::string unavailable = " is unavailable: the trial had no validation split (--val-split 0)";
  if (obj.time_to) {
    double s = 0;
    for (const auto& e : t.epochs) {
      if (!e.contains("val_accuracy") || !e["val_accuracy"].is_number()) {
        error = e.contains("val_accuracy") && e["val_accuracy"].is_null() ? "val_accuracy" + unavailable
                                                                          : "its log has no val_accuracy";
        return std::nullopt;
      }
      s += e.contains("seconds") && e["seconds"].is_number() ? e["seconds"].get<double>() : 0.0;
      if (e["val_accuracy"].get<double>() >= obj.target) return s;
    }
    error = str("never reached val_accuracy ", obj.target, "% in ", t.epochs.size(), " epochs");
    return std::nullopt;
  }
  const nlohmann::json* src = nullptr;
  if (obj.epoch_level && !t.epochs.empty()) src = &t.epochs.back();
  if (!obj.epoch_level && t.summary.is_object()) src = &t.summary;
  if (src && src->contains(obj.metric) && (*src)[obj.metric].is_null()) {
    error = obj.metric + (obj.metric == "val_accuracy" ? unavailable : " is unavailable (null in its log)");
    return std::nullopt;
  }
  if (!src || !src->contains(obj.metric) || !(*src)[obj.metric].is_number()) {
    error = str("its log has no ", obj.metric);
    return std::nullopt;
  }
  const double v = (*src)[obj.metric].get<double>();
  if (!std::isfinite(v)) {
    error = str(obj.metric, " is ", v);
    return std::nullopt;
  }
  return v;
}

pid_t spawn(const std::string& program, const std::vector<std::string>& args, const std::string& out_path) {
  std::vector<std::string> argv_s{program};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& s : argv_s) argv.push_back(s.data());
  argv.push_back(nullptr);
  const int out = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  EMBER_CHECK(out >= 0, "cannot create '", out_path, "': ", std::strerror(errno));
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    ::close(out);
    EMBER_FAIL("fork failed: ", std::strerror(errno));
  }
  if (pid == 0) {   // the child: async-signal-safe calls only until exec
    setpgid(0, 0);  // its own group: SIGTERM to -pid reaches its loader threads' children too
    prctl(PR_SET_PDEATHSIG,
          SIGTERM);  // ember_tune killed with SIGKILL: the trials stop
    if (getppid() != parent) _exit(125);
    const int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, 0);
    dup2(out, 1);
    dup2(out, 2);
    execv(program.c_str(), argv.data());
    const char msg[] = "ember_tune: exec of the trainer failed\n";
    [[maybe_unused]] ssize_t n = write(2, msg, sizeof msg - 1);
    _exit(127);
  }
  setpgid(pid, pid);
  ::close(out);
  return pid;
}

}  // namespace

Objective parse_objective(const std::string& spec) {
  Objective o;
  if (spec.rfind("time_to:", 0) == 0) {
    o.time_to = true;
    o.metric = spec;
    const std::string t = spec.substr(8);
    size_t used = 0;
    try {
      o.target = std::stod(t, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    EMBER_CHECK(used == t.size() && used > 0 && o.target > 0 && o.target <= 100, "--objective ", spec,
                ": expected time_to:ACC with ACC a validation accuracy in percent, in (0, 100]");
    return o;
  }
  o.metric = spec;
  for (const char* m : kEpochMetrics)
    if (spec == m) return o;
  o.epoch_level = false;
  for (const char* m : kSummaryMetrics)
    if (spec == m) return o;
  std::string known;
  for (const char* m : kEpochMetrics) known += std::string(known.empty() ? "" : ", ") + m;
  for (const char* m : kSummaryMetrics) known += std::string(", ") + m;
  EMBER_FAIL("--objective '", spec, "': mnist_train never reports it (it reports ", known, ", or use time_to:ACC)");
}

bool default_maximize(const Objective& o) {
  return !o.time_to && (o.metric.find("accuracy") != std::string::npos || o.metric == "samples_per_s");
}

void check_trainer(const std::string& mnist_train, const StudyConfig& config) {
  EMBER_CHECK(::access(mnist_train.c_str(), X_OK) == 0, "the trainer '", mnist_train,
              "' is not an executable file (--mnist-train PATH names it)");
  const std::vector<std::string>& args = config.train_args;
  for (const Param& prm : config.space.params) {
    const std::string f = flag_of(prm.name);
    for (const char* own : kOwnFlags)
      EMBER_CHECK(f != own, "parameter '", prm.name, "': ember_tune sets ", own, " for each trial itself",
                  f == "--seed" ? " (ember_tune's own --seed)" : "");
    for (const char* other : kNoTrainingFlags)
      EMBER_CHECK(f != other, "parameter '", prm.name, "': with ", f, " mnist_train does not train");
    for (const std::string& a : args)
      EMBER_CHECK(flag_name(a) != f, "parameter '", prm.name, "' is searched and also given after -- (", a,
                  "); leave one of them out");
  }
  for (const std::string& a : args) {
    const std::string f = flag_name(a);
    for (const char* own : kOwnFlags)
      EMBER_CHECK(f != own, "mnist_train argument ", a, ": ember_tune sets ", own, " for each trial itself");
    for (const char* other : kNoTrainingFlags)
      EMBER_CHECK(f != other, "mnist_train argument ", a, ": with it mnist_train does not train");
  }

  const Captured help = run_capture(mnist_train, {"--help"});
  EMBER_CHECK(WIFEXITED(help.status) && WEXITSTATUS(help.status) == 0, "'", mnist_train, " --help' failed (",
              refusal(help), ")");
  const std::map<std::string, bool> flags = help_flags(help.output);
  for (const Param& prm : config.space.params) {
    const std::string f = flag_of(prm.name);
    const auto it = flags.find(f);
    EMBER_CHECK(it != flags.end(), "parameter '", prm.name, "': mnist_train has no flag ", f,
                " (see mnist_train --help)");
    EMBER_CHECK(it->second, "parameter '", prm.name, "': ", f,
                " is a switch (it takes no value), so it cannot be searched");
  }
  // CLI11 takes whatever follows a flag as its value, so "--data --augment" would quietly train on a directory named
  // --augment: a flag that takes a value must have one.
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string f = flag_name(args[i]);
    if (f.empty()) continue;
    const auto it = flags.find(f);
    EMBER_CHECK(it != flags.end(), "mnist_train argument ", args[i], ": mnist_train has no flag ", f,
                " (see mnist_train --help)");
    if (!it->second || args[i].find('=') != std::string::npos) continue;
    EMBER_CHECK(i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0, "mnist_train argument ", f,
                " has no value (it takes one", i + 1 < args.size() ? ", and is followed by " + args[i + 1] : "", ")");
    ++i;
  }

  // The allowed values and ranges are mnist_train's parser's (apps/mnist_train/options.cpp): asked here with
  // --check-options, which parses a command line, runs every usage check and exits, rather than copied into a table
  // of ember_tune's. One place to keep them, and the answer is that of the very binary the trials will run
  // (--mnist-train may name another build). Checking a numeric range at both ends is enough: each of mnist_train's
  // ranges is an interval, and the values in between print (value_text) between the ends' texts.
  auto check_options = [&](const std::vector<std::string>& more) {
    // --check-options first: last, it could be taken as the value of a flag left without one.
    std::vector<std::string> a{"--check-options"};
    a.insert(a.end(), args.begin(), args.end());
    a.insert(a.end(), more.begin(), more.end());
    return run_capture(mnist_train, a);
  };
  const Captured base = check_options({});
  EMBER_CHECK(WIFEXITED(base.status) && WEXITSTATUS(base.status) == 0,
              "mnist_train refuses the arguments after --: ", refusal(base));
  for (size_t i = 0; i < config.space.params.size(); ++i) {
    const Param& prm = config.space.params[i];
    std::vector<std::string> values;
    if (prm.type == ParamType::categorical) {
      values = prm.choices;
    } else {
      for (double end : {prm.lo, prm.hi}) values.push_back(config.space.value_text(i, end));
    }
    for (const std::string& v : values) {
      const std::string f = flag_of(prm.name);
      const Captured r = check_options({f, v});
      EMBER_CHECK(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0, "parameter '", prm.name, "': mnist_train refuses ",
                  f, " ", v, prm.type == ParamType::categorical ? "" : " (an end of the range)", ": ", refusal(r));
    }
  }
}

void make_paths_absolute(StudyConfig& config) {
  auto is_path_flag = [](const std::string& f) {
    return std::any_of(std::begin(kPathFlags), std::end(kPathFlags), [&](const char* p) { return f == p; });
  };
  std::vector<std::string>& a = config.train_args;
  for (size_t i = 0; i < a.size(); ++i) {
    const std::string f = flag_name(a[i]);
    if (f.empty() || !is_path_flag(f)) continue;
    if (a[i].size() > f.size()) a[i] = f + "=" + absolute_path(a[i].substr(f.size() + 1));
    else if (i + 1 < a.size() && a[i + 1].rfind("--", 0) != 0) a[i + 1] = absolute_path(a[i + 1]);
  }
  for (Param& p : config.space.params)
    if (p.type == ParamType::categorical && is_path_flag(flag_of(p.name)))
      for (std::string& c : p.choices) c = absolute_path(c);
}

std::optional<double> default_trial_timeout(const std::vector<TrialRecord>& trials) {
  std::vector<double> d;
  for (const TrialRecord& t : trials)
    if (t.state == "complete") d.push_back(t.duration_s);
  if (d.empty()) return std::nullopt;
  std::sort(d.begin(), d.end());
  const size_t n = d.size();
  const double median = n % 2 ? d[n / 2] : (d[n / 2 - 1] + d[n / 2]) / 2;
  // 10x: trials of one study differ in epochs, batch size and model by that much; 60 s: short trials are noisy.
  return std::max(10 * median, 60.0);
}

std::vector<std::string> trial_args(const StudyConfig& config, const std::vector<double>& u) {
  std::vector<std::string> a = config.train_args;
  const std::vector<double> v = config.space.decode(u);
  for (size_t i = 0; i < v.size(); ++i) {
    a.push_back(flag_of(config.space.params[i].name));
    a.push_back(config.space.value_text(i, v[i]));
  }
  a.push_back("--seed");
  a.push_back(std::to_string(config.sampler.seed));
  return a;
}

int planned_epochs(const StudyConfig& config, const std::vector<double>& u) {
  const std::vector<double> v = config.space.decode(u);
  for (size_t i = 0; i < v.size(); ++i)
    if (flag_of(config.space.params[i].name) == "--epochs") return static_cast<int>(v[i]);
  int epochs = mnist::Options{}.epochs;
  for (size_t i = 0; i + 1 < config.train_args.size(); ++i)
    if (config.train_args[i] == "--epochs") epochs = std::atoi(config.train_args[i + 1].c_str());
  for (const std::string& a : config.train_args)
    if (a.rfind("--epochs=", 0) == 0) epochs = std::atoi(a.c_str() + 9);
  return std::max(epochs, 1);
}

std::vector<Observation> observations(const StudyFile& study) {
  std::vector<Observation> obs;
  for (const TrialRecord& t : study.trials()) {
    Observation o{t.u, 0, true};
    if (t.value) {
      o.loss = as_loss(study.config(), *t.value);
      o.failed = false;
    }
    obs.push_back(o);
  }
  return obs;
}

namespace {

// The trial numbers a session runs: the gaps first (trials that were running when an earlier session stopped), then
// new ones after the highest recorded.
class TrialNumbers {
 public:
  explicit TrialNumbers(const std::vector<TrialRecord>& trials) {
    std::set<uint64_t> recorded;
    for (const TrialRecord& t : trials) recorded.insert(t.number);
    next_new_ = recorded.empty() ? 0 : *recorded.rbegin() + 1;
    for (uint64_t n = 0; n < next_new_; ++n)
      if (!recorded.count(n)) gaps_.push_back(n);
  }
  uint64_t next() { return gaps_used_ < gaps_.size() ? gaps_[gaps_used_++] : next_new_++; }

 private:
  std::vector<uint64_t> gaps_;
  size_t gaps_used_ = 0;
  uint64_t next_new_ = 0;
};

// The study's wall time, summed over resumed sessions: the earlier sessions' (the largest elapsed_s recorded) plus
// this one's.
struct StudyClock {
  double offset_s = 0;
  Clock::time_point session = Clock::now();

  explicit StudyClock(const std::vector<TrialRecord>& trials) {
    for (const TrialRecord& t : trials) offset_s = std::max(offset_s, t.elapsed_s);
  }
  double elapsed_s() const { return offset_s + std::chrono::duration<double>(Clock::now() - session).count(); }
};

// The SIGINT and SIGTERM handlers that catch_stop_signals() replaced.
struct OldHandlers {
  struct sigaction on_int {};
  struct sigaction on_term {};
};

// SIGINT and SIGTERM set g_stop, which ends run_study's loop.
OldHandlers catch_stop_signals() {
  struct sigaction sa {};
  OldHandlers old;
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &old.on_int);
  sigaction(SIGTERM, &sa, &old.on_term);
  g_stop = 0;
  return old;
}

void restore_stop_signals(const OldHandlers& old) {
  sigaction(SIGINT, &old.on_int, nullptr);
  sigaction(SIGTERM, &old.on_term, nullptr);
}

// Starts trial `number` at the sampler's point for it (the running trials' points are pending).
Running start_trial(const StudyFile& study, const RunOptions& ro, uint64_t number,
                    const std::vector<Running>& running) {
  const StudyConfig& c = study.config();
  Running t;
  t.number = number;
  std::vector<std::vector<double>> pending;
  for (const Running& r : running) pending.push_back(r.u);
  t.u = suggest(c.space, c.sampler, t.number, observations(study), pending);
  t.log_path = ro.out_dir + "/trial-" + std::to_string(t.number) + ".jsonl";
  t.out_path = ro.out_dir + "/trial-" + std::to_string(t.number) + ".out";
  std::error_code ec;
  fs::remove(t.log_path, ec);  // a rerun after a kill: mnist_train appends to --log
  std::vector<std::string> args = trial_args(c, t.u);
  args.insert(args.end(), {"--log", t.log_path, "--quiet"});
  if (!ro.tensorboard.empty())
    args.insert(args.end(), {"--tensorboard", ro.tensorboard + "/trial-" + std::to_string(t.number)});
  t.planned = planned_epochs(c, t.u);
  t.start = Clock::now();
  t.pid = spawn(ro.mnist_train, args, t.out_path);
  return t;
}

// Kills a trial that has run past `limit` seconds. SIGKILL to the whole group: a trial past its time may be stuck
// where SIGTERM is not acted on, and what it started (loader processes, a wrapper script's children) goes with it.
void enforce_timeout(Running& t, const std::optional<double>& limit) {
  if (limit && t.timed_out_after == 0 && std::chrono::duration<double>(Clock::now() - t.start).count() > *limit) {
    t.timed_out_after = *limit;
    kill(-t.pid, SIGKILL);
  }
}

// Shows the pruner a trial's new epochs, against the recorded trials' curves and the other running ones', and stops
// the trial when it says so.
void judge(Running& t, const std::vector<Running>& running, const StudyFile& study, const PrunerOptions& pruner,
           const Objective& obj) {
  if (t.pruned || pruner.kind == PrunerKind::none || t.curve.size() <= t.judged) return;
  t.judged = t.curve.size();
  const StudyConfig& c = study.config();
  std::vector<std::vector<double>> others;
  for (const TrialRecord& r : study.trials()) {
    std::vector<double> cv;
    for (double v : r.intermediate) cv.push_back(intermediate_metric(obj, c).second ? -v : v);
    others.push_back(cv);
  }
  for (const Running& r : running)
    if (&r != &t) others.push_back(r.curve);
  // Each epoch is judged once, when it arrives (two epochs within one 50 ms poll: the newer one only).
  if (should_prune(pruner, t.curve, t.planned, others)) {
    t.pruned = true;
    kill(-t.pid, SIGTERM);
  }
}

// How a trial that exited with `status` (as waitpid() gives it) ended: its state, and its value or why it failed.
void set_outcome(TrialRecord& rec, const Running& t, int status, const Objective& obj) {
  std::string why;
  const std::string status_text = t.summary.is_object() ? t.summary.value("status", "") : "";
  if (t.timed_out_after > 0) {
    rec.state = "failed";
    rec.error = str("timed out after ", t.timed_out_after, " s");
  } else if (t.pruned) {
    rec.state = "pruned";
    if (!rec.intermediate.empty() && std::isfinite(rec.intermediate.back()) && obj.epoch_level && !obj.time_to)
      rec.value = rec.intermediate.back();
  } else if (WIFSIGNALED(status)) {
    rec.state = "failed";
    rec.error = str("killed by signal ", WTERMSIG(status), " (", strsignal(WTERMSIG(status)), ")");
  } else if (status_text == "diverged") {
    rec.state = "failed";
    rec.error = "diverged (non-finite loss): " + last_line(t.out_path);
  } else if (WEXITSTATUS(status) != 0) {
    rec.state = "failed";
    rec.error = str("exit code ", WEXITSTATUS(status), ": ", last_line(t.out_path));
  } else if (auto v = objective_value(t, obj, why)) {
    rec.state = "complete";
    rec.value = v;
  } else {
    rec.state = "failed";
    rec.error = why;
  }
}

// The record of a trial that has exited with `status`.
TrialRecord record_of(const Running& t, int status, const Objective& obj, const StudyConfig& c,
                      const StudyClock& clock) {
  TrialRecord rec;
  rec.number = t.number;
  rec.u = t.u;
  rec.params = c.space.values_json(t.u);
  const bool up = intermediate_metric(obj, c).second;
  for (double v : t.curve) rec.intermediate.push_back(up ? -v : v);
  rec.epochs_run = static_cast<int>(t.epochs.size());
  rec.epochs_planned = t.planned;
  rec.seed = c.sampler.seed;
  rec.duration_s = std::chrono::duration<double>(Clock::now() - t.start).count();
  rec.elapsed_s = clock.elapsed_s();
  set_outcome(rec, t, status, obj);
  return rec;
}

// The line per finished trial (without --quiet).
void print_trial(const StudyConfig& c, const TrialRecord& rec) {
  std::string params;
  const std::vector<double> v = c.space.decode(rec.u);
  for (size_t k = 0; k < v.size(); ++k)
    params += (params.empty() ? "" : " ") + c.space.params[k].name + "=" + c.space.value_text(k, v[k]);
  std::printf("trial %3llu %-8s %s %-10s %5.1f s  %s%s%s\n", static_cast<unsigned long long>(rec.number),
              rec.state.c_str(), c.objective.c_str(), rec.value ? str(*rec.value).c_str() : "-", rec.duration_s,
              params.c_str(), rec.error.empty() ? "" : "  ", rec.error.c_str());
  std::fflush(stdout);
}

// Stops the trials still running when the study is stopped. mnist_train stops at the end of its step on SIGTERM; one
// stuck where it does not act on it is not waited for forever.
void stop_trials(std::vector<Running>& running) {
  for (Running& t : running) kill(-t.pid, SIGTERM);
  const Clock::time_point grace = Clock::now() + std::chrono::seconds(10);
  for (Running& t : running) {
    int status = 0;
    while (waitpid(t.pid, &status, WNOHANG) == 0) {
      if (Clock::now() > grace) {
        kill(-t.pid, SIGKILL);
        waitpid(t.pid, &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
}

}  // namespace

int run_study(StudyFile& study, const RunOptions& ro) {
  const StudyConfig& c = study.config();
  const Objective obj = parse_objective(c.objective);
  fs::create_directories(ro.out_dir);
  if (!ro.tensorboard.empty()) fs::create_directories(ro.tensorboard);
  TrialNumbers numbers(study.trials());
  const StudyClock clock(study.trials());
  const OldHandlers old_handlers = catch_stop_signals();

  std::vector<Running> running;
  auto recorded_count = [&]() { return static_cast<int>(study.trials().size()); };
  // The timeout in force, derived again as trials complete (a trial started before the first completion gets one
  // then too).
  std::optional<double> timeout;
  size_t timeout_for = static_cast<size_t>(-1);
  auto current_timeout = [&]() -> std::optional<double> {
    if (ro.trial_timeout > 0) return ro.trial_timeout;
    if (ro.trial_timeout == 0) return std::nullopt;
    if (timeout_for != study.trials().size()) {
      timeout_for = study.trials().size();
      timeout = default_trial_timeout(study.trials());
    }
    return timeout;
  };

  while (g_stop == 0 && (recorded_count() + static_cast<int>(running.size()) < ro.n_trials || !running.empty())) {
    while (g_stop == 0 && static_cast<int>(running.size()) < ro.parallel &&
           recorded_count() + static_cast<int>(running.size()) < ro.n_trials)
      running.push_back(start_trial(study, ro, numbers.next(), running));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const std::optional<double> limit = current_timeout();
    for (size_t i = 0; i < running.size();) {
      Running& t = running[i];
      enforce_timeout(t, limit);
      read_log(t, obj, c);
      judge(t, running, study, ro.pruner, obj);
      int status = 0;
      const pid_t w = waitpid(t.pid, &status, WNOHANG);
      if (w != t.pid) {
        ++i;
        continue;
      }
      read_log(t, obj, c);
      const TrialRecord rec = record_of(t, status, obj, c, clock);
      study.append(rec);
      if (!ro.quiet) print_trial(c, rec);
      running.erase(running.begin() + static_cast<std::ptrdiff_t>(i));
    }
  }
  const int stopped = g_stop.load();
  stop_trials(running);
  restore_stop_signals(old_handlers);
  return stopped;
}

}  // namespace ember::tune
