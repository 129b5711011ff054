// Counting the kernels a piece of host code launches, for the CUDA suites' launch-count checks:
// the calls are captured into a CUDA graph and its kernel nodes counted (never run, or run once
// on a stream of its own).
#pragma once

#include <catch2/catch.hpp>
#include <cuda_runtime.h>

#include <functional>
#include <vector>

#include "core/cuda/runtime.h"

namespace ember::test {

// The kernel nodes of a graph.
inline size_t kernel_nodes(cudaGraph_t graph) {
  size_t n = 0;
  REQUIRE(cudaGraphGetNodes(graph, nullptr, &n) == cudaSuccess);
  std::vector<cudaGraphNode_t> nodes(n);
  if (n > 0) REQUIRE(cudaGraphGetNodes(graph, nodes.data(), &n) == cudaSuccess);
  size_t kernels = 0;
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType type;
    REQUIRE(cudaGraphNodeGetType(node, &type) == cudaSuccess);
    if (type == cudaGraphNodeTypeKernel) ++kernels;
  }
  return kernels;
}

// Kernel nodes that f enqueues on the current stream (captured into a graph, never run).
inline size_t kernels_launched_by(const std::function<void()>& f) {
  cudaStream_t s = static_cast<cudaStream_t>(cuda::current_stream(0).handle());
  cuda::MemPool pool(0);
  size_t kernels = 0;
  {
    cuda::PoolScope scope(pool);
    REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
    f();
    cudaGraph_t graph = nullptr;
    REQUIRE(cudaStreamEndCapture(s, &graph) == cudaSuccess);
    kernels = kernel_nodes(graph);
    REQUIRE(cudaGraphDestroy(graph) == cudaSuccess);
  }
  return kernels;
}

// Captures f on a new stream (which has no tickets yet: Note [stream tickets] in
// core/cuda/runtime.h, so kernels that finish within one launch take their two-launch way),
// replays the graph once and returns its kernel nodes.
inline size_t kernels_run_on_a_fresh_stream(const std::function<void()>& f) {
  cuda::Stream fresh = cuda::Stream::create(0);
  cuda::current_stream(0).synchronize();
  cuda::StreamGuard on(fresh);
  cuda::MemPool pool(0);
  cuda::PoolScope scope(pool);
  const auto st = static_cast<cudaStream_t>(fresh.handle());
  REQUIRE(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  f();
  cudaGraph_t graph = nullptr;
  REQUIRE(cudaStreamEndCapture(st, &graph) == cudaSuccess);
  const size_t kernels = kernel_nodes(graph);
  cudaGraphExec_t exec = nullptr;
  REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
  REQUIRE(cudaGraphLaunch(exec, st) == cudaSuccess);
  fresh.synchronize();
  REQUIRE(cudaGraphExecDestroy(exec) == cudaSuccess);
  REQUIRE(cudaGraphDestroy(graph) == cudaSuccess);
  return kernels;
}

}  // namespace ember::test
