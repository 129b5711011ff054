// ember_run: a torchrun-like launcher for data-parallel jobs on one or more nodes.
//
//   ember_run --nproc-per-node N [--nnodes M --node-rank K --master host:port] -- program args...
//
// Design (one process, one thread, no dependencies beyond the standard library and POSIX):
//
// - Start. Each rank is fork()ed with three pipes: its stdout, its stderr, and an "exec error"
//   pipe marked close-on-exec. In the child: its own process group (setpgid, so a signal to the
//   group reaches the whole subtree), PR_SET_PDEATHSIG(SIGKILL) (then getppid() is checked, in
//   case the launcher died before the call), stdin from /dev/null (a background process group
//   reading the terminal would stop on SIGTTIN), then execvpe() with the rank's environment built
//   in the parent. If exec fails the child writes errno into the error pipe and exits 127; the
//   parent's blocking read() on that pipe returns 0 bytes exactly when exec succeeded.
// - Loop. poll() over every open output pipe plus a self-pipe that the signal handlers
//   (SIGCHLD, SIGINT, SIGTERM, SIGHUP) write the signal number into; all real work happens in the
//   loop, never in a handler. Output is cut into lines and each line is written, prefixed with
//   "[rank R] ", with one write() to our stdout or stderr, so lines of different ranks never mix.
//   A partial last line is printed (with a newline added) when the pipe reaches end of file or
//   its process is reaped; the pipe is drained then, so nothing written before exit is lost.
// - Failure. The first process to exit non-zero or die from a signal decides the exit code
//   (code, or 128+signal as shells report it); the launcher prints one line about it, sends
//   SIGTERM to the other process groups and SIGKILL to what is left after --grace-seconds.
// - Signals. SIGINT, SIGTERM and SIGHUP are forwarded to every process group; after SIGTERM or
//   SIGHUP the survivors get SIGKILL after the grace period, after SIGINT only on a second SIGINT
//   (a program may take its time to save a checkpoint). The launcher then exits 128+signal.
// - Killed. PR_SET_PDEATHSIG kills each rank when the launcher dies, but not what the rank
//   started. So a keeper process (forked first, in a process group of its own, deaf to the job's
//   signals) holds one end of a socket pair whose other end only the launcher has; the
//   launcher writes each rank's process group into it and a 0 when it ends normally. End of file without
//   that 0 means the launcher was killed: the keeper sends SIGKILL to every rank's whole group,
//   grandchildren included (a grandchild that made a group or session of its own escapes it).
// - Orphans. The launcher is a child subreaper (PR_SET_CHILD_SUBREAPER): grandchildren whose
//   parent died are reparented to it and reaped, not left as zombies under PID 1.
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <optional>
#include <string>
#include <thread>
#include <string_view>
#include <utility>
#include <vector>

extern char** environ;

