// ember_tune (apps/ember_tune/): the sampler's pieces against known values (Matérn 5/2, the GP posterior, expected
// improvement, the Latin hypercube), GP-EI on Branin, the pruning rules on synthetic curves, the study file (resume,
// torn and corrupt records, records that make no sense, the lock), and the program end to end driving bin/mnist_train
// on a tiny budget: bad input (one error line, no trial, the study file unchanged), a failed trial recorded as failed,
// reproducible seeded studies, resume after a kill. The promises that need a trial to hang, fail on cue or run in
// seconds use a stand-in trainer, a shell script (stub_trainer).
#include <catch2/catch.hpp>

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "apps/ember_tune/benchmark.h"
#include "apps/ember_tune/gp.h"
#include "apps/ember_tune/pruner.h"
#include "apps/ember_tune/runner.h"
#include "apps/ember_tune/sampler.h"
#include "apps/ember_tune/space.h"
#include "apps/ember_tune/study.h"
#include "core/error.h"
#include "io/file_lock.h"

extern char** environ;

namespace {

namespace fs = std::filesystem;
using namespace ember::tune;
namespace io = ember::io;

const std::string kTune = EMBER_BINARY_DIR "/bin/ember_tune";
const std::string kTrainer = EMBER_BINARY_DIR "/bin/mnist_train";
const std::string kData = "/usr/share/datasets/fashion-mnist";

struct TempDir {
  fs::path path;
  TempDir() {
    char tmpl[] = "/tmp/ember_tune_test_XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_all(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

struct Run {
  int rc;
  std::string out, err;
};

// Runs a shell command line, capturing stdout and stderr into files of `dir`.
Run run(const TempDir& dir, const std::string& args) {
  const std::string out = dir / "stdout.txt", err = dir / "stderr.txt";
  const int status = std::system((args + " >" + out + " 2>" + err).c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), read_all(out), read_all(err)};
}

bool have_programs() {
  if (access(kTune.c_str(), X_OK) != 0 || access(kTrainer.c_str(), X_OK) != 0 || !fs::exists(kData)) {
    WARN("skipped: needs bin/ember_tune, bin/mnist_train and " << kData);
    return false;
  }
  return true;
}

// A few optimizer steps of the MLP on the CPU: a trial takes well under a second.
const std::string kTiny = " -- --epochs 2 --max-steps 30 --log-interval 10 --workers 0 --device cpu";

std::vector<nlohmann::json> trial_records(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    if (j["type"] == "trial") out.push_back(j);
  }
  return out;
}

Space two_floats() {
  Space s;
  s.params = {parse_param("a=float:0:1"), parse_param("b=log:1e-3:1")};
  return s;
}

bool have_tune() {
  if (access(kTune.c_str(), X_OK) != 0) {
    WARN("skipped: needs bin/ember_tune");
    return false;
  }
  return true;
}

// A stand-in for mnist_train: its --help lists a few flags in CLI11's layout, --check-options accepts anything, and a
// trial does what STUB_MODE says. ok (or unset): one epoch record with val_accuracy = its --lr, and a summary. hang:
// starts a grandchild (its PID appended to STUB_DIR/children) and waits for it. fail: exits 1 with "stub: error:
// rare" the first time and "stub: error: common" after. Any mode: exits 1 unless --data, when given, is a directory.
std::string stub_trainer(const TempDir& dir) {
  const std::string path = dir / "stub_trainer";
  write_all(path, R"(#!/bin/sh
log= lr=50 data= prev=
for a in "$@"; do
  case "$a" in
    --help) printf 'Options:\n  -h,--help        help\n  --lr FLOAT       lr\n  --epochs INT     epochs\n'
            printf '  --data TEXT      data\n  --seed UINT      seed\n  --log TEXT       log\n'
            printf '  --quiet          quiet\n'
            exit 0;;
    --check-options) exit 0;;
  esac
  case "$prev" in --log) log=$a;; --lr) lr=$a;; --data) data=$a;; esac
  prev=$a
done
if [ -n "$data" ] && [ ! -d "$data" ]; then echo "stub: error: no data at $data" >&2; exit 1; fi
case "$STUB_MODE" in
  hang) sleep 1000 & echo $! >> "$STUB_DIR/children"; wait; exit 0;;
  fail) if mkdir "$STUB_DIR/first" 2>/dev/null; then echo "stub: error: rare" >&2
        else echo "stub: error: common" >&2; fi
        exit 1;;
esac
printf '{"type":"epoch","epoch":1,"val_accuracy":%s,"seconds":0.01}\n' "$lr" >> "$log"
printf '{"type":"summary","status":"completed"}\n' >> "$log"
)");
  fs::permissions(path, fs::perms::owner_all);
  return path;
}

std::string stub_env(const TempDir& dir, const std::string& mode) {
  return "STUB_MODE=" + mode + " STUB_DIR=" + dir.path.string() + " ";
}

// A process that has not exited (a zombie has).
bool running(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(in, stat)) return false;
  const size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] != 'Z';
}

std::vector<pid_t> pids_in(const std::string& path) {
  std::vector<pid_t> out;
  std::ifstream in(path);
  pid_t p;
  while (in >> p) out.push_back(p);
  return out;
}

// Waits up to `seconds` for `path` to exist.
bool wait_for_file(const std::string& path, int seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (!fs::exists(path) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  return fs::exists(path);
}

nlohmann::json header_of(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return nlohmann::json::parse(line);
}

}  // namespace

TEST_CASE("tune: Matern 5/2 kernel values", "[tune]") {
  GpHyper h;
  h.log_length = {0.0, std::log(2.0)};
  h.log_signal = std::log(1.5);
  Eigen::VectorXd a(2), b(2);
  a << 0.2, 0.3;
  CHECK(GaussianProcess::matern52(a, a, h) == Approx(1.5));  // k(x, x) = s2
  b << 0.2 + 0.6, 0.3 + 1.6;                                 // r^2 = 0.36 + 0.64 = 1
  const double r = 1, want = 1.5 * (1 + std::sqrt(5.0) * r + 5.0 * r * r / 3) * std::exp(-std::sqrt(5.0) * r);
  CHECK(GaussianProcess::matern52(a, b, h) == Approx(want).epsilon(1e-12));
  CHECK(GaussianProcess::matern52(a, b, h) == Approx(GaussianProcess::matern52(b, a, h)));
  b << 10, 10;  // far apart: ~0
  CHECK(GaussianProcess::matern52(a, b, h) < 1e-6);
}

