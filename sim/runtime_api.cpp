// The CUDA runtime API as the simulator provides it: the subset ember calls (and a little more),
// with the same signatures as the toolkit's cuda_runtime_api.h, so core/cuda/*.cpp, tests and
// benchmarks run unchanged on top of it. What is modelled:
//
//  - devices: EMBER_SIM_DEVICES simulated H100s (sm_90, 132 SMs, 80 GB said, EMBER_SIM_MEMORY
//    usable), the current device per host thread;
//  - memory: device memory apart from host memory (memory.cpp), pinned host memory that kernels
//    may read and write, cudaFree / cudaFreeHost synchronising the device first as on a GPU;
//  - streams: in-order queues, each drained by its own host thread, asynchronous to the caller, so
//    reading a result without synchronising reads poison; events with record / query / wait /
//    synchronize / elapsed time; cudaMemcpyAsync from pageable memory is staged at the call (H2D)
//    or synchronous (D2H), from pinned memory it happens when the stream gets there;
//  - errors: cudaGetLastError per host thread for launch errors; a kernel fault is sticky: every
//    synchronising call returns it from then on (sim::clear_fault() resets it for tests);
//  - graphs: stream capture into nodes (kernels, copies, memsets, external event records), fork
//    and join through events, the three capture modes and the programming guide's rules: a call
//    that is illegal during capture returns the error a GPU returns and invalidates the capture;
//    cudaStreamEndCapture then returns cudaErrorStreamCaptureInvalidated and no graph.
//
// Not modelled: timing (events measure host time), implicit synchronisation of blocking streams
// with the legacy stream, peer access, managed memory.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <unordered_map>

#include "sim/cluster_api.h"
#include "sim/internal.h"
#include "sim/sim.h"

namespace ember::sim {

// ---- configuration ----

namespace {

size_t parse_bytes(const char* s, size_t fallback) {
  if (s == nullptr || *s == '\0') return fallback;
  char* end = nullptr;
  const double v = std::strtod(s, &end);
  if (end == s || v <= 0) return fallback;
  double mult = 1;
  switch (*end) {
    case 'k':
    case 'K': mult = 1024.0; break;
    case 'm':
    case 'M': mult = 1024.0 * 1024; break;
    case 'g':
    case 'G': mult = 1024.0 * 1024 * 1024; break;
    default: break;
  }
  return static_cast<size_t>(v * mult);
}

bool env_flag(const char* name, bool fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  return !(std::strcmp(v, "0") == 0 || std::strcmp(v, "off") == 0 || std::strcmp(v, "false") == 0);
}

}  // namespace

const Config& config() {
  static const Config c = [] {
    Config c;
    if (const char* d = std::getenv("EMBER_SIM_DEVICES")) c.devices = std::clamp(std::atoi(d), 0, 16);
    c.memory_per_device = parse_bytes(std::getenv("EMBER_SIM_MEMORY"), c.memory_per_device);
    c.racecheck = env_flag("EMBER_SIM_RACECHECK", true);
    c.abort_on_fault = env_flag("EMBER_SIM_ABORT", false);
    if (const char* t = std::getenv("EMBER_SIM_THREADS")) c.block_threads = std::clamp(std::atoi(t), 0, 1024);
    if (const char* f = std::getenv("EMBER_SIM_FAIL_CAPTURES")) c.fail_captures = std::max(0, std::atoi(f));
    if (const char* s = std::getenv("EMBER_SIM_STACK_KB"))
      c.stack_bytes = std::max<size_t>(64, std::strtoul(s, nullptr, 10)) * 1024;
    return c;
  }();
  return c;
}

bool active() { return true; }

// ---- errors ----

namespace {

std::mutex g_fault_mu;
cudaError_t g_sticky = cudaSuccess;
std::string g_sticky_message;

thread_local cudaError_t t_last_error = cudaSuccess;
// A longer explanation of the last error this host thread was given (launch limits, capture
// rules), returned by cudaGetErrorString for that code.
thread_local cudaError_t t_detail_code = cudaSuccess;
thread_local std::string t_detail;

cudaError_t fail(cudaError_t e, std::string detail = {}) {
  t_last_error = e;
  if (!detail.empty()) {
    t_detail_code = e;
    t_detail = std::move(detail);
  }
  return e;
}
inline cudaError_t ok() { return cudaSuccess; }

}  // namespace

void record_fault(cudaError_t code, const std::string& message) {
  {
    std::lock_guard<std::mutex> lock(g_fault_mu);
    if (g_sticky == cudaSuccess) {
      g_sticky = code;
      g_sticky_message = "ember simulator: " + message;
    }
  }
  std::fprintf(stderr, "ember simulator: %s\n", message.c_str());
  if (Thread* t = current_thread()) t->block->launch->aborted.store(true);
  if (config().abort_on_fault) std::abort();
}

cudaError_t sticky_error() {
  std::lock_guard<std::mutex> lock(g_fault_mu);
  return g_sticky;
}
std::string sticky_message() {
  std::lock_guard<std::mutex> lock(g_fault_mu);
  return g_sticky_message;
}
void clear_sticky() {
  std::lock_guard<std::mutex> lock(g_fault_mu);
  g_sticky = cudaSuccess;
  g_sticky_message.clear();
}

std::string last_fault() { return sticky_message(); }

// ---- streams, events, captures ----

namespace {

struct StreamImpl;
struct EventImpl;
struct GraphImpl;
struct Capture;

// A node of a captured graph.
struct Node {
  cudaGraphNodeType type = cudaGraphNodeTypeEmpty;
  std::vector<Node*> deps;
  std::shared_ptr<Launch> launch;    // kernel
  std::function<void()> run;         // copies, memsets, event records and waits
  std::shared_ptr<EventImpl> event;  // event record / wait nodes
  bool internal = false;             // the simulator's own bookkeeping (allocation bounds)
};

struct GraphImpl {
  std::vector<std::unique_ptr<Node>> nodes;  // in capture order, which is a topological order
};

struct ExecImpl {
  std::shared_ptr<GraphImpl> graph;
  int device = 0;
};

struct Capture {
  std::shared_ptr<GraphImpl> graph = std::make_shared<GraphImpl>();
  StreamImpl* origin = nullptr;
  cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
  std::thread::id thread;
  bool invalidated = false;
  std::string why;  // what invalidated it
  std::set<StreamImpl*> streams;
  uint64_t id = 0;
};

struct StreamImpl {
  int device = 0;
  unsigned flags = 0;
  int priority = 0;
  bool legacy = false;
  std::mutex mu;
  std::condition_variable cv, done_cv;
  std::deque<std::function<void()>> queue;
  uint64_t enqueued = 0, completed = 0;
  std::thread worker;
  bool stop = false;
  // capture (guarded by g_mu)
  Capture* capture = nullptr;
  std::vector<Node*> tail;  // what the next captured node depends on

  void loop() {
    for (;;) {
      std::function<void()> op;
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return stop || !queue.empty(); });
        if (queue.empty()) return;
        op = std::move(queue.front());
        queue.pop_front();
      }
      op();
      {
        std::lock_guard<std::mutex> lock(mu);
        ++completed;
      }
      done_cv.notify_all();
    }
  }
  void push(std::function<void()> op) {
    {
      std::lock_guard<std::mutex> lock(mu);
      queue.push_back(std::move(op));
      ++enqueued;
    }
    cv.notify_one();
  }
  uint64_t mark() {
    std::lock_guard<std::mutex> lock(mu);
    return enqueued;
  }
  void wait_for(uint64_t upto) {
    std::unique_lock<std::mutex> lock(mu);
    done_cv.wait(lock, [&] { return completed >= upto; });
  }
  bool reached(uint64_t upto) {
    std::lock_guard<std::mutex> lock(mu);
    return completed >= upto;
  }
};