namespace {

constexpr int kUsageError = 2;
constexpr size_t kMaxLine = 1 << 20;  // a "line" longer than this is printed in pieces

const char* const kHelp = R"(ember_run: start a data-parallel job (like torchrun)

usage: ember_run [options] -- program [args...]

Starts --nproc-per-node copies of `program args...` on this node, each with the environment
torch.distributed-style programs (and ember's dist module) read, and supervises them.

options:
  --nproc-per-node N   processes on this node (default 1)
  --nnodes M           number of nodes in the job (default 1)
  --node-rank K        this node's index, 0 <= K < M (default 0)
  --master HOST:PORT   address of the rank-0 rendezvous (default 127.0.0.1:29500; with
                       --nnodes 1 and no --master, a free port on 127.0.0.1 is picked so
                       that concurrent jobs on one machine do not collide)
  --token-file FILE    the job token, the first line of FILE (readable by its owner only, at
                       least 16 characters): the same file on every node of a multi-node job.
                       Without it, a one-node job gets a random token of its own; a job on
                       several nodes needs this or EMBER_JOB_TOKEN / EMBER_JOB_TOKEN_FILE
  --grace-seconds S    after a failure or SIGTERM/SIGHUP, how long the remaining processes
                       get between SIGTERM and SIGKILL (default 5)
  -h, --help           print this help and exit
  Options also accept the --name=value form.

environment of each process (local rank L in 0..N-1):
  RANK=K*N+L  WORLD_SIZE=M*N  LOCAL_RANK=L  LOCAL_WORLD_SIZE=N
  GROUP_RANK=K  NODE_RANK=K  MASTER_ADDR=HOST  MASTER_PORT=PORT  EMBER_RUN=1
  EMBER_NUM_THREADS=max(1, cores / N) unless already set (each process's CPU thread pool)
  EMBER_JOB_TOKEN=the job token (--token-file's, or 64 random hex digits), unless
                       EMBER_JOB_TOKEN or EMBER_JOB_TOKEN_FILE is set already: the secret the
                       rendezvous store admits the job's processes by (docs/dist.md, Security)
  Everything else is inherited; stdin is /dev/null.

output:
  Every line a process writes to stdout or stderr is copied to the same stream of ember_run,
  prefixed with "[rank RANK] ". A last line without a newline is printed when the process exits.
  (Programs that buffer stdout when it is not a terminal should flush it.)

supervision:
  Each process runs in its own process group; signals are sent to the whole group. SIGINT,
  SIGTERM and SIGHUP are forwarded; after SIGTERM/SIGHUP anything still running after the grace
  period gets SIGKILL, after SIGINT a second SIGINT does that. If ember_run itself is killed,
  its processes get SIGKILL, with their process groups (what they started, too). When one process exits non-zero or is killed by
  a signal, the others are stopped (SIGTERM, then SIGKILL after the grace period).

exit status:
  0 when every process exited 0; otherwise the first failure's exit code, or 128+signal if it
  was killed by a signal; 128+signal when ember_run was stopped by SIGINT/SIGTERM/SIGHUP;
  127 if the program was not found, 126 if it could not be executed; 2 for usage errors.
)";

[[noreturn]] void usage_error(const std::string& msg) {
  std::fprintf(stderr, "ember_run: %s\nusage: ember_run [options] -- program [args...]  (see ember_run --help)\n",
               msg.c_str());
  std::exit(kUsageError);
}

long parse_int(std::string_view name, std::string_view text, long lo, long hi) {
  long v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || v < lo || v > hi)
    usage_error(std::string(name) + " expects an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                "], got '" + std::string(text) + "'");
  return v;
}

struct Options {
  long nproc = 1, nnodes = 1, node_rank = 0;
  std::string master_addr = "127.0.0.1";
  long master_port = 29500;
  bool master_given = false;
  double grace_s = 5;
  std::string token_file;
  std::vector<std::string> command;
};

Options parse(int argc, char** argv) {
  Options o;
  int i = 1;
  for (; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--") break;
    if (arg == "-h" || arg == "--help") {
      std::fputs(kHelp, stdout);
      std::exit(0);
    }
    std::string name = arg, value;
    const size_t eq = arg.find('=');
    if (arg.rfind("--", 0) == 0 && eq != std::string::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
    } else if (arg.rfind("-", 0) != 0) {
      usage_error("missing '--' before the program ('" + arg + "')");
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      usage_error(arg + " needs a value");
    }
    if (name == "--nproc-per-node") {
      o.nproc = parse_int(name, value, 1, 1 << 16);
    } else if (name == "--nnodes") {
      o.nnodes = parse_int(name, value, 1, 1 << 20);
    } else if (name == "--node-rank") {
      o.node_rank = parse_int(name, value, 0, 1 << 20);
    } else if (name == "--master") {
      // HOST:PORT, HOST may be [IPv6]
      const size_t colon = value.rfind(':');
      std::string host = colon == std::string::npos ? "" : value.substr(0, colon);
      if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
      long port = 0;
      const std::string p = colon == std::string::npos ? "" : value.substr(colon + 1);
      auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), port);
      if (host.empty() || p.empty() || ec != std::errc() || end != p.data() + p.size() || port < 1 || port > 65535)
        usage_error("--master expects HOST:PORT with a port in [1, 65535], got '" + value + "'");
      o.master_addr = host;
      o.master_port = port;
      o.master_given = true;
    } else if (name == "--token-file") {
      o.token_file = value;
    } else if (name == "--grace-seconds") {
      char* end = nullptr;
      o.grace_s = std::strtod(value.c_str(), &end);
      if (value.empty() || *end != '\0' || !(o.grace_s >= 0 && o.grace_s <= 86400))
        usage_error("--grace-seconds expects a number of seconds in [0, 86400], got '" + value + "'");
    } else {
      usage_error("unknown option '" + name + "'");
    }
  }
  if (i >= argc) usage_error("missing '--' before the program");
  for (++i; i < argc; ++i) o.command.emplace_back(argv[i]);
  if (o.command.empty()) usage_error("no program after '--'");
  if (o.node_rank >= o.nnodes)
    usage_error("--node-rank " + std::to_string(o.node_rank) + " is out of range for --nnodes " +
                std::to_string(o.nnodes));
  return o;
}

