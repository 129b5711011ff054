// The simulator's checks, each provoked by a deliberately broken kernel: launch limits, out-of-
// bounds global and shared memory, host and freed memory, another thread's local memory, shared-
// memory races (between warps and within a warp), barrier and warp-collective divergence, __trap,
// reads of memory nobody wrote, mbarriers and bulk copies misused. Each must be caught with a message naming the
// kernel, the block, the thread and what was wrong; the same kernels with the bug fixed must pass. Simulator build only
// (-DEMBER_CUDA_SIM=ON): on a GPU these kernels would corrupt memory or hang.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "core/cuda/kernel.cuh"
#include "core/cuda/runtime.h"
#include "sim/sim.h"
#include "core/tensor.h"
#include "core/cuda/tensor_map.h"
#include "kernels/common/mbarrier.cuh"
#include "kernels/common/wgmma.cuh"
#include "kernels/common/tma.cuh"
#include "kernels/functional.h"
#include "tests/sim/sim_test_util.h"

using namespace ember;
using namespace ember::sim_test;
using Catch::Matchers::Contains;

namespace {

// ---- the broken kernels (and their fixed twins) ----

__global__ void copy_shifted(const float* in, float* out, int shift) {
  const int i = threadIdx.x;
  out[i] = in[i + shift];  // shift 1: the last thread reads one element past the end
}

__global__ void shared_tile(float* out) {
  EMBER_SHARED(float[32], tile);
  tile[threadIdx.x] = 1.0f;  // 33 threads: thread 32 writes past the end of `tile`
  __syncthreads();
  out[threadIdx.x] = tile[threadIdx.x % 32];
}

__global__ void neighbour_exchange(float* out, bool sync) {
  EMBER_SHARED(float[64], s);
  s[threadIdx.x] = static_cast<float>(threadIdx.x);
  if (sync) __syncthreads();
  out[threadIdx.x] = s[(threadIdx.x + 1) % blockDim.x];
}

__global__ void warp_exchange(float* out, bool sync) {
  EMBER_SHARED(float[32], s);
  s[threadIdx.x] = static_cast<float>(threadIdx.x);
  if (sync) __syncwarp();
  out[threadIdx.x] = s[threadIdx.x ^ 1];
}

__global__ void half_barrier(float* out) {
  if (threadIdx.x < 16) __syncthreads();  // threads 16..31 never get there
  out[threadIdx.x] = 1.0f;
}

__global__ void two_barriers(float* out) {
  if (threadIdx.x < 16) {
    __syncthreads();
  } else {
    __syncthreads();
  }
  out[threadIdx.x] = 1.0f;
}

__global__ void mixed_collectives(float* out) {
  float v = static_cast<float>(threadIdx.x);
  if (threadIdx.x < 16) v = __shfl_xor_sync(0xffffffffu, v, 1);
  else v = static_cast<float>(__ballot_sync(0xffffffffu, 1));
  out[threadIdx.x] = v;
}

__global__ void add_one(const float* in, float* out) { out[threadIdx.x] = in[threadIdx.x] + 1.0f; }

__global__ void peek_other_thread(float* out) {
  EMBER_SHARED(float*, where);
  volatile float mine = 42.0f;
  if (threadIdx.x == 0) where = const_cast<float*>(&mine);
  __syncthreads();
  if (threadIdx.x == 1) out[0] = *where;
  __syncthreads();
}

__global__ void traps(float*) { __trap(); }

__global__ void big_static_shared(float* out) {
  EMBER_SHARED(float[13000], big);  // 52,000 bytes: over the 48 KiB static limit
  big[threadIdx.x] = 0.0f;
  __syncthreads();
  out[threadIdx.x] = big[threadIdx.x];
}

__global__ void reverse_dynamic(float* out, int n) {
  EMBER_DYNAMIC_SHARED(float, d);
  d[threadIdx.x] = static_cast<float>(threadIdx.x);
  __syncthreads();
  out[threadIdx.x] = d[n - 1 - threadIdx.x];
}

__global__ void shared_counter(int* out) {
  EMBER_SHARED(int, count);
  if (threadIdx.x == 0) count = 0;
  __syncthreads();
  atomicAdd(&count, 1);  // atomics never race with each other
  __syncthreads();
  if (threadIdx.x == 0) out[0] = count;
}

__global__ void votes(int* out) {
  const int t = static_cast<int>(threadIdx.x);
  const unsigned b = __ballot_sync(0xffffffffu, t % 3 == 0);
  const int any = __any_sync(0xffffffffu, t == 5);
  const int all = __all_sync(0xffffffffu, t < 64);
  const float down = __shfl_down_sync(0xffffffffu, static_cast<float>(t), 4);
  const int idx = __shfl_sync(0xffffffffu, t, 7, 8);
  const int cnt = __syncthreads_count(t % 2);
  const int orr = __syncthreads_or(t == 63);
  const int andd = __syncthreads_and(t < 63);
  if (t == 0) {
    out[0] = static_cast<int>(b);
    out[1] = any;
    out[2] = all;
    out[5] = cnt;
    out[6] = orr;
    out[7] = andd;
  }
  if (t == 30) out[3] = static_cast<int>(down);  // lane 30: lane 34 is outside the warp -> own value
  if (t == 9) out[4] = idx;                      // width 8: lane 9 reads lane 8 + 7 = 15
}

__global__ void intrinsics(const float* x, float* out) {
  const float v = x[threadIdx.x];
  out[threadIdx.x * 6 + 0] = __expf(v);
  out[threadIdx.x * 6 + 1] = __logf(v);
  out[threadIdx.x * 6 + 2] = __fdividef(1.0f, v);
  out[threadIdx.x * 6 + 3] = rsqrtf(v);
  out[threadIdx.x * 6 + 4] = __saturatef(v - 1.0f);
  out[threadIdx.x * 6 + 5] = __int_as_float(__float_as_int(v));
}

// One stage of 32 float4 brought by a bulk copy and read by a warp. kOk waits for the barrier;
// the others break it one way each.
enum BulkMode : int { kOk, kReadEarly, kNoArrival, kNoInit, kBadSize, kNeverRead };
__global__ void bulk_stage(const float4* src, float* out, int mode) {
  EMBER_SHARED(float4[32], stage);
  EMBER_SHARED(uint64_t, full);
  const int t = static_cast<int>(threadIdx.x);
  if (t == 0 && mode != kNoInit) ptx::mbarrier_init(&full, 1);
  __syncthreads();
  if (t == 0 && mode != kNoArrival) {
    const uint32_t bytes = mode == kBadSize ? 500 : 512;
    if (mode == kNeverRead) {
      ptx::bulk_copy_g2s(stage, src, bytes, &full);
      ptx::mbarrier_arrive(&full);  // without expect_tx: the phase completes before the copy lands
    } else {
      ptx::mbarrier_arrive_expect_tx(&full, bytes);
      ptx::bulk_copy_g2s(stage, src, bytes, &full);
    }
  }
  if (mode == kNeverRead) return;
  if (mode != kReadEarly) ptx::mbarrier_wait_parity(&full, 0);
  const float4 v = stage[t];
  out[t] = v.x + v.w;
}

// A 16 x 8 box of 16-bit values written by the block's threads and stored by its last thread (the
// last to run, so the other threads' writes are in before it). kStoreOk fences, synchronises and
// waits; kWarpSync orders the writes by __syncwarp() only (enough for one warp, not for two); the
// others break one rule each.
enum StoreMode : int { kStoreOk, kNoFence, kNoSync, kOverwrite, kNoWait, kWarpSync };
struct alignas(128) StoreTile {
  uint16_t v[128];
};
__global__ void store_box(const __grid_constant__ CUtensorMap map, int mode) {
  EMBER_SHARED(StoreTile, tile);
  const int t = static_cast<int>(threadIdx.x);
  for (int i = t; i < 128; i += static_cast<int>(blockDim.x)) tile.v[i] = static_cast<uint16_t>(i);
  if (mode != kNoFence) ptx::fence_proxy_async_shared();
  if (mode == kWarpSync) __syncwarp();
  else if (mode != kNoSync) __syncthreads();
  if (t == static_cast<int>(blockDim.x) - 1) {
    ptx::tma_store_2d(&map, 0, 0, tile.v);
    ptx::bulk_commit_group();
    if (mode == kOverwrite) tile.v[3] = 7;
    if (mode != kNoWait) ptx::bulk_wait_group_read<0>();
  }
}

// setmaxnreg as a warp-specialised kernel uses it (warpgroup 0 gives registers, the others take
// them), with the requested count from the launch: too many for the SM's register file, or a block
// that is not whole warpgroups.
template <int Take>
__global__ void move_registers() {
  if (threadIdx.x < 128) ptx::setmaxnreg_dec<40>();
  else ptx::setmaxnreg_inc<Take>();
}

// A warpgroup multiplies A (64 x 16) and B (8 x 16) that bulk copies brought, K-major without a
// swizzle, then thread 0 refills A: after every thread's wgmma.wait_group (kRefillOk), or while the
// MMAs still read it (kRefillEarly: the write-after-read of a pipeline stage refilled too early).
enum RefillMode : int { kRefillOk, kRefillEarly };
struct alignas(1024) WgmmaStage {
  unsigned char a[2048], b[256];
};
__global__ void refill_stage(const unsigned char* src, float* out, int mode) {
  EMBER_SHARED(WgmmaStage, st);
  EMBER_SHARED(uint64_t[2], bars);
  const int t = static_cast<int>(threadIdx.x);
  if (t == 0) {
    ptx::mbarrier_init(&bars[0], 1);
    ptx::mbarrier_init(&bars[1], 1);
    ptx::fence_mbarrier_init();
  }
  __syncthreads();
  if (t == 0) {
    ptx::mbarrier_arrive_expect_tx(&bars[0], 2048 + 256);
    ptx::bulk_copy_g2s(st.a, src, 2048, &bars[0]);
    ptx::bulk_copy_g2s(st.b, src + 2048, 256, &bars[0]);
  }
  ptx::mbarrier_wait_parity(&bars[0], 0);
  float d[4] = {};
  const uint64_t da = ptx::wgmma_desc(ptx::smem_address(st.a), 128, 256, ptx::WgmmaSwizzle::none);
  const uint64_t db = ptx::wgmma_desc(ptx::smem_address(st.b), 128, 256, ptx::WgmmaSwizzle::none);
  ptx::wgmma_fence();
  ptx::wgmma_m64k16<8>(d, da, db, false, true);
  ptx::wgmma_commit_group();
  if (mode == kRefillOk) ptx::wgmma_wait_group<0>();
  __syncthreads();
  if (t == 0) {
    ptx::mbarrier_arrive_expect_tx(&bars[1], 2048);
    ptx::bulk_copy_g2s(st.a, src, 2048, &bars[1]);
  }
  ptx::mbarrier_wait_parity(&bars[1], 0);
  ptx::wgmma_wait_group<0>();
  out[t] = d[0];
}

// wgmma .tf32 has no transposed operands: the simulator's entry point asked for an MN-major A (no
// wrapper of kernels/common/wgmma.cuh can ask for one) reports it.
__global__ void tf32_transposed(float* out) {
  EMBER_SHARED(WgmmaStage, st);
  float d[4] = {};
  const uint64_t desc = ptx::wgmma_desc(ptx::smem_address(st.a), 128, 256, ptx::WgmmaSwizzle::none);
  ::ember::sim::wgmma(d, 8, desc, desc, false, ::ember::sim::WgmmaType::tf32, true, false,
                      std::source_location::current());
  out[threadIdx.x] = d[0];
}

// Host code of a .cu file that reads device memory directly (the simulator aborts with a report).
float host_peek(const float* device_ptr) { return *device_ptr; }

// ---- helpers ----

Tensor dev_zeros(int64_t n, DType dt = DType::f32) { return zeros({n}, TensorOptions(dt).device(cuda0())); }
float* fp(const Tensor& t) { return static_cast<float*>(t.data_ptr()); }

}  // namespace