struct EventImpl {
  int device = 0;
  unsigned flags = 0;
  // guarded by mu: records handed out and completed (complete when done == recorded)
  std::mutex mu;
  std::condition_variable cv;
  uint64_t recorded = 0, done = 0;
  std::chrono::steady_clock::time_point when{};
  // guarded by g_mu: the capture it was last recorded in, and the nodes it stands for there
  Capture* captured = nullptr;
  uint64_t capture_id = 0;
  std::vector<Node*> capture_deps;

  void complete(uint64_t gen) {
    {
      std::lock_guard<std::mutex> lock(mu);
      done = std::max(done, gen);
      when = std::chrono::steady_clock::now();
    }
    cv.notify_all();
  }
  bool is_done(uint64_t gen) {
    std::lock_guard<std::mutex> lock(mu);
    return done >= gen;
  }
  void wait(uint64_t gen) {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return done >= gen; });
  }
};

std::mutex g_mu;  // streams, captures, modes, kernel attributes
std::vector<StreamImpl*> g_streams;
std::vector<StreamImpl*> g_legacy;  // per device
std::set<Capture*> g_captures;      // active captures
uint64_t g_capture_ids = 0;
std::unordered_map<EventImpl*, std::shared_ptr<EventImpl>> g_events;  // live handles
std::unordered_map<const void*, int> g_smem_attr;                     // kernel -> max dynamic shared memory
std::unordered_map<const void*, size_t> g_static_smem;                // kernel -> static shared memory seen
std::map<const void*, KernelStats> g_stats;

thread_local int t_device = 0;
thread_local cudaStreamCaptureMode t_mode = cudaStreamCaptureModeGlobal;

// Drains every stream before the program's static objects are destroyed.
void drain_all();
void register_drain_at_exit() {
  static std::once_flag once;
  std::call_once(once, [] { std::atexit(drain_all); });
}

StreamImpl* make_stream(int device, unsigned flags, int priority, bool legacy) {
  // Registered by the thread that makes the first stream, before any work can be queued: from a
  // stream's worker (at its first launch, as before) the registration could come while the main
  // thread was already running the exit handlers, after g_streams was destroyed (seen as a
  // heap-use-after-free in drain_all under AddressSanitizer).
  register_drain_at_exit();
  auto* s = new StreamImpl();  // never destroyed while the process lives (handles stay valid)
  s->device = device;
  s->flags = flags;
  s->priority = priority;
  s->legacy = legacy;
  s->worker = std::thread([s] { s->loop(); });
  s->worker.detach();
  g_streams.push_back(s);
  return s;
}

StreamImpl* legacy_stream(int device) {
  if (g_legacy.empty()) g_legacy.assign(static_cast<size_t>(config().devices), nullptr);
  if (g_legacy[static_cast<size_t>(device)] == nullptr)
    g_legacy[static_cast<size_t>(device)] = make_stream(device, cudaStreamDefault, 0, true);
  return g_legacy[static_cast<size_t>(device)];
}

// The stream a handle names (0 and cudaStreamLegacy: the device's legacy stream). g_mu held.
StreamImpl* resolve(cudaStream_t s) {
  if (s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread) return legacy_stream(t_device);
  return reinterpret_cast<StreamImpl*>(s);
}

void drain_all() {
  std::vector<StreamImpl*> streams;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    streams = g_streams;
  }
  for (StreamImpl* s : streams) s->wait_for(s->mark());
}

void drain_device(int device) {
  std::vector<StreamImpl*> streams;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    for (StreamImpl* s : g_streams)
      if (s->device == device) streams.push_back(s);
  }
  for (StreamImpl* s : streams) s->wait_for(s->mark());
}

// ---- capture rules ----

const char* mode_name(cudaStreamCaptureMode m) {
  return m == cudaStreamCaptureModeGlobal        ? "global"
         : m == cudaStreamCaptureModeThreadLocal ? "thread-local"
                                                 : "relaxed";
}

void invalidate(Capture* c, const std::string& why) {
  if (c != nullptr && !c->invalidated) {
    c->invalidated = true;
    c->why = why;
  }
}

// Whether the calling thread may make a potentially unsafe call now (cudaThreadExchange-
// StreamCaptureMode's rules); if not, the capture(s) it would break are invalidated and the error
// to return is cudaErrorStreamCaptureUnsupported. g_mu held.
cudaError_t unsafe_call(const char* what) {
  if (t_mode == cudaStreamCaptureModeRelaxed) return cudaSuccess;
  const auto me = std::this_thread::get_id();
  std::vector<Capture*> broken;
  for (Capture* c : g_captures) {
    if (c->mode == cudaStreamCaptureModeRelaxed) continue;
    if (c->thread == me) broken.push_back(c);
    else if (t_mode == cudaStreamCaptureModeGlobal && c->mode == cudaStreamCaptureModeGlobal) broken.push_back(c);
  }
  if (broken.empty()) return cudaSuccess;
  const std::string why = std::string(what) + " during a " + mode_name(broken.front()->mode) +
                          "-mode stream capture (potentially unsafe while capturing: use relaxed mode for it, or move "
                          "it out of the captured region)";
  for (Capture* c : broken) invalidate(c, why);
  return fail(cudaErrorStreamCaptureUnsupported, why);
}

// Adds a node to the capture `s` belongs to. g_mu held.
Node* add_node(StreamImpl* s, std::unique_ptr<Node> n) {
  n->deps = s->tail;
  Node* raw = n.get();
  s->capture->graph->nodes.push_back(std::move(n));
  s->tail = {raw};
  return raw;
}

// For an operation queued on a capturing stream: the error if the capture was invalidated.
cudaError_t capture_state_error(StreamImpl* s) {
  if (s->capture != nullptr && s->capture->invalidated)
    return fail(cudaErrorStreamCaptureInvalidated, "the stream capture was invalidated earlier: " + s->capture->why);
  return cudaSuccess;
}

// Using the legacy stream while a blocking stream captures is invalid. g_mu held.
cudaError_t legacy_use(StreamImpl* s) {
  if (!s->legacy) return cudaSuccess;
  for (Capture* c : g_captures)
    if (!(c->origin->flags & cudaStreamNonBlocking)) {
      invalidate(c, "the legacy stream was used while a blocking stream was capturing");
      return fail(cudaErrorStreamCaptureImplicit,
                  "the legacy (default) stream was used while a blocking stream was capturing");
    }
  return cudaSuccess;
}

// ---- pointers ----

enum class PtrKind { device, pinned, pageable };

PtrKind classify(const void* p, size_t bytes, int* device, bool* valid) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  *valid = true;
  if (!in_device_region(a) && !in_pinned_region(a)) return PtrKind::pageable;
  const Allocation* al = find_allocation(a);
  *valid = al != nullptr && a + bytes <= al->base + al->size;
  if (*valid && device != nullptr) *device = al->device;
  return in_device_region(a) ? PtrKind::device : PtrKind::pinned;
}

std::string range_problem(const void* p, size_t bytes) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%p", p);
  return std::string(buf) + " + " + std::to_string(bytes) +
         " bytes: " + describe_address(reinterpret_cast<uintptr_t>(p));
}

void note_stats(const Launch& L) {
  std::lock_guard<std::mutex> lock(g_mu);
  KernelStats& s = g_stats[L.kernel];
  ++s.launches;
  const uint64_t blocks = uint64_t{L.grid.x} * L.grid.y * L.grid.z;
  s.blocks += blocks;
  s.threads += blocks * L.block.x * L.block.y * L.block.z;
}

void run_launch(Launch& L) {
  if (sticky_error() != cudaSuccess) return;  // a faulted device runs nothing more
  run_grid(L);
  note_stats(L);
}

}  // namespace

int current_device() { return t_device; }

size_t kernel_smem_attribute(const void* kernel) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = g_smem_attr.find(kernel);
  return it == g_smem_attr.end() ? 0 : static_cast<size_t>(it->second);
}

