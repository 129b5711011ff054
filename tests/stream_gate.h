// Holds a stream at a point of its queue until the test opens the gate: a host function queued on
// the stream waits for it, so the work queued after it (and the events recorded after it) cannot
// complete before then. Makes "this stream is still busy" deterministic in a test. Needs the CUDA
// runtime (a GPU or the simulator): a CPU-only build compiles the GPU suite without it, and skips it.
#pragma once

#include <catch2/catch.hpp>
#if EMBER_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

#include <future>

#include "core/cuda/runtime.h"

namespace ember::testing {

class StreamGate {
 public:
  explicit StreamGate(const cuda::Stream& s) : opened_(gate_.get_future().share()) {
#if EMBER_WITH_CUDA
    REQUIRE(cudaLaunchHostFunc(static_cast<cudaStream_t>(s.handle()), &StreamGate::wait, &opened_) == cudaSuccess);
#else
    (void)s;
    FAIL("StreamGate needs the CUDA runtime; this build has none");
#endif
  }
  ~StreamGate() { open(); }
  StreamGate(const StreamGate&) = delete;
  StreamGate& operator=(const StreamGate&) = delete;
  void open() {
    if (!open_) gate_.set_value();
    open_ = true;
  }

 private:
  static void wait(void* f) { static_cast<std::shared_future<void>*>(f)->wait(); }
  std::promise<void> gate_;
  std::shared_future<void> opened_;
  bool open_ = false;
};

}  // namespace ember::testing
