// Rendezvous, the default group, and what every backend shares (dist/process_group.h).
//
// Note [rendezvous]: rank 0 serves a TcpStore on MASTER_PORT; every rank connects (retrying until
// the deadline) and registers "rdzv/rank/<r>" = "<world size> <backend>", counting itself under
// "rdzv/count/<r>" so that two processes claiming one rank are caught. Rank 0 waits for all
// ranks, compares what they registered with its own view and publishes "rdzv/verdict": "ok" or
// the error every rank then throws. A rank that never joins makes rank 0's wait time out naming
// it; a rank started with a different WORLD_SIZE is named with both values. Nobody waits longer
// than the timeout, so a wrong launch is an error, never a hang.
//
// Note [dist faults]: a collective that fails (a peer closed its connection: it exited or
// crashed) or does not complete within the group's timeout (a peer hangs or never called it)
// aborts the group. Its message names the backend, the collective, its sequence number, its
// tensors, and the last collective every rank completed, which each rank's watchdog publishes to
// the store about once a second ("progress/<rank>"): the rank that is behind is the one to look
// at. Once a group failed, every later call throws the first error, so a training loop can not
// go on with half-reduced gradients.
#include "dist/process_group.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <sstream>

#include "core/cuda/graph.h"
#include "core/env.h"
#include "core/error.h"
#include "core/runtime.h"
#include "dist/backends.h"
#include "dist/store.h"

namespace ember::dist {

const char* to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kAvg: return "avg";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kMin: return "min";
  }
  return "?";
}

void ProcessGroup::check_tensor(const char* what, const Tensor& t) const {
  if (!t.defined()) throw std::invalid_argument(std::string(what) + ": the tensor is undefined");
  if (!t.is_contiguous())
    throw std::invalid_argument(std::string(what) + ": the tensor must be contiguous, got " + t.describe() +
                                " with strides that are not (call .contiguous() first)");
}

void ProcessGroup::replay_graph(cuda::Graph& graph, const std::string&, const std::string&) { graph.replay(); }

void ProcessGroup::check_root(const char* what, int root) const {
  if (root < 0 || root >= size_)
    throw std::invalid_argument(std::string(what) + ": root " + std::to_string(root) +
                                " is not a rank of this group (size " + std::to_string(size_) + ")");
}

void ProcessGroup::check_all_gather_sizes(const Tensor& out, const Tensor& in) const {
  if (out.dtype() != in.dtype() || out.numel() != in.numel() * size_)
    throw std::invalid_argument("all_gather: the output must be " + std::string(dtype_name(in.dtype())) + " with " +
                                std::to_string(in.numel() * size_) + " elements (world size " + std::to_string(size_) +
                                " x " + std::to_string(in.numel()) + "), got " + out.describe());
}

void ProcessGroup::check_reduce_scatter_sizes(const Tensor& out, const Tensor& in) const {
  if (out.dtype() != in.dtype() || in.numel() != out.numel() * size_)
    throw std::invalid_argument("reduce_scatter: the input must have world size (" + std::to_string(size_) +
                                ") x the output's elements: got input " + in.describe() + " and output " +
                                out.describe());
}

std::chrono::steady_clock::time_point deadline_after(std::chrono::milliseconds timeout) {
  using Clock = std::chrono::steady_clock;
  // a century is past any job; the clock's nanoseconds reach about 292 years
  if (timeout > std::chrono::hours(24 * 365 * 100)) return Clock::time_point::max();
  return Clock::now() + timeout;
}

std::string describe_timeout(std::chrono::milliseconds timeout) {
  if (timeout == kNoTimeout) return "no limit";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g s", static_cast<double>(timeout.count()) / 1000.0);
  return buf;
}

// ---- the default group ----

namespace {

std::mutex g_default_mu;
ProcessGroupPtr g_default;

}  // namespace

ProcessGroupPtr default_group() {
  std::lock_guard<std::mutex> lock(g_default_mu);
  return g_default;
}
void set_default_group(ProcessGroupPtr pg) {
  std::lock_guard<std::mutex> lock(g_default_mu);
  g_default = std::move(pg);
}
void destroy_process_group() { set_default_group(nullptr); }

