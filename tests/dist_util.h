// Multi-process tests for dist/: run N copies of bin/ember_dist_worker (tests/dist/worker.cpp)
// as the ranks of a job on loopback, each with its own environment, and collect their exit codes
// and output. Every child runs in its own process group with PR_SET_PDEATHSIG, and whatever is
// still running at the deadline (or when the test ends) is killed: no process outlives a test.
#pragma once

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace ember::testing::dist {

inline const std::string kWorker = EMBER_BINARY_DIR "/bin/ember_dist_worker";

struct RankResult {
  int rank = 0;
  int exit_code = -1;  // -1: killed by us (at the deadline, or when the job ended)
  int signal = 0;      // the signal that ended it, if any
  bool timed_out = false;
  bool ended = false;  // still running when the rank the job ends with exited: killed then
  double seconds = 0;  // from the start of the job to this rank's exit
  std::string output;  // stdout and stderr, interleaved
};

struct Job {
  int world_size = 2;
  std::string scenario;
  std::vector<std::string> args;
  std::map<std::string, std::string> env;                      // for every rank
  std::map<int, std::map<std::string, std::string>> rank_env;  // overrides per rank
  std::vector<int> ranks;                                      // which ranks to start (default: all)
  double deadline_s = 120;
  int ends_with = -1;  // >= 0: when this rank exits, the others are killed (a stopped rank never exits)
};

// A connected socket to 127.0.0.1:port, or -1 (no Catch2 assertions: threads call it).
inline int connect_loopback(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) return fd;
  ::close(fd);
  return -1;
}

// Whether something accepts connections on 127.0.0.1:port.
inline bool listening(int port) {
  const int fd = connect_loopback(port);
  if (fd >= 0) ::close(fd);
  return fd >= 0;
}

// A TCP port that was free a moment ago.
inline int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  int port = ntohs(a.sin_port);
  ::close(fd);
  return port;
}

inline std::vector<RankResult> run_job(const Job& job) {
  namespace fs = std::filesystem;
  const int port = free_port();
  fs::path dir = fs::temp_directory_path() / ("ember_dist_" + std::to_string(::getpid()) + "_" + std::to_string(port));
  fs::create_directories(dir);
  std::vector<int> ranks = job.ranks;
  if (ranks.empty())
    for (int r = 0; r < job.world_size; ++r) ranks.push_back(r);
  struct Child {
    pid_t pid;
    int rank;
    std::string log;
  };
  std::vector<Child> children;
  const auto start = std::chrono::steady_clock::now();
  for (int r : ranks) {
    std::map<std::string, std::string> env = {
        {"RANK", std::to_string(r)},       {"WORLD_SIZE", std::to_string(job.world_size)},
        {"LOCAL_RANK", std::to_string(r)}, {"LOCAL_WORLD_SIZE", std::to_string(job.world_size)},
        {"MASTER_ADDR", "127.0.0.1"},      {"MASTER_PORT", std::to_string(port)}};
    for (const auto& [k, v] : job.env) env[k] = v;
    if (auto it = job.rank_env.find(r); it != job.rank_env.end())
      for (const auto& [k, v] : it->second) env[k] = v;
    std::string log = (dir / ("rank" + std::to_string(r) + ".log")).string();
    std::vector<std::string> argv_s{kWorker, job.scenario};
    argv_s.insert(argv_s.end(), job.args.begin(), job.args.end());
    pid_t parent = ::getpid();
    pid_t pid = ::fork();
    if (pid == 0) {
      ::setpgid(0, 0);
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(99);
      int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      for (const auto& [k, v] : env) {
        if (v == "<unset>") ::unsetenv(k.c_str());
        else ::setenv(k.c_str(), v.c_str(), 1);
      }
      std::vector<char*> argv;
      for (auto& s : argv_s) argv.push_back(s.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      std::fprintf(stderr, "cannot execute %s: %s\n", argv[0], std::strerror(errno));
      ::_exit(127);
    }
    children.push_back({pid, r, log});
  }
  std::vector<RankResult> results;
  std::map<pid_t, size_t> index;
  for (size_t i = 0; i < children.size(); ++i) {
    index[children[i].pid] = i;
    results.push_back({children[i].rank});
  }
  size_t left = children.size();
  std::vector<bool> done(children.size(), false);
  while (left > 0) {
    int status = 0;
    pid_t pid = ::waitpid(-1, &status, WNOHANG);
    double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (pid > 0 && index.count(pid)) {
      size_t i = index[pid];
      if (done[i]) continue;
      done[i] = true;
      --left;
      results[i].seconds = t;
      if (WIFEXITED(status)) results[i].exit_code = WEXITSTATUS(status);
      if (WIFSIGNALED(status)) {
        results[i].signal = WTERMSIG(status);
        results[i].exit_code = 128 + WTERMSIG(status);
      }
      if (results[i].rank == job.ends_with) {
        for (size_t k = 0; k < children.size(); ++k) {
          if (done[k]) continue;
          ::kill(-children[k].pid, SIGKILL);
          ::kill(children[k].pid, SIGKILL);
          ::waitpid(children[k].pid, nullptr, 0);
          done[k] = true;
          --left;
          results[k].ended = true;
          results[k].exit_code = -1;
          results[k].seconds = t;
        }
      }
      continue;
    }
    if (t > job.deadline_s) {
      for (size_t i = 0; i < children.size(); ++i) {
        if (done[i]) continue;
        ::kill(-children[i].pid, SIGKILL);
        ::kill(children[i].pid, SIGKILL);
        ::waitpid(children[i].pid, nullptr, 0);
        done[i] = true;
        --left;
        results[i].timed_out = true;
        results[i].exit_code = -1;
        results[i].seconds = t;
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  // Anything a rank started in its process group goes too.
  for (const auto& c : children) ::kill(-c.pid, SIGKILL);
  for (size_t i = 0; i < children.size(); ++i) {
    std::ifstream in(children[i].log);
    std::stringstream ss;
    ss << in.rdbuf();
    results[i].output = ss.str();
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
  return results;
}

// "rank 0: exit 0 (1.2 s)\n<output>\n..." for failure messages.
inline std::string describe(const std::vector<RankResult>& rs) {
  std::ostringstream os;
  for (const auto& r : rs) {
    os << "---- rank " << r.rank << ": "
       << (r.timed_out ? std::string("killed at the deadline")
           : r.ended   ? std::string("killed when the job ended")
                       : "exit " + std::to_string(r.exit_code))
       << " after " << r.seconds << " s ----\n"
       << r.output << "\n";
  }
  return os.str();
}

}  // namespace ember::testing::dist