TEST_CASE("sim: out-of-bounds global read names the kernel, block, thread and allocation", "[gpu][sim]") {
  Tensor in = dev_zeros(64), out = dev_zeros(64);
  CHECK(fault_of([&] { cuda::launch(copy_shifted, 1, 64, 0, stream(), fp(in), fp(out), 0); }).empty());
  const std::string m = fault_of([&] { cuda::launch(copy_shifted, 1, 64, 0, stream(), fp(in), fp(out), 1); });
  CHECK_THAT(m, Contains("out-of-bounds global read of 4 bytes"));
  CHECK_THAT(m, Contains("copy_shifted"));
  CHECK_THAT(m, Contains("block (0,0,0) thread (63,0,0)"));
  CHECK_THAT(m, Contains("past the end of the 256-byte tensor"));
}

TEST_CASE("sim: out-of-bounds shared-memory access names the array", "[gpu][sim]") {
  Tensor out = dev_zeros(64);
  CHECK(fault_of([&] { cuda::launch(shared_tile, 1, 32, 0, stream(), fp(out)); }).empty());
  const std::string m = fault_of([&] { cuda::launch(shared_tile, 1, 33, 0, stream(), fp(out)); });
  CHECK_THAT(m, Contains("out-of-bounds shared-memory write"));
  CHECK_THAT(m, Contains("`tile`"));
  CHECK_THAT(m, Contains("thread (32,0,0)"));
}