// Note [shared memory limits]: as on sm_90, static shared memory is at most 48 KiB; dynamic shared
// memory is at most 48 KiB minus the static part unless cudaFuncSetAttribute(kernel,
// cudaFuncAttributeMaxDynamicSharedMemorySize, n) raised its limit to n, and static + n may not
// pass the opt-in maximum of 227 KiB. The simulator learns a kernel's static size when the kernel
// first declares it, so the first launch over a static limit fails when it runs, later ones when
// they are made.
std::string shared_memory_problem(const Launch& l, size_t static_bytes) {
  const size_t dyn = l.dynamic_smem;
  auto kb = [](size_t b) { return std::to_string(b) + " bytes"; };
  if (static_bytes > kDefaultSharedPerBlock)
    return kb(static_bytes) + " of static shared memory, over the 48 KiB (49152-byte) limit for static shared memory";
  if (l.dynamic_smem_attr == 0 && dyn + static_bytes > kDefaultSharedPerBlock)
    return kb(dyn) + " dynamic + " + kb(static_bytes) +
           " static shared memory, over 48 KiB without cudaFuncSetAttribute(kernel, "
           "cudaFuncAttributeMaxDynamicSharedMemorySize, bytes)";
  if (l.dynamic_smem_attr != 0 && dyn > l.dynamic_smem_attr)
    return kb(dyn) + " of dynamic shared memory, over the " + kb(l.dynamic_smem_attr) +
           " the kernel's cudaFuncAttributeMaxDynamicSharedMemorySize allows";
  if (dyn + static_bytes > kMaxSharedPerBlockOptin)
    return kb(dyn) + " dynamic + " + kb(static_bytes) + " static shared memory, over the sm_90 maximum of " +
           kb(kMaxSharedPerBlockOptin) + " per block";
  return "";
}

cudaError_t check_launch_config(const Launch& l) {
  const uint64_t threads = uint64_t{l.block.x} * l.block.y * l.block.z;
  auto dims = [](dim3 d) {
    return "(" + std::to_string(d.x) + "," + std::to_string(d.y) + "," + std::to_string(d.z) + ")";
  };
  auto k = [&] { return "launch of " + l.name() + ": "; };
  if (threads == 0 || l.grid.x == 0 || l.grid.y == 0 || l.grid.z == 0)
    return fail(cudaErrorInvalidConfiguration,
                k() + "grid " + dims(l.grid) + " x block " + dims(l.block) + " has a zero dimension");
  if (threads > kMaxThreadsPerBlock || l.block.x > 1024 || l.block.y > 1024 || l.block.z > kMaxBlockDimZ)
    return fail(cudaErrorInvalidConfiguration,
                k() + "block " + dims(l.block) + " = " + std::to_string(threads) +
                    " threads; the limits are 1024 threads per block, (1024, 1024, 64) per dimension");
  if (l.grid.y > kMaxGridDimYZ || l.grid.z > kMaxGridDimYZ || l.grid.x > 0x7fffffffu)
    return fail(cudaErrorInvalidConfiguration,
                k() + "grid " + dims(l.grid) + " is over the limits (2^31 - 1, 65535, 65535)");
  size_t static_seen = 0;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    auto it = g_static_smem.find(l.kernel);
    if (it != g_static_smem.end()) static_seen = it->second;
  }
  if (std::string problem = shared_memory_problem(l, static_seen); !problem.empty())
    return fail(cudaErrorInvalidValue, k() + problem);
  return cudaSuccess;
}

void note_static_smem(const void* kernel, size_t bytes) {
  std::lock_guard<std::mutex> lock(g_mu);
  size_t& s = g_static_smem[kernel];
  s = std::max(s, bytes);
}

namespace {

// Blocks per cluster: each dimension divides the grid's, at most 8 blocks in all (the portable
// size; ember never asks for cudaFuncAttributeNonPortableClusterSizeAllowed).
cudaError_t check_cluster(const Launch& l) {
  const dim3 c = l.cluster, g = l.grid;
  const auto dims = [](dim3 d) {
    return "(" + std::to_string(d.x) + "," + std::to_string(d.y) + "," + std::to_string(d.z) + ")";
  };
  if (c.x == 0 || c.y == 0 || c.z == 0 || uint64_t{c.x} * c.y * c.z > kMaxClusterBlocks)
    return fail(cudaErrorInvalidClusterSize, "launch of " + l.name() + ": cluster " + dims(c) +
                                                 " (each dimension at least 1, at most 8 blocks in all)");
  if (g.x % c.x != 0 || g.y % c.y != 0 || g.z % c.z != 0)
    return fail(cudaErrorInvalidClusterSize,
                "launch of " + l.name() + ": grid " + dims(g) + " is not a whole number of clusters " + dims(c));
  return cudaSuccess;
}

void launch_impl(const void* kernel, dim3 grid, dim3 block, dim3 cluster, size_t dynamic_smem, cudaStream_t stream,
                 KernelBody body) {
  auto L = std::make_shared<Launch>();
  L->kernel = kernel;
  L->grid = grid;
  L->block = block;
  L->cluster = cluster;
  L->dynamic_smem = dynamic_smem;
  L->dynamic_smem_attr = kernel_smem_attribute(kernel);
  L->params = body.params.get();
  L->param_bytes = body.param_bytes;
  L->body = std::move(body);
  L->device = t_device;
  // (the error is what cudaGetLastError reports)
  if (check_launch_config(*L) != cudaSuccess || check_cluster(*L) != cudaSuccess) return;
  std::unique_lock<std::mutex> lock(g_mu);
  StreamImpl* s = resolve(stream);
  if (s->device != t_device) {
    fail(cudaErrorInvalidResourceHandle, "launch on a stream of cuda:" + std::to_string(s->device) +
                                             " while cuda:" + std::to_string(t_device) + " is current");
    return;
  }
  if (legacy_use(s) != cudaSuccess) return;
  if (s->capture != nullptr) {
    if (capture_state_error(s) != cudaSuccess) return;
    auto n = std::make_unique<Node>();
    n->type = cudaGraphNodeTypeKernel;
    n->launch = L;
    add_node(s, std::move(n));
    return;
  }
  lock.unlock();
  counters_launch_queued(*L);
  s->push([L] { run_launch(*L); });
}

}  // namespace

void launch(const void* kernel, dim3 grid, dim3 block, size_t dynamic_smem, cudaStream_t stream, KernelBody body) {
  launch_impl(kernel, grid, block, dim3(1, 1, 1), dynamic_smem, stream, std::move(body));
}

void launch_cluster(const void* kernel, dim3 grid, dim3 block, dim3 cluster, size_t dynamic_smem, cudaStream_t stream,
                    KernelBody body) {
  launch_impl(kernel, grid, block, cluster, dynamic_smem, stream, std::move(body));
}

void annotate_block(void* block, size_t bytes, void* stream) {
  const auto base = reinterpret_cast<uintptr_t>(block);
  std::unique_lock<std::mutex> lock(g_mu);
  StreamImpl* s = resolve(static_cast<cudaStream_t>(stream));
  auto op = [base, bytes] { set_in_use(base, bytes); };
  if (s->capture != nullptr) {
    // part of the graph, invisible to cudaGraphGetNodes: replays set the same bounds in order
    auto n = std::make_unique<Node>();
    n->type = cudaGraphNodeTypeEmpty;
    n->internal = true;
    n->run = op;
    add_node(s, std::move(n));
    return;
  }
  lock.unlock();
  s->push(op);
}

std::vector<KernelStats> kernel_stats() {
  std::lock_guard<std::mutex> lock(g_mu);
  std::vector<KernelStats> out;
  for (auto& [k, s] : g_stats) {
    KernelStats r = s;
    Launch tmp;
    tmp.kernel = k;
    r.name = tmp.name();
    out.push_back(r);
  }
  return out;
}

void wait_all_streams() { drain_all(); }

void clear_fault() {
  drain_all();
  clear_sticky();
  t_last_error = cudaSuccess;
}

}  // namespace ember::sim

// =====================================================================================
// The C API
// =====================================================================================

using namespace ember::sim;

