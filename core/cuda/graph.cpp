#include "core/cuda/graph.h"

#include <cuda_runtime_api.h>

#include "core/cuda/check.h"

namespace ember::cuda {

Graph::Graph() = default;

Graph::~Graph() {
  if (capturing_) {
    cudaGraph_t g = nullptr;
    cudaStreamEndCapture(static_cast<cudaStream_t>(stream_.handle()), &g);
    if (g != nullptr) cudaGraphDestroy(g);
    cudaGetLastError();
  }
  if (exec_ != nullptr) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
  if (graph_ != nullptr) cudaGraphDestroy(static_cast<cudaGraph_t>(graph_));
  scope_.reset();
  // The pool's blocks are returned only after the graph that used them is gone.
  pool_.reset();
}

void Graph::capture_begin(Stream stream) {
  EMBER_CHECK(!capturing_, "Graph::capture_begin: a capture is already in progress");
  EMBER_CHECK(exec_ == nullptr, "Graph::capture_begin: this graph was already captured; use a new Graph");
  EMBER_CHECK(stream.valid(), "Graph::capture_begin: invalid stream");
  stream_ = stream;
  pool_ = std::make_unique<MemPool>(stream.device());
  scope_ = std::make_unique<PoolScope>(*pool_);
  EMBER_CUDA_CHECK(cudaStreamBeginCapture(static_cast<cudaStream_t>(stream.handle()), cudaStreamCaptureModeThreadLocal));
  capturing_ = true;
}

void Graph::capture_end() {
  EMBER_CHECK(capturing_, "Graph::capture_end without capture_begin");
  capturing_ = false;
  scope_.reset();
  cudaGraph_t g = nullptr;
  cudaError_t err = cudaStreamEndCapture(static_cast<cudaStream_t>(stream_.handle()), &g);
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
  EMBER_CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_), static_cast<cudaStream_t>(stream_.handle())));
}

size_t Graph::num_nodes() const {
  if (graph_ == nullptr) return 0;
  size_t n = 0;
  EMBER_CUDA_CHECK(cudaGraphGetNodes(static_cast<cudaGraph_t>(graph_), nullptr, &n));
  return n;
}

}  // namespace ember::cuda
