// The CUDA runtime layer on a real device: caching allocator (reuse, stats, OOM message and
// recovery, pass-through, blocks used by graphs and other streams, no release during a capture),
// pinned allocator, streams and events, Philox CPU == CUDA, device error word, device mismatches,
// async copies, sync-debug, the profiler around graph replays.
#include <catch2/catch.hpp>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/cuda/graph.h"
#include "core/profiler.h"
#include "core/runtime.h"
#include "ember.h"
#include "tests/stream_gate.h"

using namespace ember;
using ember::testing::StreamGate;

namespace {

// Captures what `work` queues into `g` on `st`, once st has waited for what device 0's current
// stream already holds (the graph's inputs).
template <class Work>
void capture_on(cuda::Graph& g, cuda::Stream& st, cuda::CaptureMode mode, Work&& work) {
  st.wait_stream(cuda::current_stream(0));
  cuda::StreamGuard guard(st);
  g.capture_begin(st, mode);
  work();
  REQUIRE_NOTHROW(g.capture_end());
}
template <class Work>
void capture_on(cuda::Graph& g, cuda::Stream& st, Work&& work) {
  capture_on(g, st, cuda::CaptureMode::this_thread, std::forward<Work>(work));
}

}  // namespace

TEST_CASE("caching allocator reuses freed blocks on the same stream", "[gpu][allocator]") {
  cuda::empty_cache();
  auto before = cuda::allocator_stats(0);
  void* first = nullptr;
  {
    Tensor a = empty({1 << 20}, kCUDA);
    first = a.data_ptr();
  }
  auto mid = cuda::allocator_stats(0);
  CHECK(mid.num_device_mallocs == before.num_device_mallocs + 1);
  CHECK(mid.allocated_bytes == before.allocated_bytes);
  Tensor b = empty({1 << 20}, kCUDA);
  CHECK(b.data_ptr() == first);
  auto after = cuda::allocator_stats(0);
  CHECK(after.num_device_mallocs == mid.num_device_mallocs);  // a cache hit, no cudaMalloc
  CHECK(after.num_cache_hits == mid.num_cache_hits + 1);
  CHECK(after.reserved_bytes >= after.allocated_bytes);
  CHECK(after.peak_allocated_bytes >= cuda::allocator_round_size(4u << 20));
}

TEST_CASE("steady-state training steps do not call cudaMalloc", "[gpu][allocator]") {
  Tensor w = randn({256, 256}, kCUDA).requires_grad_();
  auto step = [&] {
    Tensor x = randn({64, 256}, kCUDA);
    Tensor loss = mean(relu(matmul(x, w)));
    w.reset_grad();
    loss.backward();
  };
  step();
  step();
  auto s0 = cuda::allocator_stats(0);
  for (int i = 0; i < 10; ++i) step();
  auto s1 = cuda::allocator_stats(0);
  CHECK(s1.num_device_mallocs == s0.num_device_mallocs);
}

TEST_CASE("out of memory names the request, retries after releasing the cache, and recovers", "[gpu][allocator]") {
  size_t total = cuda::properties(0).total_memory;
  {
    Tensor cached = empty({1 << 28}, TensorOptions(DType::u8).device(kCUDA));  // 256 MiB, freed into the cache
  }
  auto s0 = cuda::allocator_stats(0);
  CHECK_THROWS_AS(empty({static_cast<int64_t>(total) * 2}, TensorOptions(DType::u8).device(kCUDA)), OutOfMemoryError);
  try {
    empty({static_cast<int64_t>(total) * 2}, TensorOptions(DType::u8).device(kCUDA));
  } catch (const OutOfMemoryError& e) {
    std::string m = e.what();
    CHECK(m.find("tried to allocate") != std::string::npos);
    CHECK(m.find("in use") != std::string::npos);
    CHECK(m.find("cached") != std::string::npos);
    CHECK(m.find("free of") != std::string::npos);
  }
  auto s1 = cuda::allocator_stats(0);
  CHECK(s1.num_oom_retries > s0.num_oom_retries);
  CHECK(s1.num_ooms > s0.num_ooms);
  Tensor ok = ones({1024}, kCUDA);  // the allocator still works
  CHECK(sum(ok).item() == 1024);
}

