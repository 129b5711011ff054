// The DataLoader on the host: lengths, order determinism for any number of workers, worker errors,
// early exits and destruction (under a watchdog: a hang aborts the run), timeouts, per-worker RNG
// reproducibility, host-side normalisation and the in-memory path.
#include <catch2/catch.hpp>

#include <chrono>
#include <map>
#include <numeric>
#include <set>

#include "tests/data_test_util.h"

using namespace ember;
using namespace ember::data;
using namespace ember::testing;

namespace {

// Every batch of one epoch: (dataset indices, first pixel of each sample, labels).
struct Seen {
  std::vector<std::vector<int64_t>> indices;
  std::vector<std::vector<uint8_t>> pixels;
  std::vector<std::vector<int64_t>> labels;
  bool operator==(const Seen& o) const = default;
};

Seen epoch_of(DataLoader& loader) {
  Seen s;
  int64_t expect = 0;
  for (Batch& b : loader) {
    REQUIRE(b.index == expect++);
    REQUIRE(b.images.shape()[0] == b.size());
    REQUIRE(b.labels.shape() == Shape{b.size()});
    s.indices.push_back(b.indices);
    s.pixels.push_back(b.images.to_vector<uint8_t>());
    s.labels.push_back(b.labels.to_vector<int64_t>());
  }
  return s;
}

// A transform that writes the worker's next random byte into pixel (0, 0, 0), so a batch shows
// which random stream augmented it.
class StampTransform final : public Transform {
 public:
  void apply(Image& image, Rng& rng) const override { image.pixels[0] = static_cast<uint8_t>(rng.next_u32() >> 24); }
  std::string describe() const override { return "Stamp"; }
};

}  // namespace

TEST_CASE("loader: number of batches", "[data][loader]") {
  auto ds = std::make_shared<ProbeDataset>(100);
  CHECK(DataLoader(ds, DataLoaderOptions().batch_size(2)).size() == 50);
  CHECK(DataLoader(ds, DataLoaderOptions().batch_size(3)).size() == 34);
  CHECK(DataLoader(ds, DataLoaderOptions().batch_size(3).drop_last()).size() == 33);
  CHECK(DataLoader(ds, DataLoaderOptions().batch_size(100)).size() == 1);
  CHECK(DataLoader(ds, DataLoaderOptions().batch_size(101).drop_last()).size() == 0);
  for (bool drop : {false, true}) {
    DataLoader loader(ds, DataLoaderOptions().batch_size(3).drop_last(drop).num_workers(2));
    within(60, "count batches", [&] {
      int64_t n = 0, samples = 0;
      for (Batch& b : loader) {
        ++n;
        samples += b.size();
      }
      CHECK(n == (drop ? 33 : 34));
      CHECK(samples == (drop ? 99 : 100));
    });
  }
  // an empty epoch ends at once
  DataLoader none(ds, DataLoaderOptions().batch_size(101).drop_last().num_workers(3));
  within(30, "empty epoch", [&] { CHECK(none.begin() == none.end()); });
}

TEST_CASE("loader: batches come out in sampler order for 0, 1 and 4 workers", "[data][loader]") {
  auto ds = std::make_shared<ProbeDataset>(103);
  within(120, "order determinism", [&] {
    std::map<int, Seen> seq, shuf;
    for (int w : {0, 1, 4}) {
      DataLoader a(ds, DataLoaderOptions().batch_size(8).num_workers(w).prefetch(w == 4 ? 1 : 2));
      seq[w] = epoch_of(a);
      DataLoader b(ds, DataLoaderOptions().batch_size(8).num_workers(w).shuffle().seed(7));
      shuf[w] = epoch_of(b);
    }
    // sequential: 0..102 in order; the pixels and labels belong to the indices
    std::vector<int64_t> flat;
    for (size_t k = 0; k < seq[0].indices.size(); ++k) {
      for (size_t j = 0; j < seq[0].indices[k].size(); ++j) {
        int64_t i = seq[0].indices[k][j];
        flat.push_back(i);
        CHECK(seq[0].pixels[k][j * 6] == i % 251);
        CHECK(seq[0].labels[k][j] == i % 10);
      }
    }
    std::vector<int64_t> want(103);
    std::iota(want.begin(), want.end(), int64_t{0});
    CHECK(flat == want);
    CHECK(seq[1] == seq[0]);
    CHECK(seq[4] == seq[0]);
    // shuffled: the same permutation whatever the workers, and it is the RandomSampler's
    CHECK(shuf[1] == shuf[0]);
    CHECK(shuf[4] == shuf[0]);
    std::vector<int64_t> sflat;
    for (auto& v : shuf[0].indices) sflat.insert(sflat.end(), v.begin(), v.end());
    CHECK(sflat == random_permutation(103, 7, 0));
  });
}

