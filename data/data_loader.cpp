// The DataLoader's machinery: worker threads, the staging ring, the copy stream.
//
// Note [pinned ring]: an epoch (a Run) owns S = prefetch * max(num_workers, 1) slots (2 with no
// workers); batch b always uses slot b % S, and batches in flight always lie in
// [consumed, consumed + S), so no two of them share a slot. A slot goes
//   empty --worker claims it--> filling --samples written--> ready (or failed) --next()--> empty
// and a worker may claim the slot of batch b only once batch b - S has been handed to the consumer
// (b < consumed + S). With a CUDA device:
//  - each slot keeps a page-locked staging buffer (cudaHostAlloc through the caching pinned
//    allocator) sized for a full batch, allocated once per epoch and reused for all its batches;
//  - the consumer thread (in next()) puts the copy of a ready batch on a dedicated copy stream:
//    one cudaMemcpyAsync of the staging block (images, then labels) into device memory allocated
//    on the copy stream, the normalize_u8 kernel on the same stream, then an event
//    (Slot::copied) recorded after them. It does so for the batch being handed out and for every
//    later batch already ready ("issue ahead"), so the copy of batch b+1 overlaps the compute of
//    step b;
//  - handing batch b over, the compute stream (the consumer's current stream) waits for the
//    event on the device (cudaStreamWaitEvent: the host never waits for the copy), and the batch's
//    device memory is marked as used by the compute stream (cuda::record_stream), so the caching
//    allocator does not give it back to the copy stream before the step's kernels are done with
//    it. Allocating on the copy stream and recording the use is chosen over allocating on the
//    compute stream: a block freshly freed on the compute stream may still be read by queued
//    compute kernels, and writing it from the copy stream would race with them unless the copy
//    first waited for the compute stream, which would serialise the copy behind the step;
//  - a worker refills a slot only after polling its copy event complete (Event::query between
//    short interruptible waits), so the staging bytes are never overwritten while the DMA engine
//    still reads them. The pinned allocator's own record_pinned_use events (taken by copy_) keep
//    the buffers safe after the epoch frees them.
// On the host (no device) the same ring orders the batches, but each batch is a fresh tensor
// (pinned if pin_memory and a GPU exists) that the consumer keeps: nothing is reused under it.
// With a device-resident InMemoryDataset there are no threads and no staging: next() slices the
// epoch's permutation (uploaded once per epoch) and gathers the batch on the device.
#include "data/data_loader.h"

#include <pthread.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

#include "core/autograd/node.h"
#include "core/cuda/runtime.h"
#include "data/in_memory.h"
#include "kernels/functional.h"

namespace ember::data {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

enum class SlotState : uint8_t { empty, filling, ready, failed };

// One copy stream per device for every loader: copies queue on one DMA engine anyway, and
// streams live as long as the process.
cuda::Stream copy_stream_for(int device) {
  static std::mutex mu;
  static std::vector<cuda::Stream> streams(64);
  std::lock_guard<std::mutex> lock(mu);
  EMBER_CHECK(device >= 0 && device < static_cast<int>(streams.size()), "DataLoader: bad CUDA device ", device);
  if (!streams[static_cast<size_t>(device)].valid())
    streams[static_cast<size_t>(device)] = cuda::Stream::create(device, /*high_priority=*/true);
  return streams[static_cast<size_t>(device)];
}

std::string shape_str(const Shape& s) { return str(s); }

}  // namespace

struct DataLoader::Slot {
  // Guarded by Run::mu.
  SlotState state = SlotState::empty;
  int64_t batch = -1;
  std::string error;
  // Owned by the filling thread while `filling`, by the consumer once `ready`.
  // GPU ring: one pinned u8 block, reused: the images (batch_size * sample bytes), then from byte
  // labels_at the i64 labels, so one copy moves the batch (Note [pinned ring]); host mode: unused
  Tensor staging;
  int64_t labels_at = 0;
  Tensor images, labels;  // host mode: the batch itself (fresh per batch)
  Shape shape;            // [n, C, H, W]
  std::vector<int64_t> indices;
  // GPU: written and read by the consumer only; the worker polls `copied` before refilling.
  cuda::Event copied;
  bool copy_issued = false;
  Tensor dev_images, dev_labels;
};