TEST_CASE("a block used on another stream waits for that stream before reuse", "[gpu][allocator]") {
  cuda::Stream side = cuda::Stream::create(0);
  void* p = nullptr;
  {
    Tensor a = empty({1 << 22}, kCUDA);
    p = a.data_ptr();
    cuda::record_stream(p, side);
  }
  // the block is pending until the side stream's event completes: a new allocation right now may
  // or may not get it, but after the side stream drains it must be reusable
  side.synchronize();
  Tensor b = empty({1 << 22}, kCUDA);
  CHECK(b.data_ptr() == p);
}

TEST_CASE("a capture that allocates while blocks wait for another stream's events still captures",
          "[gpu][allocator][graph]") {
  // The allocator's look at pending blocks queries events, which a capture forbids on its thread
  // (Note [event queries during capture]); on an H200 this broke every --graph run whose batches
  // came from the host loader's copy stream.
  cuda::Stream side = cuda::Stream::create(0);
  cuda::Stream st = cuda::Stream::create(0);
  StreamGate gate(side);  // the side stream cannot finish before the capture has allocated
  {
    Tensor used_elsewhere = empty({1 << 20}, kCUDA);
    cuda::record_stream(used_elsewhere.data_ptr(), side);
  }
  Tensor x = ones({4099}, kCUDA);
  cuda::Graph g;
  Tensor y;
  capture_on(g, st, [&] { y = add(x, 1.0); });  // allocates inside the capture, with the block pending
  gate.open();
  {
    cuda::StreamGuard guard(st);
    g.replay();
  }
  st.synchronize();
  CHECK(sum(y).item() == 2.0 * 4099);
}

TEST_CASE("a block a graph's replays use is not handed out again until the graph is gone", "[gpu][allocator][graph]") {
  // record_stream onto a capturing stream means the graph reads the block at every replay, long
  // after its tensor is freed (Note [allocator during capture]).
  cuda::Stream st = cuda::Stream::create(0);
  const int64_t n = 1 << 18;
  Tensor x = ones({n}, kCUDA);
  void* block = nullptr;
  auto g = std::make_unique<cuda::Graph>();
  Tensor y;
  {
    Tensor input = mul(x, 2.0);  // the shared pool, eagerly
    block = input.data_ptr();
    capture_on(*g, st, [&] {
      cuda::record_stream(input.data_ptr(), st);
      y = add(input, 1.0);
    });
  }  // `input` freed: the graph still reads its block
  st.synchronize();
  cuda::current_stream(0).synchronize();  // every stream idle: nothing else keeps the block from reuse
  std::vector<Tensor> others;             // all alive: each one takes a block of that size the cache has free
  for (int i = 0; i < 3; ++i) {
    others.push_back(empty({n}, kCUDA));
    CHECK(others.back().data_ptr() != block);
    others.back().fill_(-7.0);
  }
  {
    cuda::StreamGuard guard(st);
    g->replay();
  }
  st.synchronize();
  CHECK(sum(y).item() == 3.0 * n);  // the replay read 2.0, not what the others wrote
  g.reset();                        // the graph is gone: the block is free again
  cuda::current_stream(0).synchronize();
  Tensor again = empty({n}, kCUDA);
  CHECK(again.data_ptr() == block);
}

