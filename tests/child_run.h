// Runs a hidden test case of the running test binary in a child process, for tests of how a
// process ends (an exception that reaches std::terminate): the parent sees the child's exit status,
// its stdout (Catch2's report of the child's checks) and its stderr. The hidden case carries a tag
// of its own ("[.][..._child]") and is named by it.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace ember::testing {

// How a child process ended: its exit code, or the signal that killed it.
struct ExitStatus {
  int exit_code = -1;
  int signal = 0;  // nonzero when the child died from a signal (SIGABRT: std::terminate's abort)
};

// Runs the program argv[0] with argv, stdout and stderr written to out_path and err_path, in this
// process's environment plus `env` ("NAME=value", ahead of it, so it wins), and waits for it. A
// child still running after `limit_s` is killed: then nullopt.
inline std::optional<ExitStatus> spawn_and_wait(std::vector<std::string> argv_s, std::vector<std::string> env_s,
                                                const std::string& out_path, const std::string& err_path,
                                                double limit_s) {
  std::vector<char*> argv;
  for (std::string& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (std::string& e : env_s) envp.push_back(e.data());
  for (char** e = environ; *e != nullptr; ++e) envp.push_back(*e);
  envp.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&fa, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, argv_s[0].c_str(), &fa, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  REQUIRE(rc == 0);
  const auto t0 = std::chrono::steady_clock::now();
  int status = 0;
  for (;;) {
    const pid_t w = waitpid(pid, &status, WNOHANG);
    REQUIRE(w >= 0);
    if (w == pid) break;
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > limit_s) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return std::nullopt;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ExitStatus r;
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
  return r;
}

struct ChildResult : ExitStatus {
  std::string out, err;
};

// Runs this binary with the Catch2 test spec `spec` (a hidden case's tag), stdout and stderr
// captured; `env` ("NAME=value", ahead of this process's environment, so it wins) is added. A
// child still running after `limit_s` is killed, and the test fails.
inline ChildResult run_self(const std::string& spec, const std::vector<std::string>& env = {}, double limit_s = 120) {
  static std::atomic<int> counter{0};
  std::error_code ec;
  const std::string self = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  REQUIRE(!ec);
  const std::string base = (std::filesystem::temp_directory_path() /
                            ("ember_child_" + std::to_string(::getpid()) + "_" + std::to_string(counter++)))
                               .string();
  const std::string out_path = base + ".out", err_path = base + ".err";
  const std::optional<ExitStatus> status = spawn_and_wait({self, spec}, env, out_path, err_path, limit_s);
  auto read = [&](const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    std::ostringstream s;
    s << f.rdbuf();
    f.close();
    std::filesystem::remove(path, ec);
    return s.str();
  };
  ChildResult r;
  r.out = read(out_path);
  r.err = read(err_path);
  if (!status) FAIL(self << " " << spec << ": still running after " << limit_s << " s (killed)");
  static_cast<ExitStatus&>(r) = *status;
  return r;
}

}  // namespace ember::testing
