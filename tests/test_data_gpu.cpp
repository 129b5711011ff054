// The DataLoader on a CUDA device: the pinned ring, the copy stream and the event handoff, one
// copy a batch.
// (Part of ember_gpu_tests: skipped without a device.)
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <string_view>
#include <thread>

#include "core/cuda/runtime.h"
#include "core/profiler.h"
#include "core/runtime.h"
#include "tests/data_test_util.h"
#include "tests/op_driver.h"

using namespace ember;
using namespace ember::data;
using ember::testing::within;

namespace {

// n images [c, 28, 28] where every pixel of sample i depends on (i, position): a mix-up of
// samples, a stale staging buffer or early reuse of device memory shows up as wrong pixels.
std::shared_ptr<InMemoryDataset> pattern_dataset(int64_t n, int64_t c = 1) {
  Tensor img = empty({n, c, 28, 28}, TensorOptions(DType::u8));
  auto* p = static_cast<uint8_t*>(img.data_ptr());
  const int64_t per = c * 28 * 28;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t k = 0; k < per; ++k) p[i * per + k] = static_cast<uint8_t>((i * 131 + k * 7) % 256);
  Tensor lab = empty({n}, TensorOptions(DType::i64));
  for (int64_t i = 0; i < n; ++i) lab.data<int64_t>()[i] = i % 10;
  return std::make_shared<InMemoryDataset>(img, lab);
}

// What a batch of these indices must hold (normalised on the host with the same op).
Tensor expected_images(const InMemoryDataset& ds, const std::vector<int64_t>& idx, const std::vector<double>& mean,
                       const std::vector<double>& sd) {
  Tensor ids = tensor_i64(idx, {static_cast<int64_t>(idx.size())});
  return normalize_u8(index_select(ds.images(), 0, ids), mean, sd, DType::f32);
}

void check_epoch(DataLoader& loader, const InMemoryDataset& host, const std::vector<double>& mean,
                 const std::vector<double>& sd) {
  int64_t seen = 0;
  for (Batch& b : loader) {
    REQUIRE(b.images.is_cuda());
    REQUIRE(b.labels.is_cuda());
    REQUIRE(b.images.dtype() == DType::f32);
    std::string msg = ember::testing::compare(b.images.cpu(), expected_images(host, b.indices, mean, sd), {0, 0});
    INFO("batch " << b.index);
    REQUIRE(msg.empty());
    std::vector<int64_t> labels = b.labels.to_vector<int64_t>();
    for (size_t j = 0; j < labels.size(); ++j) REQUIRE(labels[j] == b.indices[j] % 10);
    seen += b.size();
  }
  CHECK(seen == host.size());
}

}  // namespace

TEST_CASE("gpu loader: batches normalised on the device equal the host's, for 0, 1 and 4 workers", "[gpu][data]") {
  auto ds = pattern_dataset(1000, 3);
  const std::vector<double> mean{0.485, 0.456, 0.406}, sd{0.229, 0.224, 0.225};
  within(300, "gpu epochs", [&] {
    for (int w : {0, 1, 4}) {
      for (bool pin : {true, false}) {
        INFO("workers " << w << " pinned " << pin);
        DataLoader loader(
            ds, DataLoaderOptions().batch_size(64).shuffle().num_workers(w).pin_memory(pin).device(kCUDA).normalize(
                    mean, sd));
        check_epoch(loader, *ds, mean, sd);
        check_epoch(loader, *ds, mean, sd);
      }
    }
  });
}

