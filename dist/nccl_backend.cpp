// The NCCL backend: collectives on CUDA tensors, one process (rank) per GPU.
//
// The nvcc build with NCCL found at configure time (EMBER_WITH_NCCL, CMakeLists.txt) has the real
// backend, and so does the simulator build with NCCL's header, on the simulator's emulation of the
// NCCL calls (Note [simulated nccl] in sim/libs/nccl.cpp); the CPU-only build compiles the
// fallback at the end of this file, whose make_nccl_group throws an error saying why.
//
// Note [nccl streams]: every collective runs on the group's own high-priority stream S, ordered
// against the caller's current stream C with events and never with the host:
//   1. record `ready` on C, S waits for it     (the inputs the caller wrote are complete)
//   2. ncclAllReduce(..., S)                   (or broadcast / all_gather / reduce_scatter)
//   3. record the Work's `done` event on S
//   4. Work::wait(): C waits for `done`        (no host sync; the result is usable on C after)
// The tensors' memory must not be reused before the collective finished: tensors from the caching
// allocator are marked as used on S (cuda::record_stream, so their blocks are parked until S passes
// that point when freed); other tensors (wrapped external memory) are held by the group until the
// watchdog sees the collective complete. The same code path runs while C is capturing a CUDA graph:
// the event record/wait pairs become the graph's fork and join edges (so wait() must be called
// before the capture ends, as for any forked stream) and nothing is queried or synchronized.
// Captured collectives run again with every replay (Note [replayed collectives]).
//
// Note [replayed collectives]: a replay runs a captured collective without a call to the group,
// so nothing would time it: a peer stopped (not dead: NCCL sees no error) in the middle of a
// replay left the others' streams spinning in the NCCL kernel and the host blocked at its next
// sync, forever. ProcessGroup::replay_graph replays a graph for the caller (DDP::replay_graph for
// a captured training step) and records an event on the graph's stream after it; the event goes
// into the watchdog's in-flight list under the next sequence number, with the name and
// description the caller gave ("gradient all_reduce" and DDP's buckets), so a replay that does
// not finish within the timeout fails the group like any late collective, and the abort ends the
// spinning kernel. The timer covers the whole replay (its kernels too), from when it was queued,
// as for eager collectives. replay_graph refuses to replay on a failed group: the graph's NCCL
// kernels would run on an aborted communicator.
//
// Faults (Note [dist faults] in process_group.cpp): the communicator is created non-blocking
// (NCCL >= 2.14), so no NCCL call blocks the host and ncclCommAbort can stop a hung collective. A
// watchdog thread checks, every timeout/10 (between 100 ms and 1 s): which collectives completed
// (their `done` events, in issue order: ProgressBoard::completed and publish), NCCL's asynchronous
// error (a peer exited, a network error) and the age of the oldest unfinished collective against
// the group's timeout. On an error or a timeout it aborts the communicator (which ends the NCCL
// kernels, so the streams waiting on them move on with undefined data) and fails the group with the
// message every backend gives; every later call, and wait(), throw it. Since wait() does not block
// the host, a collective that fails after its wait() was called is reported by the next call.
#include "dist/backends.h"

#if defined(EMBER_WITH_NCCL) && EMBER_WITH_NCCL

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "core/cuda/device_guard.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "core/cuda/check.h"
#include "core/cuda/graph.h"
#include "core/cuda/runtime.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/storage.h"
#include "kernels/functional.h"

// CMake builds this backend only with NCCL >= 2.14 (cmake/nccl_version.cmake): ncclCommFinalize,
// ncclGetLastError and non-blocking communicators (ncclConfig_t.blocking = 0: calls return
// ncclInProgress, and abort works on a communicator stuck in a call).
#if NCCL_VERSION_CODE < NCCL_VERSION(2, 14, 0)
#error "the nccl backend needs NCCL >= 2.14; CMake leaves it out with an older nccl.h (cmake/nccl_version.cmake)"
#endif

