// Catch2's runner for the GPU suite: without a CUDA device it says so and exits 77, which ctest
// reports as "Skipped" (SKIP_RETURN_CODE), never as a pass.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>

#include "core/cuda/runtime.h"

int main(int argc, char** argv) {
  if (ember::cuda::device_count() == 0) {
    std::printf("SKIPPED: the GPU tests need a CUDA device (%s)\n", ember::cuda::unavailable_reason().c_str());
    return 77;
  }
  auto p = ember::cuda::properties(0);
  std::printf("GPU tests on %s (sm_%d%d, %d SMs)\n", p.name.c_str(), p.major, p.minor, p.sm_count);
  return Catch::Session().run(argc, argv);
}