TEST_CASE("gpu loader: device-resident dataset gathers the same batches", "[gpu][data]") {
  auto host = pattern_dataset(777);
  auto dev = host->to(kCUDA);
  REQUIRE(dev->device_resident());
  within(120, "resident", [&] {
    DataLoader a(dev, DataLoaderOptions().batch_size(100).shuffle().seed(3).device(kCUDA).normalize({0.5}, {0.25}));
    DataLoader b(host, DataLoaderOptions().batch_size(100).shuffle().seed(3).num_workers(2).device(kCUDA).normalize(
                           {0.5}, {0.25}));
    check_epoch(a, *host, {0.5}, {0.25});
    check_epoch(b, *host, {0.5}, {0.25});  // both at their second epoch (each epoch reshuffles)
    auto ia = a.begin(), ib = b.begin();
    for (; ia != a.end(); ++ia, ++ib) {
      CHECK(ia->indices == ib->indices);
      CHECK(ember::testing::compare(ia->images.cpu(), ib->images.cpu(), {0, 0}).empty());
    }
    CHECK(ib == b.end());
  });
  CHECK_THROWS_WITH(DataLoader(dev, DataLoaderOptions()), Catch::Contains("lives on cuda:0"));
  CHECK_THROWS_WITH(
      DataLoader(dev, DataLoaderOptions().device(kCUDA).transform(std::make_shared<RandomHorizontalFlip>())),
      Catch::Contains("device-resident"));
}

TEST_CASE("gpu loader: earlier batches stay intact while later ones are copied", "[gpu][data]") {
  auto ds = pattern_dataset(512);
  within(120, "held batches", [&] {
    DataLoader loader(
        ds, DataLoaderOptions().batch_size(32).num_workers(3).prefetch(1).device(kCUDA).normalize({0.1307}, {0.3081}));
    std::vector<Batch> held;
    for (Batch& b : loader) {
      held.push_back(b);
      // keep the compute stream busy so copies and refills race ahead of it
      Tensor busy = ones({1 << 22}, TensorOptions().device(kCUDA));
      for (int i = 0; i < 8; ++i) busy = busy * 1.0001;
    }
    for (const Batch& b : held) {
      CHECK(
          ember::testing::compare(b.images.cpu(), expected_images(*ds, b.indices, {0.1307}, {0.3081}), {0, 0}).empty());
      const std::vector<int64_t> labels = b.labels.to_vector<int64_t>();  // they share the batch's copy
      for (size_t j = 0; j < labels.size(); ++j) CHECK(labels[j] == b.indices[j] % 10);
    }
  });
}

namespace {

// Counts the copy ops started on a CUDA device (the loader's host-to-device copies).
struct CopyCounter final : profiler::Listener {
  std::atomic<int> copies{0};
  void on_begin(const char* name, const char*, Device device) override {
    if (device.is_cuda() && std::string_view(name) == "copy") ++copies;
  }
  void on_end(const char*, const char*, Device) override {}
};

}  // namespace

TEST_CASE("gpu loader: one copy a batch moves its images and labels", "[gpu][data]") {
  auto ds = pattern_dataset(300);  // 4 full batches and a short one
  for (bool convert : {true, false}) {
    INFO((convert ? "normalised on the device" : "uint8 to the device"));
    DataLoaderOptions o = DataLoaderOptions().batch_size(64).num_workers(2).device(kCUDA);
    if (convert) o.normalize({0.5}, {0.25});
    else o.dtype(DType::u8);
    DataLoader loader(ds, o);
    CopyCounter counter;
    profiler::set_listener(&counter);
    std::vector<Batch> batches;
    try {
      for (Batch& b : loader) batches.push_back(b);
    } catch (...) {
      profiler::set_listener(nullptr);
      throw;
    }
    profiler::set_listener(nullptr);
    REQUIRE(batches.size() == 5);
    CHECK(counter.copies == 5);
    for (const Batch& b : batches) {
      INFO("batch " << b.index);
      CHECK(b.labels.dtype() == DType::i64);
      const std::vector<int64_t> labels = b.labels.to_vector<int64_t>();
      REQUIRE(labels.size() == b.indices.size());
      for (size_t j = 0; j < labels.size(); ++j) CHECK(labels[j] == b.indices[j] % 10);
      if (!convert) {
        const Tensor want = index_select(ds->images(), 0, tensor_i64(b.indices, {b.size()}));
        CHECK(ember::testing::compare(b.images.cpu(), want, {0, 0}).empty());
      }
    }
  }
}

