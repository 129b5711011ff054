// ember_run (apps/ember_run.cpp) end to end: the launcher is run as a child process with small
// /bin/sh -c scripts as the program, and its exit code, output and the fate of the processes it
// started are checked: the environment of each rank, the "[rank R] " prefix on intact lines, a
// partial last line, the first failure's exit code (a signal death as 128+signal) with the other
// ranks stopped promptly, SIGTERM/SIGINT forwarding, SIGKILL of the launcher (PR_SET_PDEATHSIG),
// a program that cannot be executed, usage errors and --help.
//
// The scripts write their pids into files of the test's temporary directory; the tests check
// those processes are gone, and the directory's destructor SIGKILLs any that are not, so a
// failing test leaves nothing behind. Every test finishes in a few seconds.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

const std::string kLauncher = EMBER_BINARY_DIR "/bin/ember_run";

bool have_launcher() {
  if (fs::exists(kLauncher)) return true;
  WARN("SKIPPED: " << kLauncher << " is not built (build the ember_run target)");
  return false;
}

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// A process that no longer exists or is a zombie nobody reaped yet (the orphans of a SIGKILLed
// launcher go to PID 1, which in a container may never reap them).
bool gone(pid_t pid) {
  if (waitpid(pid, nullptr, WNOHANG) == pid) return true;  // ours to reap (see the PDEATHSIG test)
  if (kill(pid, 0) != 0) return errno == ESRCH;
  const std::string stat = slurp("/proc/" + std::to_string(pid) + "/stat");
  const size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] == 'Z';
}

bool gone_within(pid_t pid, double seconds) {
  const auto t0 = Clock::now();
  while (!gone(pid)) {
    if (since(t0) > seconds) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

// A fresh directory per test; on the way out every pid listed in a file named pid.* is SIGKILLed
// if still alive (only when a test failed is there any).
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "ember_run_test.XXXXXX").string();
    REQUIRE(mkdtemp(tmpl.data()) != nullptr);
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(path_, ec))
      if (e.path().filename().string().rfind("pid.", 0) == 0)
        for (const std::string& l : lines_of(slurp(e.path().string())))
          if (const pid_t pid = static_cast<pid_t>(std::atol(l.c_str())); pid > 1 && !gone(pid)) kill(pid, SIGKILL);
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

  // Waits until `name` exists with content (written by a script as tmp + mv) and returns its pid.
  pid_t pid_from(const std::string& name, double seconds = 5) const {
    const auto t0 = Clock::now();
    while (since(t0) < seconds) {
      const std::string text = slurp(*this / name);
      if (!text.empty() && text.back() == '\n') return static_cast<pid_t>(std::atol(text.c_str()));
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    FAIL("no pid in " << (*this / name) << " after " << seconds << " s");
    return -1;
  }

 private:
  std::string path_;
};

struct Result {
  int code = -1;
  int signal = 0;
  double seconds = 0;
  std::string out, err, cmd;
};

#define DESCRIBE(r)                                                                                       \
  "command: " << (r).cmd << "\nexit " << (r).code << " signal " << (r).signal << " after " << (r).seconds \
              << " s\n--- stdout ---\n"                                                                   \
              << (r).out << "--- stderr ---\n"                                                            \
              << (r).err