TEST_CASE("tune: the GP interpolates noise-free data, with ~0 variance there", "[tune]") {
  Eigen::MatrixXd X(6, 1);
  Eigen::VectorXd y(6);
  for (int i = 0; i < 6; ++i) {
    X(i, 0) = i / 5.0;
    y[i] = std::sin(6 * X(i, 0)) + 3;
  }
  GaussianProcess gp;
  Rng rng(1);
  gp.fit(X, y, rng);
  for (int i = 0; i < 6; ++i) {
    double m = 0, v = 0;
    gp.predict(X.row(i).transpose(), m, v);
    CHECK(m == Approx(y[i]).margin(1e-3));
    CHECK(v < 1e-4);
  }
  double m = 0, v = 0, m0 = 0, v0 = 0;
  gp.predict((Eigen::VectorXd(1) << 0.0).finished(), m0, v0);
  gp.predict((Eigen::VectorXd(1) << 0.1).finished(), m, v);
  CHECK(v > 10 * v0);  // between the points the model is less sure
  CHECK(m == Approx(std::sin(0.6) + 3).margin(0.1));
}

TEST_CASE("tune: the marginal likelihood's gradient matches finite differences", "[tune]") {
  Rng rng(3);
  Eigen::MatrixXd X(8, 2);
  Eigen::VectorXd y(8);
  for (int i = 0; i < 8; ++i) {
    X(i, 0) = rng.uniform();
    X(i, 1) = rng.uniform();
    y[i] = std::cos(3 * X(i, 0)) + X(i, 1) * X(i, 1) + 0.1 * rng.normal();
  }
  GaussianProcess gp;
  GpHyper h;
  h.log_length = {-0.5, 0.2};
  h.log_signal = 0.3;
  h.log_noise = -3;
  Eigen::VectorXd g;
  gp.log_marginal(X, y, h, &g);
  const double eps = 1e-6;
  for (int k = 0; k < 4; ++k) {
    GpHyper p = h, q = h;
    double* pp = k < 2 ? &p.log_length[static_cast<size_t>(k)] : k == 2 ? &p.log_signal : &p.log_noise;
    double* qq = k < 2 ? &q.log_length[static_cast<size_t>(k)] : k == 2 ? &q.log_signal : &q.log_noise;
    *pp += eps;
    *qq -= eps;
    const double fd = (gp.log_marginal(X, y, p, nullptr) - gp.log_marginal(X, y, q, nullptr)) / (2 * eps);
    CHECK(g[k] == Approx(fd).epsilon(1e-4).margin(1e-6));
  }
}

TEST_CASE("tune: expected improvement in closed form", "[tune]") {
  CHECK(expected_improvement(0, 1, 0) == Approx(0.3989422804014327));  // sd phi(0)
  // mean 1, sd 2, best 0: z = -0.5; -1 Phi(-0.5) + 2 phi(-0.5)
  CHECK(expected_improvement(1, 4, 0) == Approx(-0.3085375387259869 + 2 * 0.3520653267642995));
  CHECK(expected_improvement(-2, 0, 1) == Approx(3));  // no variance: the sure improvement
  CHECK(expected_improvement(2, 0, 1) == 0);
  CHECK(expected_improvement(0, 1, 0) < expected_improvement(0, 4, 0));  // more variance, more EI
}

TEST_CASE("tune: a Latin hypercube has one point per stratum in every coordinate", "[tune]") {
  for (int n : {1, 7, 20}) {
    const auto pts = latin_hypercube(5, n, 42);
    REQUIRE(pts.size() == static_cast<size_t>(n));
    for (size_t d = 0; d < 5; ++d) {
      std::set<int> strata;
      for (const auto& p : pts) {
        REQUIRE(p[d] >= 0);
        REQUIRE(p[d] < 1);
        strata.insert(static_cast<int>(p[d] * n));
      }
      CHECK(strata.size() == static_cast<size_t>(n));
    }
  }
  CHECK(latin_hypercube(3, 10, 1) == latin_hypercube(3, 10, 1));
  CHECK(latin_hypercube(3, 10, 1) != latin_hypercube(3, 10, 2));
}

TEST_CASE("tune: the space decodes log scales per decade, integers and categoricals by bucket", "[tune]") {
  Space s;
  s.params = {parse_param("lr=log:1e-4:1e-1"), parse_param("epochs=int:1:3"), parse_param("opt=cat:sgd,adam"),
              parse_param("m=float:0.5:0.9")};
  const auto v = s.decode({0.5, 0.5, 0.75, 0.25});
  CHECK(v[0] == Approx(std::pow(10.0, -2.5)));
  CHECK(v[1] == 2);
  CHECK(v[2] == 1);
  CHECK(v[3] == Approx(0.6));
  CHECK(s.decode({1, 1, 1, 1})[1] == 3);
  CHECK(s.feature_size() == 5);
  const auto f = s.features({0.5, 0.5, 0.75, 0.25});
  REQUIRE(f.size() == 5);
  CHECK(f[0] == Approx(0.5));
  CHECK(f[1] == Approx(0.5));  // the middle of 3 buckets
  CHECK(f[2] == 0);
  CHECK(f[3] == 1);
  CHECK(f[4] == Approx(0.25));
  CHECK(s.values_json({0.0, 0.0, 0.1, 0.0}).dump() == R"({"epochs":1,"lr":0.0001,"m":0.5,"opt":"sgd"})");
  CHECK(Space::from_json(s.to_json()).to_json() == s.to_json());
}

TEST_CASE("tune: bad parameters give one clear error", "[tune]") {
  auto err = [](const std::string& spec) {
    try {
      parse_param(spec);
    } catch (const ember::Error& e) {
      return ember::user_message(e.what());
    }
    return std::string("no error");
  };
  CHECK_THAT(err("lr=gauss:0:1"), Catch::Contains("unknown type 'gauss'"));
  CHECK_THAT(err("lr=float:1:1"), Catch::Contains("empty range"));
  CHECK_THAT(err("lr=float:2:1"), Catch::Contains("empty range"));
  CHECK_THAT(err("lr=log:0:1"), Catch::Contains("a log range needs positive bounds"));
  CHECK_THAT(err("lr=log:-1:1"), Catch::Contains("a log range needs positive bounds"));
  CHECK_THAT(err("lr=float:a:1"), Catch::Contains("'a' is not a finite number"));
  CHECK_THAT(err("epochs=int:1.5:3"), Catch::Contains("integer bounds"));
  CHECK_THAT(err("opt=cat:sgd,sgd"), Catch::Contains("listed twice"));
  CHECK_THAT(err("lr"), Catch::Contains("expected NAME=TYPE"));
  CHECK(err("lr=log:1e-4:1e-1") == "no error");
}