namespace ember::dist {

namespace {

using cuda::DeviceGuard;
using cuda::RelaxedCapture;

using Clock = std::chrono::steady_clock;
using NcclFn = std::function<ncclResult_t(ncclComm_t, cudaStream_t)>;

std::string nccl_error(ncclResult_t r, ncclComm_t comm) {
  std::string s = std::string(ncclGetErrorString(r)) + " (ncclResult_t " + std::to_string(static_cast<int>(r)) + ")";
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && *last != '\0') s += ": " + std::string(last);
  return s;
}

// An event created on `device`, shared by a Work and the watchdog's list.
struct CudaEvent {
  cudaEvent_t e = nullptr;
  explicit CudaEvent(int device) {
    DeviceGuard g(device);
    RelaxedCapture relaxed;
    EMBER_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  }
  ~CudaEvent() {
    if (e != nullptr) {
      RelaxedCapture relaxed;
      cudaEventDestroy(e);
    }
  }
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
};

// What a Work needs of its group, and outlives it: the first failure, and the last collective
// the watchdog had seen complete by then (those Works still wait without an error).
struct GroupState {
  std::mutex mu;
  std::string failed;
  uint64_t completed_before = 0;
  // The failure that concerns collective `seq` (empty: none).
  std::string error(uint64_t seq = ~uint64_t{0}) {
    std::lock_guard<std::mutex> lock(mu);
    return seq <= completed_before ? std::string() : failed;
  }
};

ncclDataType_t reduce_type(const char* what, DType t) {
  switch (t) {
    case DType::f32: return ncclFloat32;
    case DType::f64: return ncclFloat64;
    case DType::f16: return ncclFloat16;
    case DType::bf16: return ncclBfloat16;
    case DType::i32: return ncclInt32;
    case DType::i64: return ncclInt64;
    case DType::u8: return ncclUint8;
    case DType::boolean: break;
  }
  throw std::invalid_argument(std::string(what) + ": the nccl backend does not reduce " + std::string(dtype_name(t)) +
                              " tensors (cast bool to u8 first)");
}

ncclRedOp_t reduce_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kAvg: return ncclAvg;  // floats: pre-multiplied by 1/size; integers: sum, then truncating division
    case ReduceOp::kMax: return ncclMax;
    case ReduceOp::kMin: return ncclMin;
  }
  return ncclSum;
}

std::string seconds(std::chrono::milliseconds ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g s", static_cast<double>(ms.count()) / 1000.0);
  return buf;
}

struct NcclWork final : Work {
  NcclWork(uint64_t s, std::shared_ptr<GroupState> st, std::shared_ptr<CudaEvent> ev, int dev, cudaStream_t captured_on,
           std::vector<Tensor> held)
      : state(std::move(st)), done(std::move(ev)), device(dev), capture_stream(captured_on), keep(std::move(held)) {
    seq_ = s;
  }

  void wait() override {
    if (std::string e = state->error(seq_); !e.empty()) throw DistError(e);
    cuda::Stream cur = cuda::current_stream(device);
    // A captured collective's `done` was recorded inside the capture: only a stream of that capture
    // can wait for it (the join edge). Outside the capture there is nothing to wait for: each replay
    // runs the collective in graph order, joined where wait() was called during the capture (a
    // capture without that join fails to end, as CUDA requires for every forked stream).
    if (capture_stream != nullptr && !cur.is_capturing()) return;
    EMBER_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(cur.handle()), done->e, 0));
  }

  bool is_completed() override {
    if (!state->error(seq_).empty()) return true;  // finished, with the error wait() throws
    if (capture_stream != nullptr) {
      // Captured: nothing runs until a replay; "completed" once the capture is over.
      cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
      EMBER_CUDA_CHECK(cudaStreamIsCapturing(capture_stream, &st));
      return st == cudaStreamCaptureStatusNone;
    }
    // Relaxed: the event is not part of any capture, and a query while this thread (or, in global
    // mode, another) captures would otherwise invalidate that capture, as cuda::Event::query knows.
    RelaxedCapture relaxed;
    cudaError_t q = cudaEventQuery(done->e);
    if (q == cudaErrorNotReady) {
      cudaGetLastError();
      return false;
    }
    EMBER_CUDA_CHECK(q);
    return true;
  }

  std::shared_ptr<GroupState> state;
  std::shared_ptr<CudaEvent> done;
  int device;
  cudaStream_t capture_stream;  // the caller's stream if the collective was captured, else null
  std::vector<Tensor> keep;     // captured collectives: tensors the allocator does not track
};

