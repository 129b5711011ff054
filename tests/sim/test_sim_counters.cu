// The simulator's efficiency counters (sim/counters.h): kernels whose access patterns
// have known answers (coalesced, vector, strided, misaligned, broadcast, partial-warp and
// divergent global accesses; strided, wide, broadcast and transposed shared accesses; ldmatrix;
// cp.async; barriers, warp collectives and atomics). Each expected number is worked out here from
// the definitions in counters.h, from the addresses the kernel touches, not copied from a run.
// Simulator build only (-DEMBER_CUDA_SIM=ON, like test_sim_checks.cu): a GPU has no such counters.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/cuda/kernel.cuh"
#include "core/cuda/runtime.h"
#include "sim/counters.h"
#include "core/tensor.h"
#include "kernels/common/mbarrier.cuh"
#include "kernels/common/ptx.cuh"
#include "kernels/functional.h"

using namespace ember;

namespace {

// ---- kernels ----

// out[i] = in[i * stride + offset], one element per thread.
__global__ void gather_f32(const float* in, float* out, int stride, int offset) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  out[i] = in[i * stride + offset];
}

// One vector (float2, float4) per thread.
template <class V>
__global__ void copy_vec(const V* in, V* out) {
  const int i = static_cast<int>(threadIdx.x);
  out[i] = in[i];
}

// Only even lanes load; every lane stores.
__global__ void half_lanes_load(const float* in, float* out) {
  const int i = static_cast<int>(threadIdx.x);
  float v = 0.0f;
  if (i % 2 == 0) v = in[i];
  out[i] = v;
}

// Each lane loads four times in a loop (the compiler may unroll it: then four instructions, once each).
__global__ void loop_loads(const float* in, float* out) {
  const int t = static_cast<int>(threadIdx.x);
  float acc = 0.0f;
  for (int k = 0; k < 4; ++k) acc += in[k * static_cast<int>(blockDim.x) + t];
  out[t] = acc;
}

constexpr int kWords = 32 * 33;

// Fills a shared array with stride-1 stores, then each lane reads `width` bytes at word
// lane * stride (one warp).
__global__ void shared_strided(float* out, int stride, int width) {
  EMBER_SHARED(float[kWords], s);
  const int lane = static_cast<int>(threadIdx.x);
  for (int k = lane; k < kWords; k += 32) s[k] = static_cast<float>(k);
  __syncthreads();
  // the vector is copied whole (summing its parts lets the host compiler split it into scalar loads)
  if (width == 4) out[lane] = s[lane * stride];
  else if (width == 8) reinterpret_cast<float2*>(out)[lane] = reinterpret_cast<const float2*>(s)[lane * stride];
  else reinterpret_cast<float4*>(out)[lane] = reinterpret_cast<const float4*>(s)[lane * stride];
}

// A 32x32 transpose through a shared tile with `Pitch` words per row (33: padded; 32: not).
template <int Pitch>
__global__ void transpose_tile(const float* in, float* out) {
  EMBER_SHARED(float[32 * Pitch], tile);
  const int x = static_cast<int>(threadIdx.x), y = static_cast<int>(threadIdx.y);
  tile[y * Pitch + x] = in[y * 32 + x];
  __syncthreads();
  out[y * 32 + x] = tile[x * Pitch + y];
}

// One thread per block walks an mbarrier through three phases: 3 phases per block.
__global__ void three_mbarrier_phases(float* out) {
  EMBER_SHARED(uint64_t, bar);
  if (threadIdx.x != 0) return;
  ptx::mbarrier_init(&bar, 1);
  ptx::fence_mbarrier_init();
  for (uint32_t phase = 0; phase < 3; ++phase) {
    ptx::mbarrier_arrive(&bar);
    while (!ptx::mbarrier_try_wait_parity(&bar, phase & 1)) {
    }
  }
  out[blockIdx.x] = 1.0f;
}

__global__ void three_barriers(float* out) {
  EMBER_SHARED(float[64], s);
  const int t = static_cast<int>(threadIdx.x);
  s[t] = 1.0f;
  __syncthreads();
  const float a = s[(t + 1) % 64];
  __syncthreads();
  s[t] = a;
  __syncthreads();
  if (t == 0) out[blockIdx.x] = s[5];
}

// Per warp: two shuffles and a ballot.
__global__ void collectives(float* out) {
  const int t = static_cast<int>(threadIdx.x);
  float v = static_cast<float>(t);
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  v += __shfl_down_sync(0xffffffffu, v, 2);
  const unsigned b = __ballot_sync(0xffffffffu, v > 10.0f);
  if (t == 0) out[0] = v + static_cast<float>(b);
}