TEST_CASE("sim: dynamic shared memory is sized by the launch", "[gpu][sim]") {
  Tensor out = dev_zeros(64);
  CHECK(fault_of([&] { cuda::launch(reverse_dynamic, 1, 64, 64 * sizeof(float), stream(), fp(out), 64); }).empty());
  std::vector<float> v = out.to_vector<float>();
  for (int i = 0; i < 64; ++i) CHECK(v[static_cast<size_t>(i)] == static_cast<float>(63 - i));
  const std::string m =
      fault_of([&] { cuda::launch(reverse_dynamic, 1, 64, 32 * sizeof(float), stream(), fp(out), 64); });
  CHECK_THAT(m, Contains("out-of-bounds shared-memory"));
  CHECK_THAT(m, Contains("dynamic shared memory"));
}

TEST_CASE("sim: racecheck finds a shared-memory race between warps", "[gpu][sim]") {
  Tensor out = dev_zeros(64);
  CHECK(fault_of([&] { cuda::launch(neighbour_exchange, 1, 64, 0, stream(), fp(out), true); }).empty());
  const std::string m = fault_of([&] { cuda::launch(neighbour_exchange, 1, 64, 0, stream(), fp(out), false); });
  CHECK_THAT(m, Contains("racecheck"));
  CHECK_THAT(m, Contains("`s`"));
  CHECK_THAT(m, Contains("__syncthreads()"));
}