TEST_CASE("loader: each epoch reshuffles, reproducibly", "[data][loader]") {
  auto ds = std::make_shared<ProbeDataset>(40);
  within(60, "epochs", [&] {
    DataLoader a(ds, DataLoaderOptions().batch_size(5).shuffle().seed(3).num_workers(2));
    Seen e0 = epoch_of(a), e1 = epoch_of(a);
    CHECK(e0.indices != e1.indices);
    CHECK(a.next_epoch() == 2);
    DataLoader b(ds, DataLoaderOptions().batch_size(5).shuffle().seed(3).num_workers(3));
    CHECK(epoch_of(b) == e0);
    b.set_epoch(1);
    CHECK(epoch_of(b) == e1);
    DataLoader c(ds, DataLoaderOptions().batch_size(5).shuffle().seed(4));
    CHECK(epoch_of(c).indices != e0.indices);
  });
}

TEST_CASE("loader: a distributed sampler drives the loader", "[data][loader]") {
  auto ds = std::make_shared<ProbeDataset>(10);
  within(60, "distributed", [&] {
    std::multiset<int64_t> all;
    for (int rank = 0; rank < 3; ++rank) {
      auto sampler =
          std::make_shared<DistributedSampler>(10, DistributedSamplerOptions().world_size(3).rank(rank).seed(1));
      DataLoader loader(ds, DataLoaderOptions().batch_size(2).num_workers(2), sampler);
      CHECK(loader.size() == 2);  // 4 samples per rank
      for (Batch& b : loader) all.insert(b.indices.begin(), b.indices.end());
    }
    CHECK(all.size() == 12);
    for (int64_t i = 0; i < 10; ++i) CHECK(all.count(i) >= 1);
  });
  CHECK_THAT(
      error_of([&] { DataLoader bad(ds, DataLoaderOptions().shuffle(), std::make_shared<SequentialSampler>(10)); }),
      Catch::Contains("mutually exclusive"));
}

TEST_CASE("loader: a worker's exception names the sample and the cause, the epoch goes on", "[data][loader]") {
  for (int workers : {0, 1, 3}) {
    INFO("workers " << workers);
    auto ds = std::make_shared<ProbeDataset>(40);
    ds->throw_at(17);
    DataLoader loader(ds, DataLoaderOptions().batch_size(4).num_workers(workers));
    within(60, "worker exception", [&] {
      // range-for: the exception leaves the loop, the iterator stops the epoch
      std::string msg = error_of([&] {
        for (Batch& b : loader) (void)b;
      });
      CHECK_THAT(msg,
                 Catch::Contains("DataLoader: sample 17 (batch 4, worker ") && Catch::Contains("probe failure at 17"));
      CHECK(!loader.running());
      // next(): the failed batch is skipped and the epoch continues
      loader.start_epoch();
      std::vector<int64_t> got;
      int errors = 0;
      for (;;) {
        try {
          auto b = loader.next();
          if (!b) break;
          got.push_back(b->index);
        } catch (const Error& e) {
          ++errors;
          CHECK_THAT(e.what(), Catch::Contains("sample 17"));
        }
      }
      CHECK(errors == 1);
      CHECK(got == std::vector<int64_t>{0, 1, 2, 3, 5, 6, 7, 8, 9});
      // fixed: the loader is fully usable again
      ds->throw_at(-1);
      CHECK(epoch_of(loader).indices.size() == 10);
    });
  }
}

