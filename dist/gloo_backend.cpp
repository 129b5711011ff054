// The Gloo backend: collectives on CPU tensors over TCP (Debian's libgloo).
//
// Collectives run in call order on one worker thread per group, so a call returns a Work at once
// and DDP's bucket reductions overlap the rest of backward. Gloo moves bytes and calls our
// reduction functions (one per dtype and op, in the dtype's accumulation type: f16/bf16 add in
// float and round once per pair, as PyTorch's Gloo backend does); kAvg is the sum divided by the
// world size on the worker thread. reduce_scatter is an all_reduce of a copy followed by taking
// this rank's slice (Gloo 2022 has no ring reduce-scatter in its options API): correct, and 2x the
// bytes of a real reduce-scatter, which ember does not use on the training path.
//
// Faults (Note [dist faults] in process_group.cpp): Gloo throws when a peer's connection closes or
// an operation exceeds the timeout; the worker turns that into the message every backend gives and
// fails the group. A watchdog thread publishes this rank's progress about once a second and fails
// a collective that is still running 10 s past the timeout (a backstop; Gloo's own timeout fires
// first).
//
// Note [same call on every rank]: Gloo trusts that every rank makes the same call. When they do
// not (two ranks with different models all_reduce buckets of different sizes), a peer's message
// overflows the buffer Gloo posted for it and an assertion on Gloo's transport thread ends the
// process with std::terminate (SIGABRT). Two guards keep that an ember error naming the collective:
// - The first kCheckedCalls collectives of a group (every one with EMBER_DIST_CHECK=all, none with
//   =off) begin with a 128-byte all_gather of each rank's call (collective, dtype, elements, op,
//   root); ranks that differ fail at once, every rank naming every rank's call. The first calls are
//   where a different model, dataset or batch size shows up; checking every call costs a round
//   trip per collective.
// - Every collective's Gloo tag carries 16 bits of a hash of its call beside the sequence number,
//   so a later mismatch sends its bytes to a slot nobody posted: the ranks time out naming the
//   collective (EMBER_DIST_TIMEOUT) instead of aborting. Two different calls with the same 16-bit
//   hash (1 in 65536) still reach Gloo's assertion.
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <thread>

#include "core/dtype.h"
#include "core/error.h"
#include "core/hash.h"
#include "dist/backends.h"

namespace ember::dist {

namespace {

using Clock = std::chrono::steady_clock;

// The checks of Note [same call on every rank]:
constexpr uint64_t kCheckedCalls = 64;
constexpr size_t kCallRecord = 128;  // bytes per rank in the check's all_gather

// Gloo's transport needs a number: kNoTimeout (EMBER_DIST_TIMEOUT=none) is a year there, where
// Gloo's own arithmetic on the clock cannot overflow.
std::chrono::milliseconds for_gloo(std::chrono::milliseconds t) {
  return std::min<std::chrono::milliseconds>(t, std::chrono::hours(24 * 365));
}

uint64_t check_limit_from_env() {
  const char* v = std::getenv("EMBER_DIST_CHECK");
  if (v == nullptr || *v == '\0') return kCheckedCalls;
  const std::string s = v;
  if (s == "all") return UINT64_MAX;
  if (s == "off") return 0;
  throw DistError("EMBER_DIST_CHECK='" + s + "': expected all or off (unset: the first " +
                  std::to_string(kCheckedCalls) + " collectives are checked)");
}

uint32_t call_hash16(const std::string& call) {
  const uint64_t h = fnv1a(call);
  return static_cast<uint32_t>((h ^ (h >> 16) ^ (h >> 32) ^ (h >> 48)) & 0xFFFF);
}

// Gloo's rendezvous on ember's store.
class GlooStore final : public gloo::rendezvous::Store {
 public:
  explicit GlooStore(std::shared_ptr<dist::Store> s) : s_(std::move(s)) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    s_->set(key, std::string(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string& key) override {
    std::string v = s_->get(key);
    return {v.begin(), v.end()};
  }
  void wait(const std::vector<std::string>& keys) override { s_->wait(keys); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    s_->wait(keys, timeout);
  }

 private:
  std::shared_ptr<dist::Store> s_;
};

// The local address peers should use: GLOO_SOCKET_IFNAME if set, else the address this host uses
// to reach MASTER_ADDR (a UDP "connect" sends nothing), else the loopback address.
gloo::transport::tcp::attr device_attr() {
  gloo::transport::tcp::attr a;
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname != nullptr && *ifname) {
    a.iface = ifname;
    return a;
  }
  const char* master = std::getenv("MASTER_ADDR");
  std::string host = master && *master ? master : "127.0.0.1";
  a.hostname = "127.0.0.1";
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), "9", &hints, &res) != 0 || res == nullptr) return a;
  int fd = ::socket(res->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd >= 0 && ::connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
    sockaddr_storage local{};
    socklen_t len = sizeof local;
    char buf[NI_MAXHOST];
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0 &&
        ::getnameinfo(reinterpret_cast<sockaddr*>(&local), len, buf, sizeof buf, nullptr, 0, NI_NUMERICHOST) == 0)
      a.hostname = buf;
  }
  if (fd >= 0) ::close(fd);
  ::freeaddrinfo(res);
  return a;
}