TEST_CASE("gpu loader: steady state has no host sync and no new allocations", "[gpu][data]") {
  auto ds = pattern_dataset(2048);
  DataLoader loader(ds,
                    DataLoaderOptions().batch_size(128).shuffle().num_workers(2).device(kCUDA).normalize({0.5}, {0.5}));
  // The consumer keeps pace with its device work, as a training step does, by polling an event
  // (not a host sync): otherwise freed batches wait on a compute stream that lags arbitrarily far
  // behind, and the caching allocator rightly takes new blocks meanwhile. The batch is dropped
  // before that wait, so the events its free recorded have completed when next() allocates the
  // following copies (dropped in ++, they may still be queued then: timing-dependent, the
  // simulator's CI run showed it).
  auto drop_and_keep_pace = [](Batch& b) {
    b = Batch();
    cuda::Event done;
    done.record();
    while (!done.query()) std::this_thread::yield();
  };
  within(120, "steady state", [&] {
    // Warm: pinned staging, device blocks, events. A slow consumer lets the workers fill every
    // slot, so next() issues the most copies ahead that it ever can: the pool then holds as many
    // blocks as any later epoch needs at once, however fast the workers run then.
    for (int epoch = 0; epoch < 2; ++epoch)
      for (Batch& b : loader) {
        drop_and_keep_pace(b);
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    cuda::device_synchronize(0);
    const auto pinned0 = cuda::pinned_stats();
    const auto dev0 = cuda::allocator_stats(0);
    const uint64_t syncs0 = runtime::host_sync_count();
    runtime::set_sync_debug(runtime::SyncDebug::error);  // any host sync in next() throws
    int64_t n = 0;
    try {
      for (Batch& b : loader) {
        n += b.size();
        drop_and_keep_pace(b);
      }
    } catch (...) {
      runtime::set_sync_debug(runtime::SyncDebug::off);
      throw;
    }
    runtime::set_sync_debug(runtime::SyncDebug::off);
    CHECK(n == 2048);
    CHECK(runtime::host_sync_count() == syncs0);
    cuda::device_synchronize(0);
    CHECK(cuda::pinned_stats().num_host_allocs == pinned0.num_host_allocs);
    CHECK(cuda::allocator_stats(0).num_device_mallocs == dev0.num_device_mallocs);
  });
}

TEST_CASE("gpu loader: early exit and destruction with copies in flight", "[gpu][data]") {
  auto ds = pattern_dataset(4096);
  within(120, "gpu early exit", [&] {
    for (int w : {0, 2, 4}) {
      auto loader = std::make_unique<DataLoader>(ds, DataLoaderOptions().batch_size(64).num_workers(w).device(kCUDA));
      int k = 0;
      for (Batch& b : *loader) {
        (void)b;
        if (++k == 3) break;
      }
      loader->start_epoch();
      REQUIRE(loader->next().has_value());
      loader.reset();  // mid-epoch, copies issued ahead still in flight
    }
    cuda::device_synchronize(0);
  });
}

// mnist_train --amp normalises straight to autocast's dtype (apps/mnist_train/trainer.cpp): on the
// device too that must be the f32 values cast, bit for bit, and the CPU's.
TEST_CASE("gpu normalize_u8: to f16 and bf16 equals f32 then a cast, and the CPU", "[gpu][data][normalize]") {
  Tensor host = empty({2, 3, 256}, TensorOptions(DType::u8));  // every byte in every channel
  for (int64_t i = 0; i < host.numel(); ++i) host.data<uint8_t>()[i] = static_cast<uint8_t>(i % 256);
  const Tensor dev = host.to(kCUDA);
  const std::vector<double> mean = {0.2860, 0.5, 0.1307}, sd = {0.3530, 0.25, 0.3081};
  for (DType low : {DType::f16, DType::bf16}) {
    INFO(dtype_name(low));
    const std::vector<float> direct = normalize_u8(dev, mean, sd, low).cpu().to(DType::f32).to_vector<float>();
    CHECK(direct == normalize_u8(dev, mean, sd, DType::f32).to(low).cpu().to(DType::f32).to_vector<float>());
    CHECK(direct == normalize_u8(host, mean, sd, low).to(DType::f32).to_vector<float>());
  }
}