TEST_CASE("sim: racecheck finds a race between lanes of one warp without __syncwarp", "[gpu][sim]") {
  Tensor out = dev_zeros(32);
  CHECK(fault_of([&] { cuda::launch(warp_exchange, 1, 32, 0, stream(), fp(out), true); }).empty());
  const std::string m = fault_of([&] { cuda::launch(warp_exchange, 1, 32, 0, stream(), fp(out), false); });
  CHECK_THAT(m, Contains("racecheck"));
  CHECK_THAT(m, Contains("__syncwarp()"));
}

TEST_CASE("sim: atomics on shared memory do not race", "[gpu][sim]") {
  Tensor out = dev_zeros(1, DType::i32);
  CHECK(
      fault_of([&] { cuda::launch(shared_counter, 1, 256, 0, stream(), static_cast<int*>(out.data_ptr())); }).empty());
  CHECK(out.item<int>() == 256);
}

TEST_CASE("sim: barrier divergence is reported, not hung", "[gpu][sim]") {
  Tensor out = dev_zeros(32);
  std::string m = fault_of([&] { cuda::launch(half_barrier, 1, 32, 0, stream(), fp(out)); });
  CHECK_THAT(m, Contains("barrier divergence"));
  CHECK_THAT(m, Contains("exited"));
  m = fault_of([&] { cuda::launch(two_barriers, 1, 32, 0, stream(), fp(out)); });
  CHECK_THAT(m, Contains("barrier divergence"));
  CHECK_THAT(m, Contains("test_sim_checks.cu"));
}

