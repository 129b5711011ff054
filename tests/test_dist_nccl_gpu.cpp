// The nccl backend (dist/nccl_backend.cpp) on a GPU: every collective for every dtype at the awkward
// sizes (0, 1, 7, 1023, > 25 MB) against computed answers, wait() without a host sync, ordering
// against the caller's stream, a collective captured in a CUDA graph and replayed, external memory,
// abort, and bad tensors. World size 1 in this process; with two or more GPUs also world size 2 as
// two threads of this process, one rank per GPU (real sums, a timeout caught by the watchdog;
// tagged [multi-gpu]: the simulator runs them with EMBER_SIM_DEVICES=2). Multi-process jobs over
// NCCL (world 2 and 4, DDP, faults) are in tests/test_dist_nccl_jobs_gpu.cpp.
//
// In the simulator build NCCL is the simulator's emulation of it (Note [simulated nccl] in
// sim/libs/nccl.cpp); a build without NCCL's header has none, and there these tests say so and
// skip, and check that asking for the backend is a clear error.
#include <catch2/catch.hpp>

#if EMBER_WITH_CUDA  // raw runtime calls below; a CPU-only build has no toolkit headers
#include <cuda_runtime_api.h>
#endif

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/cuda/graph.h"
#include "core/cuda/runtime.h"
#include "core/runtime.h"
#include "core/storage.h"
#include "dist/backends.h"
#include "dist/process_group.h"
#include "dist/store.h"
#include "kernels/functional.h"
#include "tests/op_driver.h"

using namespace ember;
using Catch::Matchers::Contains;
using dist::ReduceOp;

namespace {

constexpr DType kDTypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64, DType::u8};
constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin};

bool skip_without_nccl() {
  if (!dist::nccl_available()) {
    WARN(
        "skipped: this build has no NCCL (nccl.h, and for a GPU build libnccl, were not found when it was configured)");
    return true;
  }
  return false;
}

Device cuda_dev(int i) { return Device(DeviceType::cuda, i); }

// World size 1 through the public entry point (rendezvous on a free port), not left as the default.
dist::ProcessGroupPtr make_group(std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
  dist::Options o;
  o.rank = 0;
  o.world_size = 1;
  o.master_addr = "127.0.0.1";
  o.master_port = 0;
  o.backend = "nccl";
  o.device = kCUDA;
  o.timeout = timeout;
  dist::ProcessGroupPtr pg = dist::init_process_group(o);
  dist::destroy_process_group();
  return pg;
}

// n elements i % 50 (+ shift): exact in every dtype, u8 and the 16-bit floats included.
std::vector<double> pattern(int64_t n, double shift = 0, int64_t offset = 0) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<double>((i + offset) % 50) + shift;
  return v;
}

Tensor make(const std::vector<double>& v, DType dt, Device d) {
  return tensor(v, {static_cast<int64_t>(v.size())}, TensorOptions(DType::f64)).to(dt).to(d);
}

std::vector<double> values(const Tensor& t) { return t.cpu().to(DType::f64).to_vector<double>(); }

// The smallest element count above 25 MB for the dtype.
int64_t big_numel(DType dt) { return static_cast<int64_t>((25u << 20) / dtype_size(dt)) + 3; }

std::string label(DType dt, int64_t n) { return std::string(dtype_name(dt)) + " x " + std::to_string(n); }

}  // namespace

TEST_CASE("nccl: a build without NCCL says why when asked for the backend", "[gpu][dist]") {
  if (dist::nccl_available()) {
    SUCCEED("this build has NCCL (the other nccl tests run it)");
    return;
  }
  const std::string why = "has no NCCL";
  CHECK_THROWS_WITH(dist::make_nccl_group(nullptr, 0, 1, 0, std::chrono::seconds(5)), Contains(why));
  dist::Options o;
  o.rank = 0;
  o.world_size = 1;
  o.master_port = 0;
  o.backend = "nccl";
  o.device = kCUDA;
  CHECK_THROWS_AS(dist::init_process_group(o), dist::DistError);
  CHECK(dist::default_group() == nullptr);
}

