// MNIST-format datasets (MNIST, Fashion-MNIST, KMNIST, ...): a pair of IDX files, images
// (magic 0x00000803, u8 [N, rows, cols]) and labels (magic 0x00000801, u8 [N]), raw or gzip'd.
//
// find_mnist_files looks in a directory (and its raw/, MNIST/raw/ and FashionMNIST/raw/
// subdirectories, torchvision's layout) for the standard names
//   train-images-idx3-ubyte  train-labels-idx1-ubyte  t10k-images-idx3-ubyte  t10k-labels-idx1-ubyte
// also with '.' before "idx" and/or a ".gz" suffix. Debian's dataset-fashion-mnist installs them
// gzip'd in /usr/share/datasets/fashion-mnist.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "data/in_memory.h"

namespace ember::data {

enum class Split { train, test };

struct MnistFiles {
  std::string images, labels;
  // When both NAME and NAME.gz exist, the uncompressed NAME is read and a note says so (also
  // printed on stderr, "ember: note: ...", once per file and process).
  std::vector<std::string> notes;
};

// Throws an error listing what was looked for when the files are not there.
MnistFiles find_mnist_files(const std::string& dir, Split split);
// The split as an in-memory dataset: images u8 [N, 1, rows, cols], labels i64 [N], classes "0"...
std::shared_ptr<InMemoryDataset> load_mnist(const std::string& dir, Split split = Split::train);
// A labels path holding an images file (or the reverse) is an error saying so, naming the file.
// The dataset's source() is the images path.
std::shared_ptr<InMemoryDataset> load_mnist_files(const std::string& images_path, const std::string& labels_path);

// Training and test data must have the same image size (channels, height, width): otherwise an
// error naming both sources (InMemoryDataset::source) and both sizes. Call it right after loading
// both splits, before building a model.
void check_same_image_size(const InMemoryDataset& train, const InMemoryDataset& test);

}  // namespace ember::data