struct DataLoader::Run {
  uint64_t id = 0;
  int64_t epoch = 0;
  std::vector<std::vector<int64_t>> batches;
  int workers = 0;
  int slots_n = 0;
  bool gpu = false;

  std::mutex mu;
  std::condition_variable cv_ready;  // the consumer waits here for a batch
  std::condition_variable cv_space;  // workers wait here for a slot (and poll copy events)
  std::atomic<bool> stop{false};     // written under mu (waits test it), read anywhere
  int64_t consumed = 0;              // batches handed out or skipped (written by the consumer under mu)
  struct Status {
    std::atomic<int64_t> batch{-1};   // batch the worker is on (-1: none)
    std::atomic<int64_t> sample{-1};  // dataset index it is reading
    bool exited = false;              // guarded by mu
    std::string exit_error;           // guarded by mu: why the worker ended early ("" if it did not)
  };
  std::vector<Status> status;
  std::vector<Slot> slots;
  std::vector<std::thread> threads;

  // consumer-only state
  std::vector<int64_t> order;
  Tensor order_device;         // device-resident: the epoch's order on the device
  cuda::Stream upload_stream;  // ... uploaded on this stream
  cuda::Event uploaded;        // ... recorded after the upload

  Run(int nworkers, int nslots)
      : workers(nworkers), slots_n(nslots), status(static_cast<size_t>(nworkers)), slots(static_cast<size_t>(nslots)) {}

  // Batch b leaves its slot (handed out or skipped): the slot is empty again and the workers may
  // claim it for batch b + S (Note [pinned ring]).
  void release_slot(Slot& slot, int64_t b) {
    {
      std::lock_guard<std::mutex> lock(mu);
      slot.state = SlotState::empty;
      slot.copy_issued = false;
      slot.dev_images = Tensor();
      slot.dev_labels = Tensor();
      consumed = b + 1;
    }
    cv_space.notify_all();
  }

  // Why batch b, due from worker w, is not ready in `slot` (mu held): the batch failed, or the
  // worker ended before it (with the reason that ended it, when one did).
  std::string why_missing(const Slot& slot, int64_t b, int w) const {
    const std::string& why = status[static_cast<size_t>(w)].exit_error;
    if (slot.batch == b && slot.state == SlotState::failed) return slot.error;
    if (why.empty()) return str("worker ", w, " exited without producing batch ", b);
    return str("worker ", w, " stopped at batch ", b, ": ", why);
  }

  void request_stop() {
    {
      std::lock_guard<std::mutex> lock(mu);
      stop = true;
    }
    cv_space.notify_all();
    cv_ready.notify_all();
  }
  void join() {
    for (std::thread& t : threads)
      if (t.joinable()) t.join();
    threads.clear();
  }
};

