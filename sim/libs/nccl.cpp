// NCCL as the simulator provides it: the calls dist/nccl_backend.cpp makes, with the signatures of
// NCCL's own nccl.h, for ranks that are separate processes on one machine (as ember_run starts
// them), each with its EMBER_SIM_DEVICES simulated GPUs. Built only when CMake found nccl.h
// (EMBER_SIM_NCCL); docs/simulator.md lists what is modelled.
//
// Note [simulated nccl]:
// - A communicator is a POSIX shared-memory segment named after the unique id: a header (each
//   rank's pid, barrier phase and current call) and one 1 MiB slot per rank. ncclGetUniqueId draws
//   128 random bytes; rank 0 creates the segment, the others open it, and rank 0 unlinks it once
//   every rank has joined (nothing is left in /dev/shm, even after a crash).
// - Non-blocking communicators (config.blocking = 0, what ember creates) finish their init in a
//   thread: ncclCommInitRankConfig returns ncclInProgress and ncclCommGetAsyncError reports it
//   until every rank joined. The collectives return ncclSuccess at once.
// - A collective is enqueued on its stream like a kernel (sim::enqueue_host_op), so stream order,
//   events and graph capture apply to it; a captured collective runs again at every replay. When
//   the stream reaches it, the ranks exchange the data through their slots in steps of at most a
//   slot, two barriers a step (written, read), and each rank computes its output: reductions in
//   rank order 0, 1, ..., n-1 in the data type (f16/bf16 rounded after every addition, as NCCL's
//   kernels add), ncclAvg as the sum divided by n. Device memory is read and written with the
//   simulator's raw copies.
// - NCCL's rules where ember depends on them, checked as NCCL would report them: buffers must be
//   device memory of the communicator's GPU and hold the counts (ncclInvalidArgument at the
//   call); every rank must make the same calls in the same order (NCCL hangs or corrupts; here the
//   first step compares the calls and fails every rank's communicator with ncclInvalidUsage,
//   naming both calls); in-place calls are allowed where NCCL allows them.
// - Faults: a barrier that waits notices ncclCommAbort on this rank, an abort on any other rank
//   (ncclRemoteError) and a peer process that exited (ncclRemoteError, checked every 50 ms); the
//   collective then writes no output and keeps its stream busy until the communicator is aborted
//   (as NCCL's kernels spin until ncclCommAbort), the communicator's asynchronous error says why,
//   and ember's watchdog aborts the group. A collective on a communicator that failed does nothing.
//   There is no timeout of NCCL's own: ember's watchdog has one.
#if defined(EMBER_SIM_NCCL) && EMBER_SIM_NCCL

#include <fcntl.h>
#include <nccl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "sim/half.h"
#include "sim/internal.h"

namespace {

using Clock = std::chrono::steady_clock;
using ember::sim::bf16_to_float;
using ember::sim::f16_to_float;
using ember::sim::float_to_bf16;
using ember::sim::float_to_f16;

constexpr uint64_t kMagic = 0x4c4343'4e45424d45ull;  // "EMBENCCL"
constexpr size_t kSlot = size_t{1} << 20;
constexpr int kMaxRanks = 64;

enum class Kind : int32_t { all_reduce = 1, broadcast, all_gather, reduce_scatter };

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::all_reduce: return "ncclAllReduce";
    case Kind::broadcast: return "ncclBroadcast";
    case Kind::all_gather: return "ncclAllGather";
    case Kind::reduce_scatter: return "ncclReduceScatter";
  }
  return "?";
}

// One call as every rank must make it.
struct Call {
  uint64_t seq = 0;
  Kind kind{};
  int32_t dtype = 0, op = 0, root = 0;
  uint64_t count = 0;
  bool operator==(const Call& o) const {
    return seq == o.seq && kind == o.kind && dtype == o.dtype && op == o.op && root == o.root && count == o.count;
  }
};