namespace {

bool bad_device(int d) { return d < 0 || d >= config().devices; }

EventImpl* ev(cudaEvent_t e) { return reinterpret_cast<EventImpl*>(e); }
// A handle that is not a live event (never created, or destroyed) is an error, not a crash.
bool live_event(cudaEvent_t e) {
  std::lock_guard<std::mutex> lock(g_mu);
  return e != nullptr && g_events.count(reinterpret_cast<EventImpl*>(e)) > 0;
}
// The error of `call` (with its preposition: "cudaEventQuery of") on a handle that is not a live event.
cudaError_t no_such_event(const std::string& call) {
  return fail(cudaErrorInvalidResourceHandle, call + " an event that does not exist (destroyed?)");
}
// The owning pointer of a live event (work queued on it keeps it alive past cudaEventDestroy).
// g_mu held.
std::shared_ptr<EventImpl> hold(EventImpl* e) {
  auto it = g_events.find(e);
  return it == g_events.end() ? nullptr : it->second;
}

// cudaSuccess, or the refusal of `call` (cudaStreamSynchronize or cudaStreamQuery) on a capturing
// stream, where nothing runs until the graph is replayed, which also invalidates the capture.
// `detail` ends the message. g_mu held.
cudaError_t refuse_if_capturing(StreamImpl* s, const char* call, const char* detail) {
  if (s->capture == nullptr) return cudaSuccess;
  invalidate(s->capture, std::string(call) + " on the capturing stream");
  return fail(cudaErrorStreamCaptureUnsupported, std::string(call) + " on a stream that is capturing a graph" + detail);
}

// Whether `call` (cudaEventQuery or cudaEventSynchronize) may look at event E now: not when E was
// last recorded in a capture (it marks a point of a graph, and the look invalidates that capture),
// nor when a capture makes the call unsafe. `detail` ends the first error's message.
cudaError_t check_event_wait(EventImpl* E, const char* call, const char* detail) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (E->capture_id != 0) {
    if (E->captured != nullptr) invalidate(E->captured, std::string(call) + " on an event recorded in the capture");
    return fail(cudaErrorCapturedEvent,
                std::string(call) + " on an event last recorded in a capturing stream" + detail);
  }
  return unsafe_call(call);
}

// The generation of E's last record, which a wait or a query is about.
uint64_t last_record(EventImpl* E) {
  std::lock_guard<std::mutex> el(E->mu);
  return E->recorded;
}

// Runs `op` on stream `s` (or records it as a node while capturing). g_mu held on entry; released.
cudaError_t submit(std::unique_lock<std::mutex>& lock, StreamImpl* s, cudaGraphNodeType type,
                   std::function<void()> op) {
  if (cudaError_t e = legacy_use(s); e != cudaSuccess) return e;
  if (s->capture != nullptr) {
    if (cudaError_t e = capture_state_error(s); e != cudaSuccess) return e;
    auto n = std::make_unique<Node>();
    n->type = type;
    n->run = std::move(op);
    add_node(s, std::move(n));
    return ok();
  }
  lock.unlock();
  s->push(std::move(op));
  return ok();
}

cudaError_t sticky_or(cudaError_t e) {
  const cudaError_t s = sticky_error();
  if (s != cudaSuccess) {
    t_last_error = s;
    return s;
  }
  return e;
}

}  // namespace

extern "C" {

cudaError_t cudaGetDeviceCount(int* count) {
  *count = config().devices;
  if (*count == 0) return fail(cudaErrorNoDevice);
  return ok();
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int device) {
  if (bad_device(device)) return fail(cudaErrorInvalidDevice);
  std::memset(p, 0, sizeof *p);
  std::snprintf(p->name, sizeof p->name, "NVIDIA H100 80GB HBM3 (ember simulator)");
  p->totalGlobalMem = size_t{80} * 1000 * 1000 * 1000;
  p->sharedMemPerBlock = kDefaultSharedPerBlock;
  p->regsPerBlock = 65536;
  p->warpSize = 32;
  p->memPitch = 2147483647;
  p->maxThreadsPerBlock = kMaxThreadsPerBlock;
  p->maxThreadsDim[0] = 1024;
  p->maxThreadsDim[1] = 1024;
  p->maxThreadsDim[2] = 64;
  p->maxGridSize[0] = 2147483647;
  p->maxGridSize[1] = 65535;
  p->maxGridSize[2] = 65535;
  p->totalConstMem = 64 * 1024;
  p->major = 9;
  p->minor = 0;
  p->multiProcessorCount = kSmCount;
  p->canMapHostMemory = 1;
  p->concurrentKernels = 1;
  p->asyncEngineCount = 3;
  p->unifiedAddressing = 1;
  p->memoryBusWidth = 5120;
  p->l2CacheSize = 50 * 1024 * 1024;
  p->maxThreadsPerMultiProcessor = 2048;
  p->streamPrioritiesSupported = 1;
  p->sharedMemPerMultiprocessor = 228 * 1024;
  p->regsPerMultiprocessor = 64 * 1024;
  p->sharedMemPerBlockOptin = kMaxSharedPerBlockOptin;
  p->maxBlocksPerMultiProcessor = 32;
  p->reservedSharedMemPerBlock = 1024;
  p->pciDeviceID = device;
  return ok();
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (bad_device(device)) return fail(cudaErrorInvalidDevice);
  cudaDeviceProp p;
  cudaGetDeviceProperties(&p, device);
  switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock: *value = p.maxThreadsPerBlock; break;
    case cudaDevAttrMaxBlockDimX: *value = p.maxThreadsDim[0]; break;
    case cudaDevAttrMaxBlockDimY: *value = p.maxThreadsDim[1]; break;
    case cudaDevAttrMaxBlockDimZ: *value = p.maxThreadsDim[2]; break;
    case cudaDevAttrMaxGridDimX: *value = p.maxGridSize[0]; break;
    case cudaDevAttrMaxGridDimY: *value = p.maxGridSize[1]; break;
    case cudaDevAttrMaxGridDimZ: *value = p.maxGridSize[2]; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *value = static_cast<int>(p.sharedMemPerBlock); break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = static_cast<int>(p.sharedMemPerBlockOptin); break;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor: *value = static_cast<int>(p.sharedMemPerMultiprocessor); break;
    case cudaDevAttrWarpSize: *value = 32; break;
    case cudaDevAttrMultiProcessorCount: *value = p.multiProcessorCount; break;
    case cudaDevAttrComputeCapabilityMajor: *value = p.major; break;
    case cudaDevAttrComputeCapabilityMinor: *value = p.minor; break;
    case cudaDevAttrMaxRegistersPerBlock: *value = p.regsPerBlock; break;
    case cudaDevAttrMaxThreadsPerMultiProcessor: *value = p.maxThreadsPerMultiProcessor; break;
    case cudaDevAttrL2CacheSize: *value = p.l2CacheSize; break;
    case cudaDevAttrUnifiedAddressing: *value = 1; break;
    case cudaDevAttrCanMapHostMemory: *value = 1; break;
    case cudaDevAttrConcurrentKernels: *value = 1; break;
    case cudaDevAttrMaxBlocksPerMultiprocessor: *value = p.maxBlocksPerMultiProcessor; break;
    case cudaDevAttrGlobalMemoryBusWidth: *value = p.memoryBusWidth; break;
    default:
      return fail(cudaErrorInvalidValue,
                  "cudaDeviceGetAttribute: attribute " + std::to_string(attr) + " is not simulated");
  }
  return ok();
}

cudaError_t cudaSetDevice(int device) {
  if (bad_device(device)) return fail(cudaErrorInvalidDevice);
  t_device = device;
  return ok();
}

cudaError_t cudaGetDevice(int* device) {
  *device = t_device;
  return ok();
}

cudaError_t cudaDeviceSynchronize(void) {
  {
    std::lock_guard<std::mutex> lock(g_mu);
    for (Capture* c : g_captures) {
      const bool mine = c->thread == std::this_thread::get_id();
      if (c->mode != cudaStreamCaptureModeRelaxed && (mine || c->mode == cudaStreamCaptureModeGlobal)) {
        invalidate(c, "cudaDeviceSynchronize during the capture");
        return fail(cudaErrorStreamCaptureUnsupported,
                    "cudaDeviceSynchronize while a stream of the device is capturing (it would wait for work that only "
                    "exists in the graph)");
      }
    }
  }
  drain_device(t_device);
  return sticky_or(ok());
}