// ---- construction ----

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options,
                       std::shared_ptr<Sampler> sampler)
    : dataset_(std::move(dataset)), o_(std::move(options)), sampler_(std::move(sampler)) {
  EMBER_CHECK(dataset_ != nullptr, "DataLoader: no dataset");
  EMBER_CHECK(o_.batch_size_ >= 1, "DataLoader: batch_size must be at least 1, got ", o_.batch_size_);
  EMBER_CHECK(o_.num_workers_ >= 0 && o_.num_workers_ <= 256, "DataLoader: num_workers must be in [0, 256], got ",
              o_.num_workers_);
  EMBER_CHECK(o_.prefetch_ >= 1, "DataLoader: prefetch (batches in flight per worker) must be at least 1, got ",
              o_.prefetch_);
  EMBER_CHECK(o_.timeout_ >= 0, "DataLoader: timeout must be >= 0 seconds (0 waits forever), got ", o_.timeout_);
  const Device dev = o_.device_;
  EMBER_CHECK(dev.is_cpu() || dev.is_cuda(), "DataLoader: unsupported device ", dev);
  if (dev.is_cuda())
    EMBER_CHECK(dev.index >= 0 && dev.index < cuda::device_count(), "DataLoader: device ", dev, " is not available (",
                cuda::device_count() == 0 ? cuda::unavailable_reason() : str(cuda::device_count(), " CUDA devices"),
                ")");
  if (sampler_ != nullptr) {
    EMBER_CHECK(!o_.shuffle_, "DataLoader: shuffle and a sampler are mutually exclusive (shuffle inside the sampler)");
  } else if (o_.shuffle_) {
    sampler_ = std::make_shared<RandomSampler>(dataset_->size(), o_.seed_);
  } else {
    sampler_ = std::make_shared<SequentialSampler>(dataset_->size());
  }

  // Conversion: floats by default on a device or when normalisation is asked for.
  EMBER_CHECK(o_.mean_.size() == o_.std_.size(), "DataLoader: normalize needs as many means as stds (", o_.mean_.size(),
              " vs ", o_.std_.size(), ")");
  if (o_.dtype_) {
    EMBER_CHECK(*o_.dtype_ == DType::u8 || is_floating(*o_.dtype_), "DataLoader: images can be u8 or floating, not ",
                *o_.dtype_);
    EMBER_CHECK(*o_.dtype_ != DType::u8 || o_.mean_.empty(), "DataLoader: normalize() needs a floating dtype, not u8");
    convert_ = *o_.dtype_ != DType::u8;
  } else {
    convert_ = dev.is_cuda() || !o_.mean_.empty();
  }
  out_dtype_ = convert_ ? o_.dtype_.value_or(DType::f32) : DType::u8;
  mean_ = o_.mean_.empty() ? std::vector<double>{0.0} : o_.mean_;
  std_ = o_.std_.empty() ? std::vector<double>{1.0} : o_.std_;
  if (auto s = dataset_->sample_shape(); s && convert_ && mean_.size() > 1)
    EMBER_CHECK(s->size() == 3 && (*s)[0] == static_cast<int64_t>(mean_.size()), "DataLoader: normalize has ",
                mean_.size(), " channels but samples are ", shape_str(*s));

  if (auto* mem = dynamic_cast<const InMemoryDataset*>(dataset_.get()); mem != nullptr && mem->device_resident()) {
    EMBER_CHECK(mem->device() == dev, "DataLoader: the dataset lives on ", mem->device(),
                " but the loader delivers to ", dev, "; move the dataset with to(", dev, ") or set device(",
                mem->device(), ")");
    EMBER_CHECK(o_.transform_ == nullptr, "DataLoader: host transforms cannot run on a device-resident dataset (",
                o_.transform_ ? o_.transform_->describe() : "", "); keep the dataset on the host to augment it");
    resident_ = true;
  }
}

DataLoader::~DataLoader() {
  try {
    stop_epoch();
    join_retired();
  } catch (...) {
    // a destructor must not throw; the threads are joined by now
  }
}

int64_t DataLoader::num_samples() const { return sampler_->size(); }

int64_t DataLoader::size() const {
  const int64_t n = num_samples(), b = o_.batch_size_;
  return o_.drop_last_ ? n / b : (n + b - 1) / b;
}

uint64_t DataLoader::sample_seed(int64_t epoch, int64_t position) const {
  // the tag keeps these streams apart from any other use of (seed, epoch)
  return mix_seed(mix_seed(o_.seed_, 0x617567ULL /* "aug" */), static_cast<uint64_t>(epoch),
                  static_cast<uint64_t>(position));
}

// ---- epochs ----

void DataLoader::join_retired() {
  for (auto& r : retired_) r->join();
  retired_.clear();
}

