// NCCL scenarios: one rank per process and GPU (cuda:LOCAL_RANK), as ember_run starts them; in the
// simulator build on the simulator's NCCL (tests/test_dist_nccl_jobs_gpu.cpp starts them with
// EMBER_SIM_DEVICES = the world size). Every collective against an answer computed here; ranks that
// call different collectives; a rank that dies between two collectives; a rank that stops in the
// middle of a DDP step replayed from a CUDA graph.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "core/cuda/graph.h"
#include "core/cuda/runtime.h"
#include "core/dtype.h"
#include "core/rng.h"
#include "dist/ddp.h"
#include "dist/process_group.h"
#include "kernels/functional.h"
#include "nn/nn.h"
#include "tests/dist/scenarios.h"

namespace ember::testing::dist {

namespace {

using namespace ember::dist;

// This process's GPU: cuda:LOCAL_RANK.
Device my_gpu() {
  const char* local = std::getenv("LOCAL_RANK");
  return Device(DeviceType::cuda, local != nullptr ? std::atoi(local) : 0);
}

ProcessGroupPtr nccl_group(std::chrono::milliseconds timeout) {
  Options o;
  o.backend = "nccl";
  o.device = my_gpu();
  o.timeout = timeout;
  return init_process_group(o);
}

// n elements (i + offset) % 50 + shift: exact in every dtype tested, sums of 4 ranks included.
Tensor pattern(int64_t n, double shift, DType dt, Device d, int64_t offset = 0) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<double>((i + offset) % 50) + shift;
  return tensor(v, {n}, TensorOptions(DType::f64)).to(dt).to(d);
}
std::vector<double> values(const Tensor& t) { return t.cpu().to(DType::f64).to_vector<double>(); }

int collectives(const std::vector<std::string>&) {
  ProcessGroupPtr pg = nccl_group(std::chrono::seconds(120));
  const int r = pg->rank(), n = pg->size();
  const Device dev = my_gpu();
  // 1 MiB slots in the simulator: 300000 f32 elements take several steps
  for (DType dt : {DType::f32, DType::f16, DType::bf16, DType::i32, DType::f64})
    for (int64_t m : {int64_t{1}, int64_t{7}, int64_t{1023}, dt == DType::f32 ? int64_t{300000} : int64_t{0}}) {
      if (m == 0) continue;
      const std::string what = std::string(dtype_name(dt)) + " x " + std::to_string(m);
      const std::vector<double> base = values(pattern(m, 0, DType::f64, kCPU));
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin}) {
        Tensor t = pattern(m, r, dt, dev);  // rank r holds base + r
        pg->all_reduce(t, op)->wait();
        std::vector<double> want(base.size());
        const double ranks_sum = n * (n - 1) / 2.0;
        for (size_t i = 0; i < base.size(); ++i) {
          const double b = base[i];
          switch (op) {
            case ReduceOp::kSum: want[i] = n * b + ranks_sum; break;
            case ReduceOp::kAvg:
              want[i] = is_floating(dt) ? b + ranks_sum / n
                                        : static_cast<double>(static_cast<int64_t>((n * b + ranks_sum) / n));
              break;
            case ReduceOp::kMax: want[i] = b + n - 1; break;
            case ReduceOp::kMin: want[i] = b; break;
          }
        }
        expect(values(t) == want, "all_reduce " + std::string(to_string(op)) + " " + what);
      }
      Tensor b = pattern(m, r, dt, dev);
      pg->broadcast(b, n - 1)->wait();
      expect(values(b) == values(pattern(m, n - 1, dt, kCPU)), "broadcast from the last rank " + what);
      Tensor gathered = zeros({n * m}, TensorOptions(dt).device(dev));
      pg->all_gather(gathered, pattern(m, r, dt, dev))->wait();
      std::vector<double> want;
      for (int k = 0; k < n; ++k)
        for (double v : values(pattern(m, k, dt, kCPU))) want.push_back(v);
      expect(values(gathered) == want, "all_gather " + what);
      Tensor scattered = zeros({m}, TensorOptions(dt).device(dev));
      pg->reduce_scatter(scattered, pattern(n * m, r, dt, dev), ReduceOp::kSum)->wait();
      std::vector<double> mine = values(pattern(m, 0, DType::f64, kCPU, r * m));
      for (double& v : mine) v = n * v + n * (n - 1) / 2.0;
      expect(values(scattered) == mine, "reduce_scatter " + what);
    }
  pg->barrier()->wait();
  cuda::current_stream(dev.index).synchronize();
  std::printf("ok: every collective on rank %d of %d\n", r, n);
  return 0;
}