cudaError_t cudaMemGetInfo(size_t* free_b, size_t* total) {
  auto [f, t] = device_memory_info(t_device);
  *free_b = f;
  *total = t;
  return ok();
}

cudaError_t cudaDeviceGetStreamPriorityRange(int* least, int* greatest) {
  if (least) *least = 0;
  if (greatest) *greatest = -5;
  return ok();
}

cudaError_t cudaStreamCreateWithPriority(cudaStream_t* s, unsigned flags, int priority) {
  std::lock_guard<std::mutex> lock(g_mu);
  *s = reinterpret_cast<cudaStream_t>(make_stream(t_device, flags, priority, false));
  return ok();
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags) {
  return cudaStreamCreateWithPriority(s, flags, 0);
}
cudaError_t cudaStreamCreate(cudaStream_t* s) { return cudaStreamCreateWithPriority(s, cudaStreamDefault, 0); }

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  // Work already queued still runs (as on a GPU); the handle stays valid memory but is retired.
  if (stream == nullptr) return fail(cudaErrorInvalidResourceHandle);
  return ok();
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  StreamImpl* s;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    s = resolve(stream);
    if (cudaError_t e = refuse_if_capturing(s, "cudaStreamSynchronize",
                                            " (nothing runs during capture; synchronise after replaying the graph)");
        e != cudaSuccess)
      return e;
    if (legacy_use(s) != cudaSuccess) return t_last_error;
    // waiting for other work is potentially unsafe: refused during a global or this thread's capture
    if (cudaError_t u = unsafe_call("cudaStreamSynchronize"); u != cudaSuccess) return u;
  }
  s->wait_for(s->mark());
  return sticky_or(ok());
}

cudaError_t cudaStreamGetDevice(cudaStream_t stream, int* device) {
  if (device == nullptr) return fail(cudaErrorInvalidValue, "cudaStreamGetDevice: device is null");
  std::lock_guard<std::mutex> lock(g_mu);
  *device = resolve(stream)->device;
  return ok();
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  StreamImpl* s;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    s = resolve(stream);
    if (cudaError_t e = refuse_if_capturing(s, "cudaStreamQuery", ""); e != cudaSuccess) return e;
    if (cudaError_t u = unsafe_call("cudaStreamQuery"); u != cudaSuccess) return u;
  }
  if (cudaError_t e = sticky_or(cudaSuccess); e != cudaSuccess) return e;
  return s->reached(s->mark()) ? ok() : cudaErrorNotReady;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status) {
  std::lock_guard<std::mutex> lock(g_mu);
  StreamImpl* s = resolve(stream);
  if (s->capture == nullptr) *status = cudaStreamCaptureStatusNone;
  else *status = s->capture->invalidated ? cudaStreamCaptureStatusInvalidated : cudaStreamCaptureStatusActive;
  return ok();
}

cudaError_t cudaStreamGetCaptureInfo(cudaStream_t stream, cudaStreamCaptureStatus* status, unsigned long long* id,
                                     cudaGraph_t* graph, const cudaGraphNode_t** deps, const cudaGraphEdgeData** edges,
                                     size_t* ndeps) {
  std::lock_guard<std::mutex> lock(g_mu);
  StreamImpl* s = resolve(stream);
  if (s->capture == nullptr) *status = cudaStreamCaptureStatusNone;
  else *status = s->capture->invalidated ? cudaStreamCaptureStatusInvalidated : cudaStreamCaptureStatusActive;
  if (id != nullptr) *id = s->capture ? s->capture->id : 0;
  if (graph != nullptr) *graph = nullptr;
  if (deps != nullptr) *deps = nullptr;
  if (edges != nullptr) *edges = nullptr;
  if (ndeps != nullptr) *ndeps = 0;
  return ok();
}

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (stream == nullptr || stream == cudaStreamLegacy)
    return fail(cudaErrorStreamCaptureUnsupported, "capture cannot begin on the legacy (default) stream");
  StreamImpl* s = resolve(stream);
  if (s->capture != nullptr)
    return fail(cudaErrorIllegalState, "cudaStreamBeginCapture: the stream is already capturing");
  auto* c = new Capture();
  c->origin = s;
  c->mode = mode;
  c->thread = std::this_thread::get_id();
  c->id = ++g_capture_ids;
  c->streams.insert(s);
  s->capture = c;
  s->tail.clear();
  g_captures.insert(c);
  return ok();
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  std::lock_guard<std::mutex> lock(g_mu);
  *graph = nullptr;
  StreamImpl* s = resolve(stream);
  Capture* c = s->capture;
  if (c == nullptr) return fail(cudaErrorIllegalState, "cudaStreamEndCapture on a stream that is not capturing");
  if (c->origin != s)
    return fail(cudaErrorStreamCaptureUnmatched,
                "cudaStreamEndCapture on a stream that joined the capture; end it on the stream that began it");
  if (c->mode != cudaStreamCaptureModeRelaxed && c->thread != std::this_thread::get_id()) {
    // The capture ends with the error, as on a GPU (H200, driver 580): the stream is no longer
    // capturing, and a second cudaStreamEndCapture, from any thread, is cudaErrorIllegalState.
    const std::string msg = std::string("cudaStreamEndCapture from another thread than the one that began a ") +
                            mode_name(c->mode) + "-mode capture (the capture is ended)";
    for (StreamImpl* o : c->streams) {
      o->capture = nullptr;
      o->tail.clear();
    }
    g_captures.erase(c);
    for (auto& [raw, e] : g_events)
      if (e->captured == c) e->captured = nullptr;
    delete c;
    return fail(cudaErrorStreamCaptureWrongThread, msg);
  }
  // EMBER_SIM_FAIL_CAPTURES: the first N captures of the process fail here, as an invalidated
  // capture does on a GPU, for tests of what a program does then
  static int failed_on_purpose = 0;
  if (!c->invalidated && failed_on_purpose < config().fail_captures) {
    ++failed_on_purpose;
    invalidate(c, "EMBER_SIM_FAIL_CAPTURES=" + std::to_string(config().fail_captures) +
                      " fails the first captures of the process on purpose");
  }
  // every stream forked into the capture must have been joined back into the origin stream
  if (!c->invalidated) {
    std::set<Node*> reach;
    std::vector<Node*> todo = s->tail;
    while (!todo.empty()) {
      Node* n = todo.back();
      todo.pop_back();
      if (!reach.insert(n).second) continue;
      for (Node* d : n->deps) todo.push_back(d);
    }
    for (StreamImpl* o : c->streams) {
      if (o == s) continue;
      for (Node* n : o->tail)
        if (!reach.count(n)) {
          invalidate(c, "a stream forked into the capture was not joined back into the origin stream");
          break;
        }
    }
  }
  for (StreamImpl* o : c->streams) {
    o->capture = nullptr;
    o->tail.clear();
  }
  g_captures.erase(c);
  for (auto& [raw, e] : g_events)
    if (e->captured == c) e->captured = nullptr;  // "last recorded in a capture" (capture_id stays)
  const bool invalid = c->invalidated;
  const bool unjoined = invalid && c->why.rfind("a stream forked", 0) == 0;
  const std::string why = c->why;
  std::shared_ptr<GraphImpl> g = c->graph;
  delete c;
  if (invalid) {
    if (unjoined) return fail(cudaErrorStreamCaptureUnjoined, "stream capture: " + why);
    return fail(cudaErrorStreamCaptureInvalidated, "the stream capture was invalidated: " + why);
  }
  *graph = reinterpret_cast<cudaGraph_t>(new std::shared_ptr<GraphImpl>(g));
  return ok();
}