__global__ void global_atomics(int* counter) { atomicAdd(counter, 1); }

__global__ void shared_atomics(int* out) {
  EMBER_SHARED(int, count);
  if (threadIdx.x == 0) count = 0;
  __syncthreads();
  atomicAdd(&count, 1);
  __syncthreads();
  if (threadIdx.x == 0) out[0] = count;
}

// One ldmatrix.x4 whose 32 row addresses are `row_bytes` apart (a tile of 32 rows).
__global__ void ldmatrix_rows(uint32_t* out, int row_bytes) {
  EMBER_SHARED(uint16_t[32 * 64], tile);  // 32 rows of up to 128 bytes
  const int lane = static_cast<int>(threadIdx.x);
  for (int k = lane; k < 32 * 64; k += 32) tile[k] = static_cast<uint16_t>(k);
  __syncthreads();
  uint32_t r[4];
  ptx::ldmatrix_x4(r, reinterpret_cast<const unsigned char*>(tile) + lane * row_bytes);
  out[lane] = r[0] ^ r[1] ^ r[2] ^ r[3];
}

// Each lane copies 16 bytes from global to shared with cp.async.
__global__ void cp_async_copy(const float* in, float* out) {
  EMBER_SHARED(float[32 * 4], s);
  const int lane = static_cast<int>(threadIdx.x);
  ptx::cp_async_16(s + lane * 4, in + lane * 4, true);
  ptx::cp_async_commit();
  ptx::cp_async_wait<0>();
  __syncthreads();
  out[lane] = s[(lane * 4 + 1) % 128];
}

// ---- helpers ----

Device cuda0() { return Device(DeviceType::cuda, 0); }
Tensor dev_zeros(int64_t n, DType dt = DType::f32) { return zeros({n}, TensorOptions(dt).device(cuda0())); }
cudaStream_t stream() { return static_cast<cudaStream_t>(cuda::current_stream(0).handle()); }
float* fp(const Tensor& t) { return static_cast<float*>(t.data_ptr()); }
uintptr_t addr(const Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()); }

// Runs `launch_it` with the counters on and returns the one launch it recorded.
template <class F>
sim::LaunchCounters count_one(F launch_it) {
  sim::take_counters();  // forget anything earlier
  sim::set_counters_enabled(true);
  launch_it();
  sim::set_counters_enabled(false);
  std::vector<sim::LaunchCounters> all = sim::take_counters();
  REQUIRE(all.size() == 1);
  return all[0];
}

// The definitions of counters.h, straight from the sets of bytes, sectors and words a request
// touches (the simulator computes them differently: merged intervals).
struct Expect {
  uint64_t requests = 0, sectors = 0, ideal = 0, bytes = 0;
  // One global request: lane accesses of `size` bytes at `addresses`.
  void global(const std::vector<uintptr_t>& addresses, size_t size) {
    std::set<uintptr_t> sec, byte;
    for (uintptr_t a : addresses)
      for (uintptr_t b = a; b < a + size; ++b) {
        byte.insert(b);
        sec.insert(b / 32);
      }
    ++requests;
    sectors += sec.size();
    ideal += (byte.size() + 31) / 32;
    bytes += addresses.size() * size;
  }
  // One shared request.
  void shared(const std::vector<uintptr_t>& addresses, size_t size) {
    std::set<uintptr_t> byte;
    std::map<int, std::set<uintptr_t>> bank_words;
    for (uintptr_t a : addresses)
      for (uintptr_t b = a; b < a + size; ++b) {
        byte.insert(b);
        bank_words[static_cast<int>((b / 4) % 32)].insert(b / 4);
      }
    uint64_t most = 0;
    for (auto& [bank, words] : bank_words) most = std::max<uint64_t>(most, words.size());
    const uint64_t lower = std::max<uint64_t>(1, (byte.size() + 127) / 128);
    ++requests;
    sectors += std::max(most, lower);  // wavefronts
    ideal += lower;
    bytes += addresses.size() * size;
  }
};

void check_global(const sim::GlobalCounters& got, const Expect& e) {
  CHECK(got.requests == e.requests);
  CHECK(got.sectors == e.sectors);
  CHECK(got.ideal_sectors == e.ideal);
  CHECK(got.bytes == e.bytes);
}
void check_shared(const sim::SharedCounters& got, const Expect& e) {
  CHECK(got.requests == e.requests);
  CHECK(got.wavefronts == e.sectors);
  CHECK(got.ideal_wavefronts == e.ideal);
  CHECK(got.bytes == e.bytes);
}

