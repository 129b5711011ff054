// Counting the kernels a piece of host code launches, for the CUDA suites' launch-count checks:
// the calls are captured into a CUDA graph (never run) and its kernel nodes counted.
#pragma once

#include <catch2/catch.hpp>
#include <cuda_runtime.h>

#include <functional>
#include <vector>

#include "core/cuda/runtime.h"

namespace ember::test {

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
    size_t n = 0;
    REQUIRE(cudaGraphGetNodes(graph, nullptr, &n) == cudaSuccess);
    std::vector<cudaGraphNode_t> nodes(n);
    if (n > 0) REQUIRE(cudaGraphGetNodes(graph, nodes.data(), &n) == cudaSuccess);
    for (cudaGraphNode_t node : nodes) {
      cudaGraphNodeType type;
      REQUIRE(cudaGraphNodeGetType(node, &type) == cudaSuccess);
      if (type == cudaGraphNodeTypeKernel) ++kernels;
    }
    REQUIRE(cudaGraphDestroy(graph) == cudaSuccess);
  }
  return kernels;
}

}  // namespace ember::test