class NcclGroup final : public ProcessGroup {
 public:
  NcclGroup(std::shared_ptr<Store> store, int rank, int size, int device, std::chrono::milliseconds timeout)
      : ProcessGroup(rank, size, timeout),
        store_(store),
        board_(store, rank, size),
        device_(device),
        state_(std::make_shared<GroupState>()) {
    const std::string who = "nccl: rank " + std::to_string(rank) + " of " + std::to_string(size);
    if (device < 0 || device >= cuda::device_count())
      throw DistError(who + ": CUDA device cuda:" + std::to_string(device) + " is not available (" +
                      (cuda::device_count() == 0 ? cuda::unavailable_reason()
                                                 : std::to_string(cuda::device_count()) + " device(s)") +
                      "); start one process per GPU and give each its own device (LOCAL_RANK)");
    DeviceGuard g(device_);

    // NCCL's rendezvous: rank 0's unique id through the store.
    ncclUniqueId id;
    std::memset(&id, 0, sizeof id);
    if (rank == 0) {
      ncclResult_t r = ncclGetUniqueId(&id);
      if (r != ncclSuccess) throw DistError(who + ": ncclGetUniqueId failed: " + nccl_error(r, nullptr));
      store_->set("nccl/id", std::string(id.internal, sizeof id.internal));
    } else {
      std::string v;
      try {
        v = store_->get("nccl/id");
      } catch (const std::exception& e) {
        throw DistError(who + " did not get NCCL's unique id from rank 0: " + e.what());
      }
      if (v.size() != sizeof id.internal)
        throw DistError(who + ": NCCL's unique id from rank 0 has " + std::to_string(v.size()) + " bytes, expected " +
                        std::to_string(sizeof id.internal) + " (ranks built with different NCCL versions?)");
      std::memcpy(id.internal, v.data(), sizeof id.internal);
    }

    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclResult_t r = ncclCommInitRankConfig(&comm_, size, id, rank, &config);
    bool timed_out = false;
    r = settle(r, deadline_after(timeout), &timed_out);
    if (r != ncclSuccess) {
      std::string why = timed_out ? "timed out after " + seconds(timeout) +
                                        " waiting for the other ranks (a rank is missing, hung, or on another NCCL id)"
                                  : nccl_error(r, comm_);
      if (comm_ != nullptr) ncclCommAbort(comm_);
      comm_ = nullptr;
      throw DistError(who + " could not create its communicator on cuda:" + std::to_string(device) + ": " + why);
    }

    try {
      stream_ = cuda::Stream::create(device_, /*high_priority=*/true);
      ready_ = std::make_unique<CudaEvent>(device_);
      // barrier(): an all_reduce of this (Note [nccl streams]); made here, on the current stream.
      barrier_buf_ = zeros({1}, TensorOptions(DType::f32).device(Device(DeviceType::cuda, device_)));
    } catch (...) {
      ncclCommAbort(comm_);
      comm_ = nullptr;
      throw;
    }
    board_.publish();
    watchdog_ = std::thread([this] { watchdog_loop(); });
  }