// The job token the processes get in EMBER_JOB_TOKEN; empty: they read the one already in the
// environment. Never printed: it admits processes to the job's rendezvous store.
std::string job_token(const Options& o) {
  if (!o.token_file.empty()) {
    struct stat st {};
    if (stat(o.token_file.c_str(), &st) != 0)
      usage_error("--token-file '" + o.token_file + "': " + std::strerror(errno));
    if (S_ISDIR(st.st_mode))
      usage_error("--token-file '" + o.token_file + "' is a directory; the token is a file's first line");
    if (!S_ISREG(st.st_mode)) usage_error("--token-file '" + o.token_file + "' is not a regular file");
    if ((st.st_mode & 077) != 0) {
      char mode[8];
      std::snprintf(mode, sizeof mode, "%03o", static_cast<unsigned>(st.st_mode & 0777));
      usage_error("--token-file '" + o.token_file + "' is readable or writable by other users (mode " + mode +
                  "): a job token must be a secret; chmod 600 it");
    }
    std::FILE* f = std::fopen(o.token_file.c_str(), "r");
    if (f == nullptr) usage_error("--token-file '" + o.token_file + "': " + std::strerror(errno));
    char line[4096] = "";
    const bool got = std::fgets(line, sizeof line, f) != nullptr;
    std::fclose(f);
    std::string t = got ? line : "";
    while (!t.empty() && (t.back() == '\n' || t.back() == '\r' || t.back() == ' ' || t.back() == '\t')) t.pop_back();
    if (t.size() < 16)
      usage_error("--token-file '" + o.token_file + "': its first line has " + std::to_string(t.size()) +
                  " characters; a job token needs at least 16");
    return t;
  }
  for (const char* v : {"EMBER_JOB_TOKEN", "EMBER_JOB_TOKEN_FILE"})
    if (const char* e = std::getenv(v); e != nullptr && *e != '\0') return "";
  if (o.nnodes > 1)
    usage_error(
        "a job on several nodes needs the same token on every node: --token-file FILE (the same file, "
        "chmod 600, on each node) or EMBER_JOB_TOKEN");
  unsigned char b[32];
  size_t got = 0;
  while (got < sizeof b) {
    const ssize_t n = getrandom(b + got, sizeof b - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      std::fprintf(stderr, "ember_run: cannot make a job token: getrandom: %s\n", std::strerror(errno));
      std::exit(1);
    }
    got += static_cast<size_t>(n);
  }
  static const char hex[] = "0123456789abcdef";
  std::string t;
  for (unsigned char c : b) {
    t.push_back(hex[c >> 4]);
    t.push_back(hex[c & 15]);
  }
  return t;
}