TEST_CASE("sim: mbarriers and bulk copies misused are reported, not hung", "[gpu][sim][mbarrier]") {
  std::vector<float> host(128);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>(i);
  Tensor src = from_blob(host.data(), {128}, DType::f32).to(cuda0()), out = dev_zeros(32);
  auto run = [&](BulkMode mode) {
    return fault_of([&] {
      cuda::launch(bulk_stage, 1, 32, 0, stream(), static_cast<const float4*>(src.data_ptr()), fp(out),
                   static_cast<int>(mode));
    });
  };
  CHECK(run(kOk).empty());
  std::vector<float> v = out.to_vector<float>();
  for (int i = 0; i < 32; ++i)
    CHECK(v[static_cast<size_t>(i)] == host[static_cast<size_t>(4 * i)] + host[static_cast<size_t>(4 * i + 3)]);
  std::string m = run(kReadEarly);
  CHECK_THAT(m, Contains("shared-memory read of `stage`"));
  CHECK_THAT(m, Contains("before the cp.async.bulk that writes it has landed"));
  m = run(kNoArrival);
  CHECK_THAT(m, Contains("is stuck"));
  CHECK_THAT(m, Contains("32 thread(s)"));
  CHECK_THAT(m, Contains("for its phase of parity 0 to complete (it is in that phase with 1 of 1 arrivals"));
  m = run(kNoInit);
  CHECK_THAT(m, Contains("which is not initialised"));
  m = run(kBadSize);
  CHECK_THAT(m, Contains("cp.async.bulk of 500 bytes"));
  CHECK_THAT(m, Contains("a positive multiple of 16"));
  m = run(kNeverRead);
  CHECK_THAT(m, Contains("ended with 1 cp.async.bulk copy in flight"));
  CHECK_THAT(m, Contains("mbarrier.expect_tx"));
}

TEST_CASE("sim: a tensor store reading unfenced or unordered writes, or left unwaited, is reported",
          "[gpu][sim][tma]") {
  Tensor m = dev_zeros(128, DType::f16);
  cuda::TensorMapSpec spec;
  spec.dtype = DType::f16;
  spec.base = m.data_ptr();
  spec.dims = {16, 8};
  spec.strides_bytes = {32};
  spec.box = {16, 8};
  const CUtensorMap map = cuda::make_tensor_map(spec);
  auto run = [&](StoreMode mode, int threads = 32) {
    return fault_of([&] { cuda::launch(store_box, 1, threads, 0, stream(), map, static_cast<int>(mode)); });
  };
  for (StoreMode ok : {kStoreOk, kWarpSync}) {
    m.zero_();
    CHECK(run(ok).empty());
    const Tensor bits = m.to(kCPU);  // the stored values' bits (16-bit integers in an f16 tensor)
    const auto* b = static_cast<const uint16_t*>(bits.data_ptr());
    for (int i = 0; i < 128; ++i) CHECK(b[i] == i);
  }
  CHECK(run(kStoreOk, 64).empty());
  CHECK_THAT(run(kWarpSync, 64), Contains("in the same barrier interval"));
  std::string msg = run(kNoFence);
  CHECK_THAT(msg, Contains("with no fence.proxy.async after the write"));
  msg = run(kNoSync);
  CHECK_THAT(msg, Contains("in the same barrier interval"));
  msg = run(kOverwrite);
  CHECK_THAT(msg, Contains("the source of a cp.async.bulk.tensor store not yet read"));
  msg = run(kNoWait);
  CHECK_THAT(msg, Contains("a tensor store its thread never waited for"));
}