cudaError_t cudaThreadExchangeStreamCaptureMode(cudaStreamCaptureMode* mode) {
  std::swap(t_mode, *mode);
  return ok();
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned flags) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto impl = std::make_shared<EventImpl>();
  impl->device = t_device;
  impl->flags = flags;
  g_events[impl.get()] = impl;
  *e = reinterpret_cast<cudaEvent_t>(impl.get());
  return ok();
}
cudaError_t cudaEventCreate(cudaEvent_t* e) { return cudaEventCreateWithFlags(e, cudaEventDefault); }

cudaError_t cudaEventDestroy(cudaEvent_t e) {
  if (e == nullptr) return fail(cudaErrorInvalidResourceHandle);
  std::lock_guard<std::mutex> lock(g_mu);
  // Work queued before the destroy still holds it and completes it (as CUDA allows).
  if (g_events.erase(ev(e)) == 0) return fail(cudaErrorInvalidResourceHandle);
  return ok();
}

cudaError_t cudaEventRecordWithFlags(cudaEvent_t e, cudaStream_t stream, unsigned flags) {
  if (!live_event(e)) return no_such_event("cudaEventRecord of");
  std::unique_lock<std::mutex> lock(g_mu);
  StreamImpl* s = resolve(stream);
  EventImpl* E = ev(e);
  if (E->device != s->device)
    return fail(cudaErrorInvalidResourceHandle,
                "cudaEventRecord: the event and the stream belong to different devices");
  if (cudaError_t err = legacy_use(s); err != cudaSuccess) return err;
  if (s->capture != nullptr) {
    if (cudaError_t err = capture_state_error(s); err != cudaSuccess) return err;
    if (flags & cudaEventRecordExternal) {
      auto n = std::make_unique<Node>();
      n->type = cudaGraphNodeTypeEventRecord;
      n->event = hold(E);
      add_node(s, std::move(n));
      return ok();
    }
    // an ordinary record inside a capture marks a point of the graph (for fork and join)
    E->captured = s->capture;
    E->capture_id = s->capture->id;
    E->capture_deps = s->tail;
    return ok();
  }
  if (flags & cudaEventRecordExternal)  // cudaErrorIllegalState, as a GPU answers (H200, driver 580)
    return fail(cudaErrorIllegalState, "cudaEventRecordExternal outside a stream capture");
  E->captured = nullptr;
  E->capture_id = 0;
  uint64_t gen;
  {
    std::lock_guard<std::mutex> el(E->mu);
    gen = ++E->recorded;
  }
  std::shared_ptr<EventImpl> Eh = hold(E);
  lock.unlock();
  s->push([Eh, gen] { Eh->complete(gen); });
  return ok();
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t stream) { return cudaEventRecordWithFlags(e, stream, 0); }

cudaError_t cudaEventQuery(cudaEvent_t e) {
  if (!live_event(e)) return no_such_event("cudaEventQuery of");
  EventImpl* E = ev(e);
  // Querying any other event is potentially unsafe too (PyTorch's caching allocator defers its
  // event queries while a capture is underway for this reason): refused in global mode from any
  // thread and on the capturing thread unless it is in relaxed mode. The stricter reading where
  // the programming guide does not list the calls (docs/simulator.md, the capture rules).
  if (cudaError_t u = check_event_wait(E, "cudaEventQuery", " (it marks a point of a graph, not work that runs)");
      u != cudaSuccess)
    return u;
  if (cudaError_t err = sticky_or(cudaSuccess); err != cudaSuccess) return err;
  return E->is_done(last_record(E)) ? ok() : cudaErrorNotReady;
}

cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  if (!live_event(e)) return no_such_event("cudaEventSynchronize of");
  EventImpl* E = ev(e);
  if (cudaError_t u = check_event_wait(E, "cudaEventSynchronize", ""); u != cudaSuccess) return u;
  E->wait(last_record(E));
  return sticky_or(ok());
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (!live_event(start) || !live_event(end))
    return fail(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime of an event that does not exist");
  EventImpl *a = ev(start), *b = ev(end);
  if ((a->flags & cudaEventDisableTiming) || (b->flags & cudaEventDisableTiming))
    return fail(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime on an event created with cudaEventDisableTiming");
  std::lock_guard<std::mutex> la(a->mu);
  std::lock_guard<std::mutex> lb(b->mu);
  if (a->recorded == 0 || b->recorded == 0)
    return fail(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime on an event never recorded");
  if (a->done < a->recorded || b->done < b->recorded) return cudaErrorNotReady;
  *ms = std::chrono::duration<float, std::milli>(b->when - a->when).count();
  return ok();
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t e, unsigned flags) {
  if (!live_event(e)) return no_such_event("cudaStreamWaitEvent on");
  EventImpl* E = ev(e);
  std::unique_lock<std::mutex> lock(g_mu);
  StreamImpl* s = resolve(stream);
  if (cudaError_t err = legacy_use(s); err != cudaSuccess) return err;
  if (E->captured != nullptr) {
    Capture* c = E->captured;
    if (s->capture == nullptr) {  // fork: the stream joins the capture
      s->capture = c;
      s->tail = E->capture_deps;
      c->streams.insert(s);
      return c->invalidated ? fail(cudaErrorStreamCaptureInvalidated, c->why) : ok();
    }
    if (s->capture != c) {
      invalidate(s->capture, "a wait on an event of another capture");
      invalidate(c, "a wait on an event of this capture from another capture");
      return fail(cudaErrorStreamCaptureMerge, "cudaStreamWaitEvent would merge two separate stream captures");
    }
    for (Node* d : E->capture_deps)  // join
      if (std::find(s->tail.begin(), s->tail.end(), d) == s->tail.end()) s->tail.push_back(d);
    return capture_state_error(s);
  }
  if (s->capture != nullptr) {
    if (cudaError_t err = capture_state_error(s); err != cudaSuccess) return err;
    if (!(flags & cudaEventWaitExternal)) {
      if (E->capture_id != 0) {
        invalidate(s->capture, "a wait on an event recorded in an earlier capture");
        return fail(cudaErrorStreamCaptureIsolation,
                    "cudaStreamWaitEvent on an event recorded in an earlier, ended capture");
      }
      invalidate(s->capture, "a wait on an event recorded outside the capture");
      return fail(
          cudaErrorStreamCaptureIsolation,
          "cudaStreamWaitEvent from a capturing stream on an event recorded outside the capture (would make the "
          "graph depend on work outside it; use cudaEventWaitExternal for that)");
    }
    auto n = std::make_unique<Node>();
    n->type = cudaGraphNodeTypeWaitEvent;
    n->event = hold(E);
    add_node(s, std::move(n));
    return ok();
  }
  if (E->capture_id != 0)
    return fail(cudaErrorStreamCaptureIsolation,
                "cudaStreamWaitEvent on an event last recorded inside an ended capture");
  uint64_t gen;
  {
    std::lock_guard<std::mutex> el(E->mu);
    gen = E->recorded;
  }
  std::shared_ptr<EventImpl> Eh = hold(E);
  lock.unlock();
  if (gen > 0) s->push([Eh, gen] { Eh->wait(gen); });
  return ok();
}

cudaError_t cudaMalloc(void** p, size_t bytes) {
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (cudaError_t e = unsafe_call("cudaMalloc"); e != cudaSuccess) return e;
  }
  if (cudaError_t e = device_malloc(t_device, bytes, p); e != cudaSuccess)
    return fail(e, "out of memory: cudaMalloc of " + std::to_string(bytes) + " bytes on the simulated cuda:" +
                       std::to_string(t_device) + " (EMBER_SIM_MEMORY sets how much it has)");
  return ok();
}

cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* user_data) {
  if (fn == nullptr) return fail(cudaErrorInvalidValue, "cudaLaunchHostFunc: the function is null");
  return ember::sim::enqueue_host_op(stream, [fn, user_data] { fn(user_data); });
}

