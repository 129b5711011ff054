#include "data/in_memory.h"

#include <cstring>

#include "data/data_loader.h"
#include "data/packed.h"
#include "kernels/functional.h"

namespace ember::data {

InMemoryDataset::InMemoryDataset(Tensor images, Tensor labels, std::vector<std::string> classes)
    : classes_(std::move(classes)) {
  EMBER_CHECK(images.defined() && labels.defined(), "InMemoryDataset: images and labels must be defined");
  EMBER_CHECK(images.dtype() == DType::u8 && (images.dim() == 4 || images.dim() == 3),
              "InMemoryDataset: images must be u8 [N, C, H, W] or [N, H, W], got ", images.describe());
  EMBER_CHECK(labels.dim() == 1 && is_integral(labels.dtype()), "InMemoryDataset: labels must be integers [N], got ",
              labels.describe());
  EMBER_CHECK(labels.size(0) == images.size(0), "InMemoryDataset: ", images.size(0), " images but ", labels.size(0),
              " labels");
  EMBER_CHECK(images.device() == labels.device(), "InMemoryDataset: images on ", images.device(), " but labels on ",
              labels.device());
  if (images.dim() == 3) images = images.unsqueeze(1);
  images_ = images.contiguous();
  labels_ = labels.dtype() == DType::i64 ? labels.contiguous() : labels.to(DType::i64).contiguous();
  sample_bytes_ = images_.size(1) * images_.size(2) * images_.size(3);
  if (!classes_.empty() && labels_.is_cpu()) {
    const int64_t* lp = labels_.data<int64_t>();
    const auto k = static_cast<int64_t>(classes_.size());
    for (int64_t i = 0; i < labels_.numel(); ++i)
      EMBER_CHECK(lp[i] >= 0 && lp[i] < k, "InMemoryDataset: label ", lp[i], " of sample ", i, " is outside the ", k,
                  " classes");
  }
}

std::optional<Shape> InMemoryDataset::sample_shape() const {
  return Shape{images_.size(1), images_.size(2), images_.size(3)};
}

Sample InMemoryDataset::get(int64_t i) const {
  check_index(i, "InMemoryDataset");
  Sample s;
  s.image = Image(images_.size(1), images_.size(2), images_.size(3));
  if (images_.is_cpu()) {
    std::memcpy(s.image.pixels.data(), static_cast<const uint8_t*>(images_.data_ptr()) + i * sample_bytes_,
                static_cast<size_t>(sample_bytes_));
    s.label = labels_.data<int64_t>()[i];
  } else {
    Tensor img = images_.select(0, i).cpu();
    std::memcpy(s.image.pixels.data(), img.data_ptr(), static_cast<size_t>(sample_bytes_));
    s.label = static_cast<int64_t>(labels_.select(0, i).item());
  }
  return s;
}

int64_t InMemoryDataset::read_into(int64_t i, std::span<uint8_t> dst) const {
  if (!images_.is_cpu()) return Dataset::read_into(i, dst);
  check_index(i, "InMemoryDataset");
  EMBER_CHECK(static_cast<int64_t>(dst.size()) == sample_bytes_, "InMemoryDataset::read_into: a sample is ",
              sample_bytes_, " bytes, the destination ", dst.size());
  std::memcpy(dst.data(), static_cast<const uint8_t*>(images_.data_ptr()) + i * sample_bytes_, dst.size());
  return labels_.data<int64_t>()[i];
}

std::shared_ptr<InMemoryDataset> InMemoryDataset::to(Device device) const {
  auto out = std::make_shared<InMemoryDataset>(images_.to(device), labels_.to(device), classes_);
  out->set_source(source_);
  return out;
}

std::shared_ptr<InMemoryDataset> InMemoryDataset::load(const std::string& packed_path) {
  PackedDataset p = read_packed(packed_path);
  auto out = std::make_shared<InMemoryDataset>(std::move(p.images), std::move(p.labels), std::move(p.classes));
  out->set_source(packed_path);
  return out;
}

void InMemoryDataset::save(const std::string& packed_path) const {
  write_packed(packed_path, images_, labels_, classes_);
}

std::shared_ptr<InMemoryDataset> InMemoryDataset::from(std::shared_ptr<const Dataset> dataset, int num_workers) {
  EMBER_CHECK(dataset != nullptr, "InMemoryDataset::from: no dataset");
  const int64_t n = dataset->size();
  EMBER_CHECK(n > 0, "InMemoryDataset::from: the dataset is empty");
  DataLoader loader(dataset, DataLoaderOptions().batch_size(256).num_workers(num_workers).pin_memory(false));
  Tensor images, labels = empty({n}, TensorOptions(DType::i64));
  int64_t at = 0;
  for (Batch& b : loader) {
    if (!images.defined()) {
      Shape s = b.images.shape();
      s[0] = n;
      images = empty(s, TensorOptions(DType::u8));
    }
    const int64_t k = b.size();
    EMBER_CHECK(b.images.shape()[1] == images.size(1) && b.images.shape()[2] == images.size(2) &&
                    b.images.shape()[3] == images.size(3),
                "InMemoryDataset::from: batch ", b.index, " has samples of shape ", b.images.shape(),
                " but earlier ones were ", images.shape(), "; every sample needs the same shape (resize them)");
    std::memcpy(static_cast<uint8_t*>(images.data_ptr()) + at * (images.numel() / n), b.images.data_ptr(),
                b.images.nbytes());
    std::memcpy(labels.data<int64_t>() + at, b.labels.data_ptr(), static_cast<size_t>(k) * sizeof(int64_t));
    at += k;
  }
  EMBER_CHECK(at == n, "InMemoryDataset::from: read ", at, " of ", n, " samples");
  return std::make_shared<InMemoryDataset>(images, labels, dataset->classes());
}

}  // namespace ember::data