TEST_CASE("sim: a wgmma .tf32 with a transposed operand is reported", "[gpu][sim][wgmma]") {
  Tensor out = dev_zeros(128, DType::f32);
  const std::string m = fault_of([&] { cuda::launch(tf32_transposed, 1, 128, 0, stream(), fp(out)); });
  CHECK_THAT(m, Contains("tf32 operands are K-major only"));
}

TEST_CASE("sim: setmaxnreg past the register file or outside whole warpgroups is reported", "[gpu][sim][wgmma]") {
  CHECK(fault_of([] { cuda::launch(move_registers<232>, 1, 384, 0, stream()); }).empty());
  std::string m = fault_of([] { cuda::launch(move_registers<256>, 1, 384, 0, stream()); });
  CHECK_THAT(m, Contains("setmaxnreg.inc 256"));
  CHECK_THAT(m, Contains("more than the SM's 65536"));
  m = fault_of([] { cuda::launch(move_registers<232>, 1, 320, 0, stream()); });
  CHECK_THAT(m, Contains("in a block of 320 threads"));
}

TEST_CASE("sim: a stage refilled while a wgmma still reads it is reported", "[gpu][sim][wgmma]") {
  Tensor src = dev_zeros(576), out = dev_zeros(128);  // 2304 bytes: A then B
  auto run = [&](RefillMode mode) {
    return fault_of([&] {
      cuda::launch(refill_stage, 1, 128, 0, stream(), static_cast<const unsigned char*>(src.data_ptr()), fp(out),
                   static_cast<int>(mode));
    });
  };
  CHECK(run(kRefillOk).empty());
  const std::string m = run(kRefillEarly);
  CHECK_THAT(m, Contains("an asynchronous copy into shared bytes"));
  CHECK_THAT(m, Contains("still reads (its operand A"));
  CHECK_THAT(m, Contains("wait for its group (wgmma.wait_group) before the stage is refilled"));
}

TEST_CASE("sim: lanes that disagree on a warp collective are reported", "[gpu][sim]") {
  Tensor out = dev_zeros(32);
  const std::string m = fault_of([&] { cuda::launch(mixed_collectives, 1, 32, 0, stream(), fp(out)); });
  CHECK_THAT(m, Contains("is stuck"));
  CHECK_THAT(m, Contains("__shfl_xor_sync"));
  CHECK_THAT(m, Contains("__ballot_sync"));
}

TEST_CASE("sim: warp votes, shuffles and counting barriers give CUDA's results", "[gpu][sim]") {
  Tensor out = dev_zeros(8, DType::i32);
  CHECK(fault_of([&] { cuda::launch(votes, 1, 64, 0, stream(), static_cast<int*>(out.data_ptr())); }).empty());
  std::vector<int> v = out.to_vector<int>();
  unsigned ballot = 0;
  for (int l = 0; l < 32; ++l)
    if (l % 3 == 0) ballot |= 1u << l;
  CHECK(static_cast<unsigned>(v[0]) == ballot);
  CHECK(v[1] == 1);
  CHECK(v[2] == 1);
  CHECK(v[3] == 30);
  CHECK(v[4] == 15);
  CHECK(v[5] == 32);
  CHECK(v[6] == 1);
  CHECK(v[7] == 0);
}