// Gloo's TCP transport writes with writev(), not send(MSG_NOSIGNAL): a rank that is sending when
// its peer dies would be killed by SIGPIPE before it could say which collective failed. Ignore
// SIGPIPE (when nobody installed a handler) so the write fails with EPIPE and the group reports it.
void ignore_sigpipe() {
  struct sigaction old {};
  if (::sigaction(SIGPIPE, nullptr, &old) == 0 && old.sa_handler == SIG_DFL) ::signal(SIGPIPE, SIG_IGN);
}

template <class T>
gloo::AllreduceOptions::Func reduce_fn(ReduceOp op) {
  using A = acc_t<T>;
  switch (op) {
    case ReduceOp::kMax:
      return [](void* c, const void* a, const void* b, size_t n) {
        auto* C = static_cast<T*>(c);
        auto *X = static_cast<const T*>(a), *Y = static_cast<const T*>(b);
        for (size_t i = 0; i < n; ++i) {
          A x = static_cast<A>(X[i]), y = static_cast<A>(Y[i]);
          C[i] = static_cast<T>(x != x ? x : (y != y ? y : (x > y ? x : y)));  // NaN wins, as in torch.max
        }
      };
    case ReduceOp::kMin:
      return [](void* c, const void* a, const void* b, size_t n) {
        auto* C = static_cast<T*>(c);
        auto *X = static_cast<const T*>(a), *Y = static_cast<const T*>(b);
        for (size_t i = 0; i < n; ++i) {
          A x = static_cast<A>(X[i]), y = static_cast<A>(Y[i]);
          C[i] = static_cast<T>(x != x ? x : (y != y ? y : (x < y ? x : y)));
        }
      };
    default:  // kSum, kAvg
      return [](void* c, const void* a, const void* b, size_t n) {
        auto* C = static_cast<T*>(c);
        auto *X = static_cast<const T*>(a), *Y = static_cast<const T*>(b);
        for (size_t i = 0; i < n; ++i) C[i] = static_cast<T>(static_cast<A>(X[i]) + static_cast<A>(Y[i]));
      };
  }
}

template <class T>
void divide_in_place(T* p, int64_t n, int by) {
  using A = acc_t<T>;
  for (int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(static_cast<A>(p[i]) / static_cast<A>(by));
}

struct GlooWork final : Work {
  explicit GlooWork(uint64_t s) { seq_ = s; }
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::string error;  // set when it failed
  void wait() override {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return done; });
    if (!error.empty()) throw DistError(error);
  }
  bool is_completed() override {
    std::lock_guard<std::mutex> lock(mu);
    return done;
  }
  void finish(std::string err) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (done) return;
      done = true;
      error = std::move(err);
    }
    cv.notify_all();
  }
};

class GlooGroup final : public ProcessGroup {
 public:
  GlooGroup(std::shared_ptr<Store> store, int rank, int size, std::chrono::milliseconds timeout)
      : ProcessGroup(rank, size, timeout),
        store_(store),
        board_(store, rank, size),
        check_limit_(check_limit_from_env()) {
    ignore_sigpipe();
    GlooStore gs(store);
    auto device = gloo::transport::tcp::CreateDevice(device_attr());
    ctx_ = std::make_shared<gloo::rendezvous::Context>(rank, size);
    ctx_->setTimeout(for_gloo(timeout));
    try {
      ctx_->connectFullMesh(gs, device);
    } catch (const Interrupted&) {
      throw;  // asked to stop while waiting for the peers' addresses: not a connection failure
    } catch (const std::exception& e) {
      throw DistError("gloo: rank " + std::to_string(rank) + " of " + std::to_string(size) +
                      " could not connect to its peers: " + e.what());
    }
    board_.publish();
    worker_ = std::thread([this] { guarded("its worker", [this] { work_loop(); }); });
    watchdog_ = std::thread([this] { guarded("its watchdog", [this] { watchdog_loop(); }); });
  }