TEST_CASE("tune: GP-EI reaches Branin within 1% in 30 evaluations, random search does not", "[tune]") {
  const TestFunction& br = test_function("branin");
  const double tol = 0.01 * br.optimum;
  int gp_hits = 0, random_hits = 0;
  for (uint64_t seed = 0; seed < 5; ++seed) {
    gp_hits += regret_curve(br, SamplerKind::gp, seed, 30).back() <= tol;
    random_hits += regret_curve(br, SamplerKind::random, seed, 30).back() <= tol;
  }
  CHECK(gp_hits >= 4);
  CHECK(random_hits <= 1);
  // The test functions themselves: their optima where the literature puts them.
  CHECK(br.f({M_PI, 2.275}) == Approx(0.397887357729739).epsilon(1e-9));
  CHECK(test_function("hartmann6").f({0.20169, 0.150011, 0.476874, 0.275332, 0.311652, 0.6573}) ==
        Approx(-3.32237).epsilon(1e-5));
}

TEST_CASE("tune: a seeded sampler is reproducible and pending points spread GP suggestions", "[tune]") {
  const Space s = two_floats();
  auto study = [&](SamplerKind k) {
    SamplerOptions o{k, 7, 0};
    std::vector<Observation> h;
    for (uint64_t n = 0; n < 12; ++n) {
      const auto u = suggest(s, o, n, h, {});
      const auto v = s.decode(u);
      h.push_back({u, (v[0] - 0.3) * (v[0] - 0.3) + std::log10(v[1]) * 0.1, false});
    }
    return h;
  };
  for (SamplerKind k : {SamplerKind::gp, SamplerKind::tpe, SamplerKind::random}) {
    const auto a = study(k), b = study(k);
    for (size_t i = 0; i < a.size(); ++i) CHECK(a[i].u == b[i].u);
  }
  // Early in a study (7 observations), where the model is unsure: the second of two parallel trials goes elsewhere.
  auto h = study(SamplerKind::gp);
  h.resize(7);
  SamplerOptions o{SamplerKind::gp, 7, 0};
  const auto first = suggest(s, o, 7, h, {});
  const auto second = suggest(s, o, 7, h, {first});
  CHECK(std::hypot(first[0] - second[0], first[1] - second[1]) > 1e-3);
}

TEST_CASE("tune: the median pruner on synthetic curves", "[tune]") {
  PrunerOptions o;
  o.kind = PrunerKind::median;
  o.warmup = 1;
  o.min_trials = 3;
  // losses per epoch (a study that maximises accuracy hands them negated)
  const std::vector<std::vector<double>> others = {{-80, -85, -87}, {-70, -75, -78}, {-82, -86, -88}};
  CHECK_FALSE(should_prune(o, {-60}, 3, others));                       // warm-up epoch
  CHECK(should_prune(o, {-60, -65}, 3, others));                        // 65 < median 85 at epoch 2
  CHECK_FALSE(should_prune(o, {-60, -86}, 3, others));                  // better than the median
  CHECK_FALSE(should_prune(o, {-60, -65}, 3, {others[0], others[1]}));  // too few others
  CHECK_FALSE(should_prune(o, {-60, -65, -66}, 3,
                           others));              // the last epoch: done anyway
  CHECK(should_prune(o, {-60, NAN}, 3, others));  // NaN will not recover
  o.kind = PrunerKind::none;
  CHECK_FALSE(should_prune(o, {-60, -65}, 3, others));
}

TEST_CASE("tune: the ASHA pruner keeps the best 1/eta at each rung", "[tune]") {
  PrunerOptions o;
  o.kind = PrunerKind::asha;
  o.eta = 3;
  o.min_epochs = 1;  // rungs at epochs 1, 3, 9
  const std::vector<std::vector<double>> rung1 = {{-50}, {-60}, {-70}, {-80}, {-90}};
  CHECK_FALSE(should_prune(o, {-95}, 20, rung1));              // 6 at the rung: keep the best 2
  CHECK_FALSE(should_prune(o, {-85}, 20, rung1));              // second best
  CHECK(should_prune(o, {-75}, 20, rung1));                    // third
  CHECK_FALSE(should_prune(o, {-10}, 20, {}));                 // alone at the rung: kept
  CHECK(should_prune(o, {-10}, 20, {{-20}}));                  // two at the rung: only the best goes on
  CHECK_FALSE(should_prune(o, {-10, -10}, 20, {{-90, -90}}));  // epoch 2 is no rung
  CHECK_FALSE(should_prune(o, {-10}, 1, {{-90}}));             // its last epoch
}

TEST_CASE("tune: the study file refuses foreign and corrupt files, repairs a torn last line", "[tune]") {
  TempDir dir;
  StudyConfig c;
  c.space = two_floats();
  const std::string path = dir / "s.jsonl";
  {
    StudyFile f = StudyFile::create(path, c, 5);
    for (uint64_t n = 0; n < 3; ++n) {
      TrialRecord t;
      t.number = n;
      t.state = "complete";
      t.u = {0.1 * static_cast<double>(n), 0.5};
      t.value = 80 + static_cast<double>(n);
      t.epochs_planned = 1;
      f.append(t);
    }
  }
  CHECK_THROWS_WITH(StudyFile::create(path, c, 5), Catch::Contains("already exists; continue it with --resume"));
  const std::string good = read_all(path);
  CHECK(StudyFile::open(path).trials().size() == 3);

  // torn last record: dropped, and cut off by the next append
  write_all(path, good + R"({"type":"trial","number":3,"sta)");
  {
    StudyFile f = StudyFile::open(path);
    CHECK(f.had_torn_line());
    CHECK(f.trials().size() == 3);
    TrialRecord t;
    t.number = 3;
    t.state = "failed";
    t.u = {0.9, 0.9};
    t.epochs_planned = 1;
    t.error = "exit code 1";
    f.append(t);
  }
  CHECK(StudyFile::open(path).trials().size() == 4);
  CHECK(read_all(path).substr(0, good.size()) == good);

  // a whole last record without its newline is kept
  write_all(path, good.substr(0, good.size() - 1));
  CHECK(StudyFile::open(path).trials().size() == 3);

  // a corrupt record before the end: refused, file untouched
  std::string corrupt = good;
  corrupt.insert(corrupt.find('\n') + 1, "{not json\n");
  write_all(path, corrupt);
  CHECK_THROWS_WITH(StudyFile::open(path), Catch::Contains(":2: a corrupt record"));
  CHECK(read_all(path) == corrupt);

  write_all(path, "{\"type\":\"epoch\",\"epoch\":1}\n");
  CHECK_THROWS_WITH(StudyFile::open(path), Catch::Contains("is not an ember_tune study"));
  write_all(path, "");
  CHECK_THROWS_WITH(StudyFile::open(path), Catch::Contains("is empty"));
}