  ~NcclGroup() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    if (watchdog_.joinable()) watchdog_.join();
    std::lock_guard<std::mutex> lock(comm_mu_);
    if (comm_ == nullptr) return;
    // A group destroyed at exit, after the CUDA runtime began to unload: leave the communicator
    // to the process's end (NCCL calls now could crash).
    int cur = 0;
    if (cudaGetDevice(&cur) != cudaSuccess) {
      cudaGetLastError();
      return;
    }
    try {
      DeviceGuard g(device_);
      // Clean shutdown: finalize (the collectives already queued finish) then destroy; a finalize
      // that does not finish in time (a peer is gone) is aborted instead.
      bool timed_out = false;
      const auto limit = std::min<std::chrono::milliseconds>(timeout_, std::chrono::seconds(10));
      ncclResult_t r = settle(ncclCommFinalize(comm_), Clock::now() + limit, &timed_out);
      if (r == ncclSuccess) ncclCommDestroy(comm_);
      else ncclCommAbort(comm_);
    } catch (...) {
    }
    comm_ = nullptr;
  }

  std::string backend() const override { return "nccl"; }

  WorkPtr all_reduce(Tensor& t, ReduceOp op) override {
    check("all_reduce", t);
    const ncclDataType_t type = reduce_type("all_reduce", t.dtype());
    const ncclRedOp_t rop = reduce_op(op);
    void* p = t.data_ptr();
    const size_t n = static_cast<size_t>(t.numel());
    NcclFn fn;
    if (n > 0) fn = [=](ncclComm_t c, cudaStream_t s) { return ncclAllReduce(p, p, n, type, rop, c, s); };
    return launch("all_reduce", t.describe() + ", " + to_string(op), {t}, std::move(fn));
  }

  WorkPtr broadcast(Tensor& t, int root) override {
    check("broadcast", t);
    check_root("broadcast", root);
    void* p = t.data_ptr();
    const size_t bytes = t.nbytes();
    NcclFn fn;
    if (bytes > 0) fn = [=](ncclComm_t c, cudaStream_t s) { return ncclBroadcast(p, p, bytes, ncclUint8, root, c, s); };
    return launch("broadcast", t.describe() + ", root " + std::to_string(root), {t}, std::move(fn));
  }

  WorkPtr all_gather(Tensor& out, const Tensor& in) override {
    check("all_gather", in);
    check("all_gather", out);
    check_all_gather_sizes(out, in);
    const void* src = in.data_ptr();
    void* dst = out.data_ptr();
    const size_t bytes = in.nbytes();  // per rank
    NcclFn fn;
    if (bytes > 0) fn = [=](ncclComm_t c, cudaStream_t s) { return ncclAllGather(src, dst, bytes, ncclUint8, c, s); };
    return launch("all_gather", in.describe(), {in, out}, std::move(fn));
  }

  WorkPtr reduce_scatter(Tensor& out, const Tensor& in, ReduceOp op) override {
    check("reduce_scatter", in);
    check("reduce_scatter", out);
    check_reduce_scatter_sizes(out, in);
    const ncclDataType_t type = reduce_type("reduce_scatter", in.dtype());
    const ncclRedOp_t rop = reduce_op(op);
    const void* src = in.data_ptr();
    void* dst = out.data_ptr();
    const size_t n = static_cast<size_t>(out.numel());  // per rank
    NcclFn fn;
    if (n > 0) fn = [=](ncclComm_t c, cudaStream_t s) { return ncclReduceScatter(src, dst, n, type, rop, c, s); };
    return launch("reduce_scatter", in.describe() + ", " + to_string(op), {in, out}, std::move(fn));
  }

  WorkPtr barrier() override {
    void* p = barrier_buf_.data_ptr();
    return launch("barrier", "1-element all_reduce on cuda:" + std::to_string(device_), {barrier_buf_},
                  [=](ncclComm_t c, cudaStream_t s) { return ncclAllReduce(p, p, 1, ncclFloat32, ncclSum, c, s); });
  }

  void replay_graph(cuda::Graph& graph, const std::string& what, const std::string& desc) override {
    std::lock_guard<std::mutex> issue(issue_mu_);
    if (std::string e = state_->error(); !e.empty()) throw DistError(e);
    const cuda::Stream st = graph.stream();
    if (st.device() != device_)
      throw std::invalid_argument("replay_graph: the graph was captured on cuda:" + std::to_string(st.device()) +
                                  ", this group's device is cuda:" + std::to_string(device_));
    DeviceGuard g(device_);
    graph.replay();
    const uint64_t seq = ++seq_;
    last_seq_.store(seq);
    auto done = std::make_shared<CudaEvent>(device_);
    EMBER_CUDA_CHECK(cudaEventRecord(done->e, static_cast<cudaStream_t>(st.handle())));
    std::lock_guard<std::mutex> lock(mu_);
    inflight_.push_back({seq, what, desc, std::move(done), Clock::now(), {}});
  }

  void abort(const std::string& why) override { fail(why); }

 private:
  struct Inflight {
    uint64_t seq;
    std::string what;
    std::string desc;
    std::shared_ptr<CudaEvent> done;
    Clock::time_point issued;
    std::vector<Tensor> keep;  // tensors the caching allocator does not track (Note [nccl streams])
  };

  void check(const char* what, const Tensor& t) const {
    check_tensor(what, t);
    if (!t.is_cuda() || t.device().index != device_) {
      const std::string mine = "cuda:" + std::to_string(device_);
      throw std::invalid_argument(
          std::string(what) + ": the nccl backend works on CUDA tensors on this group's device " + mine + ", got " +
          t.describe() +
          (t.is_cpu() ? " (move it with .to(" + mine + "), or use the gloo backend for CPU tensors)"
                      : " (each rank's group uses one GPU: move the tensor to " + mine + ")"));
    }
  }

  // Polls a non-blocking communicator until the call `r` returned has finished (ncclInProgress
  // turns into the result), or the deadline. Called with comm_mu_ held or before the watchdog runs.
  ncclResult_t settle(ncclResult_t r, Clock::time_point deadline, bool* timed_out) {
    while (r == ncclInProgress) {
      if (Clock::now() > deadline) {
        *timed_out = true;
        return ncclInProgress;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(100));
      ncclResult_t st = ncclSuccess;
      ncclResult_t q = ncclCommGetAsyncError(comm_, &st);
      r = q != ncclSuccess ? q : st;
    }
    return r;
  }

  // Enqueues fn on the NCCL stream; the empty string or why it failed.
  std::string call_nccl(const NcclFn& fn, cudaStream_t s) {
    std::unique_lock<std::mutex> lock(comm_mu_);
    if (comm_ == nullptr) return "the communicator was aborted";
    ncclResult_t r = fn(comm_, s);
    // Non-blocking: the call finishes enqueueing in the background. Poll with the lock released in
    // between, so the watchdog can abort a communicator that never gets there.
    const Clock::time_point deadline = deadline_after(timeout_);
    while (r == ncclInProgress) {
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::microseconds(20));
      lock.lock();
      if (comm_ == nullptr) return "the communicator was aborted while the collective was being enqueued";
      if (Clock::now() > deadline) return "enqueueing the collective timed out after " + seconds(timeout_);
      ncclResult_t st = ncclSuccess;
      ncclResult_t q = ncclCommGetAsyncError(comm_, &st);
      r = q != ncclSuccess ? q : st;
    }
    return r == ncclSuccess ? std::string() : nccl_error(r, comm_);
  }

  // How a collective is ordered: see Note [nccl streams].
  WorkPtr launch(const char* what, std::string desc, std::vector<Tensor> tensors, const NcclFn& fn) {
    std::lock_guard<std::mutex> issue(issue_mu_);
    if (std::string e = state_->error(); !e.empty()) throw DistError(e);
    DeviceGuard g(device_);
    const cuda::Stream caller = cuda::current_stream(device_);
    const bool capturing = caller.is_capturing();
    const auto cs = static_cast<cudaStream_t>(caller.handle());
    const auto ns = static_cast<cudaStream_t>(stream_.handle());
    const uint64_t seq = ++seq_;
    last_seq_.store(seq);
    // 1. the collective starts after the work the caller queued so far (its inputs)
    EMBER_CUDA_CHECK(cudaEventRecord(ready_->e, cs));
    EMBER_CUDA_CHECK(cudaStreamWaitEvent(ns, ready_->e, 0));
    // 2. the collective (zero elements: nothing to move, the events still order it)
    if (fn) {
      std::string err = call_nccl(fn, ns);
      if (!err.empty()) {
        std::string msg = collective_failure("nccl", what, seq, desc, rank_, size_, err, &board_);
        fail(msg);
        throw DistError(state_->error());
      }
    }
    // 3. its completion
    auto done = std::make_shared<CudaEvent>(device_);
    EMBER_CUDA_CHECK(cudaEventRecord(done->e, ns));
    // 4. the memory stays the tensors' until the NCCL stream is past the collective
    std::vector<Tensor> keep;
    Allocator* mine = cuda_allocator(device_);
    for (const Tensor& t : tensors) {
      const auto& st = t.storage();
      if (st->data() == nullptr) continue;
      if (st->allocator() == mine) cuda::record_stream(st->data(), stream_);
      else keep.push_back(t);
    }
    if (capturing) return std::make_shared<NcclWork>(seq, state_, done, device_, cs, std::move(keep));
    {
      std::lock_guard<std::mutex> lock(mu_);
      inflight_.push_back({seq, what, desc, done, Clock::now(), std::move(keep)});
    }
    return std::make_shared<NcclWork>(seq, state_, std::move(done), device_, nullptr, std::vector<Tensor>{});
  }

  // Marks the group failed (the first message wins) and aborts the communicator.
  void fail(const std::string& msg) {
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      if (state_->failed.empty()) {
        state_->failed = msg;
        state_->completed_before = board_.last_completed();
      }
    }
    {
      std::lock_guard<std::mutex> lock(comm_mu_);
      if (comm_ != nullptr) {
        try {
          DeviceGuard g(device_);
          ncclCommAbort(comm_);  // also ends the NCCL kernels still running or waiting
        } catch (...) {
        }
        comm_ = nullptr;
      }
    }
    std::deque<Inflight> dropped;
    {
      std::lock_guard<std::mutex> lock(mu_);
      dropped.swap(inflight_);
    }
    cv_.notify_all();
  }

  void watchdog_loop() {
    // This thread only queries events and NCCL's state. Relaxed capture mode keeps those calls
    // legal while another thread captures a graph in global mode.
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    cudaThreadExchangeStreamCaptureMode(&mode);
    cudaSetDevice(device_);
    const auto period =
        std::clamp<std::chrono::milliseconds>(timeout_ / 10, std::chrono::milliseconds(100), std::chrono::seconds(1));
    std::unique_lock<std::mutex> lock(mu_);
    while (!stopping_) {
      cv_.wait_for(lock, period);
      if (stopping_) break;
      lock.unlock();
      try {
        check_once();
      } catch (const std::exception& e) {
        fail(collective_failure("nccl", "watchdog", last_seq_.load(), "checking the collectives", rank_, size_,
                                e.what(), &board_));
      }
      board_.publish();
      lock.lock();
    }
  }

  void check_once() {
    std::deque<Inflight> finished;  // released outside the lock (frees kept tensors)
    bool running = false;
    uint64_t seq = 0;
    std::string what, desc, cuda_err;
    Clock::time_point issued;
    {
      std::lock_guard<std::mutex> lock(mu_);
      while (!inflight_.empty()) {
        cudaError_t q = cudaEventQuery(inflight_.front().done->e);
        if (q == cudaErrorNotReady) {
          cudaGetLastError();
          break;
        }
        if (q != cudaSuccess) {
          cudaGetLastError();
          cuda_err = std::string(cudaGetErrorName(q)) + ": " + cudaGetErrorString(q);
          break;
        }
        board_.completed(inflight_.front().seq);
        finished.push_back(std::move(inflight_.front()));
        inflight_.pop_front();
      }
      if (!inflight_.empty()) {
        const Inflight& f = inflight_.front();
        running = true;
        seq = f.seq;
        what = f.what;
        desc = f.desc;
        issued = f.issued;
      }
    }
    finished.clear();

    ncclResult_t async = ncclSuccess;
    std::string async_text;
    {
      std::lock_guard<std::mutex> lock(comm_mu_);
      if (comm_ == nullptr) return;  // failed already
      ncclResult_t q = ncclCommGetAsyncError(comm_, &async);
      if (q != ncclSuccess) async = q;
      // NCCL's own account of it (ncclGetLastError) while the communicator still exists
      if (async != ncclSuccess && async != ncclInProgress) async_text = nccl_error(async, comm_);
    }
    std::string why;
    if (!async_text.empty())
      why = "NCCL reported an asynchronous error: " + async_text +
            (async == ncclInvalidUsage ? std::string()
                                       : std::string("; a peer exited or crashed, or the network failed"));
    else if (!cuda_err.empty()) why = "a CUDA error ended it (" + cuda_err + ")";
    else if (running && timeout_ != kNoTimeout && Clock::now() - issued > timeout_)
      why = "timed out after " + seconds(timeout_) + "; a peer is hung, exited, or never called this collective";
    if (why.empty()) return;
    if (!running) {
      what = "communicator";
      seq = last_seq_.load();
      desc = "no collective running";
    }
    fail(collective_failure("nccl", what.c_str(), seq, desc, rank_, size_, why, &board_));
  }

  std::shared_ptr<Store> store_;
  ProgressBoard board_;
  const int device_;
  std::shared_ptr<GroupState> state_;
  ncclComm_t comm_ = nullptr;
  std::mutex comm_mu_;   // every use of comm_ (the watchdog aborts it from its thread)
  std::mutex issue_mu_;  // one collective enqueued at a time (ready_, the sequence numbers)
  cuda::Stream stream_;
  std::unique_ptr<CudaEvent> ready_;
  Tensor barrier_buf_;
  std::atomic<uint64_t> last_seq_{0};
  std::mutex mu_;  // inflight_, stopping_
  std::condition_variable cv_;
  std::deque<Inflight> inflight_;
  bool stopping_ = false;
  std::thread watchdog_;
};

}  // namespace

