// Process groups: collectives across the processes of a data-parallel job.
//
//   auto pg = dist::init_process_group();          // RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
//   Tensor g = ...;                                 // same shape and dtype on every rank
//   pg->all_reduce(g, dist::ReduceOp::kAvg)->wait();
//
// One interface, two backends (chosen by the tensors' device, or forced with Options::backend):
//   - Gloo (dist/gloo_backend.cpp) for CPU tensors: TCP between processes. Collectives run in
//     order on one worker thread per group, so a call returns at once and wait() blocks the host.
//   - NCCL (dist/nccl_backend.cpp, CUDA builds) for CUDA tensors: one process per GPU, collectives
//     on a dedicated stream that waits on the caller's current stream with an event; wait() makes
//     the current stream wait for the collective (no host sync), so a training step containing
//     collectives can be captured in a CUDA graph.
//
// Every collective is in place on its tensors, must be called by every rank in the same order with
// the same shapes and dtypes, and has a sequence number (1, 2, ...). A collective that does not
// finish within the group's timeout, or that fails because a peer went away, aborts the group and
// throws dist::DistError from wait() naming the collective, its sequence number, its tensor sizes
// and the last collective each rank completed (Note [dist faults] in process_group.cpp). After
// that, every further call on the group throws the same error.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "dist/launch_env.h"  // LaunchEnv, launch_env(): rank and world size from the launcher

namespace ember::cuda {
class Graph;
}

namespace ember::dist {

enum class ReduceOp : uint8_t { kSum, kAvg, kMax, kMin };
const char* to_string(ReduceOp op);

// A collective that failed, timed out, or ran on a group that had failed before.
class DistError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The process was asked to stop (Options::stop_requested: SIGINT, SIGTERM) while it waited in the
// rendezvous; signal() is the signal, for the exit code 128 + signal.
class Interrupted : public DistError {
 public:
  Interrupted(const std::string& what, int signal) : DistError(what), signal_(signal) {}
  int signal() const { return signal_; }

 private:
  int signal_;
};

// The handle of one collective. wait() returns when its result may be used: on the host for Gloo,
// on the current stream for NCCL. It throws DistError when the collective failed or timed out.
class Work {
 public:
  virtual ~Work() = default;
  virtual void wait() = 0;
  // True once the collective has finished (no blocking, no host sync).
  virtual bool is_completed() = 0;
  uint64_t seq() const { return seq_; }

 protected:
  uint64_t seq_ = 0;
};
using WorkPtr = std::shared_ptr<Work>;

// Options::timeout without a limit (EMBER_DIST_TIMEOUT=none): the rendezvous, the store and the
// watchdogs wait as long as it takes (Gloo's transport, which needs a number, gets a year).
inline constexpr std::chrono::milliseconds kNoTimeout = std::chrono::milliseconds::max();
// now + timeout, saturating: kNoTimeout (and anything past the clock's range) never comes.
std::chrono::steady_clock::time_point deadline_after(std::chrono::milliseconds timeout);
// "5 s", "0.25 s" or "no limit", for messages.
std::string describe_timeout(std::chrono::milliseconds timeout);

struct Options {
  // "gloo", "nccl", or "" = nccl when CUDA tensors will be used (device is CUDA), else gloo.
  std::string backend;
  Device device = kCPU;
  // Per-collective timeout, also the rendezvous deadline. EMBER_DIST_TIMEOUT (seconds from 0.001
  // to 604800, or none: kNoTimeout) overrides the default of 10 minutes.
  std::chrono::milliseconds timeout = std::chrono::minutes(10);
  // Rendezvous. Empty/-1 = from the environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), as
  // torchrun and ember_run set it.
  int rank = -1;
  int world_size = -1;
  std::string master_addr;
  int master_port = -1;
  // Asked at least every 100 ms while the rendezvous waits (for rank 0's store, the other ranks,
  // the verdict, Gloo's addresses): a non-zero answer, the signal that asked this process to stop,
  // ends init_process_group with dist::Interrupted. Empty: only the timeout ends a wait.
  std::function<int()> stop_requested;
};

class Store;

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  int rank() const { return rank_; }
  int size() const { return size_; }
  virtual std::string backend() const = 0;
  std::chrono::milliseconds timeout() const { return timeout_; }
  void set_timeout(std::chrono::milliseconds t) { timeout_ = t; }

  // t := op over ranks of t (in place). kAvg divides the sum by size() (integers: truncating).
  virtual WorkPtr all_reduce(Tensor& t, ReduceOp op = ReduceOp::kSum) = 0;
  // t := root's t.
  virtual WorkPtr broadcast(Tensor& t, int root = 0) = 0;
  // out (size() * in.numel() elements, contiguous) := the ranks' `in`, concatenated in rank order.
  virtual WorkPtr all_gather(Tensor& out, const Tensor& in) = 0;
  // out (in.numel() / size() elements) := this rank's slice of op over ranks of `in`.
  virtual WorkPtr reduce_scatter(Tensor& out, const Tensor& in, ReduceOp op = ReduceOp::kSum) = 0;
  virtual WorkPtr barrier() = 0;

  // Collectives captured in a CUDA graph run again at every replay, where the group does not see
  // them (Note [replayed collectives] in dist/nccl_backend.cpp). Replay such a graph with this
  // instead of graph.replay(): it throws the group's failure rather than replay on a failed group,
  // replays, and has the watchdog time the replay like a collective: `what` names it and `desc`
  // says what it reduces (both quoted by a timeout), and it takes the next sequence number. A rank
  // that stops in the middle of a replay then ends the others' replays in the group's timeout
  // error instead of a hang. Backends whose collectives cannot be captured (gloo) just replay.
  virtual void replay_graph(cuda::Graph& graph, const std::string& what, const std::string& desc);

  // The number of collectives (and tracked graph replays) started so far on this group (the next
  // gets seq = that + 1).
  uint64_t started() const { return seq_; }
  // Marks the group failed (future calls throw `why`) and tears down its connections so that
  // peers blocked in a collective with this rank fail fast instead of waiting for the timeout.
  virtual void abort(const std::string& why) = 0;

 protected:
  ProcessGroup(int rank, int size, std::chrono::milliseconds timeout) : rank_(rank), size_(size), timeout_(timeout) {}
  // Checks the arguments every backend shares (defined, contiguous, device, sizes); throws
  // std::invalid_argument naming the collective and the problem.
  void check_tensor(const char* what, const Tensor& t) const;
  // `root` is a rank of this group.
  void check_root(const char* what, int root) const;
  // all_gather: `out` has in's dtype and size() x its elements.
  void check_all_gather_sizes(const Tensor& out, const Tensor& in) const;
  // reduce_scatter: `in` has out's dtype and size() x its elements.
  void check_reduce_scatter_sizes(const Tensor& out, const Tensor& in) const;
  int rank_;
  int size_;
  std::chrono::milliseconds timeout_;
  uint64_t seq_ = 0;
};
using ProcessGroupPtr = std::shared_ptr<ProcessGroup>;

// Rendezvous + the backend. Throws DistError when a rank can not be reached or the ranks disagree
// (world size, backend), naming the address or the rank; never hangs past options.timeout.
ProcessGroupPtr init_process_group(Options options = {});

// The group made by init_process_group (null before): what DDP, SyncBatchNorm and mnist_train use
// by default.
ProcessGroupPtr default_group();
void set_default_group(ProcessGroupPtr pg);
// Forgets the default group (its connections close when the last user lets go).
void destroy_process_group();

}  // namespace ember::dist