void DataLoader::retire_run() {
  if (!run_) return;
  run_->request_stop();
  retired_.push_back(std::move(run_));
}

void DataLoader::stop_epoch() {
  if (!run_) return;
  run_->request_stop();
  run_->join();
  run_.reset();
}

void DataLoader::start_epoch() {
  stop_epoch();
  join_retired();
  const int64_t epoch = next_epoch_++;
  sampler_->set_epoch(epoch);
  std::vector<int64_t> order = sampler_->indices();
  const int64_t n = static_cast<int64_t>(order.size()), b = o_.batch_size_;
  const int64_t nb = o_.drop_last_ ? n / b : (n + b - 1) / b;
  for (int64_t i : order)
    EMBER_CHECK(i >= 0 && i < dataset_->size(), "DataLoader: the sampler produced index ", i, " for a dataset of ",
                dataset_->size(), " samples");

  const int workers = resident_ ? 0 : o_.num_workers_;
  const int nslots = resident_ ? 0 : (workers == 0 ? 2 : o_.prefetch_ * workers);
  auto run = std::make_unique<Run>(workers, nslots);
  run->id = next_run_id_++;
  run->epoch = epoch;
  run->gpu = o_.device_.is_cuda() && !resident_;
  run->batches.resize(static_cast<size_t>(nb));
  for (int64_t k = 0; k < nb; ++k) {
    auto first = order.begin() + k * b;
    run->batches[static_cast<size_t>(k)].assign(first, first + std::min(b, n - k * b));
  }
  if (resident_) {
    // The epoch's order goes to the device once; each step slices it (no per-step upload).
    order.resize(static_cast<size_t>(nb * b < n ? nb * b : n));
    Tensor host = empty({static_cast<int64_t>(order.size())}, TensorOptions(DType::i64).pinned_memory(true));
    if (!order.empty()) std::memcpy(host.data_ptr(), order.data(), order.size() * sizeof(int64_t));
    run->order_device = host.to(o_.device_, /*non_blocking=*/true);
    run->upload_stream = cuda::current_stream(o_.device_.index);
    run->uploaded.record(run->upload_stream);
  }
  run->order = std::move(order);
  run_ = std::move(run);
  Run& r = *run_;
  try {
    for (int w = 0; w < workers; ++w) r.threads.emplace_back([this, &r, w] { worker_main(r, w); });
  } catch (...) {
    stop_epoch();
    throw;
  }
}

// ---- workers ----

bool DataLoader::wait_copy_done(Run& run, Slot& slot) {
  if (!run.gpu || !slot.copied.recorded()) return true;
  while (!slot.copied.query()) {
    std::unique_lock<std::mutex> lock(run.mu);
    if (run.stop) return false;
    run.cv_space.wait_for(lock, std::chrono::microseconds(200));
  }
  return true;
}

