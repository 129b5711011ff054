// CUDA graphs: capture the work a piece of code queues on a stream once, replay it with one launch.
//
// Note [graph capture]: everything captured must be capture-safe: no host synchronisation, no
// cudaMalloc/cudaFree (the caching allocator serves from the graph's private pool, see
// Note [caching allocator]), no host-side values that change between replays baked into kernel
// arguments (read them from device memory instead, e.g. the optimizer's hyper-parameter tensor).
// Inputs are fed by copying into the same ("static") device buffers before each replay; outputs are
// read from the buffers the capture produced. Tensors allocated during capture stay valid while
// the Graph lives: their memory belongs to its pool.
#pragma once

#include <memory>

#include "core/cuda/runtime.h"

namespace ember::cuda {

// How a capture treats potentially unsafe calls (cudaMalloc, cudaFree, event queries, syncs) made
// while it is under way (cudaStreamCaptureMode): `this_thread` refuses them on the capturing thread
// only, `global` on every thread that is not in relaxed mode (PyTorch's default), `relaxed` nowhere.
enum class CaptureMode { this_thread, global, relaxed };

class Graph {
 public:
  Graph();
  ~Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  // Starts capturing the work queued on `stream` by this thread (make it current with a
  // StreamGuard). Allocations until capture_end come from this graph's private pool.
  void capture_begin(Stream stream, CaptureMode mode = CaptureMode::this_thread);
  // Ends the capture and instantiates the graph. Throws (with CUDA's reason) if the capture was
  // invalidated, e.g. by a host synchronisation inside it; the graph is then empty.
  void capture_end();
  // Launches the captured work on the capture stream. Random ops in the graph draw fresh numbers
  // on every replay (Note [Philox in CUDA graphs] in core/rng.h).
  void replay();
  bool ready() const { return exec_ != nullptr; }
  // Number of nodes (kernels, copies, ...) in the captured graph.
  size_t num_nodes() const;
  Stream stream() const { return stream_; }

 private:
  void* graph_ = nullptr;  // cudaGraph_t
  void* exec_ = nullptr;   // cudaGraphExec_t
  Stream stream_;
  std::unique_ptr<MemPool> pool_;
  std::unique_ptr<PoolScope> scope_;
  bool capturing_ = false;
  void* rng_state_ = nullptr;  // device {seed, offset} the graph's random kernels read
  uint64_t rng_counters_ = 0;  // Philox counters one replay uses
};

}  // namespace ember::cuda
