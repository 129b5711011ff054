#include "core/cuda/graph.h"

#include <cuda_runtime_api.h>

#include "core/cuda/check.h"
#include "core/profiler.h"
#include "core/rng.h"
#include "core/storage.h"

namespace ember::cuda {

Graph::Graph() = default;

Graph::~Graph() {
  if (capturing_) {
    cudaGraph_t g = nullptr;
    cudaStreamEndCapture(static_cast<cudaStream_t>(stream_.handle()), &g);
    if (g != nullptr) cudaGraphDestroy(g);
    cudaGetLastError();
    try {  // (end_graph_capture checks that this thread began one: nothing thrown leaves a destructor)
      default_generator().end_graph_capture();
    } catch (...) {
    }
    try {
      allocator_capture_end(stream_.device());
    } catch (...) {  // a destructor reports nothing; the blocks concerned stay unused
    }
  }
  if (rng_state_ != nullptr) {
    cudaFree(rng_state_);
    cudaGetLastError();
  }
  if (exec_ != nullptr) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
  if (graph_ != nullptr) cudaGraphDestroy(static_cast<cudaGraph_t>(graph_));
  scope_.reset();
  // The pool's blocks are returned only after the graph that used them is gone.
  pool_.reset();
}

void Graph::capture_begin(Stream stream, CaptureMode mode) {
  EMBER_CHECK(!capturing_, "Graph::capture_begin: a capture is already in progress");
  EMBER_CHECK(exec_ == nullptr, "Graph::capture_begin: this graph was already captured; use a new Graph");
  EMBER_CHECK(stream.valid(), "Graph::capture_begin: invalid stream");
  stream_ = stream;
  if (rng_state_ == nullptr) EMBER_CUDA_CHECK(cudaMalloc(&rng_state_, 2 * sizeof(uint64_t)));
  pool_ = std::make_unique<MemPool>(stream.device());
  scope_ = std::make_unique<PoolScope>(*pool_);
  allocator_capture_begin(stream.device());
  const cudaStreamCaptureMode cuda_mode = mode == CaptureMode::global    ? cudaStreamCaptureModeGlobal
                                          : mode == CaptureMode::relaxed ? cudaStreamCaptureModeRelaxed
                                                                         : cudaStreamCaptureModeThreadLocal;
  const cudaError_t begun = cudaStreamBeginCapture(static_cast<cudaStream_t>(stream.handle()), cuda_mode);
  if (begun != cudaSuccess) {
    scope_.reset();
    allocator_capture_end(stream.device());
    EMBER_CUDA_CHECK(begun);
  }
  capturing_ = true;
  default_generator().begin_graph_capture(static_cast<const uint64_t*>(rng_state_));
}

void Graph::capture_end() {
  EMBER_CHECK(capturing_, "Graph::capture_end without capture_begin");
  capturing_ = false;
  rng_counters_ = default_generator().end_graph_capture();
  scope_.reset();
  cudaGraph_t g = nullptr;
  cudaError_t err = cudaStreamEndCapture(static_cast<cudaStream_t>(stream_.handle()), &g);
  try {
    allocator_capture_end(stream_.device());
  } catch (...) {
    if (g != nullptr) cudaGraphDestroy(g);
    cudaGetLastError();
    throw;
  }
  if (err != cudaSuccess || g == nullptr) {
    cudaGetLastError();
    if (g != nullptr) cudaGraphDestroy(g);
    throw CudaError(std::string("CUDA graph capture failed: ") + cudaGetErrorString(err) +
                        " (something in the captured region is not capture-safe: a host sync, a cudaMalloc, "
                        "or work on another stream without an event)",
                    static_cast<int>(err));
  }
  graph_ = g;
  cudaGraphExec_t exec = nullptr;
  EMBER_CUDA_CHECK(cudaGraphInstantiate(&exec, g, 0));
  exec_ = exec;
}

void Graph::replay() {
  EMBER_CHECK(exec_ != nullptr, "Graph::replay: nothing was captured");
  const auto stream = static_cast<cudaStream_t>(stream_.handle());
  // the profiler's one range for the whole replay (Note [profiling captured work]), timed on the
  // replay's stream
  StreamGuard on_stream(stream_);
  profiler::Range range("graph replay", "cuda graph", Device(DeviceType::cuda, stream_.device()));
  if (rng_counters_ > 0) {
    // This replay's Philox counters, reserved now from the host generator and copied in stream
    // order before the graph runs, from pinned memory (a pageable source may make the driver
    // synchronise); the pinned block is reused only after the copy has read it (Note [pinned reuse]).
    const Generator::Reservation r = default_generator().reserve(rng_counters_);
    Allocator* pinned = pinned_allocator();
    auto* host = static_cast<uint64_t*>(pinned->allocate(2 * sizeof(uint64_t)));
    host[0] = r.seed;
    host[1] = r.base;
    EMBER_CUDA_CHECK(cudaMemcpyAsync(rng_state_, host, 2 * sizeof(uint64_t), cudaMemcpyHostToDevice, stream));
    record_pinned_use(host, stream_);
    pinned->deallocate(host);
  }
  EMBER_CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_), stream));
}

size_t Graph::num_nodes() const {
  if (graph_ == nullptr) return 0;
  size_t n = 0;
  EMBER_CUDA_CHECK(cudaGraphGetNodes(static_cast<cudaGraph_t>(graph_), nullptr, &n));
  return n;
}

}  // namespace ember::cuda
