// The allocators when an event of a freed block's uses fails with a sticky error: they say so,
// naming the error, and never hand that block out again (before, the failure counted as "done").
// Simulator build only (-DEMBER_CUDA_SIM=ON): a sticky error ends a GPU's context, and only the
// simulator can clear it for the test to go on.
#include <catch2/catch.hpp>

#include <cuda_runtime_api.h>

#include <string>

#include "core/cuda/kernel.cuh"
#include "core/cuda/runtime.h"
#include "core/tensor.h"
#include "kernels/functional.h"
#include "sim/sim.h"
#include "tests/stream_gate.h"

using namespace ember;
using Catch::Matchers::Contains;

namespace {

__global__ void read_past_end(const float* in, float* out) {
  out[threadIdx.x] = in[threadIdx.x + 1];  // the last thread reads one element too far
}

}  // namespace

TEST_CASE("sim: an allocator event that fails is answered, its block is not reused", "[gpu][sim][allocator]") {
  cuda::Stream side = cuda::Stream::create(0);
  const int64_t n = 1 << 16;
  void* device_block = nullptr;
  void* pinned_block = nullptr;
  testing::StreamGate gate(side);  // the blocks' events stay pending until the fault below
  {
    Tensor used_elsewhere = empty({n}, kCUDA);
    device_block = used_elsewhere.data_ptr();
    cuda::record_stream(device_block, side);
    Tensor pinned = empty({n}).pin_memory();
    pinned_block = pinned.data_ptr();
    cuda::record_pinned_use(pinned_block, side);
  }
  {  // a sticky fault before the blocks' events are queried
    Tensor in = zeros({32}, kCUDA), out = zeros({32}, kCUDA);
    cuda::launch(read_past_end, 1, 32, 0, static_cast<cudaStream_t>(cuda::current_stream(0).handle()),
                 static_cast<const float*>(in.data_ptr()), static_cast<float*>(out.data_ptr()));
    CHECK_THROWS(cuda::current_stream(0).synchronize());
  }
  gate.open();
  // the allocators say what they could not tell, with the fault's name, instead of handing the
  // block out (before: reused at once, the error left for whichever call came next)
  CHECK_THROWS_WITH(empty({n}, kCUDA), Contains("another stream still uses a freed block cannot be known") &&
                                           Contains("cudaErrorIllegalAddress"));
  CHECK_THROWS_WITH(empty({n}).pin_memory(), Contains("a copy still uses a freed pinned block cannot be known") &&
                                                 Contains("cudaErrorIllegalAddress"));
  sim::clear_fault();
  Tensor a = empty({n}, kCUDA);
  CHECK(a.data_ptr() != device_block);
  Tensor p = empty({n}).pin_memory();
  CHECK(p.data_ptr() != pinned_block);
}
