// DataLoader: batches of a Dataset in sampler order, assembled by worker threads, staged in pinned
// memory and copied to the device on a copy stream while the previous step computes.
//
//   auto train = data::load_mnist("/usr/share/datasets/fashion-mnist", data::Split::train);
//   data::DataLoader loader(train, data::DataLoaderOptions()
//                                      .batch_size(256).shuffle(true).num_workers(4)
//                                      .device(kCUDA).normalize({0.2860}, {0.3530})
//                                      .transform(std::make_shared<data::RandomCrop>(28, 28, 2)));
//   for (int epoch = 0; epoch < 10; ++epoch)
//     for (data::Batch& b : loader) {  // b.images f32 [256, 1, 28, 28] on cuda:0, b.labels i64 [256]
//       ...
//     }
//
// What a batch holds: images [B, C, H, W] and labels i64 [B] on options.device. On the host the
// images stay u8 unless normalize() or dtype() asks for floats; on a CUDA device they are always
// converted (f32 by default, /255 then (x - mean[c]) / std[c]) by the normalize_u8 op right after
// the copy, so only bytes cross the bus. `indices` are the dataset indices of the samples.
//
// Note [loader determinism]: batch b of an epoch is always assembled by worker b % num_workers
// (the consumer thread itself with 0 workers), and each worker visits its batches in order, so
// batches come out in sampler order whatever the number of workers. Augmentations draw from one
// Rng per sample, seeded with sample_seed(epoch, position): position is the sample's place in the
// epoch's sampler order. So the same seed gives the same batches (pixels included) for any
// number of workers (0, 1, 3, ...), run after run; augmentations differ across samples (a sample
// drawn twice in an epoch, by a sampler with replacement, gets two different ones) and epochs.
// The epoch number advances by one at every begin() (or set_epoch() picks it) and reaches the
// sampler through set_epoch, so shuffling changes every epoch and repeats for the same seed.
//
// Note [loader shutdown]: every wait in the loader (a worker waiting for a free slot or for a
// slot's copy to finish, the consumer waiting for a batch) wakes up when the epoch is stopped, and
// workers check for it between samples. Leaving a range-for early (break, exception) destroys the
// iterator, which stops the epoch and joins its threads; so does destroying the loader, or
// begin() while an epoch is running. A worker stuck inside Dataset::get cannot be interrupted
// (threads cannot be killed): after a timeout the loader throws at once, naming the worker, and
// joins that worker only when the next epoch starts or the loader is destroyed.
//
// Errors: an exception in a worker reaches the consumer as an ember::Error from next() / ++it,
// "DataLoader: sample 37 (batch 9, worker 1): <the cause>"; the failed batch is skipped and the
// epoch goes on (next() returns the following batch; a range-for is left by the exception).
// A timeout (options.timeout) stops the epoch; the loader is usable again with begin().
#pragma once

#include <cstdint>
#include <iterator>
#include <memory>
#include <optional>
#include <vector>

#include "core/tensor.h"
#include "data/dataset.h"
#include "data/samplers.h"
#include "data/transforms.h"

namespace ember::data {

struct DataLoaderOptions {
  int64_t batch_size_ = 1;
  bool shuffle_ = false;      // a RandomSampler(seed) instead of a SequentialSampler
  bool drop_last_ = false;    // drop the last batch when it is smaller than batch_size
  int num_workers_ = 0;       // worker threads; 0 loads in the consumer thread
  int prefetch_ = 2;          // batches in flight per worker (PyTorch's prefetch_factor)
  bool pin_memory_ = true;    // page-locked staging (CUDA device) / page-locked host batches (CPU)
  Device device_ = kCPU;      // where batches are delivered
  bool non_blocking_ = true;  // asynchronous host-to-device copies (needs pinned memory)
  double timeout_ = 0;        // seconds to wait for one batch from a worker; 0 waits forever
  uint64_t seed_ = 0;         // shuffling and augmentation
  std::vector<double> mean_, std_;
  std::optional<DType> dtype_;
  std::shared_ptr<const Transform> transform_;

  DataLoaderOptions& batch_size(int64_t b) {
    batch_size_ = b;
    return *this;
  }
  DataLoaderOptions& shuffle(bool s = true) {
    shuffle_ = s;
    return *this;
  }
  DataLoaderOptions& drop_last(bool d = true) {
    drop_last_ = d;
    return *this;
  }
  DataLoaderOptions& num_workers(int n) {
    num_workers_ = n;
    return *this;
  }
  DataLoaderOptions& prefetch(int p) {
    prefetch_ = p;
    return *this;
  }
  DataLoaderOptions& pin_memory(bool p = true) {
    pin_memory_ = p;
    return *this;
  }
  DataLoaderOptions& device(Device d) {
    device_ = d;
    return *this;
  }
  DataLoaderOptions& non_blocking(bool n = true) {
    non_blocking_ = n;
    return *this;
  }
  DataLoaderOptions& timeout(double seconds) {
    timeout_ = seconds;
    return *this;
  }
  DataLoaderOptions& seed(uint64_t s) {
    seed_ = s;
    return *this;
  }
  // Per-channel mean and std on the [0, 1] scale (one entry per channel, or one for all).
  DataLoaderOptions& normalize(std::vector<double> mean, std::vector<double> std) {
    mean_ = std::move(mean);
    std_ = std::move(std);
    return *this;
  }
  // The images' dtype: u8 keeps raw bytes (also on a device); a floating type converts.
  DataLoaderOptions& dtype(DType t) {
    dtype_ = t;
    return *this;
  }
  // Host augmentation applied to every sample by the workers.
  DataLoaderOptions& transform(std::shared_ptr<const Transform> t) {
    transform_ = std::move(t);
    return *this;
  }
};

struct Batch {
  Tensor images;                 // [B, C, H, W] on the loader's device (see the top of this file)
  Tensor labels;                 // i64 [B]
  std::vector<int64_t> indices;  // dataset index of each sample
  int64_t index = 0;             // position of the batch in its epoch