// Assembles batch `b` into `slot`. Returns false when the epoch was stopped or the batch failed
// (then `error` says why, naming the sample).
bool DataLoader::fill(Run& run, Slot& slot, int64_t b, int worker, std::string& error) {
  const std::vector<int64_t>& idx = run.batches[static_cast<size_t>(b)];
  const auto n = static_cast<int64_t>(idx.size());
  const Transform* transform = o_.transform_.get();
  const std::optional<Shape> fixed = transform == nullptr ? dataset_->sample_shape() : std::nullopt;
  Run::Status* status =
      worker < static_cast<int>(run.status.size()) ? &run.status[static_cast<size_t>(worker)] : nullptr;
  int64_t current = -1;
  try {
    uint8_t* dst = nullptr;
    int64_t* labels = nullptr;
    int64_t sample_bytes = 0;
    // Sizes the batch once the first sample's shape is known.
    auto prepare = [&](const Shape& s) {
      EMBER_CHECK(s.size() == 3, "samples must be [C, H, W] images, got ", shape_str(s));
      sample_bytes = s[0] * s[1] * s[2];
      slot.shape = Shape{n, s[0], s[1], s[2]};
      if (run.gpu) {
        slot.labels_at = (o_.batch_size_ * sample_bytes + 7) / 8 * 8;  // i64-aligned after a full batch
        const int64_t bytes = slot.labels_at + 8 * o_.batch_size_;
        if (!slot.staging.defined() || slot.staging.numel() < bytes)
          slot.staging = empty({bytes}, TensorOptions(DType::u8).pinned_memory(o_.pin_memory_));
        dst = static_cast<uint8_t*>(slot.staging.data_ptr());
        labels = reinterpret_cast<int64_t*>(dst + slot.labels_at);
      } else {
        slot.images = empty(slot.shape, TensorOptions(DType::u8).pinned_memory(o_.pin_memory_));
        slot.labels = empty({n}, TensorOptions(DType::i64).pinned_memory(o_.pin_memory_));
        dst = static_cast<uint8_t*>(slot.images.data_ptr());
        labels = slot.labels.data<int64_t>();
      }
    };
    if (fixed) prepare(*fixed);
    Shape first_shape;
    for (int64_t k = 0; k < n; ++k) {
      if (run.stop.load(std::memory_order_relaxed)) return false;
      current = idx[static_cast<size_t>(k)];
      if (status != nullptr) status->sample.store(current, std::memory_order_relaxed);
      if (fixed) {
        labels[k] = dataset_->read_into(current, {dst + k * sample_bytes, static_cast<size_t>(sample_bytes)});
        continue;
      }
      Sample s = dataset_->get(current);
      if (transform != nullptr) {
        // one stream per sample position, whoever assembles the batch (Note [loader determinism])
        Rng rng(sample_seed(run.epoch, b * o_.batch_size_ + k));
        transform->apply(s.image, rng);
      }
      EMBER_CHECK(static_cast<int64_t>(s.image.pixels.size()) == s.image.numel(), "the image holds ",
                  s.image.pixels.size(), " bytes for shape ", shape_str(s.image.shape()));
      if (k == 0) {
        first_shape = s.image.shape();
        prepare(first_shape);
      } else {
        EMBER_CHECK(
            s.image.shape() == first_shape, "the image is ", shape_str(s.image.shape()),
            " but the batch's first sample (", idx[0], ") is ", shape_str(first_shape),
            "; samples of a batch need one size (resize them: ImageFolderOptions::resize or a Resize transform)");
      }
      if (sample_bytes > 0)
        std::memcpy(dst + k * sample_bytes, s.image.pixels.data(), static_cast<size_t>(sample_bytes));
      labels[k] = s.label;
    }
    current = -1;
    slot.indices = idx;
    if (!run.gpu && convert_) {
      // On the host the conversion runs here, in parallel across workers.
      autograd::NoGradGuard no_grad;
      slot.images = normalize_u8(slot.images, mean_, std_, out_dtype_);
    }
    return true;
  } catch (const std::exception& e) {
    error = current >= 0 ? str("sample ", current, " (batch ", b, ", worker ", worker, "): ", e.what())
                         : str("batch ", b, " (worker ", worker, "): ", e.what());
  } catch (...) {
    error = str("sample ", current, " (batch ", b, ", worker ", worker, "): an exception that is not a std::exception");
  }
  return false;
}

// A worker thread: nothing leaves it as an exception (Note [no abort] in core/error.h). What
// assembling a batch throws fails that batch (fill); what escapes even that ends the worker with
// its reason in `exit_error`, and next() reports it on the consumer's thread.
void DataLoader::worker_main(Run& run, int w) {
  Run::Status& status = run.status[static_cast<size_t>(w)];
  std::string why;
  try {
    worker_loop(run, w);
  } catch (const std::exception& e) {
    why = e.what();
  } catch (...) {
    why = "an exception that is not a std::exception";
  }
  {
    std::lock_guard<std::mutex> lock(run.mu);
    status.exited = true;
    status.exit_error = std::move(why);
  }
  run.cv_ready.notify_all();
}