std::string describe(const Call& c) {
  return std::string(kind_name(c.kind)) + " #" + std::to_string(c.seq) + " (count " + std::to_string(c.count) +
         ", datatype " + std::to_string(c.dtype) + ", op " + std::to_string(c.op) +
         (c.kind == Kind::broadcast ? ", root " + std::to_string(c.root) : std::string()) + ")";
}

struct Shared {
  std::atomic<uint64_t> magic;
  int32_t nranks;
  std::atomic<int32_t> joined;
  std::atomic<int32_t> aborted_by;  // -1, or the rank that called ncclCommAbort
  int32_t pid[kMaxRanks];
  std::atomic<uint64_t> phase[kMaxRanks];
  Call call[kMaxRanks];
};
static_assert(std::atomic<uint64_t>::is_always_lock_free && std::atomic<int32_t>::is_always_lock_free,
              "the shared header needs address-free atomics");

size_t element_size(ncclDataType_t t) {
  switch (t) {
    case ncclInt8:
    case ncclUint8: return 1;
    case ncclFloat16:
    case ncclBfloat16: return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32: return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64: return 8;
    default: return 0;
  }
}

// The state of one rank's communicator; collectives queued on streams hold it, so a destroyed
// handle never leaves them a dangling pointer.
struct State {
  int rank = 0, nranks = 1, device = 0;
  bool blocking = true;
  std::string name;  // the shared-memory object
  Shared* shm = nullptr;
  unsigned char* slots = nullptr;
  size_t map_bytes = 0;
  std::atomic<ncclResult_t> async{ncclSuccess};
  std::atomic<bool> aborted{false};
  std::mutex mu;
  std::string last_error;
  // used by the stream worker running the collectives, one at a time
  uint64_t executed = 0, phase = 0;

  ~State() {
    if (shm != nullptr) ::munmap(shm, map_bytes);
  }

  unsigned char* slot(int r) { return slots + static_cast<size_t>(r) * kSlot; }

  // The communicator's first error wins: it is what ncclCommGetAsyncError and ncclGetLastError say.
  ncclResult_t fail(ncclResult_t r, const std::string& why) {
    std::lock_guard<std::mutex> lock(mu);
    const ncclResult_t now = async.load();
    if (now == ncclSuccess || now == ncclInProgress) {
      async.store(r);
      last_error = why;
    }
    return r;
  }

  // Why this rank cannot go on waiting for its peers, or ncclSuccess.
  ncclResult_t check_peers(bool check_pids) {
    if (aborted.load()) return fail(ncclInvalidUsage, "the communicator was aborted on this rank");
    const int by = shm->aborted_by.load();
    if (by >= 0) return fail(ncclRemoteError, "rank " + std::to_string(by) + " aborted its communicator");
    if (check_pids)
      for (int r = 0; r < nranks; ++r)
        if (r != rank && shm->pid[r] > 0 && ::kill(shm->pid[r], 0) != 0 && errno == ESRCH)
          return fail(ncclRemoteError, "rank " + std::to_string(r) + " (pid " + std::to_string(shm->pid[r]) +
                                           ") exited in the middle of a collective");
    return ncclSuccess;
  }