TEST_CASE("nccl: every collective, dtype and size on one rank, waited for without a host sync", "[gpu][dist]") {
  if (skip_without_nccl()) return;
  auto pg = make_group();
  CHECK(pg->backend() == "nccl");
  CHECK(pg->size() == 1);
  uint64_t expect_seq = 0;
  // Issues the collective, waits for it on the current stream and checks that neither added a
  // host sync; then the result is read (which syncs).
  auto run = [&](const std::function<dist::WorkPtr()>& issue) {
    const uint64_t syncs = runtime::host_sync_count();
    dist::WorkPtr w = issue();
    w->wait();
    CHECK(runtime::host_sync_count() == syncs);
    CHECK(w->seq() == ++expect_seq);
    return w;
  };
  for (DType dt : kDTypes)
    for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{1023}, big_numel(dt)}) {
      INFO(label(dt, n));
      const std::vector<double> want = pattern(n, 1);
      const Tensor x = make(want, dt, kCUDA);
      for (ReduceOp op : kOps) {
        INFO(dist::to_string(op));
        Tensor t = x.clone();
        run([&] { return pg->all_reduce(t, op); });
        CHECK(values(t) == want);  // the one rank's values, sum/avg/max/min alike
      }
      Tensor b = x.clone();
      run([&] { return pg->broadcast(b, 0); });
      CHECK(values(b) == want);
      Tensor gathered = zeros({n}, TensorOptions(dt).device(kCUDA));
      run([&] { return pg->all_gather(gathered, x); });
      CHECK(values(gathered) == want);
      Tensor scattered = zeros({n}, TensorOptions(dt).device(kCUDA));
      run([&] { return pg->reduce_scatter(scattered, x, ReduceOp::kSum); });
      CHECK(values(scattered) == want);
    }
  dist::WorkPtr w = run([&] { return pg->barrier(); });
  cuda::current_stream(0).synchronize();
  CHECK(w->is_completed());
  CHECK(pg->started() == expect_seq);
}

TEST_CASE("nccl: a collective starts after the caller's stream wrote its input, and wait orders the reader",
          "[gpu][dist]") {
  if (skip_without_nccl()) return;
  auto pg = make_group();
  const int64_t n = int64_t{1} << 24;  // 64 MB of f32: the writes take long enough to race
  Tensor x = zeros({n}, kCUDA);
  Tensor out = zeros({n}, kCUDA);
  for (int i = 1; i <= 3; ++i) {
    x.fill_(static_cast<double>(i));  // on the current stream, just before the collective
    pg->all_gather(out, x)->wait();   // NCCL's stream waits for the fill; the current stream for NCCL
    out.mul_(2.0);                    // after wait(): reads what the collective wrote
    std::vector<float> got = out.cpu().to_vector<float>();
    CHECK(got.front() == 2.0f * static_cast<float>(i));
    CHECK(got.back() == 2.0f * static_cast<float>(i));
  }
  // A Work that is never waited for: freeing its tensors must not hand their memory to the next
  // allocation before the collective is done (the allocator knows the NCCL stream used them).
  {
    Tensor a = full({n}, 5.0, kCUDA), o = zeros({n}, kCUDA);
    pg->all_gather(o, a);
  }
  Tensor c = full({n}, 7.0, kCUDA);
  std::vector<float> got = c.cpu().to_vector<float>();
  CHECK(got.front() == 7.0f);
  CHECK(got.back() == 7.0f);
}

#if EMBER_WITH_CUDA  // raw CUDA runtime calls (a CPU-only build skips every GPU test anyway)
TEST_CASE("nccl: a tensor over external device memory is kept until its collective is done", "[gpu][dist]") {
  if (skip_without_nccl()) return;
  auto pg = make_group();
  const int64_t n = 1023;
  void* mem = nullptr;
  REQUIRE(cudaMalloc(&mem, static_cast<size_t>(n) * sizeof(float)) == cudaSuccess);
  {
    Tensor ext = from_blob(mem, {n}, DType::f32, kCUDA);
    ext.fill_(4.0);
    Tensor out = zeros({n}, kCUDA);
    pg->all_gather(out, ext)->wait();
    CHECK(values(out) == std::vector<double>(static_cast<size_t>(n), 4.0));
  }
  cuda::current_stream(0).synchronize();
  REQUIRE(cudaFree(mem) == cudaSuccess);
}
#endif