// Rank 0 calls all_reduce, the others broadcast: each rank's group fails, naming both calls.
int mismatch(const std::vector<std::string>&) {
  ProcessGroupPtr pg = nccl_group(std::chrono::seconds(60));
  const Device dev = my_gpu();
  Tensor t = ones({16}, dev);
  if (pg->rank() == 0) pg->all_reduce(t)->wait();
  else pg->broadcast(t, 0)->wait();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    try {
      pg->barrier()->wait();
      cuda::current_stream(dev.index).synchronize();
    } catch (const DistError& e) {
      std::printf("error: %s\n", e.what());
      return 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::printf("no error within 60 s\n");
  return 0;
}

// Both ranks finish all_reduce #1; the last rank then exits at once, and the others' #2 must fail
// through the watchdog, naming the collective, not hang.
int peer_dies(const std::vector<std::string>&) {
  ProcessGroupPtr pg = nccl_group(std::chrono::seconds(30));
  const Device dev = my_gpu();
  Tensor t = ones({1000}, dev);
  pg->all_reduce(t)->wait();
  cuda::current_stream(dev.index).synchronize();
  if (pg->rank() == pg->size() - 1) {
    std::printf("rank %d exits before all_reduce #2\n", pg->rank());
    std::fflush(stdout);
    ::_exit(3);
  }
  const auto t0 = std::chrono::steady_clock::now();
  pg->all_reduce(t)->wait();
  for (;;) {
    try {
      pg->barrier()->wait();
      cuda::current_stream(dev.index).synchronize();
    } catch (const DistError& e) {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::printf("error after %.1f s: %s\n", s, e.what());
      return 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

// A DDP step captured in a CUDA graph (as mnist_train --graph --distributed does), replayed once by
// every rank; the last rank then stops itself (SIGSTOP: alive, so NCCL reports nothing) and the
// others' next replay must end in the watchdog's timeout naming the gradient all_reduce (Note
// [replayed collectives] in dist/nccl_backend.cpp), not hang in the stream synchronisation.
// EMBER_DIST_TIMEOUT sets the group's timeout.
int graph_peer_stops(const std::vector<std::string>&) {
  ProcessGroupPtr pg = nccl_group(std::chrono::seconds(120));
  const Device dev = my_gpu();
  manual_seed(11);
  std::shared_ptr<nn::Module> model = nn::Sequential(nn::Linear(8, 16), nn::ReLU(), nn::Linear(16, 4)).ptr();
  model->to(dev);
  DistributedDataParallel ddp(model, DDPOptions().process_group(pg));
  const Tensor x = full({4, 8}, 0.5 + pg->rank(), dev), y = zeros({4, 4}, dev);
  auto step = [&] { mse_loss(ddp.forward(x), y).backward(); };
  // DDP rebuilds its buckets after the first synchronised backward (a broadcast read on the host),
  // which no capture may contain
  step();
  step();
  cuda::device_synchronize(dev.index);
  cuda::Stream st = cuda::Stream::create(dev.index);
  st.wait_stream(cuda::current_stream(dev.index));
  cuda::Graph graph;
  {
    cuda::StreamGuard guard(st);
    graph.capture_begin(st);
    step();
    graph.capture_end();
  }
  ddp.replay_graph(graph);
  st.synchronize();
  if (pg->rank() == pg->size() - 1) {
    std::printf("rank %d stops (SIGSTOP) after its first replay\n", pg->rank());
    std::fflush(stdout);
    ::raise(SIGSTOP);
    return 0;
  }
  const auto t0 = std::chrono::steady_clock::now();
  try {
    for (;;) {
      ddp.replay_graph(graph);
      st.synchronize();
    }
  } catch (const DistError& e) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("error after %.1f s: %s\n", s, e.what());
    return 1;
  }
}

}  // namespace

void add_nccl_scenarios(Scenarios& s) {
  s["nccl_collectives"] = collectives;
  s["nccl_mismatch"] = mismatch;
  s["nccl_peer_dies"] = peer_dies;
  s["nccl_graph_peer_stops"] = graph_peer_stops;
}

}  // namespace ember::testing::dist