TEST_CASE("tune: ember_tune refuses bad input with one error line, starting no trial", "[tune][ember_tune]") {
  if (!have_programs()) return;
  TempDir dir;
  const std::string study = dir / "s.jsonl";
  const std::string base = kTune + " --study " + study + " --trials 2";
  struct Case {
    std::string args, message;
  };
  const std::vector<Case> cases = {
      {" --param lr=gauss:1:2", "unknown type 'gauss'"},
      {" --param lr=float:0.1:0.1", "empty range"},
      {" --param lr=log:0:0.1", "a log range needs positive bounds"},
      {" --param lr=log:1e-3:1e-1 --objective val_f1", "mnist_train never reports it"},
      {" --param no-such-flag=float:0:1", "mnist_train has no flag --no-such-flag"},
      {"", "no parameters to search"},
      // parsed like mnist_train: no seed wraps or clamps, no timeout is nan or inf
      {" --param lr=log:1e-3:1e-1 --seed -1", "expected an integer in [0, 18446744073709551615], got '-1'"},
      {" --param lr=log:1e-3:1e-1 --seed 18446744073709551616", "(out of range)"},
      {" --param lr=log:1e-3:1e-1 --trial-timeout nan", "expected a finite number, got nan"},
      {" --param lr=log:1e-3:1e-1 --trial-timeout inf", "expected a finite number, got inf"},
      // the trial directory in the study file's place, refused before either is made
      {" --param lr=log:1e-3:1e-1 --out-dir " + study, "--out-dir " + study + " is the study file itself"},
      {" --param lr=log:1e-3:1e-1 --out-dir " + study + "/", "is the study file itself"},
  };
  for (const Case& c : cases) {
    INFO(c.args);
    const Run r = run(dir, base + c.args + kTiny);
    CHECK(r.rc == 2);
    CHECK_THAT(r.err, Catch::Contains(c.message));
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    CHECK_FALSE(fs::exists(study));
    CHECK_FALSE(fs::exists(dir / "s.d"));
  }
  // A directory where the study file goes is called one, as --study and as --resume.
  fs::create_directories(dir / "d.jsonl");
  for (const std::string flags :
       {" --study " + (dir / "d.jsonl") + " --param lr=log:1e-3:1e-1" + kTiny, " --resume " + (dir / "d.jsonl")}) {
    const Run d = run(dir, kTune + flags);
    CHECK(d.rc == 2);
    CHECK_THAT(d.err, Catch::Contains("the study file '" + (dir / "d.jsonl") + "' is a directory"));
  }
  // A foreign file and a corrupt study, given to --resume: refused, not changed.
  const std::string foreign = "{\"type\":\"epoch\",\"epoch\":1}\n";
  write_all(study, foreign);
  Run r = run(dir, kTune + " --resume " + study);
  CHECK(r.rc == 2);
  CHECK_THAT(r.err, Catch::Contains("is not an ember_tune study"));
  CHECK(read_all(study) == foreign);
  fs::remove(study);
  r = run(dir, base + " --param lr=log:1e-3:1e-2" + kTiny);
  REQUIRE(r.rc == 0);
  const std::string corrupt = read_all(study) + "garbage\n{\"type\":\"trial\"}\n";
  write_all(study, corrupt);
  r = run(dir, kTune + " --resume " + study + " --trials 4");
  CHECK(r.rc == 2);
  CHECK_THAT(r.err, Catch::Contains("a corrupt record"));
  CHECK(read_all(study) == corrupt);
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  // A new study onto an existing file, and --resume with a different space.
  r = run(dir, base + " --param lr=log:1e-3:1e-2" + kTiny);
  CHECK(r.rc == 2);
  CHECK_THAT(r.err, Catch::Contains("already exists"));
  CHECK(read_all(study) == corrupt);
}

TEST_CASE("tune: a real study records diverged and failing trials as failed and goes on", "[tune][ember_tune]") {
  if (!have_programs()) return;
  TempDir dir;
  const std::string study = dir / "s.jsonl";
  // With 4 Latin-hypercube trials each half of [0, 1) holds two points, so each of two choices is drawn twice: lr
  // 1e30 diverges, --data without the data set fails at run time (a value mnist_train's parser refuses, such as
  // --optimizer bogus, is refused before the first trial).
  const Run r =
      run(dir, kTune + " --study " + study + " --init 6 --trials 6 --parallel 2 --param lr=cat:0.003,1e30" +
                   " --param data=cat:" + kData + "," + (dir / "missing") + " --tensorboard " + (dir / "tb") + kTiny);
  INFO(r.out << r.err);
  REQUIRE(r.rc == 0);
  const auto recs = trial_records(study);
  REQUIRE(recs.size() == 6);
  int complete = 0, diverged = 0, no_data = 0;
  for (const auto& t : recs) {
    const bool absurd = t["params"]["lr"] == "1e30", bogus = t["params"]["data"] != kData;
    if (bogus) {
      CHECK(t["state"] == "failed");
      no_data += t.value("error", "").find("exit code 1") != std::string::npos;
    } else if (absurd) {
      CHECK(t["state"] == "failed");
      diverged += t.value("error", "").find("diverged") != std::string::npos;
    } else {
      CHECK(t["state"] == "complete");
      CHECK(t["value"].get<double>() > 30);  // 30 steps of the MLP: far above chance (10%)
      ++complete;
      CHECK(fs::exists(dir / ("tb/trial-" + std::to_string(t["number"].get<int>()))));
    }
  }
  CHECK(complete >= 1);
  CHECK(diverged >= 1);
  CHECK(no_data >= 1);
  CHECK_THAT(r.out, Catch::Contains("best: " + kTrainer));
  CHECK(fs::exists(dir / "s-history.svg"));
  CHECK(fs::exists(dir / "s-slices.svg"));
}

TEST_CASE("tune: a seeded study is reproducible and resumes after a kill without repeating a trial",
          "[tune][ember_tune][study]") {
  if (!have_programs()) return;
  TempDir dir;
  const std::string space = " --param lr=log:1e-3:3e-2 --param batch-size=cat:32,64,128 --init 3 --seed 5";
  const std::string a = dir / "a.jsonl", b = dir / "b.jsonl";
  REQUIRE(run(dir, kTune + " --study " + a + " --trials 5" + space + kTiny).rc == 0);
  REQUIRE(run(dir, kTune + " --study " + b + " --trials 3" + space + kTiny).rc == 0);
  {  // the plots: lr on a log axis labelled with its values, the categories by name, units on the axes
    const std::string slices = read_all(dir / "a-slices.svg"), history = read_all(dir / "a-history.svg");
    CHECK(slices.find("log10") == std::string::npos);
    CHECK(slices.find(">0.01</text>") != std::string::npos);
    CHECK(slices.find(">128</text>") != std::string::npos);
    CHECK(slices.find("val_accuracy (%)") != std::string::npos);
    CHECK(history.find("study wall time (s)") != std::string::npos);
  }
  // "Kill" b while it writes trial 3's record: a torn last line.
  const std::string torn = R"({"type":"trial","number":3,"state":"comp)";
  write_all(b, read_all(b) + torn);
  const std::string before = read_all(b);
  const Run r = run(dir, kTune + " --resume " + b + " --trials 5" + kTiny.substr(0, 3));
  INFO(r.out << r.err);
  REQUIRE(r.rc == 0);
  CHECK_THAT(r.err, Catch::Contains("cut short"));
  CHECK(read_all(b).substr(0, before.size() - torn.size()) == before.substr(0, before.size() - torn.size()));
  const auto ra = trial_records(a), rb = trial_records(b);
  REQUIRE(ra.size() == 5);
  REQUIRE(rb.size() == 5);
  for (size_t i = 0; i < 5; ++i) {
    INFO("trial " << i);
    CHECK(rb[i]["number"] == i);
    CHECK(ra[i]["params"] == rb[i]["params"]);  // the same points, resumed or not
  }
  // --resume with a different space is refused, the file unchanged.
  const std::string done = read_all(b);
  const Run bad = run(dir, kTune + " --resume " + b + " --trials 6 --param lr=log:1e-4:1e-1");
  CHECK(bad.rc == 2);
  CHECK_THAT(bad.err, Catch::Contains("the search space differs"));
  CHECK(read_all(b) == done);
}