// Addresses base + (first + lane * stride) * size for lanes [0, lanes).
std::vector<uintptr_t> lanes_at(uintptr_t base, int lanes, int stride, size_t size, int first = 0) {
  std::vector<uintptr_t> v;
  for (int l = 0; l < lanes; ++l) v.push_back(base + static_cast<uintptr_t>(first + l * stride) * size);
  return v;
}

}  // namespace

TEST_CASE("sim counters: coalesced, strided, misaligned and broadcast float loads", "[gpu][sim][counters]") {
  Tensor in = dev_zeros(64 * 33 + 1), out = dev_zeros(64);
  REQUIRE(addr(in) % 128 == 0);  // the allocator's alignment, which the sector counts below assume
  for (int stride : {1, 2, 32, 0}) {
    for (int offset : {0, 1}) {
      CAPTURE(stride, offset);
      const sim::LaunchCounters c =
          count_one([&] { cuda::launch(gather_f32, 1, 64, 0, stream(), fp(in), fp(out), stride, offset); });
      CHECK(c.kernel.find("gather_f32") != std::string::npos);
      CHECK(c.grid[0] == 1);
      CHECK(c.block[0] == 64);
      Expect load, store;
      for (int w = 0; w < 2; ++w) {
        load.global(lanes_at(addr(in), 32, stride, 4, w * 32 * stride + offset), 4);
        store.global(lanes_at(addr(out), 32, 1, 4, w * 32), 4);
      }
      check_global(c.global_load, load);
      check_global(c.global_store, store);
      CHECK(c.shared_load.requests == 0);
      CHECK(c.partial_requests == 0);
      // the patterns by name, as a check on the reference above
      if (stride == 1 && offset == 0) CHECK((c.global_load.sectors == 8 && c.global_load.ideal_sectors == 8));
      if (stride == 1 && offset == 1) CHECK(c.global_load.sectors == 10);  // one extra sector per request
      if (stride == 2 && offset == 0) CHECK(c.global_load.ideal_sectors * 2 == c.global_load.sectors);
      if (stride == 32) CHECK(c.global_load.ideal_sectors * 8 == c.global_load.sectors);
      if (stride == 0) CHECK((c.global_load.sectors == 2 && c.global_load.ideal_sectors == 2));
    }
  }
}

// A warp copying one V per lane: each load and store request covers 32 * sizeof(V) contiguous
// bytes, sizeof(V) sectors of 32 bytes.
template <class V>
void check_vector_copy() {
  Tensor in = dev_zeros(128), out = dev_zeros(128);
  const sim::LaunchCounters c = count_one([&] {
    cuda::launch(copy_vec<V>, 1, 32, 0, stream(), reinterpret_cast<const V*>(fp(in)), reinterpret_cast<V*>(fp(out)));
  });
  constexpr int kBytes = static_cast<int>(sizeof(V));
  Expect load, store;
  load.global(lanes_at(addr(in), 32, 1, kBytes), kBytes);
  store.global(lanes_at(addr(out), 32, 1, kBytes), kBytes);
  check_global(c.global_load, load);
  check_global(c.global_store, store);
  CHECK(c.global_load.sectors == kBytes);
}

TEST_CASE("sim counters: float2 and float4 accesses", "[gpu][sim][counters]") {
  check_vector_copy<float2>();
  check_vector_copy<float4>();
}

TEST_CASE("sim counters: a partial warp and a divergent branch", "[gpu][sim][counters]") {
  Tensor in = dev_zeros(64), out = dev_zeros(64);
  SECTION("blockDim 48: a full warp and a warp of 16") {
    const sim::LaunchCounters c =
        count_one([&] { cuda::launch(gather_f32, 1, 48, 0, stream(), fp(in), fp(out), 1, 0); });
    Expect load;
    load.global(lanes_at(addr(in), 32, 1, 4), 4);
    load.global(lanes_at(addr(in), 16, 1, 4, 32), 4);
    check_global(c.global_load, load);
    CHECK(c.global_load.sectors == 6);
    CHECK(c.partial_requests == 0);  // the second warp has 16 threads, and all take part
  }
  SECTION("half the lanes load") {
    const sim::LaunchCounters c =
        count_one([&] { cuda::launch(half_lanes_load, 1, 64, 0, stream(), fp(in), fp(out)); });
    Expect load, store;
    for (int w = 0; w < 2; ++w) {
      load.global(lanes_at(addr(in), 16, 2, 4, w * 32), 4);
      store.global(lanes_at(addr(out), 32, 1, 4, w * 32), 4);
    }
    check_global(c.global_load, load);
    check_global(c.global_store, store);
    CHECK(c.global_load.sectors == 8);
    CHECK(c.global_load.ideal_sectors == 4);
    CHECK(c.partial_requests == 2);  // the load of each warp
  }
}