  // Every rank reaches the same phase (or an error ends the wait).
  ncclResult_t barrier() {
    const uint64_t target = ++phase;
    shm->phase[rank].store(target, std::memory_order_release);
    auto next_pid_check = Clock::now();
    for (int spins = 0;; ++spins) {
      bool all = true;
      for (int r = 0; r < nranks && all; ++r) all = shm->phase[r].load(std::memory_order_acquire) >= target;
      if (all) return ncclSuccess;
      const bool pids = Clock::now() >= next_pid_check;
      if (pids) next_pid_check = Clock::now() + std::chrono::milliseconds(50);
      if (ncclResult_t r = check_peers(pids); r != ncclSuccess) return r;
      if (spins < 64) std::this_thread::yield();
      else std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
};

}  // namespace

// nccl.h declares ncclComm_t as a pointer to this.
struct ncclComm {
  std::shared_ptr<State> s;
};

namespace {

thread_local std::string t_last_error;

ncclResult_t call_error(ncclResult_t r, const std::string& why) {
  t_last_error = why;
  return r;
}

// acc = acc (op) x, elementwise, in the data type.
template <class T>
void reduce_into(T* acc, const T* x, size_t n, ncclRedOp_t op) {
  for (size_t i = 0; i < n; ++i) {
    switch (op) {
      case ncclSum:
      case ncclAvg: acc[i] = static_cast<T>(acc[i] + x[i]); break;
      case ncclProd: acc[i] = static_cast<T>(acc[i] * x[i]); break;
      case ncclMax: acc[i] = x[i] > acc[i] ? x[i] : acc[i]; break;
      case ncclMin: acc[i] = x[i] < acc[i] ? x[i] : acc[i]; break;
      default: break;
    }
  }
}
// f16 and bf16 (bits in uint16_t), converted with `to_float` and `from_float` (sim/half.h)
template <float (*to_float)(uint16_t), uint16_t (*from_float)(float)>
void reduce_into_half(uint16_t* acc, const uint16_t* x, size_t n, ncclRedOp_t op) {
  for (size_t i = 0; i < n; ++i) {
    const float a = to_float(acc[i]), b = to_float(x[i]);
    float r = a;
    switch (op) {
      case ncclSum:
      case ncclAvg: r = a + b; break;
      case ncclProd: r = a * b; break;
      case ncclMax: r = b > a ? b : a; break;
      case ncclMin: r = b < a ? b : a; break;
      default: break;
    }
    acc[i] = from_float(r);  // one rounding per addition, as in half arithmetic
  }
}
template <class T>
void divide(T* acc, size_t n, int by) {
  for (size_t i = 0; i < n; ++i) acc[i] = static_cast<T>(acc[i] / static_cast<T>(by));
}
template <float (*to_float)(uint16_t), uint16_t (*from_float)(float)>
void divide_half(uint16_t* acc, size_t n, int by) {
  for (size_t i = 0; i < n; ++i) acc[i] = from_float(to_float(acc[i]) / static_cast<float>(by));
}

void reduce(void* acc, const void* x, size_t n, ncclDataType_t t, ncclRedOp_t op) {
  switch (t) {
    case ncclInt8: reduce_into(static_cast<int8_t*>(acc), static_cast<const int8_t*>(x), n, op); break;
    case ncclUint8: reduce_into(static_cast<uint8_t*>(acc), static_cast<const uint8_t*>(x), n, op); break;
    case ncclInt32: reduce_into(static_cast<int32_t*>(acc), static_cast<const int32_t*>(x), n, op); break;
    case ncclUint32: reduce_into(static_cast<uint32_t*>(acc), static_cast<const uint32_t*>(x), n, op); break;
    case ncclInt64: reduce_into(static_cast<int64_t*>(acc), static_cast<const int64_t*>(x), n, op); break;
    case ncclUint64: reduce_into(static_cast<uint64_t*>(acc), static_cast<const uint64_t*>(x), n, op); break;
    case ncclFloat32: reduce_into(static_cast<float*>(acc), static_cast<const float*>(x), n, op); break;
    case ncclFloat64: reduce_into(static_cast<double*>(acc), static_cast<const double*>(x), n, op); break;
    case ncclFloat16:
      reduce_into_half<f16_to_float, float_to_f16>(static_cast<uint16_t*>(acc), static_cast<const uint16_t*>(x), n, op);
      break;
    case ncclBfloat16:
      reduce_into_half<bf16_to_float, float_to_bf16>(static_cast<uint16_t*>(acc), static_cast<const uint16_t*>(x), n,
                                                     op);
      break;
    default: break;
  }
}

void average(void* acc, size_t n, ncclDataType_t t, int by) {
  switch (t) {
    case ncclInt8: divide(static_cast<int8_t*>(acc), n, by); break;
    case ncclUint8: divide(static_cast<uint8_t*>(acc), n, by); break;
    case ncclInt32: divide(static_cast<int32_t*>(acc), n, by); break;
    case ncclUint32: divide(static_cast<uint32_t*>(acc), n, by); break;
    case ncclInt64: divide(static_cast<int64_t*>(acc), n, by); break;
    case ncclUint64: divide(static_cast<uint64_t*>(acc), n, by); break;
    case ncclFloat32: divide(static_cast<float*>(acc), n, by); break;
    case ncclFloat64: divide(static_cast<double*>(acc), n, by); break;
    case ncclFloat16: divide_half<f16_to_float, float_to_f16>(static_cast<uint16_t*>(acc), n, by); break;
    case ncclBfloat16: divide_half<bf16_to_float, float_to_bf16>(static_cast<uint16_t*>(acc), n, by); break;
    default: break;
  }
}

// What is wrong with a buffer argument, or "" (device memory of `device`, `bytes` long).
std::string bad_buffer(const char* what, const void* p, size_t bytes, int device) {
  if (bytes == 0) return "";
  const auto a = reinterpret_cast<uintptr_t>(p);
  const ember::sim::Allocation* al = ember::sim::find_allocation(a);
  char addr[32];
  std::snprintf(addr, sizeof addr, "%p", p);
  if (al == nullptr || al->kind != ember::sim::MemKind::device)
    return std::string(what) + " " + addr + " is not device memory (" + ember::sim::describe_address(a) + ")";
  if (al->device != device)
    return std::string(what) + " " + addr + " is memory of cuda:" + std::to_string(al->device) +
           ", the communicator's GPU is cuda:" + std::to_string(device);
  if (a + bytes > al->base + al->size)
    return std::string(what) + " " + addr + ": " + std::to_string(bytes) + " bytes do not fit in its " +
           std::to_string(al->size) + "-byte allocation at offset " + std::to_string(a - al->base);
  return "";
}

void exchange(const std::shared_ptr<State>& st, Call call, const void* send, void* recv, ncclDataType_t type,
              ncclRedOp_t op);

// The body of one collective on rank s->rank, run by the stream's worker (Note [simulated nccl]).
// A collective that fails keeps its stream busy until the communicator is aborted, as NCCL's
// kernels spin until ncclCommAbort ends them: the caller sees it unfinished, not complete.
void run(const std::shared_ptr<State>& st, Call call, const void* send, void* recv, ncclDataType_t type,
         ncclRedOp_t op) {
  exchange(st, call, send, recv, type, op);
  while (st->async.load() != ncclSuccess && !st->aborted.load())
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

void exchange(const std::shared_ptr<State>& st, Call call, const void* send, void* recv, ncclDataType_t type,
              ncclRedOp_t op) {
  State& s = *st;
  if (s.async.load() != ncclSuccess) return;  // a failed or aborted communicator does nothing
  call.seq = ++s.executed;
  const size_t es = element_size(type);
  const int n = s.nranks;
  const auto* in = static_cast<const unsigned char*>(send);
  auto* out = static_cast<unsigned char*>(recv);
  // elements a step moves per rank
  size_t per_step = kSlot / es;
  if (call.kind == Kind::reduce_scatter) per_step = kSlot / (es * static_cast<size_t>(n));
  const size_t total = call.count;
  std::vector<unsigned char> acc;
  bool first = true;
  for (size_t off = 0; first || off < total; off += per_step) {
    const size_t m = std::min(per_step, total - std::min(total, off));
    // 1. write: this rank's call (first step) and its part of the data
    if (first) s.shm->call[s.rank] = call;
    switch (call.kind) {
      case Kind::all_reduce:
      case Kind::all_gather: ember::sim::raw_copy(s.slot(s.rank), in + off * es, m * es); break;
      case Kind::broadcast:
        if (s.rank == call.root) ember::sim::raw_copy(s.slot(s.rank), in + off * es, m * es);
        break;
      case Kind::reduce_scatter:
        for (int j = 0; j < n; ++j)
          ember::sim::raw_copy(s.slot(s.rank) + static_cast<size_t>(j) * m * es,
                               in + (static_cast<size_t>(j) * total + off) * es, m * es);
        break;
    }
    if (s.barrier() != ncclSuccess) return;
    // 2. read: every rank made the same call, then this rank's output
    if (first) {
      for (int r = 0; r < n; ++r)
        if (!(s.shm->call[r] == call)) {
          s.fail(ncclInvalidUsage, "ranks disagree on the collective sequence: rank " + std::to_string(s.rank) +
                                       " called " + describe(call) + ", rank " + std::to_string(r) + " called " +
                                       describe(s.shm->call[r]));
          return;
        }
      first = false;
    }
    switch (call.kind) {
      case Kind::all_reduce:
      case Kind::reduce_scatter: {
        const size_t at = call.kind == Kind::all_reduce ? 0 : static_cast<size_t>(s.rank) * m * es;
        acc.resize(m * es);
        ember::sim::raw_copy(acc.data(), s.slot(0) + at, m * es);
        for (int r = 1; r < n; ++r) reduce(acc.data(), s.slot(r) + at, m, type, op);
        if (op == ncclAvg) average(acc.data(), m, type, n);
        ember::sim::raw_copy(out + off * es, acc.data(), m * es);
        break;
      }
      case Kind::broadcast: ember::sim::raw_copy(out + off * es, s.slot(call.root), m * es); break;
      case Kind::all_gather:
        for (int r = 0; r < n; ++r)
          ember::sim::raw_copy(out + (static_cast<size_t>(r) * total + off) * es, s.slot(r), m * es);
        break;
    }
    if (s.barrier() != ncclSuccess) return;
    if (m == 0) break;
  }
}

ncclResult_t enqueue(ncclComm_t comm, Kind kind, const void* send, void* recv, size_t count, ncclDataType_t type,
                     ncclRedOp_t op, int root, cudaStream_t stream) {
  const char* name = kind_name(kind);
  if (comm == nullptr) return call_error(ncclInvalidArgument, std::string(name) + ": comm is NULL");
  const std::shared_ptr<State>& st = comm->s;
  if (st->async.load() == ncclInProgress)
    return call_error(ncclInvalidUsage, std::string(name) + ": the communicator has not finished its init");
  const size_t es = element_size(type);
  if (es == 0) return call_error(ncclInvalidArgument, std::string(name) + ": invalid datatype " + std::to_string(type));
  if (kind != Kind::broadcast && kind != Kind::all_gather && (op < ncclSum || op > ncclAvg))
    return call_error(ncclInvalidArgument, std::string(name) + ": invalid reduction op " + std::to_string(op));
  if (kind == Kind::broadcast && (root < 0 || root >= st->nranks))
    return call_error(ncclInvalidArgument, std::string(name) + ": root " + std::to_string(root) + " is not a rank of " +
                                               std::to_string(st->nranks));
  const size_t n = static_cast<size_t>(st->nranks);
  const size_t send_count = kind == Kind::reduce_scatter ? count * n : count;
  const size_t recv_count = kind == Kind::all_gather ? count * n : count;
  const bool sends = kind != Kind::broadcast || root == st->rank;
  std::string bad = sends ? bad_buffer("sendbuff", send, send_count * es, st->device) : "";
  if (bad.empty()) bad = bad_buffer("recvbuff", recv, recv_count * es, st->device);
  if (!bad.empty()) return call_error(ncclInvalidArgument, std::string(name) + ": " + bad);
  Call call;
  call.kind = kind;
  call.dtype = static_cast<int32_t>(type);
  call.op = kind == Kind::broadcast || kind == Kind::all_gather ? 0 : static_cast<int32_t>(op);
  call.root = kind == Kind::broadcast ? root : 0;
  call.count = count;
  std::shared_ptr<State> keep = st;
  const cudaError_t e = ember::sim::enqueue_host_op(
      stream, [keep, call, send, recv, type, op] { run(keep, call, send, recv, type, op); });
  if (e != cudaSuccess)
    return call_error(ncclUnhandledCudaError,
                      std::string(name) + ": enqueueing on the stream failed: " + cudaGetErrorString(e));
  return ncclSuccess;
}

// Rank `s.rank`'s part of the init: create or open the segment, join, wait for every rank.
void join(const std::shared_ptr<State>& st) {
  State& s = *st;
  const size_t bytes = sizeof(Shared) + static_cast<size_t>(s.nranks) * kSlot;
  int fd = -1;
  const auto give_up = Clock::now() + std::chrono::minutes(30);
  if (s.rank == 0) {
    fd = ::shm_open(s.name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) {
      s.fail(ncclSystemError, "shm_open(" + s.name + "): " + std::strerror(errno));
      return;
    }
    if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
      s.fail(ncclSystemError, "ftruncate(" + s.name + "): " + std::strerror(errno) + " (is /dev/shm big enough?)");
      ::close(fd);
      ::shm_unlink(s.name.c_str());
      return;
    }
  } else {
    for (;;) {  // rank 0 may not have created it yet
      fd = ::shm_open(s.name.c_str(), O_RDWR, 0600);
      struct stat sb {};
      if (fd >= 0 && ::fstat(fd, &sb) == 0 && static_cast<size_t>(sb.st_size) >= bytes) break;
      if (fd >= 0) ::close(fd);
      fd = -1;
      if (s.aborted.load()) {
        s.fail(ncclInvalidUsage, "the communicator was aborted during its init");
        return;
      }
      if (Clock::now() > give_up) {
        s.fail(ncclSystemError, "rank 0 never created the communicator " + s.name);
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) {
    s.fail(ncclSystemError, std::string("mmap of the communicator: ") + std::strerror(errno));
    return;
  }
  s.shm = static_cast<Shared*>(p);
  s.map_bytes = bytes;
  s.slots = static_cast<unsigned char*>(p) + sizeof(Shared);
  if (s.rank == 0) {
    s.shm->nranks = s.nranks;
    s.shm->joined.store(0);
    s.shm->aborted_by.store(-1);
    for (int r = 0; r < kMaxRanks; ++r) s.shm->phase[r].store(0);
    s.shm->magic.store(kMagic, std::memory_order_release);
  }
  while (s.shm->magic.load(std::memory_order_acquire) != kMagic) {
    if (s.aborted.load()) {
      s.fail(ncclInvalidUsage, "the communicator was aborted during its init");
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (s.shm->nranks != s.nranks) {
    s.fail(ncclInvalidUsage, "rank " + std::to_string(s.rank) + " was started with nranks " + std::to_string(s.nranks) +
                                 ", rank 0 with " + std::to_string(s.shm->nranks));
    return;
  }
  s.shm->pid[s.rank] = static_cast<int32_t>(::getpid());
  s.shm->joined.fetch_add(1);
  while (s.shm->joined.load() < s.nranks) {
    if (ncclResult_t r = s.check_peers(true); r != ncclSuccess) return;
    if (Clock::now() > give_up) {
      s.fail(ncclSystemError, "not every rank joined the communicator");
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (s.rank == 0) ::shm_unlink(s.name.c_str());  // everyone has it mapped: nothing to leave behind
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.async.load() == ncclInProgress) s.async.store(ncclSuccess);
}

}  // namespace

extern "C" {

ncclResult_t ncclGetVersion(int* version) {
  if (version == nullptr) return call_error(ncclInvalidArgument, "ncclGetVersion: version is NULL");
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (id == nullptr) return call_error(ncclInvalidArgument, "ncclGetUniqueId: id is NULL");
  size_t got = 0;
  while (got < sizeof id->internal) {
    const ssize_t r = ::getrandom(id->internal + got, sizeof id->internal - got, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return call_error(ncclSystemError, std::string("ncclGetUniqueId: getrandom: ") + std::strerror(errno));
    got += static_cast<size_t>(r);
  }
  return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t* config) {
  if (comm == nullptr) return call_error(ncclInvalidArgument, "ncclCommInitRankConfig: comm is NULL");
  *comm = nullptr;
  if (nranks < 1 || nranks > kMaxRanks)
    return call_error(ncclInvalidArgument, "ncclCommInitRankConfig: nranks " + std::to_string(nranks) +
                                               " is outside [1, " + std::to_string(kMaxRanks) + "] (simulated NCCL)");
  if (rank < 0 || rank >= nranks)
    return call_error(ncclInvalidArgument, "ncclCommInitRankConfig: rank " + std::to_string(rank) +
                                               " is not below nranks " + std::to_string(nranks));
  auto st = std::make_shared<State>();
  st->rank = rank;
  st->nranks = nranks;
  st->blocking = config == nullptr || config->blocking != 0;
  if (cudaGetDevice(&st->device) != cudaSuccess)
    return call_error(ncclUnhandledCudaError, "ncclCommInitRankConfig: no current CUDA device");
  char hex[33];
  for (int i = 0; i < 16; ++i) std::snprintf(hex + 2 * i, 3, "%02x", static_cast<unsigned char>(id.internal[i]));
  st->name = std::string("/ember-nccl-") + hex;
  st->async.store(ncclInProgress);
  *comm = new ncclComm{st};
  if (st->blocking) {
    join(st);
    const ncclResult_t r = st->async.load();
    if (r != ncclSuccess) {
      t_last_error = st->last_error;
      return r;
    }
    return ncclSuccess;
  }
  std::thread([st] { join(st); }).detach();  // it holds the state until it is done
  return ncclInProgress;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  return ncclCommInitRankConfig(comm, nranks, id, rank, nullptr);
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* async_error) {
  if (comm == nullptr || async_error == nullptr)
    return call_error(ncclInvalidArgument, "ncclCommGetAsyncError: comm or asyncError is NULL");
  *async_error = comm->s->async.load();
  return ncclSuccess;
}

const char* ncclGetLastError(ncclComm_t comm) {
  if (comm != nullptr) {
    std::lock_guard<std::mutex> lock(comm->s->mu);
    if (!comm->s->last_error.empty()) t_last_error = comm->s->last_error;
  }
  return t_last_error.c_str();
}

const char* ncclGetErrorString(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  if (comm == nullptr) return call_error(ncclInvalidArgument, "ncclCommFinalize: comm is NULL");
  return ncclSuccess;  // nothing of the simulator's runs in the background between collectives
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  delete comm;  // queued collectives keep the state alive until they ran
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  State& s = *comm->s;
  s.aborted.store(true);
  if (s.shm != nullptr) {
    int32_t none = -1;
    s.shm->aborted_by.compare_exchange_strong(none, s.rank);
  }
  s.fail(ncclInvalidUsage, "the communicator was aborted on this rank");
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
  return enqueue(comm, Kind::all_reduce, sendbuff, recvbuff, count, datatype, op, 0, stream);
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream) {
  return enqueue(comm, Kind::broadcast, sendbuff, recvbuff, count, datatype, ncclSum, root, stream);
}

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream) {
  return enqueue(comm, Kind::all_gather, sendbuff, recvbuff, sendcount, datatype, ncclSum, 0, stream);
}

ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return enqueue(comm, Kind::reduce_scatter, sendbuff, recvbuff, recvcount, datatype, op, 0, stream);
}

}  // extern "C"

#endif  // EMBER_SIM_NCCL