TEST_CASE("tune: ASHA prunes a real trial that is behind at its first rung, and says what it saved",
          "[tune][ember_tune][study]") {
  if (!have_programs()) return;
  TempDir dir;
  const std::string study = dir / "s.jsonl";
  // Four Latin-hypercube trials, two with lr 1e-6 (barely learning after an epoch) and two with 3e-3, run one at a
  // time; the seed is one whose design starts with a 3e-3 trial, so a slow trial reaches the rung at epoch 1 after a
  // fast one has.
  uint64_t seed = 0;
  while (latin_hypercube_point(1, 4, 0, seed)[0] >= 0.5) ++seed;
  const Run r = run(dir, kTune + " --study " + study + " --init 4 --trials 4 --pruner asha --asha-min-epochs 1" +
                             " --seed " + std::to_string(seed) +
                             " --param lr=cat:0.003,0.000001 -- --epochs 3 --batch-size 256 --workers 0 --device cpu");
  INFO(r.out << r.err);
  REQUIRE(r.rc == 0);
  int pruned = 0;
  for (const auto& t : trial_records(study)) {
    if (t["state"] == "pruned") {
      ++pruned;
      CHECK(t["params"]["lr"] == "0.000001");
      CHECK(t["epochs_run"].get<int>() < 3);
    } else {
      CHECK(t["state"] == "complete");
    }
  }
  CHECK(pruned >= 1);
  CHECK_THAT(r.out, Catch::Contains("planned epochs not run"));
}

TEST_CASE("tune: the time-to-accuracy objective is minimised and a trial that never gets there fails",
          "[tune][ember_tune][study]") {
  if (!have_programs()) return;
  TempDir dir;
  const std::string study = dir / "s.jsonl";
  const Run r =
      run(dir,
          kTune + " --study " + study + " --init 2 --trials 2 --objective time_to:60" +
              " --param lr=cat:0.003,0.000001 -- --epochs 2 --max-steps 200 --batch-size 256 --workers 0 --device cpu");
  INFO(r.out << r.err);
  REQUIRE(r.rc == 0);
  const auto recs = trial_records(study);
  REQUIRE(recs.size() == 2);
  CHECK_THAT(read_all(study), Catch::Contains("\"direction\":\"min\""));
  for (const auto& t : recs) {
    if (t["params"]["lr"] == "0.003") {
      CHECK(t["state"] == "complete");
      CHECK(t["value"].get<double>() > 0);
    } else {
      CHECK(t["state"] == "failed");
      CHECK_THAT(t["error"].get<std::string>(), Catch::Contains("never reached val_accuracy 60"));
    }
  }
}

TEST_CASE("tune: SIGTERM stops a study, and --resume keeps every finished trial and runs the rest once",
          "[tune][ember_tune][study]") {
  if (!have_programs()) return;
  TempDir dir;
  const std::string study = dir / "s.jsonl";
  const std::string cmd = "exec " + kTune + " --study " + study + " --trials 8 --parallel 2 --param lr=log:1e-3:1e-2" +
                          kTiny + " >" + (dir / "out.txt") + " 2>&1";
  const char* argv[] = {"/bin/sh", "-c", cmd.c_str(), nullptr};
  pid_t pid = -1;
  REQUIRE(posix_spawn(&pid, "/bin/sh", nullptr, nullptr, const_cast<char**>(argv), environ) == 0);
  // Stop it once two trials are recorded (while others run), or after 60 s whatever happened.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  auto recorded = [&] {  // whole lines only: the file may be read while a record is written
    const std::string text = read_all(study);
    size_t n = 0;
    for (size_t at = text.find("\"type\":\"trial\""); at != std::string::npos;
         at = text.find("\"type\":\"trial\"", at + 1))
      n += text.find('\n', at) != std::string::npos;
    return n;
  };
  while (recorded() < 2 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  kill(pid, SIGTERM);
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  const size_t kept = trial_records(study).size();
  REQUIRE(kept >= 2);
  if (kept < 8) CHECK(WEXITSTATUS(status) == 128 + SIGTERM);  // else it had finished before the signal
  const std::string before = read_all(study);
  const Run r = run(dir, kTune + " --resume " + study + " --trials 8");
  INFO(r.out << r.err);
  REQUIRE(r.rc == 0);
  CHECK(read_all(study).substr(0, before.size()) == before);  // nothing lost or rewritten
  std::set<int> numbers;
  for (const auto& t : trial_records(study)) CHECK(numbers.insert(t["number"].get<int>()).second);  // none twice
  CHECK(numbers == std::set<int>{0, 1, 2, 3, 4, 5, 6, 7});
}

TEST_CASE("tune: the median pruner stops real trials that are behind the others", "[tune][ember_tune][study]") {
  if (!have_programs()) return;
  TempDir dir;
  const std::string study = dir / "s.jsonl";
  // lr over four decades: the trials at the low and the high end trail the median after epoch 2.
  const Run r = run(dir, kTune + " --study " + study +
                             " --trials 8 --pruner median --sampler random --seed 3 --param lr=log:1e-5:1e-1"
                             " -- --epochs 3 --batch-size 256 --workers 0 --device cpu");
  INFO(r.out << r.err);
  REQUIRE(r.rc == 0);
  int pruned = 0;
  double best_complete = 0;
  std::vector<double> pruned_values;
  for (const auto& t : trial_records(study)) {
    if (t["state"] == "pruned") {
      ++pruned;
      CHECK(t["epochs_run"].get<int>() < 3);  // judged after the warm-up epoch, before the last
      pruned_values.push_back(t["value"].get<double>());
    } else {
      REQUIRE(t["state"] == "complete");
      best_complete = std::max(best_complete, t["value"].get<double>());
    }
  }
  CHECK(pruned >= 1);
  for (double v : pruned_values) CHECK(v < best_complete);
  CHECK_THAT(r.out, Catch::Contains("planned epochs not run"));
}