// ---- rendezvous (Note [rendezvous]) ----

namespace {

// EMBER_DIST_TIMEOUT: seconds in [1 ms, a week], or "none" (Note [environment numbers] in
// core/env.h). Before, inf and 1e300 overflowed into a negative timeout that failed every rank
// with a store error, and 1e-6 became 0 ms.
std::chrono::milliseconds timeout_from_env(std::chrono::milliseconds fallback) {
  const std::string v = runtime::env("EMBER_DIST_TIMEOUT");
  if (v.empty()) return fallback;
  if (v == "none") return kNoTimeout;
  try {
    return std::chrono::milliseconds(std::llround(env::parse_number("EMBER_DIST_TIMEOUT", v, 0.001, 604800) * 1000));
  } catch (const Error& e) {
    throw DistError(std::string(e.what()) + " seconds, or none (no limit)");
  }
}

// The options completed from the environment (EMBER_DIST_TIMEOUT, the launcher's variables: Note
// [launch conventions] in launch_env.h) and checked. `env` is what launch_env() found.
Options resolve_options(Options o, const LaunchEnv& env) {
  o.timeout = timeout_from_env(o.timeout);
  bool ws_set = true, rank_set = true;
  if (o.world_size < 0) {
    o.world_size = env.world_size;
    ws_set = env.distributed;
  }
  if (o.rank < 0) {
    o.rank = env.rank;
    rank_set = env.rank_set;
  }
  if (ws_set && o.world_size > 1 && !rank_set)
    throw DistError("init_process_group: WORLD_SIZE=" + std::to_string(o.world_size) +
                    " but RANK is not set; start the program with ember_run (or set RANK for every process)");
  if (o.world_size < 1)
    throw DistError("init_process_group: WORLD_SIZE must be at least 1, got " + std::to_string(o.world_size));
  if (o.rank >= o.world_size)
    throw DistError("init_process_group: RANK=" + std::to_string(o.rank) +
                    " is not below WORLD_SIZE=" + std::to_string(o.world_size));
  if (o.master_addr.empty()) o.master_addr = env.master_addr.empty() ? "127.0.0.1" : env.master_addr;
  if (o.master_port < 0) {
    o.master_port = std::max(env.master_port, 0);
    if (env.master_port < 0 && o.world_size > 1)
      throw DistError(
          "init_process_group: MASTER_PORT is not set; start the program with ember_run or set MASTER_ADDR and "
          "MASTER_PORT");
  }
  if (o.backend.empty()) o.backend = o.device.is_cuda() ? "nccl" : "gloo";
  if (o.backend != "gloo" && o.backend != "nccl")
    throw DistError("init_process_group: unknown backend '" + o.backend + "' (expected gloo or nccl)");
  if (o.backend == "nccl" && !nccl_available())
    throw DistError(
        "init_process_group: the nccl backend is not available in this build (CPU-only or the simulator); use gloo");
  return o;
}

// Rank 0 says where its store listens (Note [store security]), never the token itself.
void announce_store(const TcpStore& store, const JobToken& token, const LaunchEnv& env, int n) {
  const bool torchrun = env.source.empty() || env.source == "ember_run" || env.source == "RANK and WORLD_SIZE";
  std::string where;
  for (const auto& a : store.listen_addresses()) where += (where.empty() ? "" : ", ") + a;
  const std::string ranks = torchrun ? std::string()
                                     : "; " + std::to_string(n) + " ranks from " + env.source +
                                           (env.master_source.empty() ? "" : ", master from " + env.master_source);
  std::fprintf(stderr, "ember: rank 0 serves the rendezvous store on %s (%s; job token from %s%s)\n", where.c_str(),
               store.loopback_only() ? "loopback only" : "reachable from other machines", token.source.c_str(),
               ranks.c_str());
  if (token.is_default && (!store.loopback_only() || token.source != "the public default"))
    std::fprintf(stderr,
                 "ember: warning: the job token is %s, which others can guess: any process that reaches the store "
                 "can join or disturb this job. Share a secret one with ember_run --token-file or "
                 "EMBER_JOB_TOKEN_FILE (docs/dist.md, Security)\n",
                 token.source.c_str());
}

// Rank 0's verdict on the job: "ok", or why not (ranks missing after the timeout, or started with
// another WORLD_SIZE or backend).
std::string rank0_verdict(TcpStore& store, const Options& o) {
  const int n = o.world_size;
  std::vector<std::string> keys;
  for (int i = 0; i < n; ++i) keys.push_back("rdzv/rank/" + std::to_string(i));
  try {
    store.wait(keys, o.timeout);
  } catch (const Interrupted&) {
    throw;
  } catch (const DistError&) {
    std::string missing;
    for (int i = 0; i < n; ++i)
      if (!store.check({keys[i]})) missing += (missing.empty() ? "" : ", ") + std::to_string(i);
    // Ranks that registered between the timeout and this look joined after all: go on. (Before,
    // that made "rank(s)  of WORLD_SIZE=2 never joined", naming nobody.)
    if (!missing.empty())
      return "rendezvous timed out after " + describe_timeout(o.timeout) + ": rank(s) " + missing +
             " of WORLD_SIZE=" + std::to_string(n) +
             " never joined (not started, crashed early, or started with another MASTER_ADDR:MASTER_PORT)";
  }
  for (int i = 1; i < n; ++i) {
    std::istringstream in(store.get(keys[i]));
    int their_n = 0;
    std::string their_backend;
    in >> their_n >> their_backend;
    if (their_n != n)
      return "WORLD_SIZE mismatch: rank " + std::to_string(i) +
             " was started with WORLD_SIZE=" + std::to_string(their_n) +
             " but rank 0 with WORLD_SIZE=" + std::to_string(n);
    if (their_backend != o.backend)
      return "backend mismatch: rank " + std::to_string(i) + " uses " + their_backend + " but rank 0 uses " + o.backend;
  }
  return "ok";
}

// Rank 0 publishes its verdict; a bad one ends the job, after the ranks that joined have had a
// moment to read it before the store goes away.
void publish_verdict(TcpStore& store, const Options& o) {
  const std::string verdict = rank0_verdict(store, o);
  store.set("rdzv/verdict", verdict);
  if (verdict == "ok") return;
  try {
    std::vector<std::string> acks;
    for (int i = 1; i < o.world_size; ++i) acks.push_back("rdzv/ack/" + std::to_string(i));
    store.wait(acks, std::min<std::chrono::milliseconds>(o.timeout, std::chrono::seconds(2)));
  } catch (const DistError&) {
  }
  throw DistError("init_process_group (rank 0): " + verdict);
}

// Another rank reads rank 0's verdict (and knows at once when rank 0 has another WORLD_SIZE).
void await_verdict(TcpStore& store, const Options& o) {
  const int r = o.rank, n = o.world_size;
  std::istringstream in(store.get("rdzv/rank/0"));
  int root_n = 0;
  in >> root_n;
  if (root_n != n) {
    store.set("rdzv/ack/" + std::to_string(r), "1");
    throw DistError("init_process_group (rank " + std::to_string(r) +
                    "): WORLD_SIZE mismatch: this rank was started with WORLD_SIZE=" + std::to_string(n) +
                    " but rank 0 with WORLD_SIZE=" + std::to_string(root_n));
  }
  // Rank 0 publishes its verdict within its own timeout; wait a little longer than that so a
  // rank that is missing is named by rank 0's message, not by this rank's own timeout.
  store.wait({"rdzv/verdict"}, o.timeout == kNoTimeout ? kNoTimeout : o.timeout + std::chrono::seconds(10));
  const std::string verdict = store.get("rdzv/verdict");
  store.set("rdzv/ack/" + std::to_string(r), "1");
  if (verdict != "ok") throw DistError("init_process_group (rank " + std::to_string(r) + "): " + verdict);
}

}  // namespace