TEST_CASE("no cached memory is released while another thread captures on the device", "[gpu][allocator][graph]") {
  // cudaFree and cudaFreeHost on any thread invalidate a global-mode capture (Note [allocator during
  // capture]): empty_cache waits its turn.
  { Tensor cached = empty({1 << 20}, kCUDA); }
  { Tensor cached_pinned = empty({1 << 16}).pin_memory(); }
  cuda::Stream st = cuda::Stream::create(0);
  Tensor x = ones({4099}, kCUDA);
  cuda::Graph g;
  Tensor y;
  capture_on(g, st, cuda::CaptureMode::global, [&] {
    y = add(x, 1.0);
    std::thread other([] {
      cuda::empty_cache();
      cuda::pinned_empty_cache();
    });
    other.join();
    y = mul(y, 2.0);
  });
  {
    cuda::StreamGuard guard(st);
    g.replay();
  }
  st.synchronize();
  CHECK(sum(y).item() == 4.0 * 4099);
  const size_t reserved = cuda::allocator_stats(0).reserved_bytes;
  cuda::empty_cache();  // no capture now: released
  CHECK(cuda::allocator_stats(0).reserved_bytes < reserved);
}

TEST_CASE("the profiler shows a graph's replay as one timed range", "[gpu][profiler][graph]") {
  // Ops queued while the stream captures keep their CPU time only; the GPU time of the graph is
  // the replay's (Note [profiling captured work]).
  cuda::Stream st = cuda::Stream::create(0);
  Tensor x = ones({1 << 16}, kCUDA);
  cuda::Graph g;
  Tensor y;
  profiler::TraceProfiler prof;
  prof.start();
  capture_on(g, st, [&] { y = relu(add(x, 1.0)); });
  for (int i = 0; i < 3; ++i) {
    cuda::StreamGuard guard(st);
    g.replay();
  }
  st.synchronize();
  Tensor eager = relu(x);
  prof.stop();
  const std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("ember_graph_trace_" + std::to_string(::getpid()) + ".json");
  REQUIRE_NOTHROW(prof.write_chrome_trace(path.string()));
  std::ifstream f(path);
  nlohmann::json j = nlohmann::json::parse(f);
  std::filesystem::remove(path);
  int replays_gpu = 0, relu_gpu = 0, relu_cpu = 0;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] != "X") continue;
    const std::string name = e["name"].get<std::string>(), cat = e["cat"].get<std::string>();
    if (name.rfind("graph replay", 0) == 0 && cat == "gpu") {
      ++replays_gpu;
      CHECK(e["dur"].get<double>() >= 0);
    }
    if (name.rfind("relu", 0) == 0) (cat == "gpu" ? relu_gpu : relu_cpu) += 1;
  }
  CHECK(replays_gpu == 3);
  CHECK(relu_cpu == 2);  // captured and eager
  CHECK(relu_gpu == 1);  // the eager one only
  CHECK(prof.top_ops_table().find("graph replay") != std::string::npos);
}

TEST_CASE("pinned host memory: async copies, reuse only after the copy event", "[gpu][pinned]") {
  Tensor h = arange(1 << 20, DType::f32).pin_memory();
  CHECK(h.is_pinned());
  CHECK(cuda::is_pinned_pointer(h.data_ptr()));
  Tensor d = h.to(kCUDA, /*non_blocking=*/true);
  CHECK(sum(d).item() == Approx(static_cast<double>((1 << 20) - 1) * (1 << 20) / 2));
  auto st = cuda::pinned_stats();
  CHECK(st.num_host_allocs >= 1);
  Tensor back = d.to(kCPU, /*non_blocking=*/true);
  CHECK(back.is_pinned());
  cuda::current_stream(0).synchronize();
  CHECK(back.to_vector<float>()[12345] == 12345.0f);
}

TEST_CASE("Philox gives the same numbers on CPU and CUDA", "[gpu][rng]") {
  for (auto [name, fn] : std::vector<std::pair<const char*, Tensor (*)(const Shape&, const TensorOptions&)>>{
           {"rand", rand}, {"randn", randn}}) {
    INFO(name);
    manual_seed(99);
    Tensor c = fn({100003}, TensorOptions());
    manual_seed(99);
    Tensor g = fn({100003}, TensorOptions().device(kCUDA));
    std::vector<float> a = c.to_vector<float>(), b = g.to_vector<float>();
    int64_t diff = 0;
    for (size_t i = 0; i < a.size(); ++i)
      if (std::fabs(a[i] - b[i]) > 1e-6f * std::max(1.0f, std::fabs(a[i]))) ++diff;
    CHECK(diff == 0);
  }
  manual_seed(5);
  Tensor c = bernoulli({4099}, 0.4);
  manual_seed(5);
  Tensor g = bernoulli({4099}, 0.4, kCUDA);
  CHECK(c.to_vector<float>() == g.to_vector<float>());
}