TEST_CASE("tune: a lock file is held by one holder, names its PID and goes away on release", "[tune]") {
  TempDir dir;
  const std::string path = dir / "s.jsonl.lock", pid = std::to_string(getpid());
  {
    io::FileLock a(path, "the study 's.jsonl'", "ember_tune");
    CHECK(read_all(path) == pid + "\n");
    // flock() locks belong to an open file, so a second open in this process is refused like another process.
    CHECK_THROWS_WITH(io::FileLock(path, "the study 's.jsonl'", "ember_tune"),
                      Catch::Contains("the study 's.jsonl' is in use by another ember_tune (pid " + pid +
                                      ", lock file " + path + ")"));
  }
  CHECK_FALSE(fs::exists(path));
  write_all(path, "999999999\n");  // left by a holder that died: no lock on it any more
  {
    io::FileLock b(path, "the study 's.jsonl'", "ember_tune");
    CHECK(read_all(path) == pid + "\n");
  }
  fs::create_directories(dir / "sub");
  fs::create_symlink(dir / "sub", dir / "link");
  write_all(dir / "sub/s.jsonl", "");
  CHECK(study_lock_path(dir / "link/s.jsonl") == study_lock_path(dir / "sub/s.jsonl"));
  CHECK(study_lock_path(dir / "sub/s.jsonl") == fs::canonical(dir.path).string() + "/sub/s.jsonl.lock");
}

TEST_CASE("tune: a second ember_tune on a running study or its trial directory fails at once, naming the holder",
          "[tune][ember_tune]") {
  if (!have_tune()) return;
  TempDir dir;
  const std::string stub = stub_trainer(dir), study = dir / "s.jsonl";
  const std::string tail = " --mnist-train " + stub + " --param lr=float:1:90";
  const std::string cmd = "exec env " + stub_env(dir, "hang") + kTune + " --study " + study + " --trials 1" + tail +
                          " >" + (dir / "a.txt") + " 2>&1";
  const char* argv[] = {"/bin/sh", "-c", cmd.c_str(), nullptr};
  pid_t pid = -1;
  REQUIRE(posix_spawn(&pid, "/bin/sh", nullptr, nullptr, const_cast<char**>(argv), environ) == 0);
  const bool started = wait_for_file(dir / "children", 30);  // its trial runs: both locks are held
  INFO(read_all(dir / "a.txt"));
  CHECK(started);
  const std::string holder = "(pid " + std::to_string(pid) + ", lock file ";
  if (started) {
    const auto t0 = std::chrono::steady_clock::now();
    Run r = run(dir, stub_env(dir, "ok") + kTune + " --resume " + study + " --mnist-train " + stub);
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10));
    CHECK(r.rc == 1);
    CHECK_THAT(r.err, Catch::Contains("ember_tune: error: the study '" + study + "' is in use by another ember_tune " +
                                      holder + study_lock_path(study) + ")"));
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    r = run(dir, stub_env(dir, "ok") + kTune + " --study " + study + tail);
    CHECK(r.rc == 1);
    CHECK_THAT(r.err, Catch::Contains("is in use by another ember_tune " + holder));
    // Another study, in the first one's trial directory.
    const std::string other = dir / "t.jsonl";
    r = run(dir, stub_env(dir, "ok") + kTune + " --study " + other + " --out-dir " + (dir / "s.d") + tail);
    CHECK(r.rc == 1);
    CHECK_THAT(r.err, Catch::Contains("the trial directory '" + (dir / "s.d") + "' is in use by another ember_tune " +
                                      holder + (dir / "s.d/ember_tune.lock") + ")"));
    CHECK_FALSE(fs::exists(other));
    // A hard link: the same study under another name, with a lock file and a trial directory of its own.
    const std::string hard = dir / "h.jsonl";
    fs::create_hard_link(study, hard);
    r = run(dir, stub_env(dir, "ok") + kTune + " --resume " + hard + " --mnist-train " + stub);
    CHECK(r.rc == 1);
    CHECK_THAT(r.err,
               Catch::Contains("ember_tune: error: the study '" + hard + "' is in use by another ember_tune (pid " +
                               std::to_string(pid) + ", under another name of the same file)"));
    fs::remove(hard);
  }
  // SIGKILL: no clean-up runs, yet the kernel drops the locks with the process.
  kill(pid, SIGKILL);
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  const Run r = run(dir, stub_env(dir, "ok") + kTune + " --resume " + study + " --mnist-train " + stub);
  INFO(r.out << r.err);
  CHECK(r.rc == 0);
  CHECK(trial_records(study).size() == 1);
  CHECK_FALSE(fs::exists(study_lock_path(study)));
  for (pid_t p : pids_in(dir / "children")) kill(p, SIGKILL);  // the hung trial's grandchild, orphaned by the kill
}

TEST_CASE("tune: the planned trial count is stored in the study, and --resume continues to it", "[tune][ember_tune]") {
  if (!have_tune()) return;
  TempDir dir;
  const std::string stub = stub_trainer(dir), study = dir / "s.jsonl";
  const std::string env = stub_env(dir, "ok");
  Run r = run(dir, env + kTune + " --study " + study + " --trials 3 --mnist-train " + stub + " --param lr=float:1:90");
  REQUIRE(r.rc == 0);
  CHECK(header_of(study)["trials"] == 3);
  // Killed after the first trial: the header and one record.
  const std::string all = read_all(study);
  size_t cut = all.find('\n');
  cut = all.find('\n', cut + 1);
  write_all(study, all.substr(0, cut + 1));
  REQUIRE(trial_records(study).size() == 1);
  r = run(dir, env + kTune + " --resume " + study + " --mnist-train " + stub);
  INFO(r.out << r.err);
  REQUIRE(r.rc == 0);
  CHECK(trial_records(study).size() == 3);
  // A new count given to --resume is recorded, and is the one a later resume continues to.
  r = run(dir, env + kTune + " --resume " + study + " --trials 5 --mnist-train " + stub);
  REQUIRE(r.rc == 0);
  CHECK(trial_records(study).size() == 5);
  CHECK_THAT(read_all(study), Catch::Contains("{\"trials\":5,\"type\":\"plan\"}\n"));
  r = run(dir, env + kTune + " --resume " + study + " --mnist-train " + stub);
  REQUIRE(r.rc == 0);
  CHECK(trial_records(study).size() == 5);
  CHECK(StudyFile::open(study).planned_trials() == 5);
}

