// bench_loader: how fast the data pipeline feeds a training loop.
//
//   1. loader throughput on the host: samples/s versus num_workers (0, 1, 2, 4, 8) on
//      Fashion-MNIST train (60000 x 28 x 28) with augmentation (RandomCrop(28, padding 2) +
//      RandomHorizontalFlip, and with RandomAffine added), plus the no-augmentation memcpy path;
//   2. with a GPU: host-to-device bandwidth for 1-64 MB buffers, ember's copy from pinned and from
//      pageable memory beside a plain cudaMemcpy from pinned memory (the peak this machine reaches),
//      as GB/s and % of that peak;
//   3. with a GPU: an MNIST-sized training loop fed by the loader (prefetching workers, pinned
//      ring, copy stream) and by the device-resident dataset; CUDA events on the compute stream
//      measure how long the GPU sat between steps waiting for data, as % of the loop's time.
//
//   bench_loader [--data DIR] [--epochs N] [--batch B] [--max-workers W] [--quick]
// Without the dataset it uses synthetic data of the same shape and says so.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "core/autograd/node.h"
#include "core/cuda/runtime.h"
#include "data/data.h"
#include "kernels/functional.h"
#include "kernels/registry.h"

#if EMBER_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

using namespace ember;
using namespace ember::data;

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

struct Args {
  std::string data = "/usr/share/datasets/fashion-mnist";
  int epochs = 1;
  int64_t batch = 256;
  int max_workers = 8;
  bool quick = false;
};

std::shared_ptr<InMemoryDataset> dataset(const Args& a, std::string& what) {
  if (std::filesystem::exists(a.data)) {
    try {
      auto ds = load_mnist(a.data, Split::train);
      what = "Fashion-MNIST train from " + a.data;
      if (!a.quick) return ds;
      Tensor img = ds->images().slice(0, 0, 10000), lab = ds->labels().slice(0, 0, 10000);
      what += " (first 10000, --quick)";
      return std::make_shared<InMemoryDataset>(img, lab, ds->classes());
    } catch (const std::exception& e) {
      std::printf("note: cannot load %s (%s); using synthetic data\n", a.data.c_str(), e.what());
    }
  }
  const int64_t n = a.quick ? 10000 : 60000;
  Tensor img = empty({n, 1, 28, 28}, TensorOptions(DType::u8));
  auto* p = static_cast<uint8_t*>(img.data_ptr());
  for (int64_t i = 0; i < img.numel(); ++i) p[i] = static_cast<uint8_t>((i * 2654435761u) >> 24);
  Tensor lab = empty({n}, TensorOptions(DType::i64));
  for (int64_t i = 0; i < n; ++i) lab.data<int64_t>()[i] = i % 10;
  what = "synthetic " + std::to_string(n) + " x 1 x 28 x 28 (dataset not found at " + a.data + ")";
  return std::make_shared<InMemoryDataset>(img, lab);
}

// ---- 1. host throughput ----

void host_throughput(const Args& a, const std::shared_ptr<InMemoryDataset>& ds) {
  auto light = std::make_shared<Compose>(std::vector<std::shared_ptr<const Transform>>{
      std::make_shared<RandomCrop>(28, 28, 2), std::make_shared<RandomHorizontalFlip>()});
  auto heavy = std::make_shared<Compose>(std::vector<std::shared_ptr<const Transform>>{
      std::make_shared<RandomCrop>(28, 28, 2), std::make_shared<RandomHorizontalFlip>(),
      std::make_shared<RandomAffine>(RandomAffineOptions().degrees(10).translate(0.1).scale(0.9, 1.1))});
  struct Config {
    const char* name;
    std::shared_ptr<const Transform> t;
  };
  const Config configs[] = {{"none (memcpy)", nullptr}, {"crop+flip", light}, {"crop+flip+affine", heavy}};
  std::printf(
      "\n== 1. loader throughput on the host: %lld samples/epoch, batch %lld, %d epoch(s), %u hardware threads ==\n",
      static_cast<long long>(ds->size()), static_cast<long long>(a.batch), a.epochs,
      std::thread::hardware_concurrency());
  std::printf("%-18s %8s %12s %10s %10s %12s\n", "augmentation", "workers", "samples/s", "ms/epoch", "batches",
              "wait %");
  for (const Config& c : configs) {
    for (int w : {0, 1, 2, 4, 8}) {
      if (w > a.max_workers) continue;
      DataLoader loader(ds, DataLoaderOptions().batch_size(a.batch).shuffle().num_workers(w).transform(c.t).seed(1));
      // one warm-up pass over a few batches (page in the dataset, start the allocator)
      {
        int k = 0;
        for (Batch& b : loader) {
          (void)b;
          if (++k == 4) break;
        }
      }
      DataLoaderStats before = loader.stats();
      const auto t0 = Clock::now();
      int64_t samples = 0, batches = 0;
      uint64_t checksum = 0;
      for (int e = 0; e < a.epochs; ++e)
        for (Batch& b : loader) {
          samples += b.size();
          ++batches;
          checksum += static_cast<const uint8_t*>(b.images.data_ptr())[0];  // touch the batch
        }
      const double s = since(t0);
      const double wait = loader.stats().wait_seconds - before.wait_seconds;
      std::printf("%-18s %8d %12.0f %10.1f %10lld %11.1f%%\n", c.name, w, static_cast<double>(samples) / s,
                  1e3 * s / a.epochs, static_cast<long long>(batches), 100.0 * wait / s);
      (void)checksum;
    }
  }
  std::printf(
      "(wait %%: share of the time the consuming thread was blocked waiting for workers; with 0 workers it "
      "loads the batches itself)\n");
}