TEST_CASE("sim: a kernel handed host memory, freed memory or a null pointer is stopped", "[gpu][sim]") {
  Tensor out = dev_zeros(32);
  std::vector<float> host(32, 1.0f);
  std::string m = fault_of([&] { cuda::launch(add_one, 1, 32, 0, stream(), host.data(), fp(out)); });
  CHECK_THAT(m, Contains("host memory, not device memory"));
  m = fault_of([&] { cuda::launch(add_one, 1, 32, 0, stream(), static_cast<const float*>(nullptr), fp(out)); });
  CHECK_THAT(m, Contains("null pointer"));
  void* raw = nullptr;
  REQUIRE(cudaMalloc(&raw, 128) == cudaSuccess);
  REQUIRE(cudaFree(raw) == cudaSuccess);
  m = fault_of([&] { cuda::launch(add_one, 1, 32, 0, stream(), static_cast<const float*>(raw), fp(out)); });
  CHECK_THAT(m, Contains("freed"));
}

TEST_CASE("sim: one thread reading another thread's local memory is stopped", "[gpu][sim]") {
  Tensor out = dev_zeros(1);
  const std::string m = fault_of([&] { cuda::launch(peek_other_thread, 1, 32, 0, stream(), fp(out)); });
  CHECK_THAT(m, Contains("local memory of thread (0,0,0)"));
}

TEST_CASE("sim: __trap ends the kernel with a launch failure", "[gpu][sim]") {
  Tensor out = dev_zeros(1);
  const std::string m = fault_of([&] { cuda::launch(traps, 1, 1, 0, stream(), fp(out)); });
  CHECK_THAT(m, Contains("__trap()"));
}

TEST_CASE("sim: memory nobody wrote reads as NaN", "[gpu][sim]") {
  void* raw = nullptr;
  REQUIRE(cudaMalloc(&raw, 32 * sizeof(float)) == cudaSuccess);
  Tensor out = dev_zeros(32);
  CHECK(fault_of([&] { cuda::launch(add_one, 1, 32, 0, stream(), static_cast<const float*>(raw), fp(out)); }).empty());
  for (float v : out.to_vector<float>()) CHECK(std::isnan(v));
  REQUIRE(cudaFree(raw) == cudaSuccess);
}

TEST_CASE("sim: launch limits of an H100 are enforced", "[gpu][sim]") {
  Tensor out = dev_zeros(64);
  CHECK_THROWS_WITH(cuda::launch(shared_tile, 1, 2048, 0, stream(), fp(out)), Contains("1024 threads per block"));
  CHECK_THROWS_WITH(cuda::launch(shared_tile, dim3(1, 70000), 32, 0, stream(), fp(out)), Contains("65535"));
  CHECK_THROWS_WITH(cuda::launch(shared_tile, 1, dim3(1, 1, 65), 0, stream(), fp(out)),
                    Contains("1024 threads per block"));
  // dynamic shared memory over 48 KiB needs the opt-in attribute, and the opt-in has a maximum
  CHECK_THROWS_WITH(cuda::launch(reverse_dynamic, 1, 64, 64 * 1024, stream(), fp(out), 64), Contains("48 KiB"));
  CHECK(cudaFuncSetAttribute(reinterpret_cast<const void*>(reverse_dynamic),
                             cudaFuncAttributeMaxDynamicSharedMemorySize, 300 * 1024) == cudaErrorInvalidValue);
  cudaGetLastError();
  REQUIRE(cudaFuncSetAttribute(reinterpret_cast<const void*>(reverse_dynamic),
                               cudaFuncAttributeMaxDynamicSharedMemorySize, 100 * 1024) == cudaSuccess);
  CHECK(fault_of([&] { cuda::launch(reverse_dynamic, 1, 64, 64 * 1024, stream(), fp(out), 64); }).empty());
  // static shared memory over 48 KiB: found when the kernel declares it, and at launch afterwards
  std::string m = fault_of([&] { cuda::launch(big_static_shared, 1, 32, 0, stream(), fp(out)); });
  CHECK_THAT(m, Contains("too much shared memory"));
  CHECK_THAT(m, Contains("`big`"));
  CHECK_THROWS_WITH(cuda::launch(big_static_shared, 1, 32, 0, stream(), fp(out)), Contains("static"));
}