TEST_CASE("loader: leaving an epoch early or destroying the loader joins every thread", "[data][loader]") {
  auto ds = std::make_shared<ProbeDataset>(2000, 8, 8);
  within(120, "early exit", [&] {
    for (int workers : {0, 1, 4}) {
      DataLoader loader(ds, DataLoaderOptions().batch_size(4).num_workers(workers).prefetch(3));
      for (int rep = 0; rep < 3; ++rep) {
        int n = 0;
        for (Batch& b : loader) {
          (void)b;
          if (++n == 5) break;
        }
        CHECK(!loader.running());
      }
      // restarted epochs start over
      CHECK(loader.begin()->index == 0);
      CHECK(!loader.running());  // the temporary iterator stopped it
    }
    // destroyed in the middle of an epoch, with workers blocked on a full ring
    for (int workers : {1, 2, 8}) {
      auto loader = std::make_unique<DataLoader>(ds, DataLoaderOptions().batch_size(2).num_workers(workers));
      loader->start_epoch();
      REQUIRE(loader->next().has_value());
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // let the ring fill up
      loader.reset();
    }
    // begin() while an epoch runs replaces it
    DataLoader loader(ds, DataLoaderOptions().batch_size(2).num_workers(2));
    auto it = loader.begin();
    ++it;
    auto it2 = loader.begin();
    CHECK(it2->index == 0);
    CHECK_THAT(error_of([&] { ++it; }), Catch::Contains("replaced by a newer begin()"));
  });
  // the workers did not read the whole dataset: they stopped when asked
  CHECK(ds->gets() < 2000 * 8);
}

TEST_CASE("loader: a timeout names the stalled worker and the loader recovers", "[data][loader]") {
  auto ds = std::make_shared<ProbeDataset>(64);
  ds->stall_at(21);  // batch 5 (batch size 4), worker 5 % 3 = 2
  within(60, "timeout", [&] {
    DataLoader loader(ds, DataLoaderOptions().batch_size(4).num_workers(3).timeout(0.3));
    const auto t0 = std::chrono::steady_clock::now();
    std::string msg = error_of([&] {
      for (Batch& b : loader) (void)b;
    });
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    CHECK_THAT(msg, Catch::Contains("timed out after 0.3 s waiting for batch 5") && Catch::Contains("from worker 2") &&
                        Catch::Contains("reading sample 21"));
    CHECK(waited < 10);  // thrown promptly, not after the stalled worker returned
    CHECK(!loader.running());
    ds->release();
    ds->stall_at(-1);
    CHECK(epoch_of(loader).indices.size() == 16);  // the next epoch joins the stalled worker first
  });
  // destroying a loader whose worker is still stalled waits for it, then joins cleanly
  auto ds2 = std::make_shared<ProbeDataset>(16);
  ds2->stall_at(3);
  within(60, "timeout then destroy", [&] {
    auto loader = std::make_unique<DataLoader>(ds2, DataLoaderOptions().batch_size(2).num_workers(2).timeout(0.2));
    CHECK_THAT(error_of([&] {
                 for (Batch& b : *loader) (void)b;
               }),
               Catch::Contains("from worker 1"));
    std::thread releaser([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      ds2->release();
    });
    loader.reset();
    releaser.join();
  });
}

