// CUDA calls that fail inside a destructor (Note [no abort] in core/error.h): the process goes on,
// the error is not thrown out of the destructor (std::terminate) and not left in the runtime's last
// error for the next launch check to report as its own. Simulator build only
// (-DEMBER_CUDA_SIM=ON): the failures are provoked by breaking CUDA's rules on purpose.
#include <catch2/catch.hpp>

#include <cuda_runtime_api.h>

#include <string>

#include "core/cuda/runtime.h"
#include "core/profiler.h"
#include "core/tensor.h"
#include "kernels/functional.h"
#include "tests/child_run.h"
#include "tests/data_test_util.h"

using namespace ember;
using Catch::Matchers::Contains;

TEST_CASE("sim: an event whose destruction fails leaves no error for the next launch to report",
          "[gpu][sim][no_abort]") {
  Tensor x = ones({64}, TensorOptions().device(kCUDA));
  {
    cuda::Event e;
    e.record(cuda::current_stream(0));
    // destroyed behind the wrapper's back: ~Event's own cudaEventDestroy then fails
    REQUIRE(cudaEventDestroy(static_cast<cudaEvent_t>(e.handle())) == cudaSuccess);
  }
  Tensor y;
  CHECK_NOTHROW(y = add(x, x));  // its launch check reads the last error
  CHECK(sum(y).item<float>() == 128.0f);
}

// The trace profiler times a range with events recorded on the thread's current stream when the
// range opens and closes; profiler::Range closes it in its destructor, during the unwinding of an
// op's error too. Here the closing record fails: the range was opened on the legacy stream, which
// may not be used while a blocking stream captures (cudaErrorStreamCaptureImplicit).
TEST_CASE("sim: (child) a profiler range whose GPU timing fails as it closes", "[.][sim_no_abort_child_profiler]") {
  testing::TempDir dir;
  cudaStream_t blocking = nullptr;
  REQUIRE(cudaStreamCreate(&blocking) == cudaSuccess);  // cudaStreamDefault: a blocking stream
  profiler::TraceProfiler prof;
  prof.start();
  {
    cuda::StreamGuard legacy(cuda::Stream::wrap(cudaStreamLegacy, 0));
    profiler::Range range("add", "cuda", kCUDA);  // its start event: recorded on the legacy stream
    REQUIRE(cudaStreamBeginCapture(blocking, cudaStreamCaptureModeRelaxed) == cudaSuccess);
  }  // its stop event cannot be recorded now
  cudaGraph_t graph = nullptr;
  CHECK(cudaStreamEndCapture(blocking, &graph) != cudaSuccess);  // the failed record invalidated it
  CHECK(graph == nullptr);
  cudaGetLastError();
  prof.stop();
  // the owner learns of it where it asks for the times
  CHECK_THROWS_WITH(prof.write_chrome_trace(dir.file("trace.json")), Contains("cudaErrorStreamCaptureImplicit"));
  // and the device goes on
  Tensor x = ones({64}, TensorOptions().device(kCUDA));
  CHECK(sum(add(x, x)).item<float>() == 128.0f);
}

// In a child: std::terminate would end this whole run (the child's kernel coverage is not recorded:
// it is no test case of the suite's).
TEST_CASE("sim: a profiler range whose GPU timing fails as it closes does not end the process",
          "[gpu][sim][no_abort][profiler]") {
  const testing::ChildResult r = testing::run_self("[sim_no_abort_child_profiler]", {"EMBER_GPU_COVERAGE_DIR="});
  INFO("stdout: " << r.out << "\nstderr: " << r.err);
  CHECK(r.signal == 0);  // SIGABRT: the range's CudaError left its destructor
  CHECK(r.exit_code == 0);
}
