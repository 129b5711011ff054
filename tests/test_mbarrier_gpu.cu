// The mbarrier and bulk-copy wrappers of kernels/common/mbarrier.cuh against the PTX ISA: a wait for
// the parity of a phase that has not run yet returns at once, a phase completes when its arrivals
// and its transaction bytes are in, and a two-stage ring fed by cp.async.bulk (one producer thread,
// a warp of consumers, "full" and "empty" barriers whose parities flip on every pass) delivers every
// chunk in order. The expected values come from the documented semantics, so the same test checks
// the simulator (-DEMBER_CUDA_SIM=ON) and, on a GPU, the hardware. Only waits that complete are
// made: on a GPU a wait that never completes hangs (the simulator's reports of those are in
// tests/sim/test_sim_checks.cu).
#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include "core/cuda/kernel.cuh"
#include "core/tensor.h"
#include "kernels/common/current_stream.cuh"
#include "kernels/common/mbarrier.cuh"
#include "kernels/functional.h"

using namespace ember;

namespace {

// One thread walks a barrier through its phases; out[i] records what each step saw.
__global__ void parity_kernel(uint32_t* out) {
  EMBER_SHARED(uint64_t, bar);
  EMBER_SHARED(uint64_t, two);
  if (threadIdx.x != 0) return;
  ptx::mbarrier_init(&bar, 1);
  ptx::mbarrier_init(&two, 2);
  ptx::fence_mbarrier_init();
  out[0] = ptx::mbarrier_try_wait_parity(&bar, 1) ? 1u : 0u;  // phase 0 runs: "parity 1" is the one before
  ptx::mbarrier_arrive(&bar);                                 // its only arrival: phase 0 completes
  out[1] = ptx::mbarrier_try_wait_parity(&bar, 0) ? 1u : 0u;
  ptx::mbarrier_arrive(&bar);  // phase 1 completes
  out[2] = ptx::mbarrier_try_wait_parity(&bar, 1) ? 1u : 0u;
  out[3] = ptx::mbarrier_try_wait_parity(&bar, 3) ? 1u : 0u;  // only the parity (the low bit) counts
  // two arrivals and 64 transaction bytes: the phase needs all three
  ptx::mbarrier_expect_tx(&two, 48);
  ptx::mbarrier_arrive_expect_tx(&two, 16);
  ptx::mbarrier_arrive(&two);  // both arrived; 64 bytes still to come
  out[4] = ptx::mbarrier_try_wait_parity(&two, 1) ? 1u : 0u;
  ptx::mbarrier_inval(&bar);
  ptx::mbarrier_init(&bar, 1);  // a barrier can be made again after mbarrier.inval
  ptx::mbarrier_arrive(&bar);
  out[5] = ptx::mbarrier_try_wait_parity(&bar, 0) ? 1u : 0u;
}

constexpr int kStages = 2;
constexpr int kChunk = 32;  // float4 per chunk: one per consumer lane (512 bytes)

// A ring of kStages shared-memory stages: thread 0 brings chunk c into stage c % kStages with a
// bulk copy once the consumers have released the stage, the 32 threads of warp 1 wait for it, each
// sums its float4 into out, and they release the stage.
__global__ void ring_kernel(const float4* src, float* out, int chunks) {
  EMBER_SHARED(float4[kStages][kChunk], stage);
  EMBER_SHARED(uint64_t[kStages], full);
  EMBER_SHARED(uint64_t[kStages], empty);
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      ptx::mbarrier_init(&full[s], 1);
      ptx::mbarrier_init(&empty[s], kChunk);
    }
    ptx::fence_mbarrier_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int c = 0; c < chunks; ++c) {
      const int s = c % kStages;
      const uint32_t pass = static_cast<uint32_t>(c / kStages);
      ptx::mbarrier_wait_parity(&empty[s], (pass & 1u) ^ 1u);  // the first pass finds it free
      ptx::mbarrier_arrive_expect_tx(&full[s], sizeof(float4) * kChunk);
      ptx::bulk_copy_g2s(&stage[s][0], src + static_cast<int64_t>(c) * kChunk, sizeof(float4) * kChunk, &full[s]);
    }
  } else if (threadIdx.x >= 32) {
    const int lane = static_cast<int>(threadIdx.x) - 32;
    for (int c = 0; c < chunks; ++c) {
      const int s = c % kStages;
      const uint32_t pass = static_cast<uint32_t>(c / kStages);
      ptx::mbarrier_wait_parity(&full[s], pass & 1u);
      const float4 v = stage[s][lane];
      out[c * kChunk + lane] = v.x + v.y + v.z + v.w;
      ptx::mbarrier_arrive(&empty[s]);
    }
  }
}

std::vector<uint32_t> words_of(const Tensor& t) {
  Tensor c = t.to(kCPU);
  const auto* p = static_cast<const uint32_t*>(c.data_ptr());
  return std::vector<uint32_t>(p, p + c.numel());
}

}  // namespace

TEST_CASE("mbarrier: phases complete on arrivals and transaction bytes, waits name them by parity",
          "[gpu][ptx][mbarrier]") {
  Tensor out = zeros({6}, TensorOptions(DType::i32).device(Device(DeviceType::cuda, 0)));
  cuda::launch(parity_kernel, 1, 32, 0, cuda::stream_for(out), static_cast<uint32_t*>(out.data_ptr()));
  const std::vector<uint32_t> r = words_of(out);
  CHECK(r[0] == 1);  // a new barrier: the phase before phase 0 counts as complete
  CHECK(r[1] == 1);
  CHECK(r[2] == 1);
  CHECK(r[3] == 1);
  CHECK(r[4] == 1);  // phase 0 of `two` has not completed: a wait for parity 1 is a wait for the earlier one
  CHECK(r[5] == 1);
}

TEST_CASE("mbarrier: a two-stage ring of bulk copies delivers every chunk in order", "[gpu][ptx][mbarrier]") {
  for (int chunks : {1, 2, 7}) {
    INFO(chunks << " chunks");
    std::vector<float> host(static_cast<size_t>(chunks) * kChunk * 4);
    for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>(i % 1000) * 0.25f;
    Tensor src =
        from_blob(host.data(), {static_cast<int64_t>(host.size())}, DType::f32).to(Device(DeviceType::cuda, 0));
    Tensor out = zeros({static_cast<int64_t>(chunks) * kChunk}, TensorOptions(DType::f32).device(src.device()));
    cuda::launch(ring_kernel, 1, 64, 0, cuda::stream_for(out), static_cast<const float4*>(src.data_ptr()),
                 static_cast<float*>(out.data_ptr()), chunks);
    const std::vector<float> got = out.to(kCPU).to_vector<float>();
    for (int i = 0; i < chunks * kChunk; ++i) {
      const float* v = &host[static_cast<size_t>(i) * 4];
      INFO("element " << i);
      CHECK(got[static_cast<size_t>(i)] == v[0] + v[1] + v[2] + v[3]);
    }
  }
}