TEST_CASE("loader: per-sample augmentation streams are independent and reproducible", "[data][loader]") {
  auto ds = std::make_shared<ProbeDataset>(48);
  auto stamp = std::make_shared<StampTransform>();
  within(60, "rng", [&] {
    auto run = [&](int workers, uint64_t seed) {
      DataLoader l(ds, DataLoaderOptions().batch_size(4).num_workers(workers).seed(seed).transform(stamp));
      return epoch_of(l);
    };
    Seen a = run(3, 11), b = run(3, 11);
    CHECK(a == b);                         // same seed, same workers: identical, pixels included
    CHECK(run(3, 12).pixels != a.pixels);  // another seed: other augmentations
    // the stamp of each sample is exactly its own Rng stream (keyed by epoch and position)
    DataLoader l(ds, DataLoaderOptions().batch_size(4).num_workers(3).seed(11).transform(stamp));
    for (size_t k = 0; k < a.pixels.size(); ++k)
      for (size_t j = 0; j < 4; ++j)
        CHECK(a.pixels[k][j * 6] ==
              static_cast<uint8_t>(Rng(l.sample_seed(0, static_cast<int64_t>(4 * k + j))).next_u32() >> 24));
    // samples draw different numbers: the stamps of the first batches differ
    auto stamps = [&](size_t k) {
      std::vector<uint8_t> v;
      for (size_t j = 0; j < 4; ++j) v.push_back(a.pixels[k][j * 6]);
      return v;
    };
    CHECK(stamps(0) != stamps(1));
    CHECK(stamps(1) != stamps(2));
    CHECK(stamps(0) != stamps(2));
    // the worker count does not matter
    CHECK(run(0, 11) == a);
    CHECK(run(1, 11) == a);
    // the next epoch draws again
    DataLoader e(ds, DataLoaderOptions().batch_size(4).num_workers(2).seed(11).transform(stamp));
    CHECK(epoch_of(e).pixels != epoch_of(e).pixels);
  });
}

TEST_CASE("loader: host batches, normalisation on the host, pinned flag", "[data][loader]") {
  auto ds = std::make_shared<ProbeDataset>(10, 2, 2);
  within(60, "host batches", [&] {
    DataLoader raw(ds, DataLoaderOptions().batch_size(4).num_workers(1));
    Batch b = *raw.begin();
    CHECK(b.images.dtype() == DType::u8);
    CHECK(b.images.shape() == Shape{4, 1, 2, 2});
    CHECK(b.images.is_cpu());
    CHECK(b.labels.dtype() == DType::i64);
    // pinned only exists with a GPU; without one the request falls back to plain memory
    CHECK(b.images.is_pinned() == (cuda::device_count() > 0));

    DataLoader norm(ds, DataLoaderOptions().batch_size(4).num_workers(2).normalize({0.5}, {0.25}).pin_memory(false));
    Batch n = *norm.begin();
    CHECK(n.images.dtype() == DType::f32);
    CHECK(!n.images.is_pinned());
    std::vector<float> v = n.images.to_vector<float>();
    for (int j = 0; j < 4; ++j) CHECK(v[static_cast<size_t>(j * 4)] == Approx((j / 255.0 - 0.5) / 0.25));
    DataLoader f16(ds, DataLoaderOptions().batch_size(4).dtype(DType::f16));
    CHECK(f16.begin()->images.dtype() == DType::f16);
  });
  CHECK_THAT(error_of([&] { DataLoader(ds, DataLoaderOptions().dtype(DType::u8).normalize({0.5}, {0.5})); }),
             Catch::Contains("needs a floating dtype"));
  CHECK_THAT(error_of([&] {
               DataLoader(ds, DataLoaderOptions().normalize({0.5, 0.4, 0.3}, {0.2, 0.2, 0.2})).begin();
             }),
             Catch::Contains("3 mean/std entries"));
  CHECK_THAT(error_of([&] { DataLoader(ds, DataLoaderOptions().batch_size(0)); }), Catch::Contains("batch_size"));
  if (cuda::device_count() == 0)
    CHECK_THAT(error_of([&] { DataLoader(ds, DataLoaderOptions().device(kCUDA)); }), Catch::Contains("not available"));
}

