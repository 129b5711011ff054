// A whole dataset as one contiguous uint8 tensor [N, C, H, W] plus i64 labels [N].
//
// On the host it is the fastest dataset a loader worker can read (a memcpy per sample). Moved to a
// GPU with to(kCUDA) it is device-resident: uploaded once, and a DataLoader on that device then
// gathers each batch on the GPU by index (index_select on a device tensor holding the epoch's
// permutation, uploaded once per epoch): no per-step host work at all, which is the fastest path
// for MNIST-sized data (Fashion-MNIST's 60000 x 784 bytes are 47 MB of device memory).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "data/dataset.h"

namespace ember::data {

class InMemoryDataset final : public Dataset {
 public:
  // images: u8 [N, C, H, W] or [N, H, W] (one channel); labels: integer [N] (stored as i64). Both
  // on the same device. Labels must lie in [0, classes.size()) when class names are given.
  InMemoryDataset(Tensor images, Tensor labels, std::vector<std::string> classes = {});

  int64_t size() const override { return images_.size(0); }
  // On a device-resident dataset this copies one sample back to the host (slow; for inspection).
  Sample get(int64_t i) const override;
  std::optional<Shape> sample_shape() const override;
  int64_t read_into(int64_t i, std::span<uint8_t> dst) const override;
  std::vector<std::string> classes() const override { return classes_; }

  const Tensor& images() const { return images_; }  // u8 [N, C, H, W], contiguous
  const Tensor& labels() const { return labels_; }  // i64 [N]
  Device device() const { return images_.device(); }
  bool device_resident() const { return images_.is_cuda(); }

  // Where the data came from (the images file, or the packed file), for messages; "" when unknown.
  const std::string& source() const { return source_; }
  void set_source(std::string source) { source_ = std::move(source); }

  // The same data on `device` (uploaded once; shares nothing with this one).
  std::shared_ptr<InMemoryDataset> to(Device device) const;

  // Loads a packed file (data/packed.h, written by bin/ember_pack) in one read.
  static std::shared_ptr<InMemoryDataset> load(const std::string& packed_path);
  void save(const std::string& packed_path) const;
  // Reads every sample of `dataset` once (with `num_workers` loader threads; every sample must have
  // the same shape) into memory.
  static std::shared_ptr<InMemoryDataset> from(std::shared_ptr<const Dataset> dataset, int num_workers = 0);

 private:
  Tensor images_;
  Tensor labels_;
  std::vector<std::string> classes_;
  int64_t sample_bytes_ = 0;
  std::string source_;
};

}  // namespace ember::data
