#include "data/dataset.h"

#include <cstring>

namespace ember::data {

Image::Image(int64_t c, int64_t h, int64_t w) : channels(c), height(h), width(w) {
  EMBER_CHECK(c >= 0 && h >= 0 && w >= 0, "Image: negative size [", c, ", ", h, ", ", w, "]");
  pixels.assign(static_cast<size_t>(c * h * w), 0);
}

Tensor Image::to_tensor() const {
  EMBER_CHECK(static_cast<int64_t>(pixels.size()) == numel(), "Image: ", pixels.size(), " pixels for shape [", channels,
              ", ", height, ", ", width, "]");
  Tensor t = empty({channels, height, width}, TensorOptions(DType::u8));
  if (!pixels.empty()) std::memcpy(t.data_ptr(), pixels.data(), pixels.size());
  return t;
}

void Dataset::check_index(int64_t i, const char* who) const {
  EMBER_CHECK(i >= 0 && i < size(), who, ": sample index ", i, " is out of range for a dataset of ", size(),
              " samples");
}

int64_t Dataset::read_into(int64_t i, std::span<uint8_t> dst) const {
  Sample s = get(i);
  EMBER_CHECK(s.image.pixels.size() == dst.size(), "Dataset::read_into: sample ", i, " has shape ", s.image.shape(),
              " (", s.image.pixels.size(), " bytes) but the batch holds ", dst.size(), " bytes per sample");
  if (!dst.empty()) std::memcpy(dst.data(), s.image.pixels.data(), dst.size());
  return s.label;
}

}  // namespace ember::data