TEST_CASE("tune: parameters and arguments mnist_train would refuse or ember_tune sets are refused before any trial",
          "[tune][ember_tune]") {
  if (!have_programs()) return;
  TempDir dir;
  const std::string study = dir / "s.jsonl";
  const std::string base = kTune + " --study " + study + " --trials 2";
  const std::string lr = " --param lr=log:1e-3:1e-2";
  struct Case {
    std::string args, message;
  };
  const std::vector<Case> cases = {
      {" --param seed=int:0:9" + kTiny, "parameter 'seed': ember_tune sets --seed for each trial itself"},
      {" --param log=cat:a.jsonl,b.jsonl" + kTiny, "parameter 'log': ember_tune sets --log"},
      {" --param tensorboard=cat:a,b" + kTiny, "parameter 'tensorboard': ember_tune sets --tensorboard"},
      {lr + kTiny + " --seed 3", "mnist_train argument --seed: ember_tune sets --seed"},
      {lr + " -- --epochs 1 --lr 0.1", "parameter 'lr' is searched and also given after -- (--lr)"},
      {lr + " -- --epochs 1 --lr=0.1", "parameter 'lr' is searched and also given after -- (--lr=0.1)"},
      {lr + " -- --epochs 1 --no-such-flag 3", "mnist_train argument --no-such-flag: mnist_train has no flag"},
      {lr + " -- --epochs 1 --data", "mnist_train argument --data has no value"},
      {lr + " -- --data --augment",
       "mnist_train argument --data has no value (it takes one, and is followed by "
       "--augment)"},
      {lr + " -- --check-options", "mnist_train argument --check-options: with it mnist_train does not train"},
      {lr + " -- --epochs 0", "mnist_train refuses the arguments after --: --epochs: Value 0 not in range"},
      {" --param momentum=float:0:1" + kTiny,
       "parameter 'momentum': mnist_train refuses --momentum 1 (an end of the range): --momentum: Value 1 not in "
       "range"},
      {" --param epochs=int:0:3 -- --device cpu", "parameter 'epochs': mnist_train refuses --epochs 0"},
      {" --param val-split=float:0:0.9" + kTiny, "parameter 'val-split': mnist_train refuses --val-split 0.9"},
      {" --param optimizer=cat:sgd,bogus" + kTiny,
       "parameter 'optimizer': mnist_train refuses --optimizer bogus: --optimizer: bogus not in {sgd,adam,adamw}"},
      {" --param augment=cat:a,b" + kTiny, "parameter 'augment': --augment is a switch (it takes no value)"},
  };
  for (const Case& c : cases) {
    INFO(c.args);
    const Run r = run(dir, base + c.args);
    CHECK(r.rc == 2);
    CHECK_THAT(r.err, Catch::StartsWith("ember_tune: error: ") && Catch::Contains(c.message));
    CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
    CHECK_FALSE(fs::exists(study));
    CHECK_FALSE(fs::exists(dir / "s.d"));
    CHECK_FALSE(fs::exists(study + ".lock"));
  }
}

TEST_CASE("tune: paths in the stored mnist_train arguments are absolute, so a resume elsewhere runs the same trials",
          "[tune][ember_tune]") {
  if (!have_tune()) return;
  TempDir dir;
  const std::string stub = stub_trainer(dir);
  fs::create_directories(dir / "a/data");
  fs::create_directories(dir / "b");
  const std::string env = stub_env(dir, "ok");
  Run r = run(dir, "cd " + (dir / "a") + " && " + env + kTune + " --study s.jsonl --trials 1 --mnist-train " + stub +
                       " --param lr=float:1:90 -- --data data --epochs=1");
  INFO(r.out << r.err);
  REQUIRE(r.rc == 0);
  const std::string study = dir / "a/s.jsonl";
  CHECK(header_of(study)["config"]["train_args"] == nlohmann::json::array({"--data", dir / "a/data", "--epochs=1"}));
  r = run(dir, "cd " + (dir / "b") + " && " + env + kTune + " --resume ../a/s.jsonl --trials 2 --mnist-train " + stub);
  INFO(r.out << r.err);
  CHECK(r.rc == 0);
  const auto recs = trial_records(study);
  REQUIRE(recs.size() == 2);
  CHECK(recs[1]["state"] == "complete");           // the stub fails unless --data names a directory
  CHECK(fs::exists(dir / "a/s.d/trial-1.jsonl"));  // the resumed study's own trial directory
}

TEST_CASE("tune: the trial timeout is derived from completed trials, none before one completed", "[tune]") {
  std::vector<TrialRecord> t;
  CHECK_FALSE(default_trial_timeout(t));
  auto add = [&](const char* state, double seconds) {
    TrialRecord r;
    r.state = state;
    r.duration_s = seconds;
    t.push_back(r);
  };
  add("failed", 500);
  add("pruned", 400);
  CHECK_FALSE(default_trial_timeout(t));  // neither says how long a whole trial takes
  add("complete", 1);
  CHECK(*default_trial_timeout(t) == 60);  // 10 x 1 s, but at least 60 s
  add("complete", 20);
  add("complete", 30);
  CHECK(*default_trial_timeout(t) == 200);  // 10 x the median, 20 s
  add("complete", 40);
  CHECK(*default_trial_timeout(t) == 250);  // an even count: the mean of the middle two
}

TEST_CASE("tune: a trial past --trial-timeout is killed with its whole process group and recorded as failed",
          "[tune][ember_tune]") {
  if (!have_tune()) return;
  TempDir dir;
  const std::string stub = stub_trainer(dir), study = dir / "s.jsonl";
  const auto t0 = std::chrono::steady_clock::now();
  const Run r = run(dir, stub_env(dir, "hang") + kTune + " --study " + study + " --trials 1 --trial-timeout 1" +
                             " --mnist-train " + stub + " --param lr=float:1:90");
  INFO(r.out << r.err);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(20));
  CHECK(r.rc == 1);  // its only trial failed
  const auto recs = trial_records(study);
  REQUIRE(recs.size() == 1);
  CHECK(recs[0]["state"] == "failed");
  CHECK(recs[0]["error"] == "timed out after 1 s");
  const std::vector<pid_t> children = pids_in(dir / "children");
  REQUIRE(children.size() == 1);
  // The trial's own child went with it: the group was killed, not only the trial.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (running(children[0]) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK_FALSE(running(children[0]));
  if (running(children[0])) kill(children[0], SIGKILL);
}