TEST_CASE("sim: a sticky kernel fault is returned by every later synchronising call", "[gpu][sim]") {
  Tensor in = dev_zeros(64), out = dev_zeros(64);
  cuda::launch(copy_shifted, 1, 64, 0, stream(), fp(in), fp(out), 1);
  CHECK_THROWS_WITH(cuda::current_stream(0).synchronize(), Contains("out-of-bounds"));
  CHECK_THROWS_WITH(cuda::device_synchronize(0), Contains("out-of-bounds"));
  CHECK_THAT(sim::last_fault(), Contains("copy_shifted"));
  sim::clear_fault();
  CHECK(sim::last_fault().empty());
  CHECK_NOTHROW(cuda::current_stream(0).synchronize());
}

TEST_CASE("sim: a destroyed event is an invalid handle, not a crash", "[gpu][sim]") {
  cudaEvent_t e = nullptr;
  REQUIRE(cudaEventCreate(&e) == cudaSuccess);
  REQUIRE(cudaEventRecord(e, nullptr) == cudaSuccess);
  REQUIRE(cudaEventSynchronize(e) == cudaSuccess);
  REQUIRE(cudaEventDestroy(e) == cudaSuccess);
  CHECK(cudaEventQuery(e) == cudaErrorInvalidResourceHandle);
  CHECK(cudaEventSynchronize(e) == cudaErrorInvalidResourceHandle);
  CHECK(cudaEventRecord(e, nullptr) == cudaErrorInvalidResourceHandle);
  CHECK(cudaStreamWaitEvent(nullptr, e, 0) == cudaErrorInvalidResourceHandle);
  float ms = 0;
  CHECK(cudaEventElapsedTime(&ms, e, e) == cudaErrorInvalidResourceHandle);
  cudaGetLastError();
}

// Run in a child process by the test below: the simulator aborts the process.
TEST_CASE("sim: (child) host code reads device memory", "[.sim-child-host-read]") {
  Tensor t = dev_zeros(4);
  std::printf("%f\n", static_cast<double>(host_peek(fp(t))));
}

TEST_CASE("sim: host code that reads device memory without a copy is stopped", "[gpu][sim]") {
  const std::string cmd = "/proc/" + std::to_string(getpid()) + "/exe \"[.sim-child-host-read]\" 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  std::string output;
  char buf[512];
  while (std::fgets(buf, sizeof buf, p) != nullptr) output += buf;
  const int status = pclose(p);
  CHECK(status != 0);
  CHECK_THAT(output, Contains("host code reads 4 bytes of device memory"));
}

TEST_CASE("sim: the fast-math intrinsics kernels call give the host's results", "[gpu][sim]") {
  std::vector<float> xs{0.25f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 7.0f, 10.0f};
  Tensor x = from_blob(xs.data(), {8}, DType::f32).to(cuda0()), out = dev_zeros(48);
  CHECK(fault_of([&] { cuda::launch(intrinsics, 1, 8, 0, stream(), fp(x), fp(out)); }).empty());
  std::vector<float> o = out.to_vector<float>();
  for (size_t i = 0; i < xs.size(); ++i) {
    const float v = xs[i];
    INFO("x = " << v);
    CHECK(o[i * 6 + 0] == Approx(std::exp(v)).epsilon(1e-6));
    CHECK(o[i * 6 + 1] == Approx(std::log(v)).epsilon(1e-6).margin(1e-7));
    CHECK(o[i * 6 + 2] == Approx(1.0f / v).epsilon(1e-6));
    CHECK(o[i * 6 + 3] == Approx(1.0f / std::sqrt(v)).epsilon(1e-6));
    CHECK(o[i * 6 + 4] == std::min(1.0f, std::max(0.0f, v - 1.0f)));
    CHECK(o[i * 6 + 5] == v);
  }
}