TEST_CASE("sim counters: a load in a loop of 4 iterations is 4 requests per warp", "[gpu][sim][counters]") {
  Tensor in = dev_zeros(4 * 96), out = dev_zeros(96);
  const sim::LaunchCounters c = count_one([&] { cuda::launch(loop_loads, 1, 96, 0, stream(), fp(in), fp(out)); });
  Expect load;
  for (int k = 0; k < 4; ++k)
    for (int w = 0; w < 3; ++w) load.global(lanes_at(addr(in), 32, 1, 4, k * 96 + w * 32), 4);
  check_global(c.global_load, load);
  CHECK(c.global_load.requests == 12);
  CHECK(c.global_store.requests == 3);
}

TEST_CASE("sim counters: shared-memory bank conflicts", "[gpu][sim][counters]") {
  Tensor out = dev_zeros(32 * 4);
  struct Case {
    int stride, width;
    uint64_t wavefronts;  // by name: what the pattern is known for
  };
  // stride in units of `width`: 1 (conflict-free), 2 words (2-way), 32 words (32-way), 0
  // (broadcast), 33 words (padded), 8- and 16-byte accesses at stride 1 (2 and 4 wavefronts, no
  // conflict) and at stride 2 (twice that).
  for (const Case& k : {Case{1, 4, 1}, Case{2, 4, 2}, Case{32, 4, 32}, Case{0, 4, 1}, Case{33, 4, 1}, Case{1, 8, 2},
                        Case{2, 8, 4}, Case{1, 16, 4}, Case{2, 16, 8}}) {
    CAPTURE(k.stride, k.width);
    const sim::LaunchCounters c =
        count_one([&] { cuda::launch(shared_strided, 1, 32, 0, stream(), fp(out), k.stride, k.width); });
    Expect load, store;
    load.shared(lanes_at(0, 32, k.stride, static_cast<size_t>(k.width)), static_cast<size_t>(k.width));
    for (int i = 0; i * 32 < kWords; ++i) store.shared(lanes_at(0, std::min(32, kWords - i * 32), 1, 4, i * 32), 4);
    check_shared(c.shared_load, load);
    check_shared(c.shared_store, store);
    CHECK(c.shared_load.wavefronts == k.wavefronts);
    CHECK(c.static_shared_bytes == kWords * sizeof(float));
    CHECK(c.barriers == 1);
  }
}

TEST_CASE("sim counters: a padded transpose tile is conflict-free, an unpadded one 32-way", "[gpu][sim][counters]") {
  Tensor in = dev_zeros(1024), out = dev_zeros(1024);
  const sim::LaunchCounters padded =
      count_one([&] { cuda::launch(transpose_tile<33>, 1, dim3(32, 32), 0, stream(), fp(in), fp(out)); });
  const sim::LaunchCounters plain =
      count_one([&] { cuda::launch(transpose_tile<32>, 1, dim3(32, 32), 0, stream(), fp(in), fp(out)); });
  for (int pitch : {33, 32}) {
    Expect load, store;
    for (int y = 0; y < 32; ++y) {  // warp y: threadIdx.y = y, lanes x = 0..31
      store.shared(lanes_at(static_cast<uintptr_t>(y * pitch) * 4, 32, 1, 4), 4);
      load.shared(lanes_at(static_cast<uintptr_t>(y) * 4, 32, pitch, 4), 4);
    }
    const sim::LaunchCounters& c = pitch == 33 ? padded : plain;
    check_shared(c.shared_load, load);
    check_shared(c.shared_store, store);
  }
  CHECK(padded.shared_load.wavefronts == 32);
  CHECK(plain.shared_load.wavefronts == 32 * 32);
  CHECK(padded.global_load.sectors == padded.global_load.ideal_sectors);
}