ProcessGroupPtr init_process_group(Options given) {
  const LaunchEnv env = launch_env();
  const Options o = resolve_options(std::move(given), env);
  const int r = o.rank, n = o.world_size;
  const JobToken token = job_token();
  auto store = std::make_shared<TcpStore>(o.master_addr, o.master_port, r == 0, o.timeout,
                                          StoreSecurity{token.secret, n, "rank " + std::to_string(r)});
  store->set_interrupt(o.stop_requested);
  if (r == 0) announce_store(*store, token, env, n);
  store->set("rdzv/rank/" + std::to_string(r), std::to_string(n) + " " + o.backend);
  if (store->add("rdzv/count/" + std::to_string(r), 1) != 1) {
    std::string msg = "init_process_group: two processes were started as RANK=" + std::to_string(r) +
                      "; every rank must be unique (check RANK for each process)";
    store->set("rdzv/verdict", msg);
    throw DistError(msg);
  }
  if (r == 0) publish_verdict(*store, o);
  else await_verdict(*store, o);

  auto pg_store = std::make_shared<PrefixStore>("pg0", store);
  ProcessGroupPtr pg = o.backend == "nccl" ? make_nccl_group(pg_store, r, n, o.device.index, o.timeout)
                                           : make_gloo_group(pg_store, r, n, o.timeout);
  store->set_interrupt({});  // the rendezvous is over: a stop request is the trainer's business now
  set_default_group(pg);
  // The default group goes at exit before what it uses: handlers registered later run earlier, and
  // the CUDA runtime, the caching allocator and the backend's statics were all set up by now. Left
  // to the static destructors, an NCCL group outlived the allocator's events and crashed the exit
  // of a simulated two-rank job (tests/test_dist_nccl_jobs_gpu.cpp).
  static std::once_flag at_exit;
  std::call_once(at_exit, [] { std::atexit([] { destroy_process_group(); }); });
  return pg;
}