// ember_run started with `args`, stdout and stderr into files of `dir`, stdin from /dev/null,
// default signal dispositions and an empty signal mask.
class Launch {
 public:
  Launch(const TempDir& dir, const std::vector<std::string>& args, const std::vector<std::string>& extra_env = {})
      : out_(dir / "launcher.out"), err_(dir / "launcher.err") {
    cmd_ = "ember_run";
    std::vector<std::string> argv_s = {kLauncher};
    for (const std::string& a : args) {
      argv_s.push_back(a);
      cmd_ += " '" + a + "'";
    }
    std::vector<char*> argv, envp;
    for (std::string& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::vector<std::string> env_s = extra_env;
    for (char** e = environ; *e; ++e) env_s.emplace_back(*e);
    for (std::string& e : env_s) envp.push_back(e.data());
    envp.push_back(nullptr);

    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, out_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&fa, 2, err_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &all);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    t0_ = Clock::now();
    const int rc = posix_spawn(&pid_, kLauncher.c_str(), &fa, &attr, argv.data(), envp.data());
    posix_spawnattr_destroy(&attr);
    posix_spawn_file_actions_destroy(&fa);
    REQUIRE(rc == 0);
  }
  ~Launch() {
    if (pid_ > 0) {  // a test that failed before wait(): do not leave the launcher behind
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  Launch(const Launch&) = delete;
  Launch& operator=(const Launch&) = delete;

  pid_t pid() const { return pid_; }

  // Waits for the launcher; one that runs longer than `limit_s` is SIGKILLed and the test fails.
  Result wait(double limit_s = 10) {
    Result r;
    r.cmd = cmd_;
    int status = 0;
    for (;;) {
      const pid_t w = waitpid(pid_, &status, WNOHANG);
      REQUIRE(w >= 0);
      if (w == pid_) break;
      if (since(t0_) > limit_s) {
        kill(pid_, SIGKILL);
        waitpid(pid_, &status, 0);
        pid_ = -1;
        r.out = slurp(out_);
        r.err = slurp(err_);
        FAIL("still running after " << limit_s << " s (killed)\n" << DESCRIBE(r));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    pid_ = -1;
    r.seconds = since(t0_);
    if (WIFEXITED(status)) r.code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
    r.out = slurp(out_);
    r.err = slurp(err_);
    return r;
  }

 private:
  pid_t pid_ = -1;
  std::string out_, err_, cmd_;
  Clock::time_point t0_;
};

Result run(const TempDir& dir, const std::vector<std::string>& args, const std::vector<std::string>& env = {}) {
  Launch l(dir, args, env);
  return l.wait();
}

// `ember_run --nproc-per-node n [extra...] -- /bin/sh -c script`
std::vector<std::string> sh(int n, const std::string& script, const std::vector<std::string>& extra = {}) {
  std::vector<std::string> a = {"--nproc-per-node", std::to_string(n)};
  a.insert(a.end(), extra.begin(), extra.end());
  for (const char* s : {"--", "/bin/sh", "-c"}) a.emplace_back(s);
  a.push_back(script);
  return a;
}

// Shell snippet: write this shell's pid into DIR/pid.$RANK (atomically: tmp + mv).
std::string write_pid(const TempDir& dir) {
  return "echo $$ > \"" + dir.path() + "/tmp.$RANK\" && mv \"" + dir.path() + "/tmp.$RANK\" \"" + dir.path() +
         "/pid.$RANK\"; ";
}

// "[rank R] rest" -> {R, rest}; R = -1 when the line has no prefix.
std::pair<int, std::string> split_prefix(const std::string& line) {
  static const std::regex re(R"(\[rank (\d+)\] (.*))");
  std::smatch m;
  if (!std::regex_match(line, m, re)) return {-1, line};
  return {std::stoi(m[1]), m[2]};
}

std::map<std::string, std::string> key_values(const std::string& text) {
  std::map<std::string, std::string> kv;
  std::istringstream in(text);
  for (std::string tok; in >> tok;)
    if (const size_t eq = tok.find('='); eq != std::string::npos) kv[tok.substr(0, eq)] = tok.substr(eq + 1);
  return kv;
}

// A token file in `dir` with the given mode (0600: as ember_run wants it).
std::string token_file(const TempDir& dir, const std::string& name, const std::string& token, fs::perms mode) {
  const std::string path = dir / name;
  std::ofstream(path) << token << "\n";
  fs::permissions(path, mode);
  return path;
}
const fs::perms kOwnerOnly = fs::perms::owner_read | fs::perms::owner_write;

const std::string kPrintEnv =
    "echo RANK=$RANK WORLD_SIZE=$WORLD_SIZE LOCAL_RANK=$LOCAL_RANK LOCAL_WORLD_SIZE=$LOCAL_WORLD_SIZE "
    "MASTER_ADDR=$MASTER_ADDR MASTER_PORT=$MASTER_PORT GROUP_RANK=$GROUP_RANK NODE_RANK=$NODE_RANK "
    "EMBER_RUN=$EMBER_RUN INHERITED=$EMBER_RUN_TEST_INHERITED";

// rank -> its variables, from one line per rank
std::map<int, std::map<std::string, std::string>> env_by_rank(const Result& r) {
  std::map<int, std::map<std::string, std::string>> by_rank;
  for (const std::string& line : lines_of(r.out)) {
    auto [rank, rest] = split_prefix(line);
    INFO(DESCRIBE(r));
    REQUIRE(rank >= 0);
    REQUIRE(by_rank.count(rank) == 0);
    by_rank[rank] = key_values(rest);
  }
  return by_rank;
}

}  // namespace

TEST_CASE("ember_run: each rank gets RANK, WORLD_SIZE, LOCAL_RANK and the rest of the torchrun environment",
          "[ember_run]") {
  if (!have_launcher()) return;
  TempDir dir;
  // RANK and MASTER_PORT already set in the launcher's environment are replaced, the rest inherited
  const Result r = run(dir, sh(3, kPrintEnv), {"RANK=99", "MASTER_PORT=1", "EMBER_RUN_TEST_INHERITED=yes"});
  INFO(DESCRIBE(r));
  REQUIRE(r.code == 0);
  CHECK(r.err.empty());
  const auto by_rank = env_by_rank(r);
  REQUIRE(by_rank.size() == 3);
  const std::string port = by_rank.at(0).at("MASTER_PORT");
  for (int rank = 0; rank < 3; ++rank) {
    const auto& kv = by_rank.at(rank);
    CHECK(kv.at("RANK") == std::to_string(rank));
    CHECK(kv.at("WORLD_SIZE") == "3");
    CHECK(kv.at("LOCAL_RANK") == std::to_string(rank));
    CHECK(kv.at("LOCAL_WORLD_SIZE") == "3");
    CHECK(kv.at("GROUP_RANK") == "0");
    CHECK(kv.at("NODE_RANK") == "0");
    CHECK(kv.at("MASTER_ADDR") == "127.0.0.1");
    CHECK(kv.at("MASTER_PORT") == port);  // one port for the whole job
    CHECK(kv.at("EMBER_RUN") == "1");
    CHECK(kv.at("INHERITED") == "yes");
  }
  // --nnodes 1 without --master: a free port, not the fixed default
  const int p = std::stoi(port);
  CHECK(p >= 1024);
  CHECK(p <= 65535);
  CHECK(p != 1);
}

TEST_CASE("ember_run: on node K of M, RANK is K*N+LOCAL_RANK and --master sets MASTER_ADDR and MASTER_PORT",
          "[ember_run]") {
  if (!have_launcher()) return;
  TempDir dir;
  {
    const Result r = run(dir, sh(2, kPrintEnv, {"--nnodes", "3", "--node-rank", "2", "--master", "node0.example:1234"}),
                         {"EMBER_JOB_TOKEN=a-shared-job-token-of-the-test"});
    INFO(DESCRIBE(r));
    REQUIRE(r.code == 0);
    const auto by_rank = env_by_rank(r);
    REQUIRE(by_rank.size() == 2);
    for (int local = 0; local < 2; ++local) {
      const auto& kv = by_rank.at(4 + local);
      CHECK(kv.at("RANK") == std::to_string(4 + local));
      CHECK(kv.at("WORLD_SIZE") == "6");
      CHECK(kv.at("LOCAL_RANK") == std::to_string(local));
      CHECK(kv.at("LOCAL_WORLD_SIZE") == "2");
      CHECK(kv.at("GROUP_RANK") == "2");
      CHECK(kv.at("NODE_RANK") == "2");
      CHECK(kv.at("MASTER_ADDR") == "node0.example");
      CHECK(kv.at("MASTER_PORT") == "1234");
    }
  }
  {  // several nodes and no --master: the documented default 127.0.0.1:29500; --name=value works
    const std::string tf = token_file(dir, "token", "a-shared-job-token-of-the-test", kOwnerOnly);
    const Result r = run(dir, sh(1, kPrintEnv, {"--nnodes=2", "--node-rank=0", "--token-file=" + tf}));
    INFO(DESCRIBE(r));
    REQUIRE(r.code == 0);
    const auto by_rank = env_by_rank(r);
    REQUIRE(by_rank.size() == 1);
    CHECK(by_rank.at(0).at("WORLD_SIZE") == "2");
    CHECK(by_rank.at(0).at("MASTER_ADDR") == "127.0.0.1");
    CHECK(by_rank.at(0).at("MASTER_PORT") == "29500");
  }
}

TEST_CASE("ember_run: every line of stdout and stderr is prefixed with its rank and never mixed with another",
          "[ember_run]") {
  if (!have_launcher()) return;
  TempDir dir;
  constexpr int kRanks = 3, kLines = 300, kWidth = 2000;
  // long lines, written as fast as the shell can, on both streams at once
  const std::string script = "x=$(printf '%0" + std::to_string(kWidth) + "d' 0); i=0; while [ $i -lt " +
                             std::to_string(kLines) +
                             " ]; do echo \"out $RANK $i $x\"; echo \"err $RANK $i $x\" >&2; i=$((i+1)); done";
  const Result r = run(dir, sh(kRanks, script));
  INFO("exit " << r.code << " after " << r.seconds << " s, " << r.out.size() << " + " << r.err.size() << " bytes");
  REQUIRE(r.code == 0);
  const std::string zeros(kWidth, '0');
  for (const auto& [stream, text] : {std::pair<std::string, std::string>{"out", r.out}, {"err", r.err}}) {
    std::map<int, int> next;  // rank -> next line number expected
    int bad = 0;
    std::string first_bad;
    const auto lines = lines_of(text);
    for (const std::string& line : lines) {
      auto [rank, rest] = split_prefix(line);
      const std::string want = stream + " " + std::to_string(rank) + " " + std::to_string(next[rank]) + " " + zeros;
      if (rank < 0 || rest != want) {
        if (bad++ == 0) first_bad = line.substr(0, 120);
      } else {
        ++next[rank];
      }
    }
    INFO(stream << ": first bad line: " << first_bad);
    CHECK(bad == 0);
    CHECK(lines.size() == static_cast<size_t>(kRanks * kLines));
    for (int rank = 0; rank < kRanks; ++rank) CHECK(next[rank] == kLines);
  }
}

TEST_CASE(
    "ember_run: a last line without a newline is printed with its prefix, a line written in pieces stays one line",
    "[ember_run]") {
  if (!have_launcher()) return;
  TempDir dir;
  const Result r =
      run(dir, sh(2, "printf 'first\\nhalf'; sleep 0.2; printf ' and half\\nno newline'; printf 'err partial' >&2"));
  INFO(DESCRIBE(r));
  REQUIRE(r.code == 0);
  std::map<int, std::vector<std::string>> out, err;
  for (const std::string& l : lines_of(r.out)) out[split_prefix(l).first].push_back(split_prefix(l).second);
  for (const std::string& l : lines_of(r.err)) err[split_prefix(l).first].push_back(split_prefix(l).second);
  for (int rank = 0; rank < 2; ++rank) {
    CHECK(out[rank] == std::vector<std::string>{"first", "half and half", "no newline"});
    CHECK(err[rank] == std::vector<std::string>{"err partial"});
  }
  CHECK(out.count(-1) == 0);
  CHECK(err.count(-1) == 0);
  CHECK(r.out.back() == '\n');
  CHECK(r.err.back() == '\n');
}

TEST_CASE(
    "ember_run: the first failure's exit code is returned and the other ranks, with their children, are stopped at "
    "once",
    "[ember_run]") {
  if (!have_launcher()) return;
  TempDir dir;
  const std::string d = "\"" + dir.path() + "\"";
  // ranks 0 and 2: a background sleep (its pid in pid.sleep.$RANK), then wait; rank 1 fails once they run
  const std::string script = "if [ $RANK = 1 ]; then while [ ! -f " + d + "/pid.0 ] || [ ! -f " + d +
                             "/pid.2 ]; do sleep 0.02; done; "
                             "echo failing; exit 3; fi; sleep 60 & echo $! > " +
                             d + "/pid.sleep.$RANK; " + write_pid(dir) + "wait";
  const Result r = run(dir, sh(3, script));
  INFO(DESCRIBE(r));
  CHECK(r.code == 3);
  CHECK(r.seconds < 4);  // SIGTERM ends them: no waiting for the 5 s grace period
  CHECK(r.out == "[rank 1] failing\n");
  CHECK(r.err.find("ember_run: rank 1 exited with code 3; stopping the other 2 processes") != std::string::npos);
  CHECK(lines_of(r.err).size() == 1);
  for (const char* name : {"pid.0", "pid.2", "pid.sleep.0", "pid.sleep.2"}) {
    const pid_t pid = static_cast<pid_t>(std::atol(slurp(dir / name).c_str()));
    INFO(name << " = " << pid);
    REQUIRE(pid > 1);
    CHECK(gone_within(pid, 2));
  }
}

TEST_CASE("ember_run: ranks that ignore SIGTERM get SIGKILL after --grace-seconds", "[ember_run]") {
  if (!have_launcher()) return;
  TempDir dir;
  const std::string d = "\"" + dir.path() + "\"";
  const std::string script = "trap '' TERM; if [ $RANK = 1 ]; then while [ ! -f " + d +
                             "/pid.0 ]; do sleep 0.02; done; exit 4; fi; " + write_pid(dir) + "exec sleep 60";
  const Result r = run(dir, sh(2, script, {"--grace-seconds", "0.5"}));
  INFO(DESCRIBE(r));
  CHECK(r.code == 4);
  CHECK(r.seconds >= 0.5);
  CHECK(r.seconds < 4);
  CHECK(r.err.find("rank 1 exited with code 4; stopping the other 1 process (SIGTERM, SIGKILL after 0.5 s)") !=
        std::string::npos);
  CHECK(gone_within(dir.pid_from("pid.0"), 2));
}

TEST_CASE("ember_run: a rank killed by a signal makes the launcher exit 128+signal", "[ember_run]") {
  if (!have_launcher()) return;
  TempDir dir;
  const std::string d = "\"" + dir.path() + "\"";
  const std::string script = "if [ $RANK = 1 ]; then while [ ! -f " + d +
                             "/pid.0 ]; do sleep 0.02; done; kill -KILL $$; fi; " + write_pid(dir) + "exec sleep 60";
  const Result r = run(dir, sh(2, script));
  INFO(DESCRIBE(r));
  CHECK(r.code == 128 + SIGKILL);
  CHECK(r.seconds < 4);
  CHECK(r.err.find("ember_run: rank 1 was killed by signal 9") != std::string::npos);
  CHECK(gone_within(dir.pid_from("pid.0"), 2));
}

TEST_CASE("ember_run: SIGTERM to the launcher is forwarded to every rank and it exits 128+SIGTERM", "[ember_run]") {
  if (!have_launcher()) return;
  TempDir dir;
  const std::string d = "\"" + dir.path() + "\"";
  const std::string script =
      "trap 'echo $RANK > " + d + "/term.$RANK; exit 0' TERM; " + write_pid(dir) + "while :; do sleep 0.05; done";
  Launch l(dir, sh(2, script));
  const pid_t p0 = dir.pid_from("pid.0"), p1 = dir.pid_from("pid.1");
  REQUIRE(kill(l.pid(), SIGTERM) == 0);
  const Result r = l.wait(5);
  INFO(DESCRIBE(r));
  CHECK(r.code == 128 + SIGTERM);
  CHECK(r.seconds < 4);
  CHECK(r.err.find("ember_run: got SIGTERM, forwarded it to 2 processes") != std::string::npos);
  CHECK(slurp(dir / "term.0") == "0\n");  // the traps ran
  CHECK(slurp(dir / "term.1") == "1\n");
  CHECK(gone_within(p0, 2));
  CHECK(gone_within(p1, 2));
}

TEST_CASE("ember_run: SIGINT is forwarded, a second SIGINT kills the ranks", "[ember_run]") {
  if (!have_launcher()) return;
  TempDir dir;
  const std::string d = "\"" + dir.path() + "\"";
  // the trap notes the SIGINT and carries on (the loop's foreground sleep dies from it, the loop goes on)
  const std::string script =
      "trap 'echo $RANK > " + d + "/int.$RANK' INT; " + write_pid(dir) + "while :; do sleep 0.05; done";
  Launch l(dir, sh(2, script));
  const pid_t p0 = dir.pid_from("pid.0"), p1 = dir.pid_from("pid.1");
  REQUIRE(kill(l.pid(), SIGINT) == 0);
  const auto t0 = Clock::now();
  while ((!fs::exists(dir / "int.0") || !fs::exists(dir / "int.1")) && since(t0) < 3)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK(fs::exists(dir / "int.0"));
  CHECK(fs::exists(dir / "int.1"));
  CHECK(!gone(p0));  // one SIGINT: no SIGKILL, they are still running
  CHECK(!gone(p1));
  REQUIRE(kill(l.pid(), SIGINT) == 0);
  const Result r = l.wait(5);
  INFO(DESCRIBE(r));
  CHECK(r.code == 128 + SIGINT);
  CHECK(r.err.find("ember_run: got SIGINT, forwarded it to 2 processes") != std::string::npos);
  CHECK(r.err.find("second SIGINT") != std::string::npos);
  CHECK(gone_within(p0, 2));
  CHECK(gone_within(p1, 2));
}

TEST_CASE("ember_run: when the launcher is SIGKILLed its processes and their children die too", "[ember_run]") {
  if (!have_launcher()) return;
  TempDir dir;
  // the orphans come to this process (not to PID 1, which in a container may never reap them)
  struct Subreaper {
    Subreaper() { prctl(PR_SET_CHILD_SUBREAPER, 1); }
    ~Subreaper() { prctl(PR_SET_CHILD_SUBREAPER, 0); }
  } subreaper;
  // each rank: a child of its own (pid.sleep.$RANK), whom PR_SET_PDEATHSIG does not reach
  const std::string d = "\"" + dir.path() + "\"";
  Launch l(dir, sh(2, "sleep 60 & echo $! > " + d + "/tmp.sleep.$RANK && mv " + d + "/tmp.sleep.$RANK " + d +
                          "/pid.sleep.$RANK; " + write_pid(dir) + "wait"));
  const pid_t p0 = dir.pid_from("pid.0"), p1 = dir.pid_from("pid.1");
  const pid_t c0 = dir.pid_from("pid.sleep.0"), c1 = dir.pid_from("pid.sleep.1");
  REQUIRE(kill(l.pid(), SIGKILL) == 0);
  const Result r = l.wait(5);
  CHECK(r.signal == SIGKILL);
  CHECK(gone_within(p0, 3));
  CHECK(gone_within(p1, 3));
  CHECK(gone_within(c0, 3));
  CHECK(gone_within(c1, 3));
}

TEST_CASE("ember_run: a program that is not found exits 127, one that cannot be executed 126, with a clear message",
          "[ember_run]") {
  if (!have_launcher()) return;
  TempDir dir;
  {
    const Result r = run(dir, {"--nproc-per-node", "2", "--", dir / "no-such-program", "arg"});
    INFO(DESCRIBE(r));
    CHECK(r.code == 127);
    CHECK(r.err == "ember_run: cannot execute '" + (dir / "no-such-program") + "': No such file or directory\n");
    CHECK(r.out.empty());
  }
  {  // looked up in PATH
    const Result r = run(dir, {"--", "ember-run-test-no-such-program"});
    INFO(DESCRIBE(r));
    CHECK(r.code == 127);
    CHECK(r.err == "ember_run: cannot execute 'ember-run-test-no-such-program': No such file or directory\n");
  }
  {  // exists, not executable
    std::ofstream(dir / "not-executable") << "#!/bin/sh\necho hi\n";
    fs::permissions(dir / "not-executable", fs::perms::owner_read | fs::perms::owner_write);
    const Result r = run(dir, {"--nproc-per-node", "3", "--", dir / "not-executable"});
    INFO(DESCRIBE(r));
    CHECK(r.code == 126);
    CHECK(r.err == "ember_run: cannot execute '" + (dir / "not-executable") + "': Permission denied\n");
  }
}

TEST_CASE("ember_run: usage errors exit 2 with a message and start nothing", "[ember_run]") {
  if (!have_launcher()) return;
  TempDir dir;
  const std::string marker = dir / "ran";
  const std::vector<std::string> program = {"/bin/sh", "-c", "touch '" + marker + "'"};
  struct Case {
    std::vector<std::string> args;
    std::string message;
    bool with_program = true;
  };
  const std::string shared = token_file(dir, "shared", "a-token-others-can-read",
                                        fs::perms::owner_read | fs::perms::owner_write | fs::perms::others_read);
  const std::string short_token = token_file(dir, "short", "guessable", kOwnerOnly);
  const std::string good_token = token_file(dir, "good", "a-secret-job-token-0123", kOwnerOnly);
  const std::vector<Case> cases = {
      {{}, "missing '--' before the program", false},
      {{"--nnodes", "2", "--"}, "a job on several nodes needs the same token on every node"},
      {{"--token-file", dir / "missing", "--"}, "--token-file '" + (dir / "missing") + "': No such file"},
      {{"--token-file", shared, "--"},
       "--token-file '" + shared + "' is readable or writable by other users (mode 604)"},
      {{"--token-file", short_token, "--"}, "--token-file '" + short_token + "': its first line has 9 characters"},
      {{"--token-file", dir.path(), "--"},
       "--token-file '" + dir.path() + "' is a directory"},  // before: "0 characters"
      {{"--nproc-per-node", "2", "/bin/true"}, "missing '--' before the program ('/bin/true')", false},
      {{"--nproc-per-node", "2"}, "missing '--' before the program", false},
      {{"--nproc-per-node", "2", "--"}, "no program after '--'", false},
      {{"--nproc-per-node"}, "--nproc-per-node needs a value", false},
      {{"--nproc-per-node", "0", "--"}, "--nproc-per-node expects an integer in [1, "},
      {{"--nproc-per-node", "two", "--"}, "--nproc-per-node expects an integer"},
      {{"--nproc-per-node", "2x", "--"}, "--nproc-per-node expects an integer"},
      {{"--nnodes", "0", "--"}, "--nnodes expects an integer"},
      {{"--nnodes", "2", "--node-rank", "2", "--"}, "--node-rank 2 is out of range for --nnodes 2"},
      {{"--node-rank", "1", "--"}, "--node-rank 1 is out of range for --nnodes 1"},
      {{"--node-rank", "-1", "--"}, "--node-rank expects an integer"},
      {{"--master", "nohost", "--"}, "--master expects HOST:PORT"},
      {{"--master", ":29500", "--"}, "--master expects HOST:PORT"},
      {{"--master", "host:", "--"}, "--master expects HOST:PORT"},
      {{"--master", "host:0", "--"}, "--master expects HOST:PORT"},
      {{"--master", "host:65536", "--"}, "--master expects HOST:PORT"},
      {{"--master", "host:80x", "--"}, "--master expects HOST:PORT"},
      {{"--grace-seconds", "-1", "--"}, "--grace-seconds expects a number"},
      {{"--grace-seconds", "soon", "--"}, "--grace-seconds expects a number"},
      {{"--bogus", "1", "--"}, "unknown option '--bogus'"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = c.args;
    if (c.with_program) args.insert(args.end(), program.begin(), program.end());
    const Result r = run(dir, args);
    INFO(DESCRIBE(r));
    CHECK(r.code == 2);
    CHECK(r.out.empty());
    CHECK(r.err.rfind("ember_run: " + c.message, 0) == 0);
    CHECK(r.err.find("usage: ember_run [options] -- program [args...]") != std::string::npos);
  }
  CHECK(!fs::exists(marker));
  // the same program with valid options does run (the cases above fail for their options only)
  const Result ok =
      run(dir, {"--nproc-per-node", "2", "--nnodes", "2", "--node-rank", "1", "--master", "[::1]:29400",
                "--grace-seconds", "1.5", "--token-file", good_token, "--", "/bin/sh", "-c", "touch '" + marker + "'"});
  INFO(DESCRIBE(ok));
  CHECK(ok.code == 0);
  CHECK(fs::exists(marker));
}

TEST_CASE(
    "ember_run: each job gets a random token of its own, --token-file and an inherited one are passed on, never shown",
    "[ember_run]") {
  if (!have_launcher()) return;
  TempDir dir;
  // the token and the command line each rank sees (the token must not be on it)
  const std::string script = "echo TOKEN=$EMBER_JOB_TOKEN; tr '\\0' ' ' < /proc/$$/cmdline; echo";
  auto tokens = [&](const Result& r) {
    INFO(DESCRIBE(r));
    REQUIRE(r.code == 0);
    std::map<int, std::string> t;
    std::vector<std::string> cmdlines;
    for (const std::string& line : lines_of(r.out)) {
      auto [rank, rest] = split_prefix(line);
      if (rest.rfind("TOKEN=", 0) == 0) t[rank] = rest.substr(6);
      else cmdlines.push_back(rest);
    }
    REQUIRE(t.size() == 2);
    CHECK(t.at(0) == t.at(1));
    CHECK(cmdlines.size() == 2);
    for (const std::string& c : cmdlines) CHECK((t.at(0).empty() || c.find(t.at(0)) == std::string::npos));
    return t.at(0);
  };
  const Result a = run(dir, sh(2, script)), b = run(dir, sh(2, script));
  const std::string ta = tokens(a), tb = tokens(b);
  CHECK(std::regex_match(ta, std::regex("[0-9a-f]{64}")));
  CHECK(ta != tb);  // 256 random bits a job
  for (const Result* r : {&a, &b}) CHECK(r->err.find(ta) == std::string::npos);
  // --token-file: its first line; an inherited EMBER_JOB_TOKEN: unchanged; EMBER_JOB_TOKEN_FILE: left to the program
  const std::string tf = token_file(dir, "token", "from-the-token-file-0123", kOwnerOnly);
  CHECK(tokens(run(dir, sh(2, script, {"--token-file", tf}))) == "from-the-token-file-0123");
  CHECK(tokens(run(dir, sh(2, script), {"EMBER_JOB_TOKEN=inherited-token-0123456"})) == "inherited-token-0123456");
  CHECK(tokens(run(dir, sh(2, script), {"EMBER_JOB_TOKEN_FILE=" + tf})).empty());
}

TEST_CASE("ember_run: --help exits 0 and documents the options and the environment", "[ember_run]") {
  if (!have_launcher()) return;
  TempDir dir;
  const Result r = run(dir, {"--help"});
  INFO(DESCRIBE(r));
  CHECK(r.code == 0);
  CHECK(r.err.empty());
  for (const char* word : {"--nproc-per-node",  "--nnodes",         "--node-rank",  "--master",    "--grace-seconds",
                           "--token-file",      "EMBER_JOB_TOKEN=", "RANK=",        "WORLD_SIZE=", "LOCAL_RANK=",
                           "LOCAL_WORLD_SIZE=", "MASTER_ADDR=",     "MASTER_PORT=", "GROUP_RANK=", "NODE_RANK=",
                           "EMBER_RUN=1",       "free port",        "[rank ",       "128+signal",  "127"})
    CHECK(r.out.find(word) != std::string::npos);
  // --help after '--' belongs to the program
  const Result p = run(dir, {"--", "/bin/sh", "-c", "echo \"$0 $1\"", "prog", "--help"});
  INFO(DESCRIBE(p));
  CHECK(p.code == 0);
  CHECK(p.out == "[rank 0] prog --help\n");
}
