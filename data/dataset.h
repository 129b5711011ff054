// Datasets: numbered samples (a uint8 image and an integer label) that a DataLoader batches.
//
// Samples stay small on the host: pixels are uint8 and labels integers; conversion to floats and
// normalisation happen on the device after the copy (normalize_u8), where they are cheap.
//
// Note [dataset thread safety]: a DataLoader calls get() / read_into() from several worker
// threads at once, so both must be safe to call concurrently (they are const; a dataset that
// caches must lock). They throw ember::Error for a bad index or a sample that cannot be produced;
// the loader reports that with the sample index.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace ember::data {

// A decoded image: uint8 pixels, channel-major (CHW), `channels` planes of height x width.
struct Image {
  int64_t channels = 0, height = 0, width = 0;
  std::vector<uint8_t> pixels;

  Image() = default;
  // A zero-filled image.
  Image(int64_t c, int64_t h, int64_t w);

  int64_t numel() const { return channels * height * width; }
  uint8_t& at(int64_t c, int64_t y, int64_t x) { return pixels[static_cast<size_t>((c * height + y) * width + x)]; }
  uint8_t at(int64_t c, int64_t y, int64_t x) const {
    return pixels[static_cast<size_t>((c * height + y) * width + x)];
  }
  Shape shape() const { return {channels, height, width}; }
  // A u8 [C, H, W] tensor holding a copy of the pixels.
  Tensor to_tensor() const;
};

struct Sample {
  Image image;
  int64_t label = 0;
};

class Dataset {
 public:
  virtual ~Dataset() = default;

  virtual int64_t size() const = 0;
  // Sample i, 0 <= i < size() (Note [dataset thread safety]).
  virtual Sample get(int64_t i) const = 0;
  // The [C, H, W] every sample has, when they all share one (lets the loader size its buffers up
  // front and use read_into); nullopt when samples may differ.
  virtual std::optional<Shape> sample_shape() const { return std::nullopt; }
  // Writes sample i's pixels (CHW, exactly sample_shape()) into dst and returns its label. The
  // default goes through get(); in-memory datasets copy straight from their storage.
  virtual int64_t read_into(int64_t i, std::span<uint8_t> dst) const;
  // Class names, by label; empty when the dataset has none.
  virtual std::vector<std::string> classes() const { return {}; }

 protected:
  // Throws a clear error for i outside [0, size()).
  void check_index(int64_t i, const char* who) const;
};

}  // namespace ember::data