cudaError_t cudaFree(void* p) {
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (cudaError_t e = unsafe_call("cudaFree"); e != cudaSuccess) return e;
  }
  if (p == nullptr) return ok();
  // cudaFree waits for the device to finish what it is doing with the memory
  if (const Allocation* al = find_allocation(reinterpret_cast<uintptr_t>(p));
      al != nullptr && al->kind == MemKind::device)
    drain_device(al->device);
  if (device_free(p) != cudaSuccess)
    return fail(cudaErrorInvalidValue,
                "cudaFree of " + range_problem(p, 0) + " (not the start of a device allocation)");
  return ok();
}

cudaError_t cudaHostAlloc(void** p, size_t bytes, unsigned flags) {
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (cudaError_t e = unsafe_call("cudaHostAlloc"); e != cudaSuccess) return e;
  }
  static_cast<void>(flags);  // with unified addressing every pinned allocation is mapped and portable
  if (host_alloc(bytes, p) != cudaSuccess) return fail(cudaErrorMemoryAllocation);
  return ok();
}
cudaError_t cudaMallocHost(void** p, size_t bytes) { return cudaHostAlloc(p, bytes, cudaHostAllocDefault); }

cudaError_t cudaFreeHost(void* p) {
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (cudaError_t e = unsafe_call("cudaFreeHost"); e != cudaSuccess) return e;
  }
  if (p == nullptr) return ok();
  drain_all();
  if (host_free(p) != cudaSuccess)
    return fail(cudaErrorInvalidValue, "cudaFreeHost of a pointer cudaHostAlloc did not return");
  return ok();
}

cudaError_t cudaHostGetDevicePointer(void** dev, void* host, unsigned) {
  if (!in_pinned_region(reinterpret_cast<uintptr_t>(host)) ||
      find_allocation(reinterpret_cast<uintptr_t>(host)) == nullptr)
    return fail(cudaErrorInvalidValue, "cudaHostGetDevicePointer of memory cudaHostAlloc did not return");
  *dev = host;  // unified addressing: the same address on both sides
  return ok();
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream) {
  if (bytes == 0) return ok();
  int ddev = 0, sdev = 0;
  bool dvalid = true, svalid = true;
  const PtrKind dk = classify(dst, bytes, &ddev, &dvalid), sk = classify(src, bytes, &sdev, &svalid);
  if (!dvalid) return fail(cudaErrorInvalidValue, "cudaMemcpyAsync destination " + range_problem(dst, bytes));
  if (!svalid) return fail(cudaErrorInvalidValue, "cudaMemcpyAsync source " + range_problem(src, bytes));
  const bool dst_dev = dk == PtrKind::device, src_dev = sk == PtrKind::device;
  auto kind_error = [&](const char* what) {
    return fail(cudaErrorInvalidValue, std::string("cudaMemcpyAsync with kind ") + what + " but the destination is " +
                                           (dst_dev ? "device" : "host") + " memory and the source " +
                                           (src_dev ? "device" : "host") + " memory");
  };
  switch (kind) {
    case cudaMemcpyHostToDevice:
      if (!dst_dev || src_dev) return kind_error("cudaMemcpyHostToDevice");
      break;
    case cudaMemcpyDeviceToHost:
      if (dst_dev || !src_dev) return kind_error("cudaMemcpyDeviceToHost");
      break;
    case cudaMemcpyDeviceToDevice:
      if (!dst_dev || !src_dev) return kind_error("cudaMemcpyDeviceToDevice");
      break;
    case cudaMemcpyHostToHost:
      if (dst_dev || src_dev) return kind_error("cudaMemcpyHostToHost");
      break;
    default: break;
  }
  std::unique_lock<std::mutex> lock(g_mu);
  StreamImpl* s = resolve(stream);
  const bool capturing = s->capture != nullptr;
  if (capturing && (dk == PtrKind::pageable || sk == PtrKind::pageable)) {
    invalidate(s->capture, "a copy to or from pageable host memory");
    return fail(cudaErrorStreamCaptureUnsupported,
                "cudaMemcpyAsync between pageable host memory and the device during stream capture (graphs copy "
                "from pinned memory only)");
  }
  if (!capturing && sk == PtrKind::pageable && dst_dev) {
    // staged now: the caller may reuse its buffer as soon as we return
    auto staged = std::make_shared<std::vector<unsigned char>>(static_cast<const unsigned char*>(src),
                                                               static_cast<const unsigned char*>(src) + bytes);
    return submit(lock, s, cudaGraphNodeTypeMemcpy, [dst, staged] { raw_copy(dst, staged->data(), staged->size()); });
  }
  if (!capturing && dk == PtrKind::pageable && src_dev) {
    // to pageable memory: returns when the copy is done
    lock.unlock();
    if (cudaError_t e = sticky_or(cudaSuccess); e != cudaSuccess) return e;
    s->push([dst, src, bytes] { raw_copy(dst, src, bytes); });
    s->wait_for(s->mark());
    return sticky_or(ok());
  }
  return submit(lock, s, cudaGraphNodeTypeMemcpy, [dst, src, bytes] { raw_copy(dst, src, bytes); });
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (cudaError_t e = unsafe_call("cudaMemcpy (synchronous)"); e != cudaSuccess) return e;
  }
  if (cudaError_t e = cudaMemcpyAsync(dst, src, bytes, kind, nullptr); e != cudaSuccess) return e;
  return cudaStreamSynchronize(nullptr);
}

cudaError_t cudaMemcpyPeerAsync(void* dst, int dst_device, const void* src, int src_device, size_t bytes,
                                cudaStream_t stream) {
  if (bad_device(dst_device) || bad_device(src_device)) return fail(cudaErrorInvalidDevice);
  return cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream);
}

cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return ok();
  int dev = 0;
  bool valid = true;
  if (classify(p, bytes, &dev, &valid) != PtrKind::device || !valid)
    return fail(cudaErrorInvalidValue, "cudaMemsetAsync of " + range_problem(p, bytes) + " (not device memory)");
  std::unique_lock<std::mutex> lock(g_mu);
  StreamImpl* s = resolve(stream);
  return submit(lock, s, cudaGraphNodeTypeMemset,
                [p, value, bytes] { raw_fill(p, static_cast<unsigned char>(value), bytes); });
}

cudaError_t cudaMemset(void* p, int value, size_t bytes) {
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (cudaError_t e = unsafe_call("cudaMemset (synchronous)"); e != cudaSuccess) return e;
  }
  if (cudaError_t e = cudaMemsetAsync(p, value, bytes, nullptr); e != cudaSuccess) return e;
  return cudaStreamSynchronize(nullptr);
}

cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize) return ok();  // carve-out hints: nothing to model
  if (value < 0 || static_cast<size_t>(value) > kMaxSharedPerBlockOptin)
    return fail(cudaErrorInvalidValue, "cudaFuncSetAttribute(MaxDynamicSharedMemorySize, " + std::to_string(value) +
                                           ") is over the sm_90 opt-in maximum of " +
                                           std::to_string(kMaxSharedPerBlockOptin) + " bytes");
  std::lock_guard<std::mutex> lock(g_mu);
  auto st = g_static_smem.find(func);
  const size_t static_bytes = st == g_static_smem.end() ? 0 : st->second;
  if (static_cast<size_t>(value) + static_bytes > kMaxSharedPerBlockOptin)
    return fail(cudaErrorInvalidValue, "cudaFuncSetAttribute(MaxDynamicSharedMemorySize, " + std::to_string(value) +
                                           "): with the kernel's " + std::to_string(static_bytes) +
                                           " bytes of static shared memory that is over the sm_90 maximum of " +
                                           std::to_string(kMaxSharedPerBlockOptin) + " bytes");
  g_smem_attr[func] = value;
  return ok();
}

cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, size_t* n) {
  if (graph == nullptr) return fail(cudaErrorInvalidValue);
  auto& g = **reinterpret_cast<std::shared_ptr<GraphImpl>*>(graph);
  std::vector<Node*> visible;
  for (auto& node : g.nodes)
    if (!node->internal) visible.push_back(node.get());
  if (nodes == nullptr) {
    *n = visible.size();
    return ok();
  }
  const size_t k = std::min(*n, visible.size());
  for (size_t i = 0; i < k; ++i) nodes[i] = reinterpret_cast<cudaGraphNode_t>(visible[i]);
  *n = k;
  return ok();
}

