// Output files (Note [output targets] in io/atomic_file.h, Note [side outputs] in
// apps/mnist_train/trainer.h): what the writers do with symlinks, devices, FIFOs, directories and
// stale temporary files; and mnist_train's one policy for every output on a full disk, a write
// error in the middle of a run, and SIGINT/SIGTERM.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <thread>

#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "kernels/functional.h"
#include "logging/tensorboard.h"
#include "tests/mnist_train_util.h"

using namespace ember;
using namespace ember::testing::app;

namespace {

std::vector<std::string> dir_entries(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

bool is_char_device(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 && S_ISCHR(st.st_mode);
}

bool is_symlink(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode);
}

// Lines of stderr that start with "mnist_train: error: " and contain `needle`.
int error_lines_with(const std::string& err, const std::string& needle) {
  int n = 0;
  for (const std::string& l : lines_of(err))
    if (l.rfind("mnist_train: error: ", 0) == 0 && l.find(needle) != std::string::npos) ++n;
  return n;
}

// A child that runs in the background (for signals).
struct Child {
  pid_t pid = -1;
  std::string out_path, err_path;
};

Child spawn_app(const std::vector<std::string>& args, const std::string& dir, const std::string& tag,
                const std::string& binary = kBinary) {
  Child c;
  c.out_path = dir + "/" + tag + ".out";
  c.err_path = dir + "/" + tag + ".err";
  std::vector<std::string> argv_s = {binary};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, c.out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, c.err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  int rc = posix_spawn(&c.pid, binary.c_str(), &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  REQUIRE(rc == 0);
  return c;
}

// Waits for the child (killing it after `limit_s`): the exit code, or -signal.
int wait_child(const Child& c, double limit_s) {
  const auto t0 = std::chrono::steady_clock::now();
  int status = 0;
  for (;;) {
    pid_t w = waitpid(c.pid, &status, WNOHANG);
    REQUIRE(w >= 0);
    if (w == c.pid) break;
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > limit_s) {
      kill(c.pid, SIGKILL);
      waitpid(c.pid, &status, 0);
      FAIL("mnist_train still running after " << limit_s << " s (killed)");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
}

}  // namespace

// ---- the writers ----

TEST_CASE("outputs: a symlink's target is written and the link stays a link", "[outputs]") {
  testing::TempDir tmp;
  fs::create_directories(tmp.file("real"));
  // a relative link to an existing file, through a chain of two links
  testing::write_bytes(tmp.file("real/a.txt"), {'o', 'l', 'd'});
  fs::create_symlink("real/a.txt", tmp.file("link1"));
  fs::create_symlink("link1", tmp.file("link2"));
  io::write_file_atomic(tmp.file("link2"), "new");
  CHECK(is_symlink(tmp.file("link1")));
  CHECK(is_symlink(tmp.file("link2")));
  CHECK(read_file(tmp.file("real/a.txt")) == "new");
  CHECK(dir_entries(tmp.file("real")) == std::vector<std::string>{"a.txt"});  // no temporary file left
  // a dangling link: its target is created
  fs::create_symlink(tmp.file("real/b.txt"), tmp.file("dangling"));
  io::write_file_atomic(tmp.file("dangling"), "created");
  CHECK(is_symlink(tmp.file("dangling")));
  CHECK(read_file(tmp.file("real/b.txt")) == "created");
  // the same for a checkpoint and for an append file
  fs::create_symlink("real/c.safetensors", tmp.file("ck"));
  io::save_safetensors(tmp.file("ck"), TensorDict{{"w", full({4}, 1.0)}});
  CHECK(is_symlink(tmp.file("ck")));
  CHECK(io::load_safetensors(tmp.file("real/c.safetensors")).tensors.at("w").to_vector<float>()[3] == 1.0f);
  fs::create_symlink("real/d.jsonl", tmp.file("log"));
  {
    io::AppendFile f(tmp.file("log"));
    f.append("{}\n");
  }
  CHECK(is_symlink(tmp.file("log")));
  CHECK(read_file(tmp.file("real/d.jsonl")) == "{}\n");
  // a loop is an error, not a hang
  fs::create_symlink("loop_b", tmp.file("loop_a"));
  fs::create_symlink("loop_a", tmp.file("loop_b"));
  CHECK_THROWS_WITH(io::write_file_atomic(tmp.file("loop_a"), "x"),
                    Catch::Contains("too many levels of symbolic links"));
}

TEST_CASE("outputs: devices and FIFOs are written through and never replaced", "[outputs]") {
  testing::TempDir tmp;
  // /dev/null: written through (as root, a rename would replace the system's /dev/null)
  REQUIRE(is_char_device("/dev/null"));
  io::write_file_atomic("/dev/null", "discarded");
  io::save_safetensors("/dev/null", TensorDict{{"w", full({4}, 1.0)}});
  {
    io::AppendFile f("/dev/null");
    f.append("line\n");
  }
  CHECK(is_char_device("/dev/null"));
  {
    io::AtomicFile f("/dev/null");
    CHECK(f.writes_through());
    CHECK(f.temp_path().empty());
  }
  // /dev/full: the write error, naming the device
  if (is_char_device("/dev/full")) {
    CHECK_THROWS_WITH(io::write_file_atomic("/dev/full", "x"),
                      Catch::Contains("/dev/full") && Catch::Contains("No space left"));
    io::AppendFile f("/dev/full");
    CHECK_THROWS_WITH(f.append("x\n"), Catch::Contains("/dev/full"));
    CHECK(is_char_device("/dev/full"));
  } else {
    WARN("SKIPPED: no /dev/full on this machine");
  }
  // a FIFO with a reader gets every byte; the FIFO stays a FIFO
  const std::string fifo = tmp.file("pipe");
  REQUIRE(::mkfifo(fifo.c_str(), 0644) == 0);
  std::string got;
  std::thread reader([&] {
    std::ifstream in(fifo, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    got = s.str();
  });
  // the reader opens the FIFO in its own time: retry until it is there
  std::string payload(100000, 'z');
  bool written = false;
  for (int i = 0; i < 500 && !written; ++i) {
    try {
      io::write_file_atomic(fifo, payload);
      written = true;
    } catch (const Error& e) {
      REQUIRE_THAT(e.what(), Catch::Contains("no reader"));
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  reader.join();
  CHECK(written);
  CHECK(got == payload);
  struct stat st {};
  REQUIRE(::lstat(fifo.c_str(), &st) == 0);
  CHECK(S_ISFIFO(st.st_mode));
  // without a reader: a clear error at once (not a hang)
  CHECK_THROWS_WITH(io::write_file_atomic(fifo, "x"), Catch::Contains("FIFO with no reader") && Catch::Contains(fifo));
  CHECK(dir_entries(tmp.path()) == std::vector<std::string>{"pipe"});
}

TEST_CASE("outputs: a directory as the target is an error naming the path", "[outputs]") {
  testing::TempDir tmp;
  fs::create_directories(tmp.file("d"));
  fs::create_symlink("d", tmp.file("to_d"));
  for (const std::string& p : {tmp.file("d"), tmp.file("to_d")}) {
    INFO(p);
    CHECK_THROWS_WITH(io::write_file_atomic(p, "x"),
                      Catch::Contains(tmp.file("d")) && Catch::Contains("is a directory"));
    CHECK_THROWS_WITH(io::save_safetensors(p, TensorDict{{"w", full({1}, 1.0)}}), Catch::Contains("is a directory"));
    io::AppendFile f(p);
    CHECK_THROWS_WITH(f.append("x\n"), Catch::Contains("is a directory"));
  }
  CHECK(fs::is_directory(tmp.file("d")));
  CHECK(is_symlink(tmp.file("to_d")));
  CHECK(fs::is_empty(tmp.file("d")));
}

TEST_CASE("outputs: the next successful save removes the temporary files of a killed one", "[outputs]") {
  testing::TempDir tmp;
  const std::string path = tmp.file("ck.safetensors");
  TensorDict v1{{"w", full({1000}, 1.0)}}, v2{{"w", full({1000}, 2.0)}};
  io::save_safetensors(path, v1);
  for (int k = 0; k < 2; ++k) {  // two killed saves, two stale files
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      io::set_write_fault_for_testing(io::WriteFault::kExit, 2000);
      io::save_safetensors(path, v2);
      _exit(0);
    }
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    REQUIRE(WIFEXITED(status));
    REQUIRE(WEXITSTATUS(status) == 99);
  }
  // another target's temporary file and a file that only looks similar are not touched
  testing::write_bytes(tmp.file(".other.safetensors.tmp.abcdef"), {1});
  testing::write_bytes(tmp.file(".ck.safetensors.tmp.toolong7"), {1});
  REQUIRE(dir_entries(tmp.path()).size() == 5);
  // a save in progress (its temporary file locked) survives another writer's commit
  auto live = std::make_unique<io::AtomicFile>(path);
  live->write("x", 1);
  const std::string live_tmp = live->temp_path();
  io::save_safetensors(path, v2);
  CHECK(io::load_safetensors(path).tensors.at("w").to_vector<float>()[0] == 2.0f);
  std::vector<std::string> expected = {".ck.safetensors.tmp.toolong7", ".other.safetensors.tmp.abcdef",
                                       fs::path(live_tmp).filename().string(), "ck.safetensors"};
  std::sort(expected.begin(), expected.end());
  CHECK(dir_entries(tmp.path()) == expected);
  live.reset();  // abandoned: removes its own file
  CHECK(dir_entries(tmp.path()) ==
        std::vector<std::string>{".ck.safetensors.tmp.toolong7", ".other.safetensors.tmp.abcdef", "ck.safetensors"});
  // the plot's writer (the same AtomicFile) cleans up too
  testing::write_bytes(tmp.file(".p.svg.tmp.XYZ123"), {1});
  io::write_file_atomic(tmp.file("p.svg"), "<svg/>");
  CHECK(!fs::exists(tmp.file(".p.svg.tmp.XYZ123")));
}

// The moment that lost checkpoints when runs shared a --save: between closing its temporary file
// and renaming it, a writer's file looked stale to another writer's cleanup.
TEST_CASE("outputs: another writer's cleanup cannot remove a temporary file about to be renamed", "[outputs]") {
  testing::TempDir tmp;
  static std::string target;  // the hook is a plain function pointer
  static int other_commits;
  target = tmp.file("ck.bin");
  other_commits = 0;
  io::set_before_rename_for_testing([](const io::AtomicFile& f) {
    if (f.target() != target || other_commits++ > 0) return;
    io::write_file_atomic(target, "other");  // commits, and cleans up what looks stale
  });
  io::AtomicFile mine(target);
  mine.write("mine", 4);
  const std::string mine_tmp = mine.temp_path();
  CHECK_NOTHROW(mine.commit());
  io::set_before_rename_for_testing(nullptr);
  CHECK(other_commits == 2);  // the other writer committed in between (its own hook call is the second)
  CHECK(read_file(target) == "mine");
  CHECK(!fs::exists(mine_tmp));
  CHECK(dir_entries(tmp.path()) == std::vector<std::string>{"ck.bin"});
}

TEST_CASE("outputs: append files write records whole or not at all", "[outputs]") {
  testing::TempDir tmp;
  const std::string path = tmp.file("log.jsonl");
  {
    io::AppendFile f(path);
    f.open();
    CHECK(fs::exists(path));
  }
  CHECK(!fs::exists(path));  // created and never written: removed, not left empty
  {
    io::AppendFile f(path);
    f.append("{\"a\":1}\n");
    io::set_write_fault_for_testing(io::WriteFault::kThrow, 12);  // 4 bytes into the next record
    CHECK_THROWS_WITH(f.append("{\"b\":2}\n"), Catch::Contains(path) && Catch::Contains("injected write fault"));
    io::set_write_fault_for_testing(io::WriteFault::kNone);
  }
  CHECK(read_file(path) == "{\"a\":1}\n");  // the torn record was cut back
  // appends to what is there
  {
    io::AppendFile f(path);
    f.append("{\"c\":3}\n");
  }
  CHECK(read_file(path) == "{\"a\":1}\n{\"c\":3}\n");
  // the TensorBoard writer: whole records only, its file always decodes
  const std::string tb = tmp.file("tb");
  std::string events;
  {
    logging::TensorBoardWriter w(tb);
    events = w.path();
    w.scalar("a", 1.0, 1);
    io::set_write_fault_for_testing(io::WriteFault::kThrow, 100);
    bool failed = false;
    for (int i = 0; i < 20 && !failed; ++i) {
      try {
        w.scalar("loss", 0.5, i);
      } catch (const Error& e) {
        failed = true;
        CHECK_THAT(e.what(), Catch::Contains(events));
      }
    }
    io::set_write_fault_for_testing(io::WriteFault::kNone);
    CHECK(failed);
  }
  std::vector<std::string> records;
  REQUIRE_NOTHROW(records = logging::read_tfrecords(events));
  CHECK(records.size() >= 2);
}

// ---- mnist_train's policy ----

TEST_CASE("mnist_train: every side output failing on /dev/full keeps the training and exits 1",
          "[mnist_train][outputs]") {
  if (!have_binary()) return;
  if (!is_char_device("/dev/full")) {
    WARN("SKIPPED: no /dev/full on this machine");
    return;
  }
  testing::TempDir tmp;
  const std::string d = tmp.file("data");
  write_synthetic_set(d, false);
  RunResult r = run_app(quick(d, {"--epochs", "2", "--log", "/dev/full", "--plot", "/dev/full", "--profile",
                                  "/dev/full", "--save", "/dev/full"}),
                        tmp.path());
  INFO(EMBER_DESCRIBE_RUN(r));
  CHECK(r.signal == 0);
  CHECK(r.exit_code == 1);
  CHECK(r.out.find("epoch 2/2") != std::string::npos);
  CHECK(r.out.find("summary:") != std::string::npos);
  CHECK(reported_test_accuracy(r.out) > 0);
  // one line per output, each naming the flag, the path and the error
  CHECK(lines_of(r.err).size() == 4);
  for (const char* flag : {"--log /dev/full", "--plot /dev/full", "--profile /dev/full", "--save /dev/full"}) {
    INFO(flag);
    CHECK(error_lines_with(r.err, flag) == 1);
  }
  CHECK(error_lines_with(r.err, "No space left on device") == 4);
  CHECK(is_char_device("/dev/full"));
}

TEST_CASE("mnist_train: a write error in the middle of a run is reported once and leaves whole records",
          "[mnist_train][outputs]") {
  if (!have_binary()) return;
  testing::TempDir tmp;
  const std::string d = tmp.file("data");
  write_synthetic_set(d, false);
  struct Case {
    const char* flag;
    std::string path;
  };
  for (const Case& c : {Case{"--log", tmp.file("log.jsonl")}, Case{"--tensorboard", tmp.file("tb")},
                        Case{"--plot", tmp.file("p.svg")}, Case{"--save", tmp.file("ck.safetensors")}}) {
    INFO(c.flag);
    // the first output file to pass 700 bytes fails like a write error (EMBER_TEST_WRITE_FAULT_AFTER)
    ::setenv("EMBER_TEST_WRITE_FAULT_AFTER", "700", 1);
    RunResult r = run_app(quick(d, {"--epochs", "2", "--log-interval", "2", c.flag, c.path}), tmp.path());
    ::unsetenv("EMBER_TEST_WRITE_FAULT_AFTER");
    INFO(EMBER_DESCRIBE_RUN(r));
    CHECK(r.exit_code == 1);
    CHECK(r.out.find("epoch 2/2") != std::string::npos);  // training went on
    CHECK(r.out.find("summary:") != std::string::npos);
    REQUIRE(lines_of(r.err).size() == 1);
    CHECK(error_lines_with(r.err, std::string(c.flag) + " " + c.path + ": ") == 1);
    CHECK(r.err.find("injected write fault") != std::string::npos);
    if (std::string(c.flag) == "--log") {
      // every line that is there is a whole JSON object
      const std::vector<std::string> ls = lines_of(read_file(c.path));
      CHECK(!ls.empty());
      for (const std::string& l : ls) CHECK(nlohmann::json::accept(l));
      CHECK(read_file(c.path).back() == '\n');
    } else if (std::string(c.flag) == "--tensorboard") {
      for (const auto& e : fs::directory_iterator(c.path)) CHECK_NOTHROW(logging::read_tfrecords(e.path().string()));
    } else {
      CHECK(!fs::exists(c.path));  // nothing rather than a torn or empty file
    }
    // no temporary files left behind anywhere
    for (const std::string& f : dir_entries(tmp.path())) CHECK(f.find(".tmp.") == std::string::npos);
  }
}

TEST_CASE("mnist_train: outputs under a regular file are refused before training", "[mnist_train][outputs]") {
  if (!have_binary()) return;
  testing::TempDir tmp;
  const std::string d = tmp.file("data");
  write_synthetic_set(d, false);
  const std::string file = tmp.file("a_file");
  testing::write_bytes(file, {1, 2, 3});
  for (const char* flag : {"--log", "--plot", "--profile", "--save", "--tensorboard"}) {
    RunResult r = run_app(quick(d, {"--epochs", "1", flag, file + "/x"}), tmp.path());
    check_error(r, 1, std::string(flag) + " " + file + "/x");
    CHECK(r.out.find("epoch 1/1") == std::string::npos);  // refused before anything trained
  }
  // a directory where a file is expected
  check_error(run_app(quick(d, {"--epochs", "1", "--plot", tmp.path()}), tmp.path()), 1, "is a directory");
}

TEST_CASE("mnist_train: two outputs naming one file are a usage error, also through links", "[mnist_train][outputs]") {
  if (!have_binary()) return;
  testing::TempDir tmp;
  const std::string d = tmp.file("data");
  write_synthetic_set(d, false);
  testing::write_bytes(tmp.file("x.svg"), {1});
  fs::create_hard_link(tmp.file("x.svg"), tmp.file("hard.svg"));
  fs::create_symlink("a.svg", tmp.file("sym.svg"));
  struct Case {
    std::vector<std::string> flags;
    std::string needle;
  };
  auto in = [&](const std::string& name) { return tmp.path() + "/" + name; };
  auto both = [&](const char* f1, const std::string& n1, const char* f2, const std::string& n2) {
    return Case{{f1, in(n1), f2, in(n2)},
                std::string(f1) + " " + in(n1) + " and " + f2 + " " + in(n2) + " name the same file"};
  };
  const std::vector<Case> cases = {
      both("--log", "a.jsonl", "--plot", "a.jsonl"), both("--plot", "sym.svg", "--profile", "a.svg"),
      both("--save", "x.svg", "--plot", "hard.svg"), both("--save", "sub/../a.ck", "--log", "a.ck"),
      both("--log", "tb/", "--tensorboard", "tb"),
  };
  fs::create_directories(tmp.file("sub"));
  for (const Case& c : cases) {
    std::vector<std::string> a = {"--epochs", "1"};
    a.insert(a.end(), c.flags.begin(), c.flags.end());
    RunResult r = run_app(quick(d, a), tmp.path());
    check_error(r, 2, c.needle);
    CHECK(r.out.find("epoch 1/1") == std::string::npos);
  }
  CHECK(!fs::exists(tmp.file("a.jsonl")));
  CHECK(read_file(tmp.file("x.svg")) == std::string(1, '\1'));
  // a character device may take several outputs
  require_success(run_app(quick(d, {"--epochs", "1", "--log", "/dev/null", "--plot", "/dev/null"}), tmp.path()));
}

TEST_CASE("mnist_train: a --log another process is writing is refused before training, naming its PID",
          "[mnist_train][outputs]") {
  if (!have_binary()) return;
  testing::TempDir tmp;
  const std::string d = tmp.file("data"), log = tmp.file("run.jsonl");
  write_synthetic_set(d, false);
  testing::write_bytes(log, {'{', '}', '\n'});
  {
    const int fd = ::open(log.c_str(), O_RDONLY | O_CLOEXEC);  // the other writer: this process
    REQUIRE(fd >= 0);
    REQUIRE(::flock(fd, LOCK_EX) == 0);
    RunResult r = run_app(quick(d, {"--epochs", "1", "--log", log}), tmp.path());
    check_error(r, 1, "'" + log + "' is being written by another process (PID " + std::to_string(::getpid()) + ")");
    CHECK(r.out.find("epoch 1/1") == std::string::npos);
    CHECK(read_file(log) == "{}\n");
    ::close(fd);
  }
  require_success(run_app(quick(d, {"--epochs", "1", "--log", log}), tmp.path()));
  CHECK(read_file(log).size() > 3);  // appended after the lock was released
}

TEST_CASE("mnist_train: a running run's outputs are refused to another run as any output, naming its PID",
          "[mnist_train][outputs]") {
  if (!have_binary()) return;
  testing::TempDir tmp;
  const std::string d = tmp.file("data"), log = tmp.file("a.jsonl"), ck = tmp.file("a.safetensors");
  write_synthetic_set(d, false);
  fs::create_symlink("a.jsonl", tmp.file("link.jsonl"));
  Child a =
      spawn_app(quick(d, {"--epochs", "1000", "--scheduler", "none", "--log", log, "--save", ck}), tmp.path(), "a");
  const auto t0 = std::chrono::steady_clock::now();
  while (read_file(a.out_path).find("epoch 1/1000") == std::string::npos) {  // a checkpoint and a log exist
    int status = 0;
    REQUIRE(waitpid(a.pid, &status, WNOHANG) == 0);
    REQUIRE(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 60);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  const std::string holder = " is in use by another mnist_train (pid " + std::to_string(a.pid) + ", lock file ";
  // before: --save replaced the live log and --log appended to the checkpoint, both runs exit 0
  for (const auto& [flag, path] : std::vector<std::pair<std::string, std::string>>{
           {"--save", log}, {"--plot", tmp.file("link.jsonl")}, {"--log", ck}, {"--profile", ck}}) {
    RunResult r = run_app(quick(d, {"--epochs", "1", flag, path}), tmp.path());
    check_error(r, 1, flag + " " + path + holder);
    CHECK(r.out.find("epoch 1/1") == std::string::npos);
  }
  REQUIRE(kill(a.pid, SIGTERM) == 0);
  CHECK(wait_child(a, 60) == 128 + SIGTERM);
  for (const std::string& l : lines_of(read_file(log))) CHECK(nlohmann::json::accept(l));  // a's log, whole
  CHECK(io::load_safetensors(ck).metadata.count("progress.epoch") == 1);
  CHECK(!fs::exists(tmp.file(".a.jsonl.lock")));                                    // released at the end
  require_success(run_app(quick(d, {"--epochs", "1", "--log", log}), tmp.path()));  // free again
}

TEST_CASE("mnist_train: an output naming an input is a usage error", "[mnist_train][outputs]") {
  if (!have_binary()) return;
  testing::TempDir tmp;
  const std::string d = tmp.file("data"), pack = tmp.file("run.pack"), ck = tmp.file("ck.safetensors");
  write_synthetic_set(d, false);
  testing::write_bytes(pack, {'p', 'a', 'c', 'k'});
  fs::create_symlink("run.pack", tmp.file("link.pack"));
  fs::create_hard_link(pack, tmp.file("hard.pack"));
  require_success(run_app(quick(d, {"--epochs", "1", "--scheduler", "none", "--save", ck}), tmp.path()));
  const std::string ck_bytes = read_file(ck);
  struct Case {
    std::vector<std::string> args;
    std::string needle;
  };
  const std::vector<Case> cases = {
      // before: --save run.pack replaced the packed data with a checkpoint, exit 0
      {{"--data", pack, "--save", pack}, "--save " + pack + " names --data " + pack},
      {{"--data", pack, "--log", tmp.file("link.pack")}, "names --data " + pack},
      {{"--data", pack, "--plot", tmp.file("hard.pack")}, "names --data " + pack},
      {{"--data", d, "--log", d + "/run.jsonl"}, "--log " + d + "/run.jsonl is inside --data " + d},
      {{"--data", d, "--tensorboard", d + "/tb"}, "is inside --data " + d},
      {{"--data", d, "--resume", ck, "--plot", ck}, "--plot " + ck + " names --resume " + ck},
      {{"--data", d, "--eval-only", ck, "--save", ck}, "--save " + ck + " names --eval-only " + ck},
      {{"--eval-only", ck, "--predict", pack, "--log", pack}, "--log " + pack + " names --predict " + pack},
  };
  for (const Case& c : cases) {
    std::vector<std::string> a = {"--device", "cpu", "--quiet", "--epochs", "1"};
    a.insert(a.end(), c.args.begin(), c.args.end());
    check_error(run_app(a, tmp.path()), 2, c.needle + "; an output never overwrites or adds to an input");
  }
  CHECK(read_file(pack) == "pack");
  CHECK(read_file(ck) == ck_bytes);
  CHECK(!fs::exists(d + "/run.jsonl"));
  CHECK(!fs::exists(d + "/tb"));
  // a resumed run saves over its own checkpoint
  require_success(
      run_app(quick(d, {"--epochs", "2", "--scheduler", "none", "--resume", ck, "--save", ck}), tmp.path()));
}

TEST_CASE("mnist_train: a FIFO or socket as an input is refused at once, a name too long says so",
          "[mnist_train][outputs]") {
  if (!have_binary()) return;
  testing::TempDir tmp;
  const std::string d = tmp.file("data"), fifo = tmp.file("ck.fifo"), sock = tmp.file("ck.sock");
  write_synthetic_set(d, false);
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  const int sfd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(sfd >= 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  REQUIRE(sock.size() < sizeof addr.sun_path);
  std::memcpy(addr.sun_path, sock.c_str(), sock.size() + 1);
  REQUIRE(::bind(sfd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0);
  // before: open() of the FIFO waited for a writer forever, deaf to SIGTERM
  for (const char* flag : {"--resume", "--eval-only"}) {
    RunResult r = run_app(quick(d, {"--epochs", "1", flag, fifo}), tmp.path(), 30);
    check_error(r, 1, "'" + fifo + "' is a FIFO, not a regular file");
  }
  check_error(run_app(quick(d, {"--epochs", "1", "--resume", sock}), tmp.path(), 30), 1,
              "'" + sock + "' is a socket, not a regular file");
  ::close(sfd);
  // a data file that is a FIFO
  const std::string fd_dir = tmp.file("fifo_data");
  write_synthetic_set(fd_dir, false);
  fs::remove(fd_dir + "/train-labels-idx1-ubyte");
  REQUIRE(::mkfifo((fd_dir + "/train-labels-idx1-ubyte").c_str(), 0600) == 0);
  check_error(run_app(quick(fd_dir, {"--epochs", "1"}), tmp.path(), 30), 1, "is a FIFO, not a regular file");

  // names: legal, but no room for ".NAME.tmp.XXXXXX"; a component over NAME_MAX; a path over PATH_MAX
  const std::string n250(250, 'n'), n256(256, 'n');
  std::string deep = tmp.path();
  while (deep.size() <= 4200) deep += "/dd";
  struct Case {
    std::string flag, path, needle;
  };
  for (const Case& c : std::vector<Case>{{"--save", tmp.file(n250), "name too long for its temporary file"},
                                         {"--plot", tmp.file(n250), "name too long for its temporary file"},
                                         {"--log", tmp.file(n256), "name too long (the component"},
                                         {"--save", deep + "/ck", "name too long (the path has"}}) {
    INFO(c.flag << " " << c.path.size() << " bytes");
    RunResult r = run_app(quick(d, {"--epochs", "1", c.flag, c.path}), tmp.path());
    check_error(r, 1, c.flag + ": cannot write");
    CHECK(r.err.find(c.needle) != std::string::npos);
    CHECK(r.out.find("epoch 1/1") == std::string::npos);  // at start-up, not after training
  }
  // --log appends in place: a 250-byte name is fine there
  require_success(run_app(quick(d, {"--epochs", "1", "--log", tmp.file(n250)}), tmp.path()));
}

TEST_CASE("mnist_train: outputs through symlinks and onto /dev/null", "[mnist_train][outputs]") {
  if (!have_binary()) return;
  testing::TempDir tmp;
  const std::string d = tmp.file("data");
  write_synthetic_set(d, false);
  fs::create_directories(tmp.file("real"));
  fs::create_symlink("real/p.svg", tmp.file("plot.svg"));
  fs::create_symlink("real/ck.safetensors", tmp.file("ck.safetensors"));
  RunResult r = run_app(quick(d, {"--epochs", "1", "--plot", tmp.file("plot.svg"), "--save", tmp.file("ck.safetensors"),
                                  "--log", "/dev/null", "--profile", "/dev/null"}),
                        tmp.path());
  require_success(r);
  CHECK(is_symlink(tmp.file("plot.svg")));
  CHECK(is_symlink(tmp.file("ck.safetensors")));
  CHECK(read_file(tmp.file("real/p.svg")).rfind("<svg", 0) == 0);
  CHECK_NOTHROW(io::load_safetensors(tmp.file("real/ck.safetensors")));
  // the device stays a device, also as --save
  require_success(run_app(quick(d, {"--epochs", "1", "--save", "/dev/null", "--plot", "/dev/null"}), tmp.path()));
  CHECK(is_char_device("/dev/null"));
}

TEST_CASE("mnist_train: SIGTERM and SIGINT stop the run and write the outputs of the completed epochs",
          "[mnist_train][outputs]") {
  if (!have_binary()) return;
  testing::TempDir tmp;
  const std::string d = tmp.file("data");
  write_synthetic_set(d, false);
  for (int sig : {SIGTERM, SIGINT}) {
    INFO("signal " << sig);
    const std::string tag = "sig" + std::to_string(sig);
    const std::string log = tmp.file(tag + ".jsonl"), plot = tmp.file(tag + ".svg"), prof = tmp.file(tag + ".json"),
                      ck = tmp.file(tag + ".safetensors");
    Child c = spawn_app(quick(d, {"--epochs", "1000", "--scheduler", "none", "--log", log, "--plot", plot, "--profile",
                                  prof, "--save", ck}),
                        tmp.path(), tag);
    // wait for the first epoch line, then signal
    const auto t0 = std::chrono::steady_clock::now();
    while (read_file(c.out_path).find("epoch 1/1000") == std::string::npos) {
      int status = 0;
      REQUIRE(waitpid(c.pid, &status, WNOHANG) == 0);  // still running
      REQUIRE(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 60);
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    REQUIRE(kill(c.pid, sig) == 0);
    const int code = wait_child(c, 60);
    const std::string out = read_file(c.out_path), err = read_file(c.err_path);
    INFO("--- stdout ---\n" << out << "--- stderr ---\n" << err);
    CHECK(code == 128 + sig);
    CHECK(out.find("epoch 1000/1000") == std::string::npos);  // it did stop
    CHECK(out.find("summary:") != std::string::npos);
    CHECK(err.find("stopping after the current step") != std::string::npos);
    CHECK(err.find("error") == std::string::npos);
    // the outputs: the JSONL summary last, the plot, the profile, the last finished epoch's checkpoint
    const std::vector<std::string> ls = lines_of(read_file(log));
    REQUIRE(!ls.empty());
    nlohmann::json last = nlohmann::json::parse(ls.back());
    CHECK(last["type"] == "summary");
    CHECK(last["status"] == "interrupted");
    const int epochs = last["epochs"].get<int>();
    CHECK(epochs >= 1);
    int epoch_lines = 0;
    for (const std::string& l : ls) epoch_lines += nlohmann::json::parse(l)["type"] == "epoch" ? 1 : 0;
    CHECK(epoch_lines == epochs);
    CHECK(read_file(plot).find("</svg>") != std::string::npos);
    CHECK(nlohmann::json::accept(read_file(prof)));
    io::SafetensorsFile f = io::load_safetensors(ck);
    CHECK(std::stoll(f.metadata.at("progress.epoch")) == epochs);
    for (const std::string& e : dir_entries(tmp.path())) CHECK(e.find(".tmp.") == std::string::npos);
  }
}

TEST_CASE("mnist_train: a second Ctrl-C exits at once", "[mnist_train][outputs]") {
  if (!have_binary()) return;
  testing::TempDir tmp;
  const std::string d = tmp.file("data");
  write_synthetic_set(d, false);
  // --log into a FIFO that nobody reads: once the pipe is full the program blocks in a write, so the
  // orderly stop after the first SIGINT cannot finish; only the second can end it
  const std::string fifo = tmp.file("log.fifo");
  REQUIRE(::mkfifo(fifo.c_str(), 0644) == 0);
  const int reader = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK);
  REQUIRE(reader >= 0);
  Child c = spawn_app(quick(d, {"--epochs", "1000", "--scheduler", "none", "--log-interval", "1", "--log", fifo}),
                      tmp.path(), "twice");
  const auto t0 = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  int queued = -1, stable = 0;
  while (stable < 30) {  // the pipe's fill level unchanged for 30 x 10 ms: the writer is blocked
    int status = 0;
    REQUIRE(waitpid(c.pid, &status, WNOHANG) == 0);
    REQUIRE(elapsed() < 60);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    int n = 0;
    REQUIRE(::ioctl(reader, FIONREAD, &n) == 0);
    stable = n > 0 && n == queued ? stable + 1 : 0;
    queued = n;
  }
  REQUIRE(kill(c.pid, SIGINT) == 0);
  while (read_file(c.err_path).find("stopping after the current step") == std::string::npos) {
    int status = 0;
    REQUIRE(waitpid(c.pid, &status, WNOHANG) == 0);  // still blocked: the first one does not end it
    REQUIRE(elapsed() < 60);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  int status = 0;
  CHECK(waitpid(c.pid, &status, WNOHANG) == 0);
  REQUIRE(kill(c.pid, SIGINT) == 0);
  CHECK(wait_child(c, 30) == 130);
  ::close(reader);
  const std::string out = read_file(c.out_path);
  INFO(out);
  CHECK(out.find("summary:") == std::string::npos);  // exited at once
}

TEST_CASE("mnist_train: SIGTERM to ember_run stops every --distributed rank after the same step",
          "[mnist_train][outputs][dist]") {
  const std::string launcher = EMBER_BINARY_DIR "/bin/ember_run";
  if (!have_binary() || !fs::exists(launcher)) {
    WARN("SKIPPED: mnist_train or ember_run is not built");
    return;
  }
  testing::TempDir tmp;
  const std::string d = tmp.file("data");
  write_synthetic_set(d, false);
  const std::string log = tmp.file("log.jsonl");
  std::vector<std::string> args = {"--nproc-per-node", "2", "--", kBinary, "--distributed"};
  for (const std::string& a :
       quick(d, {"--epochs", "1000", "--scheduler", "none", "--log-interval", "3", "--log", log}))
    args.push_back(a);
  Child c = spawn_app(args, tmp.path(), "dist", launcher);
  const auto t0 = std::chrono::steady_clock::now();
  while (read_file(c.out_path).find("epoch 1/1000") == std::string::npos) {
    int status = 0;
    REQUIRE(waitpid(c.pid, &status, WNOHANG) == 0);
    REQUIRE(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 120);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  REQUIRE(kill(c.pid, SIGTERM) == 0);
  const int code = wait_child(c, 60);
  const std::string out = read_file(c.out_path), err = read_file(c.err_path);
  INFO("--- stdout ---\n" << out << "--- stderr ---\n" << err);
  CHECK(code == 128 + SIGTERM);
  CHECK(out.find("[rank 0] summary:") != std::string::npos);
  CHECK(err.find("error") == std::string::npos);  // no rank left behind in a collective
  const std::vector<std::string> ls = lines_of(read_file(log));
  REQUIRE(!ls.empty());
  CHECK(nlohmann::json::parse(ls.back())["status"] == "interrupted");
}

// ---- ember_pack ----

namespace {
const std::string kPackTool = std::string(EMBER_BINARY_DIR) + "/bin/ember_pack";
bool have_pack_tool() {
  if (fs::exists(kPackTool)) return true;
  WARN("SKIPPED: " << kPackTool << " is not built");
  return false;
}
}  // namespace

TEST_CASE("ember_pack: --help exits 0 and a missing input directory is one line", "[outputs]") {
  const std::string tool = kPackTool;
  if (!have_pack_tool()) return;
  testing::TempDir tmp;
  const std::string out = tmp.file("out.txt"), err = tmp.file("err.txt");
  auto run = [&](const std::string& args) {
    int rc = std::system((tool + " " + args + " > " + out + " 2> " + err).c_str());
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  };
  CHECK(run("--help") == 0);
  CHECK(read_file(out).find("usage: ember_pack") != std::string::npos);
  CHECK(read_file(err).empty());
  CHECK(run(tmp.file("nowhere") + " " + tmp.file("x.epk")) == 1);
  std::string e = read_file(err);
  CHECK(e == "ember_pack: error: the input directory " + tmp.file("nowhere") + " does not exist\n");
  CHECK(!fs::exists(tmp.file("x.epk")));
  CHECK(run(tmp.file("out.txt") + " " + tmp.file("x.epk")) == 1);
  CHECK(lines_of(read_file(err)).size() == 1);
  CHECK(read_file(err).find("is not a directory") != std::string::npos);
  // usage errors: exit 2, one line
  CHECK(run("") == 2);
  CHECK(run(tmp.path() + " " + tmp.file("x.epk") + " --bogus") == 2);
  CHECK(lines_of(read_file(err)).size() == 1);
  CHECK(read_file(err).find("unknown option --bogus") != std::string::npos);
}

TEST_CASE("ember_pack: every option value is checked: a bad one is a usage error naming the flag and the value",
          "[outputs]") {
  const std::string tool = kPackTool;
  if (!have_pack_tool()) return;
  testing::TempDir tmp;
  const std::string idx = tmp.file("idx"), empty = tmp.file("empty"), out = tmp.file("out.txt"),
                    err = tmp.file("err.txt");
  write_synthetic_set(idx, false, 20, 10);
  fs::create_directories(empty);
  auto run = [&](const std::string& args) {
    int rc = std::system((tool + " " + args + " > " + out + " 2> " + err).c_str());
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  };
  const std::string io = idx + " " + tmp.file("x.epk");
  // {arguments after the input and output, what the one line on stderr contains}
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--workers abc", "--workers abc: must be a whole number in [1, 1024]"},
      {"--workers 0", "--workers 0: must be a whole number in [1, 1024]"},
      {"--workers -2", "--workers -2: must be"},
      {"--workers 4x", "--workers 4x: must be"},
      {"--workers 99999999999999999999", "--workers 99999999999999999999: must be"},
      {"--workers ''", "--workers '': must be"},
      {"--resize 0x5", "--resize 0x5: wants HxW with H and W in [1, 32768]"},
      {"--resize 8", "--resize 8: wants HxW"},
      {"--resize 8x", "--resize 8x: wants HxW"},
      {"--resize x8", "--resize x8: wants HxW"},
      {"--resize 8x8x8", "--resize 8x8x8: wants HxW"},
      {"--resize 40000x8", "--resize 40000x8: wants HxW"},
      {"--resize -8x8", "--resize -8x8: wants HxW"},
      {"--channels 2", "--channels 2: must be 1, 3 or 4"},
      {"--channels rgb", "--channels rgb: must be 1, 3 or 4"},
      {"--format png", "--format png: must be auto, idx or folder"},
      {"--split valid", "--split valid: must be train, val or test"},
      {"--split val", "--split val: " + idx + " is an IDX set, whose splits are train and test"},
      {"--max-pixels 0", "--max-pixels 0: must be a whole number in [1, 1073741824]"},
      {"--max-pixels 1e6", "--max-pixels 1e6: must be"},
      {"--max-pixels 2000000000", "--max-pixels 2000000000: must be"},
      {"--workers", "missing value after --workers"},
      {"--resize", "missing value after --resize"},
      {"--max-pixels", "missing value after --max-pixels"},
      {"--skip-bad-images=1", "unknown option --skip-bad-images=1"},
      {"--worker 2", "unknown option --worker"},
      {"extra.epk", "unexpected argument 'extra.epk'"},
      // options that the input's kind would ignore
      {"--channels 3", "--channels 3: an IDX set is greyscale (1 channel)"},
  };
  for (const auto& [args, want] : cases) {
    INFO("ember_pack <in> <out> " << args);
    CHECK(run(io + " " + args) == 2);
    const std::string e = read_file(err);
    CHECK(lines_of(e).size() == 1);
    CHECK(e.rfind("ember_pack: error: ", 0) == 0);
    CHECK(e.find(want) != std::string::npos);
    CHECK(!fs::exists(tmp.file("x.epk")));
  }
  CHECK(run(empty + " " + tmp.file("x.epk") + " --split test") == 2);
  CHECK(read_file(err) ==
        "ember_pack: error: --split test: " + empty +
            " is read as an ImageFolder (no IDX t10k files found), which has no splits (see --help)\n");
  // valid values still pass, options before the positional arguments too
  CHECK(run("--workers 2 --max-pixels 100 --channels 1 " + io + " --resize 4x6 --split test --format idx") == 0);
  CHECK(read_file(err).empty());
  CHECK(read_file(out).find("10 samples of [1, 4, 6] u8") != std::string::npos);
}

TEST_CASE("ember_pack: the output is checked before any image is decoded, and never lies in the input tree",
          "[outputs]") {
  const std::string tool = kPackTool;
  if (!have_pack_tool()) return;
  testing::TempDir tmp;
  const std::string in = tmp.file("in"), err = tmp.file("err.txt");
  fs::create_directories(in + "/a");
  // undecodable: had the images been decoded first, this error would come instead of the output's
  testing::write_bytes(in + "/a/1.png", {0x89, 'P', 'N', 'G', 1, 2, 3});
  fs::create_directories(tmp.file("outdir"));
  fs::create_directory_symlink(in, tmp.file("link"));
  fs::create_symlink(in + "/a/y.epk", tmp.file("y.epk"));  // dangling: the pack would create its target
  auto run = [&](const std::string& args) {
    int rc = std::system((tool + " " + args + " > /dev/null 2> " + err).c_str());
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
  };
  const std::string long_name = tmp.file(std::string(300, 'n') + ".epk");
  // {the output, the exit code, what the one line on stderr says}
  const std::vector<std::tuple<std::string, int, std::string>> cases = {
      {tmp.file("nowhere/x.epk"), 1,
       "the output " + tmp.file("nowhere/x.epk") + ": the directory " + tmp.file("nowhere") + " does not exist"},
      {long_name, 1, "the output: cannot write '" + long_name + "': name too long"},
      {tmp.file("outdir"), 1, "the output " + tmp.file("outdir") + " is a directory, expected a file name"},
      {"/dev/null", 1, "the output /dev/null is a character device, not a regular file"},
      {in + "/x.epk", 2, "the output " + in + "/x.epk is inside the input directory " + in},
      {in + "/a/x.epk", 2, "the output " + in + "/a/x.epk is inside the input directory " + in},
      {tmp.file("link/x.epk"), 2, "the output " + tmp.file("link/x.epk") + " is inside the input directory " + in},
      {tmp.file("y.epk"), 2, "the output " + tmp.file("y.epk") + " is inside the input directory " + in},
  };
  for (const auto& [output, code, want] : cases) {
    INFO("ember_pack " << in << " " << output);
    CHECK(run(in + " " + output) == code);
    const std::string e = read_file(err);
    CHECK(lines_of(e).size() == 1);
    CHECK(e.rfind("ember_pack: error: " + want, 0) == 0);
  }
  CHECK(fs::is_character_file("/dev/null"));
  CHECK(fs::is_empty(tmp.file("outdir")));
  CHECK(std::distance(fs::directory_iterator(in), fs::directory_iterator()) == 1);  // only a/
  // a good output: the images are decoded, and the bad one fails the pack
  CHECK(run(in + " " + tmp.file("x.epk")) == 1);
  CHECK(read_file(err).find("cannot decode '" + in + "/a/1.png'") != std::string::npos);
}