TEST_CASE("nccl: a collective captured in a CUDA graph runs with every replay", "[gpu][dist][graph]") {
  if (skip_without_nccl()) return;
  auto pg = make_group();
  const int64_t n = 4099;
  Tensor x = full({n}, 1.0, kCUDA);
  Tensor out = zeros({n}, kCUDA);
  cuda::Stream st = cuda::Stream::create(0);
  st.wait_stream(cuda::current_stream(0));
  cuda::Graph g;
  const uint64_t before = pg->started();
  dist::WorkPtr gathered;
  {
    cuda::StreamGuard guard(st);
    g.capture_begin(st);
    x.mul_(2.0);
    pg->all_reduce(x, ReduceOp::kSum)->wait();
    gathered = pg->all_gather(out, x);
    gathered->wait();  // the join: a capture must end on its own stream
    out.mul_(3.0);
    g.capture_end();
  }
  CHECK(pg->started() == before + 2);
  CHECK(g.num_nodes() >= 3);        // the two mul_ kernels and the gather's copy at least
  CHECK(gathered->is_completed());  // captured: nothing to track once the capture is over
  CHECK_NOTHROW(gathered->wait());  // and nothing to wait for outside it
  for (int i = 1; i <= 3; ++i) {
    {
      cuda::StreamGuard guard(st);
      g.replay();
    }
    st.synchronize();
    const double xi = static_cast<double>(1 << i);
    CHECK(values(x) == std::vector<double>(static_cast<size_t>(n), xi));
    CHECK(values(out) == std::vector<double>(static_cast<size_t>(n), 3 * xi));
  }
  CHECK(pg->started() == before + 2);  // replays start no collective on the host
  // eager collectives go on as before
  Tensor y = full({5}, 2.0, kCUDA);
  pg->all_reduce(y, ReduceOp::kMax)->wait();
  CHECK(values(y) == std::vector<double>(5, 2.0));
}

TEST_CASE("nccl: asking whether an eager collective completed does not break a capture", "[gpu][dist][graph]") {
  if (skip_without_nccl()) return;
  auto pg = make_group();
  const int64_t n = 1000;
  Tensor x = full({n}, 1.0, kCUDA);
  dist::WorkPtr eager = pg->all_reduce(x, ReduceOp::kSum);
  eager->wait();
  cuda::Stream st = cuda::Stream::create(0);
  st.wait_stream(cuda::current_stream(0));
  cuda::Graph g;
  {
    cuda::StreamGuard guard(st);
    g.capture_begin(st);
    x.mul_(2.0);
    // its event is no part of the capture: an unsafe query in the capture's mode would end it
    // (Note [event queries during capture] in core/cuda/caching_allocator.cpp)
    CHECK_NOTHROW(eager->is_completed());
    REQUIRE_NOTHROW(g.capture_end());
  }
  {
    cuda::StreamGuard guard(st);
    g.replay();
  }
  st.synchronize();
  CHECK(values(x) == std::vector<double>(static_cast<size_t>(n), 2.0));
  CHECK(eager->is_completed());
}

TEST_CASE("nccl: CPU tensors, other devices and bad shapes are clear errors, and abort fails the group",
          "[gpu][dist]") {
  if (skip_without_nccl()) return;
  auto pg = make_group();
  Tensor cpu = ones({4});
  CHECK_THROWS_WITH(pg->all_reduce(cpu),
                    Contains("the nccl backend works on CUDA tensors on this group's device cuda:0") &&
                        Contains("f32[4] on cpu") && Contains("gloo"));
  Tensor gpu = ones({4}, kCUDA);
  CHECK_THROWS_WITH(pg->all_gather(gpu, cpu), Contains("all_gather") && Contains("CUDA tensors"));
  Tensor undefined;
  CHECK_THROWS_WITH(pg->broadcast(undefined, 0), Contains("undefined"));
  Tensor strided = ones({4, 4}, kCUDA).transpose(0, 1);
  CHECK_THROWS_WITH(pg->all_reduce(strided), Contains("contiguous"));
  Tensor flags = zeros({4}, TensorOptions(DType::boolean).device(kCUDA));
  CHECK_THROWS_WITH(pg->all_reduce(flags), Contains("bool") && Contains("u8"));
  CHECK_THROWS_WITH(pg->broadcast(gpu, 1), Contains("root 1 is not a rank"));
  Tensor wrong = zeros({3}, kCUDA);
  CHECK_THROWS_WITH(pg->all_gather(wrong, gpu), Contains("elements"));
  CHECK_THROWS_WITH(pg->reduce_scatter(wrong, gpu), Contains("world size"));
  CHECK(pg->started() == 0);  // none of them started a collective
  if (cuda::device_count() >= 2) {
    Tensor other = ones({4}, cuda_dev(1));
    CHECK_THROWS_WITH(pg->all_reduce(other), Contains("cuda:1") && Contains("one GPU"));
  }
  // the group still works, then abort fails it for good
  dist::WorkPtr w = pg->all_reduce(gpu);
  pg->abort("stopped by the test");
  try {
    w->wait();  // succeeds only if the watchdog had seen it complete before the abort
  } catch (const dist::DistError& e) {
    CHECK_THAT(std::string(e.what()), Contains("stopped by the test"));
  }
  CHECK(w->is_completed());
  CHECK_THROWS_AS(pg->all_reduce(gpu), dist::DistError);
  CHECK_THROWS_WITH(pg->barrier(), Contains("stopped by the test"));
}