  int64_t size() const { return static_cast<int64_t>(indices.size()); }
};

struct DataLoaderStats {
  int64_t batches = 0;      // handed out since the loader was made
  double wait_seconds = 0;  // consumer time spent blocked waiting for workers
  double next_seconds = 0;  // consumer time spent inside next() (waiting included)
};

class DataLoader {
 public:
  // `sampler` (optional) replaces the shuffle option's sampler; it may visit a subset (e.g. a
  // DistributedSampler shard).
  DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options = {},
             std::shared_ptr<Sampler> sampler = nullptr);
  // Stops a running epoch and joins every thread (Note [loader shutdown]).
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // Batches per epoch: ceil(samples / batch_size), or floor with drop_last.
  int64_t size() const;
  // Samples per epoch (the sampler's length).
  int64_t num_samples() const;
  // The epoch the next begin() / start_epoch() runs; it advances by one at each of them.
  void set_epoch(int64_t epoch) { next_epoch_ = epoch; }
  int64_t next_epoch() const { return next_epoch_; }
  // Seed of the augmentation Rng of the sample at `position` (0, 1, ... in sampler order) of an
  // epoch (Note [loader determinism]).
  uint64_t sample_seed(int64_t epoch, int64_t position) const;

  // An input iterator over one epoch's batches (move-only; it must not outlive its loader).
  class Iterator {
   public:
    using iterator_concept = std::input_iterator_tag;
    using value_type = Batch;
    using difference_type = std::ptrdiff_t;

    Iterator() = default;
    Iterator(Iterator&& o) noexcept;
    Iterator& operator=(Iterator&& o) noexcept;
    Iterator(const Iterator&) = delete;
    Iterator& operator=(const Iterator&) = delete;
    // Stops the epoch if it is still running (leaving a range-for early).
    ~Iterator();

    Batch& operator*() const { return *current_; }
    Batch* operator->() const { return &*current_; }
    Iterator& operator++();
    void operator++(int) { ++*this; }
    friend bool operator==(const Iterator& it, std::default_sentinel_t) { return !it.current_.has_value(); }

   private:
    friend class DataLoader;
    Iterator(DataLoader* loader, uint64_t run_id) : loader_(loader), run_id_(run_id) {}
    void release();
    DataLoader* loader_ = nullptr;
    uint64_t run_id_ = 0;
    mutable std::optional<Batch> current_;
  };

  // Starts an epoch (stopping one still running) and returns its first batch.
  Iterator begin();
  std::default_sentinel_t end() const { return {}; }

  // The same without iterators: start_epoch(), then next() until it returns nullopt.
  void start_epoch();
  std::optional<Batch> next();
  // Abandons the running epoch, if any, and joins its threads.
  void stop_epoch();
  // Device-resident datasets: instead of the next k batches, the dataset indices they hold, copied
  // into dst[0, k * batch_size) (i64 on the loader's device, stream-ordered) for a caller that
  // gathers them itself, as next() would (a CUDA graph of k training steps). False, and nothing
  // taken, when fewer than k full batches are left in the epoch.
  bool take_indices(const Tensor& dst, int64_t k);
  // Device-resident datasets: the batch of these dataset indices (i64 on the device), gathered and
  // converted as next() makes its batches (no `indices`, `index` 0).
  Batch gather(const Tensor& ids) const;
  bool running() const { return run_ != nullptr; }

  const DataLoaderOptions& options() const { return o_; }
  const Dataset& dataset() const { return *dataset_; }
  DataLoaderStats stats() const { return stats_; }

 private:
  struct Run;
  struct Slot;
  void order_on_current_stream(Run& r);
  void worker_main(Run& run, int worker);  // the thread's function: catches everything
  void worker_loop(Run& run, int worker);
  bool fill(Run& run, Slot& slot, int64_t batch, int worker, std::string& error);
  bool wait_copy_done(Run& run, Slot& slot);
  void issue_copy(Slot& slot);
  std::optional<Batch> next_resident(Run& run);
  // Waits until `slot` holds batch `batch` (filled on this thread when there are no workers); false with `error` when
  // the batch failed, throws when the wait timed out (the epoch is then stopped).
  bool await_batch(Run& run, Slot& slot, int64_t batch, std::string& error);
  // Starts the slot's copy to the device (and those of later batches already assembled) and hands it over to the
  // compute stream.
  void hand_over_copy(Run& run, Slot& slot, int64_t batch);
  void join_retired();
  void retire_run();

  std::shared_ptr<const Dataset> dataset_;
  DataLoaderOptions o_;
  std::shared_ptr<Sampler> sampler_;
  bool convert_ = false;  // run normalize_u8 on the batches
  DType out_dtype_ = DType::u8;
  std::vector<double> mean_, std_;
  bool resident_ = false;  // the dataset lives on the loader's device: gather there
  int64_t next_epoch_ = 0;
  uint64_t next_run_id_ = 1;
  std::unique_ptr<Run> run_;
  std::vector<std::unique_ptr<Run>> retired_;  // stopped runs whose threads are still to be joined
  DataLoaderStats stats_;
};

}  // namespace ember::data
