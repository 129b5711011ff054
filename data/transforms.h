// Host-side augmentation on uint8 images (CHW), run by the DataLoader's workers on each sample.
//
// Every random transform draws from the Rng it is handed: the loader gives each sample its own,
// seeded from (loader seed, epoch, the sample's position in the epoch), so augmentations differ
// across samples and epochs and repeat exactly for the same seed, whatever the number of workers
// (Note [loader determinism] in data/data_loader.h). Transforms hold no mutable state and may be shared by all workers.
// Conversion to float and normalisation are not transforms: they run on the device after the copy
// (DataLoaderOptions::normalize).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/rng.h"

namespace ember::data {

class Transform {
 public:
  virtual ~Transform() = default;
  // Transforms the image in place (it may change its size).
  virtual void apply(Image& image, Rng& rng) const = 0;
  virtual std::string describe() const = 0;
};

// Applies each transform in turn.
class Compose final : public Transform {
 public:
  explicit Compose(std::vector<std::shared_ptr<const Transform>> transforms);
  void apply(Image& image, Rng& rng) const override;
  std::string describe() const override;

 private:
  std::vector<std::shared_ptr<const Transform>> transforms_;
};

// Pads every side by `padding` pixels of `fill`, then crops a height x width window at a uniformly
// random position (torchvision's RandomCrop(size, padding)).
class RandomCrop final : public Transform {
 public:
  RandomCrop(int64_t height, int64_t width, int64_t padding = 0, uint8_t fill = 0);
  void apply(Image& image, Rng& rng) const override;
  std::string describe() const override;

 private:
  int64_t height_, width_, padding_;
  uint8_t fill_;
};

// Mirrors the image left-right with probability p.
class RandomHorizontalFlip final : public Transform {
 public:
  explicit RandomHorizontalFlip(double p = 0.5);
  void apply(Image& image, Rng& rng) const override;
  std::string describe() const override;

 private:
  double p_;
};

// A small random affine map about the image centre, keeping the size (torchvision's RandomAffine
// without shear): rotation by an angle uniform in [-degrees, degrees], scaling by a factor uniform
// in [scale_min, scale_max], translation by whole pixels uniform in [-translate * size,
// translate * size] per axis. Output pixels are sampled from the input by the inverse map
// (nearest neighbour, like torchvision's default, or bilinear); outside the input they are `fill`.
struct RandomAffineOptions {
  double degrees_ = 0;
  double translate_ = 0;  // fraction of width / height
  double scale_min_ = 1, scale_max_ = 1;
  bool bilinear_ = false;
  uint8_t fill_ = 0;

  RandomAffineOptions& degrees(double d) {
    degrees_ = d;
    return *this;
  }
  RandomAffineOptions& translate(double t) {
    translate_ = t;
    return *this;
  }
  RandomAffineOptions& scale(double lo, double hi) {
    scale_min_ = lo;
    scale_max_ = hi;
    return *this;
  }
  RandomAffineOptions& bilinear(bool b = true) {
    bilinear_ = b;
    return *this;
  }
  RandomAffineOptions& fill(uint8_t f) {
    fill_ = f;
    return *this;
  }
};

class RandomAffine final : public Transform {
 public:
  explicit RandomAffine(RandomAffineOptions options);
  void apply(Image& image, Rng& rng) const override;
  std::string describe() const override;

 private:
  RandomAffineOptions o_;
};

// Resamples to a fixed size (data/image_decode.h resize_image).
class Resize final : public Transform {
 public:
  Resize(int64_t height, int64_t width);
  void apply(Image& image, Rng& rng) const override;
  std::string describe() const override;

 private:
  int64_t height_, width_;
};

}  // namespace ember::data