// A free TCP port on 127.0.0.1 (the kernel's choice for port 0). Another process could take it
// before rank 0 binds it, but for concurrent test jobs that window is small.
long free_port() {
  const int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (s < 0 || bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      getsockname(s, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    std::fprintf(stderr, "ember_run: cannot pick a free port on 127.0.0.1: %s\n", std::strerror(errno));
    std::exit(1);
  }
  close(s);
  return ntohs(a.sin_port);
}

// ---- signals: the handler only writes the number into the self-pipe ----
constexpr int kHandled[] = {SIGCHLD, SIGINT, SIGTERM, SIGHUP};
int g_signal_pipe[2] = {-1, -1};

void on_signal(int sig) {
  const int saved = errno;
  const unsigned char b = static_cast<unsigned char>(sig);
  [[maybe_unused]] ssize_t n = write(g_signal_pipe[1], &b, 1);
  errno = saved;
}

void write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;  // stdout closed: the output is dropped, the job goes on
    p += w;
    n -= static_cast<size_t>(w);
  }
}

using Clock = std::chrono::steady_clock;

struct Stream {
  int fd = -1;          // read end of the child's pipe; -1 once closed
  int out = 1;          // where its lines go: 1 or 2
  std::string pending;  // bytes after the last newline
};

struct Proc {
  int rank = 0;
  pid_t pid = -1;
  bool running = false;
  Stream streams[2];
};

// Prints the complete lines in `s.pending` (all of it when `final`), each as one write().
void emit(const Proc& p, Stream& s, bool final) {
  const std::string prefix = "[rank " + std::to_string(p.rank) + "] ";
  size_t start = 0;
  for (;;) {
    size_t nl = s.pending.find('\n', start);
    if (nl == std::string::npos) {
      if (s.pending.size() - start >= kMaxLine || (final && start < s.pending.size())) nl = s.pending.size();
      else break;
    }
    std::string line = prefix;
    line.append(s.pending, start, nl - start).push_back('\n');
    write_all(s.out, line.data(), line.size());
    start = nl < s.pending.size() ? nl + 1 : nl;
  }
  s.pending.erase(0, start);
}

// Reads what is available; at end of file (or when `drain` and nothing is left) prints the
// partial last line and closes the pipe.
void pump(const Proc& p, Stream& s, bool drain) {
  char buf[65536];
  for (;;) {
    const ssize_t n = read(s.fd, buf, sizeof buf);
    if (n > 0) {
      s.pending.append(buf, static_cast<size_t>(n));
      emit(p, s, false);
      if (drain) continue;
      return;  // one read per wake-up: a rank that writes a lot cannot starve the others
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN && !drain) return;
    emit(p, s, true);  // EOF, an error, or drained after the process was reaped
    close(s.fd);
    s.fd = -1;
    return;
  }
}

std::string describe(int status) {
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    return "was killed by signal " + std::to_string(sig) + " (" + strsignal(sig) + ")";
  }
  return "exited with code " + std::to_string(WEXITSTATUS(status));
}

int exit_code_of(int status) { return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status); }

class Launcher {
 public:
  explicit Launcher(Options o) : o_(std::move(o)), token_(job_token(o_)) {}