// ---- two ranks: two threads of this process, one GPU each ----

namespace {

// Runs fn(rank, group) for ranks 0 and 1 on cuda:0 and cuda:1 concurrently; returns their errors.
std::vector<std::string> two_ranks(std::chrono::milliseconds timeout,
                                   const std::function<void(int, dist::ProcessGroup&)>& fn) {
  auto server = std::make_shared<dist::TcpStore>("127.0.0.1", 0, true, std::chrono::seconds(60));
  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      try {
        std::shared_ptr<dist::Store> base = server;
        if (r == 1)
          base = std::make_shared<dist::TcpStore>("127.0.0.1", server->port(), false, std::chrono::seconds(60));
        auto pg = dist::make_nccl_group(std::make_shared<dist::PrefixStore>("pg0", base), r, 2, r, timeout);
        fn(r, *pg);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

void expect(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error("check failed: " + what);
}

}  // namespace

TEST_CASE("nccl: two ranks on two GPUs compute every collective", "[gpu][dist][multi-gpu]") {
  if (skip_without_nccl()) return;
  if (cuda::device_count() < 2) {
    WARN("skipped: needs 2 GPUs, this machine has " << cuda::device_count());
    return;
  }
  auto errors = two_ranks(std::chrono::seconds(60), [](int r, dist::ProcessGroup& pg) {
    const Device dev = cuda_dev(r);
    const double rr = r;
    for (DType dt : kDTypes)
      for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{1023}, dt == DType::f32 ? big_numel(dt) : 0}) {
        const std::string what = label(dt, n) + " on rank " + std::to_string(r);
        const std::vector<double> base = pattern(n);
        const bool floating = is_floating(dt);
        for (ReduceOp op : kOps) {
          Tensor t = make(pattern(n, rr), dt, dev);  // rank r holds base + r
          pg.all_reduce(t, op)->wait();
          std::vector<double> want(base.size());
          for (size_t i = 0; i < base.size(); ++i) {
            const double b = base[i];
            switch (op) {
              case ReduceOp::kSum: want[i] = 2 * b + 1; break;
              case ReduceOp::kAvg: want[i] = floating ? b + 0.5 : b; break;  // integers truncate
              case ReduceOp::kMax: want[i] = b + 1; break;
              case ReduceOp::kMin: want[i] = b; break;
            }
          }
          expect(values(t) == want, "all_reduce " + std::string(dist::to_string(op)) + " " + what);
        }
        Tensor b = make(pattern(n, rr), dt, dev);
        pg.broadcast(b, 1)->wait();
        expect(values(b) == pattern(n, 1), "broadcast from rank 1 " + what);
        Tensor gathered = zeros({2 * n}, TensorOptions(dt).device(dev));
        pg.all_gather(gathered, make(pattern(n, rr), dt, dev))->wait();
        std::vector<double> want = pattern(n);
        for (double v : pattern(n, 1)) want.push_back(v);
        expect(values(gathered) == want, "all_gather " + what);
        // reduce_scatter: 2n inputs per rank (base over 2n + r), this rank's half of the sum
        Tensor scattered = zeros({n}, TensorOptions(dt).device(dev));
        pg.reduce_scatter(scattered, make(pattern(2 * n, rr), dt, dev), ReduceOp::kSum)->wait();
        std::vector<double> half = pattern(n, 0, r * n);
        for (double& v : half) v = 2 * v + 1;
        expect(values(scattered) == half, "reduce_scatter " + what);
      }
    pg.barrier()->wait();
    cuda::current_stream(r).synchronize();
  });
  CHECK(errors[0] == "");
  CHECK(errors[1] == "");
}