  ~GlooGroup() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    try {
      if (worker_.joinable()) {
        // A worker stuck in a collective with a hung peer is not joined (Gloo's timeout ends it);
        // the process is on its way out with the error already.
        if (stuck_) worker_.detach();
        else worker_.join();
      }
      if (watchdog_.joinable()) watchdog_.join();
    } catch (const std::exception& e) {  // a join that fails (std::system_error): nothing to join then
      std::fprintf(stderr, "ember: warning: gloo: stopping the group's threads failed: %s\n", e.what());
    }
  }

  std::string backend() const override { return "gloo"; }

  WorkPtr all_reduce(Tensor& t, ReduceOp op) override {
    check("all_reduce", t);
    std::string desc = t.describe() + ", " + to_string(op);
    std::string call = std::string(dtype_name(t.dtype())) + " x " + std::to_string(t.numel()) + ", " + to_string(op);
    return enqueue("all_reduce", desc, call, [this, t, op](uint32_t tag) {
      if (t.numel() == 0) return;
      EMBER_DISPATCH_NUMERIC(t.dtype(), "all_reduce", [&] {
        gloo::AllreduceOptions opts(ctx_);
        opts.setOutput(t.data<scalar_t>(), static_cast<size_t>(t.numel()));
        opts.setReduceFunction(reduce_fn<scalar_t>(op));
        opts.setTag(tag);
        opts.setTimeout(for_gloo(timeout_));
        gloo::allreduce(opts);
        if (op == ReduceOp::kAvg && size_ > 1) divide_in_place(t.data<scalar_t>(), t.numel(), size_);
      });
    });
  }

  WorkPtr broadcast(Tensor& t, int root) override {
    check("broadcast", t);
    check_root("broadcast", root);
    std::string call =
        std::string(dtype_name(t.dtype())) + " x " + std::to_string(t.numel()) + ", root " + std::to_string(root);
    return enqueue("broadcast", t.describe() + ", root " + std::to_string(root), call, [this, t, root](uint32_t tag) {
      if (t.numel() == 0 || size_ == 1) return;
      gloo::BroadcastOptions opts(ctx_);
      opts.setOutput(static_cast<uint8_t*>(t.data_ptr()), t.nbytes());
      opts.setRoot(root);
      opts.setTag(tag);
      opts.setTimeout(for_gloo(timeout_));
      gloo::broadcast(opts);
    });
  }

  WorkPtr all_gather(Tensor& out, const Tensor& in) override {
    check("all_gather", in);
    check("all_gather", out);
    check_all_gather_sizes(out, in);
    std::string call = std::string(dtype_name(in.dtype())) + " x " + std::to_string(in.numel());
    return enqueue("all_gather", in.describe(), call, [this, out, in](uint32_t tag) {
      if (in.numel() == 0) return;
      if (size_ == 1) {
        std::memcpy(out.data_ptr(), in.data_ptr(), in.nbytes());
        return;
      }
      gloo::AllgatherOptions opts(ctx_);
      opts.setInput(static_cast<uint8_t*>(in.data_ptr()), in.nbytes());
      opts.setOutput(static_cast<uint8_t*>(out.data_ptr()), out.nbytes());
      opts.setTag(tag);
      opts.setTimeout(for_gloo(timeout_));
      gloo::allgather(opts);
    });
  }

  WorkPtr reduce_scatter(Tensor& out, const Tensor& in, ReduceOp op) override {
    check("reduce_scatter", in);
    check("reduce_scatter", out);
    check_reduce_scatter_sizes(out, in);
    Tensor tmp = in.clone();
    std::string call = std::string(dtype_name(in.dtype())) + " x " + std::to_string(in.numel()) + ", " + to_string(op);
    return enqueue("reduce_scatter", in.describe() + ", " + to_string(op), call, [this, out, tmp, op](uint32_t tag) {
      if (out.numel() == 0) return;
      EMBER_DISPATCH_NUMERIC(tmp.dtype(), "reduce_scatter", [&] {
        if (size_ > 1) {
          gloo::AllreduceOptions opts(ctx_);
          opts.setOutput(tmp.data<scalar_t>(), static_cast<size_t>(tmp.numel()));
          opts.setReduceFunction(reduce_fn<scalar_t>(op));
          opts.setTag(tag);
          opts.setTimeout(for_gloo(timeout_));
          gloo::allreduce(opts);
        }
        std::memcpy(out.data_ptr(), tmp.data<scalar_t>() + rank_ * out.numel(), out.nbytes());
        if (op == ReduceOp::kAvg && size_ > 1) divide_in_place(out.data<scalar_t>(), out.numel(), size_);
      });
    });
  }

  WorkPtr barrier() override {
    return enqueue("barrier", "no tensors", "", [this](uint32_t tag) {
      if (size_ == 1) return;
      gloo::BarrierOptions opts(ctx_);
      opts.setTag(tag);
      opts.setTimeout(for_gloo(timeout_));
      gloo::barrier(opts);
    });
  }

  void abort(const std::string& why) override {
    bool first = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      first = failed_.empty();
      if (first) failed_ = why;
      for (auto& task : queue_) task.work->finish(failed_);
      queue_.clear();
      cv_.notify_all();
    }
    // Peers blocked in a collective with this rank see their connection close now instead of
    // waiting for their own timeout.
    if (first) {
      try {
        ctx_->closeConnections();
      } catch (const std::exception&) {
      }
    }
  }

 private:
  struct Task {
    std::shared_ptr<GlooWork> work;
    const char* what;
    std::string desc;
    std::string call;  // what must agree across ranks (Note [same call on every rank])
    std::function<void(uint32_t)> fn;
  };

  void check(const char* what, const Tensor& t) const {
    check_tensor(what, t);
    if (!t.device().is_cpu())
      throw std::invalid_argument(std::string(what) + ": the gloo backend works on CPU tensors, got " + t.describe() +
                                  " (use the nccl backend for CUDA tensors)");
  }

  WorkPtr enqueue(const char* what, std::string desc, std::string call, std::function<void(uint32_t)> fn) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failed_.empty()) throw DistError(failed_);
    auto w = std::make_shared<GlooWork>(++seq_);
    call = call.empty() ? std::string(what) : std::string(what) + " " + call;
    queue_.push_back({w, what, std::move(desc), std::move(call), std::move(fn)});
    cv_.notify_all();
    return w;
  }

  void work_loop() {
    for (;;) {
      Task task;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;
        task = std::move(queue_.front());
        queue_.pop_front();
        running_since_ = Clock::now();
        running_ = task.work.get();
      }
      std::string err;
      try {
        const uint64_t seq = task.work->seq();
        if (size_ > 1 && seq <= check_limit_) check_same_call(task.call, seq);
        // the data's tag: 15 bits of the sequence number, 16 of the call's hash; bit 31 is the check's
        task.fn(static_cast<uint32_t>(((seq & 0x7FFF) << 16) | call_hash16(task.call)));
      } catch (const gloo::IoException& e) {
        err = e.what();
      } catch (const std::exception& e) {
        err = e.what();
      } catch (...) {  // nothing leaves this thread (Note [no abort] in core/error.h)
        err = "an exception that is not a std::exception";
      }
      if (err.empty()) {
        board_.completed(task.work->seq());
        std::lock_guard<std::mutex> lock(mu_);
        running_ = nullptr;
      } else {
        std::string msg =
            collective_failure("gloo", task.what, task.work->seq(), task.desc, rank_, size_, simplify(err), &board_);
        abort(msg);
        std::lock_guard<std::mutex> lock(mu_);
        running_ = nullptr;
      }
      // Drop the collective's tensors before the caller can see it finished: a caller that
      // returns and exits must not race this thread freeing memory into a torn-down allocator.
      task.fn = nullptr;
      task.work->finish(err.empty() ? std::string() : failed());
    }
  }

  // A thread's function: what escapes `fn` (out of memory while reporting a failure) aborts the group
  // with the reason instead of ending the process; the collectives queued and the next ones fail
  // with it, on the threads that wait for them (Note [no abort] in core/error.h).
  void guarded(const char* which, const std::function<void()>& fn) noexcept {
    try {
      fn();
    } catch (...) {
      const char* why = "an exception that is not a std::exception";
      std::string text;
      try {
        throw;
      } catch (const std::exception& e) {
        why = e.what();
      } catch (...) {
      }
      {
        // the task it ran is gone with the unwinding: the watchdog must not look at it
        std::lock_guard<std::mutex> lock(mu_);
        running_ = nullptr;
      }
      try {
        text = std::string("gloo: ") + which + " on rank " + std::to_string(rank_) + " stopped: " + why;
        abort(text);
      } catch (...) {
        std::fprintf(stderr, "ember: error: gloo: %s on rank %d stopped: %s\n", which, rank_, why);
      }
    }
  }

  // Every rank's call side by side (Note [same call on every rank]); throws naming them when they differ.
  void check_same_call(const std::string& call, uint64_t seq) {
    std::vector<char> mine(kCallRecord, '\0'), all(kCallRecord * static_cast<size_t>(size_), '\0');
    std::memcpy(mine.data(), call.data(), std::min(call.size(), kCallRecord - 1));
    gloo::AllgatherOptions opts(ctx_);
    opts.setInput(mine.data(), mine.size());
    opts.setOutput(all.data(), all.size());
    opts.setTag(0x80000000u | static_cast<uint32_t>(seq & 0x7FFFFFFF));
    opts.setTimeout(for_gloo(timeout_));
    gloo::allgather(opts);
    std::vector<std::string> calls;
    for (int r = 0; r < size_; ++r) calls.emplace_back(all.data() + r * kCallRecord);
    if (std::all_of(calls.begin(), calls.end(), [&](const std::string& c) { return c == calls[0]; })) return;
    std::string msg = "the ranks made different calls:";
    for (int r = 0; r < size_; ++r)
      msg += std::string(r == 0 ? " " : "; ") + "rank " + std::to_string(r) + " " + calls[r];
    throw std::runtime_error(msg + " (different models, data or step counts?)");
  }

  // Gloo's messages carry source locations; keep what a user can act on.
  static std::string simplify(const std::string& e) {
    std::string s = e;
    if (auto p = s.find("] "); s.rfind("[", 0) == 0 && p != std::string::npos) s = s.substr(p + 2);
    if (s.find("Timed out") != std::string::npos || s.find("timed out") != std::string::npos)
      return "timed out (" + s +
             "); a peer is hung, never called this collective or called another one "
             "(EMBER_DIST_CHECK=all compares every call)";
    if (s.find("closed") != std::string::npos || s.find("reset") != std::string::npos ||
        s.find("Broken pipe") != std::string::npos)
      return "a peer closed its connection (" + s + "); it exited or crashed";
    return s;
  }

  std::string failed() {
    std::lock_guard<std::mutex> lock(mu_);
    return failed_;
  }

  void watchdog_loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stopping_) {
      cv_.wait_for(lock, std::chrono::seconds(1));
      if (stopping_) break;
      GlooWork* r = running_;
      bool overdue = r != nullptr && Clock::now() - running_since_ > for_gloo(timeout_) + std::chrono::seconds(10);
      lock.unlock();
      board_.publish();
      if (overdue) {
        stuck_ = true;
        abort("gloo: collective #" + std::to_string(r->seq()) + " on rank " + std::to_string(rank_) +
              " is still running 10 s past the timeout (" + std::to_string(timeout_.count()) +
              " ms); the group is aborted");
        r->finish(failed());
      }
      lock.lock();
    }
  }

  std::shared_ptr<Store> store_;
  ProgressBoard board_;
  uint64_t check_limit_;  // collectives 1 .. this are checked (Note [same call on every rank])
  std::shared_ptr<gloo::rendezvous::Context> ctx_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> queue_;
  bool stopping_ = false;
  std::atomic<bool> stuck_{false};
  std::string failed_;
  GlooWork* running_ = nullptr;
  Clock::time_point running_since_;
  std::thread worker_, watchdog_;
};

}  // namespace

ProcessGroupPtr make_gloo_group(std::shared_ptr<Store> store, int rank, int size, std::chrono::milliseconds timeout) {
  return std::make_shared<GlooGroup>(std::move(store), rank, size, timeout);
}

}  // namespace ember::dist