  int run() {
    if (pipe2(g_signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
      std::perror("ember_run: pipe");
      return 1;
    }
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_NOCLDSTOP | SA_RESTART;
    for (int sig : kHandled) sigaction(sig, &sa, nullptr);

    // Orphaned grandchildren are reparented to us (and reaped in reap()) instead of to PID 1.
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    start_keeper();
    if (!o_.master_given && o_.nnodes == 1) o_.master_port = free_port();
    procs_.resize(static_cast<size_t>(o_.nproc));
    for (long l = 0; l < o_.nproc && !stopping_; ++l) start(static_cast<int>(l));

    while (any_running()) {
      std::vector<pollfd> fds{{g_signal_pipe[0], POLLIN, 0}};
      std::vector<Stream*> owners{nullptr};
      for (Proc& p : procs_)
        for (Stream& s : p.streams)
          if (s.fd >= 0) {
            fds.push_back({s.fd, POLLIN, 0});
            owners.push_back(&s);
          }
      int timeout_ms = -1;
      if (kill_at_) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*kill_at_ - Clock::now()).count();
        timeout_ms = static_cast<int>(std::max<long long>(0, left) + 1);
      }
      const int n = poll(fds.data(), fds.size(), timeout_ms);
      if (n < 0 && errno != EINTR) {
        std::perror("ember_run: poll");
        kill_all(SIGKILL);
      }
      for (size_t i = 1; n > 0 && i < fds.size(); ++i)
        if (fds[i].revents) pump(proc_of(owners[i]), *owners[i], false);
      if (n > 0 && fds[0].revents) handle_signals();
      if (kill_at_ && Clock::now() >= *kill_at_) {
        kill_all(SIGKILL);
        kill_at_.reset();
      }
    }
    for (Proc& p : procs_)  // pipes a grandchild still holds open: print what is there
      for (Stream& s : p.streams)
        if (s.fd >= 0) pump(p, s, true);
    tell_keeper(0);  // a normal end: the keeper leaves without killing
    return exit_code_;
  }

 private:
  Options o_;
  std::string token_;  // EMBER_JOB_TOKEN for the processes; empty: theirs is inherited
  std::vector<Proc> procs_;
  bool stopping_ = false;  // a failure or a signal: no more failures are reported
  int exit_code_ = 0;
  int sigints_ = 0;
  std::optional<Clock::time_point> kill_at_;
  int keeper_fd_ = -1;  // the launcher's end of the keeper's socket pair

  // The keeper (see the file comment): started before any rank, so no rank holds the launcher's
  // end (close-on-exec besides), and the keeper holds only its own.
  void start_keeper() {
    int fds[2];  // a socket pair, not a pipe: send() with MSG_NOSIGNAL cannot SIGPIPE the launcher
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
      std::perror("ember_run: socketpair");
      std::exit(1);
    }
    const pid_t pid = fork();
    if (pid < 0) {
      std::perror("ember_run: fork");
      std::exit(1);
    }
    if (pid == 0) {
      close(fds[1]);
      setpgid(0, 0);  // not in the terminal's foreground group: Ctrl-C is the launcher's to forward
      for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGPIPE}) signal(sig, SIG_IGN);
      signal(SIGCHLD, SIG_DFL);
      for (int fd = 0; fd < 3; ++fd) {  // hold no terminal or output pipe open
        const int devnull = open("/dev/null", O_RDWR);
        if (devnull >= 0 && devnull != fd) {
          dup2(devnull, fd);
          close(devnull);
        }
      }
      std::vector<pid_t> groups;
      int32_t v = 0;
      ssize_t n;
      while ((n = read(fds[0], &v, sizeof v)) == static_cast<ssize_t>(sizeof v) || (n < 0 && errno == EINTR)) {
        if (n < 0) continue;
        if (v == 0) _exit(0);  // the launcher ended normally
        if (v > 0) groups.push_back(v);
        if (v < 0) std::erase(groups, -v);  // a group that is gone
      }
      for (pid_t g : groups) kill(-g, SIGKILL);
      _exit(0);
    }
    close(fds[0]);
    keeper_fd_ = fds[1];
  }

  // +group: a rank's process group to kill if the launcher dies; -group: gone; 0: normal end.
  void tell_keeper(int32_t v) {
    if (keeper_fd_ < 0) return;
    ssize_t n;
    while ((n = send(keeper_fd_, &v, sizeof v, MSG_NOSIGNAL)) < 0 && errno == EINTR) {
    }
    if (v == 0) {
      close(keeper_fd_);
      keeper_fd_ = -1;
    }
  }

  bool any_running() const {
    for (const Proc& p : procs_)
      if (p.running) return true;
    return false;
  }

  Proc& proc_of(const Stream* s) {
    for (Proc& p : procs_)
      if (s == &p.streams[0] || s == &p.streams[1]) return p;
    std::abort();
  }

  std::vector<std::string> environment(int local_rank) const {
    const long rank = o_.node_rank * o_.nproc + local_rank;
    const std::vector<std::pair<std::string, std::string>> ours = {{"RANK", std::to_string(rank)},
                                                                   {"WORLD_SIZE", std::to_string(o_.nnodes * o_.nproc)},
                                                                   {"LOCAL_RANK", std::to_string(local_rank)},
                                                                   {"LOCAL_WORLD_SIZE", std::to_string(o_.nproc)},
                                                                   {"GROUP_RANK", std::to_string(o_.node_rank)},
                                                                   {"NODE_RANK", std::to_string(o_.node_rank)},
                                                                   {"MASTER_ADDR", o_.master_addr},
                                                                   {"MASTER_PORT", std::to_string(o_.master_port)},
                                                                   {"EMBER_RUN", "1"}};
    std::vector<std::pair<std::string, std::string>> all = ours;
    if (!token_.empty()) all.emplace_back("EMBER_JOB_TOKEN", token_);
    std::vector<std::string> env;
    for (char** e = environ; *e; ++e) {
      const std::string_view kv = *e;
      bool replaced = false;
      for (const auto& [k, v] : all)
        replaced |= kv.size() > k.size() && kv.substr(0, k.size()) == k && kv[k.size()] == '=';
      if (!replaced) env.emplace_back(kv);
    }
    for (const auto& [k, v] : all) env.push_back(k + "=" + v);
    // N processes share this node's cores: each gets its share of ember's CPU thread pool unless
    // the user chose (torchrun sets OMP_NUM_THREADS=1 for the same reason).
    if (std::getenv("EMBER_NUM_THREADS") == nullptr) {
      const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
      env.push_back("EMBER_NUM_THREADS=" + std::to_string(std::max<long>(1, static_cast<long>(cores) / o_.nproc)));
    }
    return env;
  }

  void start(int local_rank) {
    Proc& p = procs_[static_cast<size_t>(local_rank)];
    p.rank = static_cast<int>(o_.node_rank * o_.nproc + local_rank);
    std::vector<std::string> env_s = environment(local_rank);
    std::vector<char*> envp, argv;
    for (std::string& e : env_s) envp.push_back(e.data());
    for (std::string& a : o_.command) argv.push_back(a.data());
    envp.push_back(nullptr);
    argv.push_back(nullptr);

    int out[2], err[2], exec_err[2];
    if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0 || pipe2(exec_err, O_CLOEXEC) != 0) {
      std::perror("ember_run: pipe");
      std::exit(1);
    }
    // Blocked across fork(): until the child resets them, a signal would run our handler there.
    sigset_t handled, old;
    sigemptyset(&handled);
    for (int sig : kHandled) sigaddset(&handled, sig);
    sigprocmask(SIG_BLOCK, &handled, &old);
    const pid_t parent = getpid();
    const pid_t pid = fork();
    if (pid != 0) sigprocmask(SIG_SETMASK, &old, nullptr);
    if (pid < 0) {
      std::perror("ember_run: fork");
      std::exit(1);
    }
    if (pid == 0) {  // the child: async-signal-safe calls only until exec
      setpgid(0, 0);
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(1);
      struct sigaction dfl {};
      dfl.sa_handler = SIG_DFL;
      for (int sig : kHandled) sigaction(sig, &dfl, nullptr);
      sigprocmask(SIG_SETMASK, &old, nullptr);
      const int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
      if (devnull >= 0) dup2(devnull, 0);
      dup2(out[1], 1);
      dup2(err[1], 2);
      execvpe(argv[0], argv.data(), envp.data());
      const int e = errno;
      [[maybe_unused]] ssize_t n = write(exec_err[1], &e, sizeof e);
      _exit(e == ENOENT ? 127 : 126);
    }
    setpgid(pid, pid);  // also here: no window in which a signal to the group misses it
    tell_keeper(pid);
    close(out[1]);
    close(err[1]);
    close(exec_err[1]);
    p.pid = pid;
    p.running = true;
    p.streams[0] = {out[0], 1, {}};
    p.streams[1] = {err[0], 2, {}};
    for (Stream& s : p.streams) fcntl(s.fd, F_SETFL, fcntl(s.fd, F_GETFL) | O_NONBLOCK);

    int e = 0;
    ssize_t n;
    while ((n = read(exec_err[0], &e, sizeof e)) < 0 && errno == EINTR) {
    }
    close(exec_err[0]);
    if (n == static_cast<ssize_t>(sizeof e) && !stopping_) {
      std::fprintf(stderr, "ember_run: cannot execute '%s': %s\n", o_.command[0].c_str(), std::strerror(e));
      stop(e == ENOENT ? 127 : 126);
    }
  }

  // The first failure: remember its code and stop everything else.
  void stop(int code) {
    stopping_ = true;
    exit_code_ = code;
    kill_all(SIGTERM);
    arm_grace();
  }

  void arm_grace() {
    const auto grace = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o_.grace_s));
    if (!kill_at_) kill_at_ = Clock::now() + grace;
  }

  int kill_all(int sig) {
    int n = 0;
    for (const Proc& p : procs_)
      if (p.running) {
        kill(-p.pid, sig);
        ++n;
      }
    return n;
  }

  void handle_signals() {
    unsigned char sigs[64];
    ssize_t n;
    while ((n = read(g_signal_pipe[0], sigs, sizeof sigs)) > 0)
      for (ssize_t i = 0; i < n; ++i) {
        const int sig = sigs[i];
        if (sig == SIGCHLD) {
          reap();
          continue;
        }
        if (!stopping_) exit_code_ = 128 + sig;
        stopping_ = true;
        if (sig == SIGINT && ++sigints_ >= 2) {
          std::fprintf(stderr, "ember_run: second SIGINT: killing the processes (SIGKILL)\n");
          kill_all(SIGKILL);
          continue;
        }
        const int k = kill_all(sig);
        std::fprintf(stderr, "ember_run: got %s, forwarded it to %d process%s\n", sigabbrev(sig), k,
                     k == 1 ? "" : "es");
        if (sig != SIGINT) arm_grace();
      }
  }

  static const char* sigabbrev(int sig) {
    return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : sig == SIGHUP ? "SIGHUP" : "a signal";
  }

  // Collects every exited child: our ranks, and orphaned grandchildren (we are their subreaper).
  void reap() {
    int status = 0;
    pid_t w;
    while ((w = waitpid(-1, &status, WNOHANG)) > 0 || (w < 0 && errno == EINTR)) {
      Proc* p = nullptr;
      for (Proc& q : procs_)
        if (q.running && q.pid == w) p = &q;
      if (!p) continue;
      p->running = false;
      // An empty group's number may be reused: the keeper forgets it (a group with members left,
      // a rank's children, stays on its list).
      if (kill(-p->pid, 0) != 0 && errno == ESRCH) tell_keeper(-p->pid);
      for (Stream& s : p->streams)  // everything it wrote is in the pipe now
        if (s.fd >= 0) pump(*p, s, true);
      const bool failed = !WIFEXITED(status) || WEXITSTATUS(status) != 0;
      if (!failed || stopping_) continue;
      const int others = kill_all(SIGTERM);
      const std::string what = others == 0 ? "no other process was running"
                                           : "stopping the other " + std::to_string(others) + " process" +
                                                 (others == 1 ? "" : "es") + " (SIGTERM, SIGKILL after " +
                                                 format_seconds(o_.grace_s) + ")";
      std::fprintf(stderr, "ember_run: rank %d %s; %s\n", p->rank, describe(status).c_str(), what.c_str());
      stopping_ = true;
      exit_code_ = exit_code_of(status);
      arm_grace();
    }
  }

  static std::string format_seconds(double s) {
    char b[32];
    std::snprintf(b, sizeof b, "%g s", s);
    return b;
  }
};

}  // namespace

int main(int argc, char** argv) {
  // One line and exit code 1 for what the launcher itself cannot do (out of memory), never
  // std::terminate's abort, which a caller would read as a rank's crash (Note [no abort] in
  // core/error.h; this program links nothing of ember's, so it says so itself).
  std::set_terminate([] {
    std::fprintf(stderr, "ember_run: error: an exception escaped where it could not be handled\n");
    std::_Exit(1);
  });
  try {
    Options o = parse(argc, argv);
    return Launcher(std::move(o)).run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ember_run: error: %s\n", e.what());
    return 1;
  }
}