void DataLoader::worker_loop(Run& run, int w) {
  {
    std::string name = "ember-data-" + std::to_string(w);
    pthread_setname_np(pthread_self(), name.c_str());
  }
  Run::Status& status = run.status[static_cast<size_t>(w)];
  const auto nb = static_cast<int64_t>(run.batches.size());
  for (int64_t b = w; b < nb; b += run.workers) {
    Slot& slot = run.slots[static_cast<size_t>(b % run.slots_n)];
    {
      std::unique_lock<std::mutex> lock(run.mu);
      run.cv_space.wait(lock, [&] { return run.stop || b < run.consumed + run.slots_n; });
      if (run.stop) break;
      slot.state = SlotState::filling;
      slot.batch = b;
    }
    status.batch.store(b);
    std::string error;
    bool ok = false;
    try {
      // The slot's previous batch may still be on its way to the device.
      if (!wait_copy_done(run, slot)) break;
      ok = fill(run, slot, b, w, error);
    } catch (const std::exception& e) {
      error = str("batch ", b, " (worker ", w, "): ", e.what());
    } catch (...) {
      error = str("batch ", b, " (worker ", w, "): an exception that is not a std::exception");
    }
    status.batch.store(-1);
    status.sample.store(-1);
    bool stopped = false;
    {
      std::lock_guard<std::mutex> lock(run.mu);
      stopped = run.stop;
      slot.state = ok ? SlotState::ready : SlotState::failed;
      slot.error = std::move(error);
    }
    run.cv_ready.notify_all();
    if (stopped) break;
  }
}

// ---- the consumer ----

void DataLoader::issue_copy(Slot& slot) {
  const Device dev = o_.device_;
  cuda::Stream copy = copy_stream_for(dev.index);
  cuda::StreamGuard guard(copy);  // device memory below is allocated on, and written by, the copy stream
  const Shape& s = slot.shape;
  const int64_t n = s[0];
  // the staging block's layout on the device too: one copy of the images and the labels (with a
  // short batch, the unused tail of the images' part goes along)
  const int64_t bytes = slot.labels_at + 8 * n;
  Tensor packed = empty({bytes}, TensorOptions(DType::u8).device(dev));
  copy_(packed, make_view(slot.staging, {bytes}, {1}, 0), o_.non_blocking_);
  Tensor images = make_view(packed, s, {s[1] * s[2] * s[3], s[2] * s[3], s[3], 1}, 0);
  Tensor labels = make_view(packed, DType::i64, {n}, {1}, slot.labels_at / 8);
  if (convert_) {
    autograd::NoGradGuard no_grad;
    images = normalize_u8(images, mean_, std_, out_dtype_);  // on the copy stream, after the copy
  }
  slot.copied.record(copy);
  slot.dev_images = std::move(images);
  slot.dev_labels = std::move(labels);
  slot.copy_issued = true;
}

std::optional<Batch> DataLoader::next_resident(Run& r) {
  const int64_t b = r.consumed;
  if (b >= static_cast<int64_t>(r.batches.size())) {
    run_.reset();
    return std::nullopt;
  }
  const int64_t start = b * o_.batch_size_;
  const auto n = static_cast<int64_t>(r.batches[static_cast<size_t>(b)].size());
  order_on_current_stream(r);
  Batch out = gather(r.order_device.slice(0, start, start + n));
  out.indices = std::move(r.batches[static_cast<size_t>(b)]);
  out.index = b;
  r.consumed = b + 1;
  return out;
}

// Iterating on another stream than the one the epoch's order was uploaded on: that stream waits
// for the upload, and the order's memory is marked as used there.
void DataLoader::order_on_current_stream(Run& r) {
  const cuda::Stream stream = cuda::current_stream(o_.device_.index);
  if (stream == r.upload_stream) return;
  r.uploaded.block(stream);
  cuda::record_stream(r.order_device.storage()->data(), stream);
}