TEST_CASE("tune: without a validation split val_accuracy is missing, not 0, and such a trial fails saying so",
          "[tune][ember_tune][study]") {
  if (!have_programs()) return;
  TempDir dir;
  const std::string tiny = " -- --epochs 1 --max-steps 10 --log-interval 5 --workers 0 --device cpu --val-split 0";
  for (const std::string objective : {"val_accuracy", "time_to:50"}) {
    INFO(objective);
    const std::string study = dir / "s.jsonl";
    fs::remove(study);
    fs::remove_all(dir / "s.d");
    const Run r = run(
        dir, kTune + " --study " + study + " --trials 1 --objective " + objective + " --param lr=log:1e-3:1e-2" + tiny);
    INFO(r.out << r.err);
    CHECK(r.rc == 1);  // every trial failed
    const auto recs = trial_records(study);
    REQUIRE(recs.size() == 1);
    CHECK(recs[0]["state"] == "failed");
    CHECK(recs[0]["value"].is_null());
    CHECK(recs[0]["error"] == "val_accuracy is unavailable: the trial had no validation split (--val-split 0)");
    // mnist_train's log says so itself.
    int epochs = 0;
    std::ifstream log(dir / "s.d/trial-0.jsonl");
    std::string line;
    while (std::getline(log, line)) {
      const auto j = nlohmann::json::parse(line);
      if (j["type"] != "epoch") continue;
      ++epochs;
      REQUIRE(j.contains("val_accuracy"));
      CHECK(j["val_accuracy"].is_null());
      CHECK(j["test_accuracy"].is_number());
    }
    CHECK(epochs == 1);
  }
  // Another objective is unaffected, and the pruner, which then watches val_accuracy, does not take null for NaN.
  const std::string study = dir / "t.jsonl";
  const Run r = run(dir, kTune + " --study " + study + " --trials 4 --pruner median --prune-warmup 0" +
                             " --objective best_test_accuracy --param lr=log:1e-3:1e-2" +
                             " -- --epochs 2 --max-steps 10 --log-interval 5 --workers 0 --device cpu --val-split 0");
  INFO(r.out << r.err);
  CHECK(r.rc == 0);
  for (const auto& t : trial_records(study)) CHECK(t["state"] == "complete");
}

TEST_CASE("tune: a study whose every trial failed exits 1 with the most common reason", "[tune][ember_tune]") {
  if (!have_tune()) return;
  TempDir dir;
  const std::string stub = stub_trainer(dir), study = dir / "s.jsonl";
  const Run r = run(dir, stub_env(dir, "fail") + kTune + " --study " + study + " --trials 3 --mnist-train " + stub +
                             " --param lr=float:1:90");
  INFO(r.out << r.err);
  CHECK(r.rc == 1);
  CHECK(r.err == "ember_tune: error: every trial of " + study +
                     " failed (3); the most common reason (2 of them): exit code 1: stub: error: common\n");
  CHECK_THAT(r.out, Catch::Contains("best: no trial completed"));
  // One that worked once is a result.
  const Run ok = run(dir, stub_env(dir, "ok") + kTune + " --resume " + study + " --trials 4 --mnist-train " + stub);
  CHECK(ok.rc == 0);
}

TEST_CASE("tune: a record that makes no sense is an error naming the study file and the line", "[tune]") {
  TempDir dir;
  StudyConfig c;
  c.space = two_floats();
  c.sampler.seed = 4;
  const std::string path = dir / "s.jsonl";
  {
    StudyFile f = StudyFile::create(path, c, 5);
    TrialRecord t;
    t.number = 0;
    t.state = "complete";
    t.u = {0.25, 0.5};
    t.params = c.space.values_json(t.u);
    t.value = 80;
    t.epochs_run = t.epochs_planned = 2;
    t.seed = 4;
    t.intermediate = {70, NAN};  // written as null
    t.duration_s = t.elapsed_s = 1.5;
    f.append(t);
  }
  const std::string good = read_all(path);
  {
    const StudyFile f = StudyFile::open(path);
    CHECK(f.planned_trials() == 5);
    REQUIRE(f.trials().size() == 1);
    CHECK(std::isnan(f.trials()[0].intermediate[1]));
  }
  const auto rec = nlohmann::json::parse(good.substr(good.find('\n') + 1));
  struct Case {
    std::string key;
    nlohmann::json value;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"number", 5, "trial 5: the number is not below the 5 trials planned when it was recorded"},
      {"number", -1, "\"number\" has the wrong type"},
      {"state", "done", "unknown state 'done'"},
      {"value", nullptr, "trial 1 is complete but has no value"},
      {"value", 180, "the value 180 makes no sense for val_accuracy"},
      {"value", -3, "the value -3 makes no sense"},
      {"u", {1.5, 0.5}, "its point [1.5,0.5] is outside the unit cube"},
      {"u", {0.5}, "trial 1 has 1 coordinates, the study's space 2"},
      {"seed", 9, "trial 1 ran with seed 9, the study's is 4"},
      {"duration_s", -1, "a negative or non-finite time"},
      {"epochs_planned", 0, "epochs run 2, planned 0"},
      {"params", {{"a", 0.9}, {"b", 0.1}}, "are not its point's"},
      {"intermediate", {"x"}, "\"intermediate\" holds \"x\""},
  };
  for (const Case& k : cases) {
    INFO(k.key << " = " << k.value.dump());
    nlohmann::json bad = rec;
    bad["number"] = 1;
    bad[k.key] = k.value;
    write_all(path, good + bad.dump() + "\n");
    CHECK_THROWS_WITH(StudyFile::open(path), Catch::Contains(path + ":3: ") && Catch::Contains(k.message));
  }
  nlohmann::json failed = rec;
  failed["number"] = 1;
  failed["state"] = "failed";
  write_all(path, good + failed.dump() + "\n");
  CHECK_THROWS_WITH(StudyFile::open(path), Catch::Contains(path + ":3: trial 1 failed but has a value (80)"));
  failed["value"] = nullptr;
  write_all(path, good + failed.dump() + "\n");
  CHECK_THROWS_WITH(StudyFile::open(path), Catch::Contains(path + ":3: trial 1 failed but says no reason"));
  failed["error"] = "exit code 1";
  write_all(path, good + failed.dump() + "\n");
  CHECK(StudyFile::open(path).trials().size() == 2);
  // A plan record: checked too, and it moves the bound on trial numbers.
  write_all(path, good + "{\"type\":\"plan\",\"trials\":0}\n");
  CHECK_THROWS_WITH(StudyFile::open(path), Catch::Contains(path + ":3: a plan record plans 0 trials"));
  nlohmann::json later = rec;
  later["number"] = 7;
  write_all(path, good + "{\"type\":\"plan\",\"trials\":10}\n" + later.dump() + "\n");
  CHECK(StudyFile::open(path).planned_trials() == 10);
  write_all(path, good + later.dump() + "\n{\"type\":\"plan\",\"trials\":10}\n");
  CHECK_THROWS_WITH(StudyFile::open(path), Catch::Contains(path + ":3: trial 7: the number is not below the 5"));
}