bool nccl_available() { return true; }

ProcessGroupPtr make_nccl_group(std::shared_ptr<Store> store, int rank, int size, int device,
                                std::chrono::milliseconds timeout) {
  return std::make_shared<NcclGroup>(std::move(store), rank, size, device, timeout);
}

}  // namespace ember::dist

#else  // no NCCL in this build

namespace ember::dist {

namespace {
const char* why_no_nccl() {
#if defined(EMBER_CUDA_SIM) && EMBER_CUDA_SIM
  return "this simulator build has no NCCL: no nccl.h of NCCL >= 2.14 was found when it was configured";
#elif defined(EMBER_WITH_CUDA) && EMBER_WITH_CUDA
  return "this build has no NCCL: nccl.h and libnccl were not found when it was configured";
#else
  return "this build has no NCCL: CPU-only build";
#endif
}
}  // namespace

bool nccl_available() { return false; }

ProcessGroupPtr make_nccl_group(std::shared_ptr<Store>, int rank, int size, int device, std::chrono::milliseconds) {
  throw DistError(std::string("nccl backend (rank ") + std::to_string(rank) + " of " + std::to_string(size) +
                  ", cuda:" + std::to_string(device) + "): " + why_no_nccl() + "; use the gloo backend");
}

}  // namespace ember::dist

#endif