Batch DataLoader::gather(const Tensor& ids) const {
  EMBER_CHECK(resident_, "DataLoader::gather: needs a device-resident dataset");
  const auto* mem = static_cast<const InMemoryDataset*>(dataset_.get());
  autograd::NoGradGuard no_grad;
  Batch out;
  out.images = index_select(mem->images(), 0, ids);
  out.labels = index_select(mem->labels(), 0, ids);
  if (convert_) out.images = normalize_u8(out.images, mean_, std_, out_dtype_);
  return out;
}

bool DataLoader::take_indices(const Tensor& dst, int64_t k) {
  EMBER_CHECK(resident_ && run_ != nullptr,
              "DataLoader::take_indices: needs a device-resident dataset and a running epoch (start_epoch())");
  Run& r = *run_;
  const int64_t b = r.consumed, bs = o_.batch_size_;
  if (k < 1 || b + k > static_cast<int64_t>(r.batches.size())) return false;
  for (int64_t j = b; j < b + k; ++j)
    if (static_cast<int64_t>(r.batches[static_cast<size_t>(j)].size()) != bs) return false;
  EMBER_CHECK(dst.dtype() == DType::i64 && dst.device() == o_.device_ && dst.is_contiguous() && dst.numel() >= k * bs,
              "DataLoader::take_indices: dst must be a contiguous i64 tensor of at least ", k * bs, " on ", o_.device_,
              ", got ", dst.describe());
  autograd::NoGradGuard no_grad;
  order_on_current_stream(r);
  Tensor window = dst.slice(0, 0, k * bs);
  copy_(window, r.order_device.slice(0, b * bs, (b + k) * bs), /*non_blocking=*/true);
  r.consumed = b + k;
  stats_.batches += k;
  return true;
}

bool DataLoader::await_batch(Run& r, Slot& slot, int64_t b, std::string& error) {
  if (r.workers == 0) {
    slot.batch = b;
    return wait_copy_done(r, slot) && fill(r, slot, b, 0, error);
  }
  const auto t_wait = Clock::now();
  std::unique_lock<std::mutex> lock(r.mu);
  const int w = static_cast<int>(b % r.workers);
  auto arrived = [&] {
    return (slot.batch == b && (slot.state == SlotState::ready || slot.state == SlotState::failed)) ||
           r.status[static_cast<size_t>(w)].exited;
  };
  bool ok = true;
  if (o_.timeout_ > 0) {
    ok = r.cv_ready.wait_for(lock, std::chrono::duration<double>(o_.timeout_), arrived);
  } else {
    r.cv_ready.wait(lock, arrived);
  }
  stats_.wait_seconds += seconds_since(t_wait);
  if (!ok) {
    const int64_t on = r.status[static_cast<size_t>(w)].batch.load();
    const int64_t sample = r.status[static_cast<size_t>(w)].sample.load();
    std::string where = on == b   ? str("it is still on that batch, reading sample ", sample)
                        : on >= 0 ? str("it is on batch ", on)
                                  : std::string("it has not started that batch");
    lock.unlock();
    retire_run();  // its threads are joined by the next epoch or the loader's destructor
    EMBER_FAIL("DataLoader: timed out after ", o_.timeout_, " s waiting for batch ", b, " of epoch ", r.epoch,
               " from worker ", w, " (", where, "); the epoch is stopped, begin() starts a new one");
  }
  if (slot.batch != b || slot.state != SlotState::ready) {
    error = r.why_missing(slot, b, w);
    return false;
  }
  return true;
}