// ---- progress and fault messages (Note [dist faults]) ----

ProgressBoard::ProgressBoard(std::shared_ptr<Store> store, int rank, int size)
    : store_(std::move(store)), rank_(rank), size_(size) {}

void ProgressBoard::completed(uint64_t seq) { last_.store(seq, std::memory_order_relaxed); }
uint64_t ProgressBoard::last_completed() const { return last_.load(std::memory_order_relaxed); }

void ProgressBoard::publish() {
  uint64_t v = last_completed();
  if (v == published_) return;
  try {
    store_->set("progress/" + std::to_string(rank_), std::to_string(v));
    published_ = v;
  } catch (const std::exception&) {
    // The store is gone (rank 0 exited): nothing to publish to; the collectives will say why.
  }
}

std::string ProgressBoard::describe_all() {
  publish();
  std::ostringstream os;
  bool reachable = true;
  for (int i = 0; i < size_; ++i) {
    os << (i ? ", " : "") << "rank " << i << ": ";
    if (i == rank_) {
      uint64_t v = last_completed();
      if (v) os << '#' << v;  // not "#" + ...: GCC 12's -Wrestrict misfires on that (GCC bug 105651)
      else os << "none";
      continue;
    }
    if (!reachable) {
      os << "unknown";
      continue;
    }
    try {
      auto v = store_->peek("progress/" + std::to_string(i), std::chrono::milliseconds(1500));
      // progress is published about once a second: a rank that failed sooner shows as unknown
      os << (v ? (*v == "0" ? std::string("none") : "#" + *v) : std::string("unknown (not published yet)"));
    } catch (const std::exception&) {
      reachable = false;
      os << "unknown (the store on rank 0 does not answer)";
    }
  }
  return os.str();
}

std::string collective_failure(const std::string& backend, const char* what, uint64_t seq, const std::string& tensors,
                               int rank, int size, const std::string& why, ProgressBoard* board) {
  std::ostringstream os;
  os << backend << " " << what << " #" << seq << " (" << tensors << ") on rank " << rank << " of " << size
     << " failed: " << why;
  if (board != nullptr) os << ". Last collective completed on each rank: " << board->describe_all();
  return os.str();
}

}  // namespace ember::dist