cudaError_t cudaGraphNodeGetType(cudaGraphNode_t node, cudaGraphNodeType* type) {
  if (node == nullptr) return fail(cudaErrorInvalidValue);
  *type = reinterpret_cast<Node*>(node)->type;
  return ok();
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long) {
  if (graph == nullptr) return fail(cudaErrorInvalidValue);
  auto* e = new ExecImpl();
  e->graph = *reinterpret_cast<std::shared_ptr<GraphImpl>*>(graph);
  e->device = t_device;
  *exec = reinterpret_cast<cudaGraphExec_t>(e);
  return ok();
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  if (exec == nullptr) return fail(cudaErrorInvalidValue);
  auto* e = reinterpret_cast<ExecImpl*>(exec);
  std::unique_lock<std::mutex> lock(g_mu);
  StreamImpl* s = resolve(stream);
  if (s->capture != nullptr)
    return fail(cudaErrorStreamCaptureUnsupported, "cudaGraphLaunch into a capturing stream is not simulated");
  if (cudaError_t err = legacy_use(s); err != cudaSuccess) return err;
  // external event records in the graph count as records made now
  std::vector<std::pair<std::shared_ptr<EventImpl>, uint64_t>> records;
  for (auto& n : e->graph->nodes)
    if (n->type == cudaGraphNodeTypeEventRecord) {
      std::lock_guard<std::mutex> el(n->event->mu);
      n->event->captured = nullptr;
      n->event->capture_id = 0;
      records.emplace_back(n->event, ++n->event->recorded);
    }
  std::vector<std::pair<std::shared_ptr<EventImpl>, uint64_t>> waits;
  for (auto& n : e->graph->nodes)
    if (n->type == cudaGraphNodeTypeWaitEvent) {
      std::lock_guard<std::mutex> el(n->event->mu);
      waits.emplace_back(n->event, n->event->recorded);
    }
  lock.unlock();
  std::shared_ptr<GraphImpl> g = e->graph;
  s->push([g, records, waits] {
    size_t r = 0, w = 0;
    for (auto& n : g->nodes) {
      switch (n->type) {
        case cudaGraphNodeTypeKernel: {
          // every replay is a fresh launch of the same kernel with the same arguments
          Launch& L = *n->launch;
          L.aborted.store(false);
          run_launch(L);
          break;
        }
        case cudaGraphNodeTypeEventRecord: {
          auto [E, gen] = records[r++];
          E->complete(gen);
          break;
        }
        case cudaGraphNodeTypeWaitEvent: {
          auto [E, gen] = waits[w++];
          E->wait(gen);
          break;
        }
        default:
          if (sticky_error() == cudaSuccess && n->run) n->run();
          break;
      }
    }
  });
  return ok();
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  delete reinterpret_cast<std::shared_ptr<GraphImpl>*>(graph);
  return ok();
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  // Replays already queued keep the graph alive through their shared_ptr.
  delete reinterpret_cast<ExecImpl*>(exec);
  return ok();
}

cudaError_t cudaGetLastError(void) {
  const cudaError_t s = sticky_error();
  if (s != cudaSuccess) return s;
  const cudaError_t e = t_last_error;
  t_last_error = cudaSuccess;
  return e;
}

cudaError_t cudaPeekAtLastError(void) {
  const cudaError_t s = sticky_error();
  return s != cudaSuccess ? s : t_last_error;
}

cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attr, const void* ptr) {
  std::memset(attr, 0, sizeof *attr);
  const auto a = reinterpret_cast<uintptr_t>(ptr);
  if (const Allocation* al = find_allocation(a)) {
    attr->type = al->kind == MemKind::device ? cudaMemoryTypeDevice : cudaMemoryTypeHost;
    attr->device = al->kind == MemKind::device ? al->device : 0;
    attr->devicePointer = const_cast<void*>(ptr);
    attr->hostPointer = al->kind == MemKind::pinned ? const_cast<void*>(ptr) : nullptr;
  } else {
    attr->type = cudaMemoryTypeUnregistered;
  }
  return ok();
}

cudaError_t cudaDriverGetVersion(int* v) {
  *v = 13000;
  return ok();
}
cudaError_t cudaRuntimeGetVersion(int* v) {
  *v = 13000;
  return ok();
}

const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
#define EMBER_SIM_ERR(x) \
  case x: return #x;
    EMBER_SIM_ERR(cudaSuccess)
    EMBER_SIM_ERR(cudaErrorInvalidValue)
    EMBER_SIM_ERR(cudaErrorMemoryAllocation)
    EMBER_SIM_ERR(cudaErrorInvalidConfiguration)
    EMBER_SIM_ERR(cudaErrorInvalidDevice)
    EMBER_SIM_ERR(cudaErrorNoDevice)
    EMBER_SIM_ERR(cudaErrorInvalidResourceHandle)
    EMBER_SIM_ERR(cudaErrorIllegalState)
    EMBER_SIM_ERR(cudaErrorNotReady)
    EMBER_SIM_ERR(cudaErrorIllegalAddress)
    EMBER_SIM_ERR(cudaErrorLaunchOutOfResources)
    EMBER_SIM_ERR(cudaErrorMisalignedAddress)
    EMBER_SIM_ERR(cudaErrorLaunchFailure)
    EMBER_SIM_ERR(cudaErrorStreamCaptureUnsupported)
    EMBER_SIM_ERR(cudaErrorStreamCaptureInvalidated)
    EMBER_SIM_ERR(cudaErrorStreamCaptureMerge)
    EMBER_SIM_ERR(cudaErrorStreamCaptureUnmatched)
    EMBER_SIM_ERR(cudaErrorStreamCaptureUnjoined)
    EMBER_SIM_ERR(cudaErrorStreamCaptureIsolation)
    EMBER_SIM_ERR(cudaErrorStreamCaptureImplicit)
    EMBER_SIM_ERR(cudaErrorCapturedEvent)
    EMBER_SIM_ERR(cudaErrorStreamCaptureWrongThread)
#undef EMBER_SIM_ERR
    default: return "cudaErrorUnknown";
  }
}

const char* cudaGetErrorString(cudaError_t e) {
  // the sticky fault's report, or this thread's detailed reason for the error it was last given
  if (e != cudaSuccess && e == sticky_error()) {
    thread_local std::string msg;
    msg = sticky_message();
    return msg.c_str();
  }
  if (e != cudaSuccess && e == t_detail_code) return t_detail.c_str();
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorIllegalState: return "the operation cannot be performed in the present state";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorLaunchOutOfResources: return "too many resources requested for launch";
    case cudaErrorMisalignedAddress: return "misaligned address";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureMerge: return "operation would result in a merge of separate capture sequences";
    case cudaErrorStreamCaptureUnmatched: return "capture was not ended in the same stream as it began";
    case cudaErrorStreamCaptureUnjoined: return "capturing stream has unjoined work";
    case cudaErrorStreamCaptureIsolation: return "dependency created on uncaptured work in another stream";
    case cudaErrorStreamCaptureImplicit:
      return "operation would make the legacy stream depend on a capturing blocking stream";
    case cudaErrorCapturedEvent: return "operation not permitted on an event last recorded in a capturing stream";
    case cudaErrorStreamCaptureWrongThread:
      return "attempt to terminate a thread-local capture sequence from another thread";
    default: return "unknown error";
  }
}

}  // extern "C"

namespace ember::sim {

cudaError_t enqueue_host_op(cudaStream_t stream, std::function<void()> op) {
  std::unique_lock<std::mutex> lock(g_mu);
  StreamImpl* s = resolve(stream);
  return submit(lock, s, cudaGraphNodeTypeHost, std::move(op));
}

}  // namespace ember::sim