#if EMBER_WITH_CUDA

#define CK(x)                                                                                       \
  do {                                                                                              \
    cudaError_t e_ = (x);                                                                           \
    if (e_ != cudaSuccess) {                                                                        \
      std::fprintf(stderr, "CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); \
      std::exit(1);                                                                                 \
    }                                                                                               \
  } while (0)

// ---- 2. host-to-device bandwidth ----

void bandwidth(const Args& a) {
  std::printf("\n== 2. host-to-device bandwidth (GB/s = 1e9 B/s; mean over repeated copies, timed with events) ==\n");
  const int reps = a.quick ? 5 : 20;
  std::printf("%8s %16s %16s %8s %16s %8s\n", "MB", "cudaMemcpy pinned", "ember pinned", "% peak", "ember pageable",
              "% peak");
  cudaStream_t s = static_cast<cudaStream_t>(cuda::current_stream(0).handle());
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  double peak = 0;
  struct Row {
    int mb;
    double plain, pinned, pageable;
  };
  std::vector<Row> rows;
  for (int mb : {1, 2, 4, 8, 16, 32, 64}) {
    const size_t bytes = static_cast<size_t>(mb) << 20;
    void* hp = nullptr;
    void* dp = nullptr;
    CK(cudaHostAlloc(&hp, bytes, cudaHostAllocDefault));
    CK(cudaMalloc(&dp, bytes));
    std::memset(hp, 1, bytes);
    // the reference: plain synchronous cudaMemcpy from pinned memory (it runs on the legacy
    // default stream, so the events go there too; ember's streams do not synchronise with it)
    CK(cudaMemcpy(dp, hp, bytes, cudaMemcpyHostToDevice));
    CK(cudaEventRecord(e0, nullptr));
    for (int r = 0; r < reps; ++r) CK(cudaMemcpy(dp, hp, bytes, cudaMemcpyHostToDevice));
    CK(cudaEventRecord(e1, nullptr));
    CK(cudaEventSynchronize(e1));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    Row row{mb, bytes * reps / (ms * 1e-3) / 1e9, 0, 0};
    CK(cudaFreeHost(hp));
    CK(cudaFree(dp));
    // ember: copy_ from a pinned tensor (asynchronous on the current stream) and from pageable memory
    for (bool pinned : {true, false}) {
      Tensor host = empty({static_cast<int64_t>(bytes)}, TensorOptions(DType::u8).pinned_memory(pinned));
      std::memset(host.data_ptr(), 1, bytes);
      Tensor dev = empty({static_cast<int64_t>(bytes)}, TensorOptions(DType::u8).device(kCUDA));
      copy_(dev, host, true);
      CK(cudaStreamSynchronize(s));
      CK(cudaEventRecord(e0, s));
      for (int r = 0; r < reps; ++r) copy_(dev, host, true);
      CK(cudaEventRecord(e1, s));
      CK(cudaEventSynchronize(e1));
      CK(cudaEventElapsedTime(&ms, e0, e1));
      (pinned ? row.pinned : row.pageable) = bytes * reps / (ms * 1e-3) / 1e9;
    }
    peak = std::max(peak, row.plain);
    rows.push_back(row);
  }
  for (const Row& r : rows)
    std::printf("%8d %16.2f %16.2f %7.1f%% %16.2f %7.1f%%\n", r.mb, r.plain, r.pinned, 100 * r.pinned / peak,
                r.pageable, 100 * r.pageable / peak);
  std::printf("peak (best plain cudaMemcpy from pinned memory): %.2f GB/s; target: ember pinned >= 90%% of it\n", peak);
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
}

// ---- 3. GPU data wait in an MNIST training loop ----

bool has_cuda_variant(const char* op) {
  const OpInfo* info = find_op(op);
  if (info == nullptr) return false;
  for (const Variant& v : info->variants)
    if (v.device == DeviceType::cuda) return true;
  return false;
}

struct Model {
  bool mlp = false;
  Tensor w1, w2, scratch;
};

// One training-like step on the compute stream. With CUDA matmul: a 784-512-10 MLP, forward,
// backward and SGD. Without: an elementwise stand-in of similar length (says so in the output).
void step(Model& m, const Batch& b) {
  if (m.mlp) {
    Tensor x = b.images.flatten(1);
    Tensor h = relu(matmul(x, m.w1));
    Tensor y = matmul(h, m.w2);
    Tensor loss = sum(mul(y, y)) * (1.0 / static_cast<double>(b.size()));
    loss.backward();
    autograd::NoGradGuard ng;
    m.w1.add_(m.w1.grad(), -1e-3);
    m.w2.add_(m.w2.grad(), -1e-3);
    m.w1.reset_grad();
    m.w2.reset_grad();
    return;
  }
  autograd::NoGradGuard ng;
  Tensor x = sum(b.images) * 1e-9;  // reads the batch (a 0-dim tensor, broadcast below)
  for (int i = 0; i < 24; ++i) m.scratch = relu(m.scratch * 0.999 + x);
}

void gpu_loop(const Args& a, const std::shared_ptr<InMemoryDataset>& ds) {
  Model m;
  m.mlp = has_cuda_variant("matmul");
  if (m.mlp) {
    m.w1 = (randn({784, 512}) * 0.03).cuda().detach().requires_grad_(true);
    m.w2 = (randn({512, 10}) * 0.03).cuda().detach().requires_grad_(true);
  } else {
    m.scratch = zeros({256, 4096}, TensorOptions().device(kCUDA));
  }
  std::printf("\n== 3. GPU time spent waiting for data in an MNIST training loop (batch %lld) ==\n",
              static_cast<long long>(a.batch));
  std::printf("step: %s\n", m.mlp
                                ? "784-512-10 MLP forward + backward + SGD"
                                : "elementwise stand-in (no CUDA matmul in this build): 24 x relu(x*a+b) on 256x4096");
  std::printf("%-34s %10s %12s %12s %10s\n", "feeding", "steps", "loop ms", "GPU wait ms", "wait %");
  auto resident = ds->to(kCUDA);
  struct Feed {
    const char* name;
    std::shared_ptr<const Dataset> data;
    int workers;
    bool pin;
  };
  const Feed feeds[] = {{"loader, 4 workers, pinned ring", ds, 4, true},
                        {"loader, 2 workers, pinned ring", ds, 2, true},
                        {"loader, 0 workers, pinned ring", ds, 0, true},
                        {"loader, 4 workers, pageable", ds, 4, false},
                        {"device-resident gather", resident, 0, true}};
  for (const Feed& f : feeds) {
    DataLoader loader(f.data, DataLoaderOptions()
                                  .batch_size(a.batch)
                                  .shuffle()
                                  .num_workers(f.workers)
                                  .pin_memory(f.pin)
                                  .device(kCUDA)
                                  .normalize({0.2860}, {0.3530}));
    // warm-up epoch fragment: allocator, kernels, pinned cache
    {
      int k = 0;
      for (Batch& b : loader) {
        step(m, b);
        if (++k == 8) break;
      }
    }
    cuda::device_synchronize(0);
    cuda::Stream compute = cuda::current_stream(0);
    std::vector<cuda::Event> ready, done;  // per step: data ready on the compute stream / step finished
    const auto t0 = Clock::now();
    for (Batch& b : loader) {
      ready.emplace_back(true);
      ready.back().record(compute);  // after next() queued the wait for the copy
      step(m, b);
      done.emplace_back(true);
      done.back().record(compute);
    }
    cuda::device_synchronize(0);
    const double host_s = since(t0);
    double wait_ms = 0;
    for (size_t k = 1; k < ready.size(); ++k) wait_ms += done[k - 1].elapsed_ms(ready[k]);
    const double loop_ms = ready.front().elapsed_ms(done.back());
    std::printf("%-34s %10zu %12.2f %12.3f %9.2f%%   (host %.1f ms)\n", f.name, ready.size(), loop_ms, wait_ms,
                100.0 * wait_ms / loop_ms, 1e3 * host_s);
  }
  std::printf(
      "(GPU wait: compute-stream time between the end of step k and the point where step k+1's data was "
      "ready, summed; target < 1%% of the loop)\n");
}

#endif

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "missing value after %s\n", s.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (s == "--data") a.data = val();
    else if (s == "--epochs") a.epochs = std::max(1, std::atoi(val().c_str()));
    else if (s == "--batch") a.batch = std::max<int64_t>(1, std::atoll(val().c_str()));
    else if (s == "--max-workers") a.max_workers = std::atoi(val().c_str());
    else if (s == "--quick") a.quick = true;
    else {
      std::fprintf(stderr, "usage: bench_loader [--data DIR] [--epochs N] [--batch B] [--max-workers W] [--quick]\n");
      return 2;
    }
  }
  std::string what;
  auto ds = dataset(a, what);
  std::printf("bench_loader: %s\n", what.c_str());
  host_throughput(a, ds);
#if EMBER_WITH_CUDA
  if (cuda::device_count() > 0) {
    auto p = cuda::properties(0);
    std::printf("\nGPU: %s (sm_%d%d)\n", p.name.c_str(), p.major, p.minor);
    bandwidth(a);
    gpu_loop(a, ds);
    return 0;
  }
#endif
  std::printf("\nGPU sections skipped: %s\n", cuda::device_count() == 0 ? cuda::unavailable_reason().c_str() : "");
  return 0;
}