TEST_CASE("an out-of-range index on the device is reported at the next sync", "[gpu][bad-input]") {
  Tensor x = zeros({4, 2}, kCUDA);
  Tensor bad = tensor_i64({1, 7}, {2}, kCUDA);
  Tensor y = index_select(x, 0, bad);  // no host sync here
  CHECK_THROWS_WITH(cuda::current_stream(0).synchronize(),
                    Catch::Contains("index_select") && Catch::Contains("out of range"));
  // the error was cleared: the next sync is fine
  cuda::current_stream(0).synchronize();
}

TEST_CASE("mismatched devices name both tensors", "[gpu][bad-input]") {
  CHECK_THROWS_WITH(add(zeros({2}), zeros({2}, kCUDA)),
                    Catch::Contains("cpu") && Catch::Contains("cuda:0") && Catch::Contains("same device"));
}

TEST_CASE("sync-debug reports a host sync with the op that caused it", "[gpu][sync]") {
  Tensor x = ones({16}, kCUDA);
  runtime::set_sync_debug(runtime::SyncDebug::error);
  CHECK_NOTHROW(relu(mul(x, 2.0)));  // no sync
  CHECK_THROWS_WITH(sum(x).item(), Catch::Contains("item()"));
  Tensor pageable = ones({16});
  CHECK_THROWS_WITH(pageable.to(kCUDA), Catch::Contains("pageable"));
  runtime::set_sync_debug(runtime::SyncDebug::off);
}

TEST_CASE("streams and events order work and time it", "[gpu][stream]") {
  cuda::Stream s = cuda::Stream::create(0);
  cuda::Event start(true), stop(true);
  Tensor a = ones({1 << 20}, kCUDA);
  cuda::Event ready;
  ready.record();
  Tensor b;
  {
    cuda::StreamGuard g(s);
    ready.block(s);
    start.record(s);
    b = mul(a, 3.0);
    stop.record(s);
  }
  cuda::record_stream(b.data_ptr(), cuda::current_stream(0));
  stop.block(cuda::current_stream(0));
  CHECK(sum(b).item() == 3.0 * (1 << 20));
  CHECK(stop.query());
  CHECK(start.elapsed_ms(stop) >= 0.0f);
}

TEST_CASE("CUDA graph replays draw fresh random numbers, and a seeded run repeats them", "[gpu][graph][rng]") {
  // Dropout captured in a graph must not repeat its mask on every replay, and the host generator
  // stays the one source of the numbers (Note [Philox in CUDA graphs]).
  auto masks_of_replays = [] {
    manual_seed(21);
    cuda::Stream st = cuda::Stream::create(0);
    Tensor x = ones({4099}, kCUDA);
    cuda::Graph g;
    Tensor y;
    capture_on(g, st, [&] { y = dropout(x, 0.5, true); });
    std::vector<std::vector<float>> masks;
    for (int i = 0; i < 3; ++i) {
      {
        cuda::StreamGuard guard(st);
        g.replay();
      }
      st.synchronize();
      masks.push_back(y.to_vector<float>());
    }
    return masks;
  };
  std::vector<std::vector<float>> a = masks_of_replays(), b = masks_of_replays();
  CHECK(a[0] != a[1]);
  CHECK(a[1] != a[2]);
  CHECK(a == b);
  // the first replay draws what an eager dropout at the same generator position draws
  manual_seed(21);
  CHECK(dropout(ones({4099}, kCUDA), 0.5, true).to_vector<float>() == a[0]);
}