TEST_CASE("loader: samples of different sizes in one batch are an error naming both", "[data][loader]") {
  class Ragged final : public Dataset {
   public:
    int64_t size() const override { return 6; }
    Sample get(int64_t i) const override {
      Sample s;
      s.image = Image(1, 2, i == 4 ? 3 : 2);
      return s;
    }
  };
  auto ds = std::make_shared<Ragged>();
  within(30, "ragged", [&] {
    DataLoader loader(ds, DataLoaderOptions().batch_size(3).num_workers(2));
    std::string msg = error_of([&] {
      for (Batch& b : loader) (void)b;
    });
    CHECK_THAT(msg, Catch::Contains("sample 4 (batch 1") && Catch::Contains("[1, 2, 3]") &&
                        Catch::Contains("first sample (3) is [1, 2, 2]"));
  });
}

TEST_CASE("loader: in-memory datasets, from() and host gathering", "[data][loader]") {
  Tensor images = arange(5 * 2 * 3 * 3, TensorOptions(DType::u8)).view({5, 2, 3, 3});
  Tensor labels = tensor_i64({4, 3, 2, 1, 0}, {5});
  auto mem = std::make_shared<InMemoryDataset>(images, labels, std::vector<std::string>{"a", "b", "c", "d", "e"});
  CHECK(mem->size() == 5);
  CHECK(*mem->sample_shape() == Shape{2, 3, 3});
  Sample s = mem->get(2);
  CHECK(s.label == 2);
  CHECK(s.image.at(1, 0, 0) == 2 * 18 + 9);
  within(30, "in memory", [&] {
    DataLoader loader(mem, DataLoaderOptions().batch_size(2).num_workers(2));
    Seen e = epoch_of(loader);
    CHECK(e.labels == std::vector<std::vector<int64_t>>{{4, 3}, {2, 1}, {0}});
    CHECK(e.pixels[1][0] == 36);
    // materialise a dataset through the loader
    auto probe = std::make_shared<ProbeDataset>(7, 2, 2);
    auto copy = InMemoryDataset::from(probe, 2);
    CHECK(copy->size() == 7);
    CHECK(copy->get(6).image.pixels == probe->get(6).image.pixels);
    CHECK(copy->labels().to_vector<int64_t>() == std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6});
  });
  CHECK_THAT(error_of([&] {
               InMemoryDataset(images, tensor_i64({0, 1}, {2}));
             }),
             Catch::Contains("5 images but 2 labels"));
  CHECK_THAT(error_of([&] { InMemoryDataset(images, labels, {"x"}); }), Catch::Contains("outside the 1 classes"));
  CHECK_THAT(error_of([&] { mem->get(5); }), Catch::Contains("sample index 5 is out of range"));
}

TEST_CASE("loader: Fashion-MNIST with augmentation, all workers agree", "[data][loader][mnist]") {
  if (!testing::has_fashion_mnist()) {
    WARN("SKIPPED: " << testing::kFashionMnist << " is missing (apt-get install dataset-fashion-mnist)");
    return;
  }
  auto test = load_mnist(testing::kFashionMnist, Split::test);
  auto aug = std::make_shared<Compose>(std::vector<std::shared_ptr<const Transform>>{
      std::make_shared<RandomCrop>(28, 28, 2), std::make_shared<RandomHorizontalFlip>(),
      std::make_shared<RandomAffine>(RandomAffineOptions().degrees(10).translate(0.1).scale(0.9, 1.1))});
  within(120, "fashion mnist", [&] {
    auto epoch_sum = [&](int workers) {
      DataLoader l(test, DataLoaderOptions().batch_size(500).num_workers(workers).transform(aug).seed(5).shuffle());
      double sum = 0;
      int64_t n = 0;
      for (Batch& b : l) {
        CHECK(b.images.shape() == Shape{b.size(), 1, 28, 28});
        const auto* p = static_cast<const uint8_t*>(b.images.data_ptr());
        for (int64_t i = 0; i < b.images.numel(); ++i) sum += p[i];
        n += b.size();
      }
      CHECK(n == 10000);
      return sum;
    };
    double s1 = epoch_sum(1);
    CHECK(epoch_sum(1) == s1);
    // with augmentation the pixels depend on the worker count (streams per worker), not the sum's scale
    CHECK(epoch_sum(2) / s1 == Approx(1.0).margin(0.02));
  });
}