TEST_CASE("nccl: the watchdog fails a collective a peer never joins, naming it", "[gpu][dist][multi-gpu]") {
  if (skip_without_nccl()) return;
  if (cuda::device_count() < 2) {
    WARN("skipped: needs 2 GPUs, this machine has " << cuda::device_count());
    return;
  }
  std::string rank0_message;
  std::atomic<bool> rank0_done{false};
  auto errors = two_ranks(std::chrono::seconds(3), [&](int r, dist::ProcessGroup& pg) {
    struct Done {  // rank 0 lets rank 1 go however it leaves
      std::atomic<bool>* flag;
      ~Done() {
        if (flag != nullptr) *flag = true;
      }
    } done{r == 0 ? &rank0_done : nullptr};
    Tensor t = ones({1000}, cuda_dev(r));
    pg.all_reduce(t)->wait();  // #1 on both ranks
    cuda::current_stream(r).synchronize();
    if (r == 1) {  // never calls #2, and keeps its communicator until rank 0 is done (no peer error)
      const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      while (!rank0_done && std::chrono::steady_clock::now() < limit)
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      return;
    }
    pg.all_reduce(t)->wait();  // #2: no host sync, so no error yet
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < deadline && rank0_message.empty()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      try {
        pg.barrier();
      } catch (const dist::DistError& e) {
        rank0_message = e.what();
      }
    }
  });
  CHECK(errors[0] == "");
  CHECK(errors[1] == "");
  CHECK_THAT(rank0_message, Contains("nccl all_reduce #2 (f32[1000] on cuda:0, sum) on rank 0 of 2 failed") &&
                                Contains("timed out") && Contains("rank 0: #1"));
}

// ---- several GPUs in one process (the runtime's part of it; no NCCL) ----

TEST_CASE("several GPUs in one process: allocator events on their own device, peer copies in order",
          "[gpu][multi-gpu]") {
  if (cuda::device_count() < 2) {
    WARN("skipped: needs 2 GPUs (in the simulator: EMBER_SIM_DEVICES=2), this process has " << cuda::device_count());
    return;
  }
  const int prev = cuda::current_device();
  cuda::set_device(0);
  const int64_t n = int64_t{1} << 16;
  // The pinned allocator: one block copied to cuda:0, then to cuda:1 once the first copy's event
  // completed (its spare event belongs to cuda:0 and must not be recorded on cuda:1's stream).
  Tensor host = full({n}, 3.0, TensorOptions().pinned_memory());
  Tensor on0 = host.to(cuda_dev(0), /*non_blocking=*/true);
  cuda::current_stream(0).synchronize();
  Tensor on1 = host.to(cuda_dev(1), /*non_blocking=*/true);
  cuda::current_stream(1).synchronize();
  CHECK(values(on1) == std::vector<double>(static_cast<size_t>(n), 3.0));
  // The caching allocator: a block of cuda:1 used on a second stream of cuda:1, freed while cuda:0
  // is current: its events are created and recorded on cuda:1.
  const uint64_t failed = failed_frees();
  {
    cuda::Stream side = cuda::Stream::create(1);
    Tensor x = full({n}, 1.0, cuda_dev(1));
    side.wait_stream(cuda::current_stream(1));
    cuda::record_stream(x.storage()->data(), side);
    cuda::set_device(0);
  }
  CHECK(failed_frees() == failed);  // the free did not fail (frees never throw; they count failures)
  Tensor reuse = full({n}, 2.0, cuda_dev(1));
  CHECK(values(reuse) == std::vector<double>(static_cast<size_t>(n), 2.0));
  // Peer copies: the destination's stream waits for what the source's stream wrote just before.
  for (int i = 1; i <= 3; ++i) {
    Tensor src = zeros({int64_t{1} << 20}, cuda_dev(1));
    src.fill_(static_cast<double>(i));
    Tensor dst = src.to(cuda_dev(0));
    src.fill_(-1.0);  // after the copy read it (the source's stream waits for the copy)
    std::vector<float> got = dst.cpu().to_vector<float>();
    CHECK(got.front() == static_cast<float>(i));
    CHECK(got.back() == static_cast<float>(i));
  }
  cuda::empty_cache();  // releases both devices' blocks with each device current in turn
  cuda::set_device(prev);
}