void DataLoader::hand_over_copy(Run& r, Slot& slot, int64_t b) {
  if (!slot.copy_issued) issue_copy(slot);
  // Issue ahead: later batches already assembled start their copies now, to overlap this step.
  const auto nb = static_cast<int64_t>(r.batches.size());
  for (int64_t j = b + 1; j < std::min(nb, b + r.slots_n); ++j) {
    Slot& other = r.slots[static_cast<size_t>(j % r.slots_n)];
    bool go = false;
    {
      std::lock_guard<std::mutex> lock(r.mu);
      go = other.batch == j && other.state == SlotState::ready && !other.copy_issued;
    }
    if (go) issue_copy(other);
  }
  // Hand over to the compute stream: it waits for the copy on the device, and the memory is
  // marked as in use there.
  cuda::Stream compute = cuda::current_stream(o_.device_.index);
  slot.copied.block(compute);
  cuda::record_stream(slot.dev_images.storage()->data(), compute);
  cuda::record_stream(slot.dev_labels.storage()->data(), compute);
}

std::optional<Batch> DataLoader::next() {
  EMBER_CHECK(run_ != nullptr,
              "DataLoader::next: no epoch is running (it ended, was stopped, or timed out); "
              "call start_epoch() or iterate with begin()");
  const auto t_enter = Clock::now();
  Run& r = *run_;
  struct Account {
    DataLoaderStats& s;
    Clock::time_point t;
    ~Account() { s.next_seconds += seconds_since(t); }
  } account{stats_, t_enter};
  if (resident_) {
    auto out = next_resident(r);
    if (out) ++stats_.batches;
    return out;
  }
  const int64_t b = r.consumed;
  if (b >= static_cast<int64_t>(r.batches.size())) {
    stop_epoch();  // every worker has finished its batches: this joins at once
    return std::nullopt;
  }
  Slot& slot = r.slots[static_cast<size_t>(b % r.slots_n)];
  auto skip_failed = [&](std::string error) {
    r.release_slot(slot, b);
    EMBER_FAIL("DataLoader: ", error);
  };
  if (std::string error; !await_batch(r, slot, b, error)) skip_failed(std::move(error));

  Batch out;
  if (r.gpu) {
    try {
      hand_over_copy(r, slot, b);
    } catch (const std::exception& e) {
      skip_failed(str("batch ", b, ": copying to ", o_.device_, " failed: ", e.what()));
    }
    out.images = std::move(slot.dev_images);
    out.labels = std::move(slot.dev_labels);
  } else {
    out.images = std::move(slot.images);
    out.labels = std::move(slot.labels);
  }
  out.indices = std::move(slot.indices);
  out.index = b;
  r.release_slot(slot, b);
  ++stats_.batches;
  return out;
}

// ---- iteration ----

DataLoader::Iterator DataLoader::begin() {
  start_epoch();
  Iterator it(this, run_->id);
  it.current_ = next();
  return it;
}

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  EMBER_CHECK(loader_ != nullptr && current_.has_value(), "DataLoader iterator: ++ past the end");
  current_.reset();
  EMBER_CHECK(loader_->run_ != nullptr && loader_->run_->id == run_id_,
              "DataLoader iterator: its epoch was stopped or replaced by a newer begin()");
  current_ = loader_->next();
  return *this;
}

void DataLoader::Iterator::release() {
  if (loader_ != nullptr && loader_->run_ != nullptr && loader_->run_->id == run_id_) loader_->stop_epoch();
  loader_ = nullptr;
  current_.reset();
}

DataLoader::Iterator::Iterator(Iterator&& o) noexcept
    : loader_(o.loader_), run_id_(o.run_id_), current_(std::move(o.current_)) {
  o.loader_ = nullptr;
  o.current_.reset();
}

DataLoader::Iterator& DataLoader::Iterator::operator=(Iterator&& o) noexcept {
  if (this != &o) {
    try {
      release();
    } catch (...) {
    }
    loader_ = o.loader_;
    run_id_ = o.run_id_;
    current_ = std::move(o.current_);
    o.loader_ = nullptr;
    o.current_.reset();
  }
  return *this;
}

DataLoader::Iterator::~Iterator() {
  try {
    release();
  } catch (...) {
  }
}

}  // namespace ember::data