TEST_CASE("sim counters: barriers, warp collectives and atomics", "[gpu][sim][counters]") {
  Tensor out = dev_zeros(64);
  const sim::LaunchCounters b = count_one([&] { cuda::launch(three_barriers, 4, 64, 0, stream(), fp(out)); });
  CHECK(b.barriers == 3 * 4);
  CHECK(b.warp_collectives == 0);
  const sim::LaunchCounters w = count_one([&] { cuda::launch(collectives, 2, 64, 0, stream(), fp(out)); });
  CHECK(w.warp_collectives == 3 * 2 * 2);  // 3 per warp, 2 warps per block, 2 blocks
  CHECK(w.barriers == 0);
  Tensor counter = dev_zeros(1, DType::i32);
  const sim::LaunchCounters a =
      count_one([&] { cuda::launch(global_atomics, 3, 96, 0, stream(), static_cast<int*>(counter.data_ptr())); });
  CHECK(a.atomics == 3 * 3);  // one per warp
  CHECK(a.global_load.requests == 0);
  CHECK(a.global_store.requests == 0);
  CHECK(counter.to_vector<int>()[0] == 3 * 96);
  const sim::LaunchCounters s =
      count_one([&] { cuda::launch(shared_atomics, 1, 64, 0, stream(), static_cast<int*>(counter.data_ptr())); });
  CHECK(s.atomics == 2);
  CHECK(s.shared_store.requests == 1);  // count = 0 by thread 0
  CHECK(s.barriers == 2);
  const sim::LaunchCounters m = count_one([&] { cuda::launch(three_mbarrier_phases, 5, 32, 0, stream(), fp(out)); });
  CHECK(m.mbarrier_phases == 3 * 5);
  CHECK(m.barriers == 0);
  CHECK(b.mbarrier_phases == 0);
}

TEST_CASE("sim counters: ldmatrix wavefronts go matrix by matrix", "[gpu][sim][counters]") {
  Tensor out = dev_zeros(32, DType::i32);
  for (int row_bytes : {16, 32, 64, 80, 128}) {
    CAPTURE(row_bytes);
    const sim::LaunchCounters c = count_one(
        [&] { cuda::launch(ldmatrix_rows, 1, 32, 0, stream(), static_cast<uint32_t*>(out.data_ptr()), row_bytes); });
    // 4 matrices, each the rows of 8 lanes; wavefronts summed over them (counters.h)
    uint64_t wavefronts = 0;
    std::set<uintptr_t> bytes;
    for (int m = 0; m < 4; ++m) {
      Expect one;
      std::vector<uintptr_t> rows = lanes_at(0, 8, row_bytes, 1, m * 8 * row_bytes);
      one.shared(rows, 16);
      wavefronts += one.sectors;
      for (uintptr_t r : rows)
        for (uintptr_t x = r; x < r + 16; ++x) bytes.insert(x);
    }
    const uint64_t ideal = (bytes.size() + 127) / 128;
    CHECK(c.shared_load.requests == 1);
    CHECK(c.shared_load.wavefronts == std::max(wavefronts, ideal));
    CHECK(c.shared_load.ideal_wavefronts == ideal);
    CHECK(c.shared_load.bytes == 32 * 16);
    CHECK(c.warp_collectives == 1);
    if (row_bytes == 16 || row_bytes == 80) CHECK(c.shared_load.wavefronts == 4);  // conflict-free
    if (row_bytes == 128) CHECK(c.shared_load.wavefronts == 4 * 8);                // 8 rows in one bank group
  }
}

TEST_CASE("sim counters: cp.async is a global read and a shared write", "[gpu][sim][counters]") {
  Tensor in = dev_zeros(128), out = dev_zeros(32);
  const sim::LaunchCounters c = count_one([&] { cuda::launch(cp_async_copy, 1, 32, 0, stream(), fp(in), fp(out)); });
  Expect g, s;
  g.global(lanes_at(addr(in), 32, 1, 16), 16);
  s.shared(lanes_at(0, 32, 1, 16), 16);
  check_global(c.global_load, g);
  check_shared(c.shared_store, s);
  CHECK(c.global_load.sectors == 16);
  CHECK(c.shared_store.wavefronts == 4);
}

TEST_CASE("sim counters: off records nothing, take_counters forgets", "[gpu][sim][counters]") {
  Tensor in = dev_zeros(64), out = dev_zeros(64);
  sim::take_counters();
  REQUIRE_FALSE(sim::counters_enabled());
  cuda::launch(gather_f32, 1, 64, 0, stream(), fp(in), fp(out), 1, 0);
  CHECK(sim::take_counters().empty());
  sim::set_counters_enabled(true);
  CHECK(sim::counters_enabled());
  cuda::launch(gather_f32, 1, 64, 0, stream(), fp(in), fp(out), 1, 0);
  cuda::launch(gather_f32, 2, 32, 0, stream(), fp(in), fp(out), 1, 0);
  sim::set_counters_enabled(false);
  cuda::launch(gather_f32, 1, 64, 0, stream(), fp(in), fp(out), 1, 0);  // after: not recorded
  const std::vector<sim::LaunchCounters> two = sim::take_counters();
  REQUIRE(two.size() == 2);
  CHECK(two[0].block[0] == 64);  // in the order they ran
  CHECK(two[1].grid[0] == 2);
  CHECK(two[1].global_load.requests == 2);
  CHECK(sim::take_counters().empty());
}
